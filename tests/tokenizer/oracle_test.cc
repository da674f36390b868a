// Compares linfer's tokenizer with the reference library (expected ids and decodes written by
// oracle/oracle.js in the ctest fixture) for every tokenizer.json and every corpus string.
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/tokenizer/incremental_decoder.h"
#include "models/tokenizer/json_util.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

const Json& Expected() {
  static const Json* expected = [] {
    const char* path = std::getenv("LINFER_TOKENIZER_ORACLE");
    auto* j = new Json();
    if (path == nullptr) return j;
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) return j;
    absl::StatusOr<Json> parsed = ParseJson(*text, path);
    if (parsed.ok()) *j = std::move(*parsed);
    return j;
  }();
  return *expected;
}

const Json* FindTokenizer(const std::string& name) {
  const Json* list = Find(Expected(), "tokenizers");
  if (list == nullptr) return nullptr;
  for (const Json& t : *list) {
    if (GetStringOr(t, "name", "") == name) return &t;
  }
  return nullptr;
}

std::string Show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s.push_back(',');
    s.append(std::to_string(ids[i]));
  }
  s.push_back(']');
  return s;
}

class OracleTest : public testing::TestWithParam<std::string> {
 protected:
  // Loads the tokenizer named by the test parameter; skips (saying so) when its file is absent.
  void SetUp() override {
    const char* path = std::getenv("LINFER_TOKENIZER_ORACLE");
    ASSERT_NE(path, nullptr) << "LINFER_TOKENIZER_ORACLE is not set: run through ctest, whose "
                                "fixture tokenizer.oracle_setup writes the expected outputs";
    ASSERT_TRUE(Expected().is_object()) << "cannot read oracle output " << path;
    entry_ = FindTokenizer(GetParam());
    ASSERT_NE(entry_, nullptr) << "no oracle output for " << GetParam();
    if (GetBoolOr(*entry_, "missing", false)) {
      GTEST_SKIP() << "SKIPPED " << GetParam() << ": tokenizer file not found at '"
                   << GetStringOr(*entry_, "path", "") << "' (../shared/fixtures is absent)";
    }
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok =
        Tokenizer::FromFile(GetStringOr(*entry_, "path", ""));
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
  }
  const Json* entry_ = nullptr;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(OracleTest, IdsAndDecodesMatchReference) {
  const Json* entry = entry_;
  const std::unique_ptr<Tokenizer>* tok = &tok_;
  int total = 0, id_fail = 0, decode_fail = 0, special_fail = 0, reported = 0;
  for (const Json& c : (*entry)["cases"]) {
    ++total;
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    absl::StatusOr<std::vector<int32_t>> got = (*tok)->Encode(text);
    if (!got.ok() || *got != want) {
      ++id_fail;
      if (reported++ < 5) {
        ADD_FAILURE() << GetParam() << ": ids differ for " << Json(text).dump() << "\n  want "
                      << Show(want) << "\n  got  "
                      << (got.ok() ? Show(*got) : got.status().ToString());
      }
    }
    if (const Json* ws = Find(c, "ids_special")) {
      absl::StatusOr<std::vector<int32_t>> gs = (*tok)->Encode(text, true);
      if (!gs.ok() || *gs != ws->get<std::vector<int32_t>>()) ++special_fail;
    }
    for (bool skip : {false, true}) {
      const std::string want_text = c[skip ? "decoded_skip" : "decoded"].get<std::string>();
      absl::StatusOr<std::string> decoded = (*tok)->Decode(want, skip);
      if (!decoded.ok() || *decoded != want_text) {
        ++decode_fail;
        if (reported++ < 5) {
          ADD_FAILURE() << GetParam() << ": decode (skip_special=" << skip << ") differs for "
                        << Show(want) << "\n  want " << Json(want_text).dump() << "\n  got  "
                        << (decoded.ok() ? Json(*decoded).dump() : decoded.status().ToString());
        }
      }
    }
  }
  std::printf(
      "%s: %d strings, ids match %d (%.2f%%), decodes match %d/%d, "
      "add_special_tokens mismatches %d\n",
      GetParam().c_str(), total, total - id_fail, total ? 100.0 * (total - id_fail) / total : 0.0,
      2 * total - decode_fail, 2 * total, special_fail);
  EXPECT_EQ(id_fail, 0);
  EXPECT_EQ(decode_fail, 0);
  EXPECT_EQ(special_fail, 0);
  EXPECT_GE(total, 2000);
}

// Streaming: random id sequences (real encodings, random vocab ids, byte tokens, specials)
// decoded one id at a time must concatenate to the full decode, in complete UTF-8 deltas.
TEST_P(OracleTest, StreamingDeltasConcatenateToDecode) {
  std::vector<int32_t> pool;
  int32_t max_id = 0;
  for (const Json& c : (*entry_)["cases"]) {
    for (int32_t id : c["ids"].get<std::vector<int32_t>>()) {
      pool.push_back(id);
      max_id = std::max(max_id, id);
    }
  }
  ASSERT_FALSE(pool.empty());
  std::mt19937 rng(1234);
  int failures = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<int32_t> ids(1 + rng() % 64);
    const size_t run = rng() % pool.size();
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint32_t r = rng() % 10;
      ids[i] = r < 5   ? pool[(run + i) % pool.size()]
               : r < 7 ? static_cast<int32_t>(rng() % (max_id + 1))
               : r < 9 ? static_cast<int32_t>(rng() % 300)
                       : pool[rng() % pool.size()];
    }
    for (bool skip : {false, true}) {
      IncrementalDecoder stream(tok_.get(), skip);
      std::string joined;
      bool valid = true;
      for (int32_t id : ids) {
        absl::StatusOr<std::string> delta = stream.Step(id);
        ASSERT_TRUE(delta.ok()) << delta.status();
        valid = valid && ValidateUtf8(*delta).ok();
        joined += *delta;
      }
      absl::StatusOr<std::string> rest = stream.Finish();
      ASSERT_TRUE(rest.ok()) << rest.status();
      joined += *rest;
      const std::string full = *tok_->Decode(ids, skip);
      if ((joined != full || !valid) && failures++ < 3) {
        ADD_FAILURE() << GetParam() << ": streamed " << Json(joined).dump() << "\n  decode   "
                      << Json(full).dump() << "\n  ids " << Show(ids);
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

// A continuation of a prompt: the ids of a corpus text cut after its first 1-4 ids, the rest
// streamed with those as context, must give the rest of the reference library's decode of the
// whole text — with the leading space that a decode of the rest alone drops (Metaspace, Strip).
TEST_P(OracleTest, AContinuationStreamsTheRestOfTheText) {
  std::mt19937 rng(99);
  int checked = 0, failures = 0;
  for (const Json& c : (*entry_)["cases"]) {
    const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
    if (ids.size() < 2) continue;
    // Up to 12 ids: the decoder keeps the fewest (4 at least) of them whose text is whole
    // characters, so it keeps some where all of them are (a byte run may end them).
    const size_t k = 1 + rng() % std::min<size_t>(12, ids.size() - 1);
    const std::vector<int32_t> context(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k));
    absl::StatusOr<std::string> head = tok_->Decode(context, true);
    if (!head.ok() || head->find("\xEF\xBF\xBD") != std::string::npos) continue;
    const std::string full = c["decoded_skip"].get<std::string>();
    // (A decoder rule joining the two sides may rewrite the head's end: nothing to compare.)
    if (full.compare(0, head->size(), *head) != 0) continue;
    IncrementalDecoder stream(tok_.get(), true, context);
    std::string joined;
    for (size_t i = k; i < ids.size(); ++i) {
      absl::StatusOr<std::string> delta = stream.Step(ids[i]);
      ASSERT_TRUE(delta.ok()) << delta.status();
      joined += *delta;
    }
    absl::StatusOr<std::string> rest = stream.Finish();
    ASSERT_TRUE(rest.ok()) << rest.status();
    joined += *rest;
    EXPECT_EQ(stream.text(), joined);
    ++checked;
    if (joined != full.substr(head->size()) && failures++ < 3) {
      ADD_FAILURE() << GetParam() << ": after " << Json(*head).dump() << " streamed "
                    << Json(joined).dump() << "\n  want " << Json(full.substr(head->size())).dump()
                    << "\n  ids " << Show(ids) << " cut at " << k;
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GE(checked, 500);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, OracleTest,
                         testing::Values("gpt-neox-20b", "llama3", "qwen3", "gpt4o", "deepseek_v3",
                                         "llama2", "gemma3",
                                         // Qwen3's model behind other pre-tokenizers (oracle.js)
                                         "split-removed", "split-isolated",
                                         "split-merged-with-previous", "split-merged-with-next",
                                         "split-contiguous", "split-inverted-merged-with-next",
                                         "punctuation-contiguous", "whitespace", "bert"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace linfer::tokenizer
