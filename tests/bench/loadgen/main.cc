// linfer_bench: a load generator for linfer over gRPC or the OpenAI HTTP API (SSE) that measures
// it the way `vllm bench serve` does (random / shared-prefix workloads, Poisson or gamma
// arrivals, concurrency and rate sweeps, the same workload over both protocols), plus a
// multi-turn chat workload with and without persistent sessions (gRPC).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tests/bench/loadgen/arrivals.h"
#include "tests/bench/loadgen/client.h"
#include "tests/bench/loadgen/compare.h"
#include "tests/bench/loadgen/metrics.h"
#include "tests/bench/loadgen/multiturn.h"
#include "tests/bench/loadgen/openai_client.h"
#include "tests/bench/loadgen/runner.h"
#include "tests/bench/loadgen/workload.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "linfer gRPC address (loopback only)");
ABSL_FLAG(std::string, backend, "grpc",
          "grpc | openai (POST /v1/completions, SSE) | compare (the same runs over both, "
          "openai first, and the openai/grpc output-throughput ratio)");
ABSL_FLAG(int, compare_rounds, 1,
          "--backend compare: pairs of runs, alternating which backend goes first; the "
          "throughputs are pooled over them");
ABSL_FLAG(std::string, http_server, "127.0.0.1:8000",
          "linfer HTTP address for --backend openai|compare (loopback only)");
ABSL_FLAG(int64_t, vocab_size, 0,
          "Token ids are drawn below this; 0: ask Models.Info on --server (gRPC)");
ABSL_FLAG(std::string, api_key, "", "API key (default: $LINFER_API_KEY)");
ABSL_FLAG(std::string, workload, "random", "random | shared_prefix | multiturn");
ABSL_FLAG(int, num_prompts, 100, "Requests per run (random, shared_prefix)");
ABSL_FLAG(int, input_len, 128, "Prompt tokens (the random part; per user turn for multiturn)");
ABSL_FLAG(int, output_len, 32, "Tokens generated per request (exact: ignore_eos)");
ABSL_FLAG(double, range_ratio, 0, "Lengths uniform in [L(1-r), L(1+r)], r in [0, 1)");
ABSL_FLAG(int, prefix_len, -1,
          "Shared prefix tokens before the random part (-1: 256 for "
          "shared_prefix, 0 for random)");
ABSL_FLAG(int, num_prefixes, 1, "Distinct shared prefixes (each request draws one)");
ABSL_FLAG(double, request_rate, INFINITY, "Requests/s (inf: all at t=0, --max_concurrency caps)");
ABSL_FLAG(double, burstiness, 1.0, "Gamma shape of the inter-arrival gaps (1: Poisson)");
ABSL_FLAG(int, max_concurrency, 0, "Requests (or conversations) in flight at once; 0: no cap");
ABSL_FLAG(int, num_warmups, 1, "Unmeasured requests sent first");
ABSL_FLAG(uint64_t, seed, 0, "Seed of prompts, arrivals and sampling");
ABSL_FLAG(double, temperature, 0, "Sampling temperature (0: greedy)");
ABSL_FLAG(std::string, goodput, "",
          "SLOs in ms for request_goodput, e.g. ttft:500,tpot:50,e2el:2000");
ABSL_FLAG(std::string, metric_percentiles, "90,99", "Percentiles reported besides the median");
ABSL_FLAG(bool, save_detailed, false, "Add the per-request arrays to the JSON");
ABSL_FLAG(std::string, result_json, "", "Write the results here (JSON)");
ABSL_FLAG(std::string, csv, "", "Write one CSV row per run (sweep) or per turn (multiturn)");
ABSL_FLAG(std::string, sweep_concurrency, "", "Comma list: one run per max concurrency");
ABSL_FLAG(std::string, sweep_rate, "", "Comma list: one run per request rate");
ABSL_FLAG(int, conversations, 4, "multiturn: conversations");
ABSL_FLAG(int, turns, 8, "multiturn: turns per conversation");
ABSL_FLAG(int, first_turn_len, 0,
          "multiturn: tokens of each conversation's first user turn (a long document the later, "
          "--input_len turns follow up on); 0: --input_len");
ABSL_FLAG(std::string, multiturn_modes, "sessions,history",
          "multiturn: sessions (persistent state) and/or history (full prompts, no session)");
