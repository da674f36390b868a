// Unit tests of the tokenizer library on small hand-made tokenizer.json documents: the encode
// pipeline pieces, error reporting, config metadata, and the BPE merge loop on long words.
#include "models/tokenizer/tokenizer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
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
