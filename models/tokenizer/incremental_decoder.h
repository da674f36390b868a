// Streaming detokenizer: turns ids arriving one at a time into text deltas. Deltas are always
// complete UTF-8 (a character split across byte tokens is held back until it is complete), and
// the concatenation of all deltas plus Finish() equals Tokenizer::Decode(all ids) — or, after a
// context C (the prompt the ids continue), what Decode(C + ids) adds to Decode(C): a first token
// "▁Paris" after "… is" is " Paris", where Decode of it alone drops the space (Metaspace, Strip:
// start-of-text rules), as vLLM's detokenizer primed with the prompt's tail writes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "models/tokenizer/tokenizer.h"

namespace linfer::tokenizer {

class IncrementalDecoder {
 public:
  // `tokenizer` must outlive this object. Not thread-safe (one per stream). `context`: the ids
  // the stream continues, of which the last 4 to kMaxContextIds that decode to whole characters
  // (the fewest) are kept; with none such the stream starts a text. It does too when its first
  // bytes and a byte run ending the context decode to U+FFFD together (Decode's text of the
  // context is then no prefix of Decode's text of the whole).
  IncrementalDecoder(const Tokenizer* tokenizer, bool skip_special_tokens,
                     absl::Span<const int32_t> context = {});
  static constexpr size_t kMaxContextIds = 24;

  // Adds one id and returns the text it completes (often empty while bytes are pending).
  absl::StatusOr<std::string> Step(int32_t id);
  // Ends the stream: returns whatever is still held back (incomplete bytes come out as U+FFFD,
  // exactly as Decode renders them).
  absl::StatusOr<std::string> Finish();

  // Whether every id stepped so far has its text out (none held back for later ids).
  bool settled() const { return read_offset_ == ids_.size(); }

  // Everything emitted so far.
  absl::string_view text() const { return absl::string_view(emitted_).substr(context_bytes_); }

 private:
  // The text the ids since the last delta complete (Step, once no byte run is open).
  absl::StatusOr<std::string> Emit();
  // Forgets the context when nothing was emitted after it yet: the stream starts a text of its
  // own. False where there is none, or output already followed it.
  bool DropContext();

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;  // the ids stepped so far, less those Decode skips
  // ids_[prefix_offset_, read_offset_) were emitted by the last delta and give the decoder the
  // context (leading-space rules, byte runs) for the next one.
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
  std::string emitted_;  // the context's text, then the deltas
  size_t context_bytes_ = 0;
  size_t context_ids_ = 0;  // ids_[0, context_ids_) are the context's
  // The last decoded token is a byte-fallback byte: a later byte may still turn the whole run
  // into U+FFFD characters, so nothing is emitted until the run ends.
  bool open_byte_run_ = false;
};

}  // namespace linfer::tokenizer
