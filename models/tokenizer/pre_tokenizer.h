// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): ByteLevel, Split, Metaspace, Digits,
// Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit, Sequence.
// They cut normalized text into pieces that the model encodes independently.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/tokenizer/json_util.h"

namespace linfer::tokenizer {

// One pre-token: UTF-8 text plus whether it starts at offset 0 of the original input (the
// Metaspace "first" prepend scheme needs that).
struct Piece {
  std::string text;
  bool at_origin = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits (and may rewrite) every piece; empty pieces are dropped. Thread-safe.
  virtual absl::Status PreTokenize(std::vector<Piece>* pieces) const = 0;
  // Worst-case output bytes per input byte (see kMaxTextGrowth).
  virtual double MaxGrowth() const { return 1; }
  // Whether the last step is ByteLevel.
  virtual bool EndsWithByteLevel() const { return false; }
  // Stops that last ByteLevel step from rewriting bytes as byte characters: the BPE model then
  // takes raw bytes (BpeModel::EnableByteMode). Only valid when EndsWithByteLevel().
  virtual void DeferByteMapping() {}
};

// Builds the pre-tokenizer described by `j` (a tokenizer.json "pre_tokenizer" object). Refuses
// degenerate ones (a Metaspace replacement or CharDelimiterSplit delimiter that is not one
// character, chains growing text more than kMaxTextGrowth times).
absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& j);

}  // namespace linfer::tokenizer
