// OpenAiClient: an event_base on one thread owns every evhttp connection; Start() posts the
// request to it. Each stream is parsed as it arrives (evhttp's chunk callback), so a token's
// arrival time is the time its SSE event was read.
#include "tests/bench/loadgen/openai_client.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/thread.h>

#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/file_util.h"

namespace linfer::bench {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

const char* RequestErrorName(evhttp_request_error e) {
  switch (e) {
    case EVREQ_HTTP_TIMEOUT:
      return "timeout";
    case EVREQ_HTTP_EOF:
      return "connection closed";
    case EVREQ_HTTP_INVALID_HEADER:
      return "invalid header";
    case EVREQ_HTTP_BUFFER_ERROR:
      return "connection failed";
    case EVREQ_HTTP_REQUEST_CANCEL:
      return "cancelled";
    case EVREQ_HTTP_DATA_TOO_LONG:
      return "body too long";
  }
  return "unknown error";
}

// The "error.message" of an OpenAI error body, else the body's start.
std::string ErrorMessage(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    return j["error"]["message"].get<std::string>();
  }
  return body.substr(0, 200);
}

}  // namespace

void SseReader::Feed(absl::string_view bytes, const std::function<void(absl::string_view)>& fn) {
  pending_.append(bytes.data(), bytes.size());
  size_t begin = 0;
  for (;;) {
    const size_t end = pending_.find("\n\n", begin);
    if (end == std::string::npos) break;
    std::string data;
    bool has_data = false;
    size_t line = begin;
    while (line < end) {
      size_t eol = pending_.find('\n', line);
      if (eol == std::string::npos || eol > end) eol = end;
      absl::string_view l(pending_.data() + line, eol - line);
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      if (absl::ConsumePrefix(&l, "data:")) {
        absl::ConsumePrefix(&l, " ");
        if (has_data) data.push_back('\n');
        data.append(l.data(), l.size());
        has_data = true;
      }
      line = eol + 1;
    }
    if (has_data) fn(data);
    begin = end + 2;
  }
  pending_.erase(0, begin);
}

nlohmann::json CompletionBody(const v1::GenerateRequest& request, const std::string& model) {
  nlohmann::json j = {{"prompt", std::vector<int32_t>(request.token_ids().ids().begin(),
                                                      request.token_ids().ids().end())},
                      {"max_tokens", request.stop().max_tokens()},
                      {"ignore_eos", request.stop().ignore_eos()},
                      {"temperature", request.sampling().temperature()},
                      {"stream", true},
                      {"stream_options", {{"include_usage", true}}}};
  if (!model.empty()) j["model"] = model;
  if (request.sampling().temperature() > 0) j["seed"] = request.sampling().seed();
  if (!request.session_id().empty()) j["session_id"] = request.session_id();
  return j;
}

CompletionEvent ParseCompletionEvent(absl::string_view data) {
  CompletionEvent e;
  if (data == "[DONE]") {
    e.done = true;
    return e;
  }
  const nlohmann::json j = nlohmann::json::parse(data.begin(), data.end(), nullptr, false);
  if (!j.is_object()) {
    e.error = absl::StrCat("an SSE event is not a JSON object: ", data.substr(0, 100));
    return e;
  }
  if (j.contains("error")) {
    e.error = ErrorMessage(std::string(data));
    return e;
  }
  auto choices = j.find("choices");
  if (choices != j.end() && choices->is_array() && !choices->empty()) {
    const nlohmann::json& c = (*choices)[0];
    // Every chunk with a choice is a token's, the last one with the finish on it (vLLM's framing,
    // and linfer's: an EOS or stop token's text is empty), as `vllm bench` counts them.
    e.token = true;
    e.finished = c.contains("finish_reason") && !c["finish_reason"].is_null();
  }
  auto usage = j.find("usage");
  if (usage != j.end() && usage->is_object()) {
    e.has_usage = true;
    e.prompt_tokens = usage->value("prompt_tokens", int64_t{0});
    e.completion_tokens = usage->value("completion_tokens", int64_t{0});
    auto details = usage->find("prompt_tokens_details");
    if (details != usage->end() && details->is_object()) {
      e.cached_tokens = details->value("cached_tokens", int64_t{0});
    }
  }
  return e;
}

