// Anthropic's Messages API, the pure parts: a /v1/messages body read into chat messages and
// parameters (errors naming the field), and the formatter's content blocks and events replayed
// the way the official SDK's MessageStream accumulates them (lib/MessageStream.mjs): the
// snapshot must equal the non-streamed message.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "server/openai/messages_api.h"
#include "server/openai/messages_request.h"

namespace linfer::openai {
namespace {

absl::StatusOr<MessagesRequest> Parse(const std::string& body, bool count_only = false) {
  absl::StatusOr<Json> j = ParseBody(body);
  if (!j.ok()) return j.status();
  return ParseMessagesRequest(*j, count_only);
}

TEST(AnthropicMessagesRequest, BlocksBecomeChatMessages) {
  absl::StatusOr<MessagesRequest> r = Parse(R"({"model": "m", "max_tokens": 9,
      "system": [{"type": "text", "text": "Be"}, {"type": "text", "text": "brief."}],
      "stop_sequences": ["END"], "temperature": 0.5, "top_k": 3,
      "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
      "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                          {"type": "text", "text": "Calling."},
                                          {"type": "tool_use", "id": "t1", "name": "f",
                                           "input": {"a": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                                     {"type": "tool_result", "tool_use_id": "t2", "is_error": true,
                                      "content": [{"type": "text", "text": "boom"}]},
                                     {"type": "text", "text": "Thanks."}]}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  const Json want = Json::parse(R"([
      {"role": "system", "content": "Be\nbrief."},
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Calling.", "reasoning_content": "hm", "tool_calls": [
          {"id": "t1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
      {"role": "tool", "tool_call_id": "t1", "content": "42"},
      {"role": "tool", "tool_call_id": "t2", "content": "Error: boom"},
      {"role": "user", "content": "Thanks."}])");
  EXPECT_EQ(r->chat.messages, want) << r->chat.messages.dump(1);
  EXPECT_EQ(r->chat.tools, Json::parse(R"([{"type": "function", "function":
      {"name": "f", "parameters": {"type": "object"}, "description": "d"}}])"));
  EXPECT_TRUE(r->chat.parse_tools);
  EXPECT_EQ(r->chat.kwargs["enable_thinking"], false);  // no thinking unless asked
  EXPECT_EQ(r->params.stop.max_tokens, 9);
  EXPECT_EQ(r->params.stop.stop_strings, std::vector<std::string>{"END"});
  EXPECT_EQ(r->params.sampling.top_k, 3);

  r = Parse(R"({"max_tokens": 1, "thinking": {"type": "enabled", "budget_tokens": 1024},
                "tool_choice": {"type": "none"}, "tools": [{"name": "f", "input_schema": {}}],
                "messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chat.kwargs["enable_thinking"], true);
  EXPECT_FALSE(r->chat.parse_tools);
  r = Parse(R"({"messages": [{"role": "user", "content": "x"}],
                "chat_template_kwargs": {"enable_thinking": true}})",
            true);
  ASSERT_TRUE(r.ok()) << r.status();  // count_tokens: no max_tokens
  EXPECT_EQ(r->chat.kwargs["enable_thinking"], true);
}

// A final assistant message with nothing in it is no prefill (Anthropic's API takes it); the
// request's own index of its last message is kept for errors about it.
TEST(AnthropicMessagesRequest, AnEmptyFinalAssistantMessageIsNoPrefill) {
  for (const char* content : {R"("")", "[]"}) {
    absl::StatusOr<MessagesRequest> r =
        Parse(absl::StrCat(R"({"max_tokens": 1, "system": "s", "messages": [
                {"role": "user", "content": "x"}, {"role": "assistant", "content": )",
                           content, "}]}"));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->chat.messages.size(), 2u) << content;  // system, user
    EXPECT_EQ(r->chat.messages.back()["role"], "user");
    EXPECT_EQ(r->final_message, "messages[0]");  // the last message left
  }
  absl::StatusOr<MessagesRequest> r = Parse(R"({"max_tokens": 1, "messages": [
      {"role": "user", "content": "x"}, {"role": "assistant", "content": "I am"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chat.messages.back()["content"], "I am");  // a prefill stays
  // After the empty one goes, the assistant message before it is the prefill errors name.
  r = Parse(R"({"max_tokens": 1, "messages": [{"role": "user", "content": "x"},
      {"role": "assistant", "content": "Hi"}, {"role": "assistant", "content": ""}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chat.messages.back()["content"], "Hi");
  EXPECT_EQ(r->final_message, "messages[1]");
}

TEST(AnthropicMessagesRequest, ErrorsNameTheField) {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{" + m + "}", "max_tokens: required"},
      {R"({"max_tokens": 1})", "messages: give at least one message"},
      {R"({"max_tokens": 1, "messages": [{"role": "system", "content": "x"}]})",
       "messages[0].role: 'system' is not \"user\" or \"assistant\""},
      {R"({"max_tokens": 1, "messages": [{"role": "user"}]})", "messages[0].content: missing"},
      {R"({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "image"}]}]})",
       "messages[0].content[0].type: 'image' is not supported"},
      {R"({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "tool_use",
          "id": "t", "name": "f"}]}]})",
       "messages[0].content[0].type: 'tool_use' blocks go in assistant messages, not user ones"},
      {R"({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}, {"role": "assistant",
          "content": [{"type": "tool_result", "tool_use_id": "t"}]}]})",
       "messages[1].content[0].type: 'tool_result' blocks go in user messages, not assistant "
       "ones"},
      {R"({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})",
       "messages[0].content[0].tool_use_id: missing"},
      {R"({"max_tokens": 1, "system": 5, )" + m + "}", "system: expected a string"},
      {R"({"max_tokens": 0, )" + m + "}", "max_tokens must be in [1,"},
      {R"({"max_tokens": 1, "stop_sequences": 5, )" + m + "}", "stop_sequences: expected"},
      {R"({"max_tokens": 1, "stop_sequences": "x", )" + m + "}", "stop_sequences: expected"},
      {R"({"max_tokens": 1, "temperature": 2, )" + m + "}", "temperature: must be in [0, 1]"},
      {R"({"max_tokens": 1, "tools": [{"type": "web_search_20250305", "name": "w"}], )" + m + "}",
       "tools[0].type: 'web_search_20250305' is not supported"},
      {R"({"max_tokens": 1, "tools": [{"name": "f"}], )" + m + "}",
       "tools[0].input_schema: missing"},
      {R"({"max_tokens": 1, "tool_choice": {"type": "any"}, )" + m + "}",
       "tool_choice: forcing a tool call needs tools"},
      {R"({"max_tokens": 1, "tool_choice": {"type": "some"}, )" + m + "}",
       "tool_choice.type: 'some' is not one of"},
      {R"({"max_tokens": 1, "thinking": {"type": "maybe"}, )" + m + "}",
       "thinking.type: 'maybe' is not"},
      {R"({"max_tokens": 1, "mcp_servers": [], )" + m + "}", "mcp_servers: not supported"},
      // an empty user message used to leave nothing to render: the server crashed on it
      {R"({"max_tokens": 1, "messages": [{"role": "user", "content": []}]})",
       "messages[0].content: give at least one content block"},
      {R"({"max_tokens": 1, "system": "s", "messages": [{"role": "user", "content": []}]})",
       "messages[0].content: give at least one content block"},
  };
  for (const auto& [body, want] : cases) {
    absl::StatusOr<MessagesRequest> r = Parse(body);
    const std::string got = r.ok() ? "ok" : std::string(r.status().message());
    EXPECT_EQ(got.rfind(want, 0), 0u) << body << "\n  got: " << got << "\n want: " << want;
  }
}

