// The engine on hybrid models (Gated DeltaNet + attention layers): a session is its recurrent
// state plus its KV blocks, and every door moves both. Continue = one long prompt, fork,
// offload/restore and export/import bit-identical, the disk tier, KV pressure (admission and
// preemption by blocks, everything still finishes with the tokens it gets alone), max_model_len.
// Runs on the Qwen3.5 text fixture (paged full attention) and fla's hybrids (paged, and the
// sliding-window ring that lives in the slot).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/kv_cache.h"
#include "tests/engine/engine_testing.h"

namespace linfer {
namespace {

std::string FixtureDir(const std::string& name) {
  return std::string(LINFER_HYBRID_FIXTURES) + "/" + name;
}

std::unique_ptr<Engine> MakeHybridEngine(const std::string& fixture, EngineOptions options = {},
                                         const LoadOptions& load = {}) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(FixtureDir(fixture), load);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  if (options.state_memory_bytes == (int64_t{1} << 30)) options.state_memory_bytes = 64 << 20;
  if (options.kv_memory_bytes == (int64_t{1} << 30)) options.kv_memory_bytes = 32 << 20;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(*std::move(model), options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

int64_t KvBytesPerBlock(const std::string& fixture, int block_tokens) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(FixtureDir(fixture));
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? KvBytesPerToken((*model)->state_specs()) * block_tokens : 0;
}

using testing_util::Greedy;

class HybridEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridEngineTest, SessionContinueEqualsOneLongPrompt) {
  EngineOptions opts;
  opts.scheduler.max_step_tokens = 24;  // the prompts span several steps (chunked attention)
  auto engine = MakeHybridEngine(GetParam(), opts);
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->CreateSession("chat", "").ok());
  std::vector<int32_t> a = testing_util::Prompt(45, 2), b = testing_util::Prompt(21, 3);
  testing_util::Result t1 = testing_util::Run(*engine, Greedy(a, 6, "chat"));
  testing_util::Result t2 = testing_util::Run(*engine, Greedy(b, 6, "chat"));
  EXPECT_EQ(t2.usage.cached_tokens, 45 + 5);
  std::vector<int32_t> whole = a;
  whole.insert(whole.end(), t1.tokens.begin(), t1.tokens.end());
  whole.insert(whole.end(), b.begin(), b.end());
  testing_util::Result fresh = testing_util::Run(*engine, Greedy(whole, 6));
  EXPECT_EQ(t2.tokens, fresh.tokens);
  testing_util::ExpectLogprobsNear(t2, fresh, 1e-4);
  // The session holds KV blocks for its 78 positions (paged models); a fresh request left none.
  const EngineStats st = engine->Stats();
  if (st.kv_blocks_total > 0) {
    const int64_t block_tokens =
        st.kv_bytes_per_block / KvBytesPerToken(engine->model().state_specs());
    EXPECT_EQ(st.kv_blocks_used, (45 + 6 + 21 + 6 + block_tokens - 1) / block_tokens);
    EXPECT_GT(st.sessions.slot_kv_bytes, 0);
  }
  ASSERT_TRUE(engine->DeleteSession("chat", "").ok());
  EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
  EXPECT_EQ(engine->Stats().slots_used, 0);
}

TEST_P(HybridEngineTest, ForkSharesHistoryAndDiverges) {
  auto engine = MakeHybridEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->CreateSession("a", "").ok());
  testing_util::Run(*engine, Greedy(testing_util::Prompt(37, 4), 4, "a"));
  ASSERT_TRUE(engine->ForkSession("a", "b", "").ok());
  GenerateRequest r = Greedy(testing_util::Prompt(5, 5), 10, "a");
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 1234;
  testing_util::Result ra = testing_util::Run(*engine, r);
  r.session_id = "b";
  testing_util::Result rb = testing_util::Run(*engine, r);
  EXPECT_EQ(ra.tokens, rb.tokens);
  testing_util::ExpectLogprobsNear(ra, rb, 0.0);
  // Writing into "a" did not change "b": both continue alike from equal histories.
  testing_util::Result ca = testing_util::Run(*engine, Greedy({7, 8, 9}, 4, "a"));
  testing_util::Result cb = testing_util::Run(*engine, Greedy({7, 8, 9}, 4, "b"));
  EXPECT_EQ(ca.tokens, cb.tokens);
  testing_util::ExpectLogprobsNear(ca, cb, 0.0);
  ASSERT_TRUE(engine->DeleteSession("a", "").ok());
  ASSERT_TRUE(engine->DeleteSession("b", "").ok());
  EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
}

