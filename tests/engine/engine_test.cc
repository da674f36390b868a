// The engine end to end on a tiny reference checkpoint: batch invariance, sessions (continue =
// one long prompt, fork, export/import, offload/restore, tiers), errors, cancellation, deadlines.
// The tests about numbers and state movement run on every device (EngineOnDevice: the CPU, and
// CUDA with bf16 weights when the build and machine have it; skipped otherwise), including a
// session exported on the device and continued on the CPU and back.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/op_timer.h"
#include "models/runner.h"
#include "tests/engine/engine_testing.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::DeviceCase;
using testing_util::Greedy;

class EngineOnDevice : public ::testing::TestWithParam<DeviceCase> {
 protected:
  void SetUp() override {
    if (testing_util::DeviceMissing(GetParam())) GTEST_SKIP() << testing_util::kNoDevice;
  }
  Device device() const { return GetParam().device; }
  std::unique_ptr<Engine> Make(EngineOptions options = {},
                               const std::string& fixture = "gdn_default") const {
    return testing_util::MakeEngineOn(testing_util::ServingLoadOptions(device()),
                                      std::move(options), fixture);
  }
  // Logprob tolerance between two runs of one model whose batches differ: f32 sums on the CPU;
  // bf16-operand GEMMs on CUDA, whose kernel choice may follow the batch size.
  double batch_tol() const { return device() == Device::kCuda ? 2e-3 : 1e-4; }
  // r on an engine with `timed` (an op timer) and one with `plain` (the same without): the same
  // tokens and logprobs.
  void ExpectTimedRunChangesNothing(EngineOptions timed, EngineOptions plain,
                                    const GenerateRequest& r) const {
    auto a = Make(std::move(timed)), b = Make(std::move(plain));
    ASSERT_TRUE(a != nullptr && b != nullptr);
    const testing_util::Result want = testing_util::Run(*b, r), got = testing_util::Run(*a, r);
    EXPECT_EQ(got.tokens, want.tokens);
    testing_util::ExpectLogprobsNear(got, want, 0);
  }
};

TEST_P(EngineOnDevice, BatchInvariance) {
  auto engine = Make();
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
  testing_util::ExpectLogprobsNear(alone, batched, batch_tol());
}

TEST_P(EngineOnDevice, SessionContinueEqualsOneLongPrompt) {
  auto engine = Make();
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
  testing_util::ExpectLogprobsNear(t2, fresh, batch_tol());
  absl::StatusOr<SessionInfo> info = engine->GetSession("chat", "");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->position, 30 + 6 + 12 + 6);
  EXPECT_EQ(info->turns, 2);
}