ABSL_FLAG(int, max_requests, 10000, "Refuse to send more measured requests than this in total");
ABSL_FLAG(double, duration_s, 600, "Time cap of each run: stop sending, cancel what is in flight");
ABSL_FLAG(double, ready_timeout_s, 60, "Wait this long for the server to answer");
ABSL_FLAG(bool, progress, true, "Progress bar on stderr");
ABSL_FLAG(std::string, label, "linfer", "Label stored in the results");

namespace linfer::bench {
namespace {

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "linfer_bench: %s\n", st.ToString().c_str());
  return 1;
}

absl::StatusOr<std::vector<double>> ParseList(const std::string& flag, const std::string& spec) {
  std::vector<double> out;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    double v = 0;
    if (!absl::SimpleAtod(item, &v) || !(v > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": bad value '", item, "'"));
    }
    out.push_back(v);
  }
  return out;
}

nlohmann::json RateJson(double rate) {
  return std::isinf(rate) ? nlohmann::json("inf") : nlohmann::json(rate);
}

std::string Date() {
  char buf[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", std::localtime(&now));
  return buf;
}

void PrintRun(const std::string& title, const nlohmann::json& j) {
  auto num = [&](const char* k) {
    return j.contains(k) && j[k].is_number() ? j[k].get<double>() : 0.0;
  };
  std::printf("============ %s ============\n", title.c_str());
  std::printf("%-36s %d / %d\n", "Successful / failed requests:", j["completed"].get<int>(),
              j["failed"].get<int>());
  if (j.value("cut_at_time_cap", 0) > 0) {
    std::printf("%-36s %d\n",
                "In flight at --duration_s (cancelled):", j["cut_at_time_cap"].get<int>());
  }
  if (j.value("not_sent", 0) > 0) {
    std::printf("%-36s %d\n", "Not sent before --duration_s:", j["not_sent"].get<int>());
  }
  std::printf("%-36s %.2f\n", "Benchmark duration (s):", num("duration"));
  std::printf("%-36s %lld / %lld\n",
              "Input / output tokens:", static_cast<long long>(num("total_input_tokens")),
              static_cast<long long>(num("total_output_tokens")));
  std::printf("%-36s %.2f\n", "Request throughput (req/s):", num("request_throughput"));
  if (!j["request_goodput"].is_null()) {
    std::printf("%-36s %.2f\n", "Request goodput (req/s):", num("request_goodput"));
  }
  std::printf("%-36s %.2f\n", "Output token throughput (tok/s):", num("output_throughput"));
  std::printf("%-36s %.2f\n", "Total token throughput (tok/s):", num("total_token_throughput"));
  std::printf("%-36s %d\n", "Peak concurrent requests:", j["max_concurrent_requests"].get<int>());
  for (const char* m : {"ttft", "tpot", "itl", "e2el"}) {
    // The percentiles --metric_percentiles asked for ("p95_ttft_ms", "p99.9_ttft_ms"), in order.
    const std::string suffix = absl::StrCat("_", m, "_ms");
    std::vector<std::pair<double, std::string>> percentiles;
    for (const auto& [key, value] : j.items()) {
      double p = 0;
      if (key.size() > suffix.size() + 1 && key[0] == 'p' && key.ends_with(suffix) &&
          absl::SimpleAtod(key.substr(1, key.size() - 1 - suffix.size()), &p)) {
        percentiles.emplace_back(p, key);
      }
    }
    std::sort(percentiles.begin(), percentiles.end());
    std::string line = absl::StrFormat("%-5s ms: mean %.2f  median %.2f", m,
                                       num(absl::StrCat("mean", suffix).c_str()),
                                       num(absl::StrCat("median", suffix).c_str()));
    for (const auto& [p, key] : percentiles) {
      absl::StrAppend(&line, absl::StrFormat("  %s %.2f", key.substr(0, key.size() - suffix.size()),
                                             num(key.c_str())));
    }
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
}

struct Setup {
  std::unique_ptr<BenchClient> client;  // gRPC: always made (Models.Info, multiturn)
  std::unique_ptr<OpenAiClient> http;   // --backend openai | compare
  std::vector<StreamClient*> backends;  // what each run goes through, in order
  std::vector<std::string> backend_names;
  v1::ModelInfo model;
  MetricsOptions metrics;
  nlohmann::json meta;
};

// One measured run of the random / shared-prefix workload at (rate, concurrency) on one backend.
absl::StatusOr<nlohmann::json> RunPointOn(Setup& s, size_t backend,
                                          const std::vector<RequestSpec>& specs, double rate,
                                          int concurrency) {
  ArrivalOptions ao;
  ao.request_rate = rate;
  ao.burstiness = absl::GetFlag(FLAGS_burstiness);
  ao.seed = absl::GetFlag(FLAGS_seed);
  absl::StatusOr<std::vector<double>> arrivals = ArrivalTimes(static_cast<int>(specs.size()), ao);
  if (!arrivals.ok()) return arrivals.status();
  std::vector<v1::GenerateRequest> requests;
  for (size_t i = 0; i < specs.size(); ++i) {
    requests.push_back(
        MakeRequest(specs[i], absl::GetFlag(FLAGS_temperature), absl::GetFlag(FLAGS_seed) + i, ""));
  }
  DispatchOptions d;
  d.arrival_s = *std::move(arrivals);
  d.max_concurrency = concurrency;
  d.duration_s = absl::GetFlag(FLAGS_duration_s);
  d.progress = absl::GetFlag(FLAGS_progress);
  d.label = absl::StrCat(s.backend_names[backend], " rate ",
                         std::isinf(rate) ? "inf" : absl::StrCat(rate), " conc ",
                         concurrency > 0 ? absl::StrCat(concurrency) : "inf");
  DispatchOutput out = Dispatch(*s.backends[backend], requests, d);
  nlohmann::json j = s.meta;
  j["backend"] = s.backend_names[backend];
  j.update(Summarize(out.results, out.duration_s, s.metrics));
  j["not_sent"] = out.not_sent;
  j["request_rate"] = RateJson(rate);
  j["max_concurrency"] = concurrency > 0 ? nlohmann::json(concurrency) : nlohmann::json(nullptr);
  PrintRun(d.label, j);
  return j;
}

// RunPointOn on the one backend; for compare, --compare_rounds pairs of runs (openai then gRPC,
// then the other way round, ...) pooled by CompareRuns.
absl::StatusOr<nlohmann::json> RunPoint(Setup& s, const std::vector<RequestSpec>& specs,
                                        double rate, int concurrency) {
  if (s.backends.size() == 1) return RunPointOn(s, 0, specs, rate, concurrency);
  std::vector<nlohmann::json> runs[2];  // [backend]
  const int rounds = std::max(1, absl::GetFlag(FLAGS_compare_rounds));
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < 2; ++i) {
      const size_t b = r % 2 == 0 ? i : 1 - i;
      absl::StatusOr<nlohmann::json> j = RunPointOn(s, b, specs, rate, concurrency);
      if (!j.ok()) return j.status();
      runs[b].push_back(*std::move(j));
    }
  }
  nlohmann::json j = CompareRuns(runs[0], runs[1]);  // backends: openai, grpc
  std::printf("%-36s %.1f / %.1f = %.3f (%d round%s)\n",
              "HTTP/gRPC output tok/s:", j["openai_output_throughput"].get<double>(),
              j["grpc_output_throughput"].get<double>(),
              j["openai_grpc_output_throughput_ratio"].get<double>(), rounds,
              rounds == 1 ? "" : "s");
  std::fflush(stdout);
  return j;
}

