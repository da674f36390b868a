// Streaming detokenizer (see incremental_decoder.h). Each step decodes a short window of ids
// twice, with and without the new ids, and emits the difference once it ends on a complete
// character; the window starts where an earlier delta started, so start-of-text rules (Strip,
// Metaspace) apply to both decodes alike.
#include "models/tokenizer/incremental_decoder.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {

IncrementalDecoder::IncrementalDecoder(const Tokenizer* tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

absl::StatusOr<std::string> IncrementalDecoder::Step(int32_t id) {
  const Tokenizer::TokenKind kind = tokenizer_->KindForDecode(id, skip_special_tokens_);
  // Decode drops a skipped id as if it were not there, so it is not kept either: a long run of
  // them would otherwise widen the decode window, making every step decode the whole stream.
  if (kind == Tokenizer::TokenKind::kSkipped) return std::string();
  ids_.push_back(id);
  open_byte_run_ = kind == Tokenizer::TokenKind::kFallbackByte;
  if (open_byte_run_) return std::string();
  const absl::Span<const int32_t> all(ids_);
  // Widen the window until its already-emitted part decodes to non-empty text that really is
  // the tail of what was emitted (a lone special token or bare space may decode to nothing).
  size_t start = prefix_offset_;
  std::string prefix;
  while (true) {
    ASSIGN_OR_RETURN(
        prefix, tokenizer_->Decode(all.subspan(start, read_offset_ - start), skip_special_tokens_));
    if (start == 0 || (!prefix.empty() && absl::EndsWith(emitted_, prefix))) break;
    start = start - std::min(start, std::max<size_t>(1, read_offset_ - start));
  }
  ASSIGN_OR_RETURN(std::string text, tokenizer_->Decode(all.subspan(start), skip_special_tokens_));
  if (text.size() <= prefix.size() || EndsWithReplacementChar(text) ||
      !absl::StartsWith(text, prefix)) {
    return std::string();
  }
  std::string delta = text.substr(prefix.size());
  emitted_ += delta;
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return delta;
}

absl::StatusOr<std::string> IncrementalDecoder::Finish() {
  ASSIGN_OR_RETURN(const std::string full, tokenizer_->Decode(ids_, skip_special_tokens_));
  if (!absl::StartsWith(full, emitted_)) {
    return absl::InternalError(
        absl::StrCat("streamed text diverged from the full decode after ", ids_.size(), " ids"));
  }
  std::string rest = full.substr(emitted_.size());
  emitted_ = full;
  prefix_offset_ = read_offset_ = ids_.size();
  return rest;
}

}  // namespace linfer::tokenizer
