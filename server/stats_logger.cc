// StatsLogger: one line per interval, only while something happens.
#include "server/stats_logger.h"

#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace linfer {

StatsLogger::StatsLogger(Engine* engine, absl::Duration interval)
    : engine_(engine), interval_(interval), thread_([this] { Run(); }) {}

StatsLogger::~StatsLogger() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void StatsLogger::Run() {
  EngineStats last = engine_->Stats();
  absl::Time t0 = absl::Now();
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), interval_)) return;
    }
    const EngineStats now = engine_->Stats();
    const absl::Time t1 = absl::Now();
    const double dt = absl::ToDoubleSeconds(t1 - t0);
    const int64_t prompt = now.prompt_tokens_total - last.prompt_tokens_total;
    const int64_t gen = now.generation_tokens_total - last.generation_tokens_total;
    if (prompt > 0 || gen > 0 || now.running > 0 || now.waiting > 0) {
      Log(LogLevel::kInfo,
          absl::StrFormat("prompt throughput: %.1f tokens/s, generation throughput: %.1f tokens/s, "
                          "running: %d reqs, waiting: %d reqs, slots used: %d/%d (%.1f%%), "
                          "sessions: %d slot, %d host, %d disk",
                          prompt / dt, gen / dt, now.running, now.waiting, now.slots_used,
                          now.slots_total, 100.0 * now.slots_used / std::max(1, now.slots_total),
                          now.sessions.slot, now.sessions.host, now.sessions.disk));
    }
    last = now;
    t0 = t1;
  }
}

}  // namespace linfer
