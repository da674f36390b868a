// Forced tool calls (server/openai/tool_grammar.h): random outputs of the grammar, byte by byte,
// read back by the chat output parser in random chunkings must be calls and nothing else — of the
// allowed functions, one when parallel calls are off, with arguments that satisfy the tools'
// schemas (checked here by a small validator of the keywords the tools use, sharing nothing with
// the grammar) — in both tool syntaxes, also after a reasoning block; and the grammar's refusals,
// by field.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/structured/json_matcher.h"
#include "engine/structured/text_grammar.h"
#include "server/openai/chat_output.h"
#include "server/openai/tool_grammar.h"
#include "server/openai/tool_parser.h"

namespace linfer::openai {
namespace {

using structured::Grammar;
using structured::JsonMatcher;

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object",
    "properties": {
      "location": {"type": "string", "maxLength": 12},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
      "days": {"type": "integer"}},
    "required": ["location"]}}},
  {"type": "function", "function": {"name": "set_flags", "parameters": {
    "type": "object",
    "properties": {
      "ratio": {"type": "number"},
      "on": {"type": "boolean"},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3},
      "opts": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}},
    "required": ["on", "opts"]}}},
  {"type": "function", "function": {"name": "ping"}},
  {"type": "function", "function": {"name": "book", "parameters": {
    "type": "object",
    "properties": {
      "code": {"type": "string", "minLength": 3, "maxLength": 3},
      "seats": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
      "note": {"type": ["string", "null"], "maxLength": 5},
      "class": {"enum": ["eco", "biz", null]},
      "word": {"type": "string", "maxLength": 4}},
    "required": ["code", "class"]}}},
  {"type": "function", "function": {"name": "move", "parameters": {
    "$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"},
                                                      "y": {"type": "integer"}},
                    "required": ["x", "y"]}},
    "type": "object",
    "properties": {"to": {"$ref": "#/$defs/P"},
                   "via": {"anyOf": [{"$ref": "#/$defs/P"}, {"type": "null"}]}},
    "required": ["to"]}}}
])";

// ---- the oracle: a value against the keywords above ----
const Json* g_root = nullptr;  // the tool's parameters, for "#/$defs/..." refs

