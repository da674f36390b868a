// The Responses API's pure parts: a /v1/responses body read into chat messages and parameters
// (errors naming the field), the formatter's items and named events (replayed here the way the
// official SDK's ResponseStream accumulates them: the snapshot must equal the final response),
// and the response store (LRU, owners, a long conversation chain freed without recursion).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "server/openai/response_store.h"
#include "server/openai/response_store_file.h"
#include "server/openai/responses.h"
#include "server/openai/responses_request.h"

namespace linfer::openai {
namespace {

absl::StatusOr<ResponsesRequest> Parse(const std::string& body) {
  absl::StatusOr<Json> j = ParseBody(body);
  if (!j.ok()) return j.status();
  return ParseResponsesRequest(*j);
}

std::string ErrorOf(const std::string& body) {
  absl::StatusOr<ResponsesRequest> r = Parse(body);
  return r.ok() ? "ok" : std::string(r.status().message());
}

TEST(OpenAiResponsesRequest, InputItemsBecomeChatMessages) {
  absl::StatusOr<ResponsesRequest> r = Parse(R"({"model": "m", "input": "Hi",
      "instructions": "Be brief.", "max_output_tokens": 7, "temperature": 0.5, "seed": 3})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chat.messages, Json::parse(R"([{"role": "user", "content": "Hi"}])"));
  EXPECT_EQ(r->instructions, "Be brief.");
  EXPECT_EQ(r->params.stop.max_tokens, 7);
  EXPECT_TRUE(r->params.given.max_tokens);
  EXPECT_FLOAT_EQ(r->params.sampling.temperature, 0.5f);
  EXPECT_EQ(r->params.sampling.seed, 3u);
  EXPECT_TRUE(r->store);
  EXPECT_FALSE(r->params.format);
  ASSERT_EQ(r->input_items.size(), 1u);
  EXPECT_EQ(r->input_items[0]["type"], "message");
  EXPECT_EQ(r->input_items[0]["content"][0]["type"], "input_text");
  EXPECT_EQ(r->input_items[0]["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(r->echo["instructions"], "Be brief.");
  EXPECT_EQ(r->echo["max_output_tokens"], 7);

  // A tool round trip: the calls join the assistant message before them, their arguments parsed;
  // the output is a tool message; reasoning items are left out; "developer" is "system".
  r = Parse(R"({"input": [
      {"role": "developer", "content": "sys"},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                      {"type": "input_text", "text": "b"}]},
      {"type": "reasoning", "id": "rs_1", "summary": []},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"x\": 1}"},
      {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "not json"},
      {"type": "function_call_output", "call_id": "c1", "output": "42"},
      {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "7"}]},
      {"type": "function_call", "call_id": "c3", "name": "h", "arguments": "{}"}],
      "tools": [{"type": "function", "name": "f", "description": "d",
                 "parameters": {"type": "object"}}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  const Json want = Json::parse(R"([
      {"role": "system", "content": "sys"},
      {"role": "user", "content": "a\nb"},
      {"role": "assistant", "content": "ok", "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
          {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "not json"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"},
      {"role": "tool", "tool_call_id": "c2", "content": "7"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"id": "c3", "type": "function", "function": {"name": "h", "arguments": {}}}]}])");
  EXPECT_EQ(r->chat.messages, want) << r->chat.messages.dump(1);
  EXPECT_EQ(r->chat.tools, Json::parse(R"([{"type": "function", "function":
      {"name": "f", "description": "d", "parameters": {"type": "object"}}}])"));
  EXPECT_TRUE(r->chat.parse_tools);
  EXPECT_EQ(r->input_items.size(), 9u);
  EXPECT_EQ(r->input_items[4]["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(r->input_items[2]["id"], "rs_1");  // the client's ids stay

  r = Parse(R"({"input": "x", "tool_choice": "none", "tools": [{"type": "function", "name": "f"}],
                "reasoning": {"effort": "none"}, "include": ["message.output_text.logprobs"],
                "top_logprobs": 3, "store": false, "previous_response_id": "resp_1",
                "text": {"format": {"type": "json_schema", "name": "n",
                                    "schema": {"type": "object"}}},
                "metadata": {"k": "v"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->chat.parse_tools);
  EXPECT_EQ(r->chat.kwargs["enable_thinking"], false);
  EXPECT_EQ(r->chat.kwargs["reasoning_effort"], "none");
  EXPECT_TRUE(r->params.logprobs);
  EXPECT_EQ(r->params.top_logprobs, 3);
  EXPECT_FALSE(r->store);
  EXPECT_EQ(r->previous_response_id, "resp_1");
  EXPECT_TRUE(r->params.format);
  EXPECT_EQ(r->echo["text"]["format"]["name"], "n");
  EXPECT_EQ(r->echo["metadata"]["k"], "v");
  EXPECT_EQ(r->echo["max_tool_calls"], nullptr);
  EXPECT_EQ(r->echo["reasoning"]["summary"], nullptr);
  r = Parse(R"({"input": "x", "max_tool_calls": 3, "reasoning": {"summary": "auto"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->echo["max_tool_calls"], 3);  // checked and echoed (no built-in tools here)
  EXPECT_EQ(r->echo["reasoning"]["summary"], "auto");
  // chat_template_kwargs win over reasoning.effort.
  r = Parse(R"({"input": "x", "reasoning": {"effort": "none"},
                "chat_template_kwargs": {"enable_thinking": true}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->chat.kwargs["enable_thinking"], true);
}

TEST(OpenAiResponsesRequest, ErrorsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "input: required"},
      {R"({"input": []})", "input: expected a string or a non-empty array"},
      {R"({"input": 3})", "input: expected a string"},
      {R"({"input": "x", "text": {"verbosity": "loud"}})", "text.verbosity: 'loud' is not"},
      {R"({"input": [{"role": "user", "content": "a", "id": "d"},
                     {"role": "user", "content": "b", "id": "d"}]})",
       "input[1].id: duplicate item id 'd'"},
      {R"({"input": [3]})", "input[0]: expected an object"},
      {R"({"input": [{"content": "x"}]})", "input[0].type: missing"},
      {R"({"input": [{"role": "robot", "content": "x"}]})", "input[0].role: 'robot' is not"},
      {R"({"input": [{"role": "user"}]})", "input[0].content: missing"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})",
       "input[0].content[0].type: 'input_image' is not supported"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_text"}]}]})",
       "input[0].content[0].text: missing"},
      {R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})",
       "input[0].call_id: missing"},
      {R"({"input": [{"type": "function_call_output", "call_id": "c"}]})",
       "input[0].output: missing"},
      // An output answering no call (before it), with no stored conversation to hold the call.
      {R"({"input": [{"role": "user", "content": "x"},
                     {"type": "function_call_output", "call_id": "c", "output": "1"},
                     {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]})",
       "input[1].call_id: no function call before it has the call_id 'c'"},
      {R"({"input": [{"type": "item_reference", "id": "x"}]})",
       "input[0].type: \"item_reference\""},
      {R"({"input": [{"type": "computer_call"}]})", "input[0].type: 'computer_call' is not"},
      {R"({"input": [{"type": "reasoning"}]})", "input: no message or function call output"},
      {R"({"input": "x", "tools": [{"type": "web_search"}]})", "tools[0].type: 'web_search'"},
      {R"({"input": "x", "tools": [{"type": "function"}]})", "tools[0].name: missing"},
      {R"({"input": "x", "tool_choice": "required"})",
       "tool_choice: forcing a tool call needs tools"},
      {R"({"input": "x", "tool_choice": {"type": "function", "name": "f"}})",
       "tool_choice.name: forcing a tool call needs tools"},
      {R"({"input": "x", "tool_choice": "always"})", "tool_choice: 'always' is not one of"},
      {R"({"input": "x", "tool_choice": {"type": "mcp"}})",
       "tool_choice.type: 'mcp' is not supported"},
      {R"({"input": "x", "background": true})", "background: not supported"},
      {R"({"input": "x", "conversation": "c"})", "conversation: not supported"},
      {R"({"input": "x", "prompt": {"id": "p"}})", "prompt: prompt templates"},
      {R"({"input": "x", "truncation": "auto"})", "truncation: 'auto' is not supported"},
      {R"({"input": "x", "n": 2})", "n: a response has one output"},
      {R"({"input": "x", "max_output_tokens": 0})", "max_output_tokens must be in [1,"},
      {R"({"input": "x", "temperature": -1})", "temperature must be in [0,"},
      {R"({"input": "x", "top_logprobs": 21})", "top_logprobs must be in [0, 20]"},
      {R"({"input": "x", "include": ["everything"]})", "include[0]: 'everything' is not"},
      {R"({"input": "x", "reasoning": {"effort": "max"}})", "reasoning.effort: 'max'"},
      {R"({"input": "x", "reasoning": {"summary": "long"}})",
       "reasoning.summary: 'long' is not \"auto\""},
      {R"({"input": "x", "max_tool_calls": "abc"})", "max_tool_calls"},
      {R"({"input": "x", "max_tool_calls": -1})", "max_tool_calls"},
      {R"({"input": "x", "metadata": {"k": 1}})", "metadata.k: expected a string"},
      {R"({"input": "x", "stream_options": {}})", "stream_options: only allowed"},
      {R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}})",
       "text.format.schema: missing"},
      {R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "n",
           "schema": {"type": "integer", "multipleOf": 2}}}})",
       "text.format.schema.multipleOf: not supported"},
      {R"({"input": "x", "text": {"format": {"type": "yaml"}}})", "text.format.type: 'yaml'"},
      {R"({"input": "x", "text": {"format": "json"}})", "text.format: expected an object"},
      {R"({"input": "x", "store": "yes"})", "store:"},
      {R"({"input": "x", "stream": "yes", "stream_options": {}})", "stream:"},
      {R"({"input": "x", "max_tokens": 5})",
       "max_tokens: not a Responses API field; use max_output_tokens"},
      {R"({"input": "x", "messages": []})", "messages: not a Responses API field; use input"},
      {R"({"input": "x", "response_format": {"type": "json_object"}})",
       "response_format: not a Responses API field; use text.format"},
  };
  for (const auto& [body, want] : cases) {
    const std::string got = ErrorOf(body);
    EXPECT_EQ(got.rfind(want, 0), 0u) << body << "\n  got: " << got << "\n want: " << want;
  }
  Json big = {{"input", "x"}, {"metadata", Json::object()}};
  for (int i = 0; i < 17; ++i) big["metadata"][absl::StrCat("k", i)] = "v";
  EXPECT_EQ(ParseResponsesRequest(big).status().message(), "metadata: at most 16 keys");
}

