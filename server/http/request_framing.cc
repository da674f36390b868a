// RequestFraming (request_framing.h).
#include "server/http/request_framing.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"

namespace linfer {

void RequestFraming::Restart() {
  state_ = State::kHead;
  line_.clear();
  line_bytes_ = head_bytes_ = 0;
  chunk_left_ = 0;
  first_line_ = may_have_body_ = true;
  te_seen_ = te_last_ = chunked_ = lost_ = false;
  long_line_ = connect_ = false;
}

void RequestFraming::Feed(absl::string_view bytes) {
  while (!bytes.empty() && state_ != State::kOther) {
    if (state_ == State::kChunkData) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(chunk_left_, bytes.size()));
      chunk_left_ -= take;
      bytes.remove_prefix(take);
      if (chunk_left_ == 0) state_ = State::kChunkLine;
      continue;
    }
    const size_t nl = bytes.find('\n');
    const absl::string_view part = bytes.substr(0, nl);  // up to the line's end, or all
    line_bytes_ += part.size();
    const bool head = state_ == State::kHead || state_ == State::kTrailer;
    if (head) {
      head_bytes_ += part.size() + (nl == absl::string_view::npos ? 0 : 1);
      if (head_bytes_ > limits_.head_bytes) {  // evhttp refuses it; nothing more to follow
        lost_ = true;
        state_ = State::kOther;
        line_.clear();
        line_.shrink_to_fit();
        return;
      }
      line_.append(part.data(), part.size());
    } else if (line_.size() < limits_.chunk_line_bytes) {  // a size line: its start is enough
      const absl::string_view start = part.substr(0, limits_.chunk_line_bytes - line_.size());
      line_.append(start.data(), start.size());
    }
    if (nl == absl::string_view::npos) return;
    bytes.remove_prefix(nl + 1);
    EndLine();
  }
}

void RequestFraming::EndLine() {
  absl::string_view line = line_;
  if (absl::EndsWith(line, "\r")) line.remove_suffix(1);
  line = line.substr(0, line.find('\0'));  // a C string to evhttp
  if (state_ == State::kChunkLine) {
    if (line_bytes_ > limits_.chunk_line_bytes) {  // only its start was kept
      long_line_ = true;
      state_ = State::kOther;
    } else {
      ChunkLine(line);
    }
  } else {
    HeadLine(line);
  }
  line_.clear();
  line_bytes_ = 0;
}

void RequestFraming::HeadLine(absl::string_view line) {
  if (first_line_) {
    first_line_ = false;
    const absl::string_view method = line.substr(0, line.find(' '));
    may_have_body_ = method != "HEAD" && method != "TRACE";
    connect_ = method == "CONNECT";  // evhttp's match is case-sensitive
    return;
  }
  if (line.empty()) {  // the head (or the trailers) end
    if (state_ == State::kHead && may_have_body_ && chunked_) {
      state_ = State::kChunkLine;
    } else {
      state_ = State::kOther;
    }
    return;
  }
  if (state_ == State::kTrailer) return;
  if (line[0] == ' ' || line[0] == '\t') {  // appended to the last header's value with a space
    if (te_last_) chunked_ = false;
    return;
  }
  te_last_ = false;
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos || te_seen_) return;
  if (!absl::EqualsIgnoreCase(line.substr(0, colon), "Transfer-Encoding")) return;
  absl::string_view value = line.substr(colon + 1);
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  te_seen_ = te_last_ = true;
  chunked_ = absl::EqualsIgnoreCase(value, "chunked");
}

void RequestFraming::ChunkLine(absl::string_view line) {
  if (line.empty()) return;  // evhttp skips empty lines between chunks
  const std::string text(line);
  char* end = nullptr;
  const long long size = std::strtoll(text.c_str(), &end, 16);
  if ((*end != '\0' && *end != ' ') || size < 0) {  // evhttp fails the request
    state_ = State::kOther;
    return;
  }
  if (size == 0) {
    state_ = State::kTrailer;
    return;
  }
  chunk_left_ = static_cast<uint64_t>(size);
  state_ = State::kChunkData;
}

}  // namespace linfer
