// Text grammars (engine/structured/text_grammar.h): raw text ends exactly at the first occurrence
// of its terminator (checked against std::string::find over random texts, with a terminator whose
// borders exercise the matcher's fallback), tagged alternatives decide by their bytes and refuse
// ambiguous tags, optional tags loop (call after call, complete after each), and the token masks
// over raw text (the shortcut for tokens without '<') equal a brute-force walk of every token.
#include "engine/structured/text_grammar.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/structured/json_constraint.h"
#include "engine/structured/json_grammar.h"
#include "engine/structured/json_matcher.h"
#include "tests/engine/structured_testing.h"

namespace linfer::structured {
namespace {

// Raw text ended by `terminator`, then "!".
std::shared_ptr<Grammar> RawThenBang(const std::string& terminator) {
  auto g = std::make_shared<Grammar>();
  absl::StatusOr<int32_t> raw = AddRawText(*g, terminator);
  EXPECT_TRUE(raw.ok()) << raw.status();
  g->root = AddSequence(*g, {*raw, AddText(*g, "!")});
  ComputeMinDepths(*g);
  return g;
}

TEST(TextGrammarTest, RawTextEndsAtTheFirstTerminator) {
  const std::string t = "<a<a<b";  // borders "<a" and "<a<a": a failed match falls back
  auto g = RawThenBang(t);
  std::mt19937 rng(5);
  const std::vector<std::string> pieces = {"<",  "a",  "b", "<a",      "<a<a",
                                           "<b", "\n", "x", "\xC3\xA9"};
  int ended_inside = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string y;
    const int n = static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) y += pieces[rng() % pieces.size()];
    const std::string doc = y + t + "!";
    const size_t first = doc.find(t);
    // The text is y exactly when the terminator first occurs where it was appended.
    EXPECT_EQ(Accepts(*g, doc), first == y.size()) << doc;
    if (first != y.size()) {
      ++ended_inside;
      // Ended early: "!" must come right after the first occurrence.
      EXPECT_EQ(Accepts(*g, doc.substr(0, first + t.size()) + "!"), true) << doc;
    }
    EXPECT_TRUE(Accepts(*g, y.substr(0, y.find(t)), /*complete=*/false)) << y;
  }
  EXPECT_GT(ended_inside, 100);
  EXPECT_FALSE(Accepts(*g, "a\x01"));        // control bytes other than \t \n \r
  EXPECT_FALSE(Accepts(*g, "\xC3("));        // a broken UTF-8 sequence
  EXPECT_FALSE(Accepts(*g, "\x80", false));  // a continuation byte first
  EXPECT_EQ(AddRawText(*g, "end").status().message(),
            "raw text: the terminator must start with '<'");
  EXPECT_EQ(AddRawText(*g, "<\n").status().message(),
            "raw text: the terminator must be printable ASCII");
}

TEST(TextGrammarTest, RawTextLengthLeavesOneFinalNewlineOut) {
  auto g = RawThenBang("</p>");
  g->nodes[0].min = 2;  // node 0: the raw text
  g->nodes[0].max = 4;
  for (const char* ok : {"ab</p>!", "abcd</p>!", "abcd\n</p>!", "a\nb</p>!",
                         "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9</p>!", "a</b</p>!", "</</p>!"}) {
    EXPECT_TRUE(Accepts(*g, ok)) << ok;
  }
  for (const char* bad :
       {"a</p>!", "a\n</p>!", "</p>!", "abcde</p>!", "abcd\n\n</p>!", "\n</p>!", "ab</b></p>!"}) {
    EXPECT_FALSE(Accepts(*g, bad)) << bad;
  }
}

// min = max: no prefix of an output is a dead end (a terminator held while the text is short must
// still be able to fail and fit), by random walks that lean on the terminator's bytes.
TEST(TextGrammarTest, RawTextOfFixedLengthHasNoDeadEnd) {
  for (const int64_t len : {0, 1, 2, 3, 12, 13}) {
    auto g = RawThenBang("</parameter>");
    g->nodes[0].min = g->nodes[0].max = len;
    std::mt19937 rng(static_cast<uint32_t>(len));
    const std::string bytes = "</parameter>\nxy";
    int ended = 0;
    for (int walk = 0; walk < 300; ++walk) {
      JsonMatcher m(g.get());
      std::string out;
      while (!m.Complete() && out.size() < 200) {
        std::string ok;
        for (const char c : bytes) {
          JsonMatcher t = m;
          if (t.Feed(static_cast<uint8_t>(c))) ok.push_back(c);
        }
        JsonMatcher bang = m;
        if (bang.Feed('!')) ok.push_back('!');
        ASSERT_FALSE(ok.empty()) << "a dead end after \"" << out << "\" (length " << len << ")";
        const char c = ok[rng() % ok.size()];
        ASSERT_TRUE(m.Feed(static_cast<uint8_t>(c)));
        out.push_back(c);
      }
      if (!m.Complete()) continue;
      ++ended;
      std::string text = out.substr(0, out.find("</parameter>"));
      if (!text.empty() && text.back() == '\n') text.pop_back();
      EXPECT_EQ(static_cast<int64_t>(text.size()), len) << out;
    }
    EXPECT_GT(ended, 10) << len;
  }
}

