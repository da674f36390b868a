// The official OpenAI Node SDK against a running `linfer serve` (started by openai_api_test.py):
// models, chat and completions (streaming and not), include_usage, n, logprobs, seed determinism,
// stop, reasoning_content, errors and their status codes, API-key isolation, sessions (a
// multi-turn chat whose usage shows the reuse), a busy session (409), structured output
// (response_format json_schema / json_object), the Responses API (create, the stream helper,
// previous_response_id, retrieve, input items, delete, input token counts), forced tool calls
// (chat and Responses, with their stream helpers), and an aborted stream.
//
// usage: node sdk_test.mjs NODE_MODULES BASE_URL API_KEY OTHER_API_KEY MODEL
import { createRequire } from 'node:module';

const [modules, base, key, otherKey, model] = process.argv.slice(2);
const require = createRequire(`${modules}/`);
const sdk = require('openai');
const OpenAI = sdk.default ?? sdk;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 120000 });
const other = new OpenAI({ baseURL: `${base}/v1`, apiKey: otherKey, maxRetries: 0 });

let passed = 0;
let failed = 0;
function check(cond, what) {
  if (cond) {
    passed += 1;
  } else {
    failed += 1;
    console.log(`FAIL: ${what}`);
  }
  return cond;
}

async function expectError(promise, status, what, param) {
  try {
    await promise;
    check(false, `${what}: expected HTTP ${status}, got success`);
  } catch (e) {
    check(e instanceof OpenAI.APIError && e.status === status,
      `${what}: HTTP ${status} (got ${e.status}: ${e.message})`);
    if (param !== undefined) check(e.param === param, `${what}: param ${param} (got ${e.param})`);
    check(typeof e.error?.message === 'string', `${what}: OpenAI-shaped error body`);
  }
}

const plain = { chat_template_kwargs: { enable_thinking: false } };
const question = [{ role: 'user', content: 'Who art thou?' }];

async function testModels() {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  check(ids.length === 1 && ids[0] === model, `models.list -> [${model}] (got ${ids})`);
  const m = await client.models.retrieve(model);
  check(m.id === model && m.object === 'model', 'models.retrieve');
}

async function collectChat(body, options) {
  const stream = await client.chat.completions.create({ ...body, stream: true }, options);
  const out = { content: {}, reasoning: {}, chunks: 0, roles: 0, finish: {}, usage: null };
  for await (const c of stream) {
    if (c.choices.length === 0) {
      out.usage = c.usage;
      continue;
    }
    out.chunks += 1;
    for (const ch of c.choices) {
      const d = ch.delta;
      if (d.role) out.roles += 1;
      out.content[ch.index] = (out.content[ch.index] ?? '') + (d.content ?? '');
      out.reasoning[ch.index] = (out.reasoning[ch.index] ?? '') + (d.reasoning_content ?? '');
      if (ch.finish_reason) out.finish[ch.index] = ch.finish_reason;
    }
  }
  return out;
}

async function testChat() {
  const body = { model, messages: question, max_tokens: 12, temperature: 0, ...plain };
  const r = await client.chat.completions.create(body);
  const msg = r.choices[0].message;
  check(r.object === 'chat.completion' && msg.role === 'assistant', 'chat: object and role');
  check(typeof msg.content === 'string' && msg.content.length > 0, 'chat: content');
  check(r.usage.completion_tokens === 12 && r.choices[0].finish_reason === 'length',
    `chat: 12 tokens, finish length (${r.usage.completion_tokens}, ${r.choices[0].finish_reason})`);
  check(r.usage.total_tokens === r.usage.prompt_tokens + 12, 'chat: total_tokens');
  check(r.usage.prompt_tokens_details.cached_tokens === 0, 'chat: nothing cached');
  const s = await collectChat({ ...body, stream_options: { include_usage: true } });
  check(s.content[0] === msg.content, `chat stream text = non-stream text (${s.content[0]})`);
  check(s.usage?.completion_tokens === 12, 'chat stream: include_usage chunk');
  check(s.usage?.prompt_tokens_details?.cached_tokens === 0, 'chat stream: cached_tokens');
  // The finish rides on the last token's chunk (vLLM's framing).
  check(s.chunks === 12, `chat stream: one chunk per token (${s.chunks})`);
  check(s.roles === 1 && s.finish[0] === 'length', 'chat stream: one role, finish length');
  const noUsage = await collectChat(body);
  check(noUsage.usage === null, 'chat stream without include_usage has no usage chunk');
}