// What the store keeps of the input: typed items with ids and only the fields this server reads
// (a 25 MB field of junk is not kept); a null type is a message, as a missing one is.
// Shared code's errors in the Responses API's terms, wherever the chat name stands.
TEST(OpenAiResponsesRequest, ErrorsUseTheResponsesFieldNames) {
  const auto terms = [](absl::string_view m) {
    return std::string(ResponsesTerms(absl::InvalidArgumentError(m)).message());
  };
  EXPECT_EQ(terms("(37 in the prompt, 2047 for max_tokens)"),
            "(37 in the prompt, 2047 for max_output_tokens)");
  EXPECT_EQ(terms("(2016 held by the session, 5 in the prompt, 8 for max_tokens)"),
            "(2016 in the previous responses, 5 in the prompt, 8 for max_output_tokens)");
  EXPECT_EQ(terms("max_tokens must be in [1, 8]; n × max_tokens"),
            "max_output_tokens must be in [1, 8]; n × max_output_tokens");
  EXPECT_EQ(terms("--max_tokens_limit is 8"), "--max_tokens_limit is 8");  // another name
  EXPECT_EQ(terms("messages: give at least one"), "input: give at least one");
  EXPECT_EQ(terms("the conversation has 5 messages"), "the conversation has 5 messages");
  EXPECT_EQ(ResponsesTerms(absl::OkStatus()), absl::OkStatus());
}

