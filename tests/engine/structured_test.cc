// Structured output: schema compilation (what it refuses, by name), the byte matcher on written
// documents, and random walks of the matcher and of token masks whose every finished document is
// checked by an independent validator (below: JSON Schema's rules for the keywords linfer
// compiles, written from the specification, sharing nothing with the matcher), and masks against a
// brute-force walk of every token (the vocabulary's byte table: token_byte_table_test.cc).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/json_grammar.h"
#include "engine/structured/json_matcher.h"
#include "engine/structured/text_grammar.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/utf8.h"
#include "tests/engine/structured_testing.h"

namespace linfer::structured {
namespace {

// ---- The oracle: does `v` validate against `s` (root `root` for $ref)? ----
int64_t CodePoints(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// UTF-8 (valid: the matcher writes only that) as code points, for std::wregex.
std::wstring Utf32(const std::string& s) {
  std::wstring w;
  for (size_t i = 0; i < s.size();) {
    int len = 1;
    w.push_back(static_cast<wchar_t>(tokenizer::DecodeUtf8(s, i, &len)));
    i += static_cast<size_t>(len);
  }
  return w;
}

bool Validates(const Json& v, const Json& s, const Json& root);

bool IsType(const Json& v, const std::string& t) {
  if (t == "integer") {
    return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                     std::trunc(v.get<double>()) == v.get<double>());
  }
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  return false;
}

bool Validates(const Json& v, const Json& s, const Json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    if (r == "#") return Validates(v, root, root);
    const std::string defs = r.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    return Validates(v, root[defs][r.substr(r.find('/', 2) + 1)], root);
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_string()) {
      types.push_back(s["type"]);
    } else {
      for (const auto& t : s["type"]) types.push_back(t);
    }
    if (s.value("nullable", false)) types.push_back("null");
    bool any = false;
    for (const auto& t : types) any |= IsType(v, t);
    if (!any) return false;
  }
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) {
    return false;
  }
  if (s.contains("const") && s["const"] != v) return false;
  if (s.contains("anyOf")) {
    bool any = false;
    for (const auto& a : s["anyOf"]) any |= Validates(v, a, root);
    if (!any && !(s.value("nullable", false) && v.is_null())) return false;
  }
  if (s.contains("oneOf")) {
    int n = 0;
    for (const auto& a : s["oneOf"]) n += Validates(v, a, root);
    if (n != 1) return false;
  }
  if (s.contains("allOf")) {
    for (const auto& a : s["allOf"]) {
      if (!Validates(v, a, root)) return false;
    }
  }
  if (v.is_number()) {  // draft 6+: exclusive bounds are numbers; draft 4: booleans
    const double x = v.get<double>();
    const bool below = s.value("exclusiveMinimum", Json(false)) == Json(true);
    const bool above = s.value("exclusiveMaximum", Json(false)) == Json(true);
    if (s.contains("minimum") &&
        (below ? x <= s["minimum"].get<double>() : x < s["minimum"].get<double>())) {
      return false;
    }
    if (s.contains("maximum") &&
        (above ? x >= s["maximum"].get<double>() : x > s["maximum"].get<double>())) {
      return false;
    }
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number() &&
        x <= s["exclusiveMinimum"].get<double>()) {
      return false;
    }
    if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number() &&
        x >= s["exclusiveMaximum"].get<double>()) {
      return false;
    }
  }
  if (v.is_string()) {
    // pattern: ECMAScript, a match anywhere (libstdc++'s backtracking std::wregex).
    if (s.contains("pattern") &&
        !std::regex_search(
            Utf32(v.get<std::string>()),
            std::wregex(Utf32(s["pattern"].get<std::string>()), std::regex::ECMAScript))) {
      return false;
    }
    const int64_t n = CodePoints(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<int64_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<int64_t>()) return false;
  }
  if (v.is_array()) {
    const auto n = static_cast<int64_t>(v.size());
    if (s.contains("minItems") && n < s["minItems"].get<int64_t>()) return false;
    if (s.contains("maxItems") && n > s["maxItems"].get<int64_t>()) return false;
    if (s.contains("items")) {
      for (const auto& item : v) {
        if (!Validates(item, s["items"], root)) return false;
      }
    }
  }
  if (v.is_object()) {
    if (s.contains("required")) {
      for (const auto& r : s["required"]) {
        if (!v.contains(r.get<std::string>())) return false;
      }
    }
    for (const auto& [key, value] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(key)) {
        if (!Validates(value, s["properties"][key], root)) return false;
      } else if (s.contains("additionalProperties")) {
        if (!Validates(value, s["additionalProperties"], root)) return false;
      }
    }
  }
  return true;
}

// ---- Walks ----
// Compile, CompileError, Accepts, RandomDocument: structured_testing.h.

const char* kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer"},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 1,
             "maxItems": 3},
    "kind": {"enum": ["cat", "dog", 12, null, "ca"]},
    "nick": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "ok": {"type": "boolean"},
    "meta": {"type": "object", "additionalProperties": {"type": "integer"}},
    "v": {"const": "x\"y"}
  },
  "required": ["name", "age", "kind"],
  "additionalProperties": false
})";

