// The engine resuming requests without a session from the prefix cache — same tokens and
// logprobs as computing them cold, hits at chunk and request boundaries, key isolation,
// eviction, a session's first request, racing requests, a hybrid (state + KV), the disk tier,
// and the device tier (saved states kept in slots) under slot pressure and random traffic.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "engine/prefix_cache.h"
#include "tests/engine/engine_testing.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {
// n token ids in [0, 64) (the smallest fixture vocabulary).
std::vector<int32_t> Prompt(int n, uint32_t seed) {
  std::vector<int32_t> p = testing_util::Prompt(n, seed);
  for (int32_t& t : p) t %= 64;
  return p;
}

using testing_util::Greedy;

// Batch-invariant unless told otherwise: then a resumed request is bit-identical to the cold one
// (the default mode agrees to f32 rounding: OpenBLAS and the chunked form round by batch shape).
// device_tier: saved states stay in free slots (the default) or all go to host RAM.
EngineOptions WithCache(int64_t budget = 64 << 20, int64_t interval = 64,
                        bool batch_invariant = true, bool device_tier = true) {
  EngineOptions o;
  o.prefix_cache = MakePrefixCacheOptions(budget, interval);
  o.prefix_cache.device_tier = device_tier;
  o.scheduler.max_step_tokens = 64;
  o.batch_invariant = batch_invariant;
  return o;
}

constexpr double kExact = 0.0;

