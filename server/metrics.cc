// Metrics: prometheus-cpp families and the EngineStats → series mapping.
#include "server/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace linfer {
namespace {

using prometheus::Histogram;

// Seconds, from a millisecond to two hours (vLLM's request-latency buckets end at 7680 s: long
// generations and queues at saturation must not all land in +Inf).
Histogram::BucketBoundaries LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,  0.75, 1.0,
          2.5,   5.0,    7.5,   10,   20,   40,   80,   160,  320, 640,  1280, 2560, 7680};
}

// Token counts 1, 2, 5, 10, 20, 50, … up to `max` (vLLM's build_1_2_5_buckets(max_model_len)).
Histogram::BucketBoundaries TokenBuckets(int64_t max) {
  Histogram::BucketBoundaries b;
  for (double decade = 1; b.empty() || b.back() < static_cast<double>(max); decade *= 10) {
    for (double m : {1, 2, 5}) {
      if (m * decade > static_cast<double>(max)) break;
      b.push_back(m * decade);
    }
    if (decade > 1e15) break;
  }
  return b;
}

}  // namespace

struct Metrics::Series {
  prometheus::Gauge *running, *waiting, *slots_used, *slots_total, *state_bytes;
  std::map<std::string, prometheus::Gauge*> sessions;  // by tier
  prometheus::Gauge *session_host_bytes, *session_disk_bytes;
  prometheus::Gauge *kv_blocks_used, *kv_blocks_total, *kv_block_bytes;
  std::map<std::string, prometheus::Gauge*> prefix_entries, prefix_bytes;  // by tier
  prometheus::Counter *prefix_queries, *prefix_hits, *prefix_hit_tokens, *prefix_evictions,
      *prefix_branch_points;
  std::map<std::string, prometheus::Gauge*> session_state_bytes, session_kv_bytes;  // by tier
  std::map<std::string, prometheus::Counter*> step_seconds;                         // by part
  std::map<std::string, prometheus::Counter*> state_copies;                         // by place
  prometheus::Counter *prompt_tokens, *generation_tokens, *cached_tokens, *preemptions, *evictions,
      *steps, *graph_steps;
  prometheus::Family<prometheus::Counter>* finished;
  prometheus::Family<prometheus::Counter>* errors;
  prometheus::Family<prometheus::Counter>* http;
  prometheus::Gauge *stored_responses, *stored_response_bytes;
  prometheus::Gauge* http_connections;
  prometheus::Counter *http_timed_out, *http_evicted, *http_overflowed, *http_slow;
  int64_t http_timed_out_seen = 0, http_evicted_seen = 0, http_overflowed_seen = 0,
          http_slow_seen = 0;
  Histogram *ttft, *itl, *e2e, *queue, *step, *batch, *step_tokens;
  Histogram *prompt_len, *generation_len, *prefill, *decode, *inference, *tpot;
};

