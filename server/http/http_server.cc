// HttpServer over libevent's evhttp. The event loop thread owns every evhttp object: it parses
// requests, answers 404/405/503 itself, and hands routed requests to the worker pool. Handlers
// answer through HttpExchangeState, whose evhttp_request pointer is touched on the loop thread
// only and is cleared the moment the connection closes or the response completes.
#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/worker_pool.h"
#include "server/http/connection_guard.h"
#include "server/http/event_loop.h"

namespace linfer {

struct HttpExchangeState {
  std::shared_ptr<EventLoop> loop;
  HttpServerImpl* server = nullptr;  // valid while anything runs on the loop
  // Loop thread only.
  evhttp_request* req = nullptr;  // null once the connection is gone or the response is done
  evhttp_connection* conn = nullptr;
  bool head = false;
  bool streaming = false;
  std::string method, route;  // for HttpServerOptions::on_answer
  // CORS headers every answer to this request carries (none without an allowed Origin).
  std::vector<std::pair<std::string, std::string>> cors;
  int64_t last_output = 0, last_sent = 0;
  absl::Time last_drain;          // when the client last read anything of the stream
  std::function<void()> on_gone;  // set under `mu`, run on the loop thread
  // Any thread.
  absl::Mutex mu;
  std::atomic<bool> gone{false};
  std::atomic<int64_t> posted_bytes{0};  // accepted by Send, not yet in the evbuffer
  std::atomic<int64_t> output_bytes{0};  // in the connection's output evbuffer
};

namespace {

const char* MethodName(evhttp_cmd_type cmd) {
  switch (cmd) {
    case EVHTTP_REQ_GET:
      return "GET";
    case EVHTTP_REQ_POST:
      return "POST";
    case EVHTTP_REQ_HEAD:
      return "HEAD";
    case EVHTTP_REQ_PUT:
      return "PUT";
    case EVHTTP_REQ_DELETE:
      return "DELETE";
    case EVHTTP_REQ_OPTIONS:
      return "OPTIONS";
    case EVHTTP_REQ_TRACE:
      return "TRACE";
    case EVHTTP_REQ_CONNECT:
      return "CONNECT";
    case EVHTTP_REQ_PATCH:
      return "PATCH";
  }
  return "UNKNOWN";
}

// Fires the gone callback once (loop thread).
void MarkGone(HttpExchangeState& s) {
  if (s.gone.exchange(true)) return;
  std::function<void()> fn;
  {
    absl::MutexLock lock(&s.mu);
    fn = std::move(s.on_gone);
  }
  if (fn) fn();
}

using Headers = std::vector<std::pair<std::string, std::string>>;

// Framing that evhttp reads one way and a proxy in front of it may read another (request
// smuggling, RFC 9112 §6.3): more than one Content-Length (evhttp reads the first; the request's
// headers join repeats with ", "), one that is not decimal digits (evhttp's strtoll takes "+45"),
// or a Transfer-Encoding other than a single "chunked" (evhttp decodes no other coding, and reads
// only the first such header). The status to refuse it with and why; none when it is plain.
std::optional<std::pair<int, std::string>> AmbiguousFraming(const HttpRequest& r) {
  auto shown = [](absl::string_view v) { return absl::CHexEscape(v.substr(0, 64)); };
  if (auto it = r.headers.find("content-length"); it != r.headers.end()) {
    const std::string& v = it->second;
    if (absl::StrContains(v, ", ")) return {{400, "more than one Content-Length header"}};
    if (v.empty() || !absl::c_all_of(v, absl::ascii_isdigit)) {
      return {{400, absl::StrCat("Content-Length \"", shown(v), "\" is not a decimal number")}};
    }
  }
  if (auto it = r.headers.find("transfer-encoding");
      it != r.headers.end() && !absl::EqualsIgnoreCase(it->second, "chunked")) {
    return {{501, absl::StrCat("Transfer-Encoding \"", shown(it->second),
                               "\" is not supported: only one \"chunked\" is")}};
  }
  return std::nullopt;
}

void AddHeaders(evkeyvalq* out, const Headers& headers) {
  for (const auto& [k, v] : headers) evhttp_add_header(out, k.c_str(), v.c_str());
}

void Send(evhttp_request* req, const HttpResponse& r, bool head, const Headers& cors) {
  evkeyvalq* out = evhttp_request_get_output_headers(req);
  evhttp_add_header(out, "Content-Type", r.content_type.c_str());
  AddHeaders(out, r.headers);
  AddHeaders(out, cors);
  evbuffer* body = evbuffer_new();
  if (head) {
    evhttp_add_header(out, "Content-Length", std::to_string(r.body.size()).c_str());
  } else {
    evbuffer_add(body, r.body.data(), r.body.size());
  }
  evhttp_send_reply(req, r.status, nullptr, body);
  evbuffer_free(body);
}

absl::StatusOr<int> Listen(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string where = absl::StrCat(address, ":", port);
  if (getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 ||
      res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP: cannot resolve ", where));
  }
  const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // TIME_WAIT only; no REUSEPORT
  const int rc = fd < 0 ? -1 : bind(fd, res->ai_addr, res->ai_addrlen);
  const int err = errno;
  freeaddrinfo(res);
  if (rc != 0 || listen(fd, 1024) != 0) {
    if (fd >= 0) close(fd);
    if (err == EADDRINUSE) {
      return absl::FailedPreconditionError(
          absl::StrCat("HTTP port ", where, ": address already in use"));
    }
    return absl::UnavailableError(
        absl::StrCat("HTTP: cannot listen on ", where, ": ", std::strerror(err)));
  }
  return fd;
}

// Raises the soft descriptor limit (to the hard one); when that cannot cover max_connections and
// what the rest of the process needs (gRPC, the disk tier, model files), lowers the cap so that
// accept() never hits EMFILE (libevent's listener would spin on it), with a log line.
int FitDescriptorLimit(int max_connections) {
  constexpr uint64_t kReserve = 256;
  const uint64_t limit = RaiseDescriptorLimit();
  if (limit == 0 || limit >= static_cast<uint64_t>(max_connections) + kReserve) {
    return max_connections;
  }
  const int fit =
      static_cast<int>(std::max<uint64_t>(16, limit > 2 * kReserve ? limit - kReserve : limit / 2));
  Log(LogLevel::kWarning, absl::StrCat("HTTP: the descriptor limit (", limit, ") fits ", fit,
                                       " connections, not --http_max_connections ", max_connections,
                                       ": raise it (ulimit -n) for more"));
  return fit;
}

}  // namespace

struct HttpServerImpl {
  HttpServerOptions options;
  std::shared_ptr<EventLoop> loop;
  evhttp* http = nullptr;
  std::unique_ptr<WorkerPool> workers;
  std::unique_ptr<ConnectionGuard> guard;                                    // loop thread
  std::map<std::string, std::map<std::string, HttpServer::Handler>> routes;  // path → method
  std::map<evhttp_connection*, std::shared_ptr<HttpExchangeState>> active;   // loop thread
  std::set<evhttp_connection*> connections;  // loop thread: every open one that sent a request
  int port = 0;
  bool stopped = false;
  bool serving = false;             // the loop runs (Serve)
  bool any_origin_allowed = false;  // "*" among options.allowed_origins

