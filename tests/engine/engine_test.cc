// The engine end to end on a tiny reference checkpoint: batch invariance, sessions (continue =
// one long prompt, fork, export/import, offload/restore, tiers), errors, cancellation, deadlines.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "tests/engine/engine_testing.h"

namespace linfer {
namespace {

GenerateRequest Greedy(std::vector<int32_t> prompt, int max_tokens, std::string session = "") {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  r.sampling.logprobs = 5;
  r.session_id = std::move(session);
  return r;
}

TEST(EngineTest, BatchInvariance) {
  auto engine = testing_util::MakeEngine();
  std::vector<int32_t> prompt = testing_util::Prompt(37, 1);
  testing_util::Result alone = testing_util::Run(*engine, Greedy(prompt, 8));
  // The same request next to others of different lengths.
  std::vector<std::unique_ptr<testing_util::Collector>> others;
  for (int n : {1, 70, 150, 5}) {
    others.push_back(std::make_unique<testing_util::Collector>());
    ASSERT_TRUE(engine->Submit(Greedy(testing_util::Prompt(n, n), 20), others.back()->Sink()).ok());
  }
  testing_util::Result batched = testing_util::Run(*engine, Greedy(prompt, 8));
  for (auto& o : others) o->Wait();
  EXPECT_EQ(alone.tokens, batched.tokens);
  testing_util::ExpectLogprobsNear(alone, batched, 1e-4);
}

TEST(EngineTest, SessionContinueEqualsOneLongPrompt) {
  auto engine = testing_util::MakeEngine();
  ASSERT_TRUE(engine->CreateSession("chat", "").ok());
  std::vector<int32_t> a = testing_util::Prompt(30, 2), b = testing_util::Prompt(12, 3);
  testing_util::Result t1 = testing_util::Run(*engine, Greedy(a, 6, "chat"));
  testing_util::Result t2 = testing_util::Run(*engine, Greedy(b, 6, "chat"));
  EXPECT_EQ(t2.usage.cached_tokens, 30 + 5);  // the last sampled token was pending
  std::vector<int32_t> whole = a;
  whole.insert(whole.end(), t1.tokens.begin(), t1.tokens.end());
  whole.insert(whole.end(), b.begin(), b.end());
  testing_util::Result fresh = testing_util::Run(*engine, Greedy(whole, 6));
  EXPECT_EQ(t2.tokens, fresh.tokens);
  testing_util::ExpectLogprobsNear(t2, fresh, 1e-4);
  absl::StatusOr<SessionInfo> info = engine->GetSession("chat", "");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->position, 30 + 6 + 12 + 6);
  EXPECT_EQ(info->turns, 2);
}

TEST(EngineTest, ForkThenSameSeedGivesSameTokens) {
  auto engine = testing_util::MakeEngine();
  ASSERT_TRUE(engine->CreateSession("a", "").ok());
  testing_util::Run(*engine, Greedy(testing_util::Prompt(20, 4), 4, "a"));
  ASSERT_TRUE(engine->ForkSession("a", "b", "").ok());
  GenerateRequest r = Greedy(testing_util::Prompt(5, 5), 10, "a");
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 1234;
  testing_util::Result ra = testing_util::Run(*engine, r);
  r.session_id = "b";
  testing_util::Result rb = testing_util::Run(*engine, r);
  EXPECT_EQ(ra.tokens, rb.tokens);
  EXPECT_EQ(engine->ForkSession("a", "b", "").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(engine->ForkSession("zz", "c", "").code(), absl::StatusCode::kNotFound);
}

TEST(EngineTest, ExportImportAndOffloadRestoreAreBitIdentical) {
  // One slot: a second session forces the first one out to host RAM and back.
  EngineOptions opts;
  opts.max_slots = 1;
  auto engine = testing_util::MakeEngine(opts);
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  testing_util::Run(*engine, Greedy(testing_util::Prompt(40, 6), 3, "s"));
  absl::StatusOr<std::string> blob = engine->ExportSession("s", "");
  ASSERT_TRUE(blob.ok()) << blob.status();
  ASSERT_TRUE(engine->ImportSession("copy", "", *blob).ok());
  ASSERT_TRUE(engine->CreateSession("other", "").ok());
  testing_util::Run(*engine, Greedy(testing_util::Prompt(9, 7), 3, "other"));  // evicts "s"
  EXPECT_EQ(engine->GetSession("s", "")->tier, Tier::kHost);
  testing_util::Result a = testing_util::Run(*engine, Greedy({1, 2, 3}, 5, "s"));
  testing_util::Result b = testing_util::Run(*engine, Greedy({1, 2, 3}, 5, "copy"));
  EXPECT_EQ(a.tokens, b.tokens);
  testing_util::ExpectLogprobsNear(a, b, 0.0);  // bit-identical
  EXPECT_EQ(engine->Stats().slots_used, 1);
}

TEST(EngineTest, ImportRefusesOtherModelsAndCorruption) {
  auto engine = testing_util::MakeEngine();
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  testing_util::Run(*engine, Greedy(testing_util::Prompt(10, 8), 2, "s"));
  std::string blob = *engine->ExportSession("s", "");
  std::string corrupt = blob;
  corrupt[corrupt.size() / 2] ^= 0x40;
  absl::Status st = engine->ImportSession("x", "", corrupt);
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st;
  st = engine->ImportSession("x", "", blob.substr(0, 100));
  EXPECT_FALSE(st.ok());
  st = engine->ImportSession("x", "", "hello");
  EXPECT_NE(st.message().find("not a linfer state blob"), std::string::npos) << st;
  auto other = testing_util::MakeEngine({}, "gdn_nogate");  // another model
  st = other->ImportSession("x", "", blob);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

TEST(EngineTest, DiskTierRoundTrip) {
  EngineOptions opts;
  opts.max_slots = 1;
  opts.tiers.host_bytes = 0;  // everything idle goes to disk
  opts.tiers.disk_dir = ::testing::TempDir() + "/linfer_disk_tier";
  auto engine = testing_util::MakeEngine(opts);
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  ASSERT_TRUE(engine->CreateSession("t", "").ok());
  testing_util::Result s1 = testing_util::Run(*engine, Greedy(testing_util::Prompt(25, 9), 3, "s"));
  const std::string before = *engine->ExportSession("s", "");
  testing_util::Run(*engine, Greedy(testing_util::Prompt(25, 10), 3, "t"));
  EXPECT_EQ(engine->GetSession("s", "")->tier, Tier::kDisk);
  EXPECT_EQ(*engine->ExportSession("s", ""), before);  // read back from disk
  EXPECT_GT(engine->Stats().sessions.disk_bytes, 0);
}

TEST(EngineTest, SessionErrors) {
  auto engine = testing_util::MakeEngine();
  EXPECT_EQ(engine->CreateSession("bad id!", "").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(engine->CreateSession("s", "alice").ok());
  EXPECT_EQ(engine->GetSession("s", "bob").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->Submit(Greedy({1}, 3, "s"), [](TokenEvent) {}).status().code(),
            absl::StatusCode::kNotFound);  // wrong owner
  GenerateRequest long_gen = Greedy({1, 2}, 1000, "s");
  long_gen.owner = "alice";
  testing_util::Collector c;
  absl::StatusOr<RequestId> id = engine->Submit(long_gen, c.Sink());
  ASSERT_TRUE(id.ok());
  absl::StatusOr<RequestId> second = engine->Submit(long_gen, [](TokenEvent) {});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("busy"), std::string::npos);
  EXPECT_EQ(engine->DeleteSession("s", "alice").code(), absl::StatusCode::kFailedPrecondition);
  engine->Cancel(*id);
  c.Wait();
  EXPECT_TRUE(engine->DeleteSession("s", "alice").ok());
}

TEST(EngineTest, ValidationQueueLimitsCancellationDeadline) {
  EngineOptions opts;
  opts.max_waiting_tokens = 50;
  auto engine = testing_util::MakeEngine(opts);
  EXPECT_EQ(engine->Submit(Greedy({1, 96}, 3), [](TokenEvent) {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  GenerateRequest bad = Greedy({1}, 3);
  bad.sampling.top_p = 1.5f;
  absl::Status st = engine->Submit(bad, [](TokenEvent) {}).status();
  EXPECT_NE(st.message().find("top_p"), std::string::npos) << st;
  EXPECT_EQ(engine->Submit(Greedy({}, 3), [](TokenEvent) {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      engine->Submit(Greedy(testing_util::Prompt(51, 1), 3), [](TokenEvent) {}).status().code(),
      absl::StatusCode::kResourceExhausted);
  // Cancellation mid-generation frees the slot.
  testing_util::Collector c;
  absl::StatusOr<RequestId> id = engine->Submit(Greedy({1, 2, 3}, 100000), c.Sink());
  ASSERT_TRUE(id.ok());
  c.WaitTokens(3);
  engine->Cancel(*id);
  c.Wait();
  EXPECT_EQ(c.Final().finish, Finish::kCancelled);
  // A deadline already past.
  GenerateRequest late = Greedy({1, 2}, 5);
  late.deadline = absl::Now() - absl::Seconds(1);
  testing_util::Result r = testing_util::Run(*engine, late);
  EXPECT_EQ(r.finish, Finish::kDeadline);
  EXPECT_EQ(engine->Stats().slots_used, 0);
  EXPECT_GE(engine->Stats().finished_total["cancelled"], 1);
}

TEST(EngineTest, StopDrainsThenCancels) {
  auto engine = testing_util::MakeEngine();
  testing_util::Collector c;
  ASSERT_TRUE(engine->Submit(Greedy({1, 2, 3}, 1000000), c.Sink()).ok());
  engine->Stop(absl::Milliseconds(50));
  c.Wait();
  EXPECT_EQ(c.Final().finish, Finish::kCancelled);
  EXPECT_EQ(engine->Submit(Greedy({1}, 2), [](TokenEvent) {}).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace linfer
