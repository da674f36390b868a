// Unit tests of the tokenizer library on small hand-made tokenizer.json documents: the encode
// pipeline pieces, error reporting, config metadata, and the BPE merge loop on long words.
#include "models/tokenizer/tokenizer.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "gtest/gtest.h"
#include "models/tokenizer/incremental_decoder.h"
#include "models/tokenizer/regex.h"
#include "models/tokenizer/utf8.h"
#include "tests/tokenizer/test_tokenizers.h"

namespace linfer::tokenizer {
namespace {

using ::linfer::tokenizer::testing::ByteFallbackTokenizerJson;
using ::linfer::tokenizer::testing::ByteLevelTokenizerJson;

std::unique_ptr<Tokenizer> Load(const Json& j) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(j.dump());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<int32_t> Ids(const Tokenizer& t, absl::string_view text, bool special = false) {
  absl::StatusOr<std::vector<int32_t>> ids = t.Encode(text, special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

// A minimal BPE tokenizer: one token per lowercase letter, no merges, nothing else.
Json LettersTokenizerJson() {
  Json vocab = Json::object();
  for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c)] = c - 'a';
  Json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}};
  return j;
}

// id_end: one past the largest id of the vocab and the added tokens (ids may be sparse), what a
// model's vocabulary must hold for every id the tokenizer gives.
TEST(TokenizerIdsTest, IdEndCoversTheVocabAndTheAddedTokens) {
  Json j = LettersTokenizerJson();
  auto letters = Load(j);
  ASSERT_NE(letters, nullptr);
  EXPECT_EQ(letters->id_end(), 26);
  j["model"]["vocab"]["zz"] = 4000;
  j["added_tokens"] = Json::array({{{"id", 70}, {"content", "<|end|>"}, {"special", true}}});
  auto sparse = Load(j);
  ASSERT_NE(sparse, nullptr);
  EXPECT_EQ(sparse->id_end(), 4001);
  // (An added token missing from the vocab takes the id after the vocab's, as in the reference.)
  j["model"]["vocab"].erase("zz");
  auto added = Load(j);
  ASSERT_NE(added, nullptr);
  EXPECT_EQ(added->id_end(), 27);
  EXPECT_EQ(added->TokenToId("<|end|>"), 26);
}

TEST(ByteLevelTest, MergesByRankAndDecodesBack) {
  auto t = Load(ByteLevelTokenizerJson());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Ids(*t, "hello world"), (std::vector<int32_t>{259, 264}));
  // Like the reference, an added token missing from the vocab gets the next id after the vocab
  // (265 entries), whatever its "id" field says.
  EXPECT_EQ(Ids(*t, "hello<|end|>!"), (std::vector<int32_t>{259, 265, '!'}));
  EXPECT_EQ(*t->Decode({259, 264, 265}), "hello world<|end|>");
  EXPECT_EQ(*t->Decode({259, 264, 265}, /*skip_special_tokens=*/true), "hello world");
  // "é" is two bytes: two byte tokens; decoding one of them alone gives U+FFFD.
  EXPECT_EQ(Ids(*t, "\xC3\xA9"), (std::vector<int32_t>{0xC3, 0xA9}));
  EXPECT_EQ(*t->Decode({0xC3}), "\xEF\xBF\xBD");
  EXPECT_TRUE(Ids(*t, "").empty());
}

