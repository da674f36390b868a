// The dispatch loop: sleep until each arrival, wait for a concurrency slot, start the stream.
#include "tests/bench/loadgen/runner.h"

#include <algorithm>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "tests/bench/loadgen/progress.h"

namespace linfer::bench {
namespace {

Clock::duration FromSeconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

DispatchOutput Dispatch(StreamClient& client, const std::vector<v1::GenerateRequest>& requests,
                        const DispatchOptions& options) {
  const int n = static_cast<int>(requests.size());
  std::vector<RequestResult> results(n);
  absl::Mutex mu;
  int in_flight = 0;
  int sent = 0;
  const int cap = options.max_concurrency > 0 ? options.max_concurrency : n + 1;
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point deadline = t0 + FromSeconds(options.duration_s);
  Clock::time_point end = t0;
  {
    ProgressBar bar(options.label, n, options.progress);
    for (; sent < n; ++sent) {
      const Clock::time_point at = t0 + FromSeconds(options.arrival_s[sent]);
      if (at >= deadline) break;
      std::this_thread::sleep_until(at);
      {
        absl::MutexLock lock(&mu);
        const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
        auto has_slot = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return in_flight < cap; };
        if (!mu.AwaitWithTimeout(absl::Condition(&has_slot), absl::Seconds(std::max(0.0, left)))) {
          break;
        }
        ++in_flight;
      }
      bar.Started();
      client.Start(requests[sent], t0, deadline, /*keep_output_ids=*/false, &results[sent],
                   [&mu, &in_flight, &bar, &results, i = sent] {
                     bar.Finished(results[i].success);
                     absl::MutexLock lock(&mu);
                     --in_flight;
                   });
    }
    absl::MutexLock lock(&mu);
    auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return in_flight == 0; };
    mu.Await(absl::Condition(&idle));
    end = Clock::now();
  }
  DispatchOutput out;
  out.duration_s = std::chrono::duration<double>(end - t0).count();
  out.not_sent = n - sent;
  results.resize(sent);
  out.results = std::move(results);
  return out;
}

}  // namespace linfer::bench
