// Decoders of tokenizer.json ("decoder"): ByteLevel, Metaspace, ByteFallback, Fuse, Strip,
// Replace, BPEDecoder and Sequence. They turn the tokens of some ids back into text.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/tokenizer/json_util.h"

namespace linfer::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token strings; the decoded text is their concatenation. Thread-safe.
  virtual absl::Status DecodeChain(std::vector<std::string>* tokens) const = 0;
  // Worst-case output bytes per input byte (see kMaxTextGrowth).
  virtual double MaxGrowth() const { return 1; }
  // Whether the chain has a ByteFallback step (which joins runs of <0xNN> tokens).
  virtual bool HasByteFallback() const { return false; }
  // Whether the chain is the GPT-2 ByteLevel decoder alone (tokens are byte characters).
  virtual bool IsByteLevel() const { return false; }
};

// Byte value of a ByteFallback token "<0xNN>", or -1 for any other token.
int FallbackByte(const std::string& token);

// Builds the decoder described by `j` (a tokenizer.json "decoder" object). Refuses degenerate
// ones (a Strip content or Metaspace replacement that is not one character, an empty BPEDecoder
// suffix or Replace string, chains growing text more than kMaxTextGrowth times).
absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const Json& j);

}  // namespace linfer::tokenizer
