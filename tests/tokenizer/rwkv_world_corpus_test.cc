// The RWKV World tokenizer against the independent Python reference (rwkv_world/reference.py) on
// the generated mixed-script corpus (rwkv_world/make_corpus.py): identical ids for every text and
// byte record, identical decoded text for every record (and for the given id sequences), exact
// byte round trips, and streamed deltas that are valid UTF-8 and add up to the full decode.
// The corpus and the expected outputs are read from $LINFER_RWKV_WORLD_DIR (set by ctest, whose
// fixtures tokenizer.rwkv_world_corpus and tokenizer.rwkv_world_reference write them).
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "models/tokenizer/incremental_decoder.h"
#include "models/tokenizer/json_util.h"
#include "models/tokenizer/rwkv_world.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

struct Record {
  std::string kind;
  bool is_text = false;  // text given as a string (also encoded through Tokenizer::Encode)
  std::string bytes;     // text or bytes to encode (empty for id records)
  std::vector<int32_t> given_ids;
  bool has_given_ids = false;
  std::vector<int32_t> expected_ids;
  std::string expected_text;
};

std::vector<Record> LoadRecords(const std::string& corpus_path, const std::string& expected_path) {
  std::ifstream corpus(corpus_path), expected(expected_path);
  EXPECT_TRUE(corpus.good()) << corpus_path;
  EXPECT_TRUE(expected.good()) << expected_path;
  std::vector<Record> records;
  std::string in_line, out_line;
  while (std::getline(corpus, in_line)) {
    EXPECT_TRUE(std::getline(expected, out_line)) << "expected file is shorter than the corpus";
    const Json in = Json::parse(in_line), out = Json::parse(out_line);
    Record r;
    r.kind = in.at("kind").get<std::string>();
    if (in.contains("text")) {
      r.is_text = true;
      r.bytes = in.at("text").get<std::string>();
    } else if (in.contains("hex")) {
      r.bytes = absl::HexStringToBytes(in.at("hex").get<std::string>());
    } else {
      r.has_given_ids = true;
      r.given_ids = in.at("ids").get<std::vector<int32_t>>();
    }
    if (out.contains("ids")) r.expected_ids = out.at("ids").get<std::vector<int32_t>>();
    r.expected_text = out.at("text").get<std::string>();
    records.push_back(std::move(r));
  }
  return records;
}

// Streams `ids` through IncrementalDecoder; returns the concatenated deltas, or an error note.
std::string Stream(const Tokenizer& t, const std::vector<int32_t>& ids, bool* ok) {
  IncrementalDecoder decoder(&t, /*skip_special_tokens=*/false);
  std::string out;
  for (int32_t id : ids) {
    absl::StatusOr<std::string> delta = decoder.Step(id);
    if (!delta.ok() || !ValidateUtf8(*delta).ok()) *ok = false;
    if (delta.ok()) out += *delta;
  }
  absl::StatusOr<std::string> rest = decoder.Finish();
  if (!rest.ok()) *ok = false;
  return rest.ok() ? out + *rest : out;
}

TEST(RwkvWorldCorpusTest, MatchesTheReferenceOnEveryRecord) {
  const char* dir = std::getenv("LINFER_RWKV_WORLD_DIR");
  if (dir == nullptr) GTEST_SKIP() << "run through ctest (the tokenizer.rwkv_world_* fixtures)";
  const char vocab_path[] = LINFER_RWKV_WORLD_VOCAB;
  absl::StatusOr<std::unique_ptr<RwkvWorldVocab>> vocab = RwkvWorldVocab::FromFile(vocab_path);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromFile(vocab_path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<Record> records =
      LoadRecords(absl::StrCat(dir, "/corpus.jsonl"), absl::StrCat(dir, "/expected.jsonl"));
  ASSERT_GT(records.size(), 10000u);

  size_t encoded = 0, ids_equal = 0, decodes_equal = 0, streams_equal = 0, bytes = 0, tokens = 0;
  int reported = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    std::vector<int32_t> ids = r.given_ids;
    if (!r.has_given_ids) {
      ++encoded;
      ids.clear();
      const absl::Status s = (*vocab)->Encode(r.bytes, &ids);
      bool same = s.ok() && ids == r.expected_ids && (*vocab)->DecodeBytes(ids) == r.bytes;
      if (r.is_text) {
        absl::StatusOr<std::vector<int32_t>> via_tokenizer = (*tokenizer)->Encode(r.bytes);
        same = same && via_tokenizer.ok() && *via_tokenizer == ids;
      }
      if (same) {
        ++ids_equal;
      } else if (reported++ < 5) {
        ADD_FAILURE() << "record " << i << " (" << r.kind << "): ids differ from the reference"
                      << (s.ok() ? "" : " (" + s.ToString() + ")")
                      << "; input (escaped): " << absl::Utf8SafeCHexEscape(r.bytes.substr(0, 200));
      }
      bytes += r.bytes.size();
      tokens += ids.size();
    }
    absl::StatusOr<std::string> text = (*tokenizer)->Decode(ids);
    if (text.ok() && *text == r.expected_text && *text == (*vocab)->Decode(ids)) {
      ++decodes_equal;
    } else if (reported++ < 5) {
      ADD_FAILURE() << "record " << i << " (" << r.kind << "): decode differs: "
                    << absl::Utf8SafeCHexEscape(text.ok() ? *text : text.status().ToString())
                    << " vs reference " << absl::Utf8SafeCHexEscape(r.expected_text);
    }
    bool stream_ok = true;
    if (Stream(**tokenizer, ids, &stream_ok) == r.expected_text && stream_ok) {
      ++streams_equal;
    } else if (reported++ < 5) {
      ADD_FAILURE() << "record " << i << " (" << r.kind << "): streamed text differs";
    }
  }
  std::printf(
      "rwkv_world corpus: %zu records, %zu encoded (%zu bytes, %zu tokens); ids equal %zu, "
      "decodes equal %zu, streams equal %zu\n",
      records.size(), encoded, bytes, tokens, ids_equal, decodes_equal, streams_equal);
  EXPECT_EQ(ids_equal, encoded);
  EXPECT_EQ(decodes_equal, records.size());
  EXPECT_EQ(streams_equal, records.size());
}

}  // namespace
}  // namespace linfer::tokenizer