TEST_P(HybridEngineTest, OffloadRestoreExportImportAndDiskAreBitIdentical) {
  EngineOptions opts;
  opts.max_slots = 1;  // a second session forces the first out to host RAM
  opts.tiers.disk_dir = testing_util::FreshDir("linfer_hybrid_disk_" + GetParam());
  auto engine = MakeHybridEngine(GetParam(), opts);
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  testing_util::Run(*engine, Greedy(testing_util::Prompt(40, 6), 3, "s"));
  absl::StatusOr<std::string> blob = engine->ExportSession("s", "");
  ASSERT_TRUE(blob.ok()) << blob.status();
  ASSERT_TRUE(engine->ImportSession("copy", "", *blob).ok());
  ASSERT_TRUE(engine->CreateSession("other", "").ok());
  testing_util::Run(*engine, Greedy(testing_util::Prompt(9, 7), 3, "other"));  // evicts "s"
  EXPECT_EQ(engine->GetSession("s", "")->tier, Tier::kHost);
  const EngineStats st = engine->Stats();
  if (st.kv_blocks_total > 0) {
    EXPECT_GT(st.sessions.host_kv_bytes, 0);
  }
  testing_util::Result a = testing_util::Run(*engine, Greedy({1, 2, 3}, 5, "s"));
  testing_util::Result b = testing_util::Run(*engine, Greedy({1, 2, 3}, 5, "copy"));
  EXPECT_EQ(a.tokens, b.tokens);
  testing_util::ExpectLogprobsNear(a, b, 0.0);
  // A restart finds the sessions on disk and continues them the same way.
  engine->Stop();
  engine.reset();
  engine = MakeHybridEngine(GetParam(), opts);
  ASSERT_NE(engine, nullptr);
  testing_util::Result a2 = testing_util::Run(*engine, Greedy({4, 5}, 5, "s"));
  testing_util::Result b2 = testing_util::Run(*engine, Greedy({4, 5}, 5, "copy"));
  EXPECT_EQ(a2.finish, Finish::kLength);
  EXPECT_EQ(a2.tokens, b2.tokens);
  testing_util::ExpectLogprobsNear(a2, b2, 0.0);
}

// Many requests at once on a KV cache that holds a few of them: admission waits for blocks,
// running sequences are preempted (offloaded with their KV) and resumed, and every request gets
// exactly the tokens it gets alone.
TEST_P(HybridEngineTest, KvPressurePreemptsAndEverythingFinishes) {
  const int64_t block_bytes = KvBytesPerBlock(GetParam(), 16);
  if (block_bytes == 0) GTEST_SKIP() << GetParam() << " keeps no paged KV (sliding window only)";
  EngineOptions opts;
  opts.kv_memory_bytes = 12 * block_bytes;  // 192 tokens: three 60-token sequences at a time
  opts.scheduler.max_step_tokens = 64;
  auto engine = MakeHybridEngine(GetParam(), opts);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->options().max_model_len, 12 * 16);  // capped by the KV cache
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 10; ++i) {
    GenerateRequest r = Greedy(testing_util::Prompt(20 + 3 * i, 100 + i), 30);
    r.priority = i % 3;
    reqs.push_back(r);
  }
  std::vector<testing_util::Result> alone;
  for (const GenerateRequest& r : reqs) alone.push_back(testing_util::Run(*engine, r));
  std::vector<std::unique_ptr<testing_util::Collector>> together;
  for (const GenerateRequest& r : reqs) {
    together.push_back(std::make_unique<testing_util::Collector>());
    ASSERT_TRUE(engine->Submit(r, together.back()->Sink()).ok());
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    together[i]->Wait();
    testing_util::Result got = together[i]->result();
    EXPECT_EQ(got.finish, Finish::kLength) << "request " << i;
    EXPECT_EQ(got.tokens, alone[i].tokens) << "request " << i;
    // Preempted sequences resume with other chunk splits and batch neighbours: float rounding
    // differs a little (bf16 fixtures have larger logits).
    testing_util::ExpectLogprobsNear(got, alone[i], 5e-4);
  }
  const EngineStats st = engine->Stats();
  EXPECT_GT(st.preemptions_total, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.slots_used, 0);
}