// No interval snapshots, and whole prompts in one step: only branch points cut a prompt's chunks.
EngineOptions BranchPointsOnly(bool device_tier = true) {
  EngineOptions o = WithCache(64 << 20, 0, true, device_tier);
  o.scheduler.max_step_tokens = 512;
  return o;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A client that resends the conversation: the second turn reuses prompt + completion and equals
// the same request on an engine without the cache.
void ExpectResumedEqualsCold(Engine& cached, Engine& cold, double tol = kExact) {
  const std::vector<int32_t> p = Prompt(200, 11);
  testing_util::Result t1 = testing_util::Run(cached, Greedy(p, 8));
  EXPECT_EQ(t1.usage.cached_tokens, 0);
  const std::vector<int32_t> turn2 = Concat(Concat(p, t1.tokens), Prompt(30, 12));
  testing_util::Result warm = testing_util::Run(cached, Greedy(turn2, 8));
  testing_util::Result ref = testing_util::Run(cold, Greedy(turn2, 8));
  EXPECT_EQ(warm.usage.cached_tokens, 200 + 7);  // the last sampled token was never fed
  EXPECT_EQ(ref.usage.cached_tokens, 0);
  EXPECT_EQ(warm.tokens, ref.tokens);
  testing_util::ExpectLogprobsNear(warm, ref, tol);
  // Seeded sampling too.
  GenerateRequest r = Greedy(turn2, 12);
  r.sampling.temperature = 0.9f;
  r.sampling.seed = 77;
  testing_util::Result sw = testing_util::Run(cached, r), sr = testing_util::Run(cold, r);
  EXPECT_GT(sw.usage.cached_tokens, 0);
  EXPECT_EQ(sw.tokens, sr.tokens);
  testing_util::ExpectLogprobsNear(sw, sr, tol);
}

TEST(PrefixCacheEngineTest, ResumedEqualsColdOnEveryFamily) {
  for (const char* fixture : {"gdn_default", "deltanet_default", "gla_default", "retnet_default",
                              "linear_attn_default"}) {
    for (const bool device_tier : {true, false}) {
      SCOPED_TRACE(std::string(fixture) + (device_tier ? " / device tier" : " / host RAM"));
      auto cached = testing_util::MakeEngine(WithCache(64 << 20, 64, true, device_tier), fixture);
      auto cold = testing_util::MakeEngine(WithCache(0), fixture);
      ExpectResumedEqualsCold(*cached, *cold);
      const PrefixCacheStats st = cached->Stats().prefix_cache;
      EXPECT_EQ(st.device_entries > 0, device_tier);
      EXPECT_EQ(st.entries > 0, !device_tier);
      EXPECT_EQ(cached->Stats().slots_used, 0);
    }
  }
}

// Batch-invariant engines with and without the prefix cache on the checkpoint in `dir`: a resumed
// turn, and a session fed turn by turn against one prompt of the whole conversation, are
// bit-identical to the cold computation.
void ExpectResumedAndContinuedEqualCold(const std::string& dir) {
  auto cached = testing_util::MakeEngine(WithCache(), dir);
  auto cold = testing_util::MakeEngine(WithCache(0), dir);
  ASSERT_TRUE(cached != nullptr && cold != nullptr);
  ExpectResumedEqualsCold(*cached, *cold);
  ASSERT_TRUE(cached->CreateSession("s", "").ok());
  const std::vector<int32_t> a = Prompt(90, 5), b = Prompt(40, 6);
  GenerateRequest r1 = Greedy(a, 3);
  r1.session_id = "s";
  testing_util::Result t1 = testing_util::Run(*cached, r1);
  GenerateRequest r2 = Greedy(b, 5);
  r2.session_id = "s";
  testing_util::Result t2 = testing_util::Run(*cached, r2);
  const std::vector<int32_t> whole = Concat(Concat(a, t1.tokens), b);
  testing_util::Result one = testing_util::Run(*cold, Greedy(whole, 5));
  EXPECT_EQ(t2.tokens, one.tokens);
  testing_util::ExpectLogprobsNear(t2, one, kExact);
}

// RWKV-7, Mamba2 (HF and fla layouts) and Based/ReBased (linear_attn feature maps): a resumed turn
// and a continued session are bit-identical to the cold computation.
TEST(PrefixCacheEngineTest, ResumedEqualsColdOnTheNewerFamilies) {
  for (const char* name : {"rwkv7_default", "rwkv7_legacy_x_x", "mamba2_hf_default",
                           "mamba2_fla_groups2", "linear_attn_taylor", "linear_attn_rebased"}) {
    SCOPED_TRACE(name);
    const std::string dir =
        testing_util::FixtureSetDir(LINFER_FAMILY_FIXTURES) + "/" + std::string(name);
    ExpectResumedAndContinuedEqualCold(dir);
  }
}

// Qwen3.5 MoE and Qwen3-Next (the experts' products grouped by expert, each token's sum in choice
// order): the same, whatever other tokens shared the experts' products.
TEST(PrefixCacheEngineTest, ResumedEqualsColdOnMixtureOfExperts) {
  for (const char* name :
       {"qwen35moe_text_fused", "qwen35moe_vlm_bf16_per_expert", "qwen3next_bf16_step2_unnormed"}) {
    SCOPED_TRACE(name);
    const std::string dir =
        testing_util::FixtureSetDir(LINFER_HYBRID_FIXTURES) + "/" + std::string(name);
    ExpectResumedAndContinuedEqualCold(dir);
  }
}

TEST(PrefixCacheEngineTest, DefaultModeAgreesToRounding) {
  for (const char* fixture : {"gdn_default", "gla_default"}) {
    SCOPED_TRACE(fixture);
    auto cached = testing_util::MakeEngine(WithCache(64 << 20, 64, false), fixture);
    auto cold = testing_util::MakeEngine(WithCache(0, 64, false), fixture);
    ExpectResumedEqualsCold(*cached, *cold, 1e-4);
  }
}

void ChunkBoundaryAndPromptEndSnapshots(bool device_tier) {
  auto engine = testing_util::MakeEngine(WithCache(64 << 20, 64, true, device_tier));
  auto cold = testing_util::MakeEngine(WithCache(0));
  const std::vector<int32_t> p = Prompt(300, 21);
  absl::Mutex mu;
  std::vector<StepRecord> steps;
  engine->SetStepObserver([&](const StepRecord& r) {
    absl::MutexLock l(&mu);
    steps.push_back(r);
  });
  testing_util::Run(*engine, Greedy(p, 2));  // saves at 64, 128, 192, 256, 300 and 301
  const PrefixCacheStats saved = engine->Stats().prefix_cache;
  EXPECT_EQ(saved.entries + saved.device_entries, 6);
  EXPECT_EQ(saved.device_entries, device_tier ? 6 : 0);
  // The step time's shares: the snapshots (the one at the request's end too, in the step that
  // ends it, when it copies the state: the device tier keeps the slot as it is) are counted apart
  // from the forward passes.
  {
    absl::MutexLock l(&mu);
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.back().finished, 1);
    if (!device_tier) {
      EXPECT_GT(steps.back().snapshot_seconds, 0.0);
    }
    double snapshots = 0.0;
    for (const StepRecord& r : steps) snapshots += r.snapshot_seconds;
    EXPECT_EQ(snapshots, engine->Stats().snapshot_seconds_total);
  }
  const EngineStats st = engine->Stats();
  EXPECT_GT(st.snapshot_seconds_total, 0.0);
  EXPECT_GT(st.forward_seconds_total, 0.0);
  EXPECT_LE(st.forward_seconds_total + st.snapshot_seconds_total + st.scheduler_seconds_total,
            st.step_seconds_total);
  // Shares the first 150 tokens: resumes at 128.
  std::vector<int32_t> q(p.begin(), p.begin() + 150);
  q = Concat(q, Prompt(20, 22));
  testing_util::Result a = testing_util::Run(*engine, Greedy(q, 6));
  EXPECT_EQ(a.usage.cached_tokens, 128);
  testing_util::Result b = testing_util::Run(*cold, Greedy(q, 6));
  EXPECT_EQ(a.tokens, b.tokens);
  testing_util::ExpectLogprobsNear(a, b, kExact);
  EXPECT_EQ(cold->Stats().snapshot_seconds_total, 0.0);  // no cache, no snapshots
  EXPECT_GT(cold->Stats().forward_seconds_total, 0.0);
  // The same prompt again: everything but its last token comes from the chunk snapshot at 256
  // (the prompt-end one would leave nothing to compute).
  testing_util::Result c = testing_util::Run(*engine, Greedy(p, 2));
  EXPECT_EQ(c.usage.cached_tokens, 256);
}

TEST(PrefixCacheEngineTest, ChunkBoundaryAndPromptEndSnapshots) {
  for (const bool device_tier : {true, false}) {
    SCOPED_TRACE(device_tier ? "device tier" : "host RAM");
    ChunkBoundaryAndPromptEndSnapshots(device_tier);
  }
}

