// Unit tests of the chat template engine: syntax errors with line:column, limits against
// hostile templates, undefined values, every filter and test, FindChatTemplate. (Exactness
// against jinja2 is chat_template_oracle_test's job; these pin the engine's own contract.)
#include "models/tokenizer/chat_template.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace linfer::tokenizer {
namespace {

using OJson = nlohmann::ordered_json;

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

OJson Vars() {
  return OJson::parse(R"({"xs": [1, 2, 3], "s": "héllo", "d": {"a": 1, "b": [1, 2]},
    "users": [{"name": "Bob", "admin": true}, {"name": "Ann", "admin": false}]})");
}

absl::StatusOr<std::string> Render(const std::string& src, const OJson& vars = Vars(),
                                   ChatTemplateOptions options = {}) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(src, options);
  if (!t.ok()) return t.status();
  return t->Render(vars);
}

std::string Ok(const std::string& src, const OJson& vars = Vars()) {
  absl::StatusOr<std::string> r = Render(src, vars);
  EXPECT_TRUE(r.ok()) << src << ": " << r.status();
  return r.ok() ? *r : "<error>";
}

absl::Status Err(const std::string& src, ChatTemplateOptions options = {}) {
  absl::StatusOr<std::string> r = Render(src, Vars(), options);
  EXPECT_FALSE(r.ok()) << src << " rendered " << *r;
  return r.status();
}

TEST(ChatTemplate, SyntaxErrorsNameLineAndColumn) {
  struct Case {
    const char* src;
    const char* where;
  };
  for (const Case& c : std::vector<Case>{
           {"line one\n  {{ 1 + }}", "2:10:"},
           {"{% if true %}\nx", "2:2:"},
           {"ab\ncd {% frobnicate %}", "2:7:"},
           {"{{ (1 + 2 }}", "1:11:"},
           {"{# never closed", "1:3:"},
           {"\n\n   {{ 'abc }}", "3:7:"},
           {"{% for x in xs %}{% break %}{% endfor %}{% break %}", "1:44:"},
           {"{{ 1 is number is string }}", "1:16:"},
           {"{% extends 'base' %}", "1:4:"},
       }) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(c.src);
    ASSERT_FALSE(t.ok()) << c.src;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(t.status().message().substr(0, std::string(c.where).size()), c.where)
        << c.src << " -> " << t.status();
  }
}

TEST(ChatTemplate, RuntimeErrorsNameLineAndColumn) {
  absl::Status s = Err("ok\n{{ 'a' + 1 }}");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(s.message(), "2:8: TypeError: can only concatenate str")) << s;
  s = Err("{% if true %}\n  {{ raise_exception('Roles must alternate') }}{% endif %}");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(s.message(), "2:")) << s;
  EXPECT_NE(s.message().find("Roles must alternate"), absl::string_view::npos) << s;
}

