// Request send times drawn the way `vllm bench serve` draws them (SERVING.md §5): i.i.d. gamma
// gaps, cumulated, then rescaled so that the last arrival falls at exactly N / rate.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"

namespace linfer::bench {

struct ArrivalOptions {
  // Requests per second; +inf sends every request at t = 0 (only --max_concurrency throttles).
  double request_rate = std::numeric_limits<double>::infinity();
  // Gamma shape: 1 is a Poisson process, < 1 burstier, > 1 more regular, +inf a constant gap.
  double burstiness = 1.0;
  uint64_t seed = 0;
};

// Send offsets in seconds from the start of the run, non-decreasing, one per request.
// InvalidArgument for n < 0, a rate ≤ 0 or a burstiness ≤ 0.
absl::StatusOr<std::vector<double>> ArrivalTimes(int n, const ArrivalOptions& options);

}  // namespace linfer::bench
