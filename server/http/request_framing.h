// RequestFraming: follows a connection's request bytes the way libevent 2.1.12's evhttp frames
// them, to tell the connection guard what evhttp is waiting for — above all a chunked body's
// size line, which evhttp reads with no length limit by rescanning its whole input buffer for
// the line's end on every read (a line without end cost loop time quadratic in its length:
// ≈ 20 s for 64 MiB). The rules mirrored (http.c: evhttp_parse_headers_, evhttp_get_body,
// evhttp_handle_chunked_read):
//   * lines end at "\n" (one "\r" before it dropped) and are C strings (cut at a NUL);
//   * the head is the request line and header lines up to the first empty line;
//   * the body is chunked when the method may have one (not HEAD or TRACE) and the first
//     Transfer-Encoding header's value (leading spaces and trailing spaces/tabs dropped) is
//     "chunked", any case; a continuation line (leading space or tab) right after that header
//     appends " …" to its value, so it is chunked no more;
//   * chunks: a size line (empty lines skipped; hex, as strtoll base 16, then the end or a
//     space), that many bytes, again; size 0 ends them, then trailer lines up to an empty one.
// Anything else (a Content-Length body, no body, a malformed request evhttp refuses) leaves the
// follower in kOther until Restart. Bytes go in as they arrive; memory is bounded by the head
// limit. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace linfer {

class RequestFraming {
 public:
  enum class State { kHead, kChunkLine, kChunkData, kTrailer, kOther };
  struct Limits {
    size_t head_bytes = 256 << 10;   // beyond: lost() (evhttp refuses such a head itself)
    size_t chunk_line_bytes = 4096;  // beyond: must_close()
  };
  explicit RequestFraming(Limits limits) : limits_(limits) {}

  void Restart();  // the next byte starts a request
  void Feed(absl::string_view bytes);

  State state() const { return state_; }
  bool chunked() const { return chunked_; }  // the current request's body is chunked
  // The connection is best closed (once its answers are out), as no client of this server
  // needs it:
  //   * a chunk-size line longer than chunk_line_bytes, being read or read (a line that long is
  //     an attack on evhttp's rescans; and the follower keeps only its start, so it cannot tell
  //     the size evhttp reads from it);
  //   * a CONNECT request: evhttp keeps the connection open after refusing one itself (its
  //     errors close every other), without the server seeing the request, so the follower would
  //     not restart where evhttp does. No route serves CONNECT.
  bool must_close() const {
    return long_line_ || connect_ ||
           (state_ == State::kChunkLine && line_bytes_ > limits_.chunk_line_bytes);
  }
  bool lost() const { return lost_; }  // the head outgrew limits.head_bytes

 private:
  void EndLine();  // the line in line_ is complete
  void HeadLine(absl::string_view line);
  void ChunkLine(absl::string_view line);

  Limits limits_;
  State state_ = State::kHead;
  std::string line_;       // the current line (head and trailer lines whole, size lines capped)
  size_t line_bytes_ = 0;  // bytes of the current line so far
  size_t head_bytes_ = 0;  // bytes of the current head so far
  uint64_t chunk_left_ = 0;
  bool first_line_ = true, may_have_body_ = true;
  bool te_seen_ = false, te_last_ = false, chunked_ = false, lost_ = false;
  bool long_line_ = false, connect_ = false;
};

}  // namespace linfer