  static void OnRequest(evhttp_request* req, void* arg);
  // The server's own error for `path`, shaped by options.error_response when set.
  HttpResponse Error(const std::string& path, int status, absl::string_view message,
                     absl::string_view type = "") const {
    if (options.error_response) return options.error_response(path, status, message, type);
    return JsonError(status, message, "", type);
  }
  void Answered(const std::string& method, const std::string& route, int status) {
    if (options.on_answer) options.on_answer(method, route, status);
  }
  // The exact route for `path`, else the first pattern whose "*" segments each match one
  // non-empty segment of it.
  std::map<std::string, std::map<std::string, HttpServer::Handler>>::iterator FindRoute(
      const std::string& path);
  static void OnClose(evhttp_connection* conn, void* arg);
  // A CONNECT's answer is written: its connection closes (ConnectionGuard::CloseAfterAnswer).
  static void OnLastAnswer(evhttp_request* req, void* arg);
  void Handle(evhttp_request* req);
  // Whether a request's Origin header (may be empty: no) is in options.allowed_origins.
  bool OriginAllowed(const std::string& origin) const;
  // Answers a CORS preflight for `route` (its `methods`); `cors`: the Allow-Origin headers.
  void Preflight(evhttp_request* req, const HttpRequest& r, const std::string& route,
                 const std::vector<std::string>& methods, bool origin_allowed,
                 const std::vector<std::pair<std::string, std::string>>& cors);
  void Tick();
  void Drop(evhttp_connection* conn);
  void Forget(evhttp_connection* conn);  // drop our records of a closing connection (loop thread)
  int64_t Unsent() const;  // bytes in the open connections' output buffers (loop thread)
  // The response is complete (loop thread): forgets the exchange and returns its request, to be
  // handed to evhttp after this (evhttp may free the request and the connection in that call).
  evhttp_request* Finish(HttpExchangeState& s) {
    auto it = active.find(s.conn);
    if (it != active.end() && it->second.get() == &s) active.erase(it);
    guard->Answered(evhttp_connection_get_bufferevent(s.conn));
    s.gone = true;  // complete: a later close is not "gone early"
    return std::exchange(s.req, nullptr);
  }
};

std::string HttpRequest::Header(absl::string_view name) const {
  auto it = headers.find(absl::AsciiStrToLower(name));
  return it == headers.end() ? std::string() : it->second;
}

std::string HttpRequest::Query(absl::string_view name) const {
  const auto decode = [](absl::string_view s) {
    size_t n = 0;
    char* d = evhttp_uridecode(std::string(s).c_str(), /*decode_plus=*/1, &n);
    std::string out = d != nullptr ? std::string(d, n) : std::string(s);
    free(d);
    return out;
  };
  for (absl::string_view part : absl::StrSplit(query, '&')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (decode(kv.first) == name) return decode(kv.second);
  }
  return "";
}

void HttpServerImpl::OnRequest(evhttp_request* req, void* arg) {
  static_cast<HttpServerImpl*>(arg)->Handle(req);
}

void HttpServerImpl::OnLastAnswer(evhttp_request* req, void* arg) {
  if (evhttp_connection* conn = evhttp_request_get_connection(req)) {
    static_cast<HttpServerImpl*>(arg)->guard->CloseAfterAnswer(
        evhttp_connection_get_bufferevent(conn));
  }
}

void HttpServerImpl::OnClose(evhttp_connection* conn, void* arg) {
  static_cast<HttpServerImpl*>(arg)->Forget(conn);
}

void HttpServerImpl::Forget(evhttp_connection* conn) {
  connections.erase(conn);
  auto it = active.find(conn);
  if (it == active.end()) return;
  std::shared_ptr<HttpExchangeState> s = std::move(it->second);
  active.erase(it);
  // A client that left before the response was complete: libevent has detached the unfinished
  // request from the connection and leaves freeing it to its owner (it would free it in the
  // reply call we no longer make). A request still attached is freed with the connection.
  if (s->req != nullptr && evhttp_request_get_connection(s->req) == nullptr) {
    evhttp_request_free(s->req);
  }
  s->req = nullptr;
  MarkGone(*s);
}

void HttpServerImpl::Drop(evhttp_connection* conn) {
  // evhttp_connection_free runs the close callback only while the connection still has a socket
  // (one libevent has already reset has none): forget it here in every case, then free it.
  evhttp_connection_set_closecb(conn, nullptr, nullptr);
  Forget(conn);
  evhttp_connection_free(conn);
}

int64_t HttpServerImpl::Unsent() const {
  int64_t n = 0;
  for (evhttp_connection* conn : connections) {
    n += static_cast<int64_t>(
        evbuffer_get_length(bufferevent_get_output(evhttp_connection_get_bufferevent(conn))));
  }
  return n;
}

void HttpServerImpl::Handle(evhttp_request* req) {
  evhttp_connection* conn = evhttp_request_get_connection(req);
  if (connections.insert(conn).second) {
    evhttp_connection_set_closecb(conn, &HttpServerImpl::OnClose, this);
  }
  guard->RequestArrived(evhttp_connection_get_bufferevent(conn));
  HttpRequest r;
  r.method = MethodName(evhttp_request_get_command(req));
  // An origin-form target ("/path?query", what clients send) is split here: evhttp's URI parser
  // reads one beginning "//" as an authority ("//v1/models" was routed as "/models", "///health"
  // served). Others (the absolute form) go through its parse. The path is matched as sent.
  const char* target = evhttp_request_get_uri(req);
  std::string raw_path;
  if (target != nullptr && target[0] == '/') {
    const absl::string_view t(target);
    const size_t q = t.find_first_of("?#");
    raw_path = std::string(t.substr(0, q));
    if (q != absl::string_view::npos && t[q] == '?') {
      const size_t end = t.find('#', q);
      r.query = std::string(t.substr(q + 1, end == absl::string_view::npos ? end : end - q - 1));
    }
  } else if (const evhttp_uri* uri = evhttp_request_get_evhttp_uri(req); uri != nullptr) {
    if (const char* path = evhttp_uri_get_path(uri); path != nullptr) raw_path = path;
    if (const char* query = evhttp_uri_get_query(uri); query != nullptr) r.query = query;
  }
  size_t n = 0;
  char* decoded = evhttp_uridecode(raw_path.c_str(), 0, &n);
  if (decoded != nullptr) r.path.assign(decoded, n);
  free(decoded);
  const bool head = r.method == "HEAD";
  for (evkeyval* h = evhttp_request_get_input_headers(req)->tqh_first; h != nullptr;
       h = h->next.tqe_next) {
    std::string& v = r.headers[absl::AsciiStrToLower(h->key)];
    v = v.empty() ? std::string(h->value) : absl::StrCat(v, ", ", h->value);
  }
  const std::string origin = r.Header("origin");
  const bool origin_allowed = OriginAllowed(origin);
  Headers cors;
  const bool any_origin = any_origin_allowed;
  if (origin_allowed) {
    cors.push_back({"Access-Control-Allow-Origin", any_origin ? std::string("*") : origin});
  }
  // The answer depends on the Origin whenever the list names origins (shared caches keep apart).
  if (!any_origin && !options.allowed_origins.empty() && !origin.empty()) {
    cors.push_back({"Vary", "Origin"});
  }
  // Refused with the connection closed behind the answer: what follows the request in its bytes
  // cannot be told apart from its body. CONNECT too: no route serves it.
  std::optional<std::pair<int, std::string>> refused = AmbiguousFraming(r);
  if (!refused && r.method == "CONNECT") {
    refused = {405, "CONNECT is not supported: this server is not a proxy"};
  }
  if (refused) {
    Answered(r.method, "", refused->first);
    HttpResponse e = Error(r.path, refused->first, refused->second, "invalid_request_error");
    e.headers.push_back({"Connection", "close"});
    if (r.method == "CONNECT") {
      // evhttp sends a CONNECT's answer without a length and keeps its connection open (a
      // tunnel's): the length here, the close when it is written.
      e.headers.push_back({"Content-Length", std::to_string(e.body.size())});
      evhttp_request_set_on_complete_cb(req, &HttpServerImpl::OnLastAnswer, this);
    }
    Send(req, e, head, cors);
    return;
  }
  // libevent reads bodies up to twice the limit (see Start) so that one over the limit gets this
  // JSON 413 rather than libevent's own HTML page.
  evbuffer* in = evhttp_request_get_input_buffer(req);
  if (static_cast<int64_t>(evbuffer_get_length(in)) > options.max_body_bytes) {
    Answered(r.method, "", 413);
    Send(req,
         Error(r.path, 413,
               absl::StrCat("the request body is ", evbuffer_get_length(in),
                            " bytes; the limit is ", options.max_body_bytes, " bytes"),
               "invalid_request_error"),
         head, cors);
    return;
  }
  auto by_path = FindRoute(r.path);
  if (by_path == routes.end()) {
    Answered(r.method, "", 404);
    Send(req,
         Error(r.path, 404, absl::StrCat("no route for ", r.method, " ", r.path.substr(0, 200)),
               "not_found_error"),
         head, cors);
    return;
  }
  std::vector<std::string> allowed;
  for (const auto& [m, h] : by_path->second) allowed.push_back(m);
  if (r.method == "OPTIONS" && !r.Header("access-control-request-method").empty()) {
    Preflight(req, r, by_path->first, allowed, origin_allowed, cors);
    return;
  }
  auto route = by_path->second.find(head ? std::string("GET") : r.method);
  if (route == by_path->second.end()) {
    HttpResponse e = Error(r.path, 405,
                           absl::StrCat("method ", r.method, " is not allowed on ", r.path,
                                        " (allowed: ", absl::StrJoin(allowed, ", "), ")"));
    e.headers.push_back({"Allow", absl::StrJoin(allowed, ", ")});
    Answered(r.method, by_path->first, 405);
    Send(req, e, head, cors);
    return;
  }
  // A compressed body would reach the handlers as bytes that are not JSON: said as such (as
  // RFC 9110 §15.5.16 asks, with the codings taken).
  if (const std::string coding = r.Header("content-encoding");
      evbuffer_get_length(in) > 0 && !coding.empty() &&
      !absl::EqualsIgnoreCase(coding, "identity")) {
    HttpResponse e = Error(r.path, 415,
                           absl::StrCat("Content-Encoding '", coding.substr(0, 100),
                                        "' is not supported: send the request body uncompressed"),
                           "invalid_request_error");
    e.headers.push_back({"Accept-Encoding", "identity"});
    Answered(r.method, by_path->first, 415);
    Send(req, e, head, cors);
    return;
  }
  r.body.resize(evbuffer_get_length(in));
  evbuffer_copyout(in, r.body.data(), r.body.size());

  auto state = std::make_shared<HttpExchangeState>();
  state->loop = loop;
  state->server = this;
  state->req = req;
  state->conn = conn;
  state->head = head;
  state->method = r.method;
  state->route = by_path->first;
  state->cors = std::move(cors);
  active[state->conn] = state;
  guard->Answering(evhttp_connection_get_bufferevent(conn));
  std::shared_ptr<HttpExchange> exchange(new HttpExchange(std::move(r), state));
  HttpServer::Handler& handler = route->second;
  if (!workers->Post([exchange, &handler] { handler(exchange); })) {
    exchange->Respond(Error(exchange->request().path, 503, "the server is overloaded; retry later",
                            "server_error"));
  }
}

bool HttpServerImpl::OriginAllowed(const std::string& origin) const {
  if (origin.empty()) return false;
  if (any_origin_allowed) return true;
  for (const std::string& o : options.allowed_origins) {
    if (absl::EqualsIgnoreCase(o, origin)) return true;
  }
  return false;
}

void HttpServerImpl::Preflight(evhttp_request* req, const HttpRequest& r, const std::string& route,
                               const std::vector<std::string>& methods, bool origin_allowed,
                               const Headers& cors) {
  if (!origin_allowed) {
    const std::string origin = r.Header("origin");
    Answered(r.method, route, 403);
    Send(req,
         Error(r.path, 403,
               origin.empty() ? std::string("a CORS preflight without an Origin header")
                              : absl::StrCat("CORS: origin '", origin.substr(0, 200),
                                             "' is not allowed (the server's --allowed_origins)"),
               "permission_error"),
         false, {});
    return;
  }
  HttpResponse ok;
  ok.status = 204;
  ok.content_type = "text/plain";
  ok.headers = cors;
  std::vector<std::string> with_options = methods;
  with_options.push_back("OPTIONS");
  ok.headers.push_back({"Access-Control-Allow-Methods", absl::StrJoin(with_options, ", ")});
  // The headers the page asked for (Authorization, Content-Type, the SDKs' X-Stainless-*): a "*"
  // would not cover Authorization.
  const std::string asked = r.Header("access-control-request-headers");
  if (!asked.empty()) ok.headers.push_back({"Access-Control-Allow-Headers", asked});
  ok.headers.push_back({"Access-Control-Max-Age", "600"});
  Answered(r.method, route, 204);
  Send(req, ok, false, {});
}

void HttpServerImpl::Tick() {
  const absl::Time now = absl::Now();
  std::vector<evhttp_connection*> drop;
  for (auto& [conn, s] : active) {
    bufferevent* bev = evhttp_connection_get_bufferevent(conn);
    const int fd = bufferevent_getfd(bev);
    char c;
    const ssize_t n = fd >= 0 ? recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) : 0;
    const bool reset = n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    if (n == 0 || reset) {  // the client shut down or reset the connection (or no socket)
      drop.push_back(conn);
      continue;
    }
    if (!s->streaming) continue;
    const int64_t out = static_cast<int64_t>(evbuffer_get_length(bufferevent_get_output(bev)));
    s->output_bytes = out;
    // Any bytes the socket took count (a stream produced faster than a slow link reads has a
    // growing backlog, yet its client reads); a slow reader is the send rate's business.
    const int64_t sent = guard->Sent(bev);
    if (out == 0 || out < s->last_output || sent > s->last_sent) s->last_drain = now;
    s->last_output = out;
    s->last_sent = sent;
    if (out + s->posted_bytes > options.stream_backlog_limit ||
        now - s->last_drain > absl::Seconds(options.write_timeout_s)) {
      Log(LogLevel::kWarning, absl::StrCat("HTTP: dropping a stream whose client is not reading (",
                                           out, " bytes unsent)"));
      guard->CountDroppedReader();
      drop.push_back(conn);
    }
  }
  for (evhttp_connection* conn : drop) Drop(conn);
  guard->Tick(now);
}