TEST(ChatTemplate, UndefinedFollowsJinja2DefaultUndefined) {
  EXPECT_EQ(Ok("[{{ nope }}][{{ d.nokey }}][{{ d['nokey'] }}][{{ xs[10] }}][{{ nope ~ 'x' }}]"),
            "[][][][][x]");
  EXPECT_EQ(Ok("{{ nope is defined }} {{ nope is undefined }} {{ nope|length }} {{ nope == nope }}"
               " {{ nope|default('dflt') }} {{ 'a' in nope }}"),
            "False True 0 True dflt False");
  EXPECT_EQ(Ok("{% for x in nope %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_TRUE(absl::StrContains(Err("{{ nope.attr }}").message(), "'nope' is undefined"));
  EXPECT_TRUE(absl::StrContains(Err("{{ d.nokey.deeper }}").message(),
                                "'dict object' has no attribute 'nokey'"));
  EXPECT_FALSE(Err("{{ nope + 1 }}").ok());
  EXPECT_FALSE(Err("{{ nope() }}").ok());
  EXPECT_FALSE(Err("{{ nope < 1 }}").ok());
  EXPECT_FALSE(Err("{{ nope|tojson }}").ok());
}

TEST(ChatTemplate, SandboxRefusesMutation) {
  for (const char* src : {"{{ xs.append(4) }}", "{{ xs.pop() }}", "{{ xs.clear() }}",
                          "{{ xs.sort() }}", "{{ d.update({'z': 1}) }}", "{{ d.pop('a') }}"}) {
    absl::Status s = Err(src);
    EXPECT_TRUE(absl::StrContains(s.message(), "SecurityError")) << src << ": " << s;
  }
  EXPECT_EQ(Ok("[{{ xs.append }}] {{ xs.append is defined }} {{ xs }}"), "[] False [1, 2, 3]");
  EXPECT_TRUE(absl::StrContains(Err("{{ range(100001)|length }}").message(), "MAX_RANGE"));
}

// A namespace may not come to hold itself (directly, through a list or dict, or through another
// namespace): reference counting would never free it, and printing it would recurse forever (both
// found by fuzzing; the corpus keeps regress_namespace_cycle). Other namespaces, shared lists and
// deep nesting are fine; a loop's `loop` takes no attributes, as in jinja2.
TEST(ChatTemplate, NamespacesCannotHoldThemselves) {
  for (const char* src :
       {"{% set ns = namespace(x=0) %}{% set ns.self = ns %}",
        "{% set ns = namespace(x=0) %}{% set ns.l = [1, {'a': [ns]}] %}",
        "{% set a = namespace() %}{% set b = namespace(a=a) %}{% set a.b = [b] %}"}) {
    absl::Status s = Err(src);
    EXPECT_TRUE(absl::StrContains(s.message(), "inside itself")) << src << ": " << s;
  }
  EXPECT_EQ(Ok("{% set a = namespace(x=1) %}{% set b = namespace(a=a) %}{% set l = [a, a] %}"
               "{% set b.l = [l, l] %}{{ b.l[1][0].x }}{{ b.a.x }}"),
            "11");
  EXPECT_EQ(Ok("{% set ns = namespace(l=0) %}{% for i in range(300) %}{% set ns.l = [ns.l] %}"
               "{% endfor %}{{ (ns.l|string)[:4] }}{{ (ns.l|string)|length > 500 }}"),
            "[[[[True");
  absl::Status s = Err("{% for i in xs %}{% set loop.x = loop %}{% endfor %}");
  EXPECT_TRUE(absl::StrContains(s.message(), "non-namespace")) << s;
}

// Hostile templates stop quickly with ResourceExhausted; none may crash or hang.
TEST(ChatTemplate, LimitsStopHostileTemplates) {
  ChatTemplateOptions o;
  o.max_output_bytes = 1 << 20;
  struct Case {
    const char* what;
    std::string src;
  };
  const std::vector<Case> cases = {
      {"infinite recursion", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"},
      {"recursion through deep blocks",
       [] {
         std::string body;
         for (int i = 0; i < 200; ++i) body += "{% if true %}";
         body += "{{ f() }}";
         for (int i = 0; i < 200; ++i) body += "{% endif %}";
         return "{% macro f() %}" + body + "{% endmacro %}{{ f() }}";
       }()},
      {"10^10 loop iterations",
       "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"},
      {"doubling string",
       "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
       "{% endfor %}{{ ns.s|length }}"},
      {"string repetition", "{{ 'x' * 1000000000 }}"},
      {"list repetition", "{{ ([1] * 100000) * 100000 }}"},
      {"huge output", "{% for i in range(100000) %}{{ 'y' * 100 }}{% endfor %}"},
      {"deep list",
       "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
       "{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l|length }}"},
      {"quadratic scanning",
       "{% set s = 'x' * 1000000 %}{% for i in range(100000) %}"
       "{% if 'y' in s %}{% endif %}{% endfor %}"},
      {"joined growth",
       "{% set ns = namespace(l=['x' * 1000]) %}{% for i in range(40) %}"
       "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|join|length }}"},
  };
  for (const Case& c : cases) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> r = Render(c.src, Vars(), o);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_FALSE(r.ok()) << c.what << " rendered " << r->size() << " bytes";
    EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted)
        << c.what << ": " << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), ":")) << r.status();
    EXPECT_LT(s, 10.0) << c.what << " took " << s << " s";  // ~0.5 s on an idle machine
    std::printf("%s: stopped after %.3f s: %s\n", c.what, s,
                std::string(r.status().message()).c_str());
  }
}