const char* kTree = R"({
  "$defs": {"node": {"type": "object",
                     "properties": {"value": {"type": "integer"},
                                    "children": {"type": "array",
                                                 "items": {"$ref": "#/$defs/node"},
                                                 "maxItems": 2}},
                     "required": ["value"]}},
  "$ref": "#/$defs/node"
})";

// Alternatives that $ref one definition are one node: 20,000 refs to a 12,000-member enum used to
// copy its members once per ref (240 million strings) before the budget was checked.
TEST(JsonSchemaTest, RepeatedRefsAreMergedOnce) {
  Json members = Json::array();
  for (int i = 0; i < 12000; ++i) members.push_back(absl::StrCat("m", i));
  Json alts = Json::array();
  for (int i = 0; i < 20000; ++i) alts.push_back({{"$ref", "#/$defs/E"}});
  alts.push_back({{"type", "null"}});
  const Json schema = {{"$defs", {{"E", {{"enum", members}}}}}, {"anyOf", alts}};
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileJsonSchema(schema, "schema");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Accepts(**g, "\"m11999\""));
  EXPECT_TRUE(Accepts(**g, "null"));
  EXPECT_FALSE(Accepts(**g, "\"m12000\""));
  Json one_of = schema;
  one_of["oneOf"] = one_of["anyOf"];
  one_of.erase("anyOf");
  EXPECT_EQ(CompileError(one_of.dump()), "schema.oneOf: two alternatives are the same schema");
  // Two enums written out with the same members merge into one node of their distinct texts:
  // 2 × 75 KB and a merged 75 KB fit the 256 KB budget (the members counted twice did not).
  Json two = Json::array();
  two.push_back({{"enum", members}});
  two.push_back({{"enum", members}});
  EXPECT_EQ(CompileError(Json({{"anyOf", two}}).dump()), "ok");
}

// Requests that bring the same schema at once share one compile and one grammar: those that
// arrive while it compiles wait for it (each compiled its own copy, ≈ 30 MB for a large enum).
TEST(JsonSchemaTest, TheSameSchemaAtOnceCompilesOnce) {
  Json members = Json::array();
  for (int i = 0; i < 9000; ++i) members.push_back(absl::StrCat("member-", i, "-of-the-enum"));
  const Json schema = {
      {"type", "object"}, {"properties", {{"pick", {{"enum", members}}}}}, {"required", {"pick"}}};
  constexpr int kThreads = 6;
  std::vector<std::shared_ptr<const Grammar>> got(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ++ready;
      while (ready.load() < kThreads) {
      }
      absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileJsonSchema(schema, "schema");
      if (g.ok()) got[t] = *g;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_NE(got[t], nullptr) << t;
    EXPECT_EQ(got[t].get(), got[0].get()) << t;
  }
  // A failing schema fails for each caller, with its own field's name.
  EXPECT_EQ(CompileJsonSchema(Json::parse(R"({"type":"strin"})"), "a").status().message(),
            "a.type: unknown type 'strin'");
  EXPECT_EQ(CompileJsonSchema(Json::parse(R"({"type":"strin"})"), "b").status().message(),
            "b.type: unknown type 'strin'");
}

// A compile that unwinds (bad_alloc, say) leaves no entry behind that later callers would wait on
// for ever.
TEST(JsonSchemaTest, ACompileThatThrowsLeavesNoOneWaiting) {
  LiveGrammars live;
  EXPECT_THROW(
      (void)live.GetOrCompile("k", []() -> LiveGrammars::Compiled { throw std::bad_alloc(); }),
      std::bad_alloc);
  LiveGrammars::Compiled g = live.GetOrCompile("k", [] { return Compile(R"({"type":"null"})"); });
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(Accepts(**g, "null"));
}

