// HttpServer (server/http): a response handed over before Stop reaches its client in full — Stop
// lets the event loop write what is still queued before it closes the connections (a drained
// server used to cut a stream's last bytes, "data: [DONE]"); and clients that leave before their
// response is complete, streamed or not, are noticed and cost nothing afterwards
// (libevent hands such a request back to its owner to free: 2 KB leaked per aborted stream until it
// did — LeakSanitizer catches it in tests/run.sh's sanitizer stage).
#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tests/server/http_test_util.h"

namespace linfer {
namespace {

using http_testing::Connect;
using http_testing::ReadAll;

// Query values as clients encode them: %XX and '+' decoded (names too), the first match wins, a
// stray '%' stays, an absent name is "".
TEST(HttpRequestTest, QueryValuesArePercentDecoded) {
  HttpRequest r;
  r.query = "order=asc&after=my%20item%2F1&q=a+b&%6Cimit=5&order=desc&bad=100%&empty=";
  EXPECT_EQ(r.Query("order"), "asc");
  EXPECT_EQ(r.Query("after"), "my item/1");
  EXPECT_EQ(r.Query("q"), "a b");
  EXPECT_EQ(r.Query("limit"), "5");
  EXPECT_EQ(r.Query("bad"), "100%");
  EXPECT_EQ(r.Query("empty"), "");
  EXPECT_EQ(r.Query("absent"), "");
}

TEST(HttpServerTest, StopDeliversWhatWasQueued) {
  HttpServerOptions options;
  options.port = 0;
  options.stream_backlog_limit = int64_t{1} << 30;  // the test's backlog is deliberate
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  // 32 MiB: far more than loopback's socket buffers hold, so most of it is still queued in the
  // server when Stop is called.
  const std::string big(32 << 20, 'x');
  absl::Notification handed_over;
  (*server)->Route("GET", "/big", [&](std::shared_ptr<HttpExchange> x) {
    std::shared_ptr<HttpStream> stream = x->StartStream(200, "text/plain", {});
    stream->Send(big);
    stream->Send("END");
    stream->End();
    handed_over.Notify();
  });
  const int fd = Connect((*server)->port(), "GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(handed_over.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(50));  // let the loop move the chunks into its buffers
  // The client reads only once Stop has begun.
  std::atomic<bool> stopping{false};
  std::string got;
  std::thread reader([&] {
    while (!stopping) absl::SleepFor(absl::Milliseconds(1));
    got = ReadAll(fd);
  });
  stopping = true;
  (*server)->Stop();
  reader.join();
  close(fd);
  ASSERT_GT(got.size(), big.size());
  // Chunked transfer: the last chunk "END", then the terminating zero-length chunk.
  EXPECT_NE(got.find("END\r\n"), std::string::npos) << got.size() << " bytes arrived";
  EXPECT_EQ(got.substr(got.size() - 5), "0\r\n\r\n");
}

TEST(HttpServerTest, ClientsLeavingMidResponseAreLetGo) {
  HttpServerOptions options;
  options.port = 0;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  // /stream sends one chunk and ends only after its client has gone; /slow answers only then.
  absl::Mutex mu;
  int gone = 0;  // bit 0: /stream's client, bit 1: /slow's
  std::vector<std::thread> finishers;
  auto on_gone = [&](int bit) {
    absl::MutexLock lock(&mu);
    gone |= bit;
  };
  auto wait_gone = [&](int bits) {
    for (absl::Time end = absl::Now() + absl::Seconds(10); absl::Now() < end;) {
      {
        absl::MutexLock lock(&mu);
        if ((gone & bits) == bits) return true;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  };
  // Declared after what the finishers and callbacks use: an ASSERT returning early stops the
  // server and joins the finishers before those go.
  struct Joiner {
    HttpServer* server;
    std::vector<std::thread>* threads;
    absl::Mutex* mu;
    ~Joiner() {
      server->Stop();
      std::vector<std::thread> all;
      {
        absl::MutexLock lock(mu);
        all.swap(*threads);
      }
      for (std::thread& t : all) t.join();
    }
  } joiner{server->get(), &finishers, &mu};
  (*server)->Route("GET", "/stream", [&](std::shared_ptr<HttpExchange> x) {
    // Registered before the response starts, and checked after: a client may leave at any time
    // (as Generation::Start does).
    x->OnClientGone([&] { on_gone(1); });
    std::shared_ptr<HttpStream> stream = x->StartStream(200, "text/plain", {});
    stream->Send("first chunk\n");
    if (stream->client_gone()) on_gone(1);
    absl::MutexLock lock(&mu);
    finishers.emplace_back([stream, &wait_gone] {
      wait_gone(1);
      stream->Send("too late");  // the client has gone: dropped
      stream->End();
    });
  });
  (*server)->Route("GET", "/slow", [&](std::shared_ptr<HttpExchange> x) {
    x->OnClientGone([&] { on_gone(2); });
    if (x->client_gone()) on_gone(2);
    absl::MutexLock lock(&mu);
    finishers.emplace_back([x, &wait_gone] {
      wait_gone(2);
      x->Respond({});
    });
  });
  (*server)->Route("GET", "/ok", [](std::shared_ptr<HttpExchange> x) { x->Respond({}); });

  int fd = Connect((*server)->port(), "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_GE(fd, 0);
  // Read until the first chunk is in (nothing unread, so close sends FIN), then leave.
  std::string seen;
  char buf[256];
  while (seen.find("first chunk") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0) << "the stream ended before its first chunk";
    seen.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  ASSERT_TRUE(wait_gone(1)) << "the server did not notice the streaming client leave";
  fd = Connect((*server)->port(), "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_GE(fd, 0);
  absl::SleepFor(absl::Milliseconds(100));  // the request reaches its handler
  close(fd);                                // FIN
  ASSERT_TRUE(wait_gone(3)) << "the server did not notice the waiting client leave";
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(finishers.size(), 2u);
  }
  // The server still serves.
  fd = Connect((*server)->port(), "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ReadAll(fd).rfind("HTTP/1.1 200", 0), 0u);
  close(fd);
  (*server)->Stop();
}

}  // namespace
}  // namespace linfer

namespace linfer {
namespace {

// "*" segments: one non-empty segment each; an exact route wins over a pattern; a pattern path
// without the method's route is a 405, like an exact one.
TEST(HttpServerTest, StarSegmentsMatchOneSegment) {
  HttpServerOptions options;
  options.port = 0;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto answer = [&](const std::string& name) {
    return [name](std::shared_ptr<HttpExchange> x) {
      HttpResponse r;
      r.body = name + " " + x->request().path;
      x->Respond(std::move(r));
    };
  };
  (*server)->Route("GET", "/r/*", answer("one"));
  (*server)->Route("GET", "/r/*/items", answer("items"));
  (*server)->Route("GET", "/r/fixed", answer("exact"));
  auto get = [&](const std::string& method, const std::string& path) {
    const int fd =
        Connect((*server)->port(),
                method + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_GE(fd, 0);
    std::string got = ReadAll(fd);
    close(fd);
    return got;
  };
  EXPECT_NE(get("GET", "/r/abc").find("one /r/abc"), std::string::npos);
  EXPECT_NE(get("GET", "/r/abc/items").find("items /r/abc/items"), std::string::npos);
  EXPECT_NE(get("GET", "/r/fixed").find("exact /r/fixed"), std::string::npos);
  EXPECT_NE(get("GET", "/r/").find(" 404 "), std::string::npos);
  EXPECT_NE(get("GET", "/r//items").find(" 404 "), std::string::npos);
  // A target beginning "//" is a path, as sent (it was read as an authority: "//abc/r/fixed"
  // routed as "/r/fixed", "//x/abc" named "/abc" in its 404).
  EXPECT_NE(get("GET", "//abc/r/fixed").find(" 404 "), std::string::npos);
  EXPECT_NE(get("GET", "//x/abc").find("no route for GET //x/abc"), std::string::npos);
  EXPECT_NE(get("GET", "/r/abc/items?x=//y#f").find("items /r/abc/items"), std::string::npos);
  EXPECT_NE(get("GET", "http://x/r/fixed?q=1").find("exact /r/fixed"), std::string::npos);
  EXPECT_NE(get("GET", "/r/a/b").find(" 404 "), std::string::npos);
  EXPECT_NE(get("GET", "/r").find(" 404 "), std::string::npos);
  EXPECT_NE(get("POST", "/r/abc").find(" 405 "), std::string::npos);
  (*server)->Stop();
}

// A bound server answers no one until Serve (the routes are registered meanwhile: the server
// registers them after restoring its stored responses, and a request used to meet a route table
// being filled — a data race — or a 404 for /health); a client that came early is answered then.
// One never served stops at once.
TEST(HttpServerTest, BoundServerAnswersOnceServed) {
  HttpServerOptions options;
  options.port = 0;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Bind(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int fd =
      Connect((*server)->port(), "GET /early HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_GE(fd, 0);
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 300), 0) << "answered before Serve";
  (*server)->Route("GET", "/early", [](std::shared_ptr<HttpExchange> x) {
    HttpResponse r;
    r.body = "served";
    x->Respond(std::move(r));
  });
  (*server)->Serve();
  const std::string got = ReadAll(fd);
  close(fd);
  EXPECT_NE(got.find(" 200 "), std::string::npos) << got;
  EXPECT_NE(got.find("served"), std::string::npos) << got;
  (*server)->Stop();

  absl::StatusOr<std::unique_ptr<HttpServer>> idle = HttpServer::Bind(options);
  ASSERT_TRUE(idle.ok()) << idle.status();
  const absl::Time start = absl::Now();
  (*idle)->Stop(absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "waited to flush a loop that never ran";
}

// CORS: a preflight on a route is answered by the server (204, the route's methods, the asked
// headers; its handler never runs) for an allowed origin and refused (403) for another; every
// answer to a request from an allowed origin carries Access-Control-Allow-Origin ("*", or the
// origin itself with Vary when the list names origins), streams and the router's own errors too;
// requests without an Origin get no CORS headers.
TEST(HttpServerTest, CorsPreflightAndAllowOrigin) {
  for (const bool any : {true, false}) {
    SCOPED_TRACE(any ? "allowed_origins *" : "allowed_origins https://good.example");
    HttpServerOptions options;
    options.port = 0;
    if (!any) options.allowed_origins = {"https://good.example"};
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    std::atomic<int> handled{0};
    (*server)->Route("POST", "/v1/x", [&](std::shared_ptr<HttpExchange> x) {
      ++handled;
      HttpResponse r;
      r.body = "{}";
      x->Respond(std::move(r));
    });
    (*server)->Route("GET", "/v1/x", [&](std::shared_ptr<HttpExchange> x) {
      ++handled;
      std::shared_ptr<HttpStream> s = x->StartStream(200, "text/event-stream", {});
      s->Send("data: 1\n\n");
      s->End();
    });
    auto ask = [&](const std::string& method, const std::string& path, const std::string& headers) {
      const std::string body = method == "POST" ? "{}" : "";
      const int fd = Connect((*server)->port(), method + " " + path + " HTTP/1.1\r\nHost: x\r\n" +
                                                    headers + "Connection: close\r\n\r\n" + body);
      EXPECT_GE(fd, 0);
      std::string got = ReadAll(fd);
      close(fd);
      return got;
    };
    const std::string good = "Origin: https://good.example\r\n";
    const std::string bad = "Origin: https://evil.example\r\n";
    const std::string preflight =
        "Access-Control-Request-Method: POST\r\n"
        "Access-Control-Request-Headers: authorization, content-type, x-stainless-os\r\n";
    const std::string allow = any ? "Access-Control-Allow-Origin: *\r\n"
                                  : "Access-Control-Allow-Origin: https://good.example\r\n";

    std::string got = ask("OPTIONS", "/v1/x", good + preflight);
    EXPECT_NE(got.find(" 204 "), std::string::npos) << got;
    EXPECT_NE(got.find(allow), std::string::npos) << got;
    EXPECT_NE(got.find("Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n"), std::string::npos)
        << got;
    EXPECT_NE(got.find("Access-Control-Allow-Headers: authorization, content-type, "
                       "x-stainless-os\r\n"),
              std::string::npos)
        << got;
    EXPECT_EQ(got.find("Vary: Origin") != std::string::npos, !any) << got;

    got = ask("OPTIONS", "/v1/x", bad + preflight);
    EXPECT_NE(got.find(any ? " 204 " : " 403 "), std::string::npos) << got;
    if (!any) {
      EXPECT_EQ(got.find("Access-Control-Allow-Origin"), std::string::npos) << got;
      EXPECT_NE(got.find("https://evil.example' is not allowed"), std::string::npos) << got;
    }
    EXPECT_EQ(handled.load(), 0) << "a preflight reached a handler";

    got = ask("POST", "/v1/x", good + "Content-Length: 2\r\n");
    EXPECT_NE(got.find(" 200 "), std::string::npos) << got;
    EXPECT_NE(got.find(allow), std::string::npos) << got;
    got = ask("GET", "/v1/x", good);  // a stream
    EXPECT_NE(got.find("data: 1"), std::string::npos) << got;
    EXPECT_NE(got.find(allow), std::string::npos) << got;
    got = ask("GET", "/nowhere", good);  // the router's own 404
    EXPECT_NE(got.find(" 404 "), std::string::npos) << got;
    EXPECT_NE(got.find(allow), std::string::npos) << got;
    got = ask("POST", "/v1/x", bad + "Content-Length: 2\r\n");
    EXPECT_NE(got.find(" 200 "), std::string::npos) << got;
    EXPECT_EQ(got.find("Access-Control-Allow-Origin") != std::string::npos, any) << got;
    EXPECT_EQ(got.find("Vary: Origin") != std::string::npos, !any) << got;  // for caches
    got = ask("POST", "/v1/x", "Content-Length: 2\r\n");  // no Origin: no CORS headers
    EXPECT_EQ(got.find("Access-Control"), std::string::npos) << got;
    got = ask("OPTIONS", "/v1/x", good);  // not a preflight: the route has no OPTIONS
    EXPECT_NE(got.find(" 405 "), std::string::npos) << got;
    (*server)->Stop();
  }
}

TEST(HttpServerTest, AllowedOriginsAreCheckedByName) {
  EXPECT_TRUE(CheckAllowedOrigins({}).ok());
  EXPECT_TRUE(CheckAllowedOrigins({"*", "https://a.example:8443", "http://localhost:3000"}).ok());
  for (const char* wrong : {"a.example", "https://a.example/", "https://a.example/app", "://x",
                            "https://", "https://a b", "1http://x"}) {
    const absl::Status st = CheckAllowedOrigins({"*", wrong});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << wrong;
    EXPECT_NE(st.message().find(std::string("'") + wrong + "'"), std::string::npos) << st;
  }
  HttpServerOptions options;
  options.port = 0;
  options.allowed_origins = {"example.com"};
  EXPECT_EQ(HttpServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HttpServerTest, OptionsBelowOneAreRefusedByName) {
  HttpServerOptions options;
  options.port = 0;
  options.request_timeout_s = 0;
  absl::Status st = CheckHttpServerOptions(options);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("request_timeout_s is 0"), absl::string_view::npos) << st;
  options.request_timeout_s = 1;
  options.workers = -2;
  EXPECT_NE(HttpServer::Start(options).status().message().find("workers is -2"),
            absl::string_view::npos);
  options.workers = 1;
  options.max_connections = 0;
  EXPECT_NE(CheckHttpServerOptions(options).message().find("max_connections"),
            absl::string_view::npos);
}

// Framing that a proxy in front may read otherwise than evhttp does (request smuggling: two
// Content-Lengths, "+10", a coding evhttp does not decode) is refused and the connection closed,
// so the bytes after the declared body are never served as a request of their own; CONNECT is
// answered with a length and closed. A plain body on the same route lets the next request in.
TEST(HttpServerTest, AmbiguousFramingIsRefusedAndTheConnectionClosed) {
  std::unique_ptr<HttpServer> server = http_testing::StartWithOk({});
  ASSERT_NE(server, nullptr);
  const std::string smuggled = "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string body = "{\"a\":1234}" + smuggled;
  struct Case {
    std::string request;
    std::string status;
    bool json = true;  // else evhttp's own refusal (an HTML page): it closes the connection too
  };
  const std::string post = "POST /ok HTTP/1.1\r\nHost: x\r\n";
  for (const Case& c : std::vector<Case>{
           {post + "Content-Length: 10\r\nContent-Length: " + std::to_string(body.size()) +
                "\r\n\r\n" + body,
            "400"},
           {post + "Content-Length: +10\r\n\r\n" + body, "400"},
           {post + "Transfer-Encoding: gzip\r\n\r\n" + body, "501"},
           {post + "Transfer-Encoding: gzip, chunked\r\n\r\na\r\n" + body.substr(0, 10) +
                "\r\n0\r\n\r\n" + smuggled,
            "501"},
           {post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
                smuggled,
            "400", false},
           {"CONNECT a:443 HTTP/1.1\r\nHost: x\r\n\r\n" + smuggled, "405"}}) {
    const int fd = Connect(server->port(), c.request);
    ASSERT_GE(fd, 0);
    const absl::Time t0 = absl::Now();
    const std::string got = ReadAll(fd);
    close(fd);
    const std::string what = c.request.substr(0, 80);
    EXPECT_LT(absl::Now() - t0, absl::Seconds(5)) << "not closed: " << what;
    EXPECT_EQ(got.substr(0, 12), "HTTP/1.1 " + c.status) << what << got;
    EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
    EXPECT_NE(got.find("Content-Length: "), std::string::npos) << got;
    EXPECT_EQ(got.find("\"error\"") != std::string::npos, c.json) << got;
    EXPECT_EQ(got.find("200 OK"), std::string::npos) << "the smuggled request was served: " << got;
  }
  // The same bytes framed plainly: 405 for the POST, then the pipelined GET is served.
  const int fd = Connect(server->port(), post + "Content-Length: 10\r\n\r\n" + body);
  ASSERT_GE(fd, 0);
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string got;
  char buf[4096];
  while (got.find("200 OK") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  EXPECT_EQ(got.substr(0, 12), "HTTP/1.1 405") << got;
  EXPECT_NE(got.find("200 OK"), std::string::npos) << got;
  server->Stop();
}

// A body with a Content-Encoding (gzip, …) is refused 415 naming the coding, with the connection
// kept (its framing is plain); identity, or no body, goes to the handler.
TEST(HttpServerTest, ACompressedBodyIsRefusedNamingItsCoding) {
  std::unique_ptr<HttpServer> server = http_testing::StartWithOk({});
  ASSERT_NE(server, nullptr);
  server->Route("POST", "/echo", [](std::shared_ptr<HttpExchange> x) {
    HttpResponse r;
    r.body = "got " + x->request().body;
    x->Respond(std::move(r));
  });
  auto post = [&](const std::string& coding) {
    const std::string head = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n" +
                             (coding.empty() ? "" : "Content-Encoding: " + coding + "\r\n");
    const int fd =
        Connect(server->port(),
                head + "\r\nabcd" + "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_GE(fd, 0);
    std::string got = ReadAll(fd);
    close(fd);
    return got;
  };
  const std::string gzip = post("gzip");
  EXPECT_NE(gzip.find(" 415 "), std::string::npos) << gzip;
  EXPECT_NE(gzip.find("Content-Encoding 'gzip' is not supported"), std::string::npos) << gzip;
  EXPECT_NE(gzip.find("\r\n\r\nok"), std::string::npos) << "the next request was served";
  EXPECT_NE(post("identity").find("got abcd"), std::string::npos);
  EXPECT_NE(post("").find("got abcd"), std::string::npos);
  server->Stop();
}

}  // namespace
}  // namespace linfer