// calls := "<c=" ("x>" | "yz>") "{…}" more;  more := ("," calls)?   (a JSON object graft inside)
std::shared_ptr<Grammar> Calls() {
  auto g = std::make_shared<Grammar>();
  absl::StatusOr<std::shared_ptr<const Grammar>> object =
      CompileJsonSchema(Json::parse(R"({"type":"object","properties":{"k":{"type":"integer"}},
                                        "required":["k"]})"),
                        "schema");
  EXPECT_TRUE(object.ok()) << object.status();
  const int32_t args = Graft(*g, **object);
  absl::StatusOr<int32_t> more = AddTagged(*g, {{",", -1}}, /*optional=*/true, "more");
  EXPECT_TRUE(more.ok());
  const int32_t body = AddSequence(*g, {args, *more});
  absl::StatusOr<int32_t> calls = AddTagged(*g, {{"<c=x>", body}, {"<c=yz>", body}}, false, "c");
  EXPECT_TRUE(calls.ok());
  g->nodes[static_cast<size_t>(*more)].properties[0] = *calls;
  g->root = *calls;
  ComputeMinDepths(*g);
  return g;
}

TEST(TextGrammarTest, TaggedAlternativesLoopAndEndAfterEachCall) {
  auto g = Calls();
  EXPECT_TRUE(Accepts(*g, "<c=x>{\"k\": 1}"));
  EXPECT_TRUE(Accepts(*g, "<c=x>{\"k\": 1},<c=yz>{\"k\":-2},<c=x>{\"k\":3}"));
  EXPECT_TRUE(Accepts(*g, "<c=x>{\"k\": 1},", /*complete=*/false));
  EXPECT_TRUE(Accepts(*g, "<c=y", /*complete=*/false));
  for (const char* bad : {"<c=z>{\"k\":1}", "<c=x>{}", "<c=x> {\"k\":1}", "<c=x>{\"k\":1};",
                          "<c=x>{\"k\":1}<c=x>{\"k\":1}", "<c=x>{\"k\":1},,", " <c=x>{\"k\":1}"}) {
    EXPECT_FALSE(Accepts(*g, bad)) << bad;
  }
  // A hundred calls in a row: the chain never deepens the matcher's stack (a tail call).
  std::string many = "<c=x>{\"k\":0}";
  for (int i = 0; i < 100; ++i) many += ",<c=yz>{\"k\":1}";
  EXPECT_TRUE(Accepts(*g, many));
  Grammar h;
  EXPECT_EQ(AddTagged(h, {{"ab", -1}, {"ab", -1}}, false, "tools").status().message(),
            "tools: \"ab\" comes twice");
  EXPECT_EQ(AddTagged(h, {{"ab", -1}, {"abc", -1}}, false, "tools").status().message(),
            "tools: \"ab\" is the start of another alternative");
  EXPECT_EQ(AddTagged(h, {{"", -1}}, false, "tools").status().message(), "tools: an empty tag");
}

// A root that may be empty: the empty output is whole before any byte.
TEST(TextGrammarTest, AnOptionalRootIsCompleteBeforeAnyByte) {
  Grammar g;
  const int32_t text = AddText(g, "ok");
  absl::StatusOr<int32_t> root = AddTagged(g, {{"<a>", text}}, /*optional=*/true, "root");
  ASSERT_TRUE(root.ok());
  g.root = *root;
  ComputeMinDepths(g);
  EXPECT_TRUE(JsonMatcher(&g).Complete());
  EXPECT_TRUE(Accepts(g, "<a>ok"));
  EXPECT_TRUE(Accepts(g, "<a>o", /*complete=*/false));
  EXPECT_FALSE(Accepts(g, "ok", /*complete=*/false));
  absl::StatusOr<int32_t> required = AddTagged(g, {{"<b>", text}}, false, "root");
  ASSERT_TRUE(required.ok());
  g.root = *required;
  ComputeMinDepths(g);
  EXPECT_FALSE(JsonMatcher(&g).Complete());
}

TEST(TextGrammarTest, AfterReasoningComesFirst) {
  absl::StatusOr<std::shared_ptr<const Grammar>> object =
      CompileJsonSchema(Json::parse(R"({"type":"object"})"), "schema");
  ASSERT_TRUE(object.ok());
  auto g = AfterReasoning(**object);
  EXPECT_TRUE(Accepts(*g, "Let me think. <b>{}</b>\n</think>\n\n{\"a\": 1}"));
  EXPECT_TRUE(Accepts(*g, "</think>\n\n{}"));
  EXPECT_FALSE(Accepts(*g, "{}"));
  EXPECT_FALSE(Accepts(*g, "x</think>\n{}"));
  EXPECT_FALSE(Accepts(*g, "x</think>\n\n {}"));
}

