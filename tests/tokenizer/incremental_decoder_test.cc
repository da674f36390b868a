// Streaming detokenizer tests: deltas are complete UTF-8, respect leading-space rules, and
// concatenate to Decode(all ids) for random id sequences.
#include "models/tokenizer/incremental_decoder.h"

#include <random>

#include "gtest/gtest.h"
#include "models/tokenizer/utf8.h"
#include "tests/tokenizer/test_tokenizers.h"

namespace linfer::tokenizer {
namespace {

std::unique_ptr<Tokenizer> Load(const Json& j) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromJson(j.dump());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<std::string> Stream(const Tokenizer& t, const std::vector<int32_t>& ids,
                                bool skip_special = false,
                                const std::vector<int32_t>& context = {}) {
  IncrementalDecoder decoder(&t, skip_special, context);
  std::vector<std::string> deltas;
  for (int32_t id : ids) {
    absl::StatusOr<std::string> d = decoder.Step(id);
    EXPECT_TRUE(d.ok()) << d.status();
    deltas.push_back(d.ok() ? *d : "");
  }
  absl::StatusOr<std::string> rest = decoder.Finish();
  EXPECT_TRUE(rest.ok()) << rest.status();
  deltas.push_back(rest.ok() ? *rest : "");
  return deltas;
}

TEST(IncrementalDecoderTest, HoldsBackSplitCharacters) {
  auto t = Load(testing::ByteLevelTokenizerJson());
  ASSERT_NE(t, nullptr);
  // "€" = E2 82 AC as three byte tokens, then "!".
  const std::vector<std::string> deltas = Stream(*t, {259, 0xE2, 0x82, 0xAC, '!'});
  EXPECT_EQ(deltas, (std::vector<std::string>{"hello", "", "", "\xE2\x82\xAC", "!", ""}));
}

TEST(IncrementalDecoderTest, KeepsSpacesThatDecodeStripsAtTheStart) {
  auto t = Load(testing::ByteFallbackTokenizerJson());
  ASSERT_NE(t, nullptr);
  // ▁abc ▁ab <s> ▁ab: the Strip decoder removes only the very first space.
  const std::vector<std::string> deltas = Stream(*t, {266, 265, 1, 265});
  EXPECT_EQ(deltas, (std::vector<std::string>{"abc", " ab", "<s>", " ab", ""}));
  const std::vector<std::string> skipped = Stream(*t, {266, 1, 265}, /*skip_special=*/true);
  EXPECT_EQ(skipped, (std::vector<std::string>{"abc", "", " ab", ""}));
}

// After a context (the prompt), the first token's leading space is the text's, as Decode of the
// context and the stream together writes it; none of the context's text comes out.
TEST(IncrementalDecoderTest, AContinuationKeepsItsFirstSpace) {
  auto t = Load(testing::ByteFallbackTokenizerJson());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Stream(*t, {265, 266}), (std::vector<std::string>{"ab", " abc", ""}));
  EXPECT_EQ(Stream(*t, {265, 266}, false, {266}), (std::vector<std::string>{" ab", " abc", ""}));
  // Special tokens at the prompt's end (a chat template's) are skipped over when they are.
  EXPECT_EQ(Stream(*t, {265}, true, {266, 1}), (std::vector<std::string>{" ab", ""}));
  EXPECT_EQ(Stream(*t, {265}, true, {1}), (std::vector<std::string>{"ab", ""}));
  // A context ending in a byte run of whole characters (Llama's "\n" is <0x0A>) is one; its
  // bytes and the stream's join into one run, which Decode renders whole.
  const int32_t newline = 3 + 0x0A;
  EXPECT_EQ(Stream(*t, {265}, false, {266, newline}), (std::vector<std::string>{" ab", ""}));
  EXPECT_EQ(Stream(*t, {3 + 0xE2, 3 + 0x82, 3 + 0xAC, 265}, false, {266, newline}),
            (std::vector<std::string>{"", "", "", "\xE2\x82\xAC ab", ""}));
  // One that is not whole characters (cut at its end, or stray bytes): the stream starts a text.
  EXPECT_EQ(Stream(*t, {265}, false, {266, 3 + 0xC3}), (std::vector<std::string>{"ab", ""}));
  EXPECT_EQ(Stream(*t, {265}, false, {3 + 0xA9, 266}), (std::vector<std::string>{"ab", ""}));
  // The stream's first bytes make the context's run one that is not UTF-8 (each byte U+FFFD, the
  // context's "\n" too): no prefix of the whole's text is the context's, and the stream's text is
  // its own — ending on the bytes, or followed by a token.
  for (const std::vector<int32_t>& ids :
       {std::vector<int32_t>{3 + 0xE4, 265}, std::vector<int32_t>{3 + 0xE4},
        std::vector<int32_t>{3 + 0xE4, 3 + 0xB8, 1, 266}}) {
    EXPECT_EQ(Stream(*t, ids, false, {266, newline}), Stream(*t, ids));
  }
  IncrementalDecoder d(t.get(), false, {266});
  ASSERT_TRUE(d.Step(265).ok());
  EXPECT_EQ(d.text(), " ab");
  EXPECT_EQ(*d.Finish(), "");
  EXPECT_EQ(d.text(), " ab");
}

TEST(IncrementalDecoderTest, FlushesIncompleteBytesAtTheEnd) {
  auto t = Load(testing::ByteFallbackTokenizerJson());
  ASSERT_NE(t, nullptr);
  const std::vector<std::string> deltas = Stream(*t, {260, 3 + 0xC3});
  EXPECT_EQ(deltas, (std::vector<std::string>{"a", "", "\xEF\xBF\xBD"}));
}

// Random ids (biased towards byte tokens and specials) on both toy tokenizers.
TEST(IncrementalDecoderTest, RandomSequencesConcatenateToFullDecode) {
  std::mt19937 rng(7);
  for (const Json& j : {testing::ByteLevelTokenizerJson(), testing::ByteFallbackTokenizerJson()}) {
    auto t = Load(j);
    ASSERT_NE(t, nullptr);
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<int32_t> ids(1 + rng() % 40);
      for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 270);
      for (bool skip : {false, true}) {
        const std::vector<std::string> deltas = Stream(*t, ids, skip);
        std::string joined;
        for (const std::string& d : deltas) {
          EXPECT_TRUE(ValidateUtf8(d).ok());
          joined += d;
        }
        EXPECT_EQ(joined, *t->Decode(ids, skip));
      }
    }
  }
}

}  // namespace
}  // namespace linfer::tokenizer