Metrics::Metrics(const std::string& model_name, const BuildInfo& build, int64_t max_model_len)
    : registry_(std::make_shared<prometheus::Registry>()),
      s_(std::make_unique<Series>()),
      model_(model_name) {
  prometheus::Registry& r = *registry_;
  const prometheus::Labels m = {{"model_name", model_name}};
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add(m);
  };
  auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(m);
  };
  auto histogram = [&](const char* name, const char* help, Histogram::BucketBoundaries b) {
    return &prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add(m, std::move(b));
  };
  Series& s = *s_;
  prometheus::BuildGauge()
      .Name("linfer_build_info")
      .Help("Constant 1; the labels say which linfer serves which model on which device.")
      .Register(r)
      .Add({{"model_name", model_name},
            {"version", build.version},
            {"build_type", build.build_type},
            {"device", build.device}})
      .Set(1);
  s.running = gauge("linfer_requests_running", "Requests in the running batch.");
  s.waiting = gauge("linfer_requests_waiting", "Requests waiting for admission.");
  s.slots_used =
      gauge("linfer_state_slots_used",
            "State slots holding a sequence or session (or a session turn's state copy).");
  s.slots_total = gauge("linfer_state_slots_capacity", "State slots in the pool.");
  s.state_bytes = gauge("linfer_state_bytes_per_sequence", "Bytes of one sequence's state.");
  auto& tiers = prometheus::BuildGauge()
                    .Name("linfer_sessions")
                    .Help("Sessions by the tier holding their state (slot, host, disk).")
                    .Register(r);
  for (const char* t : {"slot", "host", "disk"}) {
    s.sessions[t] = &tiers.Add({{"model_name", model_name}, {"tier", t}});
  }
  auto& state_bytes = prometheus::BuildGauge()
                          .Name("linfer_session_state_bytes")
                          .Help(
                              "Bytes of sessions' recurrent state (and short-conv windows), by "
                              "tier.")
                          .Register(r);
  auto& kv_bytes = prometheus::BuildGauge()
                       .Name("linfer_session_kv_bytes")
                       .Help(
                           "Bytes of sessions' attention KV (hybrid models), by tier; in the "
                           "slot tier the blocks they hold.")
                       .Register(r);
  for (const char* t : {"slot", "host", "disk"}) {
    s.session_state_bytes[t] = &state_bytes.Add({{"model_name", model_name}, {"tier", t}});
    s.session_kv_bytes[t] = &kv_bytes.Add({{"model_name", model_name}, {"tier", t}});
  }
  s.kv_blocks_used = gauge("linfer_kv_cache_blocks_used",
                           "KV cache blocks in use (hybrid models' full-attention layers).");
  s.kv_blocks_total = gauge("linfer_kv_cache_blocks_capacity", "KV cache blocks in the pool.");
  s.kv_block_bytes = gauge("linfer_kv_cache_block_bytes", "Bytes of one KV cache block.");
  auto& prefix_states = prometheus::BuildGauge()
                            .Name("linfer_prefix_cache_states")
                            .Help("States saved in the prefix cache, by tier (slot, host, disk).")
                            .Register(r);
  auto& prefix_bytes = prometheus::BuildGauge()
                           .Name("linfer_prefix_cache_bytes")
                           .Help("Bytes of the prefix cache's states, by tier (slot, host, disk).")
                           .Register(r);
  for (const char* t : {"slot", "host", "disk"}) {
    s.prefix_entries[t] = &prefix_states.Add({{"model_name", model_name}, {"tier", t}});
    s.prefix_bytes[t] = &prefix_bytes.Add({{"model_name", model_name}, {"tier", t}});
  }
  s.prefix_queries = counter("linfer_prefix_cache_queries_total",
                             "Requests that looked for a saved prefix of their prompt.");
  s.prefix_hits =
      counter("linfer_prefix_cache_hits_total", "Requests resumed from a saved prefix.");
  s.prefix_hit_tokens = counter("linfer_prefix_cache_hit_tokens_total",
                                "Prompt tokens served from saved prefixes (not recomputed).");
  s.prefix_branch_points =
      counter("linfer_prefix_cache_branch_points_total",
              "Prompts saved where they part from an earlier prompt that shared their beginning.");
  s.prefix_evictions =
      counter("linfer_prefix_cache_evictions_total",
              "Prefix states dropped for the budgets (host RAM, then disk when configured).");
  s.session_host_bytes = gauge("linfer_session_host_bytes", "Bytes of idle states in host RAM.");
  s.session_disk_bytes = gauge("linfer_session_disk_bytes", "Bytes of idle states on disk.");
  s.prompt_tokens = counter("linfer_prompt_tokens_total", "Prompt tokens processed.");
  s.generation_tokens = counter("linfer_generation_tokens_total", "Tokens generated.");
  s.cached_tokens =
      counter("linfer_session_reused_tokens_total",
              "Prompt tokens not recomputed: reused from a session's state or the prefix cache.");
  s.preemptions = counter("linfer_preemptions_total", "Running requests offloaded to host RAM.");
  s.evictions = counter("linfer_session_evictions_total", "Sessions dropped from full tiers.");
  s.steps = counter("linfer_steps_total", "Engine steps.");
  auto& step_seconds =
      prometheus::BuildCounter()
          .Name("linfer_step_seconds_total")
          .Help(
              "Engine step time by part: forward (the model's forward pass through its logits' "
              "download), prefix_snapshots (saving states for the prefix cache, device to host), "
              "scheduler (intake and planning), other (sampling, emitting).")
          .Register(r);
  for (const char* part : {"forward", "prefix_snapshots", "scheduler", "other"}) {
    s.step_seconds[part] = &step_seconds.Add({{"model_name", model_name}, {"part", part}});
  }
  auto& state_copies =
      prometheus::BuildCounter()
          .Name("linfer_session_state_copies_total")
          .Help(
              "Copies of a session's state kept to go back to (while a reply's text may be a stop "
              "string's start, to take it back out of the state; while a prompt of several steps "
              "is fed, for a cut), by place: slot (a free slot, device to device), host (host "
              "RAM), moved (a slot copy moved to host RAM when its slot was needed).")
          .Register(r);
  for (const char* place : {"slot", "host", "moved"}) {
    s.state_copies[place] = &state_copies.Add({{"model_name", model_name}, {"place", place}});
  }
  s.graph_steps =
      counter("linfer_cuda_graph_steps_total",
              "Decode steps replayed as CUDA graphs (0 on the CPU or with graphs off).");
  s.finished = &prometheus::BuildCounter()
                    .Name("linfer_requests_finished_total")
                    .Help("Finished requests by finish_reason.")
                    .Register(r);
  s.errors = &prometheus::BuildCounter()
                  .Name("linfer_request_errors_total")
                  .Help("Requests rejected or failed, by gRPC status code.")
                  .Register(r);
  s.http = &prometheus::BuildCounter()
                .Name("linfer_http_requests_total")
                .Help("HTTP requests answered, by method, route and status code.")
                .Register(r);
  s.http_connections = gauge("linfer_http_connections", "Open HTTP connections.");
  auto& closed = prometheus::BuildCounter()
                     .Name("linfer_http_connections_closed_total")
                     .Help(
                         "HTTP connections the server shut down, by reason: request_timeout "
                         "(the request did not arrive whole in --http_request_timeout_s), "
                         "connection_cap (made room under --http_max_connections), input_limit "
                         "(a request's bytes past what one request may hold, unparsed), "
                         "slow_reader (the client read its answer slower than "
                         "--http_min_send_rate, or a stream's output backed up unread).")
                     .Register(r);
  s.http_timed_out = &closed.Add({{"model_name", model_name}, {"reason", "request_timeout"}});
  s.http_evicted = &closed.Add({{"model_name", model_name}, {"reason", "connection_cap"}});
  s.http_overflowed = &closed.Add({{"model_name", model_name}, {"reason", "input_limit"}});
  s.http_slow = &closed.Add({{"model_name", model_name}, {"reason", "slow_reader"}});
  s.stored_responses = gauge("linfer_stored_responses",
                             "Responses API results stored for retrieval and continuation.");
  s.stored_response_bytes =
      gauge("linfer_stored_responses_bytes", "Bytes of the stored responses' JSON.");
  s.ttft =
      histogram("linfer_time_to_first_token_seconds", "Time to first token.", LatencyBuckets());
  s.itl = histogram("linfer_inter_token_latency_seconds", "Time between streamed tokens.",
                    LatencyBuckets());
  s.e2e = histogram("linfer_e2e_request_latency_seconds", "Request latency, end to end.",
                    LatencyBuckets());
  s.queue = histogram("linfer_request_queue_time_seconds", "Time waiting for admission.",
                      LatencyBuckets());
  s.step =
      histogram("linfer_step_duration_seconds", "Duration of one engine step.", LatencyBuckets());
  s.batch = histogram("linfer_batch_size", "Sequences in one engine step.",
                      {1, 2, 4, 8, 16, 32, 64, 128, 256, 512});
  s.step_tokens = histogram("linfer_iteration_tokens", "Tokens in one engine step.",
                            {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384});
  const int64_t max_len = max_model_len > 0 ? max_model_len : int64_t{1} << 20;
  s.prompt_len = histogram("linfer_request_prompt_tokens",
                           "Prompt tokens of each finished request (the prompt sent, cached "
                           "or not; without a session's history).",
                           TokenBuckets(max_len));
  s.generation_len = histogram("linfer_request_generation_tokens",
                               "Tokens generated by each finished request.", TokenBuckets(max_len));
  s.prefill =
      histogram("linfer_request_prefill_time_seconds",
                "Per request with a token: first scheduled to first token.", LatencyBuckets());
  s.decode = histogram("linfer_request_decode_time_seconds",
                       "Per request with a token: first token to finish.", LatencyBuckets());
  s.inference = histogram("linfer_request_inference_time_seconds",
                          "Per request with a token: first scheduled to finish.", LatencyBuckets());
  s.tpot = histogram("linfer_request_time_per_output_token_seconds",
                     "Per request with two tokens or more: its decode time over its tokens after "
                     "the first (the mean inter-token latency).",
                     LatencyBuckets());
}

