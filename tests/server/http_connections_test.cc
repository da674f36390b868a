// The HTTP listener's connection guard (server/http/connection_guard.h) against real loopback
// clients: the request deadline (slow-loris), the connection cap and the listener's pause, the
// input limits (a client not reading its answer, an endless chunk-size line), the send rate (a
// client reading its answer a few bytes at a time), and what its
// reviews found (a queued request on an evicted connection, reads of reused descriptors,
// HTTP/1.0 streams, a burst of clients past the cap).
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/http/http_server.h"
#include "tests/server/http_test_util.h"

namespace linfer {
namespace {

using http_testing::AnswerOk;
using http_testing::ClosedWithin;
using http_testing::Connect;
using http_testing::ConnectIdle;
using http_testing::ReadAll;
using http_testing::Served;
using http_testing::StartWithOk;
using http_testing::StatsOnce;

// Slowloris: a request whose headers trickle in, a line every 200 ms, keeps libevent's idle
// timeout (30 s) from ever firing; the request deadline (1 s from its first byte) shuts the
// connection down, while a request that arrives whole in time, on another connection, and a
// keep-alive connection's second request are answered as usual.
TEST(HttpServerTest, RequestsThatTrickleInAreCutAtTheDeadline) {
  HttpServerOptions options;
  options.request_timeout_s = 1;
  std::unique_ptr<HttpServer> server = StartWithOk(options);
  ASSERT_NE(server, nullptr);
  HttpServer& srv = *server;

  const int slow = Connect(srv.port(), "GET /ok HTTP/1.1\r\nHost: x\r\n");
  ASSERT_GE(slow, 0);
  const absl::Time start = absl::Now();
  // Keep-alive: two requests 1.5 s apart on one connection; the idle time between them does not
  // count against the second.
  const int keep = Connect(srv.port(), "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_GE(keep, 0);
  bool cut = false;
  absl::Duration cut_after;
  for (int i = 0; i < 25 && !cut; ++i) {
    const std::string line = "X-Slow-" + std::to_string(i) + ": y\r\n";
    if (send(slow, line.data(), line.size(), MSG_NOSIGNAL) < 0) {
      cut = true;
    } else {
      cut = ClosedWithin(slow, absl::Milliseconds(200));
    }
    cut_after = absl::Now() - start;
  }
  EXPECT_TRUE(cut) << "a trickling request kept its connection for 5 s";
  EXPECT_GE(cut_after, absl::Milliseconds(900));
  EXPECT_LE(cut_after, absl::Seconds(3));
  close(slow);
  EXPECT_EQ(srv.connection_stats().timed_out, 1);

  const std::string second = "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(send(keep, second.data(), second.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(second.size()));
  const std::string both = ReadAll(keep);
  close(keep);
  size_t oks = 0;
  for (size_t at = both.find("200 OK"); at != std::string::npos; at = both.find("200 OK", at + 1)) {
    ++oks;
  }
  EXPECT_EQ(oks, 2u) << both;

  // A handler slower than the deadline is not cut: the deadline covers the request's arrival,
  // and a client's stray bytes during the answer do not start it.
  srv.Route("GET", "/slow", [](std::shared_ptr<HttpExchange> x) {
    absl::SleepFor(absl::Milliseconds(1500));
    AnswerOk(std::move(x));
  });
  const int busy =
      Connect(srv.port(), "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_GE(busy, 0);
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_GT(send(busy, "X", 1, MSG_NOSIGNAL), 0);
  EXPECT_NE(ReadAll(busy).find("200 OK"), std::string::npos);
  close(busy);
  EXPECT_EQ(srv.connection_stats().timed_out, 1);
  srv.Stop();
}

// The connection cap (3): a fourth client closes the connection that has waited longest
// without a request (idle first, even before an older partial request), and is answered.
TEST(HttpServerTest, TheCapClosesTheConnectionWaitingLongest) {
  HttpServerOptions options;
  options.max_connections = 3;
  std::unique_ptr<HttpServer> server = StartWithOk(options);
  ASSERT_NE(server, nullptr);
  HttpServer& srv = *server;

  const int partial = Connect(srv.port(), "GET /ok HTTP/1.1\r\n");
  ASSERT_GE(partial, 0);
  ASSERT_EQ(StatsOnce(srv, [](const auto& st) { return st.open == 1; }).open, 1u);
  const int idle_old = ConnectIdle(srv.port());
  ASSERT_EQ(StatsOnce(srv, [](const auto& st) { return st.open == 2; }).open, 2u);
  absl::SleepFor(absl::Milliseconds(20));
  const int idle_new = ConnectIdle(srv.port());
  ASSERT_EQ(StatsOnce(srv, [](const auto& st) { return st.open == 3; }).open, 3u);

  EXPECT_TRUE(Served(srv.port(), "/ok"));
  EXPECT_TRUE(ClosedWithin(idle_old, absl::Seconds(2)));
  EXPECT_FALSE(ClosedWithin(idle_new, absl::Milliseconds(300)));
  EXPECT_FALSE(ClosedWithin(partial, absl::Milliseconds(10)));
  EXPECT_EQ(srv.connection_stats().evicted, 1);

  // With only partial requests left to choose from, the oldest goes.
  ASSERT_GT(send(idle_new, "GET /ok HTTP/1.1\r\n", 18, MSG_NOSIGNAL), 0);
  const int partial3 = Connect(srv.port(), "GET /ok HTTP/1.1\r\n");
  ASSERT_GE(partial3, 0);
  ASSERT_EQ(StatsOnce(srv, [](const auto& st) { return st.open == 3; }).open, 3u);
  EXPECT_TRUE(Served(srv.port(), "/ok"));
  EXPECT_TRUE(ClosedWithin(partial, absl::Seconds(2)));
  EXPECT_FALSE(ClosedWithin(idle_new, absl::Milliseconds(100)));
  EXPECT_FALSE(ClosedWithin(partial3, absl::Milliseconds(10)));
  EXPECT_EQ(srv.connection_stats().evicted, 2);
  for (int f : {partial, idle_old, idle_new, partial3}) close(f);
  srv.Stop();
}

// The cap with only partial requests to choose from closes the one arriving slowest, not the
// oldest: a large upload begun first outlives two clients that sent a byte each after it (it
// used to be the first to go), and its answer arrives once its body is complete.
TEST(HttpServerTest, AtTheCapAnUploadOutlivesClientsTricklingBytes) {
  HttpServerOptions options;
  options.max_connections = 3;
  std::unique_ptr<HttpServer> server = StartWithOk(options);
  ASSERT_NE(server, nullptr);
  HttpServer& srv = *server;
  srv.Route("POST", "/size", [](std::shared_ptr<HttpExchange> x) {
    HttpResponse r;
    r.body = std::to_string(x->request().body.size());
    x->Respond(std::move(r));
  });
  constexpr size_t kBody = 1 << 20;
  const std::string half(kBody / 2, 'u');
  const int upload = Connect(srv.port(),
                             "POST /size HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                             "Content-Length: " +
                                 std::to_string(kBody) + "\r\n\r\n" + half);
  ASSERT_GE(upload, 0);
  ASSERT_EQ(StatsOnce(srv, [](const auto& st) { return st.open == 1; }).open, 1u);
  absl::SleepFor(absl::Milliseconds(50));
  const int byte1 = Connect(srv.port(), "G");
  ASSERT_GE(byte1, 0);
  ASSERT_EQ(StatsOnce(srv, [](const auto& st) { return st.open == 2; }).open, 2u);
  absl::SleepFor(absl::Milliseconds(20));
  const int byte2 = Connect(srv.port(), "G");
  ASSERT_GE(byte2, 0);
  ASSERT_EQ(StatsOnce(srv, [](const auto& st) { return st.open == 3; }).open, 3u);

  EXPECT_TRUE(Served(srv.port(), "/ok"));
  EXPECT_TRUE(ClosedWithin(byte1, absl::Seconds(2)));  // the older of the two slowest
  EXPECT_FALSE(ClosedWithin(upload, absl::Milliseconds(10)));
  EXPECT_FALSE(ClosedWithin(byte2, absl::Milliseconds(10)));
  EXPECT_EQ(srv.connection_stats().evicted, 1);
  ASSERT_EQ(send(upload, half.data(), half.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(half.size()));
  EXPECT_NE(ReadAll(upload).find("\r\n\r\n" + std::to_string(kBody)), std::string::npos);
  for (int f : {upload, byte1, byte2}) close(f);
  srv.Stop();
}

// At the cap with every connection being answered, nothing is closed: the listener pauses, a
// further client waits in the kernel's backlog, and is served once a connection closes.
TEST(HttpServerTest, AtTheCapWithEveryConnectionBusyAcceptingPauses) {
  HttpServerOptions options;
  options.max_connections = 2;
  std::unique_ptr<HttpServer> server = StartWithOk(options);
  ASSERT_NE(server, nullptr);
  HttpServer& srv = *server;
  absl::Notification release;
  std::atomic<int> entered{0};
  srv.Route("GET", "/wait", [&](std::shared_ptr<HttpExchange> x) {
    ++entered;
    release.WaitForNotification();
    AnswerOk(std::move(x));
  });
  const std::string get = "GET /wait HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  std::vector<int> fds;
  for (int i = 0; i < 2; ++i) fds.push_back(Connect(srv.port(), get));
  const absl::Time end = absl::Now() + absl::Seconds(5);
  while (entered < 2 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(entered, 2);
  // Accepted over the cap (the guard cannot refuse it), after which the listener pauses.
  fds.push_back(Connect(srv.port(), get));
  HttpServer::ConnectionStats st = StatsOnce(srv, [](const auto& s) { return s.paused; });
  EXPECT_TRUE(st.paused);
  EXPECT_EQ(st.open, 3u);
  fds.push_back(Connect(srv.port(), get));  // held in the backlog
  absl::SleepFor(absl::Milliseconds(300));
  st = srv.connection_stats();
  EXPECT_EQ(st.open, 3u);
  EXPECT_EQ(st.evicted, 0);
  release.Notify();
  for (int fd : fds) {
    ASSERT_GE(fd, 0);
    EXPECT_NE(ReadAll(fd).find("200 OK"), std::string::npos);
    close(fd);
  }
  EXPECT_EQ(entered, 4);
  EXPECT_FALSE(StatsOnce(srv, [](const auto& s) { return !s.paused; }).paused);
  srv.Stop();
}

// Review findings on the connection guard, each once a crash or a theft:
// an evicted connection whose request was already in the kernel's buffer is still answered
// (shutting its write side down too made that answer raise SIGPIPE and end the process).
TEST(HttpServerTest, AnEvictedConnectionsQueuedRequestKillsNothing) {
  HttpServerOptions options;
  options.max_connections = 1;
  std::unique_ptr<HttpServer> server = StartWithOk(options);
  ASSERT_NE(server, nullptr);
  HttpServer& srv = *server;
  for (int i = 0; i < 20; ++i) {
    const int a = ConnectIdle(srv.port());
    ASSERT_GE(a, 0);
    StatsOnce(srv, [](const auto& st) { return st.open == 1; });
    const int b = Connect(srv.port(), "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    const std::string nope = "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n";
    send(a, nope.data(), nope.size(), MSG_NOSIGNAL);
    EXPECT_NE(ReadAll(b).find("200 OK"), std::string::npos);
    close(a);
    close(b);
  }
  EXPECT_TRUE(Served(srv.port(), "/ok"));
  srv.Stop();
}

// A connection evhttp has freed keeps no event that can read a descriptor number another thread
// has been given since: clients that half-close after an HTTP/1.0 request (its answer ends the
// connection while the read event is pending) while another thread opens pipes and reads back
// what it wrote into them. The guard's reference used to leave such reads to run on the reused
// number and take the pipes' bytes.
TEST(HttpServerTest, FreedConnectionsReadNoReusedDescriptor) {
  HttpServerOptions options;
  std::unique_ptr<HttpServer> server = StartWithOk(options);
  ASSERT_NE(server, nullptr);
  HttpServer& srv = *server;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> lost{0}, rounds{0};
  std::thread pipes([&] {
    const std::string msg = "sixteen bytes!!\n";
    while (!stop) {
      int p[2];
      if (pipe(p) != 0) continue;
      if (write(p[1], msg.data(), msg.size()) == static_cast<ssize_t>(msg.size())) {
        absl::SleepFor(absl::Microseconds(50));
        char buf[32];
        const ssize_t n = read(p[0], buf, sizeof(buf));
        lost += static_cast<int64_t>(msg.size()) - std::max<ssize_t>(n, 0);
        ++rounds;
      }
      close(p[0]);
      close(p[1]);
    }
  });
  int answered = 0;
  for (int i = 0; i < 1500; ++i) {
    const int fd = Connect(srv.port(), "GET /ok HTTP/1.0\r\n\r\n");
    if (fd < 0) continue;
    shutdown(fd, SHUT_WR);
    answered += ReadAll(fd).find("200 OK") != std::string::npos;
    close(fd);
  }
  stop = true;
  pipes.join();
  // A client that half-closes may be taken for gone before its answer is written (libevent
  // reads the EOF; the server's tick treats it as a departure): nearly all are answered.
  EXPECT_GE(answered, 1400);
  EXPECT_GT(rounds, 0);
  EXPECT_EQ(lost, 0) << "bytes taken from other threads' pipes";
  srv.Stop();
}

// While a large answer is written to a client that does not read it, the client's own bytes are
// read only up to the guard's input limit (evhttp read them with no bound; the limit is what one
// request may take: here 2 MiB of body, 64 KiB of headers), and neither they nor the time it
// takes start the request deadline: the answer arrives whole afterwards. A body larger than the
// limit's headroom still arrives whole.
TEST(HttpServerTest, AClientNotReadingItsAnswerCannotFillTheServersMemory) {
  HttpServerOptions options;
  options.request_timeout_s = 1;
  options.max_body_bytes = 1 << 20;
  std::unique_ptr<HttpServer> server = StartWithOk(options);
  ASSERT_NE(server, nullptr);
  HttpServer& srv = *server;
  constexpr size_t kBody = 48 << 20;
  srv.Route("POST", "/size", [](std::shared_ptr<HttpExchange> x) {
    HttpResponse r;
    r.body = std::to_string(x->request().body.size());
    x->Respond(std::move(r));
  });
  const std::string body((1 << 20) - 1, 'p');
  const int post = Connect(srv.port(),
                           "POST /size HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                           "Content-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_GE(post, 0);
  EXPECT_NE(ReadAll(post).find("\r\n\r\n" + std::to_string(body.size())), std::string::npos);
  close(post);
  // Over max_body_bytes but within libevent's cap (twice it): read whole, then the JSON 413.
  const std::string over((2 << 20) - 1, 'p');
  const int post2 = Connect(srv.port(),
                            "POST /size HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                            "Content-Length: " +
                                std::to_string(over.size()) + "\r\n\r\n" + over);
  ASSERT_GE(post2, 0);
  EXPECT_NE(ReadAll(post2).find(" 413 "), std::string::npos);
  close(post2);
  srv.Route("GET", "/big", [](std::shared_ptr<HttpExchange> x) {
    HttpResponse r;
    r.content_type = "application/octet-stream";
    r.body.assign(kBody, 'b');
    x->Respond(std::move(r));
  });
  const int fd = Connect(srv.port(), "GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_GE(fd, 0);
  absl::SleepFor(absl::Milliseconds(300));  // the answer is being written
  const std::string junk(1 << 16, 'j');
  int64_t pushed = 0;
  const absl::Time end = absl::Now() + absl::Seconds(2);
  while (absl::Now() < end && pushed < (int64_t{256} << 20)) {
    const ssize_t n = send(fd, junk.data(), junk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      pushed += n;
    } else {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  // Loopback's socket buffers and the limit take ≈ 6.5 MB (measured); without the limit the
  // server took all 256 MiB.
  EXPECT_LT(pushed, int64_t{40} << 20);
  absl::SleepFor(absl::Milliseconds(500));  // past the 1 s deadline since the junk began
  size_t got = 0;
  char buf[1 << 16];
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  EXPECT_GT(got, kBody);  // the headers and the whole body
  EXPECT_EQ(srv.connection_stats().timed_out, 0);
  srv.Stop();
}

// An HTTP/1.0 stream (not chunked: its end closes the connection inside evhttp) and a HEAD on a
// stream: the answer is whole, and the server keeps serving (its end used to read the freed
// connection).
TEST(HttpServerTest, StreamsToHttp10ClientsEndCleanly) {
  HttpServerOptions options;
  std::unique_ptr<HttpServer> server = StartWithOk(options);
  ASSERT_NE(server, nullptr);
  HttpServer& srv = *server;
  srv.Route("GET", "/stream", [](std::shared_ptr<HttpExchange> x) {
    std::shared_ptr<HttpStream> stream = x->StartStream(200, "text/plain", {});
    stream->Send("one\n");
    stream->Send("two\n");
    stream->End();
  });
  for (int i = 0; i < 50; ++i) {
    const int fd = Connect(srv.port(), "GET /stream HTTP/1.0\r\n\r\n");
    ASSERT_GE(fd, 0);
    const std::string got = ReadAll(fd);
    close(fd);
    EXPECT_NE(got.find("one\ntwo\n"), std::string::npos) << got;
    const int head =
        Connect(srv.port(), "HEAD /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    ASSERT_GE(head, 0);
    EXPECT_NE(ReadAll(head).find("200 OK"), std::string::npos);
    close(head);
  }
  EXPECT_TRUE(Served(srv.port(), "/ok"));
  srv.Stop();
}

// A chunked body's size line with no end (evhttp sets it no length limit, and scans the whole
// buffer for its end on every read): the guard follows the request's framing, so the connection
// is closed once the line passes 4 KiB, not at the 64 MiB a body may take — the limit alone left
// evhttp rescanning the full buffer on every turn of the loop, for ever. Chunked and
// Content-Length bodies larger than 1 MiB are read whole.
TEST(HttpServerTest, AnEndlessChunkSizeLineIsClosedSoon) {
  HttpServerOptions options;
  std::unique_ptr<HttpServer> server = StartWithOk(options);
  ASSERT_NE(server, nullptr);
  HttpServer& srv = *server;
  srv.Route("POST", "/size", [](std::shared_ptr<HttpExchange> x) {
    HttpResponse r;
    r.body = "size " + std::to_string(x->request().body.size());
    x->Respond(std::move(r));
  });
  const std::string chunked_head =
      "POST /size HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  // Sends `prefix`, then '0's without a line end until the server closes (or 64 MiB, 10 s):
  // whether it closed, and how many bytes it took.
  auto push = [&](const std::string& prefix) -> std::pair<bool, int64_t> {
    const int c = Connect(srv.port(), prefix);
    if (c < 0) return {false, 0};
    const std::string zeros(1 << 16, '0');
    int64_t sent = 0;
    bool gone = false;
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (!gone && absl::Now() < until && sent < (int64_t{64} << 20)) {
      const ssize_t n = send(c, zeros.data(), zeros.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += n;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        gone = ClosedWithin(c, absl::Milliseconds(20));
      } else {
        gone = true;  // EPIPE / ECONNRESET: the server closed it
      }
    }
    gone = gone || ClosedWithin(c, absl::Seconds(2));
    close(c);
    return {gone, sent};
  };
  auto [closed, pushed] = push(chunked_head);
  EXPECT_TRUE(closed) << pushed << " bytes pushed";
  EXPECT_LT(pushed, int64_t{16} << 20);  // 4 KiB and the socket buffers, not 64 MiB
  EXPECT_EQ(srv.connection_stats().overflowed, 1);
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Served(srv.port(), "/ok"));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1)) << "the event loop is still busy";

  // The follower must not lose evhttp's framing: a size line over 4 KiB that ends within one read
  // (evhttp reads a 1-byte chunk from "\t"×4200 + "1", then an endless line), and a CONNECT that
  // evhttp refuses itself but answers on a connection it keeps open.
  for (const std::string& prefix :
       {chunked_head + std::string(4200, '\t') + "1\r\nX",
        "CONNECT a:1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: x\r\n\r\n" +
            chunked_head}) {
    const auto [gone, sent] = push(prefix);
    EXPECT_TRUE(gone) << sent << " bytes sent after " << prefix.substr(0, 12);
    EXPECT_LT(sent, int64_t{16} << 20) << prefix.substr(0, 12);
  }
  EXPECT_EQ(srv.connection_stats().overflowed, 3);

  auto post = [&](const std::string& headers, const std::string& body) {
    const int c = Connect(srv.port(), "POST /size HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
                                          headers + "\r\n" + body);
    if (c < 0) return std::string();
    std::string got = ReadAll(c);
    close(c);
    return got;
  };
  // Chunks of any size within the body limit, and a Transfer-Encoding inside a folded header (not
  // one for evhttp: a 3 MiB Content-Length body) are read as evhttp reads them.
  std::string chunked;
  for (int i = 0; i < 4; ++i) chunked += "40000\r\n" + std::string(0x40000, 'c') + "\r\n";
  chunked += "200000\r\n" + std::string(0x200000, 'c') + "\r\n0\r\n\r\n";  // a 2 MiB chunk
  EXPECT_NE(post("Transfer-Encoding: chunked\r\n", chunked).find("size 3145728"),
            std::string::npos);
  const std::string big(3 << 20, 'b');
  EXPECT_NE(post("X-A: b\r\n Transfer-Encoding: chunked\r\nContent-Length: " +
                     std::to_string(big.size()) + "\r\n",
                 big)
                .find("size 3145728"),
            std::string::npos);
  EXPECT_EQ(srv.connection_stats().overflowed, 3);
  srv.Stop();
}

// Descriptors open in this process (the server runs in it).
int OpenDescriptors() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

// A burst of clients far past the cap: every connection closed to make room gives its descriptor
// back before the next is accepted (they used to wait for the loop to read their EOF, so a burst
// could run the process out of descriptors, and libevent's listener then spins on EMFILE).
TEST(HttpServerTest, ABurstPastTheCapHoldsNoMoreDescriptorsThanTheCap) {
  HttpServerOptions options;
  options.max_connections = 16;
  std::unique_ptr<HttpServer> server = StartWithOk(options);
  ASSERT_NE(server, nullptr);
  HttpServer& srv = *server;
  const int before = OpenDescriptors();
  std::vector<int> clients;
  for (int i = 0; i < 300; ++i) clients.push_back(ConnectIdle(srv.port()));
  StatsOnce(srv, [](const auto& st) { return st.evicted >= 300 - 16; });
  const int server_held = OpenDescriptors() - before - static_cast<int>(clients.size());
  EXPECT_LE(server_held, 16 + 2);
  EXPECT_GE(srv.connection_stats().evicted, 300 - 16);
  EXPECT_TRUE(Served(srv.port(), "/ok"));
  for (int fd : clients) close(fd);
  srv.Stop();
}

// Reads `bytes` every `every` for `how_long` (or until the peer closes, or `stop`); the bytes
// read.
int64_t ReadSlowly(int fd, size_t bytes, absl::Duration every, absl::Duration how_long,
                   const std::atomic<bool>* stop = nullptr) {
  std::string buf(bytes, '\0');
  int64_t got = 0;
  const absl::Time end = absl::Now() + how_long;
  while (absl::Now() < end && (stop == nullptr || !*stop)) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n == 0) break;
    if (n > 0) got += n;
    absl::SleepFor(every);
  }
  return got;
}

// Slow read: a client that pipelines requests for large answers and reads a few bytes at a time
// kept libevent's write timeout from firing (it restarts on any progress), and a connection
// writing an answer is never evicted — cap-many such clients paused the listener for good. Under
// the send rate (64 KiB/s over 1 s windows here) it is dropped; a client reading steadily at four
// times the rate gets its whole answer.
TEST(HttpServerTest, AClientReadingSlowerThanTheSendRateIsDropped) {
  HttpServerOptions options;
  options.write_timeout_s = 1;
  options.min_send_rate = 64 << 10;
  std::unique_ptr<HttpServer> server = StartWithOk(options);
  ASSERT_NE(server, nullptr);
  HttpServer& srv = *server;
  constexpr size_t kBody = 8 << 20;  // more than loopback's socket buffers hold (≈ 4–6 MB)
  srv.Route("GET", "/big", [](std::shared_ptr<HttpExchange> x) {
    HttpResponse r;
    r.content_type = "application/octet-stream";
    r.body.assign(kBody, 'b');
    x->Respond(std::move(r));
  });
  const std::string get = "GET /big HTTP/1.1\r\nHost: x\r\n\r\n";
  const int slow = Connect(srv.port(), get + get + get, 4096);
  ASSERT_GE(slow, 0);
  // 100 bytes every 100 ms: ≈ 1 KB/s.
  std::atomic<bool> dropped{false};
  std::thread reader(
      [&] { ReadSlowly(slow, 100, absl::Milliseconds(100), absl::Seconds(5), &dropped); });
  const HttpServer::ConnectionStats st =
      StatsOnce(srv, [](const auto& s) { return s.slow_readers >= 1; });
  dropped = true;
  reader.join();
  EXPECT_EQ(st.slow_readers, 1);
  EXPECT_EQ(st.open, 0u);
  close(slow);
  EXPECT_TRUE(Served(srv.port(), "/ok"));

  // 256 KiB/s for 4 s (four windows with output waiting all along), then the rest at once.
  const int steady =
      Connect(srv.port(), "GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_GE(steady, 0);
  const int64_t first = ReadSlowly(steady, 16 << 10, absl::Milliseconds(62), absl::Seconds(4));
  EXPECT_GT(first, int64_t{512} << 10);
  EXPECT_LT(first, static_cast<int64_t>(kBody) / 2);  // the answer was still being written
  const std::string tail = ReadAll(steady);
  close(steady);
  EXPECT_GE(first + static_cast<int64_t>(tail.size()), static_cast<int64_t>(kBody));
  EXPECT_EQ(srv.connection_stats().slow_readers, 1);
  srv.Stop();
}

// A stream produced faster than its client reads (a slow link): the backlog grows, yet the client
// reads all along, so it is not dropped after write_timeout_s (the rule counted only a shrinking
// backlog as reading, and dropped this stream after 1 s); it arrives whole.
TEST(HttpServerTest, AStreamOutpacingASteadyReaderIsKept) {
  HttpServerOptions options;
  options.write_timeout_s = 1;
  options.stream_backlog_limit = 64 << 20;
  std::unique_ptr<HttpServer> server = StartWithOk(options);
  ASSERT_NE(server, nullptr);
  HttpServer& srv = *server;
  constexpr int kChunks = 30;
  const std::string chunk(400 << 10, 's');  // 4 MB/s for 3 s: past loopback's socket buffers
  std::thread producer;
  srv.Route("GET", "/stream", [&](std::shared_ptr<HttpExchange> x) {
    std::shared_ptr<HttpStream> stream = x->StartStream(200, "text/plain", {});
    producer = std::thread([stream, &chunk] {
      for (int i = 0; i < kChunks; ++i) {
        stream->Send(chunk);
        absl::SleepFor(absl::Milliseconds(100));
      }
      stream->End();
    });
  });
  const int fd =
      Connect(srv.port(), "GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_GE(fd, 0);
  const int64_t first = ReadSlowly(fd, 64 << 10, absl::Milliseconds(62), absl::Seconds(4));
  const std::string rest = ReadAll(fd);  // ≈ 1 MB/s, then the rest at once
  close(fd);
  producer.join();
  EXPECT_GE(first + static_cast<int64_t>(rest.size()), int64_t{kChunks} * (400 << 10));
  EXPECT_NE(rest.find("0\r\n\r\n"), std::string::npos);  // the stream's end
  srv.Stop();
}

// A stream whose client reads nothing at all: its backlog past stream_backlog_limit, the server
// drops it — counted among the slow readers (with the send-rate rule off, the count is this
// drop's alone), and the server keeps serving.
TEST(HttpServerTest, AStreamWhoseClientReadsNothingIsDroppedAndCounted) {
  HttpServerOptions options;
  options.write_timeout_s = 1;
  options.min_send_rate = 0;
  options.stream_backlog_limit = 4 << 20;
  std::unique_ptr<HttpServer> server = StartWithOk(options);
  ASSERT_NE(server, nullptr);
  HttpServer& srv = *server;
  std::atomic<bool> stop{false};
  std::thread producer;
  srv.Route("GET", "/stream", [&](std::shared_ptr<HttpExchange> x) {
    std::shared_ptr<HttpStream> stream = x->StartStream(200, "text/plain", {});
    producer = std::thread([stream, &stop] {
      const std::string chunk(256 << 10, 's');
      for (int i = 0; i < 400 && !stop; ++i) {
        stream->Send(chunk);
        absl::SleepFor(absl::Milliseconds(10));
      }
      stream->End();
    });
  });
  const int fd = Connect(srv.port(), "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n", 4096);
  ASSERT_GE(fd, 0);
  const HttpServer::ConnectionStats st =
      StatsOnce(srv, [](const auto& s) { return s.slow_readers >= 1; });
  stop = true;
  producer.join();
  close(fd);
  EXPECT_EQ(st.slow_readers, 1);
  EXPECT_TRUE(Served(srv.port(), "/ok"));
  srv.Stop();
}

}  // namespace
}  // namespace linfer
