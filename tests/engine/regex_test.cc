// Structured output's regular expressions (regex_syntax.h, regex_dfa.h, string_formats.h) against
// independent oracles: libstdc++'s std::wregex (ECMAScript, a backtracking matcher sharing nothing
// with the DFA) on every short text over a small alphabet, brute-force enumeration for the length
// table, every code point for UTF-8 classes, std::chrono's calendar for dates, inet_pton for IP
// addresses; then the JSON matcher and token masks over pattern strings.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/json_grammar.h"
#include "engine/structured/json_matcher.h"
#include "engine/structured/regex_dfa.h"
#include "engine/structured/string_formats.h"
#include "models/tokenizer/utf8.h"
#include "nlohmann/json.hpp"
#include "tests/engine/structured_testing.h"

namespace linfer::structured {
namespace {

RegexDfa MustCompile(const std::string& p, RegexOptions o = {}) {
  absl::StatusOr<RegexDfa> d = CompileRegex(p, o, "p");
  EXPECT_TRUE(d.ok()) << p << ": " << d.status();
  return d.ok() ? *std::move(d) : RegexDfa{};
}

std::string Error(const std::string& p, RegexOptions o = {}) {
  absl::StatusOr<RegexDfa> d = CompileRegex(p, o, "p");
  return d.ok() ? "ok" : std::string(d.status().message());
}

// The DFA's state after `text` (kDead when refused on the way), characters counted.
int32_t Walk(const RegexDfa& d, const std::string& text, int64_t* chars = nullptr) {
  int32_t s = d.start;
  int64_t n = 0;
  for (unsigned char c : text) {
    if (s < 0) return s;
    s = d.Next(s, c);
    n += (c & 0xC0) != 0x80;
    if (s >= 0 && !d.Fits(s, n)) return RegexDfa::kDead;
  }
  if (chars) *chars = n;
  return s;
}

bool Matches(const RegexDfa& d, const std::string& text) {
  int64_t n = 0;
  const int32_t s = Walk(d, text, &n);
  return s >= 0 && d.MayEnd(s, n);
}

std::wstring Wide(const std::string& s) {  // ASCII only here
  return std::wstring(s.begin(), s.end());
}

// Every text over `alphabet` of at most `len` characters.
std::vector<std::string> Texts(const std::string& alphabet, int len) {
  std::vector<std::string> out = {""};
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int>(out[i].size()) == len) continue;
    for (char c : alphabet) out.push_back(out[i] + c);
  }
  return out;
}

const char* const kPatterns[] = {
    "a",         "ab|c",  "(ab)*",     "a+b?",         "[a-c]{2,3}", "^a",        "b$",
    "^(a|bc)*$", "a{0}b", "(a|b)*abb", "[^a]+",        ".c.",        "a|^b|c$",   "(?:ab){1,}c?",
    "a*?b",      "^$",    "\\w\\d",    "[\\]a-]",      "a{2,}",      "^a|b$",     "((a)|(b))+",
    "[a\\-c]",   "a|",    "(|a)b",     "\\x61\\u0062", "[b-b]c",     "^(a|b)+c$", "ac*b*a",
};

TEST(RegexDfaTest, FullMatchesAndSearchesEqualStdRegexOnEveryShortText) {
  const std::vector<std::string> texts = Texts("abcx1{", 4);
  for (const char* p : kPatterns) {
    SCOPED_TRACE(p);
    RegexOptions full, search;
    search.search = true;
    const RegexDfa whole = MustCompile(p, full), any = MustCompile(p, search);
    const std::wregex oracle(Wide(p), std::regex::ECMAScript);
    for (const std::string& t : texts) {
      const std::wstring w = Wide(t);
      ASSERT_EQ(Matches(whole, t), std::regex_match(w, oracle)) << "full match of '" << t << "'";
      ASSERT_EQ(Matches(any, t), std::regex_search(w, oracle)) << "search in '" << t << "'";
    }
  }
}

