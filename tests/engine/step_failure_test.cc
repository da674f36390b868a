// Steps whose forward pass fails, as a device's can (EngineOptions::forward_fault stands in for the
// device, after the forward pass has moved the states): the requests in the failed step end with
// its error and the others go on; a session's state that the step may have moved part of the way
// goes back to its copy from before the prompt, or is lost — and its next request says so —; a
// lost device (kernels/device_lost.h) ends every request, refuses new ones, tells the observer
// once, refuses to export or fork the sessions its memory held (not the others), and the
// shutdown writes only the sessions that were not in its memory. And the warm-up
// step (EngineOptions::warm_up) that sizes a step's scratch before the first request.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "kernels/device_lost.h"
#include "tests/engine/engine_testing.h"

namespace linfer {
namespace {

using testing_util::Collector;
using testing_util::Greedy;
using testing_util::Prompt;

// The `nth` forward pass after Arm() (1: the next one) fails once with the armed error.
class Fault {
 public:
  void Arm(absl::Status error, int nth = 1) {
    absl::MutexLock lock(&mu_);
    error_ = std::move(error);
    countdown_ = nth;
  }
  std::function<absl::Status(uint64_t)> Hook() {
    return [this](uint64_t) {
      absl::MutexLock lock(&mu_);
      if (countdown_ <= 0 || --countdown_ > 0) return absl::OkStatus();
      return std::exchange(error_, absl::OkStatus());
    };
  }