// ---- the event loop and its calls (everything below runs on the loop thread unless noted) ----

struct Call {
  OpenAiClient::Impl* impl = nullptr;
  std::string method = "POST", path, body;
  RequestResult* out = nullptr;  // null: a plain request (Fetch), reply in status/raw
  std::function<void()> done;
  Clock::time_point t0, deadline, start, last;
  evhttp_request* req = nullptr;  // until libevent is done with it
  SseReader sse;
  int status = 0;
  std::string raw, error;
  bool stream_done = false, finished = false, has_usage = false, timed_out = false;
  evhttp_request_error failure = EVREQ_HTTP_EOF;
  bool failed = false;
};

struct OpenAiClient::Impl {
  std::string host, api_key;
  int port = 0;
  event_base* base = nullptr;
  event* wake = nullptr;
  event* tick = nullptr;
  std::thread thread;
  absl::Mutex mu;
  std::vector<Call*> posted ABSL_GUARDED_BY(mu);
  absl::flat_hash_set<Call*> active;  // loop thread

  void Post(Call* c) {  // any thread
    {
      absl::MutexLock lock(&mu);
      posted.push_back(c);
    }
    event_active(wake, EV_READ, 0);
  }
  void Launch(Call* c);
  void Consume(Call* c, evhttp_request* req);
  void Finish(Call* c);
  void Fetch(const std::string& path, Call* c);  // blocking, any thread but the loop's

  static void OnWake(evutil_socket_t, short, void* arg) {
    Impl* self = static_cast<Impl*>(arg);
    std::vector<Call*> batch;
    {
      absl::MutexLock lock(&self->mu);
      batch.swap(self->posted);
    }
    for (Call* c : batch) self->Launch(c);
  }
  static void OnTick(evutil_socket_t, short, void* arg) {  // cancels calls past their deadline
    Impl* self = static_cast<Impl*>(arg);
    const Clock::time_point now = Clock::now();
    std::vector<Call*> late;
    for (Call* c : self->active) {
      if (c->req != nullptr && now >= c->deadline) late.push_back(c);
    }
    for (Call* c : late) {
      c->timed_out = true;
      // libevent 2.1 runs OnError and frees the request, but never OnDone, for a cancel: the call
      // ends here (it used to stay active, its freed request cancelled again at the next tick).
      evhttp_cancel_request(c->req);
      c->req = nullptr;
      self->Finish(c);
    }
  }
  static void OnChunk(evhttp_request* req, void* arg) {
    Call* c = static_cast<Call*>(arg);
    c->impl->Consume(c, req);
  }
  static void OnError(evhttp_request_error e, void* arg) {
    Call* c = static_cast<Call*>(arg);
    c->failed = true;
    c->failure = e;
  }
  static void OnDone(evhttp_request* req, void* arg) {
    Call* c = static_cast<Call*>(arg);
    if (req != nullptr) c->impl->Consume(c, req);
    c->req = nullptr;
    c->impl->Finish(c);
  }
};