Metrics::~Metrics() = default;

void Metrics::ObserveFirstToken(double queue_seconds, double ttft_seconds) {
  absl::MutexLock lock(&mu_);
  s_->ttft->Observe(ttft_seconds);
  s_->queue->Observe(queue_seconds);
}

void Metrics::ObserveFinished(const Usage& usage) {
  absl::MutexLock lock(&mu_);
  Series& s = *s_;
  s.e2e->Observe(usage.total_seconds);
  s.prompt_len->Observe(static_cast<double>(usage.prompt_tokens));
  s.generation_len->Observe(static_cast<double>(usage.completion_tokens));
  if (usage.completion_tokens < 1) return;  // no first token: no prefill or decode phase
  const auto at_least_0 = [](double x) { return x > 0 ? x : 0.0; };
  const double decode = at_least_0(usage.total_seconds - usage.ttft_seconds);
  s.prefill->Observe(at_least_0(usage.ttft_seconds - usage.queue_seconds));
  s.decode->Observe(decode);
  s.inference->Observe(at_least_0(usage.total_seconds - usage.queue_seconds));
  if (usage.completion_tokens > 1) {
    s.tpot->Observe(decode / static_cast<double>(usage.completion_tokens - 1));
  }
}

void Metrics::ObserveInterToken(double seconds) {
  absl::MutexLock lock(&mu_);
  s_->itl->Observe(seconds);
}