TEST(ByteFallbackTest, MetaspaceStyleNormalizerAndByteTokens) {
  auto t = Load(ByteFallbackTokenizerJson());
  ASSERT_NE(t, nullptr);
  // "abc ab" -> "▁abc▁ab" -> [▁abc, ▁ab]; "é" has no piece: bytes <0xC3><0xA9>.
  EXPECT_EQ(Ids(*t, "abc ab"), (std::vector<int32_t>{266, 265}));
  EXPECT_EQ(Ids(*t, "\xC3\xA9"), (std::vector<int32_t>{259, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(*t->Decode({266, 265, 259, 3 + 0xC3, 3 + 0xA9}), "abc ab \xC3\xA9");
  EXPECT_EQ(Ids(*t, "ab", /*special=*/true), (std::vector<int32_t>{1, 265}));
  EXPECT_EQ(*t->Decode({3 + 0xC3}), "\xEF\xBF\xBD");
}

TEST(ErrorTest, InvalidUtf8Input) {
  auto t = Load(ByteLevelTokenizerJson());
  ASSERT_NE(t, nullptr);
  for (absl::string_view bad : {"abc\xFF", "\xC3", "\xED\xA0\x80", "\xF4\x90\x80\x80"}) {
    absl::StatusOr<std::vector<int32_t>> ids = t->Encode(bad);
    ASSERT_FALSE(ids.ok());
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ids.status().message().find("UTF-8"), absl::string_view::npos);
  }
}

void ExpectLoadError(const std::string& json, absl::StatusCode code, absl::string_view needle) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(json);
  ASSERT_FALSE(t.ok()) << json.substr(0, 80);
  EXPECT_EQ(t.status().code(), code) << t.status();
  EXPECT_NE(t.status().message().find(needle), absl::string_view::npos) << t.status();
}

TEST(ErrorTest, MalformedJson) {
  ExpectLoadError("{\"model\": {", absl::StatusCode::kInvalidArgument, "malformed JSON");
  ExpectLoadError("[]", absl::StatusCode::kInvalidArgument, "not a JSON object");
  ExpectLoadError("{}", absl::StatusCode::kInvalidArgument, "no \"model\"");
}

TEST(ErrorTest, UnknownModelTypes) {
  for (const char* type : {"WordPiece", "Unigram", "WordLevel", "Nonsense"}) {
    Json j = ByteLevelTokenizerJson();
    j["model"]["type"] = type;
    ExpectLoadError(j.dump(), absl::StatusCode::kUnimplemented, type);
  }
}

TEST(ErrorTest, MissingOrBadMerges) {
  Json j = ByteLevelTokenizerJson();
  j["model"].erase("merges");
  ExpectLoadError(j.dump(), absl::StatusCode::kInvalidArgument, "merges");
  j["model"]["merges"] = Json::array({"h e", "x y"});
  ExpectLoadError(j.dump(), absl::StatusCode::kInvalidArgument, "not in the vocab");
  j["model"]["merges"] = Json::array({"h e l"});
  ExpectLoadError(j.dump(), absl::StatusCode::kInvalidArgument, "is not \"a b\"");
  j["model"].erase("vocab");
  ExpectLoadError(j.dump(), absl::StatusCode::kInvalidArgument, "vocab");
}

TEST(ErrorTest, DuplicateVocabIds) {
  // Decoding a shared id is ambiguous: the reference picks either token at random.
  Json j = LettersTokenizerJson();
  j["model"]["vocab"]["ab"] = 1;
  ExpectLoadError(j.dump(), absl::StatusCode::kInvalidArgument, "have the same id 1");
}

TEST(ErrorTest, UnsupportedComponents) {
  Json j = ByteLevelTokenizerJson();
  j["normalizer"] = {{"type", "Precompiled"}};
  ExpectLoadError(j.dump(), absl::StatusCode::kUnimplemented, "Precompiled");
  j = ByteLevelTokenizerJson();
  j["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  ExpectLoadError(j.dump(), absl::StatusCode::kUnimplemented, "UnicodeScripts");
  j = ByteLevelTokenizerJson();
  j["decoder"] = {{"type", "WordPiece"}};
  ExpectLoadError(j.dump(), absl::StatusCode::kUnimplemented, "WordPiece");
  j = ByteLevelTokenizerJson();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}};
  ExpectLoadError(j.dump(), absl::StatusCode::kInvalidArgument, "bad regex");
}

TEST(ErrorTest, MissingFile) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromFile("/nonexistent/tok.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
}

TEST(AddedTokenTest, StripAndSingleWordFlags) {
  Json j = ByteLevelTokenizerJson();
  j["added_tokens"] = Json::array(
      {{{"id", 300}, {"content", "<L>"}, {"lstrip", true}, {"normalized", false}},
       {{"id", 301}, {"content", "<R>"}, {"rstrip", true}, {"normalized", false}},
       {{"id", 302}, {"content", "cat"}, {"single_word", true}, {"normalized", false}}});
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  // New added tokens get ids after the vocab (265 entries), in order.
  EXPECT_EQ(Ids(*t, "a  <L>"), (std::vector<int32_t>{'a', 265}));
  EXPECT_EQ(Ids(*t, "<R>  b"), (std::vector<int32_t>{266, 'b'}));
  EXPECT_EQ(Ids(*t, "cat"), (std::vector<int32_t>{267}));
  EXPECT_EQ(Ids(*t, "cats"), (std::vector<int32_t>{'c', 'a', 't', 's'}));
}

