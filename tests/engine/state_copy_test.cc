// A session's state before a prompt that takes several steps (the rollback point a cancel,
// deadline or error before the prompt ends goes back to): kept in a free slot (device to device)
// while one is free, else in host RAM, moved to host RAM when a request needs its slot, and given
// back as soon as the prompt is in. Whichever way, a cut prompt leaves the session as it was: it
// continues exactly as the same session on a second engine that never saw the cut prompt (the
// oracle), on a recurrent model and on a hybrid (whose KV past the rollback point is dropped).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/time/clock.h"
#include "tests/engine/engine_testing.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::Collector;
using testing_util::Greedy;
using testing_util::Result;

constexpr int kStepTokens = 8;  // a step's token budget: a long prompt takes many steps

// (fixture, device); CUDA skipped where the build or the machine has none.
class SessionCheckpointTest
    : public ::testing::TestWithParam<std::tuple<std::string, testing_util::DeviceCase>> {
 protected:
  void SetUp() override {
    if (testing_util::DeviceMissing(std::get<1>(GetParam()))) {
      GTEST_SKIP() << testing_util::kNoDevice;
    }
  }
  // Engines of `slots` slots, no prefix cache (its saved states would take the free slots).
  std::unique_ptr<Engine> Start(int slots) {
    EngineOptions opts;
    opts.scheduler.max_step_tokens = kStepTokens;
    opts.max_slots = slots;
    opts.cuda_graphs = false;  // no padding slot: `slots` for the requests
    opts.batch_invariant = true;
    opts.prefix_cache.budget_bytes = 0;
    const Device device = std::get<1>(GetParam()).device;
    auto engine = testing_util::MakeEngineOn(testing_util::ServingLoadOptions(device), opts,
                                             std::get<0>(GetParam()));
    if (engine != nullptr) vocab_ = static_cast<int32_t>(engine->model().vocab_size());
    return engine;
  }
  std::vector<int32_t> Prompt(int n, uint32_t seed) const {
    std::vector<int32_t> p = testing_util::Prompt(n, seed);
    for (int32_t& t : p) t %= std::min(vocab_, 64);
    return p;
  }
  // The long prompt: thousands of steps of kStepTokens, within the model's length.
  std::vector<int32_t> LongPrompt(const Engine& engine) const {
    return Prompt(std::min<int>(20000, static_cast<int>(engine.options().max_model_len) - 64), 4);
  }
  // engine_ and the oracle ref_, of `slots` slots, with session "s" one turn in (a prompt of
  // one step: no copy).
  void StartBoth(int slots) {
    engine_ = Start(slots);
    ref_ = Start(slots);
    ASSERT_NE(engine_, nullptr);
    ASSERT_NE(ref_, nullptr);
    for (Engine* e : {engine_.get(), ref_.get()}) {
      ASSERT_TRUE(e->CreateSession("s", "").ok());
      testing_util::Run(*e, Greedy(Prompt(kStepTokens - 2, 3), 2, "s"));
      EXPECT_EQ(e->Stats().state_copies.slot + e->Stats().state_copies.host, 0);
    }
  }
  // StartBoth, then the long prompt on engine_'s session, paused once the engine holds its state
  // copy (the prompt is then part-way: the copy is taken when it is admitted). TearDown cancels
  // it if the test has not (CancelMidPrompt).
  void StartCut(int slots) {
    StartBoth(slots);
    if (HasFatalFailure()) return;
    const EngineStats before = engine_->Stats();
    const int64_t copies = before.state_copies.slot + before.state_copies.host;
    absl::StatusOr<RequestId> id =
        engine_->Submit(Greedy(LongPrompt(*engine_), 5, "s"), cut_.Sink());
    ASSERT_TRUE(id.ok()) << id.status();
    cut_id_ = *id;
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    for (;;) {
      const EngineStats now = engine_->Stats();
      if (now.state_copies.slot + now.state_copies.host > copies) break;
      if (absl::Now() > give_up) {
        ADD_FAILURE() << "no state copy was taken";
        break;
      }
      absl::SleepFor(absl::Microseconds(100));
    }
    engine_->SetPaused(*cut_id_, true);
  }
  // Cancels the paused long prompt and waits for its end: nothing was generated.
  void CancelMidPrompt() {
    if (!cut_id_) return;
    engine_->Cancel(*cut_id_);
    engine_->SetPaused(*cut_id_, false);
    cut_id_.reset();
    cut_.Wait();
    EXPECT_EQ(cut_.result().finish, Finish::kCancelled);
    EXPECT_TRUE(cut_.result().tokens.empty()) << "the prompt had ended: nothing was cut";
  }
  void TearDown() override { CancelMidPrompt(); }
  // The session continues as the oracle's does.
  void ExpectSameSession() const {
    EXPECT_EQ(engine_->GetSession("s", "")->position, ref_->GetSession("s", "")->position);
    EXPECT_EQ(engine_->GetSession("s", "")->turns, ref_->GetSession("s", "")->turns);
    const Result a = testing_util::Run(*engine_, Greedy({5, 6, 7}, 6, "s"));
    const Result b = testing_util::Run(*ref_, Greedy({5, 6, 7}, 6, "s"));
    EXPECT_EQ(a.tokens, b.tokens);
  }

  int32_t vocab_ = 64;
  std::unique_ptr<Engine> engine_, ref_;
  Collector cut_;
  std::optional<RequestId> cut_id_;
};

