// Helpers for the HTTP listener's tests (http_server_test, http_connections_test): raw loopback
// clients, and a server with GET /ok.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/http/http_server.h"

namespace linfer::http_testing {

// Connects to 127.0.0.1:port and sends `request`; -1 on failure. `rcvbuf` > 0: that receive
// buffer (a small advertised window).
inline int Connect(int port, const std::string& request, int rcvbuf = 0) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd >= 0 && rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

// Everything the peer sends until it closes (or 10 s pass).
inline std::string ReadAll(int fd) {
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}
// Connects to 127.0.0.1:port without sending anything; -1 on failure.
inline int ConnectIdle(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

// Whether the server has closed `fd` (EOF or reset) within `wait`; what it sent is discarded.
inline bool ClosedWithin(int fd, absl::Duration wait) {
  const absl::Time end = absl::Now() + wait;
  char buf[4096];
  while (absl::Now() < end) {
    timeval tv{0, 50'000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return true;
    }
  }
  return false;
}

// Waits until the server's view of its connections satisfies `ok` (or 5 s pass).
template <typename Pred>
HttpServer::ConnectionStats StatsOnce(HttpServer& server, Pred ok) {
  const absl::Time end = absl::Now() + absl::Seconds(5);
  HttpServer::ConnectionStats st = server.connection_stats();
  while (!ok(st) && absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(10));
    st = server.connection_stats();
  }
  return st;
}

inline void AnswerOk(std::shared_ptr<HttpExchange> x) {
  HttpResponse r;
  r.body = "ok";
  x->Respond(std::move(r));
}

// Starts a server on any free port with `options`, GET /ok answered "ok"; null (and a test
// failure) when it cannot start.
inline std::unique_ptr<HttpServer> StartWithOk(HttpServerOptions options) {
  options.port = 0;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options);
  if (!server.ok()) {
    ADD_FAILURE() << server.status();
    return nullptr;
  }
  (*server)->Route("GET", "/ok", AnswerOk);
  return *std::move(server);
}

// Whether GET `path` on a fresh connection (Connection: close) is answered 200.
inline bool Served(int port, const std::string& path) {
  const int fd = Connect(port, "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  if (fd < 0) return false;
  const bool ok = ReadAll(fd).find("200 OK") != std::string::npos;
  close(fd);
  return ok;
}

}  // namespace linfer::http_testing