TEST_P(EngineOnDevice, ForkThenSameSeedGivesSameTokens) {
  auto engine = Make();
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
  EXPECT_EQ(engine->ForkSession("a", "b", "").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(engine->ForkSession("zz", "c", "").status().code(), absl::StatusCode::kNotFound);
  // An id no session can have is the client's mistake, named as such.
  for (const std::string& id : {std::string(), std::string("a b"), std::string(129, 'x')}) {
    const absl::Status st = engine->GetSession(id, "").status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_NE(st.message().find("session_id"), std::string::npos) << st;
    EXPECT_EQ(engine->DeleteSession(id, "").code(), absl::StatusCode::kInvalidArgument) << id;
  }
}

TEST_P(EngineOnDevice, ExportImportAndOffloadRestoreAreBitIdentical) {
  // One slot: a second session forces the first one out to host RAM and back.
  EngineOptions opts;
  opts.max_slots = 1;
  auto engine = Make(opts);
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
  absl::Status st = engine->ImportSession("x", "", corrupt).status();
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st;
  st = engine->ImportSession("x", "", blob.substr(0, 100)).status();
  EXPECT_FALSE(st.ok());
  st = engine->ImportSession("x", "", "hello").status();
  EXPECT_NE(st.message().find("not a linfer state blob"), std::string::npos) << st;
  auto other = testing_util::MakeEngine({}, "gdn_nogate");  // another model
  st = other->ImportSession("x", "", blob).status();
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(EngineOnDevice, DiskTierRoundTrip) {
  EngineOptions opts;
  opts.max_slots = 1;
  opts.tiers.host_bytes = 0;  // everything idle goes to disk
  opts.tiers.disk_dir = testing_util::FreshDir("linfer_disk_tier");
  auto engine = Make(opts);
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
  EXPECT_EQ(engine->CreateSession("bad id!", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(engine->CreateSession("s", "alice").ok());
  EXPECT_EQ(engine->GetSession("s", "bob").status().code(), absl::StatusCode::kNotFound);
  // Session problems arrive as the request's final event.
  testing_util::Collector wrong_owner;
  ASSERT_TRUE(engine->Submit(Greedy({1}, 3, "s"), wrong_owner.Sink()).ok());
  wrong_owner.Wait();
  EXPECT_EQ(wrong_owner.Final().finish, Finish::kError);
  EXPECT_EQ(wrong_owner.Final().error.code(), absl::StatusCode::kNotFound);
  GenerateRequest long_gen = Greedy({1, 2}, 1000, "s");
  long_gen.owner = "alice";
  testing_util::Collector c;
  absl::StatusOr<RequestId> id = engine->Submit(long_gen, c.Sink());
  ASSERT_TRUE(id.ok());
  c.WaitTokens(1);
  testing_util::Collector second;
  ASSERT_TRUE(engine->Submit(long_gen, second.Sink()).ok());
  second.Wait();
  EXPECT_EQ(second.Final().error.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.Final().error.message().find("busy"), std::string::npos);
  // A client's next turn is refused before it is prepared: its history would change.
  const absl::Status turn = engine->SessionForTurn("s", "alice").status();
  EXPECT_EQ(turn.code(), absl::StatusCode::kFailedPrecondition) << turn;
  EXPECT_NE(turn.message().find("busy"), std::string::npos) << turn;
  EXPECT_EQ(engine->DeleteSession("s", "alice").code(), absl::StatusCode::kFailedPrecondition);
  engine->Cancel(*id);
  c.Wait();
  EXPECT_TRUE(engine->SessionForTurn("s", "alice").ok());
  EXPECT_TRUE(engine->DeleteSession("s", "alice").ok());
}

// A turn prepared against a session's history (GenerateRequest::session_history) that another
// request changed before the turn was admitted fails with Aborted, naming both counts, and leaves
// the session as it was; prepared against the history it holds, the turn runs.
TEST(EngineTest, ATurnPreparedAgainstAnOlderHistoryIsRefused) {
  auto engine = testing_util::MakeEngine();
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  ASSERT_EQ(testing_util::Run(*engine, Greedy({1, 2, 3}, 2, "s")).finish, Finish::kLength);
  const absl::StatusOr<SessionInfo> before = engine->SessionForTurn("s", "");
  ASSERT_TRUE(before.ok()) << before.status();
  GenerateRequest stale = Greedy({4, 5}, 2, "s");
  stale.session_history = before->position - 2;
  testing_util::Collector refused;
  ASSERT_TRUE(engine->Submit(stale, refused.Sink()).ok());
  refused.Wait();
  const absl::Status error = refused.Final().error;
  EXPECT_EQ(refused.Final().finish, Finish::kError);
  EXPECT_EQ(error.code(), absl::StatusCode::kAborted) << error;
  EXPECT_NE(error.message().find(absl::StrCat("it held ", before->position - 2,
                                              " tokens then and holds ", before->position)),
            std::string::npos)
      << error;
  const absl::StatusOr<SessionInfo> after = engine->SessionForTurn("s", "");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->position, before->position);
  EXPECT_EQ(after->turns, before->turns);
  GenerateRequest current = Greedy({4, 5}, 2, "s");
  current.session_history = before->position;
  EXPECT_EQ(testing_util::Run(*engine, current).finish, Finish::kLength);
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
  // A prompt longer than the queue could ever hold is refused for good, not "retry later".
  absl::Status too_long =
      engine->Submit(Greedy(testing_util::Prompt(51, 1), 3), [](TokenEvent) {}).status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("max_waiting_tokens"), std::string::npos) << too_long;
  // max_tokens beyond the server's limit, and beyond max_model_len.
  EXPECT_EQ(engine->Submit(Greedy({1}, 1 << 20), [](TokenEvent) {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Cancellation mid-generation frees the slot.
  testing_util::Collector c;
  absl::StatusOr<RequestId> id = engine->Submit(Greedy({1, 2, 3}, 60000), c.Sink());
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

TEST_P(EngineOnDevice, PrefillOnlyThenForksEqualsOnePass) {
  auto engine = Make();
  const std::vector<int32_t> prompt = testing_util::Prompt(90, 21);
  const testing_util::Result whole = testing_util::Run(*engine, Greedy(prompt, 6));
  // The prompt but its last token, once; then two forks each feed the last token and sample.
  ASSERT_TRUE(engine->CreateSession("base", "").ok());
  GenerateRequest prefill = Greedy({prompt.begin(), prompt.end() - 1}, 1, "base");
  prefill.prefill_only = true;
  const testing_util::Result p = testing_util::Run(*engine, prefill);
  EXPECT_EQ(p.finish, Finish::kLength);
  EXPECT_TRUE(p.tokens.empty());
  EXPECT_EQ(engine->GetSession("base", "")->position, 89);
  ASSERT_TRUE(engine->ForkSession("base", "f1", "").ok());
  for (const char* s : {"base", "f1"}) {
    SCOPED_TRACE(s);
    const testing_util::Result r = testing_util::Run(*engine, Greedy({prompt.back()}, 6, s));
    if (device() == Device::kCpu) {
      EXPECT_EQ(r.tokens, whole.tokens);
    } else {
      // The whole prompt's last token comes out of the chunked prefill (bf16 tensor-core
      // operands), the fork's from the f32 step kernel: measured on an H200, greedy picks of this
      // random toy parted after three tokens.
      testing_util::ExpectGreedyAgreesUntilNearTie(r, whole, 5e-2);
    }
  }
  GenerateRequest no_session = Greedy({1, 2}, 1);
  no_session.prefill_only = true;
  EXPECT_EQ(engine->Submit(no_session, [](TokenEvent) {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Over a run of decode steps, what crosses between host and device is the step's tokens, segment
// table and last-row indices in, and the logits (or, pre-sampled, each row's K best and its
// log-sum-exp) out: nothing else (no state ever moves). Pre-sampling is on by default on CUDA and
// forced on here for the CPU too. Temperature draws over the whole row add, per row, its
// 1/temperature and uniform in (one more copy per step) and the draw's token, logit and weight sum
// out — never the row.
TEST_P(EngineOnDevice, TransferAccountingOnlyStepDataCrosses) {
  for (const auto& [mode, temperature] : {std::pair{EngineOptions::Presampling::kAuto, 0.0f},
                                          {EngineOptions::Presampling::kOn, 0.0f},
                                          {EngineOptions::Presampling::kOff, 0.0f},
                                          {EngineOptions::Presampling::kOn, 1.0f}}) {
    SCOPED_TRACE(absl::StrCat(static_cast<int>(mode), " at temperature ", temperature));
    EngineOptions options;
    options.presample = mode;
    options.cuda_graphs = false;  // graphs upload padded inputs in one copy (engine_graph_test)
    auto engine = Make(options);
    ASSERT_EQ(engine->presampling(),
              mode == EngineOptions::Presampling::kOn ||
                  (mode == EngineOptions::Presampling::kAuto && device() == Device::kCuda));
    absl::Mutex mu;
    int64_t steps = 0, rows = 0, tokens = 0;
    engine->SetStepObserver([&](const StepRecord& r) {
      absl::MutexLock l(&mu);
      ++steps;
      rows += r.batch_size;
      tokens += r.tokens;
    });
    engine->transfers().Reset();
    std::vector<std::unique_ptr<testing_util::Collector>> cs;
    for (int i = 0; i < 4; ++i) {
      cs.push_back(std::make_unique<testing_util::Collector>());
      GenerateRequest r = Greedy(testing_util::Prompt(3 + i, i), 33);
      r.sampling.temperature = temperature;
      r.sampling.seed = 5 + i;
      r.stop.ignore_eos = true;
      ASSERT_TRUE(engine->Submit(r, cs.back()->Sink()).ok());
    }
    for (auto& c : cs) c->Wait();
    engine->Stop();
    absl::MutexLock l(&mu);
    EXPECT_GE(steps, 32);
    const int64_t vocab = engine->model().vocab_size(), k = engine->presample_k();
    const bool draws = temperature > 0.0f;
    EXPECT_EQ(engine->transfers().h2d_bytes.load(),
              4 * tokens + 32 * rows + 4 * rows + (draws ? 12 * rows : 0));
    EXPECT_EQ(engine->transfers().d2h_bytes.load(),
              engine->presampling() ? 4 * (2 * k + 2) * rows + (draws ? 16 * rows : 0)
                                    : 4 * vocab * rows);
    EXPECT_EQ(engine->transfers().h2d_calls.load(), (draws ? 4 : 3) * steps);
    EXPECT_EQ(engine->transfers().d2h_calls.load(), steps);
  }
}

// Pre-sampled rows give what whole rows give: the same tokens from the same seeds (greedy,
// top-k, top-k + top-p, min-p, min-p so small it needs the whole row after all, a temperature
// draw over the whole row made on the device, penalties that only lower logits) and the logprobs
// to the rounding of the log-sum-exp; requests the K best cannot decide (a positive logit bias,
// a penalty that raises logits or with a draw over the whole row; top-p alone on this small
// vocabulary) take their whole row in the same steps. Two engines on this device, one
// request at a time (the same batches on both), then (CPU, batch-invariant) all of them at once on
// the pre-sampling one.
TEST_P(EngineOnDevice, PresampledRowsGiveTheWholeRowsTokens) {
  EngineOptions on, off;
  on.presample = EngineOptions::Presampling::kOn;
  off.presample = EngineOptions::Presampling::kOff;
  on.batch_invariant = off.batch_invariant = true;  // CPU: a row's logits whatever the batch
  auto a = Make(on), b = Make(off);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  std::vector<GenerateRequest> requests;
  auto add = [&](float temperature, int top_k, float top_p, float min_p) {
    GenerateRequest r = Greedy(testing_util::Prompt(20 + 7 * static_cast<int>(requests.size()),
                                                    static_cast<uint32_t>(requests.size())),
                               24);
    r.sampling.temperature = temperature;
    r.sampling.top_k = top_k;
    r.sampling.top_p = top_p;
    r.sampling.min_p = min_p;
    r.sampling.seed = 100 + requests.size();
    requests.push_back(std::move(r));
  };
  add(0.0f, 0, 1.0f, 0.0f);
  add(1.0f, 8, 1.0f, 0.0f);
  add(0.8f, 50, 0.9f, 0.0f);
  add(1.0f, 0, 1.0f, 0.05f);
  add(1.0f, 0, 0.95f, 0.2f);
  add(1.0f, 0, 1.0f, 1e-6f);  // keeps most of the vocabulary: the whole row
  add(1.0f, 0, 1.0f, 0.0f);   // a dense draw
  add(1.6f, 0, 1.0f, 0.0f);   // a hotter one, with logprobs
  requests.back().sampling.logprobs = 3;
  add(0.7f, 0, 0.8f, 0.0f);  // top-p alone
  add(1.0f, 10, 1.0f, 0.0f);
  requests.back().sampling.logit_bias = {{3, 2.0f}};
  add(1.0f, 10, 1.0f, 0.0f);
  requests.back().sampling.repetition_penalty = 1.3f;  // lowers logits: the K best settle it
  add(0.7f, 20, 0.8f, 0.0f);                           // Qwen3.5's recommended sampling
  requests.back().sampling.presence_penalty = 1.5f;
  add(0.0f, 0, 1.0f, 0.0f);
  requests.back().sampling.frequency_penalty = 0.5f;
  add(1.0f, 0, 1.0f, 0.0f);  // a draw over the whole row with a penalty: the whole row
  requests.back().sampling.presence_penalty = 0.5f;
  add(1.0f, 10, 1.0f, 0.0f);  // a penalty that raises logits: the whole row
  requests.back().sampling.frequency_penalty = -0.5f;
  std::vector<testing_util::Result> want;
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(i);
    want.push_back(testing_util::Run(*b, requests[i]));
    const testing_util::Result got = testing_util::Run(*a, requests[i]);
    EXPECT_EQ(got.finish, Finish::kLength);
    EXPECT_EQ(got.tokens, want.back().tokens);
    testing_util::ExpectLogprobsNear(got, want.back(), 1e-5);
  }
  if (device() == Device::kCuda) return;  // batched CUDA logits differ in their last bits
  std::vector<std::unique_ptr<testing_util::Collector>> cs;
  for (const GenerateRequest& r : requests) {
    cs.push_back(std::make_unique<testing_util::Collector>());
    ASSERT_TRUE(a->Submit(r, cs.back()->Sink()).ok());
  }
  for (size_t i = 0; i < cs.size(); ++i) {
    cs[i]->Wait();
    EXPECT_EQ(cs[i]->result().tokens, want[i].tokens) << i;
  }
}

// EngineOptions::op_timer (kernels/op_timer.h; engine_benchmark --op_times): on CUDA every
// decode-only step but the first of its batch size is one window, its launches are timed and
// nothing the requests get changes (the same tokens and logprobs as the same eager engine without
// it); with CUDA graphs on, Create refuses the timer. On the CPU there is no timer to make, and an
// engine refuses one (below).
TEST_P(EngineOnDevice, OpTimerTimesTheDecodeStepsAndChangesNothing) {
  absl::StatusOr<std::unique_ptr<OpTimer>> timer = OpTimer::Create(device());
  if (device() == Device::kCpu) {
    EXPECT_EQ(timer.status().code(), absl::StatusCode::kFailedPrecondition) << timer.status();
    return;
  }
  ASSERT_TRUE(timer.ok()) << timer.status();
  EngineOptions plain;
  plain.cuda_graphs = false;
  EngineOptions timed = plain;
  timed.op_timer = timer->get();
  ASSERT_NO_FATAL_FAILURE(
      ExpectTimedRunChangesNothing(timed, plain, Greedy(testing_util::Prompt(12, 5), 10)));
  const OpTimes t = (*timer)->Totals();
  // The first token comes from the prompt's step, the other 9 from decode steps, all of batch 1.
  EXPECT_EQ(t.windows, 8) << "one per decode step but the first";
  EXPECT_EQ(t.timeouts, 0);
  EXPECT_EQ(t.host_paced, 0) << "nothing in a decode step waits for the stream";
  EXPECT_GT(t.ms, 0);
  bool product = false;
  for (const OpTime& op : t.ops) {
    product |= op.label.starts_with("cublasLt ") || op.label == "GemvKernel";
  }
  EXPECT_GE(t.launches, 8 * 10) << "about ten launches a layer";
  EXPECT_TRUE(product) << "the projections are timed too";
  EngineOptions graphed;
  graphed.op_timer = timer->get();
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Load(testing_util::FixtureSetDir(LINFER_FLA_FIXTURES) + "/gdn_default",
                  testing_util::ServingLoadOptions(device()));
  ASSERT_TRUE(model.ok()) << model.status();
  const absl::StatusOr<std::unique_ptr<Engine>> refused =
      Engine::Create(*std::move(model), graphed);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
}

// EngineOptions::prefill_op_timer: every step that carries a prompt's tokens is one window
// without a gate (graphs on: prompt steps are never graphed), each of its launches timed and
// host-paced; decode steps are not timed, and nothing the requests get changes.
TEST_P(EngineOnDevice, PrefillOpTimerTimesThePromptSteps) {
  absl::StatusOr<std::unique_ptr<OpTimer>> timer = OpTimer::Create(device());
  if (device() == Device::kCpu) {
    EXPECT_EQ(timer.status().code(), absl::StatusCode::kFailedPrecondition) << timer.status();
    return;
  }
  ASSERT_TRUE(timer.ok()) << timer.status();
  EngineOptions plain;
  plain.scheduler.max_step_tokens = 16;
  EngineOptions timed = plain;
  timed.prefill_op_timer = timer->get();
  ASSERT_NO_FATAL_FAILURE(
      ExpectTimedRunChangesNothing(timed, plain, Greedy(testing_util::Prompt(40, 5), 6)));
  const OpTimes t = (*timer)->Totals();
  EXPECT_EQ(t.windows, 3) << "a 40-token prompt in steps of 16: three prompt steps, no decode";
  EXPECT_EQ(t.timeouts, 0);
  EXPECT_EQ(t.untimed, 0) << "no gate: the first launch is timed too";
  EXPECT_GE(t.launches, 3 * 10) << "about ten launches a layer";
  EXPECT_EQ(t.host_paced, t.launches) << "every launch of a window without a gate";
  EXPECT_GT(t.ms, 0);
}

TEST(EngineTest, OpTimerIsRefusedOnTheCpu) {
  class NullTimer : public OpTimer {
    using OpTimer::Open;
    absl::Status Open(const ExecContext&, Gate) override { return absl::OkStatus(); }
    absl::Status Close() override { return absl::OkStatus(); }
    OpTimes Totals() const override { return {}; }
    void Reset() override {}
  } timer;
  // Each option on a CPU model: refused, by name.
  auto refused = [](const EngineOptions& options, absl::string_view name) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::unique_ptr<Model>> model =
        Model::Load(testing_util::FixtureSetDir(LINFER_FLA_FIXTURES) + "/gdn_default", {});
    ASSERT_TRUE(model.ok()) << model.status();
    const absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(*std::move(model), options);
    ASSERT_FALSE(engine.ok());
    EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(engine.status().message().find(name), absl::string_view::npos) << engine.status();
  };
  EngineOptions decode;
  decode.state_memory_bytes = 64 << 20;
  decode.cuda_graphs = false;
  decode.op_timer = &timer;
  refused(decode, "op_timer");
  EngineOptions prefill;
  prefill.state_memory_bytes = 64 << 20;
  prefill.prefill_op_timer = &timer;
  refused(prefill, "prefill_op_timer");
}

TEST(EngineTest, QueueFullIsResourceExhausted) {
  EngineOptions opts;
  opts.max_slots = 1;
  opts.max_waiting = 1;
  auto engine = testing_util::MakeEngine(opts);
  testing_util::Collector running, waiting;
  absl::StatusOr<RequestId> a = engine->Submit(Greedy({1, 2, 3}, 60000), running.Sink());
  ASSERT_TRUE(a.ok());
  running.WaitTokens(1);  // it holds the only slot
  absl::StatusOr<RequestId> b = engine->Submit(Greedy({4, 5}, 3), waiting.Sink());
  ASSERT_TRUE(b.ok());
  absl::Status full = engine->Submit(Greedy({6}, 3), [](TokenEvent) {}).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  engine->Cancel(*a);
  waiting.Wait();
  EXPECT_EQ(waiting.Final().finish, Finish::kLength);
}

TEST(EngineTest, StopDrainsThenCancels) {
  auto engine = testing_util::MakeEngine();
  testing_util::Collector c;
  ASSERT_TRUE(engine->Submit(Greedy({1, 2, 3}, 60000), c.Sink()).ok());
  engine->Stop(absl::Milliseconds(50));
  c.Wait();
  EXPECT_EQ(c.Final().finish, Finish::kCancelled);
  EXPECT_EQ(engine->Submit(Greedy({1}, 2), [](TokenEvent) {}).status().code(),
            absl::StatusCode::kUnavailable);
}

// A session computed on this device, exported, imported on the CPU, continued on both; and the
// CPU's state brought back. The blob is device-neutral (f32 sections, the same fingerprint).
TEST_P(EngineOnDevice, ExportOnTheDeviceContinuesOnTheCpuAndBack) {
  // f32 weights on the device too: this test is about moving states between devices, and bf16
  // weights and activations alone swap near-tied top-5 logprobs on this fixture (measured on the
  // CPU emulating CUDA's rounding).
  auto here = testing_util::MakeEngineOn({device(), DType::kF32});
  auto cpu = testing_util::MakeEngine();
  ASSERT_TRUE(here != nullptr && cpu != nullptr);
  ASSERT_TRUE(here->CreateSession("s", "").ok());
  testing_util::Run(*here, Greedy(testing_util::Prompt(50, 31), 4, "s"));
  absl::StatusOr<std::string> blob = here->ExportSession("s", "");
  ASSERT_TRUE(blob.ok()) << blob.status();
  ASSERT_TRUE(cpu->ImportSession("s", "", *blob).ok());
  const std::vector<int32_t> next = testing_util::Prompt(9, 32);
  testing_util::Result on_device = testing_util::Run(*here, Greedy(next, 6, "s"));
  testing_util::Result on_cpu = testing_util::Run(*cpu, Greedy(next, 6, "s"));
  EXPECT_EQ(on_device.tokens, on_cpu.tokens);
  testing_util::ExpectLogprobsNear(on_device, on_cpu, device() == Device::kCuda ? 2e-2 : 0.0);
  // Back: the CPU's state imported on the device continues exactly as the CPU's own import.
  absl::StatusOr<std::string> back = cpu->ExportSession("s", "");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(here->ImportSession("from_cpu", "", *back).ok());
  ASSERT_TRUE(here->ImportSession("from_cpu_2", "", *back).ok());
  testing_util::Result a = testing_util::Run(*here, Greedy({5, 6}, 5, "from_cpu"));
  testing_util::Result b = testing_util::Run(*here, Greedy({5, 6}, 5, "from_cpu_2"));
  testing_util::Result c = testing_util::Run(*cpu, Greedy({5, 6}, 5, "s"));
  EXPECT_EQ(a.tokens, b.tokens);
  testing_util::ExpectLogprobsNear(a, b, 0.0);
  EXPECT_EQ(a.tokens, c.tokens);
  testing_util::ExpectLogprobsNear(a, c, device() == Device::kCuda ? 2e-2 : 0.0);
}

// Prompt logprobs (OpenAI's echo with logprobs): every prompt token after the first gets the
// log-softmax of the raw logits of the row before it — against one sequence fed alone with every
// row's logits — over a prompt cut into chunks (the 512-row cap of one step and the step budget),
// next to another request in the same steps; the tokens it goes on to generate are unchanged, and
// the entries come once, with the first token.
TEST_P(EngineOnDevice, PromptLogprobsAreEveryPromptRowsRawLogprobs) {
  EngineOptions options;
  options.scheduler.max_step_tokens = 1024;
  auto engine = Make(options);
  ASSERT_TRUE(engine != nullptr);
  const std::vector<int32_t> prompt = testing_util::Prompt(700, 41);
  GenerateRequest r = Greedy(prompt, 4);
  r.prompt_logprobs = 3;
  testing_util::Collector other, mine;
  ASSERT_TRUE(engine->Submit(Greedy(testing_util::Prompt(300, 42), 8), other.Sink()).ok());
  ASSERT_TRUE(engine->Submit(r, mine.Sink()).ok());
  mine.Wait();
  other.Wait();
  const testing_util::Result got = mine.result();
  EXPECT_EQ(got.prompt_logprob_events, 1);
  const testing_util::Result plain = testing_util::Run(*engine, Greedy(prompt, 4));
  EXPECT_EQ(got.tokens, plain.tokens);

  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Load(testing_util::FixtureSetDir(LINFER_FLA_FIXTURES) + "/gdn_default",
                  testing_util::ServingLoadOptions(device()));
  ASSERT_TRUE(model.ok()) << model.status();
  SequenceRunner runner(model->get());
  ForwardOptions all;
  all.all_logits = true;
  absl::StatusOr<Tensor> logits = runner.Feed(prompt, all);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const int64_t vocab = (*model)->vocab_size();
  ASSERT_EQ(got.prompt_logprobs.size(), prompt.size());
  EXPECT_EQ(got.prompt_logprobs[0].token, prompt[0]);
  EXPECT_FALSE(got.prompt_logprobs[0].logprob.has_value());
  const double tol = device() == Device::kCuda ? 2e-2 : 1e-4;
  for (size_t k = 1; k < prompt.size(); ++k) {
    const PromptLogprob& e = got.prompt_logprobs[k];
    const float* row = logits->data<float>() + (k - 1) * vocab;
    double max = row[0];
    for (int64_t v = 1; v < vocab; ++v) max = std::max<double>(max, row[v]);
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
    const double log_z = max + std::log(sum);
    ASSERT_EQ(e.token, prompt[k]) << k;
    ASSERT_TRUE(e.logprob.has_value()) << k;
    EXPECT_NEAR(*e.logprob, row[prompt[k]] - log_z, tol) << k;
    ASSERT_EQ(e.top_logprobs.size(), 3u) << k;
    if (device() == Device::kCpu) {  // (bf16 rounding may reorder near ties)
      EXPECT_EQ(e.rank,
                1 + std::count_if(row, row + vocab, [&](float v) { return v > row[prompt[k]]; }))
          << k;
    }
    EXPECT_NEAR(e.top_logprobs[0].second, *std::max_element(row, row + vocab) - log_z, tol) << k;
  }
  // Only one-off requests: a session's first token has the history's logits.
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  GenerateRequest on_session = Greedy(prompt, 2, "s");
  on_session.prompt_logprobs = 1;
  EXPECT_EQ(engine->Submit(on_session, [](TokenEvent) {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  on_session.session_id.clear();
  on_session.prompt_logprobs = 21;
  EXPECT_EQ(engine->Submit(on_session, [](TokenEvent) {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Devices, EngineOnDevice,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
