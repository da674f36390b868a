// Stress: 1,000 requests from 4 threads with random lengths, random cancellations and random
// session use, on 8 slots with a tiny host budget and a disk tier (so states keep moving).
// Afterwards every request got exactly one final event, every slot is free once the sessions are
// deleted, and the counters add up. Run it under AddressSanitizer too (LINFER_SANITIZE).
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/engine/engine_testing.h"

namespace linfer {
namespace {

TEST(EngineStressTest, ThousandRandomRequests) {
  EngineOptions opts;
  opts.max_slots = 8;
  opts.tiers.host_bytes = 3 * 12288;  // three idle states in RAM, the rest on disk
  opts.tiers.disk_dir = ::testing::TempDir() + "/linfer_stress_disk";
  opts.tiers.disk_bytes = 10 * 12300;  // and a few evictions
  opts.scheduler.max_step_tokens = 96;
  auto engine = testing_util::MakeEngine(opts);
  constexpr int kSessions = 24, kThreads = 4, kPerThread = 250;
  for (int i = 0; i < kSessions; ++i) {
    ASSERT_TRUE(engine->CreateSession(absl::StrCat("s", i), "").ok());
  }
  std::atomic<int> finals{0}, accepted{0}, busy{0}, gone{0}, events_after_final{0};
  auto worker = [&](int t) {
    std::mt19937 rng(1000 + t);
    std::vector<std::pair<RequestId, std::shared_ptr<std::atomic<int>>>> mine;
    for (int i = 0; i < kPerThread; ++i) {
      GenerateRequest r;
      r.prompt = testing_util::Prompt(1 + rng() % 90, rng());
      r.stop.max_tokens = 1 + rng() % 12;
      r.stop.ignore_eos = rng() % 2;
      r.sampling.temperature = (rng() % 3) * 0.5f;
      r.sampling.seed = rng();
      r.priority = rng() % 3;
      if (rng() % 4 == 0) r.session_id = absl::StrCat("s", rng() % kSessions);
      auto count = std::make_shared<std::atomic<int>>(0);
      absl::StatusOr<RequestId> id = engine->Submit(r, [&, count](TokenEvent e) {
        if (count->load() > 0) ++events_after_final;
        if (e.finish != Finish::kNone) {
          ++*count;
          ++finals;
        }
      });
      if (id.ok()) {
        ++accepted;
        if (rng() % 10 == 0) engine->Cancel(*id);
      } else if (id.status().code() == absl::StatusCode::kFailedPrecondition) {
        ++busy;
      } else if (id.status().code() == absl::StatusCode::kNotFound) {
        ++gone;  // evicted from the full disk tier
      } else {
        ADD_FAILURE() << id.status();
      }
      if (rng() % 7 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  engine->Stop(absl::Seconds(120));
  EXPECT_EQ(finals.load(), accepted.load());
  EXPECT_EQ(events_after_final.load(), 0);
  EXPECT_EQ(accepted + busy + gone, kThreads * kPerThread);
  EXPECT_GT(accepted.load(), 500);
  EngineStats stats = engine->Stats();
  int64_t finished = 0;
  for (const auto& [why, n] : stats.finished_total) finished += n;
  EXPECT_EQ(finished, accepted.load());
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
  for (const SessionInfo& s : engine->ListSessions("")) {
    EXPECT_FALSE(s.busy) << s.id;
    EXPECT_TRUE(engine->DeleteSession(s.id, "").ok());
  }
  stats = engine->Stats();
  EXPECT_EQ(stats.slots_used, 0);
  EXPECT_EQ(stats.sessions.host_bytes, 0);
  EXPECT_EQ(stats.sessions.disk_bytes, 0);
  std::printf("accepted %d, busy %d, evicted-before-use %d, evicted %lld, preemptions %lld\n",
              accepted.load(), busy.load(), gone.load(),
              static_cast<long long>(stats.sessions_evicted_total),
              static_cast<long long>(stats.preemptions_total));
}

}  // namespace
}  // namespace linfer
