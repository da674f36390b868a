// The OpenAI API's pure parts: request field errors, bounded body parsing, the SSE chunk shapes,
// and the session turn rule on the real Qwen3.5 and Qwen3.6 chat templates (the reasoning /
// tool-call parser fed token by token: openai_chat_output_test.cc).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "engine/sampler.h"
#include "engine/stop.h"
#include "server/http_status.h"
#include "server/openai/chat_output.h"
#include "server/openai/chat_request.h"
#include "server/openai/chat_setup.h"
#include "server/openai/generation.h"
#include "server/openai/params.h"
#include "server/openai/responses.h"
#include "server/openai/session_turns.h"

namespace linfer::openai {
namespace {

absl::StatusOr<CommonParams> Params(const std::string& body, Api api = Api::kChat) {
  absl::StatusOr<Json> j = ParseBody(body);
  if (!j.ok()) return j.status();
  return ParseCommonParams(*j, api, HttpRequest{});
}

// The JSON chunks of an SSE stream: its `data: {…}` lines (not `data: [DONE]`).
std::vector<Json> DataChunks(const std::string& sse) {
  std::vector<Json> chunks;
  std::istringstream in(sse);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: {", 0) == 0) chunks.push_back(Json::parse(line.substr(6)));
  }
  return chunks;
}

std::string ErrorOf(const std::string& body, Api api = Api::kChat) {
  absl::StatusOr<CommonParams> p = Params(body, api);
  return p.ok() ? "ok" : std::string(p.status().message());
}

TEST(OpenAiParams, FieldsAndDefaults) {
  absl::StatusOr<CommonParams> p = Params(
      R"({"model":"m","temperature":0.5,"top_p":0.9,"top_k":5,"min_p":0.1,"n":2,"seed":7,
          "stop":["a","b"],"max_completion_tokens":9,"max_tokens":3,"logprobs":true,
          "top_logprobs":3,"stream":true,"stream_options":{"include_usage":true},
          "logit_bias":{"12":-100},"ignore_eos":true,"min_tokens":2,"presence_penalty":1,
          "frequency_penalty":-1,"repetition_penalty":1.1,"user":"u","unknown_field":[1]})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->model, "m");
  EXPECT_FLOAT_EQ(p->sampling.temperature, 0.5f);
  EXPECT_EQ(p->sampling.top_k, 5);
  EXPECT_EQ(p->n, 2);
  EXPECT_EQ(*p->sampling.seed, 7u);
  EXPECT_EQ(p->stop.stop_strings, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(p->stop.max_tokens, 9);  // max_completion_tokens supersedes max_tokens
  EXPECT_EQ(*p->sampling.logprobs, 3);
  EXPECT_TRUE(p->stream && p->include_usage);
  EXPECT_FLOAT_EQ(p->sampling.logit_bias.at(12), -100.0f);
  EXPECT_TRUE(p->stop.ignore_eos);
  EXPECT_EQ(p->min_tokens, 2);
  EXPECT_TRUE(p->given.temperature && p->given.max_tokens && p->given.repetition_penalty);
  absl::StatusOr<CommonParams> d = Params("{}");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->given.temperature || d->given.max_tokens || d->stream || d->logprobs);
  absl::StatusOr<CommonParams> c = Params(R"({"logprobs":2,"stop":"x"})", Api::kCompletions);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c->sampling.logprobs, 2);
  EXPECT_EQ(c->stop.stop_strings, (std::vector<std::string>{"x"}));
}