std::vector<std::string> CsvColumns(const std::vector<double>& percentiles, bool per_turn) {
  std::vector<std::string> cols;
  if (per_turn) {
    cols = {"mode",
            "turn",
            "count",
            "mean_prompt_tokens",
            "mean_cached_tokens",
            "mean_history_tokens",
            "cached_share",
            "mean_ttft_ms",
            "median_ttft_ms"};
    for (double p : percentiles) cols.push_back(PercentileKey(p) + "_ttft_ms");
    cols.push_back("mean_e2el_ms");
    return cols;
  }
  cols = {"backend",
          "request_rate",
          "max_concurrency",
          "completed",
          "failed",
          "cut_at_time_cap",
          "duration",
          "request_throughput",
          "request_goodput",
          "output_throughput",
          "total_token_throughput",
          "max_concurrent_requests",
          "openai_grpc_output_throughput_ratio"};
  for (const char* m : {"ttft", "tpot", "itl", "e2el"}) {
    cols.push_back(absl::StrCat("mean_", m, "_ms"));
    cols.push_back(absl::StrCat("median_", m, "_ms"));
    for (double p : percentiles) cols.push_back(absl::StrCat(PercentileKey(p), "_", m, "_ms"));
  }
  return cols;
}

absl::Status WriteJson(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return absl::OkStatus();
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  f.close();
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// random / shared_prefix: one run, or one per --sweep_concurrency / --sweep_rate value.
absl::StatusOr<nlohmann::json> RunRequests(Setup& s, std::vector<nlohmann::json>& rows) {
  RandomWorkloadOptions w;
  w.num_prompts = absl::GetFlag(FLAGS_num_prompts);
  w.input_len = absl::GetFlag(FLAGS_input_len);
  w.output_len = absl::GetFlag(FLAGS_output_len);
  w.range_ratio = absl::GetFlag(FLAGS_range_ratio);
  const bool shared = absl::GetFlag(FLAGS_workload) == "shared_prefix";
  w.prefix_len =
      absl::GetFlag(FLAGS_prefix_len) >= 0 ? absl::GetFlag(FLAGS_prefix_len) : (shared ? 256 : 0);
  w.num_prefixes = absl::GetFlag(FLAGS_num_prefixes);
  w.vocab = s.model.vocab_size();
  w.seed = absl::GetFlag(FLAGS_seed);
  absl::StatusOr<std::vector<RequestSpec>> specs = RandomRequests(w);
  if (!specs.ok()) return specs.status();
  s.meta["prefix_len"] = w.prefix_len;
  s.meta["num_prefixes"] = w.num_prefixes;
  absl::StatusOr<std::vector<double>> conc =
      ParseList("sweep_concurrency", absl::GetFlag(FLAGS_sweep_concurrency));
  absl::StatusOr<std::vector<double>> rates =
      ParseList("sweep_rate", absl::GetFlag(FLAGS_sweep_rate));
  if (!conc.ok()) return conc.status();
  if (!rates.ok()) return rates.status();
  if (!conc->empty() && !rates->empty()) {
    return absl::InvalidArgumentError("give --sweep_concurrency or --sweep_rate, not both");
  }
  std::vector<std::pair<double, int>> points;  // (rate, concurrency)
  for (double c : *conc)
    points.emplace_back(absl::GetFlag(FLAGS_request_rate), static_cast<int>(c));
  for (double r : *rates) points.emplace_back(r, absl::GetFlag(FLAGS_max_concurrency));
  if (points.empty()) {
    points.emplace_back(absl::GetFlag(FLAGS_request_rate), absl::GetFlag(FLAGS_max_concurrency));
  }
  if (static_cast<int64_t>(points.size()) * w.num_prompts > absl::GetFlag(FLAGS_max_requests)) {
    return absl::InvalidArgumentError(
        absl::StrCat(points.size(), " runs × ", w.num_prompts, " requests exceed --max_requests"));
  }
  for (const auto& [rate, c] : points) {
    absl::StatusOr<nlohmann::json> j = RunPoint(s, *specs, rate, c);
    if (!j.ok()) return j.status();
    rows.push_back(*std::move(j));
  }
  if (rows.size() == 1) return rows[0];
  nlohmann::json all = s.meta;
  all["sweep"] = conc->empty() ? "request_rate" : "max_concurrency";
  all["runs"] = rows;
  return all;
}

absl::StatusOr<nlohmann::json> RunConversations(Setup& s, std::vector<nlohmann::json>& rows) {
  ConversationOptions c;
  c.conversations = absl::GetFlag(FLAGS_conversations);
  c.turns = absl::GetFlag(FLAGS_turns);
  c.input_len = absl::GetFlag(FLAGS_input_len);
  c.first_turn_len = absl::GetFlag(FLAGS_first_turn_len);
  c.output_len = absl::GetFlag(FLAGS_output_len);
  c.range_ratio = absl::GetFlag(FLAGS_range_ratio);
  c.vocab = s.model.vocab_size();
  c.seed = absl::GetFlag(FLAGS_seed);
  absl::StatusOr<std::vector<Conversation>> convs = Conversations(c);
  if (!convs.ok()) return convs.status();
  std::vector<std::string> modes =
      absl::StrSplit(absl::GetFlag(FLAGS_multiturn_modes), ',', absl::SkipWhitespace());
  if (static_cast<int64_t>(modes.size()) * c.conversations * c.turns >
      absl::GetFlag(FLAGS_max_requests)) {
    return absl::InvalidArgumentError("conversations × turns × modes exceed --max_requests");
  }
  nlohmann::json all = s.meta;
  all["conversations"] = c.conversations;
  all["turns"] = c.turns;
  all["first_turn_len"] = c.first_turn_len > 0 ? c.first_turn_len : c.input_len;
  all["max_concurrency"] = absl::GetFlag(FLAGS_max_concurrency) > 0
                               ? nlohmann::json(absl::GetFlag(FLAGS_max_concurrency))
                               : nlohmann::json(nullptr);
  for (const std::string& mode : modes) {
    if (mode != "sessions" && mode != "history") {
      return absl::InvalidArgumentError(
          absl::StrCat("--multiturn_modes: unknown mode '", mode, "'"));
    }
    MultiTurnOptions o;
    o.with_sessions = mode == "sessions";
    o.max_concurrency = absl::GetFlag(FLAGS_max_concurrency);
    o.duration_s = absl::GetFlag(FLAGS_duration_s);
    o.temperature = absl::GetFlag(FLAGS_temperature);
    o.seed = absl::GetFlag(FLAGS_seed);
    o.progress = absl::GetFlag(FLAGS_progress);
    o.metrics = s.metrics;
    absl::StatusOr<nlohmann::json> j = RunMultiTurn(*s.client, *convs, o);
    if (!j.ok()) return j.status();
    PrintRun(absl::StrCat("multiturn, ", mode), *j);
    for (nlohmann::json row : (*j)["per_turn"]) {
      row["mode"] = mode;
      std::printf("  turn %2d: prompt %7.1f tok (cached %7.1f)  TTFT mean %8.2f ms  p90 %8.2f ms",
                  row["turn"].get<int>(), row["mean_prompt_tokens"].get<double>(),
                  row["mean_cached_tokens"].get<double>(), row["mean_ttft_ms"].get<double>(),
                  row.value("p90_ttft_ms", 0.0));
      if (row["cached_share"].is_number()) {
        std::printf("  resent %7.1f tok, %.2f%% cached", row["mean_history_tokens"].get<double>(),
                    100 * row["cached_share"].get<double>());
      }
      std::printf("\n");
      rows.push_back(row);
    }
    if (const nlohmann::json f = j->value("follow_ups", nlohmann::json()); f.is_object()) {
      std::printf("%-36s %d turns, TTFT mean %.2f ms, median %.2f ms\n",
                  "Follow-up turns (turn >= 2):", f["count"].get<int>(),
                  f["mean_ttft_ms"].get<double>(), f["median_ttft_ms"].get<double>());
      std::printf("%-36s %lld of %lld tokens (%.2f%%)\n",
                  "Resent history served from cache:", f["cached_tokens"].get<long long>(),
                  f["history_tokens"].get<long long>(),
                  f["cached_share"].is_number() ? 100 * f["cached_share"].get<double>() : 0.0);
    }
    std::fflush(stdout);
    all[mode] = *std::move(j);
  }
  return all;
}

// The backends of --backend and the model (vocab) they serve.
absl::Status ConnectBackends(Setup& s, const std::string& key, const std::string& workload) {
  const std::string backend = absl::GetFlag(FLAGS_backend);
  if (backend != "grpc" && backend != "openai" && backend != "compare") {
    return absl::InvalidArgumentError(absl::StrCat("--backend: unknown '", backend, "'"));
  }
  if (backend != "grpc" && workload == "multiturn") {
    return absl::InvalidArgumentError("--workload multiturn runs over gRPC only (--backend grpc)");
  }
  const double timeout = absl::GetFlag(FLAGS_ready_timeout_s);
  if (backend != "grpc") {
    absl::StatusOr<std::unique_ptr<OpenAiClient>> http =
        OpenAiClient::Connect(absl::GetFlag(FLAGS_http_server), key);
    if (!http.ok()) return http.status();
    s.http = *std::move(http);
    absl::StatusOr<std::string> id = s.http->WaitReady(timeout);
    if (!id.ok()) return id.status();
    s.http->set_model(*id);
    s.model.set_name(*id);
    s.backends.push_back(s.http.get());
    s.backend_names.push_back("openai");
  }
  if (backend == "openai" && absl::GetFlag(FLAGS_vocab_size) > 0) {
    s.model.set_vocab_size(absl::GetFlag(FLAGS_vocab_size));
    return absl::OkStatus();
  }
  absl::StatusOr<v1::ModelInfo> info = s.client->WaitReady(timeout);
  if (!info.ok()) return info.status();
  s.model = *info;
  if (absl::GetFlag(FLAGS_vocab_size) > 0) s.model.set_vocab_size(absl::GetFlag(FLAGS_vocab_size));
  if (backend != "openai") {
    s.backends.push_back(s.client.get());
    s.backend_names.push_back("grpc");
  }
  return absl::OkStatus();
}

absl::Status Warmup(Setup& s) {
  const int n = absl::GetFlag(FLAGS_num_warmups);
  if (n <= 0) return absl::OkStatus();
  RandomWorkloadOptions w;
  w.num_prompts = 1;
  w.input_len = absl::GetFlag(FLAGS_input_len);
  w.output_len = std::min(absl::GetFlag(FLAGS_output_len), 16);
  w.vocab = s.model.vocab_size();
  w.seed = absl::GetFlag(FLAGS_seed) + 12345;
  absl::StatusOr<std::vector<RequestSpec>> spec = RandomRequests(w);
  if (!spec.ok()) return spec.status();
  const v1::GenerateRequest req = MakeRequest((*spec)[0], 0, 0, "");
  for (size_t b = 0; b < s.backends.size(); ++b) {
    for (int i = 0; i < n; ++i) {
      const RequestResult r =
          s.backends[b]->Run(req, Clock::now(), Clock::now() + std::chrono::seconds(120), false);
      if (!r.success) {
        return absl::UnavailableError(
            absl::StrCat(s.backend_names[b], " warm-up request failed: ", r.error));
      }
    }
  }
  return absl::OkStatus();
}

int Main() {
  Setup s;
  std::string key = absl::GetFlag(FLAGS_api_key);
  if (key.empty() && std::getenv("LINFER_API_KEY") != nullptr) key = std::getenv("LINFER_API_KEY");
  absl::StatusOr<std::unique_ptr<BenchClient>> client =
      BenchClient::Connect(absl::GetFlag(FLAGS_server), key);
  if (!client.ok()) return Fail(client.status());
  s.client = *std::move(client);
  absl::StatusOr<Slo> slo = ParseGoodput(absl::GetFlag(FLAGS_goodput));
  absl::StatusOr<std::vector<double>> pct =
      ParsePercentiles(absl::GetFlag(FLAGS_metric_percentiles));
  if (!slo.ok()) return Fail(slo.status());
  if (!pct.ok()) return Fail(pct.status());
  s.metrics.slo = *slo;
  s.metrics.percentiles = *pct;
  s.metrics.detailed = absl::GetFlag(FLAGS_save_detailed);
  if (!(absl::GetFlag(FLAGS_duration_s) > 0))
    return Fail(absl::InvalidArgumentError("--duration_s must be > 0"));
  const std::string workload = absl::GetFlag(FLAGS_workload);
  if (absl::Status st = ConnectBackends(s, key, workload); !st.ok()) return Fail(st);
  s.meta = {{"date", Date()},
            {"backend", absl::GetFlag(FLAGS_backend)},
            {"label", absl::GetFlag(FLAGS_label)},
            {"model_id", s.model.name()},
            {"device", s.model.device()},
            {"workload", workload},
            {"num_prompts", absl::GetFlag(FLAGS_num_prompts)},
            {"input_len", absl::GetFlag(FLAGS_input_len)},
            {"output_len", absl::GetFlag(FLAGS_output_len)},
            {"range_ratio", absl::GetFlag(FLAGS_range_ratio)},
            {"request_rate", RateJson(absl::GetFlag(FLAGS_request_rate))},
            {"burstiness", absl::GetFlag(FLAGS_burstiness)},
            {"seed", absl::GetFlag(FLAGS_seed)},
            {"num_warmups", absl::GetFlag(FLAGS_num_warmups)}};
  if (absl::Status st = Warmup(s); !st.ok()) return Fail(st);
  std::vector<nlohmann::json> rows;
  absl::StatusOr<nlohmann::json> result;
  if (workload == "multiturn") {
    result = RunConversations(s, rows);
  } else if (workload == "random" || workload == "shared_prefix") {
    result = RunRequests(s, rows);
  } else {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--workload: unknown '", workload, "'")));
  }
  if (!result.ok()) return Fail(result.status());
  if (absl::Status st = WriteJson(absl::GetFlag(FLAGS_result_json), *result); !st.ok())
    return Fail(st);
  if (!absl::GetFlag(FLAGS_csv).empty()) {
    absl::Status st = WriteCsv(absl::GetFlag(FLAGS_csv),
                               CsvColumns(s.metrics.percentiles, workload == "multiturn"), rows);
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

}  // namespace
}  // namespace linfer::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "linfer_bench --server 127.0.0.1:PORT [--backend grpc|openai|compare --http_server "
      "127.0.0.1:PORT] [--workload random|shared_prefix|multiturn] ...\n"
      "Load generator for linfer, measured as `vllm bench serve` measures (tests/bench/REPORT.md)");
  absl::ParseCommandLine(argc, argv);
  return linfer::bench::Main();
}
