// ChatOutputParser on replies fed in every chunk size: reasoning, content and tool calls in the
// Hermes and Qwen XML formats, malformed blocks, and replies cut short by max_tokens.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/openai/chat_output.h"

namespace linfer::openai {
namespace {

// ---- reasoning and tool calls, fed in every chunk size ----

struct Parsed {
  std::string reasoning, content;
  std::map<int, std::string> names, args, ids;
  int calls = 0;
};

Parsed Parse(const std::string& text, size_t step, ChatSyntax syntax, bool start_in_reasoning,
             const Json* tools = nullptr, bool first_call_only = false, bool cut = false) {
  ChatOutputParser p(syntax, start_in_reasoning, true, tools);
  if (first_call_only) p.KeepFirstToolCallOnly();
  ChatDelta all;
  for (size_t i = 0; i < text.size(); i += step) all.Append(p.Push(text.substr(i, step)));
  all.Append(p.Finish(cut));
  Parsed out{all.reasoning, all.content, {}, {}, {}, p.tool_calls()};
  for (const ToolCallDelta& t : all.tool_calls) {
    out.names[t.index] += t.name;
    out.args[t.index] += t.arguments;
    out.ids[t.index] += t.id;
  }
  return out;
}

TEST(OpenAiChatOutput, ReasoningSplitsInEveryChunking) {
  const ChatSyntax think{true, ToolFormat::kNone};
  for (size_t step : {1, 2, 3, 7, 100}) {
    Parsed a = Parse("Let me see.\n</think>\n\nThe answer.", step, think, true);
    EXPECT_EQ(a.reasoning, "Let me see.\n") << step;
    EXPECT_EQ(a.content, "The answer.") << step;
    Parsed b = Parse("\n<think>\nhmm</think>\n\nok", step, think, false);
    EXPECT_EQ(b.reasoning, "hmm") << step;
    EXPECT_EQ(b.content, "ok") << step;
    Parsed c = Parse("no thinking <think> here", step, think, false);
    EXPECT_EQ(c.content, "no thinking <think> here") << step;
    Parsed d = Parse("unfinished </thi", step, think, true);
    EXPECT_EQ(d.reasoning, "unfinished </thi") << step;
  }
  EXPECT_TRUE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n"));
  EXPECT_EQ(PartialMarker("abc</th", "</think>"), 4u);
  EXPECT_EQ(PartialMarker("abc", "</think>"), 0u);
}

TEST(OpenAiChatOutput, HermesToolCallsStream) {
  const ChatSyntax hermes{true, ToolFormat::kHermes};
  const std::string text =
      "I will look.\n</think>\n\nChecking.<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Paris\", \"days\": {\"n\": 2}}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  for (size_t step : {1, 2, 5, 1000}) {
    Parsed p = Parse(text, step, hermes, true);
    EXPECT_EQ(p.reasoning, "I will look.\n") << step;
    EXPECT_EQ(p.content, "Checking.") << step;
    ASSERT_EQ(p.calls, 2) << step;
    EXPECT_EQ(p.names[0], "get_weather");
    EXPECT_EQ(p.args[0], "{\"city\": \"Paris\", \"days\": {\"n\": 2}}") << step;
    EXPECT_EQ(p.names[1], "now");
    EXPECT_EQ(p.args[1], "{}");
    EXPECT_EQ(p.ids[0].rfind("call_", 0), 0u);
  }
  // parallel_tool_calls false: only the first call is released (both are parsed).
  for (size_t step : {1, 7, 1000}) {
    Parsed one = Parse(text, step, hermes, true, nullptr, /*first_call_only=*/true);
    EXPECT_EQ(one.calls, 2) << step;
    EXPECT_EQ(one.names.size(), 1u) << step;
    EXPECT_EQ(one.names[0], "get_weather") << step;
    EXPECT_EQ(one.args[0], "{\"city\": \"Paris\", \"days\": {\"n\": 2}}") << step;
    EXPECT_EQ(one.content, "Checking.") << step;
  }
  Parsed bad = Parse("<tool_call>not json</tool_call> after", 3, hermes, false);
  EXPECT_EQ(bad.calls, 0);
  EXPECT_EQ(bad.content, "<tool_call>not json</tool_call> after");
}

// Only the call object's own "name" and "arguments" count, whatever the chunking.
TEST(OpenAiChatOutput, HermesFindsOnlyTopLevelKeys) {
  const ChatSyntax hermes{true, ToolFormat::kHermes};
  struct Case {
    std::string json, name, args;
  };
  const Case cases[] = {
      // "arguments" nested in another value, before the real one.
      {R"({"name": "f", "meta": {"arguments": 1, "name": "g"}, "arguments": {"a": 2}})", "f",
       R"({"a": 2})"},
      // "arguments" inside the "parameters" value: the whole value is the arguments.
      {R"({"name": "f", "parameters": {"arguments": {"b": 1}}})", "f",
       R"({"arguments": {"b": 1}})"},
      // "arguments" inside strings (escaped quotes, and unescaped ones that end the string).
      {R"({"name": "f", "note": "say \"arguments\": {}", "arguments": {"x": "\"arguments\": 1"}})",
       "f", R"({"x": "\"arguments\": 1"})"},
      {R"({"name": "f", "text": "he said "arguments": 1", "arguments": {"a": 1}})", "f",
       R"({"a": 1})"},
      // The arguments before the name, and values that are not objects.
      {R"({"arguments": {"a": [1, {"b": "}"}]}, "name": "f"})", "f", R"({"a": [1, {"b": "}"}]})"},
      {R"({"name": "f", "arguments": "{\"a\": 1}"})", "f", R"("{\"a\": 1}")"},
      {R"({"name": "f", "arguments": 12 , "x": 3})", "f", "12"},
      {R"({"name": "f"})", "f", "{}"},
  };
  for (const Case& c : cases) {
    for (size_t step : {1, 2, 3, 1000}) {
      Parsed p = Parse("<tool_call>" + c.json + "</tool_call>", step, hermes, false);
      EXPECT_EQ(p.content, "") << c.json << " step " << step;
      ASSERT_EQ(p.calls, 1) << c.json << " step " << step;
      EXPECT_EQ(p.names[0], c.name) << c.json << " step " << step;
      EXPECT_EQ(p.args[0], c.args) << c.json << " step " << step;
    }
  }
}