TEST(RegexDfaTest, AStateIsLiveExactlyWhenSomeLongerTextMatches) {
  // No dead end: after every prefix the DFA keeps, some extension matches; after every prefix it
  // refuses, none does (extensions up to 4 more characters; the patterns need no more).
  const std::string alphabet = "abc";
  const std::vector<std::string> texts = Texts(alphabet, 7);
  for (const char* p : {"(ab)*c", "a{3}b", "^a(b|c)$", "[ab]*cc", "a|bbbb"}) {
    SCOPED_TRACE(p);
    const RegexDfa d = MustCompile(p);
    const std::wregex oracle(Wide(p), std::regex::ECMAScript);
    for (const std::string& prefix : Texts(alphabet, 3)) {
      bool some = false;
      for (const std::string& t : Texts(alphabet, 4)) {
        if (std::regex_match(Wide(prefix + t), oracle)) some = true;
      }
      EXPECT_EQ(Walk(d, prefix) >= 0, some) << "after '" << prefix << "'";
    }
  }
}

TEST(RegexDfaTest, LengthTableEqualsEnumeration) {
  // Fits(state after s, |s|) ⇔ some s + t with |s + t| in [lo, hi] matches.
  const std::string alphabet = "ab";
  for (const char* p : {"(aa)*", "a*b", "(ab|b)*", "b|aaa", "a?b?a?b?"}) {
    for (const auto& bounds :
         std::vector<std::pair<int, int>>{{0, 3}, {2, 5}, {3, 3}, {4, 6}, {1, 100}, {5, -1}}) {
      const int lo = bounds.first, hi = bounds.second;  // (clang 14 lambdas take no bindings)
      SCOPED_TRACE(absl::StrCat(p, " ", lo, "..", hi));
      RegexOptions o;
      o.min_chars = lo;
      if (hi >= 0) o.max_chars = hi;
      absl::StatusOr<RegexDfa> d = CompileRegex(p, o, "p");
      const std::wregex oracle(Wide(p), std::regex::ECMAScript);
      const int horizon = hi >= 0 ? std::min(hi, 8) : 8;
      auto in_bounds = [&](const std::string& t) {
        return static_cast<int>(t.size()) >= lo && (hi < 0 || static_cast<int>(t.size()) <= hi);
      };
      const std::vector<std::string> all = Texts(alphabet, horizon);
      bool any = false;
      for (const std::string& t : all)
        any = any || (in_bounds(t) && std::regex_match(Wide(t), oracle));
      if (!any) {
        EXPECT_FALSE(d.ok());
        continue;
      }
      ASSERT_TRUE(d.ok()) << d.status();
      for (const std::string& s : all) {
        if (static_cast<int>(s.size()) > 5) continue;
        bool some = false;
        for (const std::string& t : all) {
          if (t.compare(0, s.size(), s) == 0 && in_bounds(t) && std::regex_match(Wide(t), oracle)) {
            some = true;
            break;
          }
        }
        EXPECT_EQ(Walk(*d, s) >= 0, some) << "after '" << s << "'";
        EXPECT_EQ(Matches(*d, s), in_bounds(s) && std::regex_match(Wide(s), oracle)) << s;
      }
    }
  }
}

std::string Utf8(uint32_t c) {
  std::string s;
  tokenizer::AppendUtf8(static_cast<char32_t>(c), &s);
  return s;
}