// Every single byte, and pieces around the terminator and the JSON.
std::vector<std::optional<std::string>> Vocabulary() {
  std::vector<std::optional<std::string>> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const char* piece :
       {"</",       "</p",  "p>",     "</p>",  "</p>\n", "a<",  "ab",          "\n",  "\n\n",
        "\xC3\xA9", "\xC3", "x</p>y", "hello", "\"",     "{\"", "\"a\":",      "\":", "\"}",
        "<",        "<<",   "</q>",   "p>\n{", " world", "\t",  "\xE2\x82\xAC"}) {
    v.push_back(std::string(piece));
  }
  return v;
}

TEST(TextGrammarTest, MasksOverRawTextEqualABruteForceWalk) {
  auto vocab = Vocabulary();
  auto index = std::make_shared<const TokenIndex>(vocab);
  const int64_t n = index->vocab();
  EXPECT_TRUE(std::find(index->raw_plain().begin(), index->raw_plain().end(), 'a') !=
              index->raw_plain().end());
  EXPECT_TRUE(std::find(index->raw_plain().begin(), index->raw_plain().end(), '<') ==
              index->raw_plain().end());
  // Twice: JSON strings free, and without "</" (Grammar::no_close_tags, whose shortcut takes only
  // tokens without '<').
  for (const bool no_close : {false, true}) {
    SCOPED_TRACE(no_close ? "no close tags" : "free strings");
    auto g = std::make_shared<Grammar>();
    g->no_close_tags = no_close;
    absl::StatusOr<std::shared_ptr<const Grammar>> object = CompileJsonSchema(
        Json::parse(R"({"type":"object","properties":{"a":{"type":"string"}},"required":["a"]})"),
        "schema");
    ASSERT_TRUE(object.ok());
    const int32_t json = Graft(*g, **object);
    absl::StatusOr<int32_t> raw = AddRawText(*g, "</p>");
    ASSERT_TRUE(raw.ok());
    g->nodes[static_cast<size_t>(*raw)].max = 12;  // the shortcut counts the tokens' characters
    g->root = AddSequence(*g, {*raw, AddText(*g, "\n"), json});
    ComputeMinDepths(*g);
    std::shared_ptr<const Grammar> shared = g;
    std::mt19937 rng(3);
    int finished = 0;
    for (int walk = 0; walk < 40; ++walk) {
      JsonConstraint c(shared, index);
      JsonMatcher shadow(shared.get());
      std::string doc;
      for (int step = 0; step < 200; ++step) {
        std::vector<uint64_t> m(static_cast<size_t>((n + 63) / 64), 0);
        c.FillAllowed(absl::MakeSpan(m));
        std::vector<int32_t> allowed;
        for (int64_t t = 0; t < n; ++t) {
          JsonMatcher probe = shadow;
          const bool want = probe.FeedBytes(*vocab[static_cast<size_t>(t)]);
          ASSERT_EQ(((m[t / 64] >> (t % 64)) & 1) != 0, want) << "token " << t << " after " << doc;
          if (want) allowed.push_back(static_cast<int32_t>(t));
        }
        if (c.Complete() && (allowed.empty() || rng() % 3 == 0)) break;
        ASSERT_FALSE(allowed.empty()) << doc;
        std::vector<int32_t> pref;  // lean on the pieces (the terminator among them) so walks end
        for (int32_t t : allowed) {
          if (t >= 256 || t == '<' || t == '/' || t == '"' || t == '}') pref.push_back(t);
        }
        const std::vector<int32_t>& from = !pref.empty() && rng() % 3 != 0 ? pref : allowed;
        const int32_t t = from[rng() % from.size()];
        ASSERT_TRUE(c.Advance(t).ok());
        ASSERT_TRUE(shadow.FeedBytes(index->bytes(t)));
        doc += index->bytes(t);
      }
      if (!c.Complete()) continue;
      ++finished;
      const size_t end = doc.find("</p>");
      ASSERT_NE(end, std::string::npos) << doc;
      const Json v = Json::parse(doc.substr(end + 5), nullptr, false);
      ASSERT_TRUE(v.is_object() && v.contains("a")) << doc;
      if (no_close) {
        EXPECT_EQ(doc.find("</", end + 5), std::string::npos) << doc;
      }
    }
    EXPECT_GT(finished, 10);
  }
}

TEST(TextGrammarTest, NoCloseTagsInStrings) {
  absl::StatusOr<std::shared_ptr<const Grammar>> s =
      CompileJsonSchema(Json::parse(R"({"type":"array","items":{"type":"string"}})"), "schema");
  ASSERT_TRUE(s.ok());
  Grammar g = **s;
  g.no_close_tags = true;
  for (const char* ok : {R"(["a<b", "<\/x>", "<", "<<", "\\/", "/<a/"])", R"(["<\u002f"])"}) {
    EXPECT_TRUE(Accepts(g, ok)) << ok;
    EXPECT_TRUE(Accepts(**s, ok)) << ok;
  }
  for (const char* bad : {R"(["</x>"])", R"(["<</"])", R"(["a", "x</tool_call>"])"}) {
    EXPECT_FALSE(Accepts(g, bad, false) || Accepts(g, bad)) << bad;
    EXPECT_TRUE(Accepts(**s, bad)) << bad;
  }
}

}  // namespace
}  // namespace linfer::structured