TEST(OpenAiResponsesRequest, StoredItemsKeepOnlyWhatIsRead) {
  absl::StatusOr<ResponsesRequest> r = Parse(R"({"input": [
      {"type": null, "role": "user", "content": "hi", "junk": "xxxxxxxx"},
      {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "id": 7},
      {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "1"}]},
      {"type": "reasoning", "id": "rs_9", "content": [{"type": "reasoning_text", "text": "long"}]}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  const Json& items = r->input_items;
  ASSERT_EQ(items.size(), 4u);
  EXPECT_FALSE(items[0].contains("junk"));
  EXPECT_EQ(items[0]["type"], "message");
  EXPECT_EQ(items[0]["content"], Json::parse(R"([{"type": "input_text", "text": "hi"}])"));
  EXPECT_EQ(items[1]["id"].get<std::string>().rfind("fc_", 0), 0u);  // 7 is not an id
  EXPECT_EQ(items[2]["output"], "1");
  EXPECT_EQ(items[3], Json::parse(R"({"id": "rs_9", "type": "reasoning", "summary": []})"));
  Json again = Json::array();
  ASSERT_TRUE(ItemsToMessages(items, "input", &again).ok());
  EXPECT_EQ(again, r->chat.messages);
}

// Instructions and system/developer messages anywhere become one leading system message.
TEST(OpenAiResponsesRequest, SystemMessagesGoFirst) {
  const Json conversation = Json::parse(R"([{"role": "user", "content": "a"},
      {"role": "system", "content": "s1"}, {"role": "assistant", "content": "b"},
      {"role": "system", "content": "s2"}, {"role": "user", "content": "c"}])");
  EXPECT_TRUE(HasSystemMessage(conversation));
  EXPECT_EQ(WithSystemFirst(std::string("i"), conversation), Json::parse(R"([
      {"role": "system", "content": "i\n\ns1\n\ns2"}, {"role": "user", "content": "a"},
      {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}])"));
  const Json plain = Json::parse(R"([{"role": "user", "content": "a"}])");
  EXPECT_FALSE(HasSystemMessage(plain));
  EXPECT_EQ(WithSystemFirst(std::nullopt, plain), plain);
}

// ---- the formatter ----

struct Sse {
  std::vector<std::string> types;
  std::vector<Json> events;
};

Sse ReadSse(const std::string& sse) {
  Sse out;
  std::istringstream in(sse);
  std::string event;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("event: ", 0) == 0) event = line.substr(7);
    if (line.rfind("data: ", 0) == 0) {
      out.types.push_back(event);
      out.events.push_back(Json::parse(line.substr(6)));
    }
  }
  return out;
}

