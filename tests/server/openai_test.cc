// The OpenAI API's pure parts: chat requests, the SSE chunk shapes, and the session turn rule on
// the real Qwen3.5 and Qwen3.6 chat templates (the reasoning / tool-call parser fed token by token:
// openai_chat_output_test.cc; request fields: openai_params_test.cc).
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

// The JSON chunks of an SSE stream: its `data: {…}` lines (not `data: [DONE]`).
std::vector<Json> DataChunks(const std::string& sse) {
  std::vector<Json> chunks;
  std::istringstream in(sse);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: {", 0) == 0) chunks.push_back(Json::parse(line.substr(6)));
  }
  return chunks;
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