// ---- the formatter ----

struct Replayed {
  std::vector<std::string> types;
  Json snapshot;  // MessageStream's accumulation
  Json message;   // the non-streamed response
};

Replayed Replay(const std::vector<std::string>& texts, const ChoiceEnd& end,
                bool first_tool_call_only = false) {
  Replayed out;
  for (bool stream : {true, false}) {
    FormatOptions o;
    o.first_tool_call_only = first_tool_call_only;
    o.api = Api::kMessages;
    o.id = "msg_x";
    o.model = "m";
    o.stream = stream;
    o.syntax = {true, ToolFormat::kHermes};
    o.start_in_reasoning = true;
    o.parse_tools = true;
    o.response_base = {{"input_tokens", 10}};
    std::unique_ptr<Formatter> f = MakeMessagesFormatter(o);
    std::string sse;
    for (const std::string& t : texts) {
      TokenEvent e;
      e.token = 1;
      e.text = t;
      f->Event(0, e, nullptr, &sse);
    }
    f->End(0, end, nullptr, &sse);
    const UsageTotals usage{10, static_cast<int64_t>(texts.size()), 4};
    if (!stream) {
      out.message = f->Response(usage);
      continue;
    }
    f->StreamTail(absl::OkStatus(), usage, false, nullptr, &sse);
    std::istringstream in(f->StreamHead() + sse);
    std::string event;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("event: ", 0) == 0) event = line.substr(7);
      if (line.rfind("data: ", 0) != 0) continue;
      const Json e = Json::parse(line.substr(6));
      EXPECT_EQ(e["type"], event);
      out.types.push_back(event);
      if (event == "message_start") {
        out.snapshot = e["message"];
      } else if (event == "content_block_start") {
        out.snapshot["content"].push_back(e["content_block"]);
      } else if (event == "content_block_delta") {
        Json& b = out.snapshot["content"][e["index"].get<size_t>()];
        const Json& d = e["delta"];
        if (d["type"] == "text_delta")
          b["text"] = b["text"].get<std::string>() + d["text"].get<std::string>();
        if (d["type"] == "thinking_delta") {
          b["thinking"] = b["thinking"].get<std::string>() + d["thinking"].get<std::string>();
        }
        if (d["type"] == "input_json_delta") {
          b["json"] = b.value("json", std::string()) + d["partial_json"].get<std::string>();
        }
      } else if (event == "content_block_stop") {
        Json& b = out.snapshot["content"][e["index"].get<size_t>()];
        if (b.contains("json")) {
          b["input"] = Json::parse(b["json"].get<std::string>());
          b.erase("json");
        }
      } else if (event == "message_delta") {
        out.snapshot["stop_reason"] = e["delta"]["stop_reason"];
        out.snapshot["stop_sequence"] = e["delta"]["stop_sequence"];
        for (const auto& [k, v] : e["usage"].items()) out.snapshot["usage"][k] = v;
      }
    }
  }
  return out;
}

