// A periodic log line of throughput and queue state, like vLLM's: prompt and generation tokens/s
// since the last line, running and waiting requests, slot use and resident sessions.
#pragma once

#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"

namespace linfer {

class StatsLogger {
 public:
  StatsLogger(Engine* engine, absl::Duration interval);
  ~StatsLogger();

 private:
  void Run();
  Engine* engine_;
  const absl::Duration interval_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace linfer