void OpenAiClient::Impl::Launch(Call* c) {
  evhttp_connection* conn = evhttp_connection_base_new(base, nullptr, host.c_str(), port);
  if (conn == nullptr) {
    c->failed = true;
    c->failure = EVREQ_HTTP_BUFFER_ERROR;
    Finish(c);
    return;
  }
  evhttp_connection_set_timeout(conn, 3600);  // the deadline tick cancels, not libevent
  evhttp_request* req = evhttp_request_new(&Impl::OnDone, c);
  evhttp_request_set_chunked_cb(req, &Impl::OnChunk);
  evhttp_request_set_error_cb(req, &Impl::OnError);
  evkeyvalq* h = evhttp_request_get_output_headers(req);
  evhttp_add_header(h, "Host", host.c_str());
  if (!api_key.empty()) evhttp_add_header(h, "Authorization", ("Bearer " + api_key).c_str());
  if (!c->body.empty()) {
    evhttp_add_header(h, "Content-Type", "application/json");
    evbuffer_add(evhttp_request_get_output_buffer(req), c->body.data(), c->body.size());
  }
  if (c->out != nullptr) evhttp_add_header(h, "Accept", "text/event-stream");
  c->req = req;
  c->start = Clock::now();
  if (c->out != nullptr) c->out->start_s = Seconds(c->start - c->t0);
  active.insert(c);
  const evhttp_cmd_type cmd = c->method == "GET" ? EVHTTP_REQ_GET : EVHTTP_REQ_POST;
  if (evhttp_make_request(conn, req, cmd, c->path.c_str()) != 0) {
    // libevent has freed the request.
    c->req = nullptr;
    c->failed = true;
    c->failure = EVREQ_HTTP_BUFFER_ERROR;
    evhttp_connection_free(conn);
    Finish(c);
    return;
  }
  evhttp_connection_free_on_completion(conn);
}

void OpenAiClient::Impl::Consume(Call* c, evhttp_request* req) {
  evbuffer* in = evhttp_request_get_input_buffer(req);
  const size_t n = evbuffer_get_length(in);
  if (n == 0) return;
  std::string bytes(n, '\0');
  evbuffer_copyout(in, bytes.data(), n);
  evbuffer_drain(in, n);  // evhttp drains after a chunk callback, not before OnDone
  c->status = evhttp_request_get_response_code(req);
  if (c->out == nullptr || c->status != 200) {
    c->raw += bytes;
    return;
  }
  RequestResult* out = c->out;
  c->sse.Feed(bytes, [&](absl::string_view data) {
    const CompletionEvent e = ParseCompletionEvent(data);
    if (!e.error.empty() && c->error.empty()) c->error = e.error;
    if (e.done) c->stream_done = true;
    if (e.token) {
      const Clock::time_point now = Clock::now();
      if (out->received_tokens == 0) {
        out->ttft_s = Seconds(now - c->start);
      } else {
        out->itls_s.push_back(Seconds(now - c->last));
      }
      c->last = now;
      ++out->received_tokens;
    }
    if (e.finished) c->finished = true;
    if (e.has_usage) {
      c->has_usage = true;
      out->output_tokens = e.completion_tokens;
      out->usage_prompt_tokens = e.prompt_tokens;
      out->cached_tokens = e.cached_tokens;
    }
  });
}

void OpenAiClient::Impl::Finish(Call* c) {
  active.erase(c);
  if (RequestResult* out = c->out; out != nullptr) {
    if (c->timed_out) {
      out->error = "DEADLINE_EXCEEDED: cancelled at the run's time cap";
    } else if (c->failed && c->status == 0) {
      out->error = absl::StrCat("UNAVAILABLE: HTTP ", RequestErrorName(c->failure));
    } else if (c->status != 200) {
      out->error = absl::StrCat("HTTP ", c->status, ": ", ErrorMessage(c->raw));
    } else if (!c->error.empty()) {
      out->error = absl::StrCat("SSE: ", c->error);
    } else if (!c->stream_done || !c->finished || out->received_tokens == 0) {
      out->error = "stream ended without tokens, a finish_reason or data: [DONE]";
    } else {
      out->success = true;
    }
    if (!c->has_usage) out->output_tokens = out->received_tokens;
    if (out->received_tokens > 0) out->latency_s = Seconds(c->last - c->start);
  }
  std::function<void()> done = std::move(c->done);
  if (c->out != nullptr) delete c;
  done();  // a Fetch owns its call
}