void Metrics::ObserveError(absl::StatusCode code) {
  absl::MutexLock lock(&mu_);
  std::string name = absl::StatusCodeToString(code);
  absl::AsciiStrToLower(&name);
  s_->errors->Add({{"model_name", model_}, {"code", name}}).Increment();
}

void Metrics::ObserveOutcome(const absl::Status& status) {
  if (status.ok() || absl::IsUnauthenticated(status) || absl::IsCancelled(status)) return;
  ObserveError(status.code());
}

void Metrics::ObserveHttp(const std::string& method, const std::string& route, int status) {
  absl::MutexLock lock(&mu_);
  s_->http
      ->Add({{"model_name", model_},
             {"method", method},
             {"route", route.empty() ? "unmatched" : route},
             {"code", absl::StrCat(status)}})
      .Increment();
}

void Metrics::SetStoredResponses(int64_t count, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  s_->stored_responses->Set(static_cast<double>(count));
  s_->stored_response_bytes->Set(static_cast<double>(bytes));
}

void Metrics::SetHttpConnections(const HttpServer::ConnectionStats& stats) {
  absl::MutexLock lock(&mu_);
  Series& s = *s_;
  s.http_connections->Set(static_cast<double>(stats.open));
  // Running totals from the listener: add what is new (a stopped listener reports 0).
  struct Total {
    int64_t now;
    int64_t* seen;
    prometheus::Counter* counter;
  };
  for (const Total& t : {Total{stats.timed_out, &s.http_timed_out_seen, s.http_timed_out},
                         Total{stats.evicted, &s.http_evicted_seen, s.http_evicted},
                         Total{stats.overflowed, &s.http_overflowed_seen, s.http_overflowed},
                         Total{stats.slow_readers, &s.http_slow_seen, s.http_slow}}) {
    if (t.now > *t.seen) {
      t.counter->Increment(static_cast<double>(t.now - *t.seen));
      *t.seen = t.now;
    }
  }
}

void Metrics::ObserveStep(const StepRecord& step) {
  absl::MutexLock lock(&mu_);
  s_->step->Observe(step.seconds);
  s_->batch->Observe(step.batch_size);
  s_->step_tokens->Observe(static_cast<double>(step.tokens));
}