TEST(OpenAiParams, ErrorsNameTheField) {
  EXPECT_EQ(ErrorOf(R"({"temperature":"hot"})"), "temperature: expected a number, got a string");
  EXPECT_EQ(ErrorOf(R"({"n":0})"), "n must be in [1, 128], got 0");
  EXPECT_EQ(ErrorOf(R"({"max_tokens":1.5})"), "max_tokens: expected an integer, got 1.5");
  EXPECT_EQ(ErrorOf(R"({"stop":[1]})"), "stop[0]: expected a string, got an integer");
  EXPECT_EQ(ErrorOf(R"({"stream_options":{"include_usage":true}})"),
            "stream_options: only allowed with \"stream\": true");
  EXPECT_EQ(ErrorOf(R"({"top_logprobs":2})"), "top_logprobs: needs \"logprobs\": true");
  EXPECT_EQ(ErrorOf(R"({"logit_bias":{"x":1}})"), "logit_bias: key 'x' is not a token id");
  // Only an id's own digits: no sign, space or leading zero (one token, one way to write it).
  for (const char* key : {" 1", "01", "-0", "+1", "1 ", ""}) {
    EXPECT_EQ(ErrorOf(absl::StrCat(R"({"logit_bias":{")", key, R"(":1}})")),
              absl::StrCat("logit_bias: key '", key, "' is not a token id"));
  }
  EXPECT_TRUE(Params(R"({"logit_bias":{"0":1,"10":-1}})").ok());
  EXPECT_EQ(ErrorOf(R"({"logit_bias":{"5":500}})"), "logit_bias.5 must be in [-100, 100], got 500");
  EXPECT_EQ(ErrorOf(R"({"logprobs":30})", Api::kCompletions),
            "logprobs must be in [0, 20], got 30");
  EXPECT_EQ(ErrorOf(R"({"presence_penalty":3})"), "presence_penalty must be in [-2, 2], got 3");
  // Integers past int64 are told as written (2^63 used to wrap to -2^63, a valid seed).
  EXPECT_EQ(ErrorOf(R"({"seed":9223372036854775808})"),
            "seed must be in [-9223372036854775808, 9223372036854775807], got "
            "9223372036854775808");
  EXPECT_EQ(ErrorOf(R"({"max_tokens":18446744073709551615})"),
            "max_tokens must be in [1, 2147483647], got 18446744073709551615");
  EXPECT_EQ(ErrorOf(R"({"stop_token_ids":[18446744073709551615]})"),
            "stop_token_ids[0] = 18446744073709551615 is not a token id");  // was "= -1"
  {
    absl::StatusOr<std::vector<PromptInput>> prompts =
        ParsePrompts(Json::parse(R"({"prompt":[1, 18446744073709551615]})"));
    ASSERT_FALSE(prompts.ok());  // 2^64 - 1 wrapped to -1, refused later as "-1"
    EXPECT_EQ(prompts.status().message(), "prompt[1]: expected a token id");
  }
  EXPECT_EQ(ErrorOf(R"({"max_tokens":4,"min_tokens":5})"),
            "min_tokens (5) must be at most max_tokens (4)");
  EXPECT_EQ(ErrorOf(R"({"response_format":{"type":"xml"}})"),
            "response_format.type: 'xml' is not supported; use \"text\", \"json_object\" or "
            "\"json_schema\"");
  EXPECT_EQ(ErrorOf(R"({"response_format":{"type":"json_schema"}})"),
            "response_format.json_schema: missing");
  EXPECT_EQ(ErrorOf(R"({"response_format":{"type":"json_schema","json_schema":{"name":"x"}}})"),
            "response_format.json_schema.schema: missing");
  EXPECT_EQ(ErrorOf(R"({"response_format":{"type":"json_schema","json_schema":{"name":"x",
                        "schema":{"type":"object","properties":{"id":{"type":"integer",
                        "multipleOf":2}}}}}})"),
            "response_format.json_schema.schema.properties.id.multipleOf: not supported "
            "(structured output cannot enforce it)");
  EXPECT_EQ(ErrorOf(R"({"response_format":{"type":"json_schema","json_schema":{"name":"x",
                        "schema":{"type":"string","pattern":"^a(b"}}}})"),
            "response_format.json_schema.schema.pattern: a '(' without its ')' at offset 2");
  EXPECT_EQ(ErrorOf(R"({"guided_json":"{\"type\":"})"), "guided_json: not valid JSON");
  EXPECT_EQ(ErrorOf(R"({"response_format":{"type":"json_object"},"guided_json":{}})"),
            "guided_json: give one output format (response_format is given too)");
  EXPECT_EQ(ErrorOf(R"({"structured_outputs":{"regex":"a+"}})"), "ok");
  EXPECT_EQ(ErrorOf(R"x({"structured_outputs":{"regex":"(?=a)"}})x"),
            "structured_outputs.regex: a lookaround at offset 1 is not supported (structured "
            "output compiles the pattern to an automaton)");
  EXPECT_EQ(ErrorOf(R"({"structured_outputs":{"regex":["a"]}})"),
            "structured_outputs.regex: expected a string, got an array");
  EXPECT_EQ(ErrorOf(R"({"structured_outputs":{"grammar":"root ::= x"}})"),
            "structured_outputs.grammar: not supported (json, json_object, choice and regex are)");
  EXPECT_EQ(ErrorOf(R"({"structured_outputs":{"regex":"a","json":{}}})"),
            "structured_outputs.json: give one output format (structured_outputs.regex is given "
            "too)");
  EXPECT_EQ(ErrorOf(R"({"structured_outputs":{"choice":["a",1]}})"),
            "structured_outputs.choice[1]: expected a string, got an integer");
  EXPECT_EQ(ErrorOf(R"({"guided_choice":[]})"), "guided_choice: give at least one choice");
  EXPECT_EQ(ErrorOf(R"({"best_of":3})"), "best_of: only best_of equal to n is supported");
  // vLLM's extra parameters that would change the output: refused, never ignored.
  EXPECT_EQ(ErrorOf(R"({"use_beam_search":true})"), "use_beam_search: not supported");
  // OpenAI's legacy function calling and audio output change the output: refused in chat.
  EXPECT_EQ(ErrorOf(R"({"functions":[{"name":"f"}]})"),
            "functions: the legacy function-calling API is not supported (send tools and "
            "tool_choice)");
  EXPECT_EQ(ErrorOf(R"({"function_call":"auto"})").rfind("function_call: the legacy", 0), 0u);
  EXPECT_EQ(ErrorOf(R"({"modalities":["text","audio"]})"),
            "modalities: only [\"text\"] is supported");
  EXPECT_EQ(ErrorOf(R"({"audio":{"voice":"alloy","format":"wav"}})"),
            "audio: audio output is not supported");
  EXPECT_EQ(ErrorOf(R"({"modalities":["text"],"functions":[],"function_call":null})"), "ok");
  EXPECT_EQ(ErrorOf(R"({"functions":[{"name":"f"}]})", Api::kCompletions), "ok");
  EXPECT_EQ(ErrorOf(R"({"use_beam_search":false,"length_penalty":1.0})"), "ok");
  EXPECT_EQ(ErrorOf(R"({"length_penalty":0.5})").rfind("length_penalty: only with beam", 0), 0u);
  EXPECT_EQ(ErrorOf(R"({"logits_processors":[5]})").rfind("logits_processors: not", 0), 0u);
  EXPECT_EQ(ErrorOf(R"({"logits_processors":[]})"), "ok");
  // vLLM's allowed_token_ids (sorted, once each) and bad_words; an empty allowed list would allow
  // nothing.
  EXPECT_EQ(*Params(R"({"allowed_token_ids":[9,3,9]})")->sampling.allowed_token_ids,
            (std::vector<int32_t>{9, 3, 9}));  // as given: BuildRequest checks, then sorts
  EXPECT_EQ(ErrorOf(R"({"allowed_token_ids":[]})").rfind("allowed_token_ids: empty", 0), 0u);
  EXPECT_EQ(ErrorOf(R"({"allowed_token_ids":[1,-2]})"),
            "allowed_token_ids[1] = -2 is not a token id");
  EXPECT_EQ(ErrorOf(R"({"allowed_token_ids":[1.5]})").rfind("allowed_token_ids[0]", 0), 0u);
  EXPECT_EQ(Params(R"({"bad_words":["a b"," c"]})")->bad_words,
            (std::vector<std::string>{"a b", " c"}));
  EXPECT_EQ(Params(R"({"bad_words":[]})")->bad_words.size(), 0u);
  EXPECT_EQ(ErrorOf(R"({"bad_words":["x",""]})").rfind("bad_words[1]: expected a non-empty", 0),
            0u);
  EXPECT_EQ(ErrorOf(R"({"bad_words":"x"})").rfind("bad_words", 0), 0u);
  EXPECT_EQ(ErrorOf(R"({"prompt_embeds":"AAAA"})").rfind("prompt_embeds: not supported", 0), 0u);
  EXPECT_EQ(ErrorOf(R"({"skip_special_tokens":false})").rfind("skip_special_tokens: only true", 0),
            0u);
  EXPECT_EQ(ErrorOf(R"({"spaces_between_special_tokens":false})")
                .rfind("spaces_between_special_tokens: only true", 0),
            0u);
  EXPECT_EQ(ErrorOf(R"({"skip_special_tokens":true})"), "ok");
  EXPECT_EQ(ErrorOf(R"({"truncate_prompt_tokens":0})").rfind("truncate_prompt_tokens: must", 0),
            0u);
  EXPECT_EQ(ErrorOf(R"({"truncate_prompt_tokens":-2})").rfind("truncate_prompt_tokens", 0), 0u);
  EXPECT_EQ(
      Params(R"({"truncate_prompt_tokens":-1,"add_special_tokens":false})")->truncate_prompt_tokens,
      -1);
  EXPECT_EQ(Params(R"({"add_special_tokens":false})")->add_special_tokens, false);
  EXPECT_TRUE(
      Params(R"({"truncate_prompt_tokens":3,"truncation_side":"right"})")->truncate_keeps_start);
  EXPECT_FALSE(Params(R"({"truncation_side":"left"})")->truncate_keeps_start);
  EXPECT_EQ(ErrorOf(R"({"truncation_side":"up"})"),
            "truncation_side: 'up' is not \"left\" or \"right\"");
  // vLLM's request_id, and the X-Request-Id header over it (its printable characters).
  EXPECT_EQ(Params(R"({"request_id":"r-1"})")->request_id, "r-1");
  HttpRequest with_header;
  with_header.headers["x-request-id"] = "h\x01-2";
  EXPECT_EQ(ParseCommonParams(Json::parse(R"({"request_id":"r-1"})"), Api::kChat, with_header)
                ->request_id,
            "h-2");
  EXPECT_EQ(ErrorOf(absl::StrCat(R"({"request_id":")", std::string(129, 'x'), R"("})"))
                .rfind("request_id: 1 to 128", 0),
            0u);
  EXPECT_EQ(ErrorOf(R"({"truncate_prompt_tokens":5,"session_id":"s"})")
                .rfind("truncate_prompt_tokens: not with a session", 0),
            0u);
  EXPECT_EQ(ErrorOf(R"({"truncate_prompt_tokens":5,"echo":true})", Api::kCompletions),
            "truncate_prompt_tokens: not with echo");
  EXPECT_EQ(ErrorOf(R"({"create_session":true})"),
            "create_session: needs a session_id (or x-session-id)");
  EXPECT_EQ(ErrorParam("temperature: expected a number"), "temperature");
  EXPECT_EQ(ErrorParam("messages[2].role: missing"), "messages[2].role");
  EXPECT_EQ(ErrorParam("top_p must be in (0, 1], got 2"), "top_p");
  // Both of a session id's errors name it (the second was null).
  EXPECT_EQ(ErrorParam("session_id must have 1 to 128 characters, got 200"), "session_id");
  EXPECT_EQ(ErrorParam("session_id may only contain letters, digits, '-', '_' and '.', got 'a/b'"),
            "session_id");
  EXPECT_EQ(ErrorParam("requests may only wait so long"), "");  // no field-like name
  EXPECT_EQ(ErrorParam("the request queue is full"), "");
  EXPECT_EQ(ErrorParam("max_output_tokens 5000 exceeds this server's limit of 4096"),
            "max_output_tokens");
  EXPECT_EQ(ErrorParam("max_tokens exceeds"), "");  // no number: not the engine's wording
  EXPECT_EQ(ErrorParam("max_tokens 5"), "");
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kFailedPrecondition), 409);
}