// ---- HttpExchange / HttpStream (any thread; libevent calls are posted to the loop) ----

HttpExchange::~HttpExchange() {
  if (!answered_) Respond(JsonError(500, "the handler did not answer", "", "server_error"));
}

bool HttpExchange::client_gone() const { return state_->gone; }

void HttpExchange::OnClientGone(std::function<void()> fn) {
  absl::MutexLock lock(&state_->mu);
  state_->on_gone = std::move(fn);
}

void HttpExchange::Respond(HttpResponse response) {
  if (answered_) return;
  answered_ = true;
  std::shared_ptr<HttpExchangeState> s = state_;
  s->loop->Post([s, r = std::move(response)] {
    if (s->req == nullptr) return;
    s->server->Answered(s->method, s->route, r.status);
    Send(s->server->Finish(*s), r, s->head, s->cors);
  });
}

std::shared_ptr<HttpStream> HttpExchange::StartStream(
    int status, std::string content_type,
    std::vector<std::pair<std::string, std::string>> headers) {
  answered_ = true;
  std::shared_ptr<HttpExchangeState> s = state_;
  s->loop->Post([s, status, ct = std::move(content_type), h = std::move(headers)] {
    if (s->req == nullptr) return;
    evkeyvalq* out = evhttp_request_get_output_headers(s->req);
    evhttp_add_header(out, "Content-Type", ct.c_str());
    AddHeaders(out, h);
    AddHeaders(out, s->cors);
    s->streaming = true;
    s->last_drain = absl::Now();
    s->server->Answered(s->method, s->route, status);
    evhttp_send_reply_start(s->req, status, nullptr);
  });
  return std::shared_ptr<HttpStream>(new HttpStream(s));
}