// Malformed JSON in a block: fed one byte at a time, the same content and calls as fed whole.
TEST(OpenAiChatOutput, HermesMalformedJsonIsChunkingInvariant) {
  const ChatSyntax hermes{true, ToolFormat::kHermes};
  const std::string blocks[] = {
      R"({"name": "f", "arguments": {"a": 1})",
      R"({"name": "f", "arguments": {"a": 1}}} extra)",
      R"({"name": "f", "arguments": {"a": [1, }}}})",
      R"({"name": "f" "arguments": 5)",
      R"({"name": "f", "arguments": {"a": "unterminated)",
      R"({"name": "f", "parameters": 1, "arguments": {"a": 1}})",
      R"({"name": "f", "parameters"  )",
      R"({"name": "f", "arguments": )",
      R"({"name": "f", "arguments": ,"x": {}})",
      R"({"name": 5, "arguments": {}, "name": "g"})",
      R"({"name": "f\)",
      R"({"name": "bad\q", "arguments": {}})",
      R"({"x": {"name": "inner"}, "arguments": {}})",
      R"("name": "f", "arguments": {}})",
      R"({{"name": "f"}})",
      R"({"name": "f", "arguments": {"a": 1}  )",
      "{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_",
  };
  for (const std::string& block : blocks) {
    for (const std::string& text :
         {"<tool_call>" + block + "</tool_call> after", "x<tool_call>" + block}) {
      const Parsed whole = Parse(text, text.size(), hermes, false);
      for (size_t step : {1, 2, 3}) {
        const Parsed p = Parse(text, step, hermes, false);
        EXPECT_EQ(p.content, whole.content) << text << " step " << step;
        EXPECT_EQ(p.calls, whole.calls) << text << " step " << step;
        EXPECT_EQ(p.names, whole.names) << text << " step " << step;
        EXPECT_EQ(p.args, whole.args) << text << " step " << step;
      }
    }
  }
  // What they give: a call as far as it goes, or the block back as text without a name.
  EXPECT_EQ(Parse(std::string("<tool_call>") + blocks[0], 1, hermes, false).args[0], R"({"a": 1})");
  EXPECT_EQ(Parse("<tool_call>" + blocks[1] + "</tool_call>", 1, hermes, false).args[0],
            R"({"a": 1})");
  EXPECT_EQ(Parse("<tool_call>" + blocks[5] + "</tool_call>", 1, hermes, false).args[0], "1");
  EXPECT_EQ(Parse("<tool_call>" + blocks[9] + "</tool_call>", 1, hermes, false).names[0], "g");
  const Parsed inner = Parse("<tool_call>" + blocks[12] + "</tool_call>", 1, hermes, false);
  EXPECT_EQ(inner.calls, 0);
  EXPECT_EQ(inner.content, "<tool_call>" + blocks[12] + "</tool_call>");
}

