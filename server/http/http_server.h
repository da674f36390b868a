// The HTTP listener (libevent's evhttp on one event-loop thread, handlers on a worker pool): exact
// routes, 404/405 for everything else, bounded headers and bodies, idle and write timeouts, and
// streaming responses (SSE) with per-stream buffer accounting. Every input gets an answer; no
// client can stall another.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace linfer {

struct HttpRequest {
  std::string method;                                     // "GET", "POST", ...
  std::string path;                                       // decoded path without the query
  std::string query;                                      // raw query string ("" when none)
  absl::flat_hash_map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string Header(absl::string_view name) const;  // "" when absent
  // A query parameter's value, the name and value percent-decoded as the path is (libevent's
  // evhttp_uridecode, '+' as a space); "" when absent.
  std::string Query(absl::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// An error response with an OpenAI-style JSON body: {"error": {"message", "type", "param",
// "code"}}. `type` defaults from the status (invalid_request_error, authentication_error, ...).
HttpResponse JsonError(int status, absl::string_view message, absl::string_view param = "",
                       absl::string_view type = "");

struct HttpServerImpl;
struct HttpExchangeState;  // internal: shared by an exchange, its stream and the event loop

// A response being streamed (chunked transfer encoding). Thread-safe; Send/End may be called from
// any thread (they are queued to the event loop). After the client has gone, Send returns false.
class HttpStream {
 public:
  bool Send(std::string chunk);
  void End();
  bool client_gone() const;
  // Bytes accepted by Send but not yet handed to the kernel (this stream's backlog).
  int64_t backlog_bytes() const;
  // Called once, on the event-loop thread, when the client disconnects (or is dropped for not
  // reading) before End. A client can leave before it is set: check client_gone() after setting
  // it (HttpExchange::OnClientGone before StartStream covers the stream's start too).
  void OnClientGone(std::function<void()> fn);

 private:
  friend class HttpExchange;
  explicit HttpStream(std::shared_ptr<HttpExchangeState> state) : state_(std::move(state)) {}
  std::shared_ptr<HttpExchangeState> state_;
};

// One request in flight, handed to a route's handler on a worker thread. Exactly one of Respond or
// StartStream must be called (from any thread, now or later); dropping the exchange without an
// answer sends 500.
class HttpExchange {
 public:
  ~HttpExchange();
  const HttpRequest& request() const { return request_; }
  void Respond(HttpResponse response);
  std::shared_ptr<HttpStream> StartStream(int status, std::string content_type,
                                          std::vector<std::pair<std::string, std::string>> headers);
  bool client_gone() const;
  // Called once (event-loop thread) if the client disconnects before the response is complete —
  // unless it had already gone when this was set: check client_gone() after.
  void OnClientGone(std::function<void()> fn);

 private:
  friend struct HttpServerImpl;
  HttpExchange(HttpRequest request, std::shared_ptr<HttpExchangeState> state)
      : request_(std::move(request)), state_(std::move(state)) {}
  HttpRequest request_;
  std::shared_ptr<HttpExchangeState> state_;
  bool answered_ = false;
};

struct HttpServerOptions {
  std::string address = "127.0.0.1";
  int port = 8000;                      // 0: any free port
  int workers = 4;                      // handler threads
  int64_t max_body_bytes = 32 << 20;    // JSON 413 beyond (HTML from libevent beyond 2x)
  int64_t max_header_bytes = 64 << 10;  // 431/400 beyond
  int idle_timeout_s = 30;              // reading a request / keep-alive idle
  // A request must arrive whole (headers and body) within this long of its first byte, however
  // steadily it trickles in (slowloris); the connection is shut down beyond.
  int request_timeout_s = 120;
  // Open connections beyond this close the one waiting longest for a request (idle keep-alive
  // first, then the unfinished request arriving slowest); when every one is being answered the
  // listener pauses. Raised against the process's
  // descriptor limit (RLIMIT_NOFILE) at start, or lowered to fit it, with a log line.
  int max_connections = 1024;
  int write_timeout_s = 30;  // a stream whose client reads nothing for this long is dropped
  // An answer (a stream too) whose client reads it slower than this, bytes/s, over
  // write_timeout_s with output waiting for it all the while, is dropped; 0: no minimum.
  int64_t min_send_rate = 1024;
  int64_t stream_backlog_limit = 8 << 20;  // a stream above this backlog is dropped at once
  size_t max_queued_requests = 1024;       // 503 when the worker queue is full
  // CORS, for pages in browsers (vLLM's --allowed-origins): the origins whose requests are
  // answered with Access-Control-Allow-Origin — "*" for any (the default, as vLLM and
  // llama-server), or exact origins such as "https://app.example.com"; empty: no CORS headers.
  // A preflight (OPTIONS with Access-Control-Request-Method) on a route is answered here with 204
  // and the route's methods and the requested headers, or 403 for an origin not allowed; it never
  // reaches a handler (browsers send no credentials with it).
  std::vector<std::string> allowed_origins = {"*"};
  // Every request's method, route (the matched route's path, "*" segments and all; "" when no
  // route matched) and status, once its answer is decided. Runs on the event-loop thread: keep
  // it cheap.
  std::function<void(const std::string& method, const std::string& route, int status)> on_answer;
  // The body of the server's own errors (413, 404, 405, and 503 when the workers are busy) for a
  // request's path; unset: JsonError's OpenAI shape.
  // (`type`: what JsonError would be given.)
  std::function<HttpResponse(const std::string& path, int status, absl::string_view message,
                             absl::string_view type)>
      error_response;
};

// Checks HttpServerOptions' numbers (workers, limits, timeouts ≥ 1) and allowed_origins; the
// error names the field.
absl::Status CheckHttpServerOptions(const HttpServerOptions& options);

// Checks HttpServerOptions::allowed_origins: each "*" or a serialized origin,
// scheme://host[:port] with no path ("https://app.example.com"). The error names the entry.
absl::Status CheckAllowedOrigins(const std::vector<std::string>& origins);

class HttpServer {
 public:
  using Handler = std::function<void(std::shared_ptr<HttpExchange>)>;

  // Binds and starts the event loop (Bind, then Serve). A busy port is FailedPrecondition
  // ("address already in use") naming address:port.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options);
  // Binds (port() is known; clients wait in the kernel's backlog) without answering anyone until
  // Serve, so that the routes are all there before the first request.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Bind(const HttpServerOptions& options);
  void Serve();   // starts the event loop (once; not after Stop)
  ~HttpServer();  // Stop()s

  // Routes match the exact path; a "*" segment of a route's path ("/v1/responses/*") matches
  // any one non-empty segment (exact routes win). A path with routes but not for the method gets
  // 405 with Allow; HEAD is answered by a GET route without the body. Register before Serve (the
  // routes are read on the loop's thread unlocked).
  void Route(const std::string& method, const std::string& path, Handler handler);
  int port() const;
  struct ConnectionStats {
    size_t open = 0;           // connections not yet closing
    int64_t timed_out = 0;     // shut down for HttpServerOptions::request_timeout_s
    int64_t evicted = 0;       // shut down to make room under max_connections
    int64_t overflowed = 0;    // closed with a full input buffer and nothing being answered
    int64_t slow_readers = 0;  // dropped for reading slower than min_send_rate
    bool paused = false;       // the listener is not accepting (every connection being answered)
  };
  ConnectionStats connection_stats() const;  // as the event loop sees them now
  // Gives the responses already handed over (a stream's last chunk) up to `flush` to reach their
  // clients' sockets, then closes the listener and every connection and waits for the loop
  // thread. Idempotent.
  void Stop(absl::Duration flush = absl::Seconds(2));

 private:
  explicit HttpServer(std::unique_ptr<HttpServerImpl> impl);
  std::unique_ptr<HttpServerImpl> impl_;
};

}  // namespace linfer