bool HttpStream::Send(std::string chunk) {
  if (state_->gone) return false;
  std::shared_ptr<HttpExchangeState> s = state_;
  const int64_t n = static_cast<int64_t>(chunk.size());
  s->posted_bytes += n;
  return s->loop->Post([s, c = std::move(chunk), n] {
    s->posted_bytes -= n;
    if (s->req == nullptr || s->head) return;
    evbuffer* b = evbuffer_new();
    evbuffer_add(b, c.data(), c.size());
    evhttp_send_reply_chunk(s->req, b);
    evbuffer_free(b);
  });
}

void HttpStream::End() {
  std::shared_ptr<HttpExchangeState> s = state_;
  s->loop->Post([s] {
    if (s->req == nullptr) return;
    // With nothing left to write (HTTP/1.0 or HEAD: not chunked) evhttp frees the request and
    // the connection inside evhttp_send_reply_end.
    evhttp_send_reply_end(s->server->Finish(*s));
  });
}

bool HttpStream::client_gone() const { return state_->gone; }

int64_t HttpStream::backlog_bytes() const { return state_->posted_bytes + state_->output_bytes; }

void HttpStream::OnClientGone(std::function<void()> fn) {
  absl::MutexLock lock(&state_->mu);
  state_->on_gone = std::move(fn);
}

