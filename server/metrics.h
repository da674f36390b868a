// Prometheus metrics (prefix linfer_, modelled on vLLM's set). Gauges and token counters are
// refreshed from EngineStats at scrape time; latency histograms are observed as requests and
// steps finish. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "server/http/http_server.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace linfer {

class Metrics {
 public:
  struct BuildInfo {
    std::string version, build_type, device;
  };
  // max_model_len bounds the per-request token histograms' buckets (0: 2^20).
  Metrics(const std::string& model_name, const BuildInfo& build, int64_t max_model_len = 0);
  ~Metrics();

  // When a request's first token is sent: its queue time and time to first token.
  void ObserveFirstToken(double queue_seconds, double ttft_seconds);
  // A request's end: its end-to-end latency, prompt and generated tokens, and when it produced a
  // token its prefill (ttft − queue), decode (total − ttft) and inference (total − queue) times
  // and, from two tokens, its mean time per output token. Usage's times count from the client's
  // request.
  void ObserveFinished(const Usage& usage);
  void ObserveInterToken(double seconds);
  void ObserveError(absl::StatusCode code);  // a request rejected or failed with this code
  // A unary or transfer RPC's outcome: counted as ObserveError unless ok, a missing or wrong API
  // key (an unauthenticated client does not fill the errors), or the client's own cancel.
  void ObserveOutcome(const absl::Status& status);
  void ObserveStep(const StepRecord& step);
  // An HTTP request answered: its method, route ("" when none matched: "unmatched") and status.
  void ObserveHttp(const std::string& method, const std::string& route, int status);
  // The OpenAI API's stored responses (/v1/responses), for the next Render.
  void SetStoredResponses(int64_t count, int64_t bytes);
  // The HTTP listener's connections, for the next Render: open now, and the running totals
  // closed for the request deadline, for the connection cap, at the input limit and under the
  // send rate.
  void SetHttpConnections(const HttpServer::ConnectionStats& stats);
  // Refreshes the engine-derived series from `stats()` and returns the Prometheus text
  // exposition. `stats` is called under this object's lock, so that concurrent scrapes take their
  // snapshots in the order they add them up (an older snapshot stored last would have the next
  // scrape count the difference twice).
  std::string Render(const std::function<EngineStats()>& stats);

 private:
  struct Series;
  absl::Mutex mu_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Series> s_ ABSL_GUARDED_BY(mu_);
  EngineStats last_ ABSL_GUARDED_BY(mu_);
  std::string model_;
};

}  // namespace linfer
