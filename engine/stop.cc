// Stop conditions: token-id checks, then stop strings over a small window of the text (the held
// back part plus a tail of what was emitted), then max_tokens.
#include "engine/stop.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "models/tokenizer/utf8.h"

namespace linfer {
namespace {

template <typename... Args>
absl::Status Invalid(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(args...));
}

}  // namespace

absl::Status ValidateStopParams(const StopParams& p, int64_t vocab_size) {
  if (vocab_size <= 0) return Invalid("vocab_size must be > 0, got ", vocab_size);
  if (p.max_tokens < 1) return Invalid("max_tokens must be >= 1, got ", p.max_tokens);
  if (p.min_tokens < 0) return Invalid("min_tokens must be >= 0, got ", p.min_tokens);
  // The front ends add the model's own end-of-sequence ids to a request's kMaxStopTokenIds at
  // most.
  constexpr size_t kWithModelIds = kMaxStopTokenIds + kMaxModelEndIds;
  if (p.stop_token_ids.size() > kWithModelIds) {
    return Invalid("stop_token_ids: at most ", kWithModelIds, " ids, got ",
                   p.stop_token_ids.size());
  }
  if (p.stop_strings.size() > kMaxStopStrings) {
    return Invalid("stop_strings: at most ", kMaxStopStrings, " strings, got ",
                   p.stop_strings.size());
  }
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    const int32_t id = p.stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return Invalid("stop_token_ids[", i, "] must be in [0, ", vocab_size, "), got ", id);
    }
  }
  for (size_t i = 0; i < p.stop_strings.size(); ++i) {
    if (p.stop_strings[i].empty()) return Invalid("stop_strings[", i, "] must not be empty");
    if (p.stop_strings[i].size() > kMaxStopStringBytes) {
      return Invalid("stop_strings[", i, "] is longer than ", kMaxStopStringBytes, " bytes");
    }
    if (!tokenizer::ValidateUtf8(p.stop_strings[i]).ok()) {
      return Invalid("stop_strings[", i, "] must be valid UTF-8");
    }
  }
  if (p.eos_token_id && (*p.eos_token_id < 0 || *p.eos_token_id >= vocab_size)) {
    return Invalid("eos_token_id must be in [0, ", vocab_size, "), got ", *p.eos_token_id);
  }
  return absl::OkStatus();
}

absl::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
  }
  return "";
}

StopChecker::StopChecker(const StopParams& params) : params_(params) {
  for (const std::string& s : params_.stop_strings)
    max_stop_len_ = std::max(max_stop_len_, s.size());
}

StopOutput StopChecker::Append(int32_t token, absl::string_view text_delta) {
  if (finished()) return finish_;
  ++num_tokens_;
  const bool include = params_.include_stop_str_in_output;
  // min_tokens: nothing but max_tokens ends the first min_tokens tokens (the engine keeps EOS and
  // the stop ids from being sampled there); a stop string may begin in them (vLLM's detokenizer).
  const bool within_min = num_tokens_ <= params_.min_tokens;
  const bool eos =
      !within_min && !params_.ignore_eos && params_.eos_token_id && token == *params_.eos_token_id;
  const bool stop_id = !within_min && !eos &&
                       std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(),
                                 token) != params_.stop_token_ids.end();
  if (eos || stop_id) {
    if (include) buffer_.append(text_delta.data(), text_delta.size());
    StopOutput out = Finish(FinishReason::kStop, buffer_.size());
    if (stop_id) out.stop_token_id = finish_.stop_token_id = token;
    return out;
  }

  const size_t old_size = buffer_.size();
  buffer_.append(text_delta.data(), text_delta.size());
  size_t pos = 0, index = 0;
  if (!within_min && FindStopString(old_size, &pos, &index)) {
    const std::string& stop = params_.stop_strings[index];
    StopOutput out =
        Finish(FinishReason::kStop, std::max(emitted_, include ? pos + stop.size() : pos));
    out.stop_string = finish_.stop_string = stop;
    return out;
  }
  if (num_tokens_ >= params_.max_tokens) return Finish(FinishReason::kLength, buffer_.size());

  StopOutput out;
  const size_t release_end = buffer_.size() - (include ? 0 : HoldBack());
  out.text = buffer_.substr(emitted_, release_end - emitted_);
  emitted_ = release_end;
  // Keep only the emitted tail a later match could still start in.
  const size_t tail = max_stop_len_ > 0 ? max_stop_len_ - 1 : 0;
  if (emitted_ > tail) {
    buffer_.erase(0, emitted_ - tail);
    emitted_ = tail;
  }
  return out;
}

std::string StopChecker::Flush() {
  if (finished()) return "";
  std::string text = buffer_.substr(emitted_);
  buffer_.clear();
  emitted_ = 0;
  return text;
}

bool StopChecker::FindStopString(size_t old_size, size_t* pos, size_t* index) const {
  bool found = false;
  size_t best_end = 0;
  for (size_t i = 0; i < params_.stop_strings.size(); ++i) {
    const std::string& stop = params_.stop_strings[i];
    // The first occurrence ending after old_size (none ended earlier, or we would have stopped).
    const size_t from = old_size + 1 > stop.size() ? old_size + 1 - stop.size() : 0;
    const size_t p = buffer_.find(stop, from);
    if (p == std::string::npos) continue;
    const size_t end = p + stop.size();
    if (!found || end < best_end || (end == best_end && p < *pos)) {
      found = true;
      best_end = end;
      *pos = p;
      *index = i;
    }
  }
  return found;
}

size_t StopChecker::HoldBack() const {
  const absl::string_view pending = absl::string_view(buffer_).substr(emitted_);
  size_t hold = 0;
  for (const std::string& stop : params_.stop_strings) {
    // Longest proper prefix of `stop` that `pending` ends with, if longer than `hold`.
    for (size_t k = std::min(stop.size() - 1, pending.size()); k > hold; --k) {
      if (absl::EndsWith(pending, absl::string_view(stop).substr(0, k))) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

StopOutput StopChecker::Finish(FinishReason reason, size_t end) {
  finish_ = StopOutput{};
  finish_.finish_reason = reason;
  StopOutput out = finish_;
  out.text = buffer_.substr(emitted_, end - emitted_);
  buffer_.clear();
  emitted_ = 0;
  return out;
}

}  // namespace linfer