TEST(OpenAiParams, OutputFormats) {
  EXPECT_EQ(Params(R"({"response_format":{"type":"text"}})")->format, nullptr);
  EXPECT_NE(Params(R"({"response_format":{"type":"json_object"}})")->format, nullptr);
  EXPECT_NE(Params(R"({"response_format":{"type":"json_schema","json_schema":{"name":"p",
                       "strict":true,"schema":{"type":"object","properties":{"a":{}}}}}})")
                ->format,
            nullptr);
  EXPECT_NE(Params(R"({"structured_outputs":{"json":{"type":"integer"}}})")->format, nullptr);
  EXPECT_NE(Params(R"({"structured_outputs":{"json_object":true}})")->format, nullptr);
  EXPECT_NE(Params(R"({"guided_json":"{\"type\":\"boolean\"}"})")->format, nullptr);
  EXPECT_NE(Params(R"({"structured_outputs":{"choice":["positive","negative"]}})")->format,
            nullptr);
}

TEST(OpenAiParams, BodiesAreBounded) {
  EXPECT_FALSE(ParseBody("").ok());
  EXPECT_FALSE(ParseBody("[1]").ok());
  EXPECT_FALSE(ParseBody("{\"a\": \"\xff\"}").ok());
  EXPECT_FALSE(ParseBody("{\"a\": ").ok());
  // What is wrong, and where; printable ASCII only (the parser quotes what it read last).
  auto why = [](absl::string_view body) { return std::string(ParseBody(body).status().message()); };
  EXPECT_EQ(why(R"({"temperature": 1e999})"),
            "the request body is not valid JSON: number overflow parsing '1e999'");
  EXPECT_TRUE(absl::StrContains(why("{\"a\": \"\xff\"}"), "line 1, column 8"))
      << why("{\"a\": \"\xff\"}");
  EXPECT_TRUE(absl::StrContains(why("{\"a\": \"\xff\"}"), "ill-formed UTF-8 byte"));
  EXPECT_EQ(why("{\"a\": \"\xff\"}").find('\xff'), std::string::npos);
  EXPECT_TRUE(absl::StrContains(why("{\"a\" 1}"), "syntax error while parsing object separator"))
      << why("{\"a\" 1}");
  EXPECT_LE(why("{\"a\": \"" + std::string(5000, 'x') + "\\u12").size(), 400u);
  EXPECT_FALSE(ParseBody(std::string(100000, '[')).ok());
  std::string deep =
      "{\"a\":" + std::string(kMaxBodyDepth - 1, '[') + std::string(kMaxBodyDepth - 1, ']') + "}";
  EXPECT_TRUE(ParseBody(deep).ok());
  // Nesting 3 deep: brackets inside strings do not count.
  EXPECT_TRUE(JsonDeeperThan(R"({"s": "[[[[", "a": [[1]]})", 2));
  EXPECT_FALSE(JsonDeeperThan(R"({"s": "[[[[", "a": [[1]]})", 3));
}

// Objects of many keys: an ordered_json parse finds each new key by a linear scan, so their
// members are bounded per object and in all before the parser runs (a 32 MB body of keys took
// hours); arrays of many values and keys inside strings do not count.
TEST(OpenAiParams, ObjectMembersAreBounded) {
  auto object = [](int64_t keys) {
    std::string s = "{";
    for (int64_t i = 0; i < keys; ++i) absl::StrAppend(&s, i > 0 ? "," : "", "\"k", i, "\":0");
    return s + "}";
  };
  EXPECT_TRUE(ParseBody(absl::StrCat("{\"x\":", object(kMaxJsonObjectMembers), "}")).ok());
  const absl::StatusOr<Json> one = ParseBody(object(kMaxJsonObjectMembers + 1));
  EXPECT_EQ(one.status().message(), absl::StrCat("the request body has an object of more than ",
                                                 kMaxJsonObjectMembers, " members"));
  // Two objects of the most members cost twice what one may.
  const std::string half = object(kMaxJsonObjectMembers);
  const absl::StatusOr<Json> two = ParseBody(absl::StrCat("{\"a\":", half, ",\"b\":", half, "}"));
  EXPECT_NE(two.status().message().find("too many object members in all"), std::string::npos)
      << two.status();
  std::string values = "{\"a\":[0";
  for (int i = 0; i < 200000; ++i) values += ",0";
  EXPECT_TRUE(ParseBody(values + "]}").ok());
  EXPECT_TRUE(ParseBody("{\"s\":\"" + std::string(100000, ':') + "\"}").ok());
  EXPECT_TRUE(JsonTooCostly(R"({"a":{"b":1,"c":[{"d":2}]}})", 8).empty());
  EXPECT_EQ(JsonTooCostly("[[[", 2), "nests deeper than 2 levels");
}

// Request fields that each prompt and choice copies are bounded before the copies: stop token
// ids (and stop strings, on every front end: engine/stop.h) and logit_bias.
TEST(OpenAiParams, CopiedListsAreBounded) {
  std::string ids = "[1";
  for (size_t i = 0; i < kMaxStopTokenIds; ++i) ids += ",1";
  EXPECT_EQ(ErrorOf(R"({"stop_token_ids":)" + ids + "]}"),
            absl::StrCat("stop_token_ids: at most ", kMaxStopTokenIds, " ids, got ",
                         kMaxStopTokenIds + 1));
  std::string bias = "{";
  for (size_t i = 0; i <= kMaxLogitBias; ++i)
    absl::StrAppend(&bias, i > 0 ? "," : "", "\"", i, "\":1");
  EXPECT_EQ(
      ErrorOf(R"({"logit_bias":)" + bias + "}}"),
      absl::StrCat("logit_bias: at most ", kMaxLogitBias, " tokens, got ", kMaxLogitBias + 1));
  StopParams st;
  // The engine leaves room for the model's own end-of-sequence ids the front ends add.
  st.stop_token_ids.assign(kMaxStopTokenIds + 64, 0);
  EXPECT_TRUE(ValidateStopParams(st, 10).ok());
  st.stop_token_ids.push_back(0);
  EXPECT_EQ(ValidateStopParams(st, 10).message(),
            absl::StrCat("stop_token_ids: at most ", kMaxStopTokenIds + 64, " ids, got ",
                         kMaxStopTokenIds + 65));
  st.stop_token_ids.clear();
  st.stop_strings.assign(kMaxStopStrings + 1, "x");
  EXPECT_EQ(ValidateStopParams(st, 10).message(),
            absl::StrCat("stop_strings: at most ", kMaxStopStrings, " strings, got ",
                         kMaxStopStrings + 1));
  st.stop_strings = {std::string(kMaxStopStringBytes + 1, 'x')};
  EXPECT_EQ(ValidateStopParams(st, 10).message(),
            absl::StrCat("stop_strings[0] is longer than ", kMaxStopStringBytes, " bytes"));
  SamplingParams sp;
  for (size_t i = 0; i <= kMaxLogitBias; ++i) sp.logit_bias[static_cast<int32_t>(i)] = 1.0f;
  EXPECT_EQ(
      ValidateSamplingParams(sp, 100000).message(),
      absl::StrCat("logit_bias: at most ", kMaxLogitBias, " tokens, got ", kMaxLogitBias + 1));
}

// echo with logprobs (the prompt's logprobs, which scoring clients read) where they can be computed
// once from the prompt's start, refused elsewhere; vLLM's guided_grammar refused, never ignored
// (no silent unconstrained text); guided_regex taken.
TEST(OpenAiParams, EchoLogprobsAndRefusedFields) {
  // echo with logprobs gives the prompt's logprobs: one choice, no session.
  EXPECT_EQ(ErrorOf(R"({"echo":true,"logprobs":1})", Api::kCompletions), "ok");
  EXPECT_EQ(ErrorOf(R"({"echo":true,"logprobs":1,"n":2})", Api::kCompletions),
            "echo: with logprobs, n must be 1");
  EXPECT_EQ(ErrorOf(R"({"echo":true,"logprobs":1,"min_tokens":2})", Api::kCompletions), "ok");
  EXPECT_NE(ErrorOf(R"({"echo":true,"logprobs":1,"session_id":"s"})", Api::kCompletions)
                .find("echo: with logprobs, not on a session"),
            std::string::npos);
  EXPECT_EQ(ErrorOf(R"({"echo":true})", Api::kCompletions), "ok");
  // vLLM's prompt_logprobs: the same, and not streamed.
  EXPECT_EQ(ErrorOf(R"({"prompt_logprobs":2})", Api::kCompletions), "ok");
  EXPECT_EQ(ErrorOf(R"({"prompt_logprobs":0})"), "ok");
  EXPECT_EQ(ErrorOf(R"({"prompt_logprobs":21})"), "prompt_logprobs must be in [0, 20], got 21");
  EXPECT_EQ(ErrorOf(R"({"prompt_logprobs":1,"n":2})"), "prompt_logprobs: with them, n must be 1");
  EXPECT_EQ(ErrorOf(R"({"prompt_logprobs":1,"stream":true})"),
            "prompt_logprobs: not with stream (as vLLM)");
  EXPECT_EQ(ErrorOf(R"({"prompt_logprobs":1,"echo":true,"logprobs":1})", Api::kCompletions),
            "prompt_logprobs: give it or echo with logprobs (the same logprobs), not both");
  EXPECT_EQ(ErrorOf(R"({"logprobs":1})", Api::kCompletions), "ok");
  EXPECT_EQ(ErrorOf(R"({"guided_grammar":"a+"})").rfind("guided_grammar: not supported", 0), 0u);
  EXPECT_EQ(ErrorOf(R"({"guided_regex":"a+"})"), "ok");
  EXPECT_EQ(ErrorOf(R"({"guided_regex":"a\\"})"), "guided_regex: a '\\' at the end at offset 2");
}

// A non-streamed response's logprob entries are bounded: over kMaxBufferedLogprobs with the
// client's own max_tokens it is refused; with the default max_tokens (the context's room) that
// is lowered to fit instead — n 8 × top_logprobs 20 used to get a 400 for asking nothing odd.
TEST(OpenAiGeneration, BufferedLogprobsFitByLoweringOnlyTheDefault) {
  auto spec = [](int n, int top, int max_tokens, bool given) {
    GenerationSpec s;
    s.n = n;
    s.max_tokens_given = given;
    GenerateRequest r;
    r.prompt = {1, 2, 3};
    r.sampling.logprobs = top;
    r.stop.max_tokens = max_tokens;
    s.prompts = {r, r};
    return s;
  };
  GenerationSpec s = spec(8, 20, 65536, false);
  ASSERT_TRUE(FitBufferedLogprobs(s).ok());
  const int fits = static_cast<int>(kMaxBufferedLogprobs / (2 * 8 * 21));
  EXPECT_EQ(s.prompts[0].stop.max_tokens, fits);
  EXPECT_EQ(s.prompts[1].stop.max_tokens, fits);
  s = spec(8, 20, 65536, true);
  EXPECT_NE(FitBufferedLogprobs(s).message().find("stream it, or lower max_tokens"),
            absl::string_view::npos);
  EXPECT_EQ(s.prompts[0].stop.max_tokens, 65536);
  s = spec(8, 20, 100, true);  // within the bound: untouched
  ASSERT_TRUE(FitBufferedLogprobs(s).ok());
  EXPECT_EQ(s.prompts[0].stop.max_tokens, 100);
  s = spec(8, 20, 65536, false);
  s.stream = true;  // streamed: nothing buffered
  ASSERT_TRUE(FitBufferedLogprobs(s).ok());
  EXPECT_EQ(s.prompts[0].stop.max_tokens, 65536);
  s = spec(8, 20, 65536, false);
  s.min_tokens = fits + 1;  // lowering would break min_tokens: refused
  EXPECT_FALSE(FitBufferedLogprobs(s).ok());
  s = spec(1, 0, 65536, false);  // the echoed prompt alone is over: refused
  s.prompts[0].prompt_logprobs = 20;
  s.prompts[0].prompt.assign(kMaxBufferedLogprobs / 21 + 1, 7);
  EXPECT_FALSE(FitBufferedLogprobs(s).ok());
}

TEST(OpenAiChatRequest, MessagesAreNormalised) {
  absl::StatusOr<ChatRequest> r = ParseChatRequest(*ParseBody(R"({"messages":[
      {"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"user","content":"hi"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function",
        "function":{"name":"f","arguments":"{\"x\": 1}"}}]},
      {"role":"tool","tool_call_id":"c","content":"2"}],
      "tools":[{"type":"function","function":{"name":"f","parameters":{}}}],
      "chat_template_kwargs":{"enable_thinking":false}})"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages[0]["role"], "system");
  EXPECT_EQ(r->messages[0]["content"], "a\nb");
  EXPECT_EQ(r->messages[2]["tool_calls"][0]["function"]["arguments"]["x"], 1);
  EXPECT_TRUE(r->parse_tools);
  EXPECT_EQ(r->kwargs["enable_thinking"], false);
  auto err = [](const std::string& body) {
    absl::StatusOr<ChatRequest> c = ParseChatRequest(*ParseBody(body));
    return c.ok() ? std::string("ok") : std::string(c.status().message());
  };
  EXPECT_EQ(err(R"({"messages":[]})"), "messages: give at least one message");
  EXPECT_EQ(err(R"({"messages":[{"content":"x"}]})"), "messages[0].role: missing");
  EXPECT_NE(err(R"({"messages":[{"role":"robot"}]})").find("messages[0].role: 'robot'"),
            std::string::npos);
  EXPECT_NE(err(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})")
                .find("messages[0].content[0].type"),
            std::string::npos);
  EXPECT_EQ(err(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})"),
            "tool_choice: forcing a tool call needs tools");
  EXPECT_EQ(err(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"always"})"),
            "tool_choice: \"always\" is not one of \"auto\", \"none\", \"required\" or "
            "{\"type\": \"function\", \"function\": {\"name\": ...}}");
  EXPECT_EQ(
      err(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function"}})"),
      "tool_choice.function: missing");
  EXPECT_EQ(err(R"({"messages":[{"role":"user","content":"x"}],
                    "tools":[{"type":"function","function":{"name":"f","parameters":"x"}}]})"),
            "tools[0].function.parameters: expected a JSON Schema object, got a string");
  EXPECT_EQ(err(R"({"messages":[{"role":"assistant","tool_calls":[
                    {"function":{"name":"f","arguments":7}}]}]})"),
            "messages[0].tool_calls[0].function.arguments: expected a string of JSON (or an "
            "object), got an integer");
}

