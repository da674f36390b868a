// Normalizers of tokenizer.json ("normalizer"): NFC/NFD/NFKC/NFKD, Lowercase, Strip,
// StripAccents, Prepend, Replace, ByteLevel and Sequence. Others are refused when loading.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/tokenizer/json_util.h"

namespace linfer::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` (valid UTF-8) in place. Thread-safe.
  virtual absl::Status Normalize(std::string* text) const = 0;
  // Worst-case output bytes per input byte (see kMaxTextGrowth).
  virtual double MaxGrowth() const { return 1; }
};

// Builds the normalizer described by `j` (a tokenizer.json "normalizer" object). Refuses
// degenerate ones (an empty Replace string, chains growing text more than kMaxTextGrowth times).
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& j);

}  // namespace linfer::tokenizer