// ---- HttpServer ----

HttpServer::HttpServer(std::unique_ptr<HttpServerImpl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options) {
  absl::StatusOr<std::unique_ptr<HttpServer>> server = Bind(options);
  if (server.ok()) (*server)->Serve();
  return server;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Bind(const HttpServerOptions& options) {
  if (absl::Status st = CheckHttpServerOptions(options); !st.ok()) return st;
  // libevent writes with writev: a client gone (or a socket shut down here) must give EPIPE,
  // not a SIGPIPE that ends the process.
  signal(SIGPIPE, SIG_IGN);
  auto impl = std::make_unique<HttpServerImpl>();
  impl->options = options;
  impl->options.max_connections = FitDescriptorLimit(options.max_connections);
  impl->any_origin_allowed =
      std::find(options.allowed_origins.begin(), options.allowed_origins.end(), "*") !=
      options.allowed_origins.end();
  absl::StatusOr<std::shared_ptr<EventLoop>> loop = EventLoop::Create();
  if (!loop.ok()) return loop.status();
  impl->loop = *std::move(loop);
  absl::StatusOr<int> fd = Listen(options.address, options.port);
  if (!fd.ok()) return fd.status();
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &len);
  impl->port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  impl->http = evhttp_new(impl->loop->base());
  evhttp_bound_socket* bound =
      impl->http == nullptr ? nullptr : evhttp_accept_socket_with_handle(impl->http, *fd);
  if (bound == nullptr) {
    close(*fd);
    return absl::InternalError("libevent: cannot create the HTTP server");
  }
  // Bodies above max_body_bytes are refused in Handle (JSON 413). libevent's own cap, which
  // answers with an HTML page and cannot be hooked in libevent 2.1, sits above it: a
  // Content-Length beyond twice the limit is refused by libevent before the body is read.
  const int64_t body_cap =
      std::max<int64_t>(2 * options.max_body_bytes, options.max_body_bytes + (1 << 20));
  // evhttp keeps a body with a Content-Length in the connection's input buffer until it is
  // whole, so that buffer's bound (the guard's input limit) is the body cap plus the headers.
  impl->guard = std::make_unique<ConnectionGuard>(
      ConnectionGuardOptions{
          .max_connections = static_cast<size_t>(impl->options.max_connections),
          .request_timeout = absl::Seconds(options.request_timeout_s),
          .input_limit = static_cast<size_t>(body_cap + 2 * options.max_header_bytes + (64 << 10)),
          .head_limit = static_cast<size_t>(4 * options.max_header_bytes + (64 << 10)),
          .lost_input_limit = static_cast<size_t>(
              std::max<int64_t>(1 << 20, 4 * options.max_header_bytes + (64 << 10))),
          .min_send_rate = options.min_send_rate,
          .send_window = absl::Seconds(options.write_timeout_s)},
      evhttp_bound_socket_get_listener(bound),
      [raw = impl.get()](evhttp_connection* conn) { raw->Drop(conn); });
  evhttp_set_bevcb(impl->http, &ConnectionGuard::NewBufferevent, impl->guard.get());
  evhttp_set_max_headers_size(impl->http, options.max_header_bytes);
  evhttp_set_max_body_size(impl->http, body_cap);
  evhttp_set_timeout(impl->http, options.idle_timeout_s);
  evhttp_set_allowed_methods(impl->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                             EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                             EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                             EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
  evhttp_set_gencb(impl->http, &HttpServerImpl::OnRequest, impl.get());
  impl->workers =
      std::make_unique<WorkerPool>(options.workers, options.max_queued_requests, "linfer-httpwork");
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::Serve() {
  if (impl_->serving || impl_->stopped) return;
  impl_->serving = true;
  HttpServerImpl* raw = impl_.get();
  impl_->loop->Run(absl::Milliseconds(250), [raw] { raw->Tick(); });
}

HttpServer::~HttpServer() { Stop(); }

absl::Status CheckHttpServerOptions(const HttpServerOptions& options) {
  const std::pair<const char*, int64_t> at_least_one[] = {
      {"workers", options.workers},
      {"max_body_bytes", options.max_body_bytes},
      {"max_header_bytes", options.max_header_bytes},
      {"idle_timeout_s", options.idle_timeout_s},
      {"write_timeout_s", options.write_timeout_s},
      {"request_timeout_s", options.request_timeout_s},
      {"max_connections", options.max_connections},
      {"stream_backlog_limit", options.stream_backlog_limit},
      {"max_queued_requests", static_cast<int64_t>(options.max_queued_requests)}};
  for (const auto& [name, value] : at_least_one) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("HTTP: ", name, " is ", value, "; it must be at least 1"));
    }
  }
  // Past a TiB/s no client keeps up: every answer would be dropped.
  constexpr int64_t kMaxSendRate = int64_t{1} << 40;
  if (options.min_send_rate < 0 || options.min_send_rate > kMaxSendRate) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP: min_send_rate is ", options.min_send_rate,
                                                   "; it must be 0 (none) to ", kMaxSendRate));
  }
  return CheckAllowedOrigins(options.allowed_origins);
}