TEST(JsonSchemaTest, RefusesWhatItCannotEnforceByName) {
  EXPECT_EQ(CompileError(R"({"type":"object","properties":{"a":{}},"additionalProperties":7})"),
            "schema.additionalProperties: expected a boolean or a schema");
  EXPECT_EQ(CompileError(R"({"type":"string","pattern":"a+"})"), "ok");
  EXPECT_EQ(CompileError(R"({"pattern":"a+"})"), "ok");  // a string
  {
    auto typeless = Compile(R"({"format":"date"})");  // a string too: the format holds
    ASSERT_TRUE(typeless);
    EXPECT_FALSE(Accepts(*typeless, R"("hello")"));
    EXPECT_TRUE(Accepts(*typeless, R"("2024-02-29")"));
  }
  EXPECT_EQ(CompileError(R"({"type":"string","pattern":"(a"})"),
            "schema.pattern: a '(' without its ')' at offset 0");
  EXPECT_EQ(CompileError(R"({"type":"string","pattern":7})"), "schema.pattern: expected a string");
  EXPECT_EQ(CompileError(R"({"type":"string","pattern":"^a{5}$","maxLength":4})"),
            "schema.pattern: the pattern admits no string of at most 4 characters (minLength / "
            "maxLength)");
  EXPECT_EQ(CompileError(R"({"type":"string","pattern":"a","format":"date"})"),
            "schema.pattern: not supported beside format 'date' (give one of them)");
  EXPECT_EQ(CompileError(R"({"type":"string","pattern":"a","format":"uri"})"), "ok");
  EXPECT_EQ(CompileError(R"({"type":"string","format":"email","minLength":300})"),
            "schema.format: the pattern admits no string of 300 to 254 characters (minLength / "
            "maxLength)");
  EXPECT_EQ(CompileError(R"({"enum":["a"],"pattern":"b"})"),
            "schema.pattern: not supported beside enum");
  EXPECT_EQ(CompileError(R"({"type":"string","multipleOf":2})"),
            "schema.multipleOf: not supported (structured output cannot enforce it)");
  EXPECT_EQ(CompileError(R"({"properties":{"age":{"type":"integer","minimum":0}}})"), "ok");
  EXPECT_EQ(CompileError(R"({"properties":{"p":{"type":"number","maximum":1}}})"), "ok");
  EXPECT_EQ(CompileError(R"({"minimum":0})"), "ok");  // a number
  EXPECT_EQ(CompileError(R"({"type":"number","minimum":1e-17,"maximum":2e-17})"),
            "schema: no number within ±2^53 of at most 16 fraction digits lies within its "
            "minimum/maximum");
  // Booleans are draft 4's exclusive forms only.
  EXPECT_EQ(CompileError(R"({"type":"integer","minimum":true})"),
            "schema.minimum: expected a number");
  // An integer beside a number: the number must write all its integers.
  EXPECT_EQ(CompileError(R"({"anyOf":[{"type":"integer","minimum":10},{"type":"number",
                                      "maximum":0}]})"),
            "schema.anyOf: an integer alternative beside a number one whose bounds leave some "
            "of its integers out (both start with a digit)");
  EXPECT_EQ(CompileError(R"({"anyOf":[{"type":"integer","minimum":0,"maximum":9},
                                      {"type":"number","minimum":-1}]})"),
            "ok");
  // The same bounds on both (int | float with a minimum): the number writes the integers within
  // ±2^53, the most it writes.
  EXPECT_EQ(CompileError(R"({"anyOf":[{"type":"integer","minimum":0},{"type":"number",
                                      "minimum":0}]})"),
            "ok");
  EXPECT_EQ(CompileError(R"({"anyOf":[{"type":"integer"},{"type":"number","maximum":1e300}]})"),
            "ok");
  // In a list of types, one that the bounds leave empty goes; the others stay.
  EXPECT_EQ(CompileError(R"({"type":["integer","number"],"minimum":0.5,"maximum":0.7})"), "ok");
  EXPECT_EQ(CompileError(R"({"type":["integer","string"],"minimum":0.5,"maximum":0.7})"), "ok");
  EXPECT_EQ(CompileError(R"({"type":["integer","null"],"minimum":0.5,"maximum":0.7})"), "ok");
  EXPECT_EQ(CompileError(R"({"type":"integer","enum":[1,2],"maximum":1})"),
            "schema.maximum: not supported beside enum");
  EXPECT_EQ(CompileError(R"({"type":"integer","minimum":3,"exclusiveMaximum":4})"), "ok");
  EXPECT_EQ(CompileError(R"({"type":"integer","minimum":3.5,"exclusiveMaximum":4})"),
            "schema: no integer of at most 16 digits lies within its minimum/maximum");
  EXPECT_EQ(CompileError(R"({"type":"integer","minimum":1e16})"),
            "schema: no integer of at most 16 digits lies within its minimum/maximum");
  EXPECT_EQ(CompileError(R"({"type":"integer","exclusiveMinimum":true,"maximum":3})"),
            "schema.exclusiveMinimum: true needs minimum");
  EXPECT_EQ(CompileError(R"({"type":"integer","maximum":"3"})"),
            "schema.maximum: expected a number");
  // Strings ignore numeric bounds (JSON Schema applies them to numbers only).
  EXPECT_EQ(CompileError(R"({"type":["string","integer"],"minimum":2})"), "ok");
  EXPECT_EQ(CompileError(R"({"allOf":[{"type":"string"},{"maxLength":3}]})"),
            "schema.allOf: only an allOf of one schema, alone, is supported");
  EXPECT_NE(CompileError(R"({"anyOf":[{"type":"object"},{"type":"object","properties":{}}]})")
                .find("schema.anyOf: two alternatives can both start with '{'"),
            std::string::npos);
  EXPECT_EQ(CompileError(R"({"type":"strin"})"), "schema.type: unknown type 'strin'");
  EXPECT_NE(CompileError(R"({"$ref":"#/$defs/missing"})").find("is not a local"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"$ref":"#"})").find("circular reference"), std::string::npos);
  EXPECT_EQ(CompileError("false"), "schema: false admits no value");
  EXPECT_EQ(CompileError(R"({"type":"object","required":["a"],"properties":{"b":{}}})"),
            "schema.required: 'a' is not in properties");
  EXPECT_EQ(CompileError(R"({"type":"string","minLength":3,"maxLength":2})"),
            "schema: minLength is above maxLength");
  // Counts are integers as JSON Schema has them: 2.0 and 1e1 are 2 and 10; 2.5 and -1 are not.
  std::shared_ptr<const Grammar> counted =
      Compile(R"({"type":"array","items":{"type":"string","minLength":2.0},"maxItems":1e1})");
  ASSERT_NE(counted, nullptr);
  EXPECT_TRUE(Accepts(*counted, R"(["ab"])"));
  EXPECT_FALSE(Accepts(*counted, R"(["a"])"));
  EXPECT_FALSE(Accepts(*counted, R"(["ab","ab","ab","ab","ab","ab","ab","ab","ab","ab","ab"])"));
  for (const char* bad : {"2.5", "-1", "-1.0", "1e300"}) {
    EXPECT_EQ(CompileError(absl::StrCat(R"({"type":"string","minLength":)", bad, "}")),
              "schema.minLength: expected a non-negative integer")
        << bad;
  }
  EXPECT_EQ(CompileError(R"({"enum":[1,2],"type":"string"})"),
            "schema: enum/const admit no value of the given type");
  EXPECT_EQ(CompileError(R"({"type":"array","items":[{}]})"),
            "schema.items: a list of schemas (tuple) is not supported");
  EXPECT_EQ(CompileError(R"({"type":"array","uniqueItems":true})"),
            "schema.uniqueItems: not supported (structured output cannot enforce it)");
  EXPECT_NE(CompileError(R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},
                             "$ref":"#/$defs/a"})")
                .find("left recursion"),
            std::string::npos);
  // A chain of $refs nests without nesting the text: bounded, as are the nodes.
  Json chain = {{"$ref", "#/$defs/d0"}, {"$defs", Json::object()}};
  for (int i = 0; i < 1000; ++i) {
    chain["$defs"][absl::StrCat("d", i)] = {
        {"type", "array"}, {"items", {{"$ref", absl::StrCat("#/$defs/d", i + 1)}}}};
  }
  chain["$defs"]["d1000"] = {{"type", "null"}};
  EXPECT_NE(CompileError(chain.dump()).find("nests deeper than 128 schemas"), std::string::npos);
  Json wide = {{"type", "object"}, {"properties", Json::object()}};
  for (int i = 0; i < 20000; ++i) wide["properties"][absl::StrCat("p", i)] = {{"type", "null"}};
  EXPECT_NE(CompileError(wide.dump()).find("more than 10000 nodes"), std::string::npos);
  // No finite document, or none within the nesting bound: refused at compile time.
  EXPECT_NE(CompileError(R"({"type":"object","properties":{"c":{"$ref":"#"}},"required":["c"]})")
                .find("never ends"),
            std::string::npos);
  EXPECT_NE(
      CompileError(R"({"type":"array","items":{"$ref":"#"},"minItems":1})").find("never ends"),
      std::string::npos);
  Json required_chain = {{"$ref", "#/$defs/d0"}, {"$defs", Json::object()}};
  for (int i = 0; i < 40; ++i) {
    required_chain["$defs"][absl::StrCat("d", i)] = {
        {"type", "object"},
        {"properties", {{"a", {{"$ref", absl::StrCat("#/$defs/d", i + 1)}}}}},
        {"required", {"a"}}};
  }
  required_chain["$defs"]["d40"] = {{"type", "null"}};
  EXPECT_NE(CompileError(required_chain.dump()).find("deeper than 32"), std::string::npos);
  // Requests in flight with the same schema share its grammar; it goes with the last of them.
  {
    const std::string big_enum = [] {
      Json e = {{"enum", Json::array()}};
      for (int i = 0; i < 2000; ++i) e["enum"].push_back(absl::StrCat("member-", i));
      return e.dump();
    }();
    std::shared_ptr<const Grammar> a = Compile(big_enum), b = Compile(big_enum);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a, b);
    EXPECT_NE(Compile(R"({"enum":["member-1"]})"), a);
    std::weak_ptr<const Grammar> gone = a;
    a.reset();
    b.reset();
    EXPECT_TRUE(gone.expired());  // the cache holds no grammar alive
    EXPECT_TRUE(Accepts(*Compile(big_enum), R"("member-1999")"));
  }
  // Distinct large schemas held at once are bounded together (kMaxLiveGrammarBytes; 96 MiB
  // here, to keep the test light under ASan): past it a compile is refused by name, and what the
  // finished requests held comes back.
  {
    SetLiveGrammarBudget(96 << 20);
    const int64_t before = LiveGrammarBytes();
    std::vector<std::shared_ptr<const Grammar>> held;
    std::string refused;
    std::mt19937 rng(7);
    for (int k = 0; k < 200 && refused.empty(); ++k) {
      Json e = {{"enum", Json::array()}};  // 7,000 members of 30 random letters: no sharing
      for (int i = 0; i < 7000; ++i) {
        std::string member(30, 'a');
        for (char& c : member) c = static_cast<char>('a' + rng() % 26);
        e["enum"].push_back(std::move(member));
      }
      absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileJsonSchema(e, "schema");
      if (g.ok()) {
        held.push_back(*g);
      } else {
        EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted);
        refused = std::string(g.status().message());
      }
    }
    EXPECT_NE(refused.find("schema: the structured-output grammars of the requests in flight"),
              std::string::npos)
        << refused;
    EXPECT_LE(LiveGrammarBytes(), 96 << 20);
    EXPECT_GE(held.size(), 2u);
    EXPECT_GT(GrammarMemoryBytes(*held[0]), 10 << 20);  // ≈ 130 bytes a literal byte
    held.clear();
    EXPECT_EQ(LiveGrammarBytes(), before);
    SetLiveGrammarBudget(kMaxLiveGrammarBytes);
  }
  // Chains of one-alternative anyOfs, each chain's end linked to the previous chain's head: the
  // depth each needs comes from the one string at the far end, through 3,000 links (a pass over
  // every node per link took 30 s for a 500 KB schema). A key fits only once its value's depth
  // is known, so the document shows it got there.
  Json linked = {{"type", "object"}, {"properties", Json::object()}, {"$defs", Json::object()}};
  constexpr int kChains = 50, kLinks = 60;
  for (int k = 0; k < kChains; ++k) {
    for (int i = 0; i < kLinks; ++i) {
      Json alt = {{"$ref", absl::StrCat("#/$defs/c", k, "_", i + 1)}};
      if (i == kLinks - 1) {
        alt = k > 0 ? Json{{"$ref", absl::StrCat("#/$defs/c", k - 1, "_0")}}
                    : Json{{"type", "string"}};
      }
      linked["$defs"][absl::StrCat("c", k, "_", i)] = {{"anyOf", Json::array({alt})}};
    }
    linked["properties"][absl::StrCat("k", k)] = {{"$ref", absl::StrCat("#/$defs/c", k, "_0")}};
  }
  std::shared_ptr<const Grammar> g = Compile(linked.dump());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(*g, R"({"k0": "y", "k49": "x"})"));
  EXPECT_FALSE(Accepts(*g, R"({"k7": 1})"));
  // oneOf: exactly one alternative may match a value, so overlaps are refused.
  EXPECT_NE(CompileError(R"({"oneOf":[{"type":"boolean"},{"const":true}]})")
                .find("two alternatives both admit true"),
            std::string::npos);
  EXPECT_NE(
      CompileError(R"({"oneOf":[{"type":"integer"},{"type":"number"}]})").find("matches both"),
      std::string::npos);
  EXPECT_NE(CompileError(R"({"oneOf":[{"type":"string"},{"properties":{"x":{}}}]})")
                .find("schema.oneOf[1]: oneOf alternatives must each state type"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"$defs":{"a":{"type":"string"}},
                             "oneOf":[{"$ref":"#/$defs/a"},{"$ref":"#/$defs/a"}]})")
                .find("the same schema"),
            std::string::npos);
  EXPECT_EQ(CompileError(R"({"oneOf":[{"$ref":"#/$defs/a"},{"type":"null"}],
                             "$defs":{"a":{"type":"string"}}})"),
            "ok");
  // Keywords beside enum / const would go unchecked; uniqueItems anywhere; nested base URIs.
  EXPECT_EQ(CompileError(R"({"type":"string","enum":["a","bbbb"],"maxLength":2})"),
            "schema.maxLength: not supported beside enum");
  EXPECT_EQ(CompileError(R"({"const":[1,2,3],"maxItems":1})"),
            "schema.maxItems: not supported beside const");
  EXPECT_EQ(CompileError(R"({"anyOf":[{"type":"array"}],"uniqueItems":true})"),
            "schema.uniqueItems: not supported (structured output cannot enforce it)");
  EXPECT_EQ(CompileError(R"({"properties":{"p":{"$id":"https://x/s","type":"string"}}})"),
            "schema.properties.p.$id: not supported below the root schema");
  EXPECT_EQ(CompileError(R"({"$id":"https://x/root","type":"string"})"), "ok");
  // Large literals: merged without recursion; keys count against the literal budget.
  EXPECT_EQ(CompileError(absl::StrCat(R"({"anyOf":[{"const":")", std::string(80000, 'a'),
                                      R"("},{"type":"null"}]})")),
            "ok");
  EXPECT_NE(CompileError(absl::StrCat(R"({"properties":{")", std::string(kMaxLiteralBytes, 'k'),
                                      R"(":{}}})"))
                .find("exceed"),
            std::string::npos);
  // An integral float beyond int64 is an integer (no undefined cast).
  auto big = Compile(R"({"type":"integer","enum":[1e19,3]})");
  ASSERT_TRUE(big);
  EXPECT_TRUE(Accepts(*big, "3"));
  EXPECT_TRUE(Accepts(*big, Json(1e19).dump()));
  // Annotations are ignored; integer and number merge; enums in alternatives merge.
  EXPECT_EQ(CompileError(R"({"type":"string","format":"date-time","description":"d","title":"t"})"),
            "ok");
  EXPECT_EQ(CompileError(R"({"type":["integer","number","null"]})"), "ok");
  EXPECT_EQ(CompileError(R"({"anyOf":[{"enum":["a","b"]},{"const":"c"}]})"), "ok");
}

