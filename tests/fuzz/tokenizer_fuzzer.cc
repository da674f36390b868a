// Fuzz target: tokenizer.json loading, encoding and decoding. The input is
//   <tokenizer.json> NUL <text to encode> NUL <ids to decode, 2 bytes each, little-endian>
// (missing parts are empty). Id 0xFFFF stands for -1, 0xFFFE for INT32_MAX and 0xFFFD for
// INT32_MIN. A text starting with '{' is also tried as tokenizer_config.json and
// generation_config.json. The length of the input chooses add_special_tokens / skip_special_tokens.
// Checked: decoded text is valid UTF-8, and the streaming decoder's deltas are valid UTF-8 and
// add up to Decode(ids); the random ids streamed again as the continuation of the encoded text
// (a prompt's context) give valid UTF-8 deltas that add up to the stream's text().
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "models/tokenizer/incremental_decoder.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/utf8.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using ::linfer::fuzz::Require;
using ::linfer::tokenizer::IncrementalDecoder;
using ::linfer::tokenizer::Tokenizer;

// Splits `rest` at its first NUL: returns the part before it and leaves the part after in `rest`.
absl::string_view NextPart(absl::string_view* rest) {
  const size_t nul = rest->find('\0');
  const absl::string_view part = rest->substr(0, nul);
  rest->remove_prefix(nul == absl::string_view::npos ? rest->size() : nul + 1);
  return part;
}

std::vector<int32_t> ParseIds(absl::string_view bytes) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    const int v = static_cast<unsigned char>(bytes[i]) | static_cast<unsigned char>(bytes[i + 1])
                                                             << 8;
    if (v == 0xFFFF) {
      ids.push_back(-1);
    } else if (v == 0xFFFE) {
      ids.push_back(std::numeric_limits<int32_t>::max());
    } else if (v == 0xFFFD) {
      ids.push_back(std::numeric_limits<int32_t>::min());
    } else {
      ids.push_back(v);
    }
  }
  return ids;
}

// Decode, and the streaming decoder over the same ids (after `context`, the text continuing it).
void CheckDecode(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip,
                 const std::vector<int32_t>& context = {}) {
  absl::StatusOr<std::string> text = t.Decode(ids, skip);
  if (!text.ok()) return;  // a decoder's regex may give up (match limit)
  Require(linfer::tokenizer::ValidateUtf8(*text).ok(), "Decode returned invalid UTF-8");
  IncrementalDecoder stream(&t, skip, context);
  std::string streamed;
  for (int32_t id : ids) {
    absl::StatusOr<std::string> delta = stream.Step(id);
    if (!delta.ok()) return;
    Require(linfer::tokenizer::ValidateUtf8(*delta).ok(), "a delta is invalid UTF-8");
    streamed += *delta;
  }
  absl::StatusOr<std::string> rest = stream.Finish();
  Require(rest.ok() || rest.status().code() != absl::StatusCode::kInternal,
          "streamed text diverged from Decode");
  if (!rest.ok()) return;
  Require(stream.text() == streamed + *rest, "text() != deltas + Finish");
  if (context.empty()) Require(streamed + *rest == *text, "deltas + Finish != Decode");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view rest(reinterpret_cast<const char*>(data), size);
  const absl::string_view json = NextPart(&rest);
  const absl::string_view text = NextPart(&rest);
  const std::vector<int32_t> random_ids = ParseIds(rest);

  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = Tokenizer::FromJson(json);
  if (!loaded.ok()) {
    Require(!loaded.status().message().empty(), "an error without a message");
    return 0;
  }
  const Tokenizer& t = **loaded;
  if (!text.empty() && text[0] == '{') (void)Tokenizer::FromJson(json, text, text);
  // The input's length picks the flags: every setting is covered across inputs, and each input
  // costs one encode and two streaming decodes.
  const bool add_special_tokens = size & 1, skip_special_tokens = size & 2;
  absl::StatusOr<std::vector<int32_t>> ids = t.Encode(text, add_special_tokens);
  if (ids.ok()) {
    for (int32_t id : *ids) Require(id >= 0, "Encode returned a negative id");
    CheckDecode(t, *ids, skip_special_tokens);
  }
  CheckDecode(t, random_ids, !skip_special_tokens, ids.ok() ? *ids : std::vector<int32_t>{});
  return 0;
}