TEST(AddedTokenTest, StrippedWhitespaceTokensMatchTheReference) {
  // A whitespace token with lstrip and rstrip: its first match swallows the run, the later
  // matches inside it are empty and dropped (the reference drops empty splits).
  Json j = LettersTokenizerJson();
  j["added_tokens"] =
      Json::array({{{"content", " "}, {"special", true}, {"lstrip", true}, {"rstrip", true}}});
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Ids(*t, "a   b"), (std::vector<int32_t>{0, 26, 1}));
  EXPECT_EQ(Ids(*t, " \t a"), (std::vector<int32_t>{26, 0}));
  // Stripping used to rescan the whole run at every match: quadratic in the run's length.
  const std::string run(30000, ' ');
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Ids(*t, "a" + run + "b"), (std::vector<int32_t>{0, 26, 1}));
  j["added_tokens"][0]["rstrip"] = false;
  t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Ids(*t, "a   b"), (std::vector<int32_t>{0, 26, 26, 26, 1}));
  EXPECT_EQ(Ids(*t, run).size(), run.size());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
}

TEST(AddedTokenTest, ManyAddedTokensLoadInLinearTime) {
  // Each token used to be compared with every earlier one (60,000 tokens: seconds). Not a wall-
  // clock limit (CI machines are shared and noisy): loading must cost a small multiple of merely
  // parsing the same JSON text (linear, same memory traffic), timed in the same run, best of 3
  // (~10x here on an idle machine; the old quadratic load was over 100x).
  Json j = LettersTokenizerJson();
  j["added_tokens"] = Json::array();
  for (int i = 0; i < 60000; ++i) {
    j["added_tokens"].push_back(
        {{"content", "<t" + std::to_string(i) + ">"}, {"special", i % 2 == 0}});
  }
  j["added_tokens"].push_back({{"content", "<t7>"}, {"special", true}});  // a duplicate
  const std::string text = j.dump();
  auto best_seconds = [](const std::function<void()>& f) {
    double best = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      f();
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return best;
  };
  const double parse = best_seconds([&] { EXPECT_FALSE(Json::parse(text).is_discarded()); });
  const double load = best_seconds([&] { EXPECT_TRUE(Tokenizer::FromJson(text).ok()); });
  std::printf("60,000 added tokens: JSON parse %.1f ms, tokenizer load %.1f ms\n", 1e3 * parse,
              1e3 * load);
  EXPECT_LT(load / parse, 40.0) << "loading took " << load / parse << "x the JSON parse";
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(text);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Encode("a<t7>b<t59999>"), (std::vector<int32_t>{0, 33, 1, 26 + 59999}));
}

TEST(ConfigTest, BosEosFromConfigFiles) {
  Json j = ByteFallbackTokenizerJson();
  const std::string config = R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
                                 "add_bos_token": true})";
  const std::string generation = R"({"eos_token_id": [2, 7]})";
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(j.dump(), config, generation);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->special_tokens().bos_id, 1);
  EXPECT_EQ((*t)->special_tokens().eos_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_TRUE((*t)->special_tokens().add_bos_token);
  EXPECT_TRUE((*t)->IsSpecial(1));
  EXPECT_FALSE((*t)->IsSpecial(259));
}

TEST(ConfigTest, FromDirectoryReadsSiblingFiles) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("linfer_tok_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << ByteFallbackTokenizerJson().dump();
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": "<s>", "eos_token": "</s>"})";
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromDirectory(dir.string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->special_tokens().bos_id, 1);
  EXPECT_EQ((*t)->special_tokens().eos_ids, (std::vector<int32_t>{2}));
  std::ofstream(dir / "tokenizer_config.json") << "{broken";
  EXPECT_FALSE(Tokenizer::FromDirectory(dir.string()).ok());
  std::filesystem::remove_all(dir);
}

TEST(BpeTest, LongWordIsNotQuadratic) {
  // One 200k-character word (no pre-tokenizer splits it): the heap-based merge loop takes
  // milliseconds; a rescan-per-merge loop would take minutes.
  auto t = Load(ByteFallbackTokenizerJson());
  ASSERT_NE(t, nullptr);
  std::string text;
  for (int i = 0; i < 50000; ++i) text += "abca";
  const auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = Ids(*t, text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0);
  EXPECT_EQ(*t->Decode(ids), text);
}