// What openai-node's ResponseStream does with the events (lib/responses/ResponseStream.mjs,
// accumulateResponse): the snapshot starts as response.created's response; items are pushed on
// output_item.added, parts on content_part.added, text deltas appended. Fails the test where the
// SDK would throw.
Json Accumulate(const std::vector<Json>& events) {
  Json snapshot;
  for (const Json& e : events) {
    const std::string type = e["type"];
    if (snapshot.is_null()) {
      EXPECT_EQ(type, "response.created");
      snapshot = e["response"];
      continue;
    }
    if (type == "response.output_item.added") {
      snapshot["output"].push_back(e["item"]);
    } else if (type == "response.content_part.added") {
      Json& item = snapshot["output"][e["output_index"].get<size_t>()];
      item["content"].push_back(e["part"]);
    } else if (type == "response.output_text.delta" || type == "response.reasoning_text.delta") {
      Json& item = snapshot["output"][e["output_index"].get<size_t>()];
      Json& part = item["content"][e["content_index"].get<size_t>()];
      EXPECT_EQ(part["type"],
                type == "response.output_text.delta" ? "output_text" : "reasoning_text");
      part["text"] = part["text"].get<std::string>() + e["delta"].get<std::string>();
    } else if (type == "response.function_call_arguments.delta") {
      Json& item = snapshot["output"][e["output_index"].get<size_t>()];
      EXPECT_EQ(item["type"], "function_call");
      item["arguments"] = item["arguments"].get<std::string>() + e["delta"].get<std::string>();
    }
  }
  return snapshot;
}

struct Formatted {
  Sse sse;
  Json final_response;  // on_final's
  Json whole;           // the non-streaming response
};

Formatted Format(const std::vector<std::string>& texts, Finish finish, bool logprobs = false) {
  Formatted run;
  for (bool stream : {true, false}) {
    FormatOptions o;
    o.api = Api::kResponses;
    o.id = "resp_x";
    o.model = "m";
    o.stream = stream;
    o.logprobs = logprobs;
    o.syntax = {true, ToolFormat::kHermes};
    o.start_in_reasoning = true;
    o.parse_tools = true;
    o.response_base = {{"store", true}};
    Json got;
    o.on_final = [&got](const Json& r) { got = r; };
    std::unique_ptr<Formatter> f = MakeFormatter(o, 1);
    std::string events;
    for (size_t i = 0; i < texts.size(); ++i) {
      TokenEvent e;
      e.token = static_cast<int32_t>(i);
      e.text = texts[i];
      e.logprob = -0.5f;
      f->Event(0, e, nullptr, &events);
    }
    f->End(0, {finish, std::nullopt, std::nullopt, std::nullopt}, nullptr, &events);
    const UsageTotals usage{10, static_cast<int64_t>(texts.size()), 4};
    if (stream) {
      std::string head = f->StreamHead();
      std::string tail;
      f->StreamTail(absl::OkStatus(), usage, false, nullptr, &tail);
      run.sse = ReadSse(head + events + tail);
      run.final_response = got;
    } else {
      EXPECT_TRUE(events.empty());
      run.whole = f->Response(usage);
      EXPECT_EQ(got, run.whole);
    }
  }
  return run;
}

TEST(OpenAiResponsesFormatter, ReasoningMessageAndCallsStreamAsItems) {
  const Formatted run =
      Format({"Let me ", "think", "</think>", "\n\nSure", ", calling.", "<tool_call>",
              "\n{\"name\": \"f\", ", "\"arguments\": {\"a\": 1}}\n", "</tool_call>"},
             Finish::kStop);
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  std::vector<std::string> got;
  for (const Json& e : run.sse.events) got.push_back(e["type"]);
  EXPECT_EQ(got, want);
  EXPECT_EQ(run.sse.types, got);  // "event:" names the data's type
  for (size_t i = 0; i < run.sse.events.size(); ++i) {
    EXPECT_EQ(run.sse.events[i]["sequence_number"], i) << got[i];
  }
  const Json& r = run.final_response;
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["id"], "resp_x");
  EXPECT_EQ(r["store"], true);
  ASSERT_EQ(r["output"].size(), 3u);
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Let me think");
  EXPECT_EQ(r["output"][1]["type"], "message");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Sure, calling.");
  EXPECT_EQ(r["output"][2]["type"], "function_call");
  EXPECT_EQ(r["output"][2]["name"], "f");
  EXPECT_EQ(Json::parse(r["output"][2]["arguments"].get<std::string>()), Json({{"a", 1}}));
  EXPECT_FALSE(r["output"][2]["call_id"].get<std::string>().empty());
  EXPECT_EQ(r["usage"]["input_tokens"], 10);
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(r["usage"]["output_tokens"], 9);
  EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], 3);
  // What the SDK accumulates is the final response's output (ids and all).
  Json snapshot = Accumulate(run.sse.events);
  for (Json& item : snapshot["output"]) item["status"] = "completed";
  EXPECT_EQ(snapshot["output"], r["output"]);
  // Streaming or not, the same response but for the random item ids.
  ASSERT_EQ(run.whole["output"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    Json a = r["output"][i], b = run.whole["output"][i];
    a.erase("id"), b.erase("id"), a.erase("call_id"), b.erase("call_id");
    EXPECT_EQ(a, b) << i;
  }
}