std::string Metrics::Render(const std::function<EngineStats()>& stats) {
  {
    absl::MutexLock lock(&mu_);
    const EngineStats st = stats();
    Series& s = *s_;
    s.running->Set(st.running);
    s.waiting->Set(st.waiting);
    s.slots_used->Set(st.slots_used);
    s.slots_total->Set(st.slots_total);
    s.state_bytes->Set(static_cast<double>(st.state_bytes_per_sequence));
    s.sessions["slot"]->Set(st.sessions.slot);
    s.sessions["host"]->Set(st.sessions.host);
    s.sessions["disk"]->Set(st.sessions.disk);
    s.session_host_bytes->Set(static_cast<double>(st.sessions.host_bytes));
    s.session_disk_bytes->Set(static_cast<double>(st.sessions.disk_bytes));
    const TierCounts& t = st.sessions;
    s.session_state_bytes["slot"]->Set(static_cast<double>(t.slot_state_bytes));
    s.session_state_bytes["host"]->Set(static_cast<double>(t.host_bytes - t.host_kv_bytes));
    s.session_state_bytes["disk"]->Set(static_cast<double>(t.disk_bytes - t.disk_kv_bytes));
    s.session_kv_bytes["slot"]->Set(static_cast<double>(t.slot_kv_bytes));
    s.session_kv_bytes["host"]->Set(static_cast<double>(t.host_kv_bytes));
    s.session_kv_bytes["disk"]->Set(static_cast<double>(t.disk_kv_bytes));
    s.kv_blocks_used->Set(static_cast<double>(st.kv_blocks_used));
    s.kv_blocks_total->Set(static_cast<double>(st.kv_blocks_total));
    s.kv_block_bytes->Set(static_cast<double>(st.kv_bytes_per_block));
    s.prefix_entries["slot"]->Set(static_cast<double>(st.prefix_cache.device_entries));
    s.prefix_bytes["slot"]->Set(static_cast<double>(st.prefix_cache.device_bytes));
    s.prefix_entries["host"]->Set(static_cast<double>(st.prefix_cache.entries));
    s.prefix_bytes["host"]->Set(static_cast<double>(st.prefix_cache.bytes));
    s.prefix_entries["disk"]->Set(static_cast<double>(st.prefix_cache.disk_entries));
    s.prefix_bytes["disk"]->Set(static_cast<double>(st.prefix_cache.disk_bytes));
    auto delta = [](prometheus::Counter* c, int64_t now, int64_t before) {
      if (now > before) c->Increment(static_cast<double>(now - before));
    };
    delta(s.prompt_tokens, st.prompt_tokens_total, last_.prompt_tokens_total);
    delta(s.generation_tokens, st.generation_tokens_total, last_.generation_tokens_total);
    delta(s.cached_tokens, st.cached_tokens_total, last_.cached_tokens_total);
    delta(s.preemptions, st.preemptions_total, last_.preemptions_total);
    delta(s.evictions, st.sessions_evicted_total, last_.sessions_evicted_total);
    delta(s.prefix_queries, st.prefix_cache.queries, last_.prefix_cache.queries);
    delta(s.prefix_hits, st.prefix_cache.hits, last_.prefix_cache.hits);
    delta(s.prefix_hit_tokens, st.prefix_cache.hit_tokens, last_.prefix_cache.hit_tokens);
    delta(s.prefix_evictions, st.prefix_cache.evictions, last_.prefix_cache.evictions);
    delta(s.prefix_branch_points, st.prefix_cache.branch_points, last_.prefix_cache.branch_points);
    delta(s.steps, st.steps_total, last_.steps_total);
    auto seconds = [](prometheus::Counter* c, double now, double before) {
      if (now > before) c->Increment(now - before);
    };
    seconds(s.step_seconds["forward"], st.forward_seconds_total, last_.forward_seconds_total);
    seconds(s.step_seconds["prefix_snapshots"], st.snapshot_seconds_total,
            last_.snapshot_seconds_total);
    seconds(s.step_seconds["scheduler"], st.scheduler_seconds_total, last_.scheduler_seconds_total);
    const auto other = [](const EngineStats& e) {
      return e.step_seconds_total - e.forward_seconds_total - e.snapshot_seconds_total -
             e.scheduler_seconds_total;
    };
    seconds(s.step_seconds["other"], other(st), other(last_));
    delta(s.graph_steps, st.graph_steps_total, last_.graph_steps_total);
    delta(s.state_copies["slot"], st.state_copies.slot, last_.state_copies.slot);
    delta(s.state_copies["host"], st.state_copies.host, last_.state_copies.host);
    delta(s.state_copies["moved"], st.state_copies.moved, last_.state_copies.moved);
    for (const auto& [reason, n] : st.finished_total) {
      auto it = last_.finished_total.find(reason);
      delta(&s.finished->Add({{"model_name", model_}, {"finish_reason", reason}}), n,
            it == last_.finished_total.end() ? 0 : it->second);
    }
    last_ = st;
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace linfer