TEST(AnthropicMessagesFormatter, BlocksStreamAsTheSdkRebuildsThem) {
  const Replayed r =
      Replay({"Let me ", "think", "</think>", "\n\nSure.", "<tool_call>", "\n{\"name\": \"f\", ",
              "\"arguments\": {\"a\": 1}}\n", "</tool_call>"},
             {Finish::kStop, 7, std::nullopt, std::nullopt});
  const std::vector<std::string> want = {
      "message_start",       "content_block_start", "content_block_delta", "content_block_delta",
      "content_block_stop",  "content_block_start", "content_block_delta", "content_block_stop",
      "content_block_start", "content_block_delta", "content_block_stop",  "message_delta",
      "message_stop"};
  EXPECT_EQ(r.types, want);
  const Json& m = r.message;
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["stop_reason"], "tool_use");
  ASSERT_EQ(m["content"].size(), 3u);
  EXPECT_EQ(m["content"][0]["thinking"], "Let me think");
  EXPECT_EQ(m["content"][1]["text"], "Sure.");
  EXPECT_EQ(m["content"][2]["name"], "f");
  EXPECT_EQ(m["content"][2]["input"], Json({{"a", 1}}));
  EXPECT_EQ(m["usage"]["input_tokens"], 6);  // 10, of which 4 were read from a saved state
  EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 4);
  EXPECT_EQ(m["usage"]["output_tokens"], 8);
  Json snapshot = r.snapshot, message = m;
  for (Json* j : {&snapshot, &message}) (*j)["content"][2].erase("id");
  EXPECT_EQ(snapshot, message);
}