TEST(RegexDfaTest, ClassesTakeExactlyTheirCodePointsAsValidUtf8) {
  struct Case {
    const char* pattern;
    std::function<bool(uint32_t)> in;
  };
  const Case cases[] = {
      {".", [](uint32_t c) { return c != '\n' && c != '\r' && c != 0x2028 && c != 0x2029; }},
      {"[\\u00e9-\\u4e00]", [](uint32_t c) { return c >= 0xE9 && c <= 0x4E00; }},
      {"[^\\u0100-\\uffff]", [](uint32_t c) { return c < 0x100 || c > 0xFFFF; }},
      {"[é😀-😂a]",
       [](uint32_t c) { return c == 0xE9 || c == 'a' || (c >= 0x1F600 && c <= 0x1F602); }},
      {"\\S",
       [](uint32_t c) {
         return !(c == ' ' || (c >= 9 && c <= 13) || c == 0xA0 || c == 0x1680 ||
                  (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
                  c == 0x205F || c == 0x3000 || c == 0xFEFF);
       }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.pattern);
    const RegexDfa d = MustCompile(k.pattern);
    for (uint32_t c = 0; c <= 0x10FFFF; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      ASSERT_EQ(Matches(d, Utf8(c)), k.in(c)) << "U+" << std::hex << c;
    }
    // Bytes no valid UTF-8 holds: never taken.
    for (const std::string& bad :
         {std::string("\xC0\x80"), std::string("\xED\xA0\x80"), std::string("\xF4\x90\x80\x80"),
          std::string("\x80"), std::string("\xF5"), std::string("\xE0\x9F\xBF")}) {
      EXPECT_LT(Walk(d, bad), 0);
    }
  }
}

TEST(RegexDfaTest, RefusesWhatItCannotCompileByName) {
  EXPECT_EQ(Error("(a"), "p: a '(' without its ')' at offset 0");
  EXPECT_EQ(Error("ab[c"), "p: a '[' without its ']' at offset 2");
  EXPECT_EQ(Error("{2}"), "p: nothing to repeat at offset 0");
  EXPECT_EQ(Error("a|^*"), "p: nothing to repeat at offset 3");
  EXPECT_EQ(Error("a{2}+"), "p: a quantifier after a quantifier at offset 4");
  EXPECT_EQ(Error("(?P<1>a)"), "p: a malformed group name at offset 4");
  EXPECT_EQ(Error("(?<n>a)(?P<n>b)"), "p: a group name given twice at offset 11");
  EXPECT_EQ(Error("[\\B]"), "p: an unknown escape '\\B' at offset 1");
  EXPECT_EQ(Error("$a", RegexOptions{.json_string = true}), "p: the pattern admits no text");
  EXPECT_EQ(Error("^ab$", RegexOptions{.min_chars = 3}),
            "p: the pattern admits no string of at least 3 characters (minLength / maxLength)");
  // 160k empty states after a $: whether a set may end is a lookup (walking them took 2 s).
  EXPECT_EQ(Error("(?:[ab]*a[ab]{10}|[cd]*c[cd]{9}|[ef]*e[ef]{8})$(?:(?:(?:){200}){200}){4}"),
            "ok");
  EXPECT_EQ(Error("a)"), "p: an unmatched ')' at offset 1");
  EXPECT_EQ(Error("*a"), "p: nothing to repeat at offset 0");
  EXPECT_EQ(Error("a**"), "p: a quantifier after a quantifier at offset 2");
  EXPECT_EQ(Error("[b-a]"), "p: a range out of order at offset 4");
  EXPECT_EQ(Error("a{3,2}"), "p: a count whose maximum is below its minimum at offset 1");
  EXPECT_NE(Error("(a)\\1").find("a backreference at offset 3 is not supported"),
            std::string::npos);
  EXPECT_NE(Error("a(?=b)").find("a lookaround at offset 2 is not supported"), std::string::npos);
  EXPECT_NE(Error("\\bword").find("a word boundary"), std::string::npos);
  EXPECT_NE(Error("(?i)a").find("an inline flag"), std::string::npos);
  EXPECT_NE(Error("\\p{L}").find("a Unicode property escape"), std::string::npos);
  EXPECT_NE(Error("a{1001}").find("a count above 1000"), std::string::npos);
  EXPECT_EQ(Error("\\q"), "p: an unknown escape '\\q' at offset 0");
  EXPECT_EQ(Error("a^b"), "p: the pattern admits no text");
  EXPECT_EQ(Error("[^\\s\\S]"), "p: the pattern admits no text");
  RegexOptions json;
  json.json_string = true;
  EXPECT_EQ(Error("\\x01", json),
            "p: the pattern admits no string (control characters other than \\b \\f \\n \\r \\t "
            "are never written)");
  RegexOptions bounded;
  bounded.min_chars = 3;
  bounded.max_chars = 3;
  EXPECT_EQ(Error("(aa)*", bounded),
            "p: the pattern admits no string of 3 to 3 characters (minLength / maxLength)");
  EXPECT_NE(Error("(a|b)*a(a|b){14}").find("more than 16384 states"), std::string::npos);
  bounded.max_chars = int64_t{1} << 24;
  EXPECT_NE(Error("[a-z]+", bounded).find("is too large to enforce"), std::string::npos);
  EXPECT_EQ(Error(std::string(20000, 'a')), "p: longer than 16384 bytes");
  EXPECT_EQ(Error(std::string(300, '(') + std::string(300, ')')),
            "p: groups nest deeper than 200 at offset 201");
  // Python's flavour: \A \Z anchors, {,n} counts, a leading ']' in a class.
  RegexOptions py;
  py.flavor = RegexFlavor::kPython;
  EXPECT_TRUE(Matches(MustCompile("\\Aa{,2}\\Z", py), "aa"));
  EXPECT_TRUE(Matches(MustCompile("[]a]+", py), "]a]"));
  EXPECT_TRUE(Matches(MustCompile(".", py), "\r"));
  EXPECT_FALSE(Matches(MustCompile(".", py), "\n"));
  EXPECT_EQ(Error("a{2}+", py),
            "p: a possessive quantifier at offset 4 is not supported (structured "
            "output compiles the pattern to an automaton)");
  EXPECT_TRUE(Matches(MustCompile("\\a", py), "\a"));
  // Python's \d and \w are Unicode's (python_classes.inc); ECMA-262's ASCII.
  EXPECT_TRUE(Matches(MustCompile("\\w\\d", py), "é٣"));
  EXPECT_FALSE(Matches(MustCompile("\\W", py), "é"));
  EXPECT_FALSE(Matches(MustCompile("[^\\d]", py), "٣"));
  EXPECT_FALSE(Matches(MustCompile("\\w"), "é"));
  EXPECT_TRUE(Matches(MustCompile("\\W\\D"), "é٣"));
  // ECMA-262's \u{…} (any number of digits) and surrogate pairs as two escapes.
  EXPECT_TRUE(Matches(MustCompile("\\u{0000000041}[\\uD83D\\uDE00-\\uD83D\\uDE02]"), "A😁"));
}

TEST(StringFormatTest, DatesAreExactlyTheCalendarsDays) {
  const RegexDfa date = MustCompile(FormatOf("date").pattern);
  int64_t taken = 0;
  char buf[32];
  for (int y = 0; y <= 9999; ++y) {
    for (int m = 0; m <= 13; ++m) {
      for (int d = 0; d <= 32; ++d) {
        std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", y, m, d);
        const bool ok =
            y >= 1 && std::chrono::year_month_day(std::chrono::year(y), std::chrono::month(m),
                                                  std::chrono::day(d))
                          .ok();
        ASSERT_EQ(Matches(date, buf), ok) << buf;
        taken += ok;
      }
    }
  }
  EXPECT_EQ(taken, 3652059);  // days from 0001-01-01 to 9999-12-31
}

// A random text the DFA matches: a walk over the bytes it takes, ending where it may with
// probability 1/4 (empty when it does not end within 200 bytes).
std::string RandomMatch(const RegexDfa& d, std::mt19937& rng) {
  std::string out;
  int32_t s = d.start;
  int64_t chars = 0;
  while (out.size() < 200) {
    if (d.MayEnd(s, chars) && rng() % 4 == 0) return out;
    std::vector<uint8_t> ok;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = d.Next(s, static_cast<uint8_t>(b));
      if (t >= 0 && d.Fits(t, chars + ((b & 0xC0) != 0x80))) ok.push_back(static_cast<uint8_t>(b));
    }
    if (ok.empty()) {
      EXPECT_TRUE(d.MayEnd(s, chars)) << "stuck after " << out;
      return out;
    }
    const uint8_t b = ok[rng() % ok.size()];
    s = d.Next(s, b);
    chars += (b & 0xC0) != 0x80;
    out.push_back(static_cast<char>(b));
  }
  return "";
}