// Prompts that share a 150-token beginning, then differ, with no interval snapshots and whole
// prompts in one step: the second is saved where it parts from the first (128, its chunk cut
// there), the third resumes from that and equals a cold run; an identical resend likewise.
TEST(PrefixCacheEngineTest, PromptsThatShareABeginningResumeFromWhereTheyPart) {
  for (const bool device_tier : {true, false}) {
    SCOPED_TRACE(device_tier ? "device tier" : "host RAM");
    auto cached = testing_util::MakeEngine(BranchPointsOnly(device_tier));
    auto cold = testing_util::MakeEngine(WithCache(0));
    const std::vector<int32_t> system = Prompt(150, 41);
    std::vector<int64_t> reused;
    for (uint32_t user = 0; user < 3; ++user) {
      const GenerateRequest r = Greedy(Concat(system, Prompt(40, 50 + user)), 6);
      const testing_util::Result warm = testing_util::Run(*cached, r);
      reused.push_back(warm.usage.cached_tokens);
      const testing_util::Result ref = testing_util::Run(*cold, r);
      EXPECT_EQ(warm.tokens, ref.tokens) << "request " << user;
      testing_util::ExpectLogprobsNear(warm, ref, kExact);
    }
    EXPECT_EQ(reused, (std::vector<int64_t>{0, 0, 128}));
    EXPECT_EQ(cached->Stats().prefix_cache.branch_points, 1);
    // A session's first turn resumes from it too.
    ASSERT_TRUE(cached->CreateSession("chat", "").ok());
    EXPECT_EQ(testing_util::Run(*cached, Greedy(Concat(system, Prompt(40, 59)), 2, "chat"))
                  .usage.cached_tokens,
              128);
    // An identical resend of a 100-token prompt: the third send resumes from 64.
    const GenerateRequest same = Greedy(Prompt(100, 60), 4);
    std::vector<int64_t> again;
    for (int i = 0; i < 3; ++i)
      again.push_back(testing_util::Run(*cached, same).usage.cached_tokens);
    EXPECT_EQ(again, (std::vector<int64_t>{0, 0, 64}));
  }
}

// Sessions only: each session's first turn shares the system prompt; the second saves it where
// it parts from the first (the session's state stays its own), the third starts from there.
TEST(PrefixCacheEngineTest, SessionsFirstTurnsShareTheirBeginning) {
  auto cached = testing_util::MakeEngine(BranchPointsOnly());
  auto cold = testing_util::MakeEngine(WithCache(0));
  const std::vector<int32_t> system = Prompt(150, 42);
  std::vector<int64_t> reused;
  for (uint32_t user = 0; user < 3; ++user) {
    const std::string id = absl::StrCat("s", user);
    ASSERT_TRUE(cached->CreateSession(id, "").ok());
    ASSERT_TRUE(cold->CreateSession(id, "").ok());
    const std::vector<int32_t> prompt = Concat(system, Prompt(40, 70 + user));
    const testing_util::Result warm = testing_util::Run(*cached, Greedy(prompt, 4, id));
    reused.push_back(warm.usage.cached_tokens);
    EXPECT_EQ(warm.tokens, testing_util::Run(*cold, Greedy(prompt, 4, id)).tokens);
    // The session goes on from its own state.
    const testing_util::Result next = testing_util::Run(*cached, Greedy(Prompt(9, 80), 4, id));
    EXPECT_EQ(next.usage.cached_tokens, 190 + 3);
    EXPECT_EQ(next.tokens, testing_util::Run(*cold, Greedy(Prompt(9, 80), 4, id)).tokens);
  }
  EXPECT_EQ(reused, (std::vector<int64_t>{0, 0, 128}));
}

TEST(PrefixCacheEngineTest, OwnersDoNotShare) {
  auto engine = testing_util::MakeEngine(WithCache());
  GenerateRequest r = Greedy(Prompt(100, 31), 4);
  r.owner = "alice";
  testing_util::Run(*engine, r);
  GenerateRequest again = r;
  again.prompt = Concat(r.prompt, {1, 2, 3});
  again.owner = "bob";
  EXPECT_EQ(testing_util::Run(*engine, again).usage.cached_tokens, 0);
  again.owner = "alice";
  EXPECT_EQ(testing_util::Run(*engine, again).usage.cached_tokens, 100);
}

// vLLM's cache_salt: a salted request finds only its salt's entries of its owner, an unsalted one
// only the unsalted; a salt longer than 1024 bytes is refused.
TEST(PrefixCacheEngineTest, SaltsDoNotShare) {
  auto engine = testing_util::MakeEngine(WithCache());
  GenerateRequest r = Greedy(Prompt(100, 32), 4);
  r.owner = "alice";
  r.cache_salt = "s1";
  testing_util::Run(*engine, r);
  GenerateRequest again = r;
  again.prompt = Concat(r.prompt, {1, 2, 3});
  for (const char* salt : {"s2", "", "s1x"}) {
    SCOPED_TRACE(salt);
    again.cache_salt = salt;
    EXPECT_EQ(testing_util::Run(*engine, again).usage.cached_tokens, 0);
  }
  again.cache_salt = "s1";
  EXPECT_EQ(testing_util::Run(*engine, again).usage.cached_tokens, 100);
  again.owner = "bob";  // the owner still counts
  EXPECT_EQ(testing_util::Run(*engine, again).usage.cached_tokens, 0);
  again.cache_salt = std::string(kMaxCacheSaltBytes + 1, 'x');
  absl::StatusOr<RequestId> refused = engine->Submit(again, [](TokenEvent) {});
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status()));
  EXPECT_NE(refused.status().message().find("cache_salt"), std::string::npos);
}