TEST(OpenAiChatOutput, QwenXmlToolCallsStreamOneParameterAtATime) {
  const ChatSyntax xml{true, ToolFormat::kQwenXml};
  Json tools = Json::parse(R"([{"type":"function","function":{"name":"get_weather",
      "parameters":{"type":"object","properties":{"city":{"type":"string"},
      "days":{"type":"integer"},"metric":{"type":"boolean"},"where":{"type":"object"}}}}}])");
  const std::string text =
      "ok\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n"
      "</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n"
      "<parameter=where>\n{\"lat\": 1}\n</parameter>\n</function>\n</tool_call>";
  for (size_t step : {1, 4, 1000}) {
    Parsed p = Parse(text, step, xml, true, &tools);
    EXPECT_EQ(p.content, "") << step;
    ASSERT_EQ(p.calls, 1) << step;
    EXPECT_EQ(p.names[0], "get_weather");
    EXPECT_EQ(p.args[0],
              "{\"city\": \"New York\", \"days\": 3, \"metric\": true, \"where\": {\"lat\":1}}")
        << step;
    EXPECT_TRUE(Json::parse(p.args[0]).is_object());
  }
  // Fragments arrive per parameter, before the call is complete.
  ChatOutputParser parser(xml, false, true, &tools);
  ChatDelta d =
      parser.Push("<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[1].arguments, "{\"city\": \"Rome\"");
}

// A parameter whose schema allows several types is read as the JSON it is, not by its first type
// alone (a forced call's grammar wrote 3.2 for ["integer", "number"]: it came back "3.2").
TEST(OpenAiChatOutput, QwenXmlParametersOfSeveralTypesReadAsJson) {
  const ChatSyntax xml{false, ToolFormat::kQwenXml};
  Json tools = Json::parse(R"([{"type":"function","function":{"name":"f",
      "parameters":{"type":"object","properties":{
      "a":{"type":["integer","number"]},"b":{"type":["boolean","integer"]},
      "c":{"anyOf":[{"type":"integer"},{"type":"array"}]},"d":{"type":"integer"},
      "e":{"type":["integer","boolean"]}}}}}])");
  const std::string text =
      "<tool_call>\n<function=f>\n<parameter=a>\n3.2\n</parameter>\n<parameter=b>\n40\n"
      "</parameter>\n<parameter=c>\n[-3]\n</parameter>\n<parameter=d>\nmany\n</parameter>\n"
      "<parameter=e>\ntrue\n</parameter>\n</function>\n</tool_call>";
  Parsed p = Parse(text, 1000, xml, false, &tools);
  ASSERT_EQ(p.calls, 1);
  EXPECT_EQ(Json::parse(p.args[0]), Json::parse(R"({"a": 3.2, "b": 40, "c": [-3], "d": "many",
                                                    "e": true})"));
}