TEST(LimitsTest, VocabIdNearInt32Max) {
  // The id table used to be sized by the largest id: id + 1 overflowed int32 and aborted.
  Json j = LettersTokenizerJson();
  j["model"]["vocab"]["!"] = std::numeric_limits<int32_t>::max();
  j["added_tokens"] = Json::array({{{"id", 5}, {"content", "<x>"}, {"special", true}}});
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  // As the reference: new added tokens are numbered from the vocab size (27 entries).
  EXPECT_EQ(Ids(*t, "!<x>a"), (std::vector<int32_t>{std::numeric_limits<int32_t>::max(), 27, 0}));
  EXPECT_EQ(*t->Decode({std::numeric_limits<int32_t>::max(), 0, 27}), "! a <x>");
  EXPECT_EQ(*t->Decode({std::numeric_limits<int32_t>::min(), -1, 1 << 30}), "");
}

TEST(LimitsTest, OneHugeIdAllocatesNothingLarge) {
  // One id of 10^8 used to allocate a table of 10^8 strings (3.2 GB; 6.7 GB near 2^31).
  Json j = LettersTokenizerJson();
  j["model"]["vocab"]["zz"] = 100000000;
  const size_t before = mallinfo2().uordblks + mallinfo2().hblkhd;
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  const size_t after = mallinfo2().uordblks + mallinfo2().hblkhd;
  EXPECT_LT(after - std::min(after, before), size_t{16} << 20);
  EXPECT_EQ(*t->Decode({100000000}), "zz");
}

TEST(LimitsTest, DegenerateComponentsAreRefused) {
  struct Case {
    const char* key;
    Json component;
    const char* needle;  // in the error, with the component's name
  };
  auto seq = [](const char* list, const Json& step, int n) {
    Json steps = Json::array();
    for (int i = 0; i < n; ++i) steps.push_back(step);
    return Json{{"type", "Sequence"}, {list, steps}};
  };
  const Json replace_aa = {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "aa"}};
  const Case cases[] = {
      // An empty replacement made the first Encode loop forever.
      {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", ""}}, "Metaspace: \"replacement\""},
      {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "ab"}}, "one character"},
      {"decoder", {{"type", "Metaspace"}, {"replacement", ""}}, "Metaspace: \"replacement\""},
      // Empty content with a huge count hung Decode (the engine thread).
      {"decoder",
       {{"type", "Strip"}, {"content", ""}, {"start", 1000000000000000}, {"stop", 0}},
       "Strip: \"content\""},
      {"decoder", {{"type", "Strip"}, {"content", "ab"}, {"start", 1}}, "Strip: \"content\""},
      {"decoder", {{"type", "Strip"}, {"content", " "}, {"start", -1}}, "Strip: \"start\""},
      {"decoder", {{"type", "Strip"}, {"content", " "}, {"stop", 1.5}}, "Strip: \"stop\""},
      {"decoder", {{"type", "BPEDecoder"}, {"suffix", ""}}, "BPEDecoder: \"suffix\""},
      {"decoder",
       {{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", "x"}},
       "Replace: \"pattern\""},
      {"normalizer",
       {{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", "x"}},
       "Replace: \"pattern\""},
      {"pre_tokenizer",
       {{"type", "CharDelimiterSplit"}, {"delimiter", "ab"}},
       "CharDelimiterSplit: \"delimiter\""},
      // Output that doubles at every step: 2^40 times the input.
      {"decoder", seq("decoders", replace_aa, 40), "decoder Sequence: "},
      {"normalizer", seq("normalizers", {{"type", "ByteLevel"}}, 20), "normalizer Sequence: "},
      {"pre_tokenizer", seq("pretokenizers", {{"type", "ByteLevel"}}, 10),
       "pre_tokenizer Sequence: "},
      {"decoder",
       {{"type", "Replace"}, {"pattern", {{"Regex", "a*"}}}, {"content", std::string(300, 'x')}},
       "decoder Replace: "},
      // Template ids must be token ids of this tokenizer.
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {4294967295}}}}}}},
       "TemplateProcessing: special token \"<s>\""},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {999999}}}}}}},
       "post_processor: token id 999999"},
      {"post_processor",
       {{"type", "BertProcessing"}, {"cls", {"[CLS]", -5}}, {"sep", {"[SEP]", 1}}},
       "post_processor: \"cls\""},
  };
  for (const Case& c : cases) {
    Json j = LettersTokenizerJson();
    j[c.key] = c.component;
    SCOPED_TRACE(c.component.dump().substr(0, 120));
    ExpectLoadError(j.dump(), absl::StatusCode::kInvalidArgument, c.needle);
  }
}

