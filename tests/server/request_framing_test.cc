// RequestFraming (server/http/request_framing.h) against what libevent 2.1.12's evhttp does with
// the same bytes (http.c, read by hand): the cases the connection guard's reviews found where a
// simpler head reader drifted from evhttp — a NUL ending a header line or a value, a head split
// across reads at any byte, pipelined requests, folded headers, bytes split one by one — and the
// chunk-size line without end the guard exists to catch.
#include "server/http/request_framing.h"

#include <gtest/gtest.h>

#include <string>

namespace linfer {
namespace {

using State = RequestFraming::State;
using namespace std::string_literals;

RequestFraming Fed(absl::string_view bytes, size_t step = 0) {
  RequestFraming f({});
  if (step == 0) {
    f.Feed(bytes);
  } else {
    for (size_t i = 0; i < bytes.size(); i += step) f.Feed(bytes.substr(i, step));
  }
  return f;
}

TEST(RequestFramingTest, ChunkedAsEvhttpReadsIt) {
  const std::string head = "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (size_t step : {0, 1, 7}) {
    EXPECT_EQ(Fed(head, step).state(), State::kChunkLine) << step;
    EXPECT_EQ(Fed(head + "10\r\n0123456789abcdef", step).state(), State::kChunkLine) << step;
    EXPECT_EQ(Fed(head + "10\r\n01234567", step).state(), State::kChunkData) << step;
    // Empty lines between chunks are skipped; size 0 ends them; trailers end at an empty line.
    EXPECT_EQ(Fed(head + "3\r\nabc\r\n\r\n0\r\nX-T: 1\r\n", step).state(), State::kTrailer);
    EXPECT_EQ(Fed(head + "3\r\nabc\r\n0\r\n\r\n", step).state(), State::kOther);
  }
  EXPECT_TRUE(Fed(head).chunked());
  // evhttp's checks: the first Transfer-Encoding only, its value exactly "chunked" after
  // leading spaces and trailing spaces/tabs go, any case; a NUL ends a value.
  EXPECT_EQ(Fed("POST / HTTP/1.1\r\ntransfer-encoding:   CHUNKED \t\r\n\r\n").state(),
            State::kChunkLine);
  EXPECT_EQ(Fed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\0x\r\n\r\n"s).state(),
            State::kChunkLine);
  EXPECT_EQ(Fed("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
                .state(),
            State::kOther);
  EXPECT_EQ(Fed("POST / HTTP/1.1\r\nTransfer-Encoding:\tchunked\r\n\r\n").state(), State::kOther);
  EXPECT_EQ(Fed("POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n").state(), State::kOther);
  // A continuation line appends " ..." to the last header: after Transfer-Encoding it is not
  // "chunked" any more; after another header it changes nothing.
  EXPECT_EQ(Fed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n x\r\n\r\n").state(),
            State::kOther);
  EXPECT_EQ(Fed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nA: b\r\n x\r\n\r\n").state(),
            State::kChunkLine);
  EXPECT_EQ(Fed("POST / HTTP/1.1\r\nA: b\r\n Transfer-Encoding: chunked\r\n\r\n").state(),
            State::kOther);
  // HEAD and TRACE have no body to evhttp.
  EXPECT_EQ(Fed("HEAD / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").state(), State::kOther);
  // A header line starting with NUL ends the head, as an empty line does; "\n" alone ends lines.
  EXPECT_EQ(Fed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\0\r\n"s).state(),
            State::kChunkLine);
  EXPECT_EQ(Fed("POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n5\n").state(), State::kChunkData);
  // A malformed size line: evhttp fails the request; nothing more to follow.
  EXPECT_EQ(Fed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\n").state(),
            State::kOther);
}

TEST(RequestFramingTest, AChunkSizeLineWithoutEndIsCaught) {
  RequestFraming f({.head_bytes = 1 << 16, .chunk_line_bytes = 4096});
  f.Feed("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  f.Feed("1000\r\n" + std::string(4096, 'd') + "\r\n");  // a 4 KiB chunk is fine
  EXPECT_FALSE(f.must_close());
  f.Feed(std::string(4096, '0'));
  EXPECT_FALSE(f.must_close());
  f.Feed("0");
  EXPECT_TRUE(f.must_close());
  // A line over the limit that ends within one read: the follower kept only its start, so it
  // cannot know what evhttp parses from it ("\t"×4200 + "1": a 1-byte chunk to evhttp, an error
  // to a 4 KiB prefix; "0"×5000 + "1" is 1, not 0): closing is the only safe answer.
  const std::string post = "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (const std::string& line : {std::string(4200, '\t') + "1", std::string(5000, '0') + "1"}) {
    RequestFraming h({.head_bytes = 1 << 16, .chunk_line_bytes = 4096});
    h.Feed(post + line + "\r\nX");
    EXPECT_TRUE(h.must_close());
    h.Restart();
    EXPECT_FALSE(h.must_close());
  }
  // CONNECT: evhttp keeps the connection after refusing one itself, unseen by the server.
  EXPECT_TRUE(Fed("CONNECT a:1 HTTP/1.1\r\nHost: x\r\n").must_close());
  EXPECT_FALSE(Fed("connect a:1 HTTP/1.1\r\nHost: x\r\n").must_close());  // evhttp: 501, closed
  // A Content-Length body of the same bytes is not a size line.
  RequestFraming g({.head_bytes = 1 << 16, .chunk_line_bytes = 4096});
  g.Feed("POST /x HTTP/1.1\r\nContent-Length: 9000\r\n\r\n" + std::string(9000, '0'));
  EXPECT_FALSE(g.must_close());
  EXPECT_EQ(g.state(), State::kOther);
}

TEST(RequestFramingTest, RestartFollowsThePipelinedRequest) {
  RequestFraming f({});
  f.Feed(
      "GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(f.state(), State::kOther);  // the first has no body: evhttp dispatches it
  f.Restart();                          // the guard restarts from what evhttp left
  f.Feed("POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(f.state(), State::kChunkLine);
}

TEST(RequestFramingTest, AHeadPastTheLimitIsLost) {
  RequestFraming f({.head_bytes = 1000, .chunk_line_bytes = 4096});
  f.Feed("POST / HTTP/1.1\r\n");
  for (int i = 0; i < 100; ++i) f.Feed(" \r\n");  // fold lines: evhttp counts them without ends
  EXPECT_FALSE(f.lost());
  f.Feed(std::string(1000, 'x'));
  EXPECT_TRUE(f.lost());
  EXPECT_EQ(f.state(), State::kOther);
}

}  // namespace
}  // namespace linfer