// Items closed because the next one opened are completed, whatever ends the reply; the item the
// reply was cut in is incomplete. A call's tokens carry no message logprobs.
TEST(OpenAiResponsesFormatter, OnlyTheItemCutShortIsIncomplete) {
  const Formatted run = Format({"r", "</think>", "\n\nText.", "<tool_call>", "\n{\"name\": \"f\", ",
                                "\"arguments\": {\"a\": "},
                               Finish::kLength, true);
  const Json& out = run.final_response["output"];
  ASSERT_EQ(out.size(), 3u) << out.dump();
  EXPECT_EQ(out[0]["status"], "completed");
  EXPECT_EQ(out[1]["status"], "completed");
  EXPECT_EQ(out[2]["status"], "incomplete");
  EXPECT_EQ(out[1]["content"][0]["logprobs"].size(), 1u);  // "Text." only
  for (const Json& e : run.sse.events) {
    if (e["type"] == "response.output_item.done") {
      EXPECT_EQ(e["item"]["status"], e["output_index"] == 2 ? "incomplete" : "completed");
    }
  }
}

TEST(OpenAiResponsesFormatter, CancelledAndDeadlineEndsAreFailures) {
  for (Finish f : {Finish::kCancelled, Finish::kDeadline}) {
    const Formatted run = Format({"</think>", "a"}, f);
    const Json& r = run.final_response;
    EXPECT_EQ(r["status"], "failed");
    EXPECT_EQ(r["error"]["code"], f == Finish::kDeadline ? "deadline_exceeded" : "cancelled");
    EXPECT_EQ(run.sse.events.back()["type"], "response.failed");
    EXPECT_EQ(r["output"][0]["status"], "incomplete");
  }
}

TEST(OpenAiResponsesFormatter, LengthIsIncompleteAndLogprobsFollowTheText) {
  const Formatted run = Format({"</think>", "A", "B", "C"}, Finish::kLength, true);
  const Json& r = run.final_response;
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(run.sse.events.back()["type"], "response.incomplete");
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "ABC");
  // One logprob per token of the message's text (not the reasoning's closing tag), each on the
  // delta that carried its text.
  EXPECT_EQ(r["output"][0]["content"][0]["logprobs"].size(), 3u);
  size_t on_deltas = 0;
  for (const Json& e : run.sse.events) {
    if (e["type"] == "response.output_text.delta") on_deltas += e["logprobs"].size();
  }
  EXPECT_EQ(on_deltas, 3u);
}

TEST(OpenAiResponsesFormatter, AFailureEndsTheStreamWithResponseFailed) {
  FormatOptions o;
  o.api = Api::kResponses;
  o.id = "resp_y";
  o.stream = true;
  bool stored = false;
  o.on_final = [&stored](const Json&) { stored = true; };
  std::unique_ptr<Formatter> f = MakeFormatter(o, 1);
  std::string sse;
  TokenEvent e;
  e.token = 1;
  e.text = "partial";
  f->Event(0, e, nullptr, &sse);
  f->StreamTail(absl::ResourceExhaustedError("the server is overloaded"), {3, 1, 0}, false, nullptr,
                &sse);
  const Sse got = ReadSse(f->StreamHead() + sse);
  ASSERT_FALSE(got.events.empty());
  const Json& last = got.events.back();
  EXPECT_EQ(last["type"], "response.failed");
  EXPECT_EQ(last["response"]["status"], "failed");
  EXPECT_EQ(last["response"]["error"]["code"], "rate_limit_exceeded");
  EXPECT_EQ(last["response"]["error"]["message"], "the server is overloaded");
  EXPECT_FALSE(stored);
  EXPECT_EQ(sse.find("[DONE]"), std::string::npos);
}

// ---- the store ----