bool Satisfies(const Json& v, const Json& s) {
  if (s.contains("$ref")) {
    const std::string r = s["$ref"].get<std::string>();
    return Satisfies(v, (*g_root)["$defs"][r.substr(std::string("#/$defs/").size())]);
  }
  if (s.contains("enum")) {
    bool in = false;
    for (const Json& m : s["enum"]) in = in || m == v;
    if (!in) return false;
  }
  if (s.contains("anyOf")) {
    bool any = false;
    for (const Json& alt : s["anyOf"]) any = any || Satisfies(v, alt);
    if (!any) return false;
  }
  if (s.contains("type") && s["type"].is_array()) {
    bool any = false;
    for (const Json& t : s["type"]) {
      Json one = s;
      one["type"] = t;
      any = any || Satisfies(v, one);
    }
    return any;
  }
  const std::string type = s.value("type", "");
  if (type.empty()) return true;
  if (type == "null") return v.is_null();
  if (type == "string") {
    if (!v.is_string()) return false;
    size_t chars = 0;
    for (const unsigned char c : v.get<std::string>()) chars += (c & 0xC0) != 0x80;
    return (!s.contains("maxLength") || chars <= s["maxLength"].get<size_t>()) &&
           (!s.contains("minLength") || chars >= s["minLength"].get<size_t>());
  }
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "array") {
    if (!v.is_array()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    for (const Json& item : v) {
      if (!Satisfies(item, s["items"])) return false;
    }
    return true;
  }
  if (type == "object") {
    if (!v.is_object()) return false;
    const Json props = s.value("properties", Json::object());
    for (const Json& r : s.value("required", Json::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
    for (const auto& [k, x] : v.items()) {
      if (!props.contains(k) || !Satisfies(x, props[k])) return false;
    }
    return true;
  }
  return false;
}

const Json* Parameters(const Json& tools, const std::string& name) {
  for (const Json& t : tools) {
    if (t["function"]["name"] == name) {
      return t["function"].contains("parameters") ? &t["function"]["parameters"] : nullptr;
    }
  }
  return nullptr;
}

// A random output of the grammar, byte by byte, leaning on punctuation and newlines (closing
// things) as it grows; "" when it does not end within `limit` bytes.
std::string RandomOutput(const Grammar& g, std::mt19937& rng, size_t limit = 2000) {
  JsonMatcher m(&g);
  std::string out;
  while (out.size() < limit) {
    std::vector<uint8_t> ok, close;
    for (int b = 0; b < 256; ++b) {
      JsonMatcher t = m;
      if (!t.Feed(static_cast<uint8_t>(b))) continue;
      ok.push_back(static_cast<uint8_t>(b));
      if (std::ispunct(b) || b == '\n') close.push_back(static_cast<uint8_t>(b));
    }
    if (m.Complete() && (ok.empty() || rng() % 3 == 0)) return out;
    if (ok.empty()) {
      ADD_FAILURE() << "stuck after " << out;
      return "";
    }
    const bool closing = !close.empty() && rng() % 1000 < std::min<size_t>(950, 300 + out.size());
    // Raw text ends only with its whole terminator: now and then try one, as a token would come.
    bool piece_taken = false;
    for (const char* piece : {"</parameter>", "</think>", "</para", "null", "NULL"}) {
      JsonMatcher t = m;
      if (rng() % 8 == 0 && t.FeedBytes(piece)) {
        m = t;
        out += piece;
        piece_taken = true;
        break;
      }
    }
    if (piece_taken) continue;
    const std::vector<uint8_t>& from = closing ? close : ok;
    const uint8_t b = from[rng() % from.size()];
    EXPECT_TRUE(m.Feed(b));
    out.push_back(static_cast<char>(b));
  }
  return "";
}

struct Calls {
  std::string reasoning, content;
  std::map<int, std::string> names, args;
};

Calls ParseCalls(const std::string& text, ToolFormat format, bool reasoning, const Json* tools,
                 std::mt19937& rng) {
  ChatOutputParser p({reasoning, format}, reasoning, true, tools);
  ChatDelta all;
  for (size_t i = 0; i < text.size();) {
    const size_t step = 1 + rng() % 9;
    all.Append(p.Push(text.substr(i, step)));
    i += step;
  }
  all.Append(p.Finish());
  Calls c{all.reasoning, all.content, {}, {}};
  for (const ToolCallDelta& t : all.tool_calls) {
    c.names[t.index] += t.name;
    c.args[t.index] += t.arguments;
  }
  return c;
}

// A parameter's type and nullability look at each schema object once: 8 alternatives $ref-ing
// the next level, 17 levels deep (a 4 KB schema), used to take 8^17 steps and hang the server.
TEST(ToolParameterTypes, AlternativesThatShareDefinitionsAreWalkedOnce) {
  Json defs = Json::object();
  for (int i = 0; i < 17; ++i) {
    Json alts = Json::array();
    for (int k = 0; k < 8; ++k) alts.push_back({{"$ref", absl::StrCat("#/$defs/D", i + 1)}});
    defs[absl::StrCat("D", i)] = {{"anyOf", alts}};
  }
  defs["D17"] = {{"type", "null"}};
  const Json root = {{"$defs", defs}, {"properties", {{"a", {{"$ref", "#/$defs/D0"}}}}}};
  EXPECT_EQ(PropertyType(root["properties"]["a"], &root), "");
  EXPECT_FALSE(PropertyNullable(root["properties"]["a"], &root));  // null lies past depth 16
  defs["D3"] = {{"anyOf", {{{"$ref", "#/$defs/D4"}}, {{"type", "integer"}}}}};
  const Json typed = {{"$defs", defs}, {"properties", {{"a", {{"$ref", "#/$defs/D0"}}}}}};
  EXPECT_EQ(PropertyType(typed["properties"]["a"], &typed), "integer");
  // A node first reached at the depth limit (its alternatives cut off) is looked at again when
  // reached higher up: a → [L1 → … → L15 → T, T], T = anyOf[integer].
  const auto any_of = [](std::vector<Json> alternatives) {
    Json alts = Json::array();
    for (Json& a : alternatives) alts.push_back(std::move(a));
    Json out = Json::object();
    out["anyOf"] = std::move(alts);
    return out;
  };
  const auto ref = [](const std::string& name) {
    Json r = Json::object();
    r["$ref"] = "#/$defs/" + name;
    return r;
  };
  Json deep = Json::object();
  for (int i = 1; i < 15; ++i) {
    deep["$defs"][absl::StrCat("L", i)] = any_of({ref(absl::StrCat("L", i + 1))});
  }
  deep["$defs"]["L15"] = any_of({ref("T")});
  deep["$defs"]["T"] = any_of({Json({{"type", "integer"}})});
  deep["properties"]["a"] = any_of({ref("L1"), ref("T")});
  EXPECT_EQ(PropertyType(deep["properties"]["a"], &deep), "integer");
  deep["$defs"]["T"] = any_of({Json({{"type", "null"}})});
  EXPECT_TRUE(PropertyNullable(deep["properties"]["a"], &deep));
}

TEST(ToolCallGrammarTest, EveryOutputReadsBackAsValidCalls) {
  const Json tools = Json::parse(kTools);
  std::mt19937 rng(17);
  for (const ToolFormat format : {ToolFormat::kHermes, ToolFormat::kQwenXml}) {
    for (const std::string name : {"", "get_weather", "set_flags", "ping", "book", "move"}) {
      for (const bool parallel : {true, false}) {
        for (const bool reasoning : {false, true}) {
          SCOPED_TRACE(testing::Message()
                       << (format == ToolFormat::kHermes ? "hermes" : "xml") << " name '" << name
                       << "' parallel " << parallel << " reasoning " << reasoning);
          absl::StatusOr<std::shared_ptr<const Grammar>> g =
              ToolCallGrammar(tools, format, {name, parallel, "tool_choice", ".parameters"});
          ASSERT_TRUE(g.ok()) << g.status();
          std::shared_ptr<const Grammar> grammar = *g;
          if (reasoning) grammar = structured::AfterReasoning(*grammar);
          int outputs = 0, several = 0;
          for (int i = 0; i < 40; ++i) {
            const std::string text = RandomOutput(*grammar, rng);
            if (text.empty()) continue;
            ++outputs;
            const Calls c = ParseCalls(text, format, reasoning, &tools, rng);
            EXPECT_EQ(c.content, "") << text;
            ASSERT_GE(c.names.size(), 1u) << text;
            if (!parallel) {
              EXPECT_EQ(c.names.size(), 1u) << text;
            }
            several += c.names.size() > 1;
            if (reasoning) {  // the reasoning is the text before "</think>" (leading newlines
                              // aside)
              const std::string r = text.substr(0, text.find("</think>"));
              auto strip = [](const std::string& x) {
                return x.substr(std::min(x.find_first_not_of('\n'), x.size()));
              };
              EXPECT_EQ(strip(c.reasoning), strip(r)) << text;
            }
            for (const auto& [index, call] : c.names) {
              if (!name.empty()) {
                EXPECT_EQ(call, name) << text;
              }
              const Json args = Json::parse(c.args.at(index), nullptr, false);
              ASSERT_TRUE(args.is_object()) << c.args.at(index) << "\nfrom\n" << text;
              const Json* params = Parameters(tools, call);
              if (params == nullptr) {
                EXPECT_TRUE(args.empty()) << text;
              } else {
                g_root = params;
                EXPECT_TRUE(Satisfies(args, *params)) << args.dump() << "\nfrom\n" << text;
              }
            }
          }
          EXPECT_GT(outputs, 20);
          if (parallel) {
            EXPECT_GT(several, 0);
          }
        }
      }
    }
  }
}

TEST(ToolCallGrammarTest, WritesTheTemplatesSyntax) {
  const Json tools = Json::parse(kTools);
  auto accepts = [&](ToolFormat format, const std::string& text) {
    absl::StatusOr<std::shared_ptr<const Grammar>> g =
        ToolCallGrammar(tools, format, {"", true, "tool_choice", ".parameters"});
    EXPECT_TRUE(g.ok());
    JsonMatcher m(g->get());
    return m.FeedBytes(text) && m.Complete();
  };
  EXPECT_TRUE(accepts(ToolFormat::kHermes,
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
                      "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"ping\", "
                      "\"arguments\": {}}\n</tool_call>"));
  EXPECT_TRUE(
      accepts(ToolFormat::kQwenXml,
              "<tool_call>\n<function=get_weather>\n<parameter=location>\nSt. Malo\n"
              "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_TRUE(accepts(ToolFormat::kQwenXml,
                      "<tool_call>\n<function=set_flags>\n<parameter=on>\ntrue\n</parameter>\n"
                      "<parameter=opts>\n{\"a\": 1}\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(ToolFormat::kQwenXml,  // a required parameter left out
                       "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(ToolFormat::kQwenXml,  // out of the schema's order
                       "<tool_call>\n<function=get_weather>\n<parameter=location>\nx\n"
                       "</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=unit>\n"
                       "celsius\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(ToolFormat::kQwenXml,  // not a member of the enum
                       "<tool_call>\n<function=get_weather>\n<parameter=location>\nx\n"
                       "</parameter>\n<parameter=unit>\nkelvin\n</parameter>\n</function>\n"
                       "</tool_call>"));
  EXPECT_FALSE(accepts(ToolFormat::kHermes, "Sure! <tool_call>\n"));
  EXPECT_FALSE(accepts(ToolFormat::kHermes, ""));
}

// Requests in flight forcing the same tools the same way share one grammar.
TEST(ToolCallGrammarTest, TheSameToolsShareAGrammar) {
  const Json tools = Json::parse(kTools);
  auto grammar = [&](ToolFormat format, const std::string& name, bool parallel) {
    absl::StatusOr<std::shared_ptr<const Grammar>> g =
        ToolCallGrammar(tools, format, {name, parallel, "tool_choice", ".parameters"});
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : nullptr;
  };
  std::shared_ptr<const Grammar> a = grammar(ToolFormat::kHermes, "", true);
  EXPECT_EQ(grammar(ToolFormat::kHermes, "", true), a);
  EXPECT_NE(grammar(ToolFormat::kHermes, "", false), a);
  EXPECT_NE(grammar(ToolFormat::kQwenXml, "", true), a);
  EXPECT_NE(grammar(ToolFormat::kHermes, "ping", true), a);
}

// The tools' patterns share one schema's budget of compile time, whether a tool's schema is
// compiled anew or found live.
TEST(ToolCallGrammarTest, TheToolsPatternsShareOneBudget) {
  auto tool = [](int i) {
    Json t = Json::parse(R"({"type":"function","function":{"parameters":{"type":"object",
        "properties":{"x":{"type":"string"}}}}})");
    t["function"]["name"] = absl::StrCat("f", i);
    t["function"]["parameters"]["properties"]["x"]["pattern"] = absl::StrCat("^.{0,500}", i, "$");
    return t;
  };
  auto force = [](const Json& tools) {
    return ToolCallGrammar(tools, ToolFormat::kHermes, {"", true, "tool_choice", ".parameters"});
  };
  Json tools = Json::array();
  for (int i = 0; i < 40; ++i) tools.push_back(tool(i));
  absl::StatusOr<std::shared_ptr<const Grammar>> one = force(Json::array({tools[7]}));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_GT((*one)->regex_work, 0);
  absl::StatusOr<std::shared_ptr<const Grammar>> all = force(tools);
  ASSERT_FALSE(all.ok());
  const std::string message(all.status().message());
  EXPECT_EQ(message.rfind("tools[", 0), 0u) << message;
  EXPECT_NE(message.find("].parameters.properties.x.pattern: the tools' patterns take too long to "
                         "compile (more than 33554432 automaton steps)"),
            std::string::npos)
      << message;
  // Every tool's arguments live (compiled alone, each with a whole budget): refused the same.
  std::vector<std::shared_ptr<const Grammar>> held;
  for (const Json& t : tools) {
    absl::StatusOr<std::shared_ptr<const Grammar>> g =
        structured::CompileJsonSchema(t["function"]["parameters"], "schema");
    ASSERT_TRUE(g.ok()) << g.status();
    held.push_back(*g);
  }
  all = force(tools);
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.status().message().find("the tools' patterns take too long to compile"),
            std::string::npos)
      << all.status();
}