async function testReasoning() {
  // The Qwen3.5 template opens <think> for the model: with thinking on, the reply is reasoning.
  const body = { model, messages: question, max_tokens: 8, temperature: 0 };
  const r = await client.chat.completions.create(body);
  const msg = r.choices[0].message;
  check(typeof msg.reasoning_content === 'string' && msg.reasoning_content.length > 0,
    `reasoning_content (${JSON.stringify(msg)})`);
  check(msg.content === null, `no content before </think>: null (${JSON.stringify(msg.content)})`);
  const s = await collectChat(body);
  check(s.reasoning[0] === msg.reasoning_content, 'streamed delta.reasoning_content');
}

async function testCompletions() {
  const body = { model, prompt: 'In the beginning', max_tokens: 8, temperature: 0 };
  const r = await client.completions.create(body);
  check(r.object === 'text_completion' && r.choices[0].text.length > 0, 'completions: text');
  check(r.usage.completion_tokens === 8, 'completions: usage');
  const stream = await client.completions.create({
    ...body, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let chunks = 0;
  let usage = null;
  for await (const c of stream) {
    if (c.choices.length === 0) usage = c.usage;
    else {
      chunks += 1;
      text += c.choices[0].text;
    }
  }
  check(text === r.choices[0].text, 'completions stream text = non-stream text');
  check(chunks === 8 && usage?.completion_tokens === 8, `completions stream chunks (${chunks})`);
  const echo = await client.completions.create({ ...body, echo: true });
  check(echo.choices[0].text === body.prompt + r.choices[0].text, 'completions: echo');
  const ids = await client.completions.create({ model, prompt: [1, 2, 3], max_tokens: 4 });
  check(ids.usage.prompt_tokens === 3 && ids.usage.completion_tokens === 4, 'token-id prompt');
  const batch = await client.completions.create({ model, prompt: ['a', 'b'], max_tokens: 2 });
  check(batch.choices.length === 2 && batch.choices[1].index === 1, 'two prompts, two choices');
}

async function testN() {
  const body = { model, messages: question, max_tokens: 10, temperature: 1, seed: 7, n: 3, ...plain };
  const a = await client.chat.completions.create(body);
  const b = await client.chat.completions.create(body);
  check(a.choices.length === 3 && a.choices.map((c) => c.index).join() === '0,1,2', 'n=3 choices');
  check(a.usage.completion_tokens === 30, `n=3 completion tokens (${a.usage.completion_tokens})`);
  const one = await client.chat.completions.create({ ...body, n: 1 });
  check(a.usage.prompt_tokens === one.usage.prompt_tokens, 'n=3: the prompt counted once');
  check(a.choices[0].message.content === one.choices[0].message.content,
    'n=3: choice 0 samples as n=1 with the same seed');
  check(JSON.stringify(a.choices) === JSON.stringify(b.choices), 'n=3 with a seed is reproducible');
  const texts = new Set(a.choices.map((c) => c.message.content));
  check(texts.size > 1, 'n=3 choices differ');
  const s = await collectChat({ ...body, stream_options: { include_usage: true } });
  check([0, 1, 2].every((i) => s.content[i] === a.choices[i].message.content),
    'n=3 stream = non-stream');
  check(s.roles === 3 && s.usage.completion_tokens === 30, 'n=3 stream: roles and usage');
  const c = await client.completions.create({ model, prompt: 'And', max_tokens: 3, n: 2, seed: 1 });
  check(c.choices.length === 2, 'completions n=2');
}

async function testLogprobs() {
  const r = await client.chat.completions.create({
    model, messages: question, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2,
    ...plain });
  const lp = r.choices[0].logprobs?.content ?? [];
  check(lp.length === 6, `chat logprobs: one per token (${lp.length})`);
  check(lp.every((t) => t.top_logprobs.length === 2 && t.logprob <= 0), 'chat top_logprobs');
  check(lp.map((t) => t.token).join('') === r.choices[0].message.content, 'logprob tokens = text');
  check(lp.every((t) => t.logprob === t.top_logprobs[0].logprob), 'greedy picks the top token');
  const c = await client.completions.create({
    model, prompt: 'In the beginning', max_tokens: 5, temperature: 0, logprobs: 2 });
  const l = c.choices[0].logprobs;
  check(l.tokens.length === 5 && l.token_logprobs.length === 5 && l.text_offset.length === 5,
    'completions logprobs arrays');
  check(l.top_logprobs.every((t) => Object.keys(t).length >= 1), 'completions top_logprobs');
}

async function testSeedAndStop() {
  const body = { model, messages: question, max_tokens: 16, temperature: 1, seed: 42, ...plain };
  const a = await client.chat.completions.create(body);
  const b = await client.chat.completions.create(body);
  check(a.choices[0].message.content === b.choices[0].message.content, 'same seed, same text');
  let differs = false;
  for (const seed of [43, 44, 45]) {
    const c = await client.chat.completions.create({ ...body, seed });
    differs ||= c.choices[0].message.content !== a.choices[0].message.content;
  }
  check(differs, 'other seeds, other texts');
  const greedy = { model, prompt: 'In the beginning', max_tokens: 16, temperature: 0 };
  const full = (await client.completions.create(greedy)).choices[0].text;
  const words = full.trim().split(/\s+/);
  const word = words[Math.min(2, words.length - 1)];
  const cut = full.indexOf(word);
  const r = await client.completions.create({ ...greedy, stop: [word] });
  check(r.choices[0].text === full.slice(0, cut), `stop '${word}': text cut before it`);
  check(r.choices[0].finish_reason === 'stop' && r.choices[0].stop_reason === word,
    'stop: finish_reason stop, stop_reason');
}

async function testErrors() {
  const base = { model, messages: question, max_tokens: 4 };
  await expectError(client.chat.completions.create({ ...base, model: 'nope' }), 404, 'bad model');
  await expectError(client.chat.completions.create({ ...base, temperature: 'hot' }), 400,
    'temperature type', 'temperature');
  await expectError(client.chat.completions.create({ ...base, n: 0 }), 400, 'n=0', 'n');
  await expectError(client.chat.completions.create({ ...base, top_p: 5 }), 400, 'top_p 5', 'top_p');
  await expectError(client.chat.completions.create({ ...base, messages: [] }), 400, 'no messages',
    'messages');
  await expectError(client.chat.completions.create({ ...base, max_tokens: 10 ** 7 }), 400,
    'max_tokens beyond the limit');
  await expectError(client.chat.completions.create({ ...base, stream: true, logit_bias: { x: 1 } }),
    400, 'a streaming request with a bad field', 'logit_bias');
  await expectError(client.completions.create({ model }), 400, 'completions without prompt',
    'prompt');
  const wrong = new OpenAI({ baseURL: `${base_url()}/v1`, apiKey: 'not-a-key', maxRetries: 0 });
  await expectError(wrong.models.list(), 401, 'wrong API key');
  await expectError(client.chat.completions.create({ ...base, session_id: 'no-such-session' }),
    404, 'unknown session');
}

function base_url() {
  return base;
}

async function chatTurn(messages, sessionId, options) {
  return client.chat.completions.create(
    { model, messages, max_tokens: 8, temperature: 0, ...plain,
      ...(sessionId ? { session_id: sessionId } : {}) }, options);
}

async function testSessions() {
  const created = await client.post('/sessions', { body: {} });
  const id = created.id;
  check(typeof id === 'string' && created.tokens === 0, 'POST /v1/sessions');
  const history = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hail!' }];
  let previous = null;
  let previousTokens = 0;
  let firstComputed = 0;
  for (let turn = 0; turn < 4; turn += 1) {
    const r = await chatTurn(history, id);
    const u = r.usage;
    const reused = u.prompt_tokens_details.cached_tokens;
    check(r.session?.id === id, `turn ${turn}: the response names the session`);
    if (previous === null) {
      check(reused === 0, 'turn 0: nothing reused');
    } else {
      check(reused === previous.prompt_tokens + previous.completion_tokens - 1,
        `turn ${turn}: the whole history is reused (${reused} of ${u.prompt_tokens})`);
      check(r.session.history_messages === history.length - 1,
        `turn ${turn}: history messages (${r.session.history_messages})`);
      // The appended text is the same every turn ("…<|im_start|>user\nAnd then N?…"), so the
      // computed tokens stay constant while the conversation grows.
      const computed = u.prompt_tokens - reused;
      if (turn === 1) firstComputed = computed;
      check(computed === firstComputed && computed < u.prompt_tokens / 2,
        `turn ${turn}: only the new turn is computed (${computed} of ${u.prompt_tokens} tokens)`);
    }
    // The session's tokens after the reply: the prompt (history included) and the reply.
    check(r.session.tokens === u.prompt_tokens + u.completion_tokens,
      `turn ${turn}: session.tokens ${r.session.tokens} = ${u.prompt_tokens} + ${u.completion_tokens}`);
    if (previous !== null) {
      check(r.session.history_tokens === previousTokens,
        `turn ${turn}: history_tokens ${r.session.history_tokens} = the last turn's session.tokens`);
    }
    previousTokens = r.session.tokens;
    previous = u;
    history.push(r.choices[0].message, { role: 'user', content: `And then ${turn}?` });
  }
  // The same conversation without a session recomputes everything.
  const flat = await chatTurn(history);
  check(flat.usage.prompt_tokens_details.cached_tokens === 0, 'no session: nothing reused');
  // Only the new message, with the session in the x-session-id header.
  const r = await chatTurn([{ role: 'user', content: 'Once more.' }], undefined,
    { headers: { 'x-session-id': id } });
  check(r.usage.prompt_tokens_details.cached_tokens ===
    previous.prompt_tokens + previous.completion_tokens - 1, 'x-session-id header: reused');
  // Another API key does not see the session.
  await expectError(other.chat.completions.create(
    { model, messages: question, max_tokens: 2, session_id: id }), 404, "another key's session");
  await testBusySession(id);
  const list = await client.get('/sessions');
  check(list.data.some((s) => s.id === id), 'GET /v1/sessions lists it');
  // One session by its id; a fork of a chat session continues the same conversation sent whole
  // (the fork knows which messages its state holds) with the source's reply; DELETE by path.
  const src = `${id}-src`;
  const conv = [{ role: 'user', content: 'Hail!' }];
  const first = await client.chat.completions.create({ model, messages: conv, max_tokens: 8,
    temperature: 0, ...plain, session_id: src, create_session: true });
  const got = await client.get(`/sessions/${src}`);
  check(got.id === src && got.object === 'session' && got.tokens === first.session.tokens,
    `GET /v1/sessions/{id} (${JSON.stringify(got)})`);
  const fork = await client.post(`/sessions/${src}/fork`, { body: { session_id: `${id}-fork` } });
  check(fork.id === `${id}-fork` && fork.tokens === got.tokens,
    `POST /v1/sessions/{id}/fork (${JSON.stringify(fork)})`);
  conv.push(first.choices[0].message, { role: 'user', content: 'And then?' });
  const onFork = await chatTurn(conv, fork.id);
  const onSource = await chatTurn(conv, src);
  check(onFork.session.history_messages === 2 && onFork.session.history_tokens === got.tokens &&
    onFork.choices[0].message.content === onSource.choices[0].message.content &&
    JSON.stringify(onFork.usage) === JSON.stringify(onSource.usage),
  `the fork continues as its source (${JSON.stringify([onFork.session, onSource.session])})`);
  await expectError(client.post(`/sessions/${src}/fork`, { body: { session_id: fork.id } }),
    409, 'a fork onto an existing id');
  await expectError(client.get('/sessions/no-such-session'), 404, 'GET an unknown session');
  await expectError(other.get(`/sessions/${src}`), 404, "GET another key's session");
  await expectError(client.get('/sessions/bad%20id'), 400, 'a session id that cannot be one');
  for (const s of [fork.id, src]) {
    const gone = await client.delete(`/sessions/${s}`);
    check(gone.deleted === true && gone.id === s, 'DELETE /v1/sessions/{id}');
  }
  await expectError(client.get(`/sessions/${fork.id}`), 404, 'GET a deleted session');
  const del = await client.delete(`/sessions?session_id=${id}`);
  check(del.deleted === true, 'DELETE /v1/sessions');
  await expectError(chatTurn(question, id), 404, 'deleted session');
  const fresh = await client.chat.completions.create(
    { model, messages: question, max_tokens: 2, session_id: 'fresh-one', create_session: true });
  check(fresh.session?.id === 'fresh-one', 'create_session');
  await client.delete('/sessions?session_id=fresh-one');
}

// A session turn that a stop string ends: the session holds the reply as the client got it (the
// stop string's tokens taken back out), and records it so, so that the client's next request with
// the whole conversation finds that record and appends only its new message.
async function testSessionStop() {
  const question = [{ role: 'user', content: 'Tell me a story.' }];
  const body = { model, max_tokens: 24, temperature: 0, ignore_eos: true, ...plain };
  const free = await client.chat.completions.create({ ...body, messages: question });
  const text = free.choices[0].message.content ?? '';
  check(text.length >= 6, `a reply to cut (${JSON.stringify(text)})`);
  const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 2);
  const id = (await client.post('/sessions', { body: {} })).id;
  const r = await client.chat.completions.create(
    { ...body, messages: question, stop: [stop], session_id: id });
  const reply = r.choices[0].message.content ?? '';
  check(r.choices[0].finish_reason === 'stop' && text.startsWith(reply) &&
    reply.length <= text.indexOf(stop),
  `the stop string ends the session turn (${JSON.stringify(reply)}, stop ${JSON.stringify(stop)})`);
  // Streamed with include_usage on a fresh session: the finish chunk and the usage chunk say where
  // the session stands as the whole response did.
  const fresh = (await client.post('/sessions', { body: {} })).id;
  const stream = await client.chat.completions.create({
    ...body, messages: question, stop: [stop], session_id: fresh, stream: true,
    stream_options: { include_usage: true } });
  const notes = [];
  for await (const c of stream) {
    if (c.session) notes.push({ finish: c.choices[0]?.finish_reason, usage: c.usage, note: c.session });
  }
  const atFinish = notes.find((n) => n.finish)?.note;
  const atUsage = notes.find((n) => n.usage)?.note;
  check(atFinish?.tokens === r.session?.tokens && atUsage?.tokens === r.session?.tokens,
    `streamed: session.tokens ${atFinish?.tokens} (finish) and ${atUsage?.tokens} (usage) = ` +
    `${r.session?.tokens}`);
  await client.delete(`/sessions?session_id=${fresh}`);
  const history = [...question, { role: 'assistant', content: reply },
    { role: 'user', content: 'And then?' }];
  const next = await client.chat.completions.create(
    { ...body, max_tokens: 4, messages: history, session_id: id });
  check(next.session?.history_messages === 2,
    `the next turn finds the stopped turn's record (${JSON.stringify(next.session)})`);
  check(next.session?.history_tokens === r.session?.tokens,
    `the stopped turn's session.tokens (${r.session?.tokens}) is the next turn's history`);
  // (What the state holds is the engine test's to check: the visible reply's tokens may be more
  // than were generated, the cut token's visible part encoded on its own.)
  check(next.usage.prompt_tokens_details.cached_tokens > r.usage.prompt_tokens,
    `the next turn reuses the stopped turn (${next.usage.prompt_tokens_details.cached_tokens})`);
  await client.delete(`/sessions?session_id=${id}`);
}

// Turns back to back on six sessions at once, each as soon as the previous response ended
// (streamed every other turn): the server must have recorded a turn before its response's last
// byte, or the next request finds no record of it and renders the whole conversation again after
// the session's state (which the chat template refuses: its system message is no longer first).
async function backToBackTurns(turns) {
  const id = (await client.post('/sessions', { body: {} })).id;
  const history = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Go.' }];
  let recorded = 0;
  for (let turn = 0; turn < turns; turn += 1) {
    let message;
    let session;
    if (turn % 2 === 0) {
      const r = await chatTurn(history, id);
      message = r.choices[0].message;
      session = r.session;
    } else {
      const stream = await client.chat.completions.create(
        { model, messages: history, max_tokens: 4, temperature: 0, stream: true, session_id: id,
          stream_options: { include_usage: true }, ...plain });
      let content = '';
      for await (const c of stream) {
        content += c.choices[0]?.delta?.content ?? '';
        if (c.session) session = c.session;
      }
      message = { role: 'assistant', content };
    }
    if (turn > 0 && session?.history_messages === history.length - 1) recorded += 1;
    history.push(message, { role: 'user', content: `Next ${turn}.` });
  }
  await client.delete(`/sessions?session_id=${id}`);
  return recorded;
}

async function testBackToBackTurns() {
  const turns = 16;
  const recorded = await Promise.all(Array.from({ length: 6 }, () => backToBackTurns(turns)));
  check(recorded.every((r) => r === turns - 1),
    `back-to-back turns: each found the previous one recorded (${recorded} of ${turns - 1})`);
}

async function testBusySession(id) {
  const stream = await client.chat.completions.create(
    { model, messages: [{ role: 'user', content: 'Go on.' }], max_tokens: 400, temperature: 0,
      ignore_eos: true, stream: true, session_id: id, ...plain });
  const it = stream[Symbol.asyncIterator]();
  await it.next();
  await expectError(chatTurn([{ role: 'user', content: 'x' }], id), 409, 'busy session');
  let n = 1;
  while (!(await it.next()).done) n += 1;
  check(n === 400, `the first stream completes (${n} chunks)`);
}

async function testAbort() {
  const ac = new AbortController();
  const stream = await client.chat.completions.create(
    { model, messages: question, max_tokens: 1900, ignore_eos: true, stream: true, ...plain },
    { signal: ac.signal });
  let n = 0;
  try {
    for await (const c of stream) {
      n += c.choices.length;
      if (n === 3) ac.abort();
    }
  } catch (e) {
    check(e.name === 'APIUserAbortError' || e.name === 'AbortError', `abort: ${e.name}`);
  }
  check(n >= 3 && n < 1900, `the stream stopped after the abort (${n} chunks)`);
}

async function testStructuredOutput() {
  const schema = {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 10 },
      age: { type: 'integer' },
      pet: { anyOf: [{ type: 'null' }, { enum: ['cat', 'dog'] }] },
    },
    required: ['name', 'age', 'pet'],
    additionalProperties: false,
  };
  const response_format = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } };
  const body = { model, messages: question, response_format, max_tokens: 400, seed: 5 };
  const r = await client.chat.completions.create(body);
  const shape = (o) => o !== null && typeof o === 'object' && Object.keys(o).join() === 'name,age,pet' &&
    typeof o.name === 'string' && [...o.name].length <= 10 && Number.isInteger(o.age) &&
    (o.pet === null || o.pet === 'cat' || o.pet === 'dog');
  let parsed = null;
  try { parsed = JSON.parse(r.choices[0].message.content); } catch (e) { parsed = e; }
  check(r.choices[0].finish_reason === 'stop' && shape(parsed),
    `structured chat follows its schema (${r.choices[0].finish_reason}: ${r.choices[0].message.content})`);
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let text = '';
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
  check(text === r.choices[0].message.content, 'structured stream = non-stream (same seed)');
  const obj = await client.chat.completions.create({
    model, messages: question, response_format: { type: 'json_object' }, max_tokens: 300, seed: 2 });
  if (obj.choices[0].finish_reason === 'stop') {
    const o = JSON.parse(obj.choices[0].message.content);
    check(o !== null && typeof o === 'object' && !Array.isArray(o), 'json_object: an object');
  }
  await expectError(client.chat.completions.create({
    model, messages: question,
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'integer', multipleOf: 2 } } },
  }), 400, 'a schema keyword linfer cannot enforce', 'response_format.json_schema.schema.multipleOf');
}