TEST(JsonMatcherTest, TakesValidDocumentsOnly) {
  auto g = Compile(kPerson);
  ASSERT_TRUE(g);
  EXPECT_TRUE(Accepts(*g, R"({"name":"Al","age":-3,"kind":"cat"})"));
  EXPECT_TRUE(Accepts(*g, "{ \"name\" : \"\\u00e9\xC3\xA9\\n\" ,\n  \"age\": 0, \"kind\": 12}"));
  EXPECT_TRUE(Accepts(*g,
                      R"({"name":"A","age":1,"score":-0.5e+12,"tags":["a","bc"],)"
                      R"("kind":null,"nick":null,"ok":false,"meta":{"x":1,"y":2},"v":"x\"y"})"));
  EXPECT_TRUE(Accepts(*g, R"({"name":"A","age":1,"kind":"ca"})"));         // "ca" of "cat" and "ca"
  EXPECT_FALSE(Accepts(*g, R"({"age":1,"name":"A","kind":"cat"})"));       // order
  EXPECT_FALSE(Accepts(*g, R"({"name":"A","kind":"cat"})"));               // required age skipped
  EXPECT_FALSE(Accepts(*g, R"({"name":"A","age":1})"));                    // cannot close yet
  EXPECT_TRUE(Accepts(*g, R"({"name":"A","age":1)", /*complete=*/false));  // … but a prefix
  EXPECT_FALSE(Accepts(*g, R"({"name":"A","age":1.5,"kind":"cat"})"));     // integer
  EXPECT_FALSE(Accepts(*g, R"({"name":"A","age":01,"kind":"cat"})"));      // leading zero
  EXPECT_FALSE(Accepts(*g, R"({"name":"","age":1,"kind":"cat"})"));        // minLength
  EXPECT_FALSE(Accepts(*g, R"({"name":"1234567890123","age":1,"kind":"cat"})"));  // maxLength
  EXPECT_FALSE(Accepts(*g, R"({"name":"A","age":1,"kind":"cow"})"));              // enum
  EXPECT_FALSE(Accepts(*g, R"({"name":"A","age":1,"kind":"cat","x":1})"));        // extra key
  EXPECT_FALSE(Accepts(*g, R"({"name":"A","age":1,"kind":"cat","tags":[]})"));    // minItems
  EXPECT_FALSE(Accepts(*g, R"({"name":"A","age":1,"kind":"cat"} )"));             // after the value
  EXPECT_FALSE(Accepts(*g, R"( {"name":"A","age":1,"kind":"cat"})"));            // … or before it
  EXPECT_FALSE(Accepts(*g, "{\"name\":\"a\x01\",\"age\":1,\"kind\":\"cat\"}"));  // control char
  for (const char* bad : {"\xC0\x80", "\xED\xA0\x80", "\xF5\x80\x80\x80", "\x80", "\xE0\x80\x80",
                          "\xF4\x90\x80\x80", "\\x41"}) {
    EXPECT_FALSE(Accepts(*g, std::string("{\"name\":\"") + bad + "\",\"age\":1,\"kind\":null}"))
        << bad;
  }
  // \u escapes: surrogates only in pairs (a lone one is refused as soon as it shows).
  EXPECT_TRUE(Accepts(*g, R"({"name":"\ud83d\uDE00","age":1,"kind":null})"));
  EXPECT_FALSE(Accepts(*g, R"({"name":"\ud83d")", false));
  EXPECT_FALSE(Accepts(*g, R"({"name":"\ud83d\u0041)", false));
  EXPECT_FALSE(Accepts(*g, R"({"name":"\uDC)", false));
  EXPECT_FALSE(Accepts(
      *g, absl::StrCat("{", std::string(kMaxWhitespaceRun + 1, ' '), "\"name\":\"a\""), false));
  auto object = JsonObjectGrammar();
  EXPECT_TRUE(Accepts(*object, R"({"a":[1,{"b":null}],"c":"d","e":true,"f":-1.5E-3})"));
  auto compact = *WithoutWhitespace(object, "compact");
  EXPECT_TRUE(Accepts(*compact, R"({"a":[1,{"b":null}],"c":"d e"})"));
  EXPECT_FALSE(Accepts(*compact, R"({"a": 1})"));
  EXPECT_TRUE(Accepts(*object, R"({"a": 1})"));  // the shared grammar is unchanged
  EXPECT_FALSE(Accepts(*object, "[1]"));
  EXPECT_FALSE(Accepts(*object, R"({"a":1,})"));
  std::string deep = "{\"a\":";
  for (int i = 1; i < kMaxNesting; ++i) deep += "[";
  EXPECT_TRUE(Accepts(*object, deep, false));
  EXPECT_FALSE(Accepts(*object, deep + "[", false));  // one level too deep
  auto num = Compile(R"({"type":"number"})");
  EXPECT_TRUE(Accepts(*num, "12"));  // may end: the document is whole
  EXPECT_TRUE(Accepts(*num, "12.", false));
  EXPECT_FALSE(Accepts(*num, std::string(kMaxIntegerDigits + 1, '7')));
}

// Near the nesting bound the matcher offers only what it can finish: an optional recursive key
// whose value would open one object too many is not offered, so "}" is the way out.
TEST(JsonMatcherTest, NoDeadEndAtTheNestingBound) {
  auto g = Compile(R"({"type":"object","properties":{"c":{"$ref":"#"},"n":{"type":"integer"}}})");
  ASSERT_TRUE(g);
  std::string deep;
  for (int i = 1; i < kMaxNesting; ++i) deep += R"({"c":)";
  deep += "{";  // kMaxNesting objects open
  JsonMatcher m(g.get());
  ASSERT_TRUE(m.FeedBytes(deep));
  JsonMatcher key = m;
  EXPECT_TRUE(key.FeedBytes(R"("n":1})"));  // a scalar key still fits
  JsonMatcher recurse = m;
  EXPECT_FALSE(recurse.FeedBytes(R"("c")"));  // its value would be one object too deep
  JsonMatcher close = m;
  EXPECT_TRUE(close.FeedBytes(std::string(kMaxNesting, '}')) && close.Complete());
  // Arrays of arrays: the innermost may still close; no ',' leads to an item that cannot fit.
  auto arrays = Compile(R"({"type":"array","items":{"$ref":"#"}})");
  ASSERT_TRUE(arrays);
  JsonMatcher a(arrays.get());
  ASSERT_TRUE(a.FeedBytes(std::string(kMaxNesting, '[')));
  JsonMatcher item = a;
  EXPECT_FALSE(item.Feed('['));
  EXPECT_TRUE(a.FeedBytes(std::string(kMaxNesting, ']')) && a.Complete());
}

TEST(JsonMatcherTest, ChoicesAreRawTextOneOfThem) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g =
      ChoiceGrammar({"yes", "no", "yes!", "\"q\" é"}, "choice");
  ASSERT_TRUE(g.ok()) << g.status();
  for (const char* ok : {"yes", "no", "yes!", "\"q\" é"}) EXPECT_TRUE(Accepts(**g, ok)) << ok;
  EXPECT_TRUE(Accepts(**g, "ye", /*complete=*/false));
  for (const char* bad : {"y", "yes!!", " no", "nope", "\"yes\""}) {
    EXPECT_FALSE(Accepts(**g, bad)) << bad;
  }
  EXPECT_EQ(ChoiceGrammar({"a", ""}, "choice").status().message(), "choice[1]: an empty choice");
  EXPECT_EQ(ChoiceGrammar({}, "choice").status().message(), "choice: give at least one choice");
}

TEST(JsonMatcherTest, RandomDocumentsValidate) {
  std::mt19937 rng(7);
  const std::vector<std::string> schemas = {
      kPerson,
      kTree,
      R"({"type":"array","items":{"type":["string","integer","null"]}})",
      R"({"type":"object","additionalProperties":false})",
      "{}",
      "true",
      R"({"oneOf":[{"type":"string","maxLength":2},{"type":"array","maxItems":1},{"type":"boolean"}]})",
      R"({"type":"object","properties":{"c":{"$ref":"#"},"d":{"type":"array","items":{"$ref":"#"}}}})",
      R"({"type":["object","null"],"properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"string"}]}}})",
      R"({"$defs":{"j":{"anyOf":[{"type":"null"},{"type":"number"},{"type":"array",
          "items":{"anyOf":[{"$ref":"#/$defs/j"},{"type":"boolean"}]}}]}},"$ref":"#/$defs/j"})",
      R"({"definitions":{"x":{"enum":[[1,2],{"a":"b"},"q"]}},"type":"object",
          "properties":{"x":{"$ref":"#/definitions/x"},"y":{"type":"string","nullable":true}}})",
      R"({"type":"array","items":{"type":["integer","null"],"minimum":-3,"exclusiveMaximum":41},
          "maxItems":4})",
      R"({"type":"array","items":{"type":"number","exclusiveMinimum":-0.5,"maximum":12.75}})",
      R"({"type":"object","properties":{"n":{"type":"integer","minimum":123456789012},
          "m":{"anyOf":[{"type":"integer","maximum":-10},{"type":"string"}]}},
          "required":["n","m"]})",
      R"({"type":"array","items":{"type":"string","pattern":"^[a-c\\\"]+(x|\\d{2})?$",
          "maxLength":6}})",
      R"({"type":"object","properties":{"p":{"type":["string","null"],"pattern":"é.\\s|^[^é]{4}",
          "minLength":4},"q":{"pattern":"^(ab)*$","minLength":3,"maxLength":9}},
          "required":["p","q"]})"};
  for (const std::string& text : schemas) {
    SCOPED_TRACE(text);
    const Json schema = Json::parse(text);
    auto g = Compile(text);
    ASSERT_TRUE(g);
    int finished = 0;
    for (int i = 0; i < 150; ++i) {
      const std::string doc = RandomDocument(*g, rng);
      if (doc.empty()) continue;
      ++finished;
      const Json v = Json::parse(doc, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << doc;
      EXPECT_TRUE(Validates(v, schema, schema)) << doc;
    }
    EXPECT_GT(finished, 60);
  }
  auto object = JsonObjectGrammar();
  for (int i = 0; i < 100; ++i) {
    const std::string doc = RandomDocument(*object, rng);
    if (doc.empty()) continue;
    const Json v = Json::parse(doc, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << doc;
    EXPECT_TRUE(v.is_object()) << doc;
  }
}

// A vocabulary of every single byte and some multi-byte pieces (partial UTF-8 characters, keys
// with their quotes, escapes, whitespace runs), plus ids that never appear.
std::vector<std::optional<std::string>> TestVocabulary() {
  std::vector<std::optional<std::string>> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const char* piece : {"{\"",       "\"}",        "\":",
                            "\", \"",    "true",       "nul",
                            "ab",        "\xC3",       "\xA9",
                            "\xC3\xA9",  "\xC3\xA9\"", "\"\xC3",
                            "12",        ".5",         "e+",
                            "  ",        "\n  ",       "\\n",
                            "\\u00",     "e9",         "name",
                            "\"name\":", "\"age\": ",  "cat\"",
                            "\"ca",      "[\"",        "\"]",
                            "},",        "null",       "-0",
                            "\xF0\x9F",  "\x98\x80",   "\xE2\x82\xAC abc",
                            "\"\"",      "\\\"",       "\\"}) {
    v.push_back(std::string(piece));
  }
  v.push_back(std::nullopt);
  v.push_back(std::string());
  return v;
}