// A session within one block of the whole KV cache (max_model_len = the cache's tokens) comes
// back from the host tier: its restore asked for its blocks plus one more, more than the cache
// holds, and the request waited for ever (preempting every later one each step).
TEST_P(HybridEngineTest, ASessionNearTheCachesSizeComesBack) {
  const int64_t block_bytes = KvBytesPerBlock(GetParam(), 16);
  if (block_bytes == 0) GTEST_SKIP() << GetParam() << " keeps no paged KV (sliding window only)";
  EngineOptions opts;
  opts.kv_memory_bytes = 12 * block_bytes;  // 192 tokens
  opts.max_slots = 1;
  auto engine = MakeHybridEngine(GetParam(), opts);
  ASSERT_NE(engine, nullptr);
  ASSERT_EQ(engine->options().max_model_len, 12 * 16);
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  ASSERT_EQ(testing_util::Run(*engine, Greedy(testing_util::Prompt(180, 3), 6, "s")).finish,
            Finish::kLength);
  ASSERT_TRUE(engine->CreateSession("twin", "").ok());
  // A one-off takes the only slot: the session goes to the host tier.
  ASSERT_EQ(testing_util::Run(*engine, Greedy(testing_util::Prompt(10, 4), 2)).finish,
            Finish::kLength);
  ASSERT_NE(engine->GetSession("s", "")->tier, Tier::kSlot);
  GenerateRequest next = Greedy({5}, 2, "s");
  next.deadline = absl::Now() + absl::Seconds(20);
  const testing_util::Result r = testing_util::Run(*engine, next);
  EXPECT_EQ(r.finish, Finish::kLength) << FinishName(r.finish);
  EXPECT_EQ(r.tokens.size(), 2u);
}