absl::Status CheckAllowedOrigins(const std::vector<std::string>& origins) {
  for (const std::string& o : origins) {
    if (o == "*") continue;
    const size_t sep = o.find("://");
    const bool scheme_ok = sep != std::string::npos && sep > 0 &&
                           std::all_of(o.begin(), o.begin() + static_cast<ptrdiff_t>(sep),
                                       [](char c) { return absl::ascii_isalpha(c); });
    const std::string host = sep == std::string::npos ? "" : o.substr(sep + 3);
    const bool host_ok = !host.empty() && std::none_of(host.begin(), host.end(), [](char c) {
      return c == '/' || c == '?' || c == '#' || absl::ascii_isspace(c) || absl::ascii_iscntrl(c);
    });
    if (!scheme_ok || !host_ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "allowed origin '", o, "' is not \"*\" or scheme://host[:port] with no path"));
    }
  }
  return absl::OkStatus();
}

std::map<std::string, std::map<std::string, HttpServer::Handler>>::iterator
HttpServerImpl::FindRoute(const std::string& path) {
  auto exact = routes.find(path);
  if (exact != routes.end()) return exact;
  const std::vector<absl::string_view> segments = absl::StrSplit(path, '/');
  for (auto it = routes.begin(); it != routes.end(); ++it) {
    if (it->first.find('*') == std::string::npos) continue;
    const std::vector<absl::string_view> pattern = absl::StrSplit(it->first, '/');
    if (pattern.size() != segments.size()) continue;
    bool match = true;
    for (size_t i = 0; i < pattern.size() && match; ++i) {
      match = pattern[i] == "*" ? !segments[i].empty() : pattern[i] == segments[i];
    }
    if (match) return it;
  }
  return routes.end();
}

