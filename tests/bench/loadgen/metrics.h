// Run metrics computed as `vllm bench serve` computes them (SERVING.md §5), under its JSON key
// names: counts, throughputs, TTFT / TPOT / ITL / E2EL statistics, goodput, peak concurrency.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "tests/bench/loadgen/client.h"

namespace linfer::bench {

// Service-level objectives in milliseconds; negative: not set.
struct Slo {
  double ttft_ms = -1, tpot_ms = -1, e2el_ms = -1;
  bool any() const { return ttft_ms >= 0 || tpot_ms >= 0 || e2el_ms >= 0; }
};

// "ttft:500,tpot:50,e2el:2000" (any subset; commas or spaces). Empty: no SLO.
absl::StatusOr<Slo> ParseGoodput(absl::string_view spec);

// "90,99" → {90, 99}; each in (0, 100].
absl::StatusOr<std::vector<double>> ParsePercentiles(absl::string_view spec);

// numpy.percentile's default (linear interpolation between order statistics); 0 when empty.
double Percentile(std::vector<double> values, double p);

// "p99", "p99.9": vLLM's key for a percentile.
std::string PercentileKey(double p);

// Largest number of requests in flight at once, by a sweep over [start, start + latency).
int PeakConcurrency(const std::vector<RequestResult>& results);

// The busiest one-second bin of token-carrying messages (vLLM's max_output_tokens_per_s).
double MaxOutputTokensPerSecond(const std::vector<RequestResult>& results);

struct MetricsOptions {
  Slo slo;
  std::vector<double> percentiles = {90, 99};
  bool detailed = false;  // add the per-request arrays (input_lens, ttfts, itls, ...)
};

// The metrics of one run; `duration_s` is first send → last finish.
nlohmann::json Summarize(const std::vector<RequestResult>& results, double duration_s,
                         const MetricsOptions& options);

// Writes `rows` as CSV with the given columns (missing or null values are left empty).
absl::Status WriteCsv(const std::string& path, const std::vector<std::string>& columns,
                      const std::vector<nlohmann::json>& rows);

}  // namespace linfer::bench