void OpenAiClient::Impl::Fetch(const std::string& path, Call* c) {
  absl::Notification finished;
  c->impl = this;
  c->method = "GET";
  c->path = path;
  c->deadline = Clock::now() + std::chrono::seconds(5);
  c->done = [&finished] { finished.Notify(); };
  Post(c);
  finished.WaitForNotification();
}

OpenAiClient::OpenAiClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<OpenAiClient>> OpenAiClient::Connect(const std::string& server,
                                                                    const std::string& api_key) {
  if (!IsLoopback(server)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--http_server must be a loopback HOST:PORT (127.x.x.x, localhost, [::1]), got '", server,
        "': the load stays on this machine"));
  }
  const size_t colon = server.rfind(':');
  auto impl = std::make_unique<Impl>();
  impl->host = server.substr(0, colon);
  if (impl->host == "[::1]") impl->host = "::1";
  if (!absl::SimpleAtoi(server.substr(colon + 1), &impl->port) || impl->port <= 0 ||
      impl->port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad port in '", server, "'"));
  }
  impl->api_key = api_key;
  RaiseDescriptorLimit();
  static std::once_flag threads_once;
  std::call_once(threads_once, [] { evthread_use_pthreads(); });
  impl->base = event_base_new();
  if (impl->base == nullptr) return absl::InternalError("libevent: event_base_new failed");
  Impl* raw = impl.get();
  impl->wake = event_new(impl->base, -1, EV_PERSIST, &Impl::OnWake, raw);
  impl->tick = event_new(impl->base, -1, EV_PERSIST, &Impl::OnTick, raw);
  event_add(impl->wake, nullptr);
  const timeval period = {0, 50000};
  event_add(impl->tick, &period);
  impl->thread = std::thread([raw] { event_base_loop(raw->base, EVLOOP_NO_EXIT_ON_EMPTY); });
  return std::unique_ptr<OpenAiClient>(new OpenAiClient(std::move(impl)));
}

OpenAiClient::~OpenAiClient() {
  event_base_loopbreak(impl_->base);
  impl_->thread.join();
  event_free(impl_->wake);
  event_free(impl_->tick);
  event_base_free(impl_->base);
}

absl::StatusOr<std::string> OpenAiClient::WaitReady(double timeout_s) {
  const Clock::time_point end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(timeout_s));
  std::string last;
  do {
    Call c;
    impl_->Fetch("/v1/models", &c);
    if (c.status == 200) {
      nlohmann::json j = nlohmann::json::parse(c.raw, nullptr, false);
      if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
          j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
        return j["data"][0]["id"].get<std::string>();
      }
      return absl::FailedPreconditionError("GET /v1/models: no model in the answer");
    }
    if (c.status == 401 || c.status == 403) {
      return absl::FailedPreconditionError(
          absl::StrCat("GET /v1/models: HTTP ", c.status, ": ", ErrorMessage(c.raw)));
    }
    last = c.status != 0 ? absl::StrCat("HTTP ", c.status) : RequestErrorName(c.failure);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (Clock::now() < end);
  return absl::UnavailableError(
      absl::StrCat("HTTP server not ready after ", timeout_s, " s: ", last));
}

void OpenAiClient::Start(const v1::GenerateRequest& request, Clock::time_point t0,
                         Clock::time_point deadline, bool /*keep_output_ids*/, RequestResult* out,
                         std::function<void()> done) {
  auto* c = new Call();
  c->impl = impl_.get();
  c->path = "/v1/completions";
  c->body = CompletionBody(request, model_).dump();
  c->out = out;
  c->done = std::move(done);
  c->t0 = t0;
  c->deadline = deadline;
  out->prompt_tokens = request.token_ids().ids_size();
  out->requested_tokens = request.stop().max_tokens();
  impl_->Post(c);
}

}  // namespace linfer::bench