// The Responses API through the SDK's own methods: create, the stream helper (which rebuilds the
// response from the events and throws on a missing or misordered one), retrieve, input items,
// delete; previous_response_id continues the stored state (only the new input computed) and
// gives what chat on a session gives; changed instructions render the whole conversation and
// give what chat gives without a session; store: false keeps nothing; another key sees nothing.
async function testResponses() {
  const greedy = { model, temperature: 0, max_output_tokens: 10, reasoning: { effort: 'none' } };
  const system = 'Answer briefly.';
  const first = 'Who art thou?';
  const a = await client.responses.create({ ...greedy, instructions: system, input: first });
  check(a.object === 'response' && a.id.startsWith('resp_') && a.model === model,
    `responses.create: a response (${a.id})`);
  check(['completed', 'incomplete'].includes(a.status) && a.output_text.length > 0,
    `responses.create: output_text (${a.status}: ${JSON.stringify(a.output_text)})`);
  check(a.usage.output_tokens > 0 && a.usage.input_tokens > 0 &&
    a.usage.total_tokens === a.usage.input_tokens + a.usage.output_tokens, 'responses usage');
  const viaChat = await client.chat.completions.create({
    model, temperature: 0, max_tokens: 10, ...plain,
    messages: [{ role: 'system', content: system }, { role: 'user', content: first }] });
  check(viaChat.choices[0].message.content === a.output_text,
    `responses = chat completions, greedy (${JSON.stringify(viaChat.choices[0].message.content)})`);

  // The stream helper.
  const stream = client.responses.stream({ ...greedy, instructions: system, input: first });
  const types = [];
  let deltas = '';
  stream.on('event', (e) => types.push(e.type));
  stream.on('response.output_text.delta', (e) => { deltas += e.delta; });
  const streamed = await stream.finalResponse();
  // (the helper's final response has output_text only when it parsed a format, as with OpenAI)
  const text = streamed.output.filter((o) => o.type === 'message')
    .flatMap((o) => o.content.map((c) => c.text)).join('');
  check(text === a.output_text && deltas === a.output_text && streamed.id.startsWith('resp_'),
    `responses.stream: the deltas and final response = create (${JSON.stringify(deltas)}, ` +
    `${JSON.stringify(text)}, ${JSON.stringify(a.output_text)})`);
  check(types[0] === 'response.created' && types[1] === 'response.in_progress' &&
    ['response.completed', 'response.incomplete'].includes(types.at(-1)),
    `responses.stream: event order (${types.join(', ')})`);

  // Continuing: the state is forked, only the new input is computed; the same as chat on a session.
  const next = 'And then?';
  const b = await client.responses.create({ ...greedy, instructions: system, input: next,
    previous_response_id: a.id });
  const cached = b.usage.input_tokens_details.cached_tokens;
  check(b.previous_response_id === a.id && cached > a.usage.input_tokens &&
    b.usage.input_tokens - cached < a.usage.input_tokens,
    `previous_response_id: the stored state is continued (${cached} of ${b.usage.input_tokens} cached)`);
  const session = (await client.post('/sessions', { body: {} })).id;
  const onSession = (messages) => client.chat.completions.create({
    model, messages, temperature: 0, max_tokens: 10, ...plain, session_id: session });
  const t1 = await onSession([{ role: 'system', content: system }, { role: 'user', content: first }]);
  const t2 = await onSession([{ role: 'user', content: next }]);
  check(t1.choices[0].message.content === a.output_text &&
    t2.choices[0].message.content === b.output_text &&
    t2.usage.prompt_tokens_details.cached_tokens === cached,
    `continuation = chat on a session (${JSON.stringify(b.output_text)} vs ` +
    `${JSON.stringify(t2.choices[0].message.content)})`);
  // inputTokens.count: what create counts, fresh and continued.
  const counted = (extra) => client.responses.inputTokens.count({ model,
    reasoning: { effort: 'none' }, instructions: system, ...extra });
  const countA = await counted({ input: first });
  const countB = await counted({ input: next, previous_response_id: a.id });
  check(countA.object === 'response.input_tokens' && countA.input_tokens === a.usage.input_tokens &&
    countB.input_tokens === b.usage.input_tokens,
    `responses.inputTokens.count = create's input tokens (${countA.input_tokens} ` +
    `${a.usage.input_tokens}, ${countB.input_tokens} ${b.usage.input_tokens})`);
  // A second continuation of the same response: the same reply (a's state is not consumed).
  const b2 = await client.responses.create({ ...greedy, instructions: system, input: next,
    previous_response_id: a.id });
  check(b2.output_text === b.output_text && b2.usage.input_tokens_details.cached_tokens === cached,
    'two continuations of one response are alike');
  // New instructions: the whole conversation is rendered again, as chat without a session.
  const other_system = 'Answer at length.';
  const c = await client.responses.create({ ...greedy, instructions: other_system, input: next,
    previous_response_id: a.id });
  const flat = await client.chat.completions.create({
    model, temperature: 0, max_tokens: 10, ...plain,
    messages: [{ role: 'system', content: other_system }, { role: 'user', content: first },
      { role: 'assistant', content: a.output_text }, { role: 'user', content: next }] });
  check(c.usage.input_tokens_details.cached_tokens === 0 &&
    c.usage.input_tokens === flat.usage.prompt_tokens &&
    c.output_text === flat.choices[0].message.content,
    `changed instructions: the whole conversation (${c.usage.input_tokens} tokens, ` +
    `${JSON.stringify(c.output_text)})`);

  // Retrieve, input items, delete.
  const got = await client.responses.retrieve(b.id);
  check(got.id === b.id && got.output_text === b.output_text, 'responses.retrieve');
  const items = [];
  for await (const item of client.responses.inputItems.list(b.id)) items.push(item);
  check(items.length === 1 && items[0].type === 'message' && items[0].content[0].text === next,
    `responses.inputItems.list (${JSON.stringify(items)})`);
  await expectError(other.responses.retrieve(b.id), 404, "another key's response");
  await client.responses.delete(b.id);
  await expectError(client.responses.retrieve(b.id), 404, 'a deleted response');
  await expectError(client.responses.create({ ...greedy, input: next, previous_response_id: b.id }),
    404, 'continuing a deleted response', 'previous_response_id');
  const b3 = await client.responses.create({ ...greedy, instructions: system, input: next,
    previous_response_id: a.id });
  check(b3.output_text === b.output_text, 'deleting a continuation leaves its predecessor whole');
  const unsaved = await client.responses.create({ ...greedy, input: first, store: false });
  check(unsaved.store === false, 'store: false');
  await expectError(client.responses.retrieve(unsaved.id), 404, 'store: false keeps nothing');

  // Structured output and errors.
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 } },
    required: ['name'], additionalProperties: false };
  const s = await client.responses.create({ model, input: first, max_output_tokens: 200, seed: 3,
    text: { format: { type: 'json_schema', name: 'who', schema, strict: true } } });
  let parsed = null;
  try { parsed = JSON.parse(s.output_text); } catch (e) { parsed = e; }
  check(s.status === 'completed' && parsed !== null && Object.keys(parsed).join() === 'name' &&
    typeof parsed.name === 'string', `text.format json_schema (${s.output_text})`);
  await expectError(client.responses.create({ model, input: first, tools: [{ type: 'web_search' }] }),
    400, 'a built-in tool', 'tools[0].type');
  await expectError(client.responses.create({ model, input: [{ role: 'user', content: [
    { type: 'input_image', image_url: 'https://example.com/x.png' }] }] }),
    400, 'an image input', 'input[0].content[0].type');
}