// A reply cut short (max_tokens) inside a call: the call keeps the arguments it streamed,
// unclosed, as OpenAI's API returns one; its unfinished markup is not content. Ended by the model
// instead, the call is closed.
TEST(OpenAiChatOutput, ACallCutShortKeepsWhatItStreamedUnclosed) {
  const ChatSyntax xml{false, ToolFormat::kQwenXml};
  const ChatSyntax hermes{false, ToolFormat::kHermes};
  Json tools = Json::parse(R"([{"type":"function","function":{"name":"get_weather",
      "parameters":{"type":"object","properties":{"city":{"type":"string"},
      "days":{"type":"integer"}}}}}])");
  const std::string done =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n"
      "</parameter>\n</function>\n</tool_call>\n";
  struct Case {
    ChatSyntax syntax;
    std::string text, cut_args, ended_args, ended_content;
  };
  const Case cases[] = {
      {xml,
       done + "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
              "<parameter=days>\n3",
       R"({"city": "Paris")", R"({"city": "Paris", "days": 3})", ""},
      {xml, done + "<tool_call>\n<function=get_weather>\n<parameter", "", "{}", "<parameter"},
      {xml, done + "<tool_call>\n<function=get_weather>\n", "", "{}", ""},
      {hermes,
       R"(<tool_call>{"name": "get_weather"}</tool_call><tool_call>{"name": "get_weather", "arguments": {"city": "Pa)",
       R"({"city": "Pa)", R"({"city": "Pa)", ""},
      {hermes, R"(<tool_call>{"name": "get_weather"}</tool_call><tool_call>{"name": "get_weather")",
       "", "{}", ""},
  };
  // Cut before the call's name was whole, inside a closing marker, or right after a block's
  // opening marker (after a whole call too): nothing of the markup is content either.
  for (const auto& [syntax, text] : std::vector<std::pair<ChatSyntax, std::string>>{
           {hermes, R"(Sure. <tool_call>{"name": "get_wea)"},
           {xml, "Sure. <tool_call>"},
           {xml, "Sure. <tool_call>\n"},
           {xml, "Sure. " + done + "<tool_call>\n"},
           {xml, "Sure. " + done + "<tool_call>"},
           {hermes, "Sure. <tool_call>\n"},
           {xml, "Sure. <tool_call>\n<function=get_wea"},
           {xml, "Sure. <tool_call>\n<function=get_weather>\n</function>\n</tool"},
           {xml, "Sure. <tool_c"},
           {hermes, "Sure. <tool_c"}}) {
    for (size_t step : {1, 3, 1000}) {
      Parsed cut = Parse(text, step, syntax, false, &tools, false, /*cut=*/true);
      EXPECT_EQ(cut.content, "Sure. ") << text << " step " << step;
    }
  }
  // Prose after a literal "<tool_call>" is text, cut or not.
  const std::string prose = "Use the <tool_call> tag around a JSON object, like";
  for (size_t step : {1, 3, 1000}) {
    EXPECT_EQ(Parse(prose, step, hermes, false, &tools, false, /*cut=*/true).content, prose);
  }
  for (const Case& c : cases) {
    for (size_t step : {1, 3, 1000}) {
      Parsed cut = Parse(c.text, step, c.syntax, false, &tools, false, /*cut=*/true);
      ASSERT_EQ(cut.calls, 2) << c.text << " step " << step;
      EXPECT_EQ(cut.args[0], c.syntax.tools == ToolFormat::kHermes ? "{}" : R"({"city": "Rome"})");
      EXPECT_EQ(cut.names[1], "get_weather") << c.text << " step " << step;
      EXPECT_EQ(cut.args[1], c.cut_args) << c.text << " step " << step;
      EXPECT_EQ(cut.content, "") << c.text << " step " << step;
      Parsed ended = Parse(c.text, step, c.syntax, false, &tools);
      ASSERT_EQ(ended.calls, 2) << c.text << " step " << step;
      EXPECT_EQ(ended.args[1], c.ended_args) << c.text << " step " << step;
      EXPECT_EQ(ended.content, c.ended_content) << c.text << " step " << step;
    }
  }
}

}  // namespace
}  // namespace linfer::openai