// Session bytes are a state's real size, KV included: a key's byte quota counts what an imported
// (or forked) session takes, and a full host tier evicts from the key holding the most bytes —
// it counted one fixed-size state a session and took the key holding the most sessions, so one
// key's large import was accepted past its quota and pushed out another key's small sessions.
TEST_P(HybridEngineTest, QuotasAndEvictionCountEachSessionsRealBytes) {
  const int64_t block_bytes = KvBytesPerBlock(GetParam(), 16);
  if (block_bytes == 0) GTEST_SKIP() << GetParam() << " keeps no paged KV (sliding window only)";
  auto source = MakeHybridEngine(GetParam());
  ASSERT_NE(source, nullptr);
  ASSERT_TRUE(source->CreateSession("big", "").ok());
  testing_util::Run(*source, Greedy(testing_util::Prompt(400, 3), 2, "big"));
  absl::StatusOr<std::string> big = source->ExportSession("big", "");
  ASSERT_TRUE(big.ok()) << big.status();
  const int64_t state = source->model().state_bytes();
  const int64_t kv = 25 * block_bytes;  // ≈ 400 tokens of KV
  {
    EngineOptions opts;
    opts.tiers.max_bytes_per_owner = state + kv / 2;  // one empty session, not the big one
    auto engine = MakeHybridEngine(GetParam(), opts);
    ASSERT_NE(engine, nullptr);
    const absl::StatusOr<std::string> id = engine->ImportSession("x", "mallory", *big);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted) << id.status();
    EXPECT_TRUE(engine->CreateSession("small", "mallory").ok());
  }
  {
    // An empty session counts as the state it takes once used: with room for one and a half,
    // a second is over the quota (counted as 0 bytes, any number of them passed, each filled by
    // a request later).
    EngineOptions opts;
    opts.tiers.max_bytes_per_owner = state + state / 2;
    auto engine = MakeHybridEngine(GetParam(), opts);
    ASSERT_NE(engine, nullptr);
    EXPECT_TRUE(engine->CreateSession("small", "mallory").ok());
    const absl::StatusOr<std::string> second = engine->CreateSession("small2", "mallory");
    EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
  }
  {
    // A fork in the slots is charged what the key will be counted for it, its KV blocks too
    // (charged a bare state, it took the key past its quota).
    EngineOptions opts;
    opts.tiers.max_bytes_per_owner = 2 * state + 30 * block_bytes;
    auto engine = MakeHybridEngine(GetParam(), opts);
    ASSERT_NE(engine, nullptr);
    ASSERT_TRUE(engine->CreateSession("src", "k").ok());
    GenerateRequest r = Greedy(testing_util::Prompt(400, 3), 2, "src");
    r.owner = "k";
    ASSERT_EQ(testing_util::Run(*engine, r).finish, Finish::kLength);
    ASSERT_EQ(engine->GetSession("src", "k")->tier, Tier::kSlot);
    const absl::StatusOr<std::string> fork = engine->ForkSession("src", "f", "k");
    EXPECT_EQ(fork.status().code(), absl::StatusCode::kResourceExhausted) << fork.status();
  }
  {
    // A session grows with its conversation (KV): once the key is past its quota, its next turn
    // is refused until it deletes some (the quota used to be checked only when sessions were
    // made).
    EngineOptions opts;
    opts.tiers.max_bytes_per_owner = state + 10 * block_bytes;
    auto engine = MakeHybridEngine(GetParam(), opts);
    ASSERT_NE(engine, nullptr);
    ASSERT_TRUE(engine->CreateSession("grows", "k").ok());
    GenerateRequest r = Greedy(testing_util::Prompt(400, 3), 2, "grows");
    r.owner = "k";
    ASSERT_EQ(testing_util::Run(*engine, r).finish, Finish::kLength);
    // The front ends ask SessionForTurn before a client's turn (requests submitted without
    // asking, and the server's own temporary sessions, go on).
    const absl::StatusOr<SessionInfo> refused = engine->SessionForTurn("grows", "k");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
    GenerateRequest leg = Greedy({}, 2, "grows");
    leg.owner = "k";
    EXPECT_EQ(testing_util::Run(*engine, leg).finish, Finish::kLength);
    ASSERT_TRUE(engine->DeleteSession("grows", "k").ok());
    ASSERT_TRUE(engine->CreateSession("again", "k").ok());
    EXPECT_TRUE(engine->SessionForTurn("again", "k").ok());
    GenerateRequest fresh = Greedy(testing_util::Prompt(8, 4), 2, "again");
    fresh.owner = "k";
    EXPECT_EQ(testing_util::Run(*engine, fresh).finish, Finish::kLength);
  }
  EngineOptions opts;
  opts.max_slots = 1;  // alice's states go to the host tier as the next takes the slot
  opts.tiers.host_bytes = 3 * (state + 3 * block_bytes) + kv + kv / 2;  // alice's, one big one
  auto engine = MakeHybridEngine(GetParam(), opts);
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 4; ++i) {
    const std::string id = i < 3 ? absl::StrCat("a", i) : "";
    if (i < 3) {
      ASSERT_TRUE(engine->CreateSession(id, "alice").ok());
    }
    GenerateRequest r = Greedy(testing_util::Prompt(40, 5 + i), 1, id);  // the last: a one-off
    r.owner = "alice";
    ASSERT_EQ(testing_util::Run(*engine, r).finish, Finish::kLength);
  }
  ASSERT_EQ(engine->Stats().sessions.host, 3);
  ASSERT_TRUE(engine->ImportSession("m0", "mallory", *big).ok());
  ASSERT_TRUE(engine->ImportSession("m1", "mallory", *big).ok());  // over: mallory's m0 goes
  EXPECT_EQ(engine->ListSessions("alice")->size(), 3u);
  EXPECT_EQ(engine->GetSession("m0", "mallory").status().code(), absl::StatusCode::kNotFound);
}