// tool_choice.disable_parallel_tool_use: one tool_use block, the first, streamed or not.
TEST(AnthropicMessagesFormatter, DisabledParallelToolUseKeepsTheFirstCall) {
  const std::vector<std::string> texts = {
      "</think>", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>"};
  const Replayed both = Replay(texts, {Finish::kStop, 7, std::nullopt, std::nullopt});
  EXPECT_EQ(both.message["content"].size(), 2u);
  const Replayed one = Replay(texts, {Finish::kStop, 7, std::nullopt, std::nullopt}, true);
  ASSERT_EQ(one.message["content"].size(), 1u);
  EXPECT_EQ(one.message["content"][0]["name"], "f");
  ASSERT_EQ(one.snapshot["content"].size(), 1u);
  EXPECT_EQ(one.snapshot["content"][0]["name"], "f");
  absl::StatusOr<MessagesRequest> r = Parse(R"({"max_tokens": 1,
      "messages": [{"role": "user", "content": "x"}],
      "tools": [{"name": "f", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "auto", "disable_parallel_tool_use": true}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->chat.parallel_tool_calls);  // with "auto" too, not only "any"
}

// A tool_use input is the object the model wrote, or one written as a JSON string; anything else
// is {} — the same streamed (one input_json_delta as the block closes) and whole.
TEST(AnthropicMessagesFormatter, ToolInputsAreObjectsStreamedOrNot) {
  const std::vector<std::pair<std::string, Json>> cases = {{R"({"a": 1})", Json({{"a", 1}})},
                                                           {R"("{\"a\": 1}")", Json({{"a", 1}})},
                                                           {R"([1, 2])", Json::object()},
                                                           {R"("text")", Json::object()}};
  for (const auto& [arguments, want] : cases) {
    const std::string call =
        "<tool_call>\n{\"name\": \"f\", \"arguments\": " + arguments + "}\n</tool_call>";
    const Replayed r = Replay({"</think>", call}, {Finish::kStop, 7, std::nullopt, std::nullopt});
    ASSERT_EQ(r.message["content"].size(), 1u) << arguments;
    EXPECT_EQ(r.message["content"][0]["input"], want) << arguments;
    EXPECT_EQ(r.snapshot["content"][0]["input"], want) << arguments;
  }
}

TEST(AnthropicMessagesFormatter, StopReasons) {
  EXPECT_EQ(Replay({"</think>", "a"}, {Finish::kStop, 7, std::nullopt, std::nullopt})
                .message["stop_reason"],
            "end_turn");
  const Replayed s =
      Replay({"</think>", "a"}, {Finish::kStop, std::nullopt, std::string("END"), std::nullopt});
  EXPECT_EQ(s.message["stop_reason"], "stop_sequence");
  EXPECT_EQ(s.message["stop_sequence"], "END");
  EXPECT_EQ(s.snapshot["stop_sequence"], "END");
  EXPECT_EQ(Replay({"</think>", "a"}, {Finish::kLength, std::nullopt, std::nullopt, std::nullopt})
                .message["stop_reason"],
            "max_tokens");
}

TEST(AnthropicMessagesFormatter, ErrorsInTheApisShape) {
  FormatOptions o;
  o.api = Api::kMessages;
  o.stream = true;
  std::unique_ptr<Formatter> f = MakeMessagesFormatter(o);
  std::string sse;
  f->StreamTail(absl::ResourceExhaustedError("the server is overloaded"), {}, false, nullptr, &sse);
  EXPECT_EQ(sse,
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
            "\"message\":\"the server is overloaded\"}}\n\n");
  const HttpResponse r = f->ErrorResponse(absl::InvalidArgumentError("max_tokens: required"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Json::parse(r.body), Json::parse(R"({"type": "error", "error":
      {"type": "invalid_request_error", "message": "max_tokens: required"}})"));
}

}  // namespace
}  // namespace linfer::openai
