// RWKV World encoding and decoding: greedy longest match on small vocabularies (and against a
// brute-force matcher on random ones), the published vocabulary, selection by Tokenizer, and
// streaming through IncrementalDecoder.
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/tokenizer/incremental_decoder.h"
#include "models/tokenizer/rwkv_world.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const char kVocabPath[] = LINFER_RWKV_WORLD_VOCAB;

std::unique_ptr<RwkvWorldVocab> Parse(absl::string_view text) {
  absl::StatusOr<std::unique_ptr<RwkvWorldVocab>> vocab = RwkvWorldVocab::FromText(text, "t");
  EXPECT_TRUE(vocab.ok()) << vocab.status();
  return vocab.ok() ? std::move(*vocab) : nullptr;
}

std::vector<int32_t> Encode(const RwkvWorldVocab& vocab, absl::string_view bytes) {
  std::vector<int32_t> ids;
  absl::Status s = vocab.Encode(bytes, &ids);
  EXPECT_TRUE(s.ok()) << s;
  return ids;
}

TEST(RwkvWorldEncodeTest, GreedyLongestMatchFallsBackToTheLastCompleteToken) {
  auto vocab = Parse("1 'a' 1\n2 'b' 1\n3 'c' 1\n4 'e' 1\n5 'ab' 2\n6 'abcd' 4\n7 'bc' 2\n");
  ASSERT_NE(vocab, nullptr);
  EXPECT_THAT(Encode(*vocab, "abcd"), ElementsAre(6));
  // The walk reaches "abc" (no token) and fails on 'e': the match is "ab", not "a" + "bc".
  EXPECT_THAT(Encode(*vocab, "abce"), ElementsAre(5, 3, 4));
  EXPECT_THAT(Encode(*vocab, "abcabcd"), ElementsAre(5, 3, 6));
  EXPECT_THAT(Encode(*vocab, "bcab"), ElementsAre(7, 5));
  EXPECT_THAT(Encode(*vocab, "abc"), ElementsAre(5, 3));  // ends inside the walk
  EXPECT_TRUE(Encode(*vocab, "").empty());
}

TEST(RwkvWorldEncodeTest, ByteWithoutTokenIsAnErrorNamingIt) {
  auto vocab = Parse("1 'a' 1\n2 'ab' 2\n");
  ASSERT_NE(vocab, nullptr);
  std::vector<int32_t> ids;
  absl::Status s = vocab->Encode("aab\xFFz", &ids);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("byte 0xFF (at byte offset 3)"));
  EXPECT_THAT(ids, ElementsAre(1, 2));
  // 'b' occurs only inside "ab": no token starts with it.
  ids.clear();
  EXPECT_THAT(vocab->Encode("ba", &ids).message(), HasSubstr("byte 0x62 (at byte offset 0)"));
}

TEST(RwkvWorldEncodeTest, SameBytesUnderTwoIdsEncodeAsTheLaterLine) {
  auto vocab = Parse("9 'x' 1\n4 'x' 1\n5 'y' 1\n");
  ASSERT_NE(vocab, nullptr);
  EXPECT_THAT(Encode(*vocab, "xyx"), ElementsAre(4, 5, 4));
  EXPECT_EQ(vocab->DecodeBytes({9, 4}), "xx");
  EXPECT_EQ(vocab->TokenToId("x"), 4);
}

TEST(RwkvWorldEncodeTest, DecodeSkipsUnknownIdsAndRepairsUtf8) {
  auto vocab = Parse("1 b'\\xe4' 1\n2 b'\\xb8\\xad' 2\n3 'a' 1\n4 b'\\xff' 1\n");
  ASSERT_NE(vocab, nullptr);
  EXPECT_EQ(vocab->DecodeBytes({1, 2, 0, 3, -5, 99}),
            "\xE4\xB8\xAD"
            "a");
  EXPECT_EQ(vocab->Decode({1, 2, 3}),
            "\xE4\xB8\xAD"
            "a");
  // A cut-short sequence is one U+FFFD; a lone invalid byte is another.
  EXPECT_EQ(vocab->Decode({1, 3, 4}),
            "\xEF\xBF\xBD"
            "a\xEF\xBF\xBD");
}

// Longest match by definition: try every length from the longest down at each position.
std::vector<int32_t> BruteForce(const std::map<std::string, int32_t>& token_ids,
                                const std::string& text) {
  std::vector<int32_t> ids;
  for (size_t pos = 0; pos < text.size();) {
    for (size_t len = std::min<size_t>(8, text.size() - pos); len > 0; --len) {
      auto it = token_ids.find(text.substr(pos, len));
      if (it != token_ids.end()) {
        ids.push_back(it->second);
        pos += len;
        break;
      }
      if (len == 1) return {};  // unreachable: every single byte is a token below
    }
  }
  return ids;
}