// Forced tool calls: the SDK reads the calls (and rebuilds them from the stream helpers) the way it
// reads OpenAI's; the bundled model knows nothing of tools, so each call is the grammar's doing.
async function testForcedTools() {
  const parameters = { type: 'object', properties: { city: { type: 'string', maxLength: 12 },
    days: { type: 'integer' } }, required: ['city'] };
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters } }];
  const body = { model, messages: [{ role: 'user', content: 'Weather in Rome?' }], tools,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 300,
    temperature: 0 };
  const r = await client.chat.completions.create(body);
  const call = r.choices[0].message.tool_calls?.[0];
  const args = call ? JSON.parse(call.function.arguments) : {};
  check(r.choices[0].finish_reason === 'tool_calls' && call?.function.name === 'get_weather' &&
    typeof args.city === 'string', `chat: a forced call (${JSON.stringify(r.choices[0])})`);
  const final = await client.chat.completions.stream(body).finalChatCompletion();
  const streamed = final.choices[0].message.tool_calls?.[0];
  check(streamed?.function.name === 'get_weather' &&
    JSON.stringify(JSON.parse(streamed.function.arguments)) === JSON.stringify(args),
    `chat.completions.stream rebuilds the same call (${JSON.stringify(streamed)})`);
  const rbody = { model, input: 'Weather in Rome?', store: false, max_output_tokens: 300,
    temperature: 0, tools: [{ type: 'function', name: 'get_weather', parameters, strict: true }],
    tool_choice: 'required', parallel_tool_calls: false };
  const resp = await client.responses.create(rbody);
  const item = resp.output.find((o) => o.type === 'function_call');
  check(resp.output.length === 1 && item?.name === 'get_weather' &&
    typeof JSON.parse(item.arguments).city === 'string',
    `responses: a forced function_call (${JSON.stringify(resp.output)})`);
  const rfinal = await client.responses.stream(rbody).finalResponse();
  const ritem = rfinal.output.find((o) => o.type === 'function_call');
  check(ritem?.arguments === item?.arguments, 'responses.stream rebuilds the same call');
  await expectError(client.chat.completions.create({ ...body,
    tool_choice: { type: 'function', function: { name: 'get_time' } } }),
  400, 'forcing an unknown function', 'tool_choice.function.name');
}

const tests = [testModels, testChat, testReasoning, testCompletions, testN, testLogprobs,
  testSeedAndStop, testErrors, testSessions, testSessionStop, testBackToBackTurns, testStructuredOutput, testResponses,
  testForcedTools, testAbort];
for (const t of tests) {
  try {
    await t();
    console.log(`${t.name}: done`);
  } catch (e) {
    check(false, `${t.name} threw ${e?.status ?? ''} ${e?.stack ?? e}`);
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
