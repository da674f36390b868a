// Stop conditions of one generation: EOS, stop token ids, stop strings (matched across token
// boundaries and never emitted) and max_tokens, with vLLM/OpenAI semantics.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace linfer {

struct StopParams {
  // Generating any of these finishes with kStop; the token's text is not emitted.
  std::vector<int32_t> stop_token_ids;
  // Non-empty UTF-8 strings. The first point of the text where one completes finishes with kStop;
  // the text from the start of the match on is not emitted.
  std::vector<std::string> stop_strings;
  int max_tokens = 16;  // >= 1; reaching it finishes with kLength (vLLM's default is 16)
  // >= 0 (vLLM's min_tokens): only max_tokens ends the first min_tokens tokens (the engine keeps
  // EOS and the stop token ids from being sampled there); a stop string that begins in them and
  // ends after them still matches, as in vLLM. At or above max_tokens: the output runs to
  // max_tokens.
  int min_tokens = 0;
  bool ignore_eos = false;
  std::optional<int32_t> eos_token_id;  // the model's; nullopt: no EOS check
  // vLLM: also emit the matched stop string, or the stop / EOS token's text. Nothing is then held
  // back, since everything up to the match is emitted anyway.
  bool include_stop_str_in_output = false;
};

// What one request may ask for (every front end): the stop strings and ids are checked against
// every token of the request's rows, on the engine thread.
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 1024;
inline constexpr size_t kMaxStopTokenIds = 1024;
// The model's own end-of-sequence ids (generation_config.json, the tokenizer's files) the front
// ends add to a request's: at most this many, distinct (checked when the model is loaded).
inline constexpr size_t kMaxModelEndIds = 64;

// Returns InvalidArgument naming the first bad field, e.g. "stop_token_ids[1] must be in
// [0, 32000), got -5". vocab_size: the model's vocabulary.
absl::Status ValidateStopParams(const StopParams& params, int64_t vocab_size);

enum class FinishReason { kNone, kStop, kLength };

// "" for kNone, else OpenAI's "stop" / "length".
absl::string_view FinishReasonName(FinishReason reason);

// What to do after one token.
struct StopOutput {
  std::string text;  // text to stream now (possibly empty: held back or stopped)
  FinishReason finish_reason = FinishReason::kNone;
  // With kStop, what matched (vLLM's stop_reason): a stop token id, or a stop string, or neither
  // when it was EOS.
  std::optional<int32_t> stop_token_id;
  std::optional<std::string> stop_string;

  bool finished() const { return finish_reason != FinishReason::kNone; }
};

// Fed one generated token at a time. Holds back the longest suffix of the pending text that is a
// prefix of some stop string, and releases it once it can no longer match (or at the finish).
// Work per token is O(|delta| + total stop-string length²). Not thread-safe; copyable (fork).
class StopChecker {
 public:
  // `params` must have passed ValidateStopParams.
  explicit StopChecker(const StopParams& params);

  // token: the id just sampled; text_delta: its text from the detokenizer (complete UTF-8).
  // Precedence, as in vLLM: EOS (unless ignore_eos), then stop_token_ids, then stop strings, then
  // max_tokens; all but max_tokens from token min_tokens + 1 on. After a finish, further calls
  // return empty text and the same finish reason.
  StopOutput Append(int32_t token, absl::string_view text_delta);

  // Releases the held-back text, for a generation that ends for another reason (cancellation,
  // deadline, engine limit). Empty after a finish.
  std::string Flush();

  int num_tokens() const { return num_tokens_; }  // tokens appended so far
  // Whether text is held back (the start of a possible stop string): a later stop string can cut
  // the text only from there on, never before what was emitted.
  bool holding() const { return buffer_.size() > emitted_; }
  bool finished() const { return finish_.finish_reason != FinishReason::kNone; }

 private:
  // Finds the stop string completing first in buffer_ (ties: earliest start), searching only
  // matches that end after byte `old_size`. Returns false when none.
  bool FindStopString(size_t old_size, size_t* pos, size_t* index) const;
  size_t HoldBack() const;  // length of the longest buffered suffix that may start a match
  // Records the finish and returns it with buffer_[emitted_, end) as its text.
  StopOutput Finish(FinishReason reason, size_t end);

  StopParams params_;
  size_t max_stop_len_ = 0;  // bytes of the longest stop string
  // The last (max_stop_len_ - 1) emitted bytes, then the held-back bytes; only
  // buffer_[emitted_:] is still to be emitted.
  std::string buffer_;
  size_t emitted_ = 0;
  int num_tokens_ = 0;
  StopOutput finish_;  // the finish, once finished (text empty)
};

}  // namespace linfer