TEST_P(HybridEngineTest, TooLongRequestsAreRefused) {
  EngineOptions opts;
  opts.max_model_len = 64;
  auto engine = MakeHybridEngine(GetParam(), opts);
  ASSERT_NE(engine, nullptr);
  testing_util::Collector c;
  absl::StatusOr<RequestId> id = engine->Submit(Greedy(testing_util::Prompt(60, 9), 10), c.Sink());
  absl::Status st = id.ok() ? (c.Wait(), c.Final().error) : id.status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("max_model_len"), std::string::npos) << st;
  // Within the limit it runs.
  EXPECT_EQ(testing_util::Run(*engine, Greedy(testing_util::Prompt(50, 9), 10)).finish,
            Finish::kLength);
}

// A bf16 or fp8 KV cache (LoadOptions::kv_dtype, --kv_dtype): half or a quarter of the bytes a
// token for the attention layers' keys and values (paged and ring), and every door still holds:
// continue = one long prompt (a query reads its own step's keys as stored), export/import between
// two such engines bit-identical, a blob into an f32-KV engine; its generations close to the f32
// cache's (greedy picks agree until a near tie: within `near_tie` in logprobs; the first step's
// best logprob within `first_step` whatever its gap).
void CheckNarrowKvCache(const std::string& fixture, DType kv, double near_tie, double first_step) {
  LoadOptions bf16;
  bf16.kv_dtype = kv;
  absl::StatusOr<std::unique_ptr<Model>> f32_model = Model::Load(FixtureDir(fixture));
  absl::StatusOr<std::unique_ptr<Model>> bf16_model = Model::Load(FixtureDir(fixture), bf16);
  ASSERT_TRUE(f32_model.ok() && bf16_model.ok());
  int64_t kv_f32 = 0, kv_bf16 = 0;  // attention KV bytes a token (paged) or a slot (ring)
  for (size_t l = 0; l < (*f32_model)->state_specs().size(); ++l) {
    for (size_t i = 0; i < (*f32_model)->state_specs()[l].size(); ++i) {
      const StateSpec& a = (*f32_model)->state_specs()[l][i];
      const StateSpec& b = (*bf16_model)->state_specs()[l][i];
      if (a.name != "kv") {
        EXPECT_EQ(a.dtype, b.dtype) << a.name;
        continue;
      }
      EXPECT_EQ(b.dtype, kv);
      kv_f32 += a.bytes();
      kv_bf16 += b.bytes();
    }
  }
  ASSERT_GT(kv_f32, 0);
  EXPECT_EQ(static_cast<int64_t>(4 / DTypeSize(kv)) * kv_bf16, kv_f32);

  EngineOptions opts;
  opts.scheduler.max_step_tokens = 24;  // the prompts span several steps
  auto engine = MakeHybridEngine(fixture, opts, bf16);
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->CreateSession("chat", "").ok());
  const std::vector<int32_t> a = testing_util::Prompt(45, 2), b = testing_util::Prompt(21, 3);
  const testing_util::Result t1 = testing_util::Run(*engine, Greedy(a, 6, "chat"));
  const testing_util::Result t2 = testing_util::Run(*engine, Greedy(b, 6, "chat"));
  std::vector<int32_t> whole = a;
  whole.insert(whole.end(), t1.tokens.begin(), t1.tokens.end());
  whole.insert(whole.end(), b.begin(), b.end());
  const testing_util::Result fresh = testing_util::Run(*engine, Greedy(whole, 6));
  EXPECT_EQ(t2.tokens, fresh.tokens);
  testing_util::ExpectLogprobsNear(t2, fresh, 1e-4);

  // Close to the f32 cache's generation of the same prompt.
  auto f32_engine = MakeHybridEngine(fixture, opts);
  ASSERT_NE(f32_engine, nullptr);
  const testing_util::Result ref = testing_util::Run(*f32_engine, Greedy(whole, 6));
  testing_util::ExpectGreedyAgreesUntilNearTie(fresh, ref, near_tie);
  // The first step whatever its gap: the best logprob (continuous in the logits) within
  // first_step (measured 2026-11-30 on the CPU: at most 2.2e-3 with bf16, 3.9e-2 with fp8).
  ASSERT_FALSE(fresh.top.empty() || ref.top.empty() || fresh.top[0].empty() || ref.top[0].empty());
  EXPECT_NEAR(fresh.top[0][0].second, ref.top[0][0].second, first_step);

  // Export → import: into an engine with the same KV dtype bit-identical, into an f32-KV one
  // accepted.
  absl::StatusOr<std::string> blob = engine->ExportSession("chat", "");
  ASSERT_TRUE(blob.ok()) << blob.status();
  ASSERT_TRUE(engine->ImportSession("copy", "", *blob).ok());
  const testing_util::Result c1 = testing_util::Run(*engine, Greedy({1, 2, 3}, 5, "chat"));
  const testing_util::Result c2 = testing_util::Run(*engine, Greedy({1, 2, 3}, 5, "copy"));
  EXPECT_EQ(c1.tokens, c2.tokens);
  testing_util::ExpectLogprobsNear(c1, c2, 0.0);
  ASSERT_TRUE(f32_engine->ImportSession("chat", "", *blob).ok());
  const testing_util::Result c3 = testing_util::Run(*f32_engine, Greedy({1, 2, 3}, 5, "chat"));
  EXPECT_EQ(c3.finish, Finish::kLength);
  testing_util::ExpectGreedyAgreesUntilNearTie(c3, c1, near_tie);
}