TEST(StringFormatTest, IpAddressesAreWhatInetPtonReads) {
  std::mt19937 rng(5);
  RegexOptions o;
  o.json_string = true;
  const RegexDfa v4 = MustCompile(FormatOf("ipv4").pattern, o);
  const RegexDfa v6 = MustCompile(FormatOf("ipv6").pattern, o);
  unsigned char addr[16];
  for (int i = 0; i < 3000; ++i) {
    const std::string a = RandomMatch(v4, rng), b = RandomMatch(v6, rng);
    if (!a.empty()) {
      EXPECT_EQ(inet_pton(AF_INET, a.c_str(), addr), 1) << a;
    }
    if (!b.empty()) {
      EXPECT_EQ(inet_pton(AF_INET6, b.c_str(), addr), 1) << b;
    }
    // And what inet_ntop writes of random addresses (runs of zero groups for "::").
    for (unsigned char& x : addr) x = rng() % 3 == 0 ? 0 : static_cast<unsigned char>(rng());
    char text[INET6_ADDRSTRLEN];
    ASSERT_NE(inet_ntop(AF_INET6, addr, text, sizeof text), nullptr);
    EXPECT_TRUE(Matches(v6, text)) << text;
    ASSERT_NE(inet_ntop(AF_INET, addr, text, sizeof text), nullptr);
    EXPECT_TRUE(Matches(v4, text)) << text;
  }
  for (const char* bad :
       {"01.2.3.4", "256.1.1.1", "1.2.3", "1:2:3:4:5:6:7:8:9", ":::", "1::2::3", "12345::"}) {
    EXPECT_FALSE(Matches(v4, bad) || Matches(v6, bad)) << bad;
  }
}