TEST(ChatTemplate, DeeplyNestedSourceIsAnErrorNotACrash) {
  const std::string parens =
      "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_FALSE(ChatTemplate::Parse(parens).ok());
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_FALSE(ChatTemplate::Parse(ifs).ok());
  const std::string nots = "{{ " + [] {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += "not ";
    return s;
  }() + "1 }}";
  EXPECT_FALSE(ChatTemplate::Parse(nots).ok());
  OJson deep = OJson::array();
  for (int i = 0; i < 2000; ++i) deep = OJson::array({deep});
  absl::StatusOr<std::string> r = Render("{{ x|length }}", OJson{{"x", deep}});
  EXPECT_FALSE(r.ok());
}

// Long chains parse in loops, not calls, and build trees as deep as they are long: rendering one
// stops at the interpreter's nesting limit (filters too) and freeing it recurses not at all.
TEST(ChatTemplate, LongChainsAreAnErrorNotACrash) {
  const auto repeat = [](absl::string_view piece, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s.append(piece.data(), piece.size());
    return s;
  };
  const std::vector<std::string> chains = {
      absl::StrCat("x", repeat("|e", 60000)), absl::StrCat(repeat("x or ", 300000), "x"),
      absl::StrCat(repeat("1 + ", 300000), "1"), absl::StrCat("x", repeat("()", 300000)),
      absl::StrCat("x", repeat("[0]", 300000))};
  for (const std::string& expr : chains) {
    // At the top, and (one chain) in a loop's body and a macro's: both are searched for a name
    // before they run.
    std::vector<std::string> sources = {absl::StrCat("{{ ", expr, " }}")};
    if (&expr == &chains[1]) {
      sources.push_back(absl::StrCat("{% for m in [1] %}{{ ", expr, " }}{% endfor %}"));
      sources.push_back(absl::StrCat("{% macro f() %}{{ ", expr, " }}{% endmacro %}{{ f() }}"));
    }
    for (const std::string& src : sources) {
      absl::StatusOr<std::string> r = Render(src, OJson{{"x", "a"}});
      EXPECT_FALSE(r.ok()) << src.substr(0, 30);
      if (!r.ok() && !absl::StrContains(r.status().message(), "nested deeper than")) {
        ADD_FAILURE() << src.substr(0, 30) << ": " << r.status();
      }
    }
  }
  // A malformed one (a trailing `or`) is refused after its tree was built.
  EXPECT_FALSE(ChatTemplate::Parse(absl::StrCat("{{ ", repeat("x or ", 300000), " }}")).ok());
}