TEST_P(HybridEngineTest, Bf16KvCacheHalvesTheKvAndKeepsEveryDoor) {
  CheckNarrowKvCache(GetParam(), DType::kBF16, 2e-2, 1e-2);
}

// e4m3 keeps 3 mantissa bits (a value off by up to 1/16 of itself): the generations agree with the
// f32 cache's (top-1 logprobs within 0.25) up to where its top two lie within 0.5 of each other.
TEST_P(HybridEngineTest, Fp8KvCacheQuartersTheKvAndKeepsEveryDoor) {
  CheckNarrowKvCache(GetParam(), DType::kF8E4M3, 0.25, 0.1);
}

TEST(HybridEngineOptionsTest, MaxModelLenFollowsTheConfigAndTheKvBudget) {
  // The Qwen fixture's config says max_position_embeddings 4096.
  auto engine = MakeHybridEngine("qwen35_text_f32");
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->options().max_model_len, 4096);
  engine.reset();
  // A KV budget below one sequence of max_model_len tokens is refused, naming the flag.
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(FixtureDir("qwen35_text_f32"));
  ASSERT_TRUE(model.ok()) << model.status();
  EngineOptions opts;
  opts.state_memory_bytes = 16 << 20;
  opts.kv_memory_bytes = 4 * KvBytesPerToken((*model)->state_specs()) * 16;
  opts.max_model_len = 1000;
  absl::StatusOr<std::unique_ptr<Engine>> e = Engine::Create(*std::move(model), opts);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("--kv_memory_mb"), std::string::npos) << e.status();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridEngineTest,
                         ::testing::Values("qwen35_text_f32", "gdn_hybrid_full",
                                           "gdn_hybrid_window", "qwen35_vlm_bf16_tied",
                                           "qwen35moe_text_fused", "qwen3next_f32",
                                           "qwen35moe_vlm_fp8_fused"));

}  // namespace
}  // namespace linfer