TEST(StringFormatTest, OtherFormatsTakeTheirExamplesAndNotTheirCounterexamples) {
  struct Case {
    const char* format;
    std::vector<std::string> good, bad;
  };
  const Case cases[] = {
      {"date-time",
       {"2024-02-29T23:59:59Z", "1999-12-31T00:00:00.123+05:30"},
       {"2023-02-29T00:00:00Z", "2024-01-01 00:00:00Z", "2024-01-01T24:00:00Z",
        "2024-01-01T00:00:00"}},
      {"time", {"08:30:00Z", "23:59:59.5-01:00"}, {"8:30:00Z", "08:60:00Z"}},
      {"duration", {"P1Y2M3DT4H5M6S", "P3W", "PT36H", "P1D"}, {"P", "PT", "P1Y2W", "1D", "P1S"}},
      {"email", {"a.b+c@example.com", "x@y.co"}, {"a@b", "a..b@c.com", "@c.com", "a@-b.com"}},
      {"hostname", {"example.com", "a", "xn--bcher-kva.example"}, {"-a.com", "a..b", "a_b"}},
      {"uuid", {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567e89b12d3a456426614174000"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.format);
    StringFormat f = FormatOf(k.format);
    ASSERT_NE(f.pattern, nullptr);
    RegexOptions o;
    o.json_string = true;
    o.max_chars = f.max_chars;
    const RegexDfa d = MustCompile(f.pattern, o);
    for (const std::string& g : k.good) EXPECT_TRUE(Matches(d, g)) << g;
    for (const std::string& b : k.bad) EXPECT_FALSE(Matches(d, b)) << b;
  }
  EXPECT_EQ(FormatOf("uri").pattern, nullptr);  // an annotation
  RegexOptions o;
  o.max_chars = FormatOf("hostname").max_chars;
  const RegexDfa host = MustCompile(FormatOf("hostname").pattern, o);
  std::string long_name;
  for (int i = 0; i < 4; ++i) long_name += std::string(63, 'a') + ".";
  long_name.pop_back();  // 255 characters
  EXPECT_FALSE(Matches(host, long_name));
  EXPECT_TRUE(Matches(host, long_name.substr(2)));
}

// JSON's encoding of a string value: '"' and '\' escaped, the rest as is.
std::string Quoted(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

TEST(PatternStringTest, TheMatcherTakesExactlyTheStringsThePatternAndLengthsAdmit) {
  struct Case {
    const char* pattern;
    int min, max;
  };
  for (const Case& k : {Case{"^a[bc]*\"?$", 2, 4}, Case{"b.c", 0, 4}, Case{"(ab|c)+", 3, 5},
                        Case{"^\\\\?c*$", 1, 3}}) {
    SCOPED_TRACE(k.pattern);
    Json schema = {{"type", "string"}, {"pattern", k.pattern}};
    if (k.min > 0) schema["minLength"] = k.min;
    schema["maxLength"] = k.max;
    absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileJsonSchema(schema, "schema");
    ASSERT_TRUE(g.ok()) << g.status();
    const std::wregex oracle(Wide(k.pattern), std::regex::ECMAScript);
    for (const std::string& v : Texts("abc\"\\", 6)) {
      const bool want = static_cast<int>(v.size()) >= k.min &&
                        static_cast<int>(v.size()) <= k.max && std::regex_search(Wide(v), oracle);
      ASSERT_EQ(Accepts(**g, Quoted(v)), want) << Quoted(v);
    }
  }
}

TEST(PatternStringTest, EscapesDecodeBeforeTheDfaAndCloseTagsStayEscaped) {
  auto g = Compile(R"({"type":"string","pattern":"^[\\t/<]+$"})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Accepts(*g, R"("\t</\/")"));
  EXPECT_FALSE(Accepts(*g, R"("\u0009")", false));  // no \u escapes under a pattern
  EXPECT_FALSE(Accepts(*g, R"("\n")", false));
  EXPECT_FALSE(Accepts(*g, "\"\t\"", false));  // a raw control byte: never
  Grammar tags = *g;
  tags.no_close_tags = true;  // inside markup: "</" only as "<\/"
  EXPECT_FALSE(Accepts(tags, R"("</")", false));
  EXPECT_TRUE(Accepts(tags, R"("<\/<")"));
  // A backslash only where some escape may follow: none does in [a-z]+.
  auto letters = Compile(R"({"type":"string","pattern":"^[a-z]+$"})");
  JsonMatcher m(letters.get());
  EXPECT_TRUE(m.FeedBytes("\"ab"));
  JsonMatcher probe = m;
  EXPECT_FALSE(probe.Feed('\\'));
}

TEST(PatternStringTest, FormatsInSchemasWriteValidValues) {
  std::mt19937 rng(3);
  auto g = Compile(R"({"type":"object","properties":{"d":{"type":"string","format":"date"},
      "ip":{"type":"string","format":"ipv6"},"id":{"type":"string","format":"uuid"},
      "note":{"type":"string","format":"markdown"}},"required":["d","ip","id","note"]})");
  ASSERT_TRUE(g);
  int finished = 0;
  unsigned char addr[16];
  for (int i = 0; i < 100; ++i) {
    const std::string doc = RandomDocument(*g, rng, 2000);
    if (doc.empty()) continue;
    ++finished;
    const Json v = Json::parse(doc);
    int y = 0;
    unsigned m = 0, d = 0;
    ASSERT_EQ(std::sscanf(v["d"].get<std::string>().c_str(), "%d-%u-%u", &y, &m, &d), 3) << doc;
    EXPECT_TRUE(std::chrono::year_month_day(std::chrono::year(y), std::chrono::month(m),
                                            std::chrono::day(d))
                    .ok())
        << doc;
    EXPECT_EQ(inet_pton(AF_INET6, v["ip"].get<std::string>().c_str(), addr), 1) << doc;
    EXPECT_EQ(v["id"].get<std::string>().size(), 36u) << doc;
  }
  EXPECT_GT(finished, 30);
}

TEST(PatternStringTest, ASchemaCompilesEachDistinctPatternOnceWithinOneBudget) {
  Json props = Json::object();
  for (int i = 0; i < 300; ++i)
    props[absl::StrCat("d", i)] = {{"type", "string"}, {"format", "date"}};
  absl::StatusOr<std::shared_ptr<const Grammar>> g =
      CompileJsonSchema(Json{{"type", "object"}, {"properties", props}}, "schema");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->regexes.size(), 1u);
  // Distinct patterns share one budget of compile time: each alone compiles, many do not.
  Json heavy = Json::object();
  for (int i = 0; i < 40; ++i) {
    heavy[absl::StrCat("p", i)] = {{"type", "string"},
                                   {"pattern", absl::StrCat("^.{0,500}", i, "$")}};
  }
  EXPECT_TRUE(
      CompileRegex("^.{0,500}7$", RegexOptions{.search = true, .json_string = true}, "p").ok());
  g = CompileJsonSchema(Json{{"type", "object"}, {"properties", heavy}}, "schema");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("the schema's patterns take too long to compile"),
            std::string::npos)
      << g.status();
}