TEST(PrefixCacheEngineTest, TinyBudgetEvicts) {
  // Room for two gdn_default states (12,288 bytes each, plus keys) in host RAM.
  auto engine = testing_util::MakeEngine(WithCache(2 * 12288 + 2048, 0, true, false));
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(Prompt(40, 40 + i));
    testing_util::Run(*engine, Greedy(prompts.back(), 1));  // saves at 40 (prompt end)
  }
  const PrefixCacheStats st = engine->Stats().prefix_cache;
  EXPECT_EQ(st.entries, 2);
  EXPECT_GE(st.evictions, 1);
  EXPECT_LE(st.bytes, 2 * 12288 + 2048);
  EXPECT_EQ(testing_util::Run(*engine, Greedy(Concat(prompts[0], {5}), 1)).usage.cached_tokens, 0);
  EXPECT_EQ(testing_util::Run(*engine, Greedy(Concat(prompts[2], {5}), 1)).usage.cached_tokens, 40);
}

void SessionFirstRequestStartsFromAPrefix(bool device_tier) {
  auto engine = testing_util::MakeEngine(WithCache(64 << 20, 64, true, device_tier));
  auto cold = testing_util::MakeEngine(WithCache(0));
  const std::vector<int32_t> system = Prompt(128, 51);
  testing_util::Run(*engine, Greedy(system, 1));  // a shared system prompt, saved at 64, 128
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  ASSERT_TRUE(cold->CreateSession("s", "").ok());
  GenerateRequest r = Greedy(Concat(system, Prompt(10, 52)), 5);
  r.session_id = "s";
  engine->transfers().Reset();
  testing_util::Result a = testing_util::Run(*engine, r);
  if (device_tier) {
    // From the saved slot into the session's, device to device: no state crossed to the host
    // (only the steps' logits did).
    EXPECT_LT(engine->transfers().d2h_bytes.load(), engine->Stats().state_bytes_per_sequence);
  }
  testing_util::Result b = testing_util::Run(*cold, r);
  EXPECT_EQ(a.usage.cached_tokens, 128);
  EXPECT_EQ(a.tokens, b.tokens);
  testing_util::ExpectLogprobsNear(a, b, kExact);
  // The session continues from there like the cold one.
  GenerateRequest next = Greedy({4, 5, 6}, 5);
  next.session_id = "s";
  testing_util::Result a2 = testing_util::Run(*engine, next), b2 = testing_util::Run(*cold, next);
  EXPECT_EQ(a2.tokens, b2.tokens);
  testing_util::ExpectLogprobsNear(a2, b2, kExact);
  EXPECT_EQ(engine->GetSession("s", "")->position, cold->GetSession("s", "")->position);
}

TEST(PrefixCacheEngineTest, SessionFirstRequestStartsFromAPrefix) {
  for (const bool device_tier : {true, false}) {
    SCOPED_TRACE(device_tier ? "device tier" : "host RAM");
    SessionFirstRequestStartsFromAPrefix(device_tier);
  }
}

void RacingRequestsOnOnePrefix(bool device_tier, int64_t state_memory_bytes) {
  EngineOptions o = WithCache(64 << 20, 64, true, device_tier);
  o.state_memory_bytes = state_memory_bytes;
  auto engine = testing_util::MakeEngine(o);
  auto cold = testing_util::MakeEngine(WithCache(0));
  const std::vector<int32_t> p = Prompt(150, 61);
  testing_util::Run(*engine, Greedy(p, 1));
  std::vector<std::unique_ptr<testing_util::Collector>> cs;
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(Greedy(Concat(p, Prompt(5 + i, 70 + i)), 6));
    cs.push_back(std::make_unique<testing_util::Collector>());
    ASSERT_TRUE(engine->Submit(reqs.back(), cs.back()->Sink()).ok());
  }
  for (size_t i = 0; i < cs.size(); ++i) {
    cs[i]->Wait();
    testing_util::Result got = cs[i]->result();
    EXPECT_EQ(got.usage.cached_tokens, 150);
    testing_util::Result ref = testing_util::Run(*cold, reqs[i]);
    EXPECT_EQ(got.tokens, ref.tokens);
    testing_util::ExpectLogprobsNear(got, ref, kExact);
  }
  EXPECT_EQ(engine->Stats().slots_used, 0);
}

// Six requests at once that all start from one saved prefix: with free slots each copies it
// (device to device), with only one slot free beyond theirs each takes the slot of a saved state
// (the pool gives the least recently used back to host RAM on demand).
TEST(PrefixCacheEngineTest, RacingRequestsOnOnePrefix) {
  for (const bool device_tier : {true, false}) {
    for (const int64_t slots : {64, 3}) {
      SCOPED_TRACE(absl::StrCat(device_tier ? "device tier" : "host RAM", ", ", slots, " slots"));
      RacingRequestsOnOnePrefix(device_tier, slots * 12288);
    }
  }
}

// On every device (the CUDA instance skips without a GPU): a resent conversation resumes from the
// snapshot its first turn left and agrees with an engine without the cache — a fla GDN (the
// recurrent state kept in a slot, or copied out) and a Qwen3.5 hybrid (its KV pinned too), with
// the device tier and without. On CUDA the host snapshots' bytes reach the host behind the later
// steps with LINFER_CUDA_ASYNC_SNAPSHOTS=1 (tests/gpu/run_on_gpu.sh runs this both ways); a copy
// still in flight when the second turn loads it is waited for.
class PrefixCacheOnDevice : public ::testing::TestWithParam<testing_util::DeviceCase> {};