TEST(OpenAiResponseStore, LeastRecentlyUsedGoFirstAndOwnersAreApart) {
  ResponseStore store(2);
  auto put = [&](const std::string& owner, const std::string& id) {
    StoredResponse r;
    r.id = id;
    r.session_id = "s-" + id;
    return store.Put(owner, std::move(r));
  };
  EXPECT_TRUE(put("alice", "a").empty());
  EXPECT_TRUE(put("bob", "b").empty());
  EXPECT_EQ(store.Get("bob", "a"), nullptr);  // another owner's id
  ASSERT_NE(store.Get("bob", "b"), nullptr);  // b is now the most recent
  // Over the capacity: the owner holding the most (alice, 2) loses her least recently used.
  std::vector<OwnedResponse> gone = put("alice", "c");
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].first, "alice");
  EXPECT_EQ(gone[0].second->id, "a");
  EXPECT_EQ(gone[0].second->session_id, "s-a");
  EXPECT_EQ(store.Get("alice", "a"), nullptr);
  ASSERT_NE(store.Get("bob", "b"), nullptr);
  gone = put("bob", "d");  // 1 each, then bob 2: bob's least recently used, b
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].first, "bob");
  EXPECT_EQ(gone[0].second->id, "b");
  ASSERT_NE(store.Get("alice", "c"), nullptr);
  ASSERT_TRUE(store
                  .Put("alice",
                       [] {
                         StoredResponse r;
                         r.id = "a";
                         return r;
                       }())
                  .size() == 1u);  // a tie (1 and 1, then alice 2): alice's c goes
  EXPECT_EQ(store.Get("alice", "c"), nullptr);
  std::shared_ptr<const StoredResponse> erased = store.Erase("alice", "a");
  ASSERT_NE(erased, nullptr);
  EXPECT_EQ(erased->id, "a");
  EXPECT_EQ(store.Erase("alice", "a"), nullptr);
  ResponseStore none(0);  // keeps nothing: what it is given comes straight back
  StoredResponse r;
  r.id = "x";
  EXPECT_EQ(none.Put("alice", std::move(r)).size(), 1u);
}

// One key filling the store with large responses pushes out its own, never another key's: the
// byte budget evicts from the owner holding the most bytes.
TEST(OpenAiResponseStore, OneKeysBytesPushOutOnlyItsOwn) {
  ResponseStore store(100, 200'000);
  auto put = [&](const std::string& owner, const std::string& id, size_t bytes) {
    StoredResponse r;
    r.id = id;
    r.response = std::string(bytes, 'x');
    return store.Put(owner, std::move(r));
  };
  EXPECT_TRUE(put("alice", "a1", 1000).empty());
  EXPECT_TRUE(put("alice", "a2", 1000).empty());
  for (int i = 0; i < 20; ++i) {
    for (const OwnedResponse& gone : put("mallory", absl::StrCat("m", i), 60'000)) {
      EXPECT_EQ(gone.first, "mallory") << gone.second->id;
    }
  }
  EXPECT_NE(store.Get("alice", "a1"), nullptr);
  EXPECT_NE(store.Get("alice", "a2"), nullptr);
  EXPECT_NE(store.Get("mallory", "m19"), nullptr);
}

// The memory a parsed value takes, not its text's length: many small members cost several times
// their text (a store budgeted by the text held ≈ 6 times its budget).
TEST(OpenAiResponseStore, JsonMemoryCountsNodesNotText) {
  Json items = Json::array();
  for (int i = 0; i < 10000; ++i) items.push_back({{"type", "reasoning"}});
  const int64_t text = static_cast<int64_t>(Dump(items).size());
  EXPECT_GT(JsonMemoryBytes(items), 4 * text);
  const std::string big(1 << 20, 'x');
  const int64_t one_string = JsonMemoryBytes(Json(big));
  EXPECT_GE(one_string, int64_t{1} << 20);
  EXPECT_LT(one_string, (int64_t{1} << 20) + 256);
}

TEST(OpenAiResponseStore, ABytesBudgetAndTakingStatesBack) {
  ResponseStore store(100, 3000);
  auto put = [&](const std::string& id, size_t bytes) {
    StoredResponse r;
    r.id = id;
    r.session_id = "s-" + id;
    r.response = std::string(bytes, 'x');
    return store.Put("alice", std::move(r));
  };
  EXPECT_TRUE(put("a", 1000).empty());
  EXPECT_TRUE(put("b", 1000).empty());
  std::vector<OwnedResponse> gone = put("c", 1500);  // 3500 > 3000
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].second->id, "a");
  EXPECT_EQ(put("huge", 5000).size(), 3u);  // everything, itself included
  EXPECT_EQ(store.Get("alice", "huge"), nullptr);
  put("d", 10);
  put("e", 10);
  EXPECT_EQ(store.TakeOldestSession("alice", "d"), "s-e");  // d is kept
  EXPECT_EQ(store.TakeOldestSession("alice", "d"), "");
  EXPECT_EQ(store.TakeOldestSession("bob", ""), "");
  ASSERT_NE(store.Get("alice", "e"), nullptr);  // the response stays, without its state
  EXPECT_EQ(store.Get("alice", "e")->session_id, "");
  EXPECT_EQ(store.Close().size(), 2u);
  EXPECT_EQ(put("f", 10).size(), 1u);  // a closed store keeps nothing
  EXPECT_EQ(store.Get("alice", "f"), nullptr);
}