// Slots free: the copy goes into one, and back device to device.
TEST_P(SessionCheckpointTest, ACutPromptGoesBackFromACopyInASlot) {
  ASSERT_NO_FATAL_FAILURE(StartCut(4));
  const EngineStats during = engine_->Stats();
  EXPECT_EQ(during.state_copies.slot, 1);
  EXPECT_EQ(during.state_copies.host, 0);
  EXPECT_EQ(during.slots_used, 2) << "the session's slot and its copy's";
  CancelMidPrompt();
  EXPECT_EQ(engine_->Stats().slots_used, 1) << "the copy's slot is free again";
  ExpectSameSession();
}

// One slot, the session's: the copy is in host RAM.
TEST_P(SessionCheckpointTest, WithNoSlotFreeTheCopyIsInHostRam) {
  ASSERT_NO_FATAL_FAILURE(StartCut(1));
  EXPECT_EQ(engine_->Stats().state_copies.host, 1);
  EXPECT_EQ(engine_->Stats().state_copies.slot, 0);
  CancelMidPrompt();
  ExpectSameSession();
}

// Two slots: the session's and its copy's. A one-off request arriving while the prompt is paused
// can only run on the copy's slot: the copy moves to host RAM, and the cut prompt goes back from
// there.
TEST_P(SessionCheckpointTest, ACopyInASlotMovesToHostRamWhenTheSlotIsNeeded) {
  ASSERT_NO_FATAL_FAILURE(StartCut(2));
  ASSERT_EQ(engine_->Stats().state_copies.slot, 1);
  const Result other = testing_util::Run(*engine_, Greedy(Prompt(6, 9), 3));
  EXPECT_EQ(other.finish, Finish::kLength);
  EXPECT_EQ(engine_->Stats().state_copies.moved, 1);
  CancelMidPrompt();
  EXPECT_EQ(engine_->Stats().slots_used, 1);
  ExpectSameSession();
}

// A prompt that runs to its end gives the copy's slot back with its last chunk, before the reply
// ends; the session then holds prompt and reply as the oracle's does.
TEST_P(SessionCheckpointTest, TheCopyGoesOnceThePromptIsIn) {
  ASSERT_NO_FATAL_FAILURE(StartBoth(4));
  const std::vector<int32_t> prompt = Prompt(40 * kStepTokens, 11);
  Collector c;
  absl::StatusOr<RequestId> id = engine_->Submit(Greedy(prompt, 400, "s"), c.Sink());
  ASSERT_TRUE(id.ok()) << id.status();
  c.WaitTokens(1);
  engine_->SetPaused(*id, true);
  absl::Cleanup settle = [&] {
    engine_->SetPaused(*id, false);
    c.Wait();
  };
  // (The copy's slot went back in the step that fed the prompt's end; the published figures
  // follow within a step or two.)
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (engine_->Stats().slots_used != 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(engine_->Stats().slots_used, 1) << "the copy's slot is still taken";
  EXPECT_EQ(engine_->Stats().state_copies.slot, 1);
  std::move(settle).Invoke();
  EXPECT_EQ(c.result().finish, Finish::kLength);
  EXPECT_EQ(c.result().tokens, testing_util::Run(*ref_, Greedy(prompt, 400, "s")).tokens);
  ExpectSameSession();
}

INSTANTIATE_TEST_SUITE_P(
    Devices, SessionCheckpointTest,
    ::testing::Combine(::testing::Values(std::string("gdn_default"),
                                         testing_util::FixtureSetDir(LINFER_HYBRID_FIXTURES) +
                                             "/qwen35_text_f32"),
                       ::testing::ValuesIn(testing_util::AllDeviceCases())),
    [](const ::testing::TestParamInfo<SessionCheckpointTest::ParamType>& info) {
      const std::string& f = std::get<0>(info.param);
      return (f.find("qwen35") != std::string::npos ? std::string("qwen35") : f) + "_" +
             std::get<1>(info.param).name;
    });

}  // namespace
}  // namespace linfer
