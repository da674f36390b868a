// The OpenAI API's request fields parsed alone (params.cc): values, defaults, errors that name the
// field, bounds on bodies and on what each prompt and choice copies, and the buffered-logprobs
// fit (generation.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "engine/sampler.h"
#include "engine/stop.h"
#include "server/http_status.h"
#include "server/openai/generation.h"
#include "server/openai/params.h"

namespace linfer::openai {
namespace {

absl::StatusOr<CommonParams> Params(const std::string& body, Api api = Api::kChat) {
  absl::StatusOr<Json> j = ParseBody(body);
  if (!j.ok()) return j.status();
  return ParseCommonParams(*j, api, HttpRequest{});
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

}  // namespace
}  // namespace linfer::openai