// A conversation continued response after response keeps every earlier turn alive, its
// responses pushed out or not: the budget counts the turns alive, so a chain past it is pushed
// out whole (its memory grew without bound while the store said it held three responses).
TEST(OpenAiResponseStore, TurnsKeptAliveByAChainCountInTheBudget) {
  constexpr int64_t kBudget = 400'000;
  ResponseStore store(3, kBudget);
  std::vector<std::weak_ptr<const ConversationTurn>> turns;
  auto live_turn_bytes = [&] {
    int64_t n = 0;
    for (const auto& w : turns) {
      if (auto t = w.lock()) n += JsonMemoryBytes(t->messages);
    }
    return n;
  };
  auto put = [&](const std::string& owner, const std::string& id,
                 std::shared_ptr<const ConversationTurn> previous) {
    auto turn = std::make_shared<ConversationTurn>();
    turn->previous = std::move(previous);
    turn->messages = Json::array({{{"role", "user"}, {"content", std::string(50'000, 'x')}}});
    turns.push_back(turn);
    StoredResponse r;
    r.id = id;
    r.session_id = "s-" + id;
    r.turn = std::move(turn);
    return store.Put(owner, std::move(r));
  };
  EXPECT_TRUE(put("alice", "a", nullptr).empty());
  std::shared_ptr<const ConversationTurn> last;
  int64_t most_stored = 0;
  for (int i = 0; i < 30; ++i) {
    for (const OwnedResponse& gone : put("mallory", absl::StrCat("m", i), last)) {
      EXPECT_EQ(gone.first, "mallory") << gone.second->id;
      EXPECT_EQ(gone.second->session_id, "s-" + gone.second->id);
      EXPECT_EQ(gone.second->turn, nullptr);  // freed in the store, not handed back
    }
    std::shared_ptr<const StoredResponse> r = store.Get("mallory", absl::StrCat("m", i));
    last = r != nullptr ? r->turn : nullptr;  // a client continues the newest, if kept
    const auto [count, bytes] = store.Size();
    EXPECT_LE(bytes, kBudget) << i;
    EXPECT_LE(live_turn_bytes(), kBudget) << i << ": turns alive beyond the budget";
    EXPECT_GE(bytes, live_turn_bytes()) << i << ": the store counts every turn alive";
    most_stored = std::max(most_stored, count);
  }
  EXPECT_NE(store.Get("alice", "a"), nullptr);  // another key's response stays
  EXPECT_EQ(most_stored, 3);
  last.reset();
  EXPECT_TRUE(store.Close().size() >= 1u);
  EXPECT_EQ(live_turn_bytes(), 0);
}

// What the budget counts is what the store reaches: a turn a request in flight still holds (the
// response it continues), or a file's responses held while they are put back, is not the
// store's to free, so it pushes nothing out (it emptied the store: another key's response and
// the one just put went, and a restore put back none).
TEST(OpenAiResponseStore, TurnsHeldOutsideTheStorePushNothingOut) {
  auto response = [](const std::string& id, size_t bytes,
                     std::shared_ptr<const ConversationTurn> previous) {
    auto turn = std::make_shared<ConversationTurn>();
    turn->previous = std::move(previous);
    turn->messages = Json::array({{{"role", "user"}, {"content", std::string(bytes, 'x')}}});
    StoredResponse r;
    r.id = id;
    r.session_id = "s-" + id;
    r.turn = std::move(turn);
    return r;
  };
  ResponseStore store(100, 400'000);
  EXPECT_TRUE(store.Put("alice", response("a1", 150'000, nullptr)).empty());
  EXPECT_TRUE(store.Put("alice", response("a2", 150'000, nullptr)).empty());
  // Both being continued: their turns are held by the requests.
  std::shared_ptr<const ConversationTurn> held1 = store.Get("alice", "a1")->turn;
  std::shared_ptr<const ConversationTurn> held2 = store.Get("alice", "a2")->turn;
  EXPECT_TRUE(store.Put("carol", response("c1", 28'000, nullptr)).empty());
  EXPECT_NE(store.Get("carol", "c1"), nullptr);
  // a1's continuation ends: 450 KB reached; alice's least recently used go until it fits (a1
  // itself frees only its JSON: a3 reaches its turn), never carol's.
  std::vector<OwnedResponse> gone = store.Put("alice", response("a3", 150'000, held1));
  ASSERT_EQ(gone.size(), 2u);
  EXPECT_EQ(gone[0].second->id, "a1");
  EXPECT_EQ(gone[1].second->id, "a2");
  EXPECT_NE(store.Get("carol", "c1"), nullptr);
  EXPECT_NE(store.Get("alice", "a3"), nullptr);
  EXPECT_LE(store.Size().second, 400'000);
  EXPECT_GE(store.Size().second, 328'000);  // a1's and a3's turns, c1's
  // A restore: every response read back is held until all are put.
  ResponseStore restored(100, 400'000);
  std::vector<StoredResponse> loaded;
  for (int i = 0; i < 10; ++i) loaded.push_back(response(absl::StrCat("r", i), 30'000, nullptr));
  for (const StoredResponse& r : loaded) EXPECT_TRUE(restored.Put("alice", r).empty()) << r.id;
  EXPECT_EQ(restored.Size().first, 10);
}

TEST(OpenAiResponseStore, ConversationsChainAndLongChainsFree) {
  auto first = std::make_shared<ConversationTurn>();
  first->messages = Json::parse(R"([{"role": "user", "content": "1"},
                                    {"role": "assistant", "content": "2"}])");
  auto second = std::make_shared<ConversationTurn>();
  second->previous = first;
  second->messages = Json::parse(R"([{"role": "user", "content": "3"}])");
  auto branch = std::make_shared<ConversationTurn>();  // another continuation of `first`
  branch->previous = first;
  branch->messages = Json::parse(R"([{"role": "user", "content": "4"}])");
  EXPECT_EQ(ConversationMessages(second).size(), 3u);
  EXPECT_EQ(ConversationMessages(second)[2]["content"], "3");
  EXPECT_EQ(ConversationMessages(branch)[2]["content"], "4");
  first.reset();
  second.reset();
  EXPECT_EQ(ConversationMessages(branch).size(), 3u);  // the shared turn lives on
  // A chain a million turns long is freed without a million nested destructors.
  std::shared_ptr<ConversationTurn> chain;
  for (int i = 0; i < 1000000; ++i) {
    auto t = std::make_shared<ConversationTurn>();
    t->previous = std::move(chain);
    chain = std::move(t);
  }
  chain.reset();
}

// The file a drain writes: what comes back is what went in, a turn two responses share is
// written once and shared again; files it did not write are DataLoss naming the file.
TEST(OpenAiResponseStore, FilesRoundTripAndRefuseWhatTheyDidNotWrite) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/responses_round_trip.json";
  auto root = std::make_shared<ConversationTurn>();
  root->messages = Json::parse(R"([{"role": "user", "content": "1"}])");
  std::vector<OwnedResponse> in;
  for (int i = 0; i < 2; ++i) {
    auto turn = std::make_shared<ConversationTurn>();
    turn->previous = root;
    turn->messages = Json::array({{{"role", "user"}, {"content", absl::StrCat("b", i)}}});
    StoredResponse r;
    r.id = absl::StrCat("resp_", i);
    r.response = {{"id", r.id}, {"output", Json::array()}};
    r.input_items = Json::array({{{"id", "msg_1"}, {"type", "message"}}});
    r.turn = turn;
    r.instructions = i == 0 ? std::optional<std::string>("be brief") : std::nullopt;
    r.tools = i == 0 ? Json::array({{{"type", "function"}}}) : Json();
    r.session_id = i == 0 ? "resp_0" : "";
    r.position = 40 + i;
    r.pending = i == 0 ? std::optional<int32_t>(7) : std::nullopt;
    in.emplace_back(i == 0 ? "alice" : "bob", std::make_shared<const StoredResponse>(r));
  }
  ASSERT_TRUE(SaveResponses(path, in).ok());
  absl::StatusOr<std::vector<OwnedResponse>> out = LoadResponses(path, int64_t{1} << 30);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const StoredResponse& a = *in[i].second;
    const StoredResponse& b = *(*out)[i].second;
    EXPECT_EQ((*out)[i].first, in[i].first);
    EXPECT_EQ(b.id, a.id);
    EXPECT_EQ(b.response, a.response);
    EXPECT_EQ(b.input_items, a.input_items);
    EXPECT_EQ(b.instructions, a.instructions);
    EXPECT_EQ(b.tools, a.tools);
    EXPECT_EQ(b.session_id, a.session_id);
    EXPECT_EQ(b.position, a.position);
    EXPECT_EQ(b.pending, a.pending);
    EXPECT_EQ(ConversationMessages(b.turn), ConversationMessages(a.turn));
  }
  EXPECT_EQ((*out)[0].second->turn->previous, (*out)[1].second->turn->previous);  // shared
  EXPECT_TRUE(
      absl::IsNotFound(LoadResponses(dir + "/no_such_file.json", int64_t{1} << 30).status()));
  for (const char* bad : {"", "[]", "{\"version\": 2}", "{\"version\": 1, \"turns\": {}}",
                          "{\"version\": 1, \"turns\": [{\"previous\": 0, \"messages\": []}], "
                          "\"responses\": []}",
                          "{\"version\": 1, \"turns\": [], \"responses\": [{\"owner\": 1}]}",
                          "{\"version\": 1, \"turns\": [], \"responses\": [{\"owner\": \"a\", "
                          "\"id\": \"r\", \"session_id\": \"\", \"turn\": 3, \"position\": 0}]}"}) {
    ASSERT_TRUE(WriteFileAtomic(path, bad).ok());
    absl::Status st = LoadResponses(path, int64_t{1} << 30).status();
    EXPECT_TRUE(absl::IsDataLoss(st)) << bad << ": " << st;
    EXPECT_NE(st.message().find(path), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace linfer::openai