// ---- SSE chunks ----

// vLLM's prompt_logprobs shape: null first, then {"<id>": {logprob, rank, decoded_token}} for the
// prompt token (its own rank) and the alternatives asked for (ranks 1, 2, …; the token once).
TEST(OpenAiResponses, VllmPromptLogprobsShape) {
  FormatOptions o;
  o.prompt_logprobs = 2;
  const std::vector<PromptLogprob> entries = {{7, std::nullopt, 0, {}},
                                              {8, -0.5f, 2, {{3, -0.25f}, {8, -0.5f}, {9, -3.0f}}},
                                              {4, -1.5f, 3, {{3, -0.1f}, {5, -0.9f}}}};
  const Json got = VllmPromptLogprobs(o, entries);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(got[0].is_null());
  EXPECT_EQ(got[1].size(), 2u);  // 8 (rank 2) and 3 (rank 1): 9 is beyond the 2 asked for
  EXPECT_EQ(got[1]["8"]["rank"], 2);
  EXPECT_FLOAT_EQ(got[1]["8"]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(got[1]["3"]["rank"], 1);
  EXPECT_EQ(got[1]["3"]["decoded_token"], "token_id:3");  // no tokenizer here
  EXPECT_EQ(got[2].size(), 3u);
  EXPECT_EQ(got[2]["4"]["rank"], 3);
  EXPECT_EQ(got[2]["5"]["rank"], 2);
}

// stream_options.include_usage: every chunk has "usage", null until the last one (OpenAI);
// without it no chunk has the key. Logprobs' bytes are the token's raw bytes where the
// vocabulary's byte table has them (part of a UTF-8 character), else its text's.
TEST(OpenAiResponses, UsageNullUntilTheLastChunkAndRawLogprobBytes) {
  for (const bool include : {false, true}) {
    FormatOptions o;
    o.api = Api::kChat;
    o.stream = true;
    o.include_usage = include;
    o.logprobs = true;
    o.token_bytes = std::make_shared<const std::vector<std::optional<std::string>>>(
        std::vector<std::optional<std::string>>{std::string("\xe4\xb8"), std::nullopt});
    std::unique_ptr<Formatter> f = MakeFormatter(o, 1);
    std::string sse;
    TokenEvent e;
    e.token = 0;
    e.text = "";
    e.top_logprobs = {{1, -0.5f}};
    f->Event(0, e, nullptr, &sse);
    f->End(0, {Finish::kStop, std::nullopt, std::nullopt, std::nullopt}, nullptr, &sse);
    f->StreamTail(absl::OkStatus(), {3, 1, 0}, include, nullptr, &sse);
    const std::vector<Json> chunks = DataChunks(sse);
    ASSERT_EQ(chunks.size(), include ? 3u : 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(chunks[i].contains("usage"), include) << i;
      if (include) {
        EXPECT_TRUE(chunks[i]["usage"].is_null()) << i;
      }
    }
    if (include) {
      EXPECT_EQ(chunks[2]["usage"]["total_tokens"], 4);
    }
    const Json& lp = chunks[0]["choices"][0]["logprobs"]["content"][0];
    EXPECT_EQ(lp["bytes"], Json::array({0xe4, 0xb8}));
    EXPECT_EQ(lp["token"], "token_id:0");  // no tokenizer here
    EXPECT_EQ(lp["top_logprobs"][0]["bytes"],
              Json::array({'t', 'o', 'k', 'e', 'n', '_', 'i', 'd', ':', '1'}));
  }
}

// A session turn's stream: the finish chunk's session note and the usage chunk's say where the
// session stands after the reply ("tokens", the engine's TokenEvent::session_end), both alike.
TEST(OpenAiResponses, TheUsageChunkCarriesTheSessionsTokens) {
  for (const Api api : {Api::kChat, Api::kCompletions}) {
    FormatOptions o;
    o.api = api;
    o.stream = true;
    o.include_usage = true;
    o.session = Json{{"id", "s-1"}};
    std::unique_ptr<Formatter> f = MakeFormatter(o, 1);
    std::string sse;
    TokenEvent e;
    e.token = 4;
    e.text = "hi";
    f->Event(0, e, nullptr, &sse);
    const ChoiceEnd end{Finish::kStop, std::nullopt, std::string("\n"),
                        TokenEvent::SessionEnd{9, 4}};
    f->End(0, end, nullptr, &sse);
    f->StreamTail(absl::OkStatus(), {3, 1, 0}, true, &end, &sse);
    const std::vector<Json> chunks = DataChunks(sse);
    ASSERT_GE(chunks.size(), 2u);
    const Json& tail = chunks.back();
    EXPECT_EQ(tail["usage"]["total_tokens"], 4);
    EXPECT_EQ(tail["session"], (Json{{"id", "s-1"}, {"tokens", 9}})) << tail.dump();
    EXPECT_EQ(chunks[chunks.size() - 2]["session"], tail["session"]);
    // No end to tell (a failure before the choice ended): the note as the request gave it.
    std::string failed;
    f->StreamTail(absl::OkStatus(), {3, 0, 0}, true, nullptr, &failed);
    EXPECT_NE(failed.find(R"("session":{"id":"s-1"})"), std::string::npos) << failed;
  }
}

TEST(OpenAiResponses, ChatChunksOnePerToken) {
  FormatOptions o;
  o.api = Api::kChat;
  o.id = "chatcmpl-x";
  o.model = "m";
  o.stream = true;
  o.syntax = {true, ToolFormat::kHermes};
  o.start_in_reasoning = true;
  std::unique_ptr<Formatter> f = MakeFormatter(o, 1);
  std::string sse;
  for (const char* t : {"why", "</think>", "\n\nHi", "!"}) {
    TokenEvent e;
    e.token = 1;
    e.text = t;
    f->Event(0, e, nullptr, &sse);
  }
  f->End(0, {Finish::kStop, std::nullopt, std::nullopt, std::nullopt}, nullptr, &sse);
  const std::vector<Json> chunks = DataChunks(sse);
  ASSERT_EQ(chunks.size(), 5u);
  EXPECT_EQ(chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["reasoning_content"], "why");
  EXPECT_EQ(chunks[1]["choices"][0]["delta"], Json::object());
  EXPECT_EQ(chunks[2]["choices"][0]["delta"]["content"], "Hi");
  EXPECT_EQ(chunks[3]["choices"][0]["delta"]["content"], "!");
  EXPECT_EQ(chunks[4]["choices"][0]["finish_reason"], "stop");
}

// The non-streamed message of a chat reply of `tokens` (texts), with the reasoning syntax on (the
// reply starting in reasoning) or off.
Json ChatMessageOf(const std::vector<std::string>& tokens, bool reasoning) {
  FormatOptions o;
  o.api = Api::kChat;
  o.id = "chatcmpl-x";
  o.model = std::string("m");
  o.syntax = {reasoning, ToolFormat::kHermes};
  o.start_in_reasoning = reasoning;
  std::unique_ptr<Formatter> f = MakeFormatter(o, 1);
  for (const std::string& t : tokens) {
    TokenEvent e;
    e.token = 1;
    e.text = t;
    f->Event(0, e, nullptr, nullptr);
  }
  f->End(0, {Finish::kLength, std::nullopt, std::nullopt, std::nullopt}, nullptr, nullptr);
  return f->Response({})["choices"][0]["message"];
}

// A non-streamed chat message whose text is all reasoning (or tool calls) has content null, as
// vLLM's reasoning parsers give it; with no reasoning an empty reply is "".
TEST(OpenAiResponses, ReasoningOnlyMessagesHaveNullContent) {
  const Json thinking = ChatMessageOf({"why", " so"}, true);
  EXPECT_EQ(thinking["content"], nullptr) << thinking;
  EXPECT_EQ(thinking["reasoning_content"], "why so");
  const Json both = ChatMessageOf({"why", "</think>", "\n\nHi"}, true);
  EXPECT_EQ(both["content"], "Hi") << both;
  EXPECT_EQ(ChatMessageOf({}, false)["content"], "");
  EXPECT_EQ(ChatMessageOf({}, true)["content"], "");  // nothing at all: still ""
}

// ---- the session turn rule on the real templates ----

std::string ReadTemplate(const std::string& name) {
  std::ifstream f(std::string(LINFER_CHAT_TEMPLATES) + "/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ChatSetup LoadSetup(const std::string& name) {
  ChatSetup s;
  const std::string source = ReadTemplate(name);
  s.chat_template = *tokenizer::ChatTemplate::Parse(source);
  s.syntax = DetectSyntax(source);
  return s;
}

ChatRequest Chat(const std::string& messages, const std::string& kwargs = "{}") {
  Json body = {{"messages", Json::parse(messages)}, {"chat_template_kwargs", Json::parse(kwargs)}};
  return *ParseChatRequest(body);
}

// Turn 1 on a fresh session, a reply with reasoning, then turn 2 sent as the whole conversation
// and as the new message only: both append the same text, and the state equals the conversation
// rendered with its reasoning kept (Qwen3.6's preserve_thinking) — never a re-render.
TEST(OpenAiSessionTurns, QwenAppendsOnlyTheNewTurn) {
  for (const char* name : {"qwen3.5.jinja", "qwen3.6.jinja"}) {
    SCOPED_TRACE(name);
    ChatSetup setup = LoadSetup(name);
    const std::string sys_u1 =
        R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi?"}])";
    ChatRequest t1 = Chat(sys_u1);
    absl::StatusOr<TurnText> first = RenderTurn(setup, t1, 0, std::nullopt);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_FALSE(first->appended);
    EXPECT_TRUE(PromptOpensReasoning(first->text));
    const std::string reply = "Think.\n</think>\n\nHello.";  // generated, then <|im_end|>
    const std::string state = first->text + reply + "<|im_end|>";
    TurnRecord record = NextRecord(std::nullopt, t1, *first, 100, 7);
    ASSERT_EQ(record.digests.size(), 3u);

    ChatRequest full = Chat(R"([{"role":"system","content":"Be brief."},
        {"role":"user","content":"Hi?"},
        {"role":"assistant","content":"Hello.","reasoning_content":"Think."},
        {"role":"user","content":"More?"}])");
    absl::StatusOr<TurnText> second = RenderTurn(setup, full, 100, record);
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_TRUE(second->appended);
    EXPECT_EQ(second->history_messages, 3);
    EXPECT_EQ(second->text,
              "<|im_end|>\n<|im_start|>user\nMore?<|im_end|>\n<|im_start|>assistant\n<think>\n");
    absl::StatusOr<TurnText> only_new =
        RenderTurn(setup, Chat(R"([{"role":"user","content":"More?"}])"), 100, record);
    ASSERT_TRUE(only_new.ok());
    EXPECT_EQ(only_new->history_messages, 0);
    EXPECT_EQ(only_new->text, second->text);
    // The pending <|im_end|> is not repeated: the state continues with the rest.
    const std::string appended = state + second->text.substr(std::string("<|im_end|>").size());
    // A re-render drops the past <think> block (Qwen3.5), so the old state is not its prefix...
    absl::StatusOr<std::string> rerender = RenderChat(setup, full, full.messages, true);
    ASSERT_TRUE(rerender.ok());
    if (std::string(name) == "qwen3.5.jinja") {
      EXPECT_NE(rerender->rfind(state, 0), 0u);
    }
    // ...while the appended state is the conversation rendered with its reasoning kept.
    if (std::string(name) == "qwen3.6.jinja") {
      ChatRequest keep = full;
      keep.kwargs["preserve_thinking"] = true;
      EXPECT_EQ(*RenderChat(setup, keep, keep.messages, true), appended);
    }
    // With thinking off the appended generation prompt carries the empty think block.
    ChatRequest off =
        Chat(R"([{"role":"user","content":"More?"}])", R"({"enable_thinking":false})");
    EXPECT_EQ(RenderTurn(setup, off, 100, record)->text,
              "<|im_end|>\n<|im_start|>user\nMore?<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
              "</think>\n\n");
  }
}

// A model without tokenizer_config.json (models/tiny) names no special tokens; Mistral's template
// adds eos_token after every assistant turn, so each such turn failed ("'eos_token' is
// undefined"). The model's own ids name them; what tokenizer_config.json names stays.
TEST(OpenAiChatSetup, SpecialTokensFromTheModelsIds) {
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok =
      tokenizer::Tokenizer::FromFile(std::string(LINFER_TINY_MODEL) + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  ChatSetup setup = LoadSetup("mistral-small-3.1.jinja");
  const ChatRequest chat = Chat(R"([{"role":"user","content":"Hi"},
      {"role":"assistant","content":"Hello."},{"role":"user","content":"More?"}])");
  absl::StatusOr<std::string> before = RenderChat(setup, chat, chat.messages, true);
  ASSERT_FALSE(before.ok());
  EXPECT_TRUE(absl::StrContains(before.status().message(), "eos_token")) << before.status();
  NameMissingSpecialTokens(**tok, 0, 0, &setup);
  EXPECT_EQ(setup.special_tokens, Json::parse(R"({"bos_token":"<|endoftext|>",
      "eos_token":"<|endoftext|>"})"));
  absl::StatusOr<std::string> after = RenderChat(setup, chat, chat.messages, true);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(absl::StrContains(*after, "Hello.<|endoftext|>")) << *after;
  // Names from tokenizer_config.json are kept; ids without a token string name nothing.
  setup.special_tokens = {{"eos_token", "</s>"}};
  NameMissingSpecialTokens(**tok, 4095000, 0, &setup);
  EXPECT_EQ(setup.special_tokens, Json::parse(R"({"eos_token":"</s>"})"));
  NameMissingSpecialTokens(**tok, -1, std::nullopt, &setup);
  EXPECT_EQ(setup.special_tokens.size(), 1u);
  // A model with a tokenizer_config.json names its own (Qwen's "bos_token": null is none).
  setup.special_tokens = Json::object();
  setup.has_tokenizer_config = true;
  NameMissingSpecialTokens(**tok, 0, 0, &setup);
  EXPECT_TRUE(setup.special_tokens.empty()) << setup.special_tokens;
}

// vLLM's continue_final_message: the final message left open (the template's rendering without a
// generation prompt, cut after its text); refused with add_generation_prompt true, with a
// session, and for a final message without text. reasoning_effort "none" turns thinking off.
TEST(OpenAiChatRequest, ContinueFinalMessageAndReasoningEffort) {
  ChatSetup setup = LoadSetup("qwen3.5.jinja");
  const Json messages = Json::parse(R"([{"role":"user","content":"Name a color."},
      {"role":"assistant","content":"The color is "}])");
  absl::StatusOr<ChatRequest> r = ParseChatRequest(
      {{"messages", messages}, {"add_generation_prompt", false}, {"continue_final_message", true}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->add_generation_prompt);
  absl::StatusOr<TurnText> t = RenderTurn(setup, *r, 0, std::nullopt);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string open = "<|im_start|>assistant\n<think>\n\n</think>\n\nThe color is";
  EXPECT_EQ(t->text.substr(t->text.size() - open.size()), open) << t->text;
  EXPECT_EQ(t->text.find("<|im_end|>", t->text.find("The color")), std::string::npos);
  // continue_final_message alone implies no generation prompt.
  r = ParseChatRequest({{"messages", messages}, {"continue_final_message", true}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(RenderTurn(setup, *r, 0, std::nullopt)->text, t->text);
  EXPECT_EQ(RenderTurn(setup, *r, 5, std::nullopt)
                .status()
                .message()
                .rfind("continue_final_message: not supported with session_id", 0),
            0u);
  EXPECT_FALSE(ParseChatRequest({{"messages", messages},
                                 {"add_generation_prompt", true},
                                 {"continue_final_message", true}})
                   .ok());
  const Json empty = Json::parse(R"([{"role":"user","content":"Hi"},
      {"role":"assistant","content":"  "}])");
  r = ParseChatRequest({{"messages", empty}, {"continue_final_message", true}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(RenderTurn(setup, *r, 0, std::nullopt).status().message(),
            "messages[1]: the final message is continued, so it must have text");

  r = ParseChatRequest({{"messages", messages}, {"reasoning_effort", "none"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kwargs["enable_thinking"], false);
  EXPECT_EQ(r->kwargs["reasoning_effort"], "none");
  r = ParseChatRequest({{"messages", messages},
                        {"reasoning_effort", "none"},
                        {"chat_template_kwargs", {{"enable_thinking", true}}}});
  EXPECT_EQ(r->kwargs["enable_thinking"], true);  // the request's own kwargs win
  EXPECT_EQ(
      ParseChatRequest({{"messages", messages}, {"reasoning_effort", "max"}}).status().message(),
      "reasoning_effort: 'max' is not one of none, minimal, low, medium, high, xhigh");
}

// A history's tool call whose arguments are not a JSON object (a model does not always write
// valid JSON) is kept as given; where the template then refuses the messages, the error names
// the call's arguments.
TEST(OpenAiChatRequest, ATemplateRefusingToolCallArgumentsNamesThem) {
  ChatSetup setup = LoadSetup("qwen3.5.jinja");
  for (const char* args : {R"("not json")", R"("[1, 2]")", "null"}) {
    SCOPED_TRACE(args);
    const Json messages = Json::parse(absl::StrCat(R"([{"role":"user","content":"Hi"},
        {"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function",
          "function":{"name":"f","arguments":)",
                                                   args, R"(}}]},
        {"role":"tool","tool_call_id":"c","content":"r"}])"));
    absl::StatusOr<ChatRequest> r = ParseChatRequest({{"messages", messages}});
    ASSERT_TRUE(r.ok()) << r.status();
    const absl::Status st = RenderTurn(setup, *r, 0, std::nullopt).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(
        st.message(), "messages[1].tool_calls[0].function.arguments is not a JSON object"))
        << st;
  }
  // Arguments that are JSON text of an object render.
  const Json fine = Json::parse(R"([{"role":"user","content":"Hi"},
      {"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function",
        "function":{"name":"f","arguments":"{\"a\": 1}"}}]}])");
  EXPECT_TRUE(RenderTurn(setup, *ParseChatRequest({{"messages", fine}}), 0, std::nullopt).ok());
}

TEST(OpenAiSessionTurns, ToolResultsAndEditedHistories) {
  ChatSetup setup = LoadSetup("qwen3.5.jinja");
  const std::string u1 = R"([{"role":"user","content":"Weather?"}])";
  ChatRequest t1 = Chat(u1);
  TurnText first = *RenderTurn(setup, t1, 0, std::nullopt);
  TurnRecord record = NextRecord(std::nullopt, t1, first, 50, std::nullopt);
  // The reply was a tool call (in the state as generated); the client sends the result.
  ChatRequest result = Chat(R"([{"role":"user","content":"Weather?"},
      {"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\": \"Oslo\"}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"-3 C"}])");
  absl::StatusOr<TurnText> t = RenderTurn(setup, result, 50, record);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->history_messages, 2);
  EXPECT_EQ(t->text,
            "<|im_end|>\n<|im_start|>user\n<tool_response>\n-3 C\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n<think>\n");
  // An edited history is refused rather than appended twice.
  ChatRequest edited = Chat(R"([{"role":"user","content":"Weather?"},
      {"role":"assistant","content":"x"},{"role":"user","content":"a"},
      {"role":"user","content":"b"}])");
  TurnRecord longer = NextRecord(record, result, *t, 80, std::nullopt);
  absl::StatusOr<TurnText> e = RenderTurn(setup, edited, 80, longer);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("messages[2]: differs"), std::string::npos);
  absl::StatusOr<TurnText> same = RenderTurn(setup, t1, 50, record);
  EXPECT_TRUE(same.ok());  // one message equal to the first: a new turn asking it again
  // A stale record (the session moved elsewhere) is not used: the messages are appended.
  absl::StatusOr<TurnText> stale = RenderTurn(setup, result, 51, std::nullopt);
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(stale->history_messages, 0);
}

}  // namespace
}  // namespace linfer::openai