TEST_P(PrefixCacheOnDevice, ResumedAgreesWithCold) {
  if (testing_util::DeviceMissing(GetParam())) GTEST_SKIP() << testing_util::kNoDevice;
  const Device device = GetParam().device;
  const double tol = device == Device::kCuda ? 2e-2 : 1e-4;
  for (const std::string& dir :
       {testing_util::FixtureSetDir(LINFER_FLA_FIXTURES) + "/gdn_default",
        testing_util::FixtureSetDir(LINFER_HYBRID_FIXTURES) + "/qwen35_text_f32"}) {
    SCOPED_TRACE(dir);
    for (const bool device_tier : {true, false}) {
      SCOPED_TRACE(device_tier ? "device tier" : "host RAM");
      auto make = [&](int64_t budget) {
        EngineOptions o = WithCache(budget, 64, false, device_tier);
        o.state_memory_bytes = 16 << 20;
        o.kv_memory_bytes = 16 << 20;
        return testing_util::MakeEngineOn(testing_util::ServingLoadOptions(device), o, dir);
      };
      auto cached = make(64 << 20), cold = make(0);
      ASSERT_TRUE(cached != nullptr && cold != nullptr);
      const std::vector<int32_t> p = Prompt(200, 11);
      testing_util::Result t1 = testing_util::Run(*cached, Greedy(p, 8));
      const std::vector<int32_t> turn2 = Concat(Concat(p, t1.tokens), Prompt(30, 12));
      // Several resumes of the same snapshot, one right after the other.
      for (int i = 0; i < 3; ++i) {
        testing_util::Result warm = testing_util::Run(*cached, Greedy(turn2, 8));
        EXPECT_EQ(warm.usage.cached_tokens, 200 + 7);
        testing_util::Result ref = testing_util::Run(*cold, Greedy(turn2, 8));
        EXPECT_EQ(ref.usage.cached_tokens, 0);
        testing_util::ExpectGreedyAgreesUntilNearTie(warm, ref, tol);
      }
      EXPECT_EQ(cached->Stats().prefix_cache.device_entries > 0, device_tier);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, PrefixCacheOnDevice,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

TEST(PrefixCacheEngineTest, HybridStateAndKvResume) {
  auto make = [](int64_t budget) {
    absl::StatusOr<std::unique_ptr<Model>> m =
        Model::Load(std::string(LINFER_HYBRID_FIXTURES) + "/qwen35_text_f32");
    EXPECT_TRUE(m.ok()) << m.status();
    EngineOptions o = WithCache(budget, 64, true, /*device_tier=*/false);
    o.state_memory_bytes = 16 << 20;
    o.kv_memory_bytes = 16 << 20;
    absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Create(*std::move(m), o);
    EXPECT_TRUE(e.ok()) << e.status();
    return *std::move(e);
  };
  auto cached = make(64 << 20), cold = make(0);
  ExpectResumedEqualsCold(*cached, *cold);
  // Host snapshots keep their KV as shared blocks (copy-on-write), not host copies.
  const EngineStats st = cached->Stats();
  EXPECT_GT(st.prefix_cache.kv_pinned_entries, 0);
  EXPECT_GT(st.kv_blocks_used, 0);
  EXPECT_LT(st.prefix_cache.bytes, st.prefix_cache.entries * (18432 + 4096))
      << "host bytes: recurrent states and keys only";
  ASSERT_TRUE(cached->ResetPrefixCache().ok());
  EXPECT_EQ(cached->Stats().kv_blocks_used, 0);
  EXPECT_EQ(cached->Stats().prefix_cache.entries, 0);
}

// A KV cache of 40 blocks (640 tokens): saved prefixes pin blocks, and give them back when running
// requests need them — every request completes, with the tokens it gets on an engine without the
// cache.
void PinnedPrefixesYieldTheirBlocks(bool device_tier) {
  auto make = [device_tier](int64_t budget) {
    absl::StatusOr<std::unique_ptr<Model>> m =
        Model::Load(std::string(LINFER_HYBRID_FIXTURES) + "/qwen35_text_f32");
    EXPECT_TRUE(m.ok()) << m.status();
    EngineOptions o = WithCache(budget, 64, true, device_tier);
    o.state_memory_bytes = 16 << 20;
    o.kv_memory_bytes = 40 * 16 * 512;  // 512 KV bytes per token for this fixture
    o.max_model_len = 600;
    absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Create(*std::move(m), o);
    EXPECT_TRUE(e.ok()) << e.status();
    return *std::move(e);
  };
  auto cached = make(64 << 20), cold = make(0);
  ASSERT_EQ(cached->Stats().kv_blocks_total, 40);
  for (int i = 0; i < 6; ++i) {
    const std::vector<int32_t> p = Prompt(150 + 40 * i, 100 + i);
    testing_util::Result a = testing_util::Run(*cached, Greedy(p, 5));
    testing_util::Result b = testing_util::Run(*cold, Greedy(p, 5));
    EXPECT_EQ(a.finish, Finish::kLength) << i;
    EXPECT_EQ(a.tokens, b.tokens) << i;
  }
  const EngineStats st = cached->Stats();
  EXPECT_GT(st.prefix_cache.evictions, 0) << "pinned prefixes were dropped for running requests";
  EXPECT_LE(st.kv_blocks_used, 40);
  // Resuming the last prompt still works from whatever is left.
  ASSERT_TRUE(cached->ResetPrefixCache().ok());
  EXPECT_EQ(cached->Stats().kv_blocks_used, 0);
}

TEST(PrefixCacheEngineTest, PinnedPrefixesYieldTheirBlocks) {
  for (const bool device_tier : {true, false}) {
    SCOPED_TRACE(device_tier ? "device tier" : "host RAM");
    PinnedPrefixesYieldTheirBlocks(device_tier);
  }
}

// States pushed out of a one-entry RAM budget come back from the disk tier, bit-identical.
TEST(PrefixCacheEngineTest, ResumedFromTheDiskTierEqualsCold) {
  const std::string dir = testing_util::FreshDir("linfer_prefix_engine_disk");
  EngineOptions o = WithCache(12288 + 2048, 0, true, false);  // RAM for one gdn_default state
  o.prefix_cache.disk_dir = dir;
  o.prefix_cache.disk_budget_bytes = 8 << 20;
  auto engine = testing_util::MakeEngine(o);
  auto cold = testing_util::MakeEngine(WithCache(0));
  const std::vector<int32_t> p = Prompt(100, 81);
  testing_util::Result t1 = testing_util::Run(*engine, Greedy(p, 4));
  for (int i = 0; i < 3; ++i) testing_util::Run(*engine, Greedy(Prompt(50, 90 + i), 2));
  EXPECT_GT(engine->Stats().prefix_cache.disk_entries, 0);
  const std::vector<int32_t> turn2 = Concat(Concat(p, t1.tokens), Prompt(20, 82));
  testing_util::Result warm = testing_util::Run(*engine, Greedy(turn2, 6));
  testing_util::Result ref = testing_util::Run(*cold, Greedy(turn2, 6));
  EXPECT_EQ(warm.usage.cached_tokens, 100 + 3);
  EXPECT_GE(engine->Stats().prefix_cache.disk_hits, 1);
  EXPECT_EQ(warm.tokens, ref.tokens);
  testing_util::ExpectLogprobsNear(warm, ref, kExact);
}

// The device tier's point: a resent conversation is saved and resumed without its state crossing
// to the host and back — the same two turns on an engine that saves to host RAM move at least two
// states down (prompt end, request end) and one up (the resume) more.
// One slot: a resend finds no free slot and takes over the one holding the state it resumes
// from; that state goes to host RAM first, so a later resend of the same conversation still finds
// it (it used to be lost: the later resend fell back to the prompt's end).
TEST(PrefixCacheEngineTest, ATakenOverSlotKeepsItsStateInHostRam) {
  EngineOptions o = WithCache(64 << 20, 0);
  o.max_slots = 1;
  auto cached = testing_util::MakeEngine(o);
  auto cold = testing_util::MakeEngine(WithCache(0));
  const std::vector<int32_t> p = Prompt(100, 301);
  const testing_util::Result a = testing_util::Run(*cached, Greedy(p, 4));
  ASSERT_EQ(a.tokens.size(), 4u);
  const std::vector<int32_t> conversation = Concat(p, {a.tokens[0], a.tokens[1], a.tokens[2]});
  for (uint32_t turn = 0; turn < 2; ++turn) {
    const GenerateRequest r = Greedy(Concat(conversation, Prompt(20, 310 + turn)), 4);
    const testing_util::Result warm = testing_util::Run(*cached, r);
    EXPECT_EQ(warm.usage.cached_tokens, 103) << "resend " << turn;
    EXPECT_EQ(warm.tokens, testing_util::Run(*cold, r).tokens) << "resend " << turn;
  }
  EXPECT_EQ(cached->Stats().slots_used, 0);
}

TEST(PrefixCacheEngineTest, DeviceTierKeepsStatesOffTheHost) {
  auto device = testing_util::MakeEngine(WithCache(64 << 20, 64, true, true));
  auto host = testing_util::MakeEngine(WithCache(64 << 20, 64, true, false));
  const int64_t state = device->Stats().state_bytes_per_sequence;
  const std::vector<int32_t> p = Prompt(120, 201);
  for (Engine* e : {device.get(), host.get()}) {
    e->transfers().Reset();
    testing_util::Result t1 = testing_util::Run(*e, Greedy(p, 5));
    testing_util::Result t2 = testing_util::Run(*e, Greedy(Concat(Concat(p, t1.tokens), {7}), 5));
    EXPECT_EQ(t2.usage.cached_tokens, 120 + 4);
  }
  EXPECT_GE(host->transfers().d2h_bytes - device->transfers().d2h_bytes, 2 * state);
  EXPECT_GE(host->transfers().h2d_bytes - device->transfers().h2d_bytes, state);
  EXPECT_GT(device->Stats().prefix_cache.device_entries, 0);
  EXPECT_EQ(device->Stats().prefix_cache.entries, 0);
  EXPECT_EQ(device->Stats().slots_used, 0);
}

// Three slots for six conversations: the first turns' saved states fill the free slots and the
// pool takes the least recently used back (to host RAM) for each new request; every second turn
// still resumes — from a slot or from host RAM — with the tokens of an engine without the cache,
// and no slot stays taken.
TEST(PrefixCacheEngineTest, DeviceTierGivesSlotsBackUnderPressure) {
  EngineOptions o = WithCache(64 << 20, 0, true, true);
  o.state_memory_bytes = 3 * 12288;
  auto engine = testing_util::MakeEngine(o);
  auto cold = testing_util::MakeEngine(WithCache(0));
  ASSERT_EQ(engine->Stats().slots_total, 3);
  std::vector<std::vector<int32_t>> turn2;
  for (int i = 0; i < 6; ++i) {
    const std::vector<int32_t> p = Prompt(60 + 10 * i, 300 + i);
    testing_util::Result t1 = testing_util::Run(*engine, Greedy(p, 4));
    turn2.push_back(Concat(Concat(p, t1.tokens), Prompt(8, 400 + i)));
  }
  PrefixCacheStats st = engine->Stats().prefix_cache;
  EXPECT_GT(st.device_releases, 0);
  EXPECT_GT(st.entries, 0) << "released slots' states went to host RAM";
  EXPECT_LE(st.device_entries, 3);
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(i);
    testing_util::Result warm = testing_util::Run(*engine, Greedy(turn2[i], 6));
    testing_util::Result ref = testing_util::Run(*cold, Greedy(turn2[i], 6));
    EXPECT_GT(warm.usage.cached_tokens, 0);
    EXPECT_EQ(warm.tokens, ref.tokens);
    testing_util::ExpectLogprobsNear(warm, ref, kExact);
  }
  EXPECT_EQ(engine->Stats().slots_used, 0);
  ASSERT_TRUE(engine->ResetPrefixCache().ok());
  st = engine->Stats().prefix_cache;
  EXPECT_EQ(st.device_entries + st.entries, 0);
  EXPECT_EQ(engine->Stats().slots_used, 0);
}

// A request that starts from a prefix saved in a slot holds no slot while it waits (it copies or
// takes one when admitted): with one request running (max_running 1) only that one's slot is in
// use; cancelled, the waiting request leaves the saved prefix where it was, and it still resumes
// the next request.
TEST(PrefixCacheEngineTest, WaitingRequestsHoldNoSlot) {
  EngineOptions o = WithCache(64 << 20, 0, true, true);
  o.scheduler.max_running = 1;
  auto engine = testing_util::MakeEngine(o);
  auto cold = testing_util::MakeEngine(WithCache(0));
  const std::vector<int32_t> p = Prompt(80, 501);
  testing_util::Result t1 = testing_util::Run(*engine, Greedy(p, 3));
  const std::vector<int32_t> turn2 = Concat(Concat(p, t1.tokens), {9, 9});
  testing_util::Collector runner, waiter;
  GenerateRequest long_one = Greedy(Prompt(20, 502), 50000);  // cancelled below
  long_one.stop.ignore_eos = true;
  absl::StatusOr<RequestId> r = engine->Submit(long_one, runner.Sink());
  ASSERT_TRUE(r.ok()) << r.status();
  runner.WaitTokens(2);
  absl::StatusOr<RequestId> w = engine->Submit(Greedy(turn2, 4), waiter.Sink());
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 50; ++i) {
    absl::SleepFor(absl::Milliseconds(2));
    EXPECT_EQ(engine->Stats().slots_used, 1) << "the runner's slot only";
  }
  engine->Cancel(*w);
  waiter.Wait();
  EXPECT_EQ(waiter.result().finish, Finish::kCancelled);
  engine->Cancel(*r);
  runner.Wait();
  EXPECT_EQ(engine->Stats().slots_used, 0);
  testing_util::Result warm = testing_util::Run(*engine, Greedy(turn2, 4));
  testing_util::Result ref = testing_util::Run(*cold, Greedy(turn2, 4));
  EXPECT_EQ(warm.usage.cached_tokens, 80 + 2);
  EXPECT_EQ(warm.tokens, ref.tokens);
}

// Submits `first`, holds the engine thread in the step that ends it (a step observer), submits
// `then` meanwhile, and lets go: they are all taken in by the same step.
void HoldAndSubmit(Engine& engine, const GenerateRequest& first, testing_util::Collector& fc,
                   const std::vector<GenerateRequest>& then,
                   std::vector<std::unique_ptr<testing_util::Collector>>& cs) {
  absl::Notification blocked, release;
  std::atomic<bool> armed{true};
  engine.SetStepObserver([&](const StepRecord& r) {
    if (r.finished > 0 && armed.exchange(false)) {
      blocked.Notify();
      release.WaitForNotification();
    }
  });
  ASSERT_TRUE(engine.Submit(first, fc.Sink()).ok());
  blocked.WaitForNotification();
  for (const GenerateRequest& g : then) {
    cs.push_back(std::make_unique<testing_util::Collector>());
    ASSERT_TRUE(engine.Submit(g, cs.back()->Sink()).ok());
  }
  release.Notify();
  fc.Wait();
  for (auto& c : cs) c->Wait();
  engine.SetStepObserver(nullptr);
}

// Every slot holds a saved state when a new request X arrives, followed in the same step by
// resends of saved conversations: X runs first (the pool takes a saved state's slot back for it),
// then the resends — none waits for X's deadline (when waiting resends held slots, X found none
// and the queue stood still). Found by review, with 1 and 2 slots.
TEST(PrefixCacheEngineTest, ANewRequestAheadOfResendsGetsASlot) {
  for (const int slots : {1, 2}) {
    SCOPED_TRACE(slots);
    EngineOptions o = WithCache(64 << 20, 0, true, true);
    o.state_memory_bytes = slots * 12288;
    auto engine = testing_util::MakeEngine(o);
    auto cold = testing_util::MakeEngine(WithCache(0));
    ASSERT_EQ(engine->Stats().slots_total, slots);
    const std::vector<int32_t> p = Prompt(40, 900);
    const testing_util::Result t = testing_util::Run(*cold, Greedy(p, 3));
    std::vector<int32_t> q;
    if (slots == 2) {  // one slot already holds a saved state
      const testing_util::Result u = testing_util::Run(*engine, Greedy(Prompt(30, 950), 3));
      q = Concat(Concat(Prompt(30, 950), u.tokens), {6});
    }
    GenerateRequest x = Greedy(Prompt(30, 901), 3);
    x.deadline = absl::Now() + absl::Seconds(20);
    std::vector<GenerateRequest> then = {x, Greedy(Concat(Concat(p, t.tokens), {5}), 3)};
    if (slots == 2) then.push_back(Greedy(q, 3));
    testing_util::Collector first;
    std::vector<std::unique_ptr<testing_util::Collector>> cs;
    const absl::Time t0 = absl::Now();
    HoldAndSubmit(*engine, Greedy(p, 3), first, then, cs);
    EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
    for (size_t i = 0; i < cs.size(); ++i) {
      EXPECT_EQ(cs[i]->result().finish, Finish::kLength) << i;
      if (i > 0) {
        EXPECT_GT(cs[i]->result().usage.cached_tokens, 0) << i;
      }
      EXPECT_EQ(cs[i]->result().tokens, testing_util::Run(*cold, then[i]).tokens) << i;
    }
    EXPECT_EQ(engine->Stats().slots_used, 0);
  }
}

// 120 requests of random traffic: resends of four conversations (each extended by its last
// answer now and then), new prompts, priorities, cancels, deadlines far away. No request misses
// its deadline or fails, no slot stays taken, and a reset empties every tier.
void RandomTraffic(Engine& engine, int slots, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> convs;
  for (int i = 0; i < 4; ++i) convs.push_back(Prompt(20 + 7 * i, 1000 + i));
  std::vector<std::unique_ptr<testing_util::Collector>> cs;
  std::vector<RequestId> ids;
  for (int i = 0; i < 120; ++i) {
    const size_t c = rng() % convs.size();
    std::vector<int32_t> prompt = rng() % 3 == 0 ? Prompt(10 + rng() % 30, 5000 + i) : convs[c];
    GenerateRequest g = Greedy(prompt, 1 + static_cast<int>(rng() % 6));
    g.priority = static_cast<int>(rng() % 3);
    g.deadline = absl::Now() + absl::Seconds(60);
    cs.push_back(std::make_unique<testing_util::Collector>());
    absl::StatusOr<RequestId> id = engine.Submit(g, cs.back()->Sink());
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
    if (rng() % 5 == 0) engine.Cancel(ids[rng() % ids.size()]);
    if (rng() % 7 == 0) {
      cs.back()->Wait();
      const testing_util::Result r = cs.back()->result();
      if (r.finish == Finish::kLength) convs[c] = Concat(Concat(prompt, r.tokens), {3});
      if (convs[c].size() > 300) convs[c] = Prompt(20, 7000 + i);
    }
  }
  for (auto& c : cs) {
    c->Wait();
    const Finish f = c->result().finish;
    EXPECT_TRUE(f == Finish::kLength || f == Finish::kStop || f == Finish::kCancelled)
        << FinishName(f) << ": " << c->Final().error;
  }
  EXPECT_EQ(engine.Stats().slots_used, 0);
  EXPECT_LE(engine.Stats().prefix_cache.device_entries, slots);
  ASSERT_TRUE(engine.ResetPrefixCache().ok());
  const PrefixCacheStats st = engine.Stats().prefix_cache;
  EXPECT_EQ(st.device_entries + st.entries, 0);
  EXPECT_EQ(engine.Stats().slots_used, 0);
}

TEST(PrefixCacheEngineTest, RandomTrafficOnFewSlots) {
  for (const bool device_tier : {true, false}) {
    for (const int slots : {1, 2, 5}) {
      SCOPED_TRACE(absl::StrCat(device_tier ? "device tier, " : "host RAM, ", slots, " slots"));
      EngineOptions o = WithCache(64 << 20, 16, true, device_tier);
      o.state_memory_bytes = slots * 12288;
      auto engine = testing_util::MakeEngine(o);
      RandomTraffic(*engine, slots, static_cast<uint32_t>(slots));
    }
  }
}

// The same on a Qwen3.5 hybrid with a 40-block KV cache: saved states' KV blocks (shared with
// the slots they were copied from) go back when running requests need them, and none stays used.
TEST(PrefixCacheEngineTest, RandomTrafficOnAHybridWithFewSlotsAndBlocks) {
  for (const int slots : {2, 3}) {
    SCOPED_TRACE(slots);
    absl::StatusOr<std::unique_ptr<Model>> m =
        Model::Load(std::string(LINFER_HYBRID_FIXTURES) + "/qwen35_text_f32");
    ASSERT_TRUE(m.ok()) << m.status();
    EngineOptions o = WithCache(64 << 20, 16, true, true);
    o.state_memory_bytes = slots * (*m)->state_bytes();
    o.kv_memory_bytes = 40 * 16 * 512;  // 512 KV bytes per token for this fixture
    o.max_model_len = 500;
    absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Create(*std::move(m), o);
    ASSERT_TRUE(e.ok()) << e.status();
    RandomTraffic(**e, slots, 77 + static_cast<uint32_t>(slots));
    EXPECT_EQ((*e)->Stats().kv_blocks_used, 0);
  }
}

}  // namespace
}  // namespace linfer
