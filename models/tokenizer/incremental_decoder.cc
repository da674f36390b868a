// Streaming detokenizer (see incremental_decoder.h). Each step decodes a short window of ids
// twice, with and without the new ids, and emits the difference once it ends on a complete
// character; the window starts where an earlier delta started, so start-of-text rules (Strip,
// Metaspace) apply to both decodes alike. A context is ids already "emitted" (its text heads
// emitted_ and is cut off text() and Finish()), so the first window starts inside it.
#include "models/tokenizer/incremental_decoder.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

constexpr absl::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

IncrementalDecoder::IncrementalDecoder(const Tokenizer* tokenizer, bool skip_special_tokens,
                                       absl::Span<const int32_t> context)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {
  // The context's last ids that Decode keeps (a chat prompt ends in special tokens).
  std::vector<int32_t> tail;
  for (size_t i = context.size(); i-- > 0 && tail.size() < kMaxContextIds;) {
    const Tokenizer::TokenKind kind = tokenizer_->KindForDecode(context[i], skip_special_tokens_);
    if (kind == Tokenizer::TokenKind::kSkipped) continue;
    tail.push_back(context[i]);
  }
  std::reverse(tail.begin(), tail.end());
  // The fewest ids (4 at least, where there are) whose text is whole characters: no U+FFFD of a
  // character cut at the tail's start (a byte run that is not UTF-8 is U+FFFD to its end), or of
  // stray bytes. A byte run may end the context (Llama's "\n" is <0x0A>) when it is whole
  // characters.
  for (size_t n = std::min<size_t>(4, tail.size()); n > 0 && n <= tail.size(); ++n) {
    const absl::Span<const int32_t> ids = absl::MakeConstSpan(tail).subspan(tail.size() - n);
    absl::StatusOr<std::string> text = tokenizer_->Decode(ids, skip_special_tokens_);
    if (!text.ok() || absl::StrContains(*text, kReplacementChar)) continue;
    ids_.assign(ids.begin(), ids.end());
    emitted_ = *std::move(text);
    context_bytes_ = emitted_.size();
    context_ids_ = read_offset_ = ids_.size();
    return;
  }
}

bool IncrementalDecoder::DropContext() {
  if (context_ids_ == 0 || emitted_.size() != context_bytes_) return false;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<ptrdiff_t>(context_ids_));
  emitted_.clear();
  context_bytes_ = context_ids_ = prefix_offset_ = read_offset_ = 0;
  return true;
}

absl::StatusOr<std::string> IncrementalDecoder::Step(int32_t id) {
  const Tokenizer::TokenKind kind = tokenizer_->KindForDecode(id, skip_special_tokens_);
  // Decode drops a skipped id as if it were not there, so it is not kept either: a long run of
  // them would otherwise widen the decode window, making every step decode the whole stream.
  if (kind == Tokenizer::TokenKind::kSkipped) return std::string();
  ids_.push_back(id);
  open_byte_run_ = kind == Tokenizer::TokenKind::kFallbackByte;
  if (open_byte_run_) return std::string();
  return Emit();
}

absl::StatusOr<std::string> IncrementalDecoder::Emit() {
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
  // The stream's first bytes made one run with bytes that end the context, and that run is not
  // UTF-8 (each of its bytes is U+FFFD): the context's text is gone from the decode, so the stream
  // starts a text of its own instead.
  if (!absl::StartsWith(text, prefix) && !absl::StartsWith(prefix, text) && DropContext()) {
    return Emit();
  }
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
    if (DropContext()) return Finish();  // as in Emit
    return absl::InternalError(
        absl::StrCat("streamed text diverged from the full decode after ", ids_.size(), " ids"));
  }
  std::string rest = full.substr(emitted_.size());
  emitted_ = full;
  prefix_offset_ = read_offset_ = ids_.size();
  return rest;
}

}  // namespace linfer::tokenizer