TEST(ChatTemplate, WhitespaceControl) {
  EXPECT_EQ(Ok("{% if true %}\nA\n{% endif %}\nB\n"), "A\nB");
  EXPECT_EQ(Ok("  {% if true %}\n    X\n  {% endif %}\n  {{ 'y' }}\n"), "    X\n  y");
  EXPECT_EQ(Ok("a   {{- ' b ' -}}   c"), "a b c");
  EXPECT_EQ(Ok("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
  EXPECT_EQ(Ok("a {# note #}\n  {# indented #}\nb"), "a b");
  EXPECT_EQ(Ok("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(Ok("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n"), "a\nb\n");
}

TEST(ChatTemplate, Statements) {
  EXPECT_EQ(Ok("{% for x in xs %}{{ loop.index }}{{ loop.first }}{{ loop.last }}"
               "{{ loop.revindex }}{{ loop.length }}{% endfor %}"),
            "1TrueFalse332FalseFalse233FalseTrue13");
  EXPECT_EQ(Ok("{% for x in xs if x > 1 %}{{ loop.index }}/{{ loop.length }} {% endfor %}"),
            "1/2 2/2 ");
  EXPECT_EQ(Ok("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=[1, 2];");
  EXPECT_EQ(Ok("{% for x in range(9) %}{% if x == 2 %}{% continue %}{% endif %}"
               "{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "0134");
  EXPECT_EQ(Ok("{% set x = 0 %}{% for i in xs %}{% set x = i %}{% endfor %}{{ x }}"), "0");
  EXPECT_EQ(Ok("{% set ns = namespace(n=0) %}{% for i in xs %}{% set ns.n = ns.n + i %}"
               "{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(Ok("{% set b %} x {% endset %}[{{ b }}]"), "[ x ]");
  EXPECT_EQ(Ok("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(b=2, a=3) }}"),
            "1B32");
  EXPECT_EQ(Ok("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}"),
            "<in>");
  EXPECT_EQ(Ok("{% filter upper %}abc{% endfilter %}"), "ABC");
  EXPECT_EQ(Ok("{% with a = 2 %}{{ a * 2 }}{% endwith %}"), "4");
  EXPECT_EQ(Ok("{% generation %}g{% endgeneration %}"), "g");
}

TEST(ChatTemplate, ExpressionsAndPythonFormatting) {
  EXPECT_EQ(Ok("{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}"),
            "3.5 3 -4 2 1024 0.5");
  EXPECT_EQ(Ok("{{ 1.0 }} {{ 1e-5 }} {{ 1e16 }} {{ 0.1 + 0.2 }} {{ 1e15 }} {{ -0.0 }}"),
            "1.0 1e-05 1e+16 0.30000000000000004 1000000000000000.0 -0.0");
  EXPECT_EQ(Ok("{{ [1, 'a', none, true, 1.5] }} {{ {'k': \"it's\"} }} {{ (1,) }}"),
            "[1, 'a', None, True, 1.5] {'k': \"it's\"} (1,)");
  EXPECT_EQ(Ok("{{ s[::-1] }} {{ xs[1:] }} {{ xs[-1] }} {{ s|length }}"), "olléh [2, 3] 3 5");
  EXPECT_EQ(Ok("{{ 'y' if 0 else 'n' }} {{ 0 or 'x' }} {{ 1 and 'y' }} {{ 'a' ~ 1 }}"), "n x y a1");
  EXPECT_EQ(Ok("{{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 2 not in xs }} {{ 1 == 1.0 }}"),
            "True True False True");
  EXPECT_EQ(Ok("{{ '  x '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'ab'.startswith('a') }}"
               "|{{ 'aXa'.replace('a', 'b') }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}"
               "|{{ 'ab cd'.title() }}|{{ 'abc'.find('c') }}|{{ '-'.join(['a', 'b']) }}"),
            "x|['a', 'b']|True|bXb|ABab|Ab Cd|2|a-b");
  EXPECT_EQ(Ok("{{ d.get('zz', 5) }} {{ d.keys()|list }} {{ d.values()|list }}"),
            "5 ['a', 'b'] [1, [1, 2]]");
}

TEST(ChatTemplate, EveryFilter) {
  EXPECT_EQ(
      Ok("{{ {'b': 'ü', 'a': [1.5, none]}|tojson }}|{{ [1]|tojson(indent=2) }}"
         "|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ 'é'|tojson(ensure_ascii=true) }}"
         "|{{ {'a': 1}|tojson(separators=(',', ':')) }}"),
      "{\"b\": \"ü\", \"a\": [1.5, null]}|[\n  1\n]|{\"a\": 2, \"b\": 1}|\"\\u00e9\"|{\"a\":1}");
  EXPECT_EQ(Ok("[{{ ' a '|trim }}][{{ 'xax'|trim('x') }}]"), "[a][a]");
  EXPECT_EQ(Ok("{{ 'aB'|upper }}{{ 'aB'|lower }} {{ 'ab-cd ef'|title }} {{ 'aB'|capitalize }}"),
            "ABab Ab-Cd Ef Ab");
  EXPECT_EQ(Ok("{{ xs|length }}{{ xs|count }} {{ 'aa'|replace('a', 'b') }}"), "33 bb");
  EXPECT_EQ(Ok("{{ nope|default('d') }}{{ ''|d('e', true) }} {{ xs|first }}{{ xs|last }}"),
            "de 13");
  EXPECT_EQ(Ok("{{ xs|join(',') }} {{ 'ab'|list }} {{ 1|string }} {{ '3'|int + 1 }}"
               " {{ '2.5'|float }} {{ -2|abs }} {{ 2.567|round(2) }}"),
            "1,2,3 ['a', 'b'] 1 4 2.5 2 2.57");
  EXPECT_EQ(Ok("{{ d|items|list }} {{ users|map(attribute='name')|list }}"
               " {{ xs|map('string')|list }}"),
            "[('a', 1), ('b', [1, 2])] ['Bob', 'Ann'] ['1', '2', '3']");
  EXPECT_EQ(Ok("{{ xs|select('odd')|list }} {{ xs|reject('odd')|list }}"
               " {{ users|selectattr('admin')|map(attribute='name')|list }}"
               " {{ users|rejectattr('name', 'equalto', 'Bob')|map(attribute='name')|list }}"),
            "[1, 3] [2] ['Bob'] ['Ann']");
  EXPECT_EQ(Ok("{{ [2, 1, 2]|unique|list }} {{ xs|reverse|list }} {{ [3, 1, 2]|sort }}"
               " {{ ['b', 'A']|sort }}"),
            "[2, 1] [3, 2, 1] [1, 2, 3] ['A', 'b']");
  EXPECT_EQ(Ok("{{ '<a>'|safe }} {{ '<a>'|e }} {{ '<a>'|escape }}"), "<a> &lt;a&gt; &lt;a&gt;");
  EXPECT_EQ(Ok("{{ 'a\nb'|indent(2) }}|{{ 'a b'|wordcount }}|{{ xs|sum }}|{{ xs|min }}"
               "{{ xs|max }}|{{ range(3)|batch(2)|list }}|{{ {'b': 1, 'a': 2}|dictsort }}"),
            "a\n  b|2|6|13|[[0, 1], [2]]|[('a', 2), ('b', 1)]");
  EXPECT_TRUE(absl::StrContains(Err("{{ xs|nosuch }}").message(), "No filter named"));
}

TEST(ChatTemplate, EveryTest) {
  EXPECT_EQ(Ok("{{ 1 is defined }}{{ nope is undefined }}{{ none is none }}{{ 'a' is string }}"
               "{{ 1 is number }}{{ 1 is integer }}{{ 1.5 is float }}{{ d is mapping }}"
               "{{ xs is sequence }}{{ xs is iterable }}{{ true is boolean }}{{ true is true }}"
               "{{ false is false }}{{ 3 is odd }}{{ 2 is even }}{{ 6 is divisibleby 3 }}"
               "{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 2 is equalto 2 }}{{ 2 is eq 2 }}"
               "{{ 2 is in xs }}{{ 3 is gt 2 }}{{ 2 is lt 3 }}{{ 2 is ge 2 }}{{ 2 is le 2 }}"
               "{{ 2 is ne 3 }}{{ none is sameas none }}{{ range is callable }}"
               "{{ 'upper' is filter }}{{ 'odd' is test }}{{ ('x'|e) is escaped }}"),
            Repeat("True", 31));
  EXPECT_EQ(Ok("{{ 1 is not none }} {{ true is integer }} {{ 1 is string }}"), "True False False");
  EXPECT_TRUE(absl::StrContains(Err("{{ 1 is nosuch }}").message(), "No test named"));
}

TEST(ChatTemplate, StrftimeNowUsesTheFixedClock) {
  ChatTemplateOptions o;
  o.now = absl::FromUnixSeconds(1795444496);  // 2026-11-23 14:34:56 UTC (tests run in TZ=UTC)
  absl::StatusOr<std::string> r =
      Render("{{ strftime_now('%Y-%m-%d %H:%M:%S %b') }}[{{ strftime_now('%Z') }}]", Vars(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "2026-11-23 14:34:56 Nov[]");
}

TEST(ChatTemplate, KeyOrderOfOrderedJsonReachesTojson) {
  const OJson vars = OJson::parse(R"({"t": {"type": "function", "function": {"name": "f"}}})");
  EXPECT_EQ(Ok("{{ t|tojson }}", vars), R"({"type": "function", "function": {"name": "f"}})");
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse("{{ t|tojson }}");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::string> sorted = t->Render(nlohmann::json::parse(vars.dump()));
  ASSERT_TRUE(sorted.ok());
  EXPECT_EQ(*sorted, R"({"function": {"name": "f"}, "type": "function"})");
  EXPECT_FALSE(t->Render(OJson::array()).ok());
}

TEST(ChatTemplate, VarsAsTransformersPassesThem) {
  const OJson messages = OJson::parse(R"([{"role": "user", "content": "hi"}])");
  absl::StatusOr<OJson> vars =
      ChatTemplateVars(messages, nullptr, true, OJson{{"bos_token", "<s>"}, {"eos_token", "</s>"}},
                       OJson{{"enable_thinking", false}, {"eos_token", "<e>"}});
  ASSERT_TRUE(vars.ok()) << vars.status();
  EXPECT_EQ(vars->dump(),
            R"({"messages":[{"role":"user","content":"hi"}],"tools":null,"documents":null,)"
            R"("add_generation_prompt":true,"bos_token":"<s>","eos_token":"<e>",)"
            R"("enable_thinking":false})");
  EXPECT_EQ(Ok("{{ tools is defined }} {{ tools is none }} {{ documents is none }}", *vars),
            "True True True");
  EXPECT_FALSE(ChatTemplateVars(messages, nullptr, false, nullptr, OJson{{"tools", 1}}).ok());
  EXPECT_FALSE(ChatTemplateVars(OJson::object(), nullptr, false, nullptr, nullptr).ok());
}

class FindChatTemplateTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("linfer_chat_template_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const char* name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::filesystem::path dir_;
};

TEST_F(FindChatTemplateTest, ConfigStringListJinjaFileAndNone) {
  absl::StatusOr<std::optional<std::string>> none = FindChatTemplate(dir_);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  Write("chat_template.jinja", "from file");
  EXPECT_EQ(FindChatTemplate(dir_)->value(), "from file");
  Write("tokenizer_config.json", R"({"chat_template": "from config", "bos_token": "<s>",
      "eos_token": {"content": "</s>", "lstrip": false}, "unk_token": null})");
  EXPECT_EQ(FindChatTemplate(dir_)->value(), "from config");
  absl::StatusOr<OJson> tokens = FindSpecialTokens(dir_);
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->dump(), R"({"bos_token":"<s>","eos_token":"</s>"})");
  Write("tokenizer_config.json", R"({"chat_template": [{"name": "default", "template": "D"},
      {"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(FindChatTemplate(dir_)->value(), "D");
  EXPECT_EQ(FindChatTemplate(dir_, "tool_use")->value(), "T");
  absl::StatusOr<std::optional<std::string>> missing = FindChatTemplate(dir_, "rag");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "tokenizer_config.json"));
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "tool_use"));
  Write("tokenizer_config.json", "{not json");
  absl::StatusOr<std::optional<std::string>> bad = FindChatTemplate(dir_);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "tokenizer_config.json"));
}

}  // namespace
}  // namespace linfer::tokenizer
