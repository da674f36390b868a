// Stress: 1,000 requests from 4 threads with random lengths, random cancellations and random
// session use (half of the session turns with stop strings, whose state copies take free slots
// and move to host RAM when the slots are needed), on 8 slots with a tiny host budget and a disk
// tier (so states keep moving); on a recurrent model and on a hybrid with a small KV cache.
// Afterwards every request got exactly one final event, every slot is free once the sessions are
// deleted, and the counters add up. Run it under AddressSanitizer too (LINFER_SANITIZE).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/device_memory.h"
#include "models/kv_cache.h"
#include "tests/engine/engine_testing.h"

namespace linfer {
namespace {

// Text for stop strings: every token one of 8 characters (id mod 8), so that 2–3-character stop
// strings begin (and text is held back, and state copies kept) every few tokens.
constexpr char kChars[] = "abcde .\n";

class CharText : public Detokenizer {
 public:
  std::string Push(int32_t token) override { return std::string(1, kChars[token % 8]); }
  std::string Flush() override { return ""; }
  bool Settled() const override { return true; }
};

EngineOptions WithText(EngineOptions opts) {
  opts.detokenizer = [](absl::Span<const int32_t>) { return std::make_unique<CharText>(); };
  opts.encoder = [](absl::string_view text) -> absl::StatusOr<std::vector<int32_t>> {
    std::vector<int32_t> ids;
    for (const char c : text) ids.push_back(static_cast<int32_t>(std::string_view(kChars).find(c)));
    return ids;
  };
  return opts;
}

void RunStress(std::unique_ptr<Engine> engine) {
  constexpr int kSessions = 24, kThreads = 4, kPerThread = 250;
  for (int i = 0; i < kSessions; ++i) {
    absl::StatusOr<std::string> id = engine->CreateSession(absl::StrCat("s", i), "");
    ASSERT_TRUE(id.ok()) << id.status();
  }
  std::atomic<int> finals{0}, accepted{0}, busy{0}, gone{0}, errors{0}, events_after_final{0};
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
      if (!r.session_id.empty() && rng() % 2 == 0) {
        std::string stop(2 + rng() % 2, 'a');
        for (char& c : stop) c = kChars[rng() % 8];
        r.stop.stop_strings = {stop};
      }
      auto count = std::make_shared<std::atomic<int>>(0);
      absl::StatusOr<RequestId> id = engine->Submit(r, [&, count](TokenEvent e) {
        if (count->load() > 0) ++events_after_final;
        if (e.finish != Finish::kNone) {
          ++*count;
          ++finals;
          if (e.error.code() == absl::StatusCode::kFailedPrecondition) {
            ++busy;
          } else if (e.error.code() == absl::StatusCode::kNotFound) {
            ++gone;  // evicted from the full disk tier
          } else if (e.finish == Finish::kError) {
            ++errors;
          }
        }
      });
      if (id.ok()) {
        ++accepted;
        if (rng() % 10 == 0) engine->Cancel(*id);
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
  EXPECT_EQ(accepted.load(), kThreads * kPerThread);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(accepted - busy - gone, 500);
  EngineStats stats = engine->Stats();
  int64_t finished = 0;
  for (const auto& [why, n] : stats.finished_total) finished += n;
  EXPECT_EQ(finished, accepted.load());
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
  absl::StatusOr<std::vector<SessionInfo>> sessions = engine->ListSessions("");
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  for (const SessionInfo& s : *sessions) {
    EXPECT_FALSE(s.busy) << s.id;
    EXPECT_TRUE(engine->DeleteSession(s.id, "").ok());
  }
  // Saved prefixes of a hybrid hold KV blocks; without them nothing may be left.
  EXPECT_TRUE(engine->ResetPrefixCache().ok());
  stats = engine->Stats();
  EXPECT_EQ(stats.slots_used, 0);
  EXPECT_EQ(stats.kv_blocks_used, 0);
  EXPECT_EQ(stats.sessions.host_bytes, 0);
  EXPECT_EQ(stats.sessions.disk_bytes, 0);
  EXPECT_GT(stats.state_copies.slot + stats.state_copies.host, 0);
  std::printf(
      "accepted %d, busy %d, evicted-before-use %d, evicted %lld, preemptions %lld; state copies: "
      "%lld to slots (%lld of them moved to host RAM), %lld to host RAM\n",
      accepted.load(), busy.load(), gone.load(),
      static_cast<long long>(stats.sessions_evicted_total),
      static_cast<long long>(stats.preemptions_total),
      static_cast<long long>(stats.state_copies.slot),
      static_cast<long long>(stats.state_copies.moved),
      static_cast<long long>(stats.state_copies.host));
}

// 8 slots, three idle gdn_default states (12,288 bytes each) in RAM, the rest on a disk tier of
// ten (and a few evictions).
EngineOptions RecurrentStressOptions(const std::string& disk_dir) {
  EngineOptions opts;
  opts.max_slots = 8;
  opts.tiers.host_bytes = 3 * 12288;
  opts.tiers.disk_dir = testing_util::FreshDir(disk_dir);
  opts.tiers.disk_bytes = 10 * 12300;
  opts.scheduler.max_step_tokens = 96;
  return opts;
}

TEST(EngineStressTest, ThousandRandomRequests) {
  RunStress(testing_util::MakeEngine(WithText(RecurrentStressOptions("linfer_stress_disk"))));
}

// The same on a Qwen3.5-layout hybrid whose KV cache holds 4,096 tokens: sessions grow to
// hundreds of tokens, so admission waits for blocks, idle sessions are offloaded with their KV
// and running sequences are preempted; the prefix cache saves and evicts states all along;
// afterwards every slot and every block is free.
TEST(EngineStressTest, ThousandRandomRequestsOnAHybridUnderKvPressure) {
  const std::string dir = testing_util::FixtureSetDir(LINFER_HYBRID_FIXTURES) + "/qwen35_text_f32";
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t per_token = KvBytesPerToken((*model)->state_specs());
  const int64_t session_bytes = (*model)->state_bytes() + 200 * per_token;
  EngineOptions opts;
  opts.state_memory_bytes = 64 << 20;
  opts.max_slots = 8;
  opts.kv_memory_bytes = 4096 * per_token;
  opts.prefix_cache = MakePrefixCacheOptions(4 * session_bytes,
                                             64);  // one-off requests also save and resume prefixes
  opts.tiers.host_bytes = 3 * session_bytes;
  opts.tiers.disk_dir = testing_util::FreshDir("linfer_stress_hybrid_disk");
  opts.tiers.disk_bytes = 10 * session_bytes;
  opts.scheduler.max_step_tokens = 96;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(*std::move(model), WithText(opts));
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_EQ((*engine)->options().max_model_len, 4096);
  RunStress(*std::move(engine));
}

// The recurrent stress run on the GPU (bf16 weights, f32 states): besides every slot being free,
// no device memory stays behind once the engine is gone. A first engine's life loads the CUDA
// modules and cuBLASLt's own state; the second one is measured (cudaMemGetInfo, whole device).
TEST(EngineStressTest, ThousandRandomRequestsOnTheGpuLeaveNoDeviceMemory) {
  if (!CudaAvailable()) {
    GTEST_SKIP() << "no CUDA device (or a build without CUDA): compiled in and skipped";
  }
  const LoadOptions load = testing_util::ServingLoadOptions(Device::kCuda);
  {
    auto warm = testing_util::MakeEngineOn(
        load, WithText(RecurrentStressOptions("linfer_stress_gpu_disk")));
    ASSERT_NE(warm, nullptr);
    testing_util::Run(*warm, testing_util::Greedy(testing_util::Prompt(80, 1), 4));
  }
  absl::StatusOr<int64_t> before = DeviceMemoryInUse(Device::kCuda);
  ASSERT_TRUE(before.ok()) << before.status();
  auto engine = testing_util::MakeEngineOn(
      load, WithText(RecurrentStressOptions("linfer_stress_gpu_disk_2")));
  ASSERT_NE(engine, nullptr);
  RunStress(std::move(engine));
  absl::StatusOr<int64_t> after = DeviceMemoryInUse(Device::kCuda);
  ASSERT_TRUE(after.ok()) << after.status();
  std::printf("device memory in use: %lld bytes before, %lld after\n",
              static_cast<long long>(*before), static_cast<long long>(*after));
  EXPECT_LE(*after - *before, int64_t{2} << 20) << "device memory left behind by the engine";
}

}  // namespace
}  // namespace linfer
