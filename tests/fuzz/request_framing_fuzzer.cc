// Fuzz target: request bytes through RequestFraming (server/http/request_framing.h), the HTTP
// connection guard's follower of evhttp's framing. The first byte picks how the rest is split
// into reads (1 to 64 bytes each); however it is split, the follower must end in the same state
// as when fed the bytes at once (a socket's reads split a stream anywhere), and its bounds hold.
// (It compares the follower with itself, not with evhttp: request_framing_test holds evhttp's
// rules, case by case.)
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "server/http/request_framing.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using linfer::fuzz::Require;
  if (size == 0) return 0;
  const size_t step = 1 + data[0] % 64;
  const absl::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const linfer::RequestFraming::Limits limits{.head_bytes = 512, .chunk_line_bytes = 64};
  linfer::RequestFraming whole(limits), split(limits);
  whole.Feed(bytes);
  for (size_t i = 0; i < bytes.size(); i += step) split.Feed(bytes.substr(i, step));
  Require(whole.state() == split.state(), "the state depends on how the bytes were split");
  Require(whole.chunked() == split.chunked(), "chunked depends on the split");
  Require(whole.lost() == split.lost(), "lost depends on the split");
  Require(whole.must_close() == split.must_close(), "must_close depends on the split");
  Require(!whole.lost() || whole.state() == linfer::RequestFraming::State::kOther,
          "a lost head is followed no further");
  // A restart forgets everything: the same bytes again give the same answers.
  whole.Restart();
  whole.Feed(bytes);
  Require(whole.state() == split.state() && whole.chunked() == split.chunked(),
          "Restart does not start afresh");
  return 0;
}