TEST(RegexGrammarTest, TheWholeOutputMatchesAndEndsWhereThePatternMay) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = RegexGrammar("(yes|no)[!.]?", "regex");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Accepts(**g, "yes"));
  EXPECT_TRUE(Accepts(**g, "no!"));
  EXPECT_TRUE(Accepts(**g, "ye", /*complete=*/false));
  EXPECT_FALSE(Accepts(**g, "yes!!", false));
  EXPECT_FALSE(Accepts(**g, " yes", false));
  absl::StatusOr<std::shared_ptr<const Grammar>> star = RegexGrammar("\\d*", "regex");
  ASSERT_TRUE(star.ok());
  EXPECT_TRUE(JsonMatcher(star->get()).Complete());  // the empty output matches
  EXPECT_FALSE(JsonMatcher(g->get()).Complete());
  EXPECT_EQ(RegexGrammar("(?<=a)b", "regex").status().message(),
            "regex: a lookaround at offset 1 is not supported (structured output compiles the "
            "pattern to an automaton)");
  // Token masks: a token is allowed exactly when its bytes continue a match.
  std::vector<std::optional<std::string>> vocab = {"y", "yes", "es", "s!",       "no",
                                                   "n", "!",   ".",  "\xC3\xA9", "o."};
  auto index = std::make_shared<const TokenIndex>(vocab);
  JsonConstraint c(*g, index);
  auto allowed = [&] {
    std::vector<uint64_t> m(1, 0);
    c.FillAllowed(absl::MakeSpan(m));
    std::string out;
    for (size_t t = 0; t < vocab.size(); ++t) {
      if ((m[0] >> t) & 1) out += absl::StrCat(*vocab[t], " ");
    }
    return out;
  };
  EXPECT_EQ(allowed(), "y yes no n ");
  ASSERT_TRUE(c.Advance(5).ok());  // "n"
  EXPECT_EQ(allowed(), "o. ");
  ASSERT_TRUE(c.Advance(9).ok());
  EXPECT_TRUE(c.Complete());
  EXPECT_EQ(allowed(), "");
}