TEST(ToolCallGrammarTest, RefusesWhatItCannotForceByField) {
  const Json tools = Json::parse(kTools);
  auto error = [](const Json& t, ToolFormat format, const std::string& name) {
    absl::StatusOr<std::shared_ptr<const Grammar>> g =
        ToolCallGrammar(t, format, {name, true, "tool_choice.name", ".parameters"});
    return g.ok() ? std::string("ok") : std::string(g.status().message());
  };
  EXPECT_EQ(error(tools, ToolFormat::kHermes, "nope"),
            "tool_choice.name: no tool named \"nope\" in tools");
  EXPECT_EQ(error(tools, ToolFormat::kNone, ""),
            "tool_choice.name: this model's chat template writes no tool calls, so none can be "
            "forced");
  EXPECT_EQ(error(Json::array(), ToolFormat::kHermes, ""),
            "tool_choice.name: forcing a tool call needs tools");
  Json twice = tools;
  twice.push_back(tools[2]);
  EXPECT_EQ(error(twice, ToolFormat::kHermes, ""), "tools[5]: a second tool named \"ping\"");
  Json bad_name = Json::parse(R"([{"type":"function","function":{"name":"a b"}}])");
  EXPECT_NE(
      error(bad_name, ToolFormat::kQwenXml, "").find("tools[0]: forcing a call needs a tool name"),
      std::string::npos);
  Json pattern = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":
      {"type":"object","properties":{"x":{"type":"integer","multipleOf":2}}}}}])");
  EXPECT_EQ(error(pattern, ToolFormat::kHermes, "")
                .rfind("tools[0].parameters.properties.x.multipleOf", 0),
            0u);
  // A pattern: enforced inside Hermes' JSON arguments; Qwen's XML values are raw text.
  Json patterned = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":
      {"type":"object","properties":{"x":{"type":"string","pattern":"^[a-z]+$"}}}}}])");
  EXPECT_EQ(error(patterned, ToolFormat::kHermes, ""), "ok");
  EXPECT_NE(error(patterned, ToolFormat::kQwenXml, "")
                .find("tools[0].parameters.properties.x: a string with a pattern cannot be forced "
                      "in this model's tool syntax"),
            std::string::npos);
  // A format there stays an annotation, as it was.
  Json dated = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":
      {"type":"object","properties":{"when":{"type":["string","null"],"format":"date-time"}}}}}])");
  EXPECT_EQ(error(dated, ToolFormat::kQwenXml, ""), "ok");
  Json not_object = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":
      {"type":"array"}}}])");
  Json untyped = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":
      {"type":"object","$defs":{"p":{"type":"object"}},"properties":{"x":{"$ref":"#/$defs/p"}}}}}])");
  EXPECT_EQ(error(untyped, ToolFormat::kHermes, ""), "ok");
  EXPECT_EQ(error(untyped, ToolFormat::kQwenXml, ""), "ok");  // the reader follows the $ref
  Json all_of = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":
      {"type":"object","properties":{"x":{"allOf":[{"type":"integer"}]}}}}}])");
  EXPECT_NE(error(all_of, ToolFormat::kQwenXml, "")
                .find("tools[0].parameters.properties.x: read "
                      "as text"),
            std::string::npos);
  Json mixed = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":
      {"type":"object","properties":{"x":{"type":["integer","string"]}}}}}])");
  EXPECT_NE(error(mixed, ToolFormat::kQwenXml, "").find("a type list mixing strings"),
            std::string::npos);
  // An untyped enum of numbers: the fix is a type (the message said it mixed in strings).
  for (const char* x : {R"({"enum":[1,2]})", R"({"const":5})"}) {
    Json untyped_enum = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":
        {"type":"object","properties":{"x":)" +
                                    std::string(x) + "}}}}]");
    EXPECT_NE(error(untyped_enum, ToolFormat::kQwenXml, "").find("needs a \"type\""),
              std::string::npos)
        << x;
  }
  Json mixed_enum = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":
      {"type":"object","properties":{"x":{"enum":[1,"a"]}}}}}])");
  EXPECT_NE(error(mixed_enum, ToolFormat::kQwenXml, "").find("an enum mixing strings"),
            std::string::npos);
  Json big = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":
      {"type":"object","properties":{}}}}])");
  for (int i = 0; i < 300; ++i) {
    const std::string key = absl::StrCat(std::string(200, 'a'), i);
    big[0]["function"]["parameters"]["properties"][key] = Json::parse(R"({"type":"string"})");
  }
  EXPECT_EQ(error(big, ToolFormat::kQwenXml, ""),
            "tools[0].parameters: too many parameters to force a call");
  Json many = Json::array();
  for (int i = 0; i < 129; ++i) {
    many.push_back({{"type", "function"}, {"function", {{"name", absl::StrCat("f", i)}}}});
  }
  EXPECT_EQ(error(many, ToolFormat::kHermes, ""),
            "tool_choice.name: forcing a call among more than 128 tools is not supported");
  auto xml = [&](const char* params) {
    Json t = Json::parse(R"([{"type":"function","function":{"name":"f"}}])");
    t[0]["function"]["parameters"] = Json::parse(params);
    return error(t, ToolFormat::kQwenXml, "");
  };
  // A string that may not be null keeps the word "null"; a nullable one would read it as null.
  EXPECT_EQ(xml(R"({"type":"object","properties":{"x":{"type":"string","enum":["null","no"]}}})"),
            "ok");
  EXPECT_NE(xml(R"({"type":"object","properties":{"x":{"type":["string","null"],
                   "enum":["null","no"]}}})")
                .find("properties.x"),
            std::string::npos);
  EXPECT_NE(xml(R"({"type":"object","properties":{"x":{"allOf":[{"type":"string"}],
                   "nullable":true}}})")
                .find("admits no null"),
            std::string::npos);
  EXPECT_EQ(xml(R"({"type":"object","properties":{"x":{"const":null}},"required":["x"]})"), "ok");
  EXPECT_NE(xml(R"({"$defs":{"A":{"type":"object","properties":{"s":{"type":"string"}}}},
                   "$ref":"#/$defs/A"})")
                .find("not through $ref"),
            std::string::npos);
  EXPECT_EQ(error(not_object, ToolFormat::kHermes, ""), "ok");  // Hermes writes any JSON
  EXPECT_NE(error(not_object, ToolFormat::kQwenXml, "").find("tools[0].parameters: forcing a call"),
            std::string::npos);
}

}  // namespace
}  // namespace linfer::openai
