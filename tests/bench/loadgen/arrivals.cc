// Gamma(burstiness, 1/(rate·burstiness)) inter-arrival gaps, rescaled to end at N / rate.
#include "tests/bench/loadgen/arrivals.h"

#include <cmath>
#include <random>

namespace linfer::bench {

absl::StatusOr<std::vector<double>> ArrivalTimes(int n, const ArrivalOptions& options) {
  if (n < 0) return absl::InvalidArgumentError("the number of requests must be ≥ 0");
  if (!(options.request_rate > 0)) {
    return absl::InvalidArgumentError("--request_rate must be > 0 (inf: all at once)");
  }
  if (!(options.burstiness > 0)) return absl::InvalidArgumentError("--burstiness must be > 0");
  std::vector<double> t(n, 0.0);
  if (std::isinf(options.request_rate) || n == 0) return t;
  std::mt19937_64 rng(options.seed);
  const double rate = options.request_rate;
  const double k = options.burstiness;
  std::gamma_distribution<double> gap(std::isinf(k) ? 1.0 : k,
                                      std::isinf(k) ? 1.0 : 1.0 / (rate * k));
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    sum += std::isinf(k) ? 1.0 / rate : gap(rng);
    t[i] = sum;
  }
  // Rescale so the last request is sent at n / rate, as vLLM does: the offered load is then the
  // same for every seed.
  if (sum > 0) {
    const double scale = (n / rate) / sum;
    for (double& x : t) x *= scale;
  }
  return t;
}

}  // namespace linfer::bench