TEST(RwkvWorldEncodeTest, MatchesBruteForceOnRandomVocabularies) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab\xC3\xA9 ";
  for (int trial = 0; trial < 50; ++trial) {
    std::map<std::string, int32_t> token_ids;
    std::string text;
    int32_t id = 1;
    for (char c : alphabet) {
      token_ids[std::string(1, c)] = id;
      absl::StrAppend(&text, id++, " b'\\x",
                      absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2), "' 1\n");
    }
    for (int k = 0; k < 40; ++k) {
      std::string token;
      for (size_t n = 2 + rng() % 7; n > 0; --n) token += alphabet[rng() % alphabet.size()];
      if (token_ids.count(token)) continue;
      token_ids[token] = id;
      std::string literal;
      for (char c : token)
        absl::StrAppend(&literal, "\\x", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
      absl::StrAppend(&text, id++, " b'", literal, "' ", token.size(), "\n");
    }
    auto vocab = Parse(text);
    ASSERT_NE(vocab, nullptr);
    for (int s = 0; s < 20; ++s) {
      std::string input;
      for (size_t n = rng() % 60; n > 0; --n) input += alphabet[rng() % alphabet.size()];
      ASSERT_EQ(Encode(*vocab, input), BruteForce(token_ids, input)) << "trial " << trial;
      ASSERT_EQ(vocab->DecodeBytes(Encode(*vocab, input)), input);
    }
  }
}

TEST(RwkvWorldPublishedVocabTest, KnownIds) {
  absl::StatusOr<std::unique_ptr<RwkvWorldVocab>> vocab = RwkvWorldVocab::FromFile(kVocabPath);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ((*vocab)->num_tokens(), 65529);
  EXPECT_EQ((*vocab)->id_limit(), 65530);
  for (int b = 0; b < 256; ++b) {  // ids 1..256 are the single bytes
    ASSERT_EQ((*vocab)->TokenToId(std::string(1, static_cast<char>(b))), b + 1);
  }
  EXPECT_THAT(Encode(**vocab, "Hello"), ElementsAre(33155));
  EXPECT_EQ(*(*vocab)->IdToToken(65529), std::string(128, ' '));
  std::vector<int32_t> ids = Encode(**vocab, "\xFF\xFE garbage \xE4\xB8");
  EXPECT_EQ((*vocab)->DecodeBytes(ids), "\xFF\xFE garbage \xE4\xB8");
}

TEST(RwkvWorldTokenizerTest, SelectedForADirectoryWithTheVocabAndNoTokenizerJson) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("linfer_world_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kVocabPath, dir / kRwkvWorldVocabFileName,
                             std::filesystem::copy_options::overwrite_existing);
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromDirectory(dir.string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Encode("Hello"), (std::vector<int32_t>{33155}));
  EXPECT_EQ(*(*t)->Decode({33155, 0, 70000}), "Hello");
  EXPECT_EQ((*t)->special_tokens().bos_id, 0);
  EXPECT_EQ((*t)->special_tokens().eos_ids, (std::vector<int32_t>{0}));
  EXPECT_TRUE((*t)->IsSpecial(0));
  EXPECT_FALSE((*t)->IsSpecial(33155));
  EXPECT_EQ((*t)->KindForDecode(0, false), Tokenizer::TokenKind::kSkipped);
  EXPECT_EQ((*t)->KindForDecode(0xE4 + 1, false), Tokenizer::TokenKind::kOther);
  EXPECT_EQ((*t)->TokenToId("Hello"), 33155);
  EXPECT_EQ(*(*t)->IdToToken(33155), "Hello");
  EXPECT_EQ((*t)->Encode("\xFF").status().code(), absl::StatusCode::kInvalidArgument);
  // generation_config.json overrides the default end-of-text id; tokenizer.json wins if present.
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [261, 0]})";
  t = Tokenizer::FromFile((dir / kRwkvWorldVocabFileName).string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->special_tokens().eos_ids, (std::vector<int32_t>{261, 0}));
  std::ofstream(dir / "tokenizer.json") << "{broken";
  EXPECT_FALSE(Tokenizer::FromDirectory(dir.string()).ok());
  std::filesystem::remove_all(dir);
}

TEST(RwkvWorldTokenizerTest, BadVocabularyErrorNamesTheFile) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("linfer_world_bad_" + std::to_string(getpid()) + ".txt");
  std::ofstream(path) << "1 'a' 1\n2 'b' 2\n";
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromFile(path.string());
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(absl::StrCat(path.string(), ":2: the literal")));
  std::filesystem::remove(path);
}

TEST(RwkvWorldTokenizerTest, StreamingHoldsBackSplitCharactersAndMatchesDecode) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromRwkvWorldFile(kVocabPath);
  ASSERT_TRUE(t.ok()) << t.status();
  {
    // "中" = E4 B8 AD as three single-byte ids (byte + 1), then "!".
    IncrementalDecoder decoder(t->get(), false);
    std::vector<std::string> deltas;
    for (int32_t id : {0xE4 + 1, 0xB8 + 1, 0xAD + 1, '!' + 1}) deltas.push_back(*decoder.Step(id));
    EXPECT_THAT(deltas, ElementsAre("", "", "\xE4\xB8\xAD", "!"));
    EXPECT_EQ(*decoder.Finish(), "");
  }
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids;
    for (int n = 1 + rng() % 30; n > 0; --n) {
      const uint32_t r = rng() % 10;
      ids.push_back(r < 5 ? 0x80 + 1 + rng() % 128 : r < 9 ? 1 + rng() % 65529 : rng() % 3);
    }
    IncrementalDecoder decoder(t->get(), false);
    std::string streamed;
    for (int32_t id : ids) {
      absl::StatusOr<std::string> delta = decoder.Step(id);
      ASSERT_TRUE(delta.ok()) << delta.status();
      ASSERT_TRUE(ValidateUtf8(*delta).ok());
      streamed += *delta;
    }
    absl::StatusOr<std::string> rest = decoder.Finish();
    ASSERT_TRUE(rest.ok()) << rest.status();
    EXPECT_EQ(streamed + *rest, *(*t)->Decode(ids)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace linfer::tokenizer