 private:
  absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  int countdown_ ABSL_GUARDED_BY(mu_) = 0;
};

bool Contains(const absl::Status& st, absl::string_view what) {
  return st.message().find(what) != absl::string_view::npos;
}

// An engine on gdn_default whose forward passes `fault` fails when armed.
std::unique_ptr<Engine> FaultyEngine(Fault& fault, EngineOptions opts = {}) {
  opts.forward_fault = fault.Hook();
  return testing_util::MakeEngine(opts);
}

// `request`'s final event when its first forward pass fails with `error`.
TokenEvent RunFailing(Engine& engine, Fault& fault, absl::Status error,
                      const GenerateRequest& request) {
  fault.Arm(std::move(error));
  Collector c;
  const absl::StatusOr<RequestId> id = engine.Submit(request, c.Sink());
  EXPECT_TRUE(id.ok()) << id.status();
  if (!id.ok()) return {};
  c.Wait();
  return c.Final();
}

TEST(StepFailureTest, AFailedStepEndsItsRequestsAndTheEngineGoesOn) {
  Fault fault;
  auto engine = FaultyEngine(fault);
  ASSERT_NE(engine, nullptr);
  int lost = 0;
  engine->SetDeviceLostObserver([&](const absl::Status&) { ++lost; });
  const testing_util::Result want = testing_util::Run(*engine, Greedy(Prompt(9, 1), 6));
  const TokenEvent failed =
      RunFailing(*engine, fault, absl::ResourceExhaustedError("injected: cannot allocate 1 bytes"),
                 Greedy(Prompt(9, 1), 6));
  EXPECT_EQ(failed.finish, Finish::kError);
  EXPECT_EQ(failed.error.code(), absl::StatusCode::kResourceExhausted) << failed.error;
  EXPECT_TRUE(Contains(failed.error, "injected")) << failed.error;
  // Not a lost device: the engine takes the same request again and answers it as before.
  const testing_util::Result again = testing_util::Run(*engine, Greedy(Prompt(9, 1), 6));
  EXPECT_EQ(again.finish, Finish::kLength);
  EXPECT_EQ(again.tokens, want.tokens);
  EXPECT_EQ(lost, 0);
}

// A prompt that fits one step keeps no copy of the session's state from before it: when that step
// fails, the state may have moved part of the way, so the session is lost — its next turn, a fork
// and an export say so by name (DataLoss) rather than continue from a state no client sent; it can
// be deleted, and its id used again.
TEST(StepFailureTest, ASessionWhoseStepFailedIsLostUntilDeleted) {
  Fault fault;
  auto engine = FaultyEngine(fault);
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  testing_util::Run(*engine, Greedy(Prompt(12, 2), 3, "s"));
  EXPECT_EQ(
      RunFailing(*engine, fault, absl::InternalError("injected failure"), Greedy({4, 5, 6}, 3, "s"))
          .finish,
      Finish::kError);

  Collector next;
  ASSERT_TRUE(engine->Submit(Greedy({7}, 3, "s"), next.Sink()).ok());
  next.Wait();
  const absl::Status st = next.Final().error;
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_TRUE(Contains(st,
                       "session 's': its state was lost when a step computing it failed "
                       "(injected failure); delete it"))
      << st;
  EXPECT_EQ(engine->ExportSession("s", "").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(engine->ForkSession("s", "t", "").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(engine->GetSession("t", "").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(engine->GetSession("s", "").ok());  // still listed, until deleted
  ASSERT_TRUE(engine->DeleteSession("s", "").ok());
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  EXPECT_EQ(testing_util::Run(*engine, Greedy({7}, 3, "s")).finish, Finish::kLength);
}

// A prompt of several steps keeps a copy of the state from before it: a failure in its first
// step (nothing counted as computed yet, but the state moved) puts that copy back, as a failure in
// a later step does; the session then continues exactly like a twin that never saw the prompt.
TEST(StepFailureTest, AFailedFirstStepOfALongPromptPutsTheSessionBack) {
  Fault fault;
  EngineOptions opts;
  opts.scheduler.max_step_tokens = 8;
  auto engine = FaultyEngine(fault, opts);
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  testing_util::Run(*engine, Greedy(Prompt(12, 3), 2, "s"));
  const SessionInfo before = *engine->GetSession("s", "");
  ASSERT_TRUE(engine->ForkSession("s", "twin", "").ok());
  EXPECT_EQ(RunFailing(*engine, fault, absl::InternalError("injected failure"),
                       Greedy(Prompt(40, 4), 3, "s"))
                .finish,
            Finish::kError);
  const SessionInfo after = *engine->GetSession("s", "");
  EXPECT_EQ(after.position, before.position);
  EXPECT_EQ(after.turns, before.turns);
  const testing_util::Result a = testing_util::Run(*engine, Greedy({5, 6, 7}, 6, "s"));
  const testing_util::Result b = testing_util::Run(*engine, Greedy({5, 6, 7}, 6, "twin"));
  EXPECT_EQ(a.finish, Finish::kLength);
  EXPECT_EQ(a.tokens, b.tokens);
}

// After a lost device (`why`): session "in_slot" (its state in a slot) cannot be exported or
// forked, with `why`; the fork's new id is not taken.
void ExpectSlotSessionGone(Engine& engine, const absl::Status& why) {
  const absl::Status exported = engine.ExportSession("in_slot", "").status();
  EXPECT_EQ(exported, why);
  EXPECT_EQ(engine.ForkSession("in_slot", "fork", "").status(), why);
  EXPECT_EQ(engine.GetSession("fork", "").status().code(), absl::StatusCode::kNotFound);
}

// A lost device: every request, in the failed step or not, ends with Unavailable naming the
// device's error; new ones are refused with it, as are exports and forks of the session in a slot;
// the observer hears of it once; and the shutdown
// writes the sessions held in host RAM to the disk tier, not those the device's memory held.
TEST(StepFailureTest, ALostDeviceEndsEveryRequestAndRefusesNewOnes) {
  const std::string dir = testing_util::FreshDir("linfer_device_lost");
  Fault fault;
  EngineOptions opts;
  opts.forward_fault = fault.Hook();
  opts.scheduler.max_step_tokens = 16;
  opts.tiers.disk_dir = dir;
  {
    absl::Mutex mu;
    std::vector<absl::Status> heard;
    Collector one_off, long_prompt, late;  // outlive the engine, whose thread feeds them
    auto engine = testing_util::MakeEngine(opts);
    ASSERT_NE(engine, nullptr);
    engine->SetDeviceLostObserver([&](const absl::Status& why) {
      absl::MutexLock lock(&mu);
      heard.push_back(why);
    });
    ASSERT_TRUE(engine->CreateSession("in_slot", "").ok());
    testing_util::Run(*engine, Greedy(Prompt(10, 5), 2, "in_slot"));
    // An imported session starts in host RAM.
    ASSERT_TRUE(engine->ImportSession("in_ram", "", *engine->ExportSession("in_slot", "")).ok());
    ASSERT_EQ(engine->GetSession("in_ram", "")->tier, Tier::kHost);
    ASSERT_EQ(engine->GetSession("in_slot", "")->tier, Tier::kSlot);

    // One request decoding, one in the middle of a long prompt (3,000 tokens, 15 a step), when
    // the device is lost, four forward passes after both are in.
    ASSERT_TRUE(engine->Submit(Greedy(Prompt(5, 6), 4000), one_off.Sink()).ok());
    one_off.WaitTokens(3);
    ASSERT_TRUE(engine->Submit(Greedy(Prompt(3000, 7), 3), long_prompt.Sink()).ok());
    fault.Arm(DeviceLostError("cudaStreamSynchronize failed at kernels/x.cu:12: injected",
                              "injected: an illegal memory access"),
              4);
    one_off.Wait();
    long_prompt.Wait();
    for (Collector* c : {&one_off, &long_prompt}) {
      const absl::Status st = c->Final().error;
      EXPECT_EQ(c->result().finish, Finish::kError);
      EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
      EXPECT_TRUE(Contains(st,
                           "the server's cpu device failed and cannot be used again by this "
                           "process (injected: an illegal memory access); the server is "
                           "restarting: retry the request"))
          << st;
      EXPECT_FALSE(Contains(st, "kernels/x.cu")) << st;  // where it showed: for the log only
    }
    const absl::Status refused = engine->Submit(Greedy({1, 2}, 2), late.Sink()).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
    EXPECT_TRUE(Contains(refused, "injected: an illegal memory access")) << refused;
    // The session in a slot can no longer be exported or forked: the same Unavailable (not the
    // device's raw error); the one in host RAM still can, to be saved before the restart.
    ExpectSlotSessionGone(*engine, refused);
    EXPECT_TRUE(engine->ExportSession("in_ram", "").ok());
    EXPECT_TRUE(engine->GetSession("in_slot", "").ok());
    engine->Stop();
    ExpectSlotSessionGone(*engine, refused);  // the session RPCs after the engine's thread ended
    absl::MutexLock lock(&mu);
    ASSERT_EQ(heard.size(), 1u);
    EXPECT_EQ(heard[0], one_off.Final().error);
  }
  opts.forward_fault = nullptr;
  auto engine = testing_util::MakeEngine(opts);
  ASSERT_NE(engine, nullptr);
  absl::StatusOr<std::vector<SessionInfo>> listed = engine->ListSessions("");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id, "in_ram");
  EXPECT_EQ(testing_util::Run(*engine, Greedy({4}, 2, "in_ram")).finish, Finish::kLength);
}

// EngineOptions::warm_up: a step of the whole token budget before the first request, in a slot
// cleared after — the engine then answers exactly as one without it (on a hybrid too: the step's
// KV blocks go back), and holds no slot or KV block for it.
TEST(WarmUpTest, AWarmedUpEngineAnswersAsAColdOne) {
  for (const std::string& fixture :
       {std::string("gdn_default"),
        testing_util::FixtureSetDir(LINFER_HYBRID_FIXTURES) + "/qwen35_text_f32"}) {
    SCOPED_TRACE(fixture);
    EngineOptions opts;
    opts.scheduler.max_step_tokens = 48;
    std::vector<std::vector<int32_t>> got[2];
    EngineStats stats[2];
    for (int warm = 0; warm < 2; ++warm) {
      opts.warm_up = warm == 1;
      auto engine = testing_util::MakeEngine(opts, fixture);
      ASSERT_NE(engine, nullptr);
      ASSERT_TRUE(engine->CreateSession("s", "").ok());
      got[warm].push_back(testing_util::Run(*engine, Greedy(Prompt(30, 1), 5, "s")).tokens);
      got[warm].push_back(testing_util::Run(*engine, Greedy({3, 4}, 5, "s")).tokens);
      got[warm].push_back(testing_util::Run(*engine, Greedy(Prompt(60, 2), 6)).tokens);
      stats[warm] = engine->Stats();
    }
    EXPECT_EQ(got[1], got[0]);
    EXPECT_EQ(got[1][0].size(), 5u);
    EXPECT_EQ(stats[1].slots_used, 1);  // the session's
    EXPECT_EQ(stats[1].kv_blocks_used, stats[0].kv_blocks_used);
    EXPECT_EQ(stats[1].slots_total, stats[0].slots_total);
  }
}

// With max_model_len below the step budget the warm-up fills the budget as the scheduler would,
// with several prompts in as many slots (here both of the two): every slot is free afterwards.
TEST(WarmUpTest, ABudgetOfSeveralPromptsWarmsUpInAsManySlots) {
  EngineOptions opts;
  opts.scheduler.max_step_tokens = 48;
  opts.max_model_len = 24;
  opts.max_slots = 2;
  opts.warm_up = true;
  int passes = 0;
  opts.forward_fault = [&passes](uint64_t step) {
    if (step == 0) ++passes;
    return absl::OkStatus();
  };
  auto engine = testing_util::MakeEngine(opts);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(passes, 1);
  EXPECT_EQ(engine->Stats().slots_used, 0);
  std::vector<std::unique_ptr<Collector>> runs;
  for (int i = 0; i < 2; ++i) {  // both slots at once
    runs.push_back(std::make_unique<Collector>());
    ASSERT_TRUE(engine->Submit(Greedy(Prompt(10, i), 8), runs.back()->Sink()).ok());
  }
  for (auto& c : runs) {
    c->Wait();
    EXPECT_EQ(c->result().finish, Finish::kLength);
  }
}

// A warm-up step that fails fails Create, naming the step budget (and, out of memory, what to
// lower) — the server does not start to fail its first long prompt instead.
TEST(WarmUpTest, AFailedWarmUpFailsCreateNamingTheStepBudget) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Load(testing_util::FixtureSetDir(LINFER_FLA_FIXTURES) + "/gdn_default");
  ASSERT_TRUE(model.ok()) << model.status();
  EngineOptions opts;
  opts.state_memory_bytes = 64 << 20;
  opts.warm_up = true;
  opts.scheduler.max_step_tokens = 48;
  opts.forward_fault = [](uint64_t step) {
    return step == 0 ? absl::ResourceExhaustedError("cannot allocate 123 bytes") : absl::OkStatus();
  };
  const absl::Status st = Engine::Create(*std::move(model), opts).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_TRUE(Contains(
      st,
      "the warm-up step of 48 tokens (the step's token budget, "
      "--max_step_tokens, in prompts of at most --max_model_len) failed: cannot allocate 123 "
      "bytes. Lower "
      "--max_step_tokens"))
      << st;
}

}  // namespace
}  // namespace linfer