TEST(PatternStringTest, MasksEqualEveryTokensOwnMatcherAlongRandomWalks) {
  // The masker walks the plain tokens of a pattern string or regex output with the DFA alone (and
  // keeps the masks of states without lengths); every other token through the matcher. Each bit
  // must equal Allows (the matcher fed the token's bytes), with "</" barred or not.
  std::vector<std::optional<std::string>> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  for (const char* piece : {"ab",        "ba",  "<",   "</",      "/",   "a<",       "<b",   "\\\"",
                            "\\\\",      "\\/", "\\n", "\"",      "a\"", "\xC3\xA9", "\xC3", "\xA9",
                            "\xC3\xA9z", "zz",  "\n",  "\\u0061", "  ",  "a b",      "\t"}) {
    vocab.push_back(std::string(piece));
  }
  auto index = std::make_shared<const TokenIndex>(vocab);
  const int64_t n = index->vocab();
  std::vector<std::shared_ptr<const Grammar>> grammars;
  for (const char* schema :
       {R"({"type":"string","pattern":"^[^b]*$"})", R"({"type":"string","pattern":"a|é"})",
        R"({"type":"string","pattern":"^[a-z<>/é \\\\\"]*$","maxLength":6})",
        R"({"type":"array","items":{"type":"string","pattern":"^(ab|<|/|\\n)*$"}})"}) {
    auto g = Compile(schema);
    ASSERT_TRUE(g);
    grammars.push_back(g);
    auto tags = std::make_shared<Grammar>(*g);
    tags->no_close_tags = true;
    grammars.push_back(tags);
  }
  for (const char* pattern : {"[^\\n]*\\n", "(ab|<b|é)+\"?", "[a-c]{2,5}"}) {
    absl::StatusOr<std::shared_ptr<const Grammar>> g = RegexGrammar(pattern, "regex");
    ASSERT_TRUE(g.ok()) << g.status();
    grammars.push_back(*g);
  }
  std::mt19937 rng(17);
  for (size_t k = 0; k < grammars.size(); ++k) {
    SCOPED_TRACE(k);
    for (int walk = 0; walk < 30; ++walk) {
      JsonConstraint c(grammars[k], index);
      std::string text;
      for (int step = 0; step < 40; ++step) {
        std::vector<uint64_t> mask(static_cast<size_t>((n + 63) / 64), 0);
        c.FillAllowed(absl::MakeSpan(mask));
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < n; ++t) {
          const bool bit = (mask[static_cast<size_t>(t) / 64] >> (t % 64)) & 1;
          ASSERT_EQ(bit, c.Allows(t)) << "token " << t << " after " << text;
          if (bit) allowed.push_back(t);
        }
        if (allowed.empty() || (c.Complete() && rng() % 4 == 0)) break;
        const int32_t t = allowed[rng() % allowed.size()];
        ASSERT_TRUE(c.Advance(t).ok());
        text += index->bytes(t);
      }
    }
  }
}

}  // namespace
}  // namespace linfer::structured