void HttpServer::Route(const std::string& method, const std::string& path, Handler handler) {
  impl_->routes[path][method] = std::move(handler);
}

int HttpServer::port() const { return impl_->port; }

HttpServer::ConnectionStats HttpServer::connection_stats() const {
  if (!impl_->serving) return {};  // no loop to ask (bound, never served)
  auto stats = std::make_shared<ConnectionStats>();
  auto done = std::make_shared<absl::Notification>();
  HttpServerImpl* impl = impl_.get();
  if (!impl->loop->Post([impl, stats, done] {
        *stats = {.open = impl->guard->open(),
                  .timed_out = impl->guard->timed_out(),
                  .evicted = impl->guard->evicted(),
                  .overflowed = impl->guard->overflowed(),
                  .slow_readers = impl->guard->slow_readers(),
                  .paused = impl->guard->paused()};
        done->Notify();
      })) {
    return {};
  }
  done->WaitForNotification();
  return *stats;
}

void HttpServer::Stop(absl::Duration flush) {
  if (impl_->stopped) return;
  impl_->stopped = true;
  // Responses handed over before Stop are queued on the loop (posted) or in output buffers:
  // let the loop write them out, or the clients lose a stream's end ("data: [DONE]").
  const absl::Time deadline = absl::Now() + flush;
  HttpServerImpl* impl = impl_.get();
  while (impl->serving) {  // (a server bound but never served has nothing to flush)
    auto unsent = std::make_shared<std::atomic<int64_t>>(-1);
    if (!impl->loop->Post([impl, unsent] { *unsent = impl->Unsent(); })) break;
    while (*unsent < 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
    if (*unsent <= 0 || absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  impl_->loop->Stop();
  // The loop thread has exited: free every connection here (their close callbacks mark the
  // exchanges gone), then let queued handlers run against a closed server.
  evhttp_free(impl_->http);
  impl_->http = nullptr;
  impl_->guard.reset();  // after evhttp_free: the connections' bufferevents are its last holders
  impl_->active.clear();
  impl_->workers.reset();
}

}  // namespace linfer