TEST(LimitsTest, DeepNestingIsRefusedNotAStackOverflow) {
  // Nested Sequences were parsed recursively, one frame per level: 100,000 overflowed the stack.
  std::string nested;
  for (int i = 0; i < 100000; ++i) nested += R"({"type": "Sequence", "normalizers": [)";
  for (int i = 0; i < 100000; ++i) nested += "]}";
  std::string json = LettersTokenizerJson().dump();
  json.insert(json.size() - 1, ", \"normalizer\": " + nested);
  ExpectLoadError(json, absl::StatusCode::kInvalidArgument, "nested deeper than 128");
}

TEST(LimitsTest, StripCountIsBoundedByTheToken) {
  Json j = LettersTokenizerJson();
  j["model"]["vocab"]["  b"] = 26;
  j["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", 1000000000000000}, {"stop", 3}};
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Decode({26, 0}), "ba");
  // Chains that grow text a bounded amount still load (SentencePiece-style: ' ' -> U+2581).
  EXPECT_NE(Load(ByteFallbackTokenizerJson()), nullptr);
}

TEST(LimitsTest, GenerationConfigIdsMustBeInt32) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(
      LettersTokenizerJson().dump(), "", R"({"eos_token_id": [1, 4294967296]})");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("eos_token_id"), std::string::npos) << t.status();
}

TEST(LimitsTest, StreamingSkippedIdsIsLinear) {
  // Ids that decode to nothing (unknown ids, skipped special tokens) used to make every later
  // step re-decode the whole stream: 30,000 of them took seconds of the engine thread.
  auto t = Load(ByteLevelTokenizerJson());
  ASSERT_NE(t, nullptr);
  IncrementalDecoder stream(t.get(), /*skip_special_tokens=*/true);
  std::string text = *stream.Step('a');
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 30000; ++i) {
    text += *stream.Step(i % 3 == 0 ? 265 : 1000000 + i);  // <|end|> (skipped) or unknown
  }
  text += *stream.Step('b');
  text += *stream.Finish();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  EXPECT_EQ(text, "ab");
}

TEST(Utf8Test, LossyMatchesRustReplacementRule) {
  EXPECT_EQ(LossyUtf8("a\xF0\x9F\x98"
                      "b"),
            "a\xEF\xBF\xBD"
            "b");                                                // one U+FFFD per subpart
  EXPECT_EQ(LossyUtf8("\xE0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong lead: two
  EXPECT_EQ(LossyUtf8("\xC3\xA9"), "\xC3\xA9");
  EXPECT_TRUE(ValidateUtf8("\xF0\x9F\x98\x80").ok());
  EXPECT_FALSE(ValidateUtf8("\xC0\xAF").ok());
}

TEST(RegexTest, OnigurumaClassesArePortedToPcre2) {
  EXPECT_EQ(TranslateOnigPattern("\\s+(?!\\S)"),
            "[\\t-\\r\\x{85}\\p{Z}]+(?![^\\t-\\r\\x{85}\\p{Z}])");
  EXPECT_EQ(TranslateOnigPattern("[^\\s\\p{L}]"), "[^\\t-\\r\\x{85}\\p{Z}\\p{L}]");
  absl::StatusOr<std::unique_ptr<Regex>> re = Regex::Compile("\\s+");
  ASSERT_TRUE(re.ok());
  std::vector<MatchSpan> m;
  ASSERT_TRUE((*re)
                  ->FindAll("a\xE1\xA0\x8E"
                            "b \xE3\x80\x80"
                            "c",
                            &m)
                  .ok());   // U+180E, U+3000
  ASSERT_EQ(m.size(), 1u);  // U+180E is not White_Space (Oniguruma), U+3000 is.
  EXPECT_EQ(m[0].start, 5u);
}

}  // namespace
}  // namespace linfer::tokenizer
