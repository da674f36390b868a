// Fuzz target for the RWKV World tokenizer: vocabulary parsing (Python literals, line format,
// bounds), then encoding and decoding. Input: vocabulary text, a NUL byte, then the bytes to
// encode (a raw NUL is never valid in a vocabulary line, so the split loses nothing). Aborts
// when an invariant breaks: encode then decode gives back the input (or, after an error, the
// part before it), encoded ids are the ones TokenToId gives their bytes, and lossy decodes of
// any ids are valid UTF-8.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "models/tokenizer/rwkv_world.h"
#include "models/tokenizer/utf8.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using ::linfer::fuzz::Require;
using ::linfer::tokenizer::RwkvWorldVocab;

void FuzzEncodeDecode(const RwkvWorldVocab& vocab, absl::string_view text) {
  std::vector<int32_t> ids;
  const absl::Status status = vocab.Encode(text, &ids);
  const std::string decoded = vocab.DecodeBytes(ids);
  Require(status.ok() ? decoded == text : absl::StartsWith(text, decoded),
          "decoding the encoded ids gives back the input (up to an encode error)");
  for (int32_t id : ids) {
    const std::string* token = vocab.IdToToken(id);
    Require(token != nullptr && vocab.TokenToId(*token) == id,
            "an encoded id is the id TokenToId gives its bytes");
  }
  Require(linfer::tokenizer::ValidateUtf8(vocab.Decode(ids)).ok(), "Decode gives valid UTF-8");
  // Arbitrary ids (negative, 0, unknown, past the table) read from the text.
  std::vector<int32_t> raw(text.size() / sizeof(int32_t));
  if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * sizeof(int32_t));
  for (int32_t& id : raw) {
    if ((id & 1) == 0) id = (id >> 1) % (vocab.id_limit() + 2);  // mostly ids near the vocab
  }
  Require(linfer::tokenizer::ValidateUtf8(vocab.Decode(raw)).ok(),
          "Decode of arbitrary ids gives valid UTF-8");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const absl::string_view vocab_text = input.substr(0, split);
  const absl::string_view text =
      split == absl::string_view::npos ? absl::string_view() : input.substr(split + 1);
  // The literal parser on its own, on the first line: no escape makes its value longer.
  const absl::string_view first_line = vocab_text.substr(0, vocab_text.find('\n'));
  const absl::StatusOr<std::string> literal =
      linfer::tokenizer::ParsePythonStringLiteral(first_line);
  if (literal.ok()) {
    Require(literal->size() <= first_line.size(), "a literal's value is no longer than its text");
  }
  absl::StatusOr<std::unique_ptr<RwkvWorldVocab>> vocab =
      RwkvWorldVocab::FromText(vocab_text, "fuzz");
  if (!vocab.ok()) {
    Require(absl::StartsWith(vocab.status().message(), "fuzz"), "parse errors name the file");
    return 0;
  }
  Require(
      (*vocab)->num_tokens() > 0 && (*vocab)->id_limit() <= linfer::tokenizer::kRwkvWorldMaxId + 1,
      "a parsed vocabulary has tokens and bounded ids");
  FuzzEncodeDecode(**vocab, text);
  return 0;
}
