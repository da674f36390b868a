// The official Anthropic TypeScript SDK against a running `linfer serve` (started by
// messages_api_test.py): messages.create and the stream helper (which rebuilds the message from
// the events and throws on a misordered one) give chat completions' greedy text for the same
// conversation; a tool round trip in the history; count_tokens = chat's prompt tokens; errors in
// the API's shape with the SDK's error classes (400, 401, 404).
//
// usage: node anthropic_sdk_test.mjs NODE_MODULES BASE_URL API_KEY MODEL
import { createRequire } from 'node:module';

const [modules, base, key, model] = process.argv.slice(2);
const require = createRequire(`${modules}/`);
const sdk = require('@anthropic-ai/sdk');
const Anthropic = sdk.default ?? sdk;
const client = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 120000 });
const OpenAI = require('openai').default ?? require('openai');
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });

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

async function expectError(promise, cls, status, what) {
  try {
    await promise;
    check(false, `${what}: expected HTTP ${status}, got success`);
  } catch (e) {
    check(e instanceof cls && e.status === status,
      `${what}: ${cls.name} ${status} (got ${e?.constructor?.name} ${e.status}: ${e.message})`);
    check(e.error?.type === 'error' && typeof e.error?.error?.type === 'string' &&
      typeof e.error?.error?.message === 'string', `${what}: the API's error shape`);
  }
}

const system = 'Answer briefly.';
const question = 'Who art thou?';
const greedy = { model, max_tokens: 12, temperature: 0 };
const textOf = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

async function testCreateAndStream() {
  const m = await client.messages.create({ ...greedy, system,
    messages: [{ role: 'user', content: question }] });
  check(m.type === 'message' && m.role === 'assistant' && m.id.startsWith('msg_'),
    `messages.create: a message (${m.id})`);
  check(['end_turn', 'max_tokens'].includes(m.stop_reason) && m.usage.output_tokens > 0 &&
    m.usage.input_tokens > 0, `messages.create: stop_reason and usage (${m.stop_reason})`);
  const chat = await openai.chat.completions.create({ model, max_tokens: 12, temperature: 0,
    chat_template_kwargs: { enable_thinking: false },
    messages: [{ role: 'system', content: system }, { role: 'user', content: question }] });
  check(textOf(m) === chat.choices[0].message.content && textOf(m).length > 0,
    `messages = chat completions, greedy (${JSON.stringify(textOf(m))} vs ` +
    `${JSON.stringify(chat.choices[0].message.content)})`);
  check(m.usage.input_tokens + m.usage.cache_read_input_tokens === chat.usage.prompt_tokens,
    `usage: the same prompt tokens (${m.usage.input_tokens} + ${m.usage.cache_read_input_tokens} ` +
    `vs ${chat.usage.prompt_tokens})`);

  const stream = client.messages.stream({ ...greedy, system,
    messages: [{ role: 'user', content: question }] });
  let text = '';
  const types = [];
  stream.on('text', (t) => { text += t; });
  stream.on('streamEvent', (e) => types.push(e.type));
  const final = await stream.finalMessage();
  check(text === textOf(m) && textOf(final) === textOf(m) && final.stop_reason === m.stop_reason,
    `messages.stream: the text events and final message = create (${JSON.stringify(text)})`);
  check(types[0] === 'message_start' && types.at(-1) === 'message_stop' &&
    types.includes('content_block_start') && types.includes('message_delta'),
    `messages.stream: event order (${types.join(', ')})`);

  const count = await client.messages.countTokens({ model, system,
    messages: [{ role: 'user', content: question }] });
  check(count.input_tokens === chat.usage.prompt_tokens,
    `count_tokens = the prompt's tokens (${count.input_tokens})`);
}

async function testToolHistoryAndStops() {
  const tools = [{ name: 'get_weather', description: 'The weather in a city',
    input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
  const m = await client.messages.create({ ...greedy, tools, messages: [
    { role: 'user', content: 'Weather in Rome?' },
    { role: 'assistant', content: [{ type: 'text', text: 'Checking.' },
      { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Rome' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'Sunny' }] }] });
  check(m.type === 'message' && m.content.length > 0, 'a tool round trip in the history');
  // Forced calls (tool_choice "tool" / "any"): the bundled model knows nothing of tools, so the
  // call is the grammar's doing; the stream helper rebuilds the same input.
  const forced = { model, max_tokens: 300, temperature: 0,
    tools: [{ ...tools[0], input_schema: { ...tools[0].input_schema,
      properties: { city: { type: 'string', maxLength: 12 } } } }],
    tool_choice: { type: 'tool', name: 'get_weather' },
    messages: [{ role: 'user', content: 'Weather in Rome?' }] };
  const f = await client.messages.create(forced);
  check(f.stop_reason === 'tool_use' && f.content.length === 1 && f.content[0].type === 'tool_use' &&
    f.content[0].name === 'get_weather' && typeof f.content[0].input.city === 'string',
    `tool_choice tool: a forced call (${JSON.stringify(f.content)})`);
  const fs = await client.messages.stream(forced).finalMessage();
  check(JSON.stringify(fs.content[0]?.input) === JSON.stringify(f.content[0]?.input),
    'the stream helper rebuilds the forced call');
  const any = await client.messages.create({ ...forced, temperature: 1,
    tool_choice: { type: 'any', disable_parallel_tool_use: true } });
  check(any.stop_reason === 'tool_use' && any.content.length === 1 && any.content[0].type === 'tool_use',
    `tool_choice any: one call only (${any.stop_reason})`);
  const stopped = await client.messages.create({ model, max_tokens: 200, temperature: 0,
    messages: [{ role: 'user', content: question }], stop_sequences: ['e'] });
  check(stopped.stop_reason === 'stop_sequence' && stopped.stop_sequence === 'e',
    `stop_sequences (${stopped.stop_reason} ${stopped.stop_sequence})`);
  const cut = await client.messages.create({ model, max_tokens: 2, temperature: 0,
    messages: [{ role: 'user', content: question }] });
  check(cut.stop_reason === 'max_tokens' && cut.usage.output_tokens === 2, 'max_tokens');
}

async function testErrors() {
  await expectError(client.messages.create({ model, messages: [{ role: 'user', content: 'x' }] }),
    Anthropic.BadRequestError, 400, 'no max_tokens');
  await expectError(client.messages.create({ ...greedy, model: 'claude-elsewhere',
    messages: [{ role: 'user', content: 'x' }] }), Anthropic.NotFoundError, 404, 'another model');
  const stranger = new Anthropic({ baseURL: base, apiKey: 'not-a-key', maxRetries: 0 });
  await expectError(stranger.messages.create({ ...greedy, messages: [{ role: 'user', content: 'x' }] }),
    Anthropic.AuthenticationError, 401, 'an unknown API key');
  await expectError(client.messages.create({ ...greedy, messages: [{ role: 'user', content: [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] }),
    Anthropic.BadRequestError, 400, 'an image block');
}

for (const t of [testCreateAndStream, testToolHistoryAndStops, testErrors]) {
  try {
    await t();
    console.log(`${t.name}: done`);
  } catch (e) {
    check(false, `${t.name} threw ${e?.status ?? ''} ${e?.stack ?? e}`);
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