std::vector<uint64_t> Mask(JsonConstraint& c, int64_t vocab) {
  std::vector<uint64_t> m(static_cast<size_t>((vocab + 63) / 64), 0);
  c.FillAllowed(absl::MakeSpan(m));
  return m;
}

bool Bit(const std::vector<uint64_t>& m, int64_t t) { return (m[t / 64] >> (t % 64)) & 1; }

TEST(JsonConstraintTest, MasksEqualABruteForceWalkAndRandomTokensValidate) {
  auto vocab = TestVocabulary();
  auto index = std::make_shared<const TokenIndex>(vocab);
  const int64_t n = index->vocab();
  EXPECT_FALSE(index->usable(static_cast<int32_t>(n - 1)));  // empty bytes
  EXPECT_FALSE(index->usable(static_cast<int32_t>(n - 2)));  // no bytes
  EXPECT_TRUE(index->is_plain('a'));
  EXPECT_FALSE(index->is_plain('"'));
  EXPECT_FALSE(index->is_plain(0x80));  // a continuation byte cannot start a character
  std::mt19937 rng(11);
  for (const std::string& text :
       {std::string(kPerson), std::string(kTree), std::string("{}"),
        std::string(R"({"type":"array","items":{"type":"integer","minimum":-12,"maximum":1290}})"),
        std::string(R"({"type":"array","items":{"type":"string","pattern":"^(na|me|\\n)+é?$",
            "maxLength":7}})")}) {
    SCOPED_TRACE(text);
    const Json schema = Json::parse(text);
    auto g = Compile(text);
    ASSERT_TRUE(g);
    int finished = 0;
    for (int walk = 0; walk < 60; ++walk) {
      JsonConstraint c(g, index);
      JsonMatcher shadow(g.get());  // the same bytes through a plain matcher
      std::string doc;
      for (int step = 0; step < 300; ++step) {
        const std::vector<uint64_t> m = Mask(c, n);
        std::vector<int32_t> allowed;
        for (int64_t t = 0; t < n; ++t) {
          JsonMatcher probe = shadow;
          const bool want = index->usable(static_cast<int32_t>(t)) &&
                            probe.FeedBytes(*vocab[static_cast<size_t>(t)]);
          ASSERT_EQ(Bit(m, t), want) << "token " << t << " after " << doc;
          ASSERT_EQ(c.Allows(static_cast<int32_t>(t)), want);
          if (want) allowed.push_back(static_cast<int32_t>(t));
        }
        if (c.Complete() && (allowed.empty() || rng() % 3 == 0)) break;
        ASSERT_FALSE(allowed.empty()) << doc;
        // Lean on multi-byte pieces and punctuation so that walks end.
        std::vector<int32_t> pref;
        for (int32_t t : allowed) {
          if (t >= 256 || std::ispunct(t)) pref.push_back(t);
        }
        const std::vector<int32_t>& from = !pref.empty() && rng() % 4 != 0 ? pref : allowed;
        const int32_t t = from[rng() % from.size()];
        ASSERT_TRUE(c.Advance(t).ok());
        ASSERT_TRUE(shadow.FeedBytes(index->bytes(t)));
        doc += index->bytes(t);
      }
      if (!c.Complete()) continue;
      ++finished;
      const Json v = Json::parse(doc, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << doc;
      EXPECT_TRUE(Validates(v, schema, schema)) << doc;
      EXPECT_FALSE(c.Advance('}').ok() && c.Advance('}').ok());  // nothing after the document
    }
    EXPECT_GT(finished, 20);
  }
}

TEST(JsonConstraintTest, MaxLengthCountsCharactersOfPlainTokens) {
  auto index = std::make_shared<const TokenIndex>(TestVocabulary());
  auto g = Compile(R"({"type":"string","maxLength":2})");
  JsonConstraint c(g, index);
  ASSERT_TRUE(c.Advance('"').ok());
  ASSERT_TRUE(c.Advance('a').ok());
  std::vector<uint64_t> m = Mask(c, index->vocab());
  EXPECT_TRUE(Bit(m, 'b'));
  EXPECT_TRUE(Bit(m, '"'));
  EXPECT_FALSE(Bit(m, 256 + 6));  // "ab": three characters
  ASSERT_TRUE(c.Advance('b').ok());
  m = Mask(c, index->vocab());
  EXPECT_FALSE(Bit(m, 'c'));
  EXPECT_TRUE(Bit(m, '"'));
  std::unique_ptr<TokenConstraint> fresh = c.Fresh();
  EXPECT_TRUE(fresh->Allows('"'));
  EXPECT_FALSE(fresh->Allows('a'));
  EXPECT_FALSE(fresh->Complete());
}

}  // namespace
}  // namespace linfer::structured
