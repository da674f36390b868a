// A session's state before a prompt that takes several steps (the rollback point a cancel,
// deadline or error before the prompt ends goes back to): kept in a free slot (device to device)
// while one is free, else in host RAM, moved to host RAM when a request needs its slot, and given
// back as soon as the prompt is in. Whichever way, a cut prompt leaves the session as it was: it
// continues exactly as the same session on a second engine that never saw the cut prompt (the
// oracle), on a recurrent model and on a hybrid (whose KV past the rollback point is dropped).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
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
  // Session "s" with one turn behind it (a prompt of one step: no copy), on `engine` and on the
  // oracle `ref`.
  void FirstTurn(Engine& engine, Engine& ref) const {
    for (Engine* e : {&engine, &ref}) {
      ASSERT_TRUE(e->CreateSession("s", "").ok());
      testing_util::Run(*e, Greedy(Prompt(kStepTokens - 2, 3), 2, "s"));
      EXPECT_EQ(e->Stats().state_copies.slot + e->Stats().state_copies.host, 0);
    }
  }
  // Submits `r` and pauses it once the engine holds its state copy (the prompt is then part-way:
  // the copy is taken when it is admitted).
  RequestId SubmitAndPauseMidPrompt(Engine& engine, const GenerateRequest& r, Collector& c) const {
    const EngineStats before = engine.Stats();
    const int64_t copies = before.state_copies.slot + before.state_copies.host;
    absl::StatusOr<RequestId> id = engine.Submit(r, c.Sink());
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return 0;
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    for (;;) {
      const EngineStats now = engine.Stats();
      if (now.state_copies.slot + now.state_copies.host > copies) break;
      if (absl::Now() > give_up) {
        ADD_FAILURE() << "no state copy was taken";
        break;
      }
      absl::SleepFor(absl::Microseconds(100));
    }
    engine.SetPaused(*id, true);
    return *id;
  }
  // The session continues as the oracle's does.
  void ExpectSameSession(Engine& engine, Engine& ref) const {
    EXPECT_EQ(engine.GetSession("s", "")->position, ref.GetSession("s", "")->position);
    EXPECT_EQ(engine.GetSession("s", "")->turns, ref.GetSession("s", "")->turns);
    const Result a = testing_util::Run(engine, Greedy({5, 6, 7}, 6, "s"));
    const Result b = testing_util::Run(ref, Greedy({5, 6, 7}, 6, "s"));
    EXPECT_EQ(a.tokens, b.tokens);
  }
  // Cancels the paused request `id` and waits for its end.
  static void CancelMidPrompt(Engine& engine, RequestId id, Collector& c) {
    engine.Cancel(id);
    engine.SetPaused(id, false);
    c.Wait();
    EXPECT_EQ(c.result().finish, Finish::kCancelled);
    EXPECT_TRUE(c.result().tokens.empty()) << "the prompt had ended: nothing was cut";
  }

  int32_t vocab_ = 64;
};

// Slots free: the copy goes into one, and back device to device.
TEST_P(SessionCheckpointTest, ACutPromptGoesBackFromACopyInASlot) {
  auto engine = Start(4), ref = Start(4);
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(ref, nullptr);
  FirstTurn(*engine, *ref);
  Collector c;
  const RequestId id = SubmitAndPauseMidPrompt(*engine, Greedy(LongPrompt(*engine), 5, "s"), c);
  absl::Cleanup settle = [&] { CancelMidPrompt(*engine, id, c); };
  const EngineStats during = engine->Stats();
  EXPECT_EQ(during.state_copies.slot, 1);
  EXPECT_EQ(during.state_copies.host, 0);
  EXPECT_EQ(during.slots_used, 2) << "the session's slot and its copy's";
  std::move(settle).Invoke();
  EXPECT_EQ(engine->Stats().slots_used, 1) << "the copy's slot is free again";
  ExpectSameSession(*engine, *ref);
}

// One slot, the session's: the copy is in host RAM.
TEST_P(SessionCheckpointTest, WithNoSlotFreeTheCopyIsInHostRam) {
  auto engine = Start(1), ref = Start(1);
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(ref, nullptr);
  FirstTurn(*engine, *ref);
  Collector c;
  const RequestId id = SubmitAndPauseMidPrompt(*engine, Greedy(LongPrompt(*engine), 5, "s"), c);
  absl::Cleanup settle = [&] { CancelMidPrompt(*engine, id, c); };
  EXPECT_EQ(engine->Stats().state_copies.host, 1);
  EXPECT_EQ(engine->Stats().state_copies.slot, 0);
  std::move(settle).Invoke();
  ExpectSameSession(*engine, *ref);
}

// Two slots: the session's and its copy's. A one-off request arriving while the prompt is paused
// can only run on the copy's slot: the copy moves to host RAM, and the cut prompt goes back from
// there.
TEST_P(SessionCheckpointTest, ACopyInASlotMovesToHostRamWhenTheSlotIsNeeded) {
  auto engine = Start(2), ref = Start(2);
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(ref, nullptr);
  FirstTurn(*engine, *ref);
  Collector c;
  const RequestId id = SubmitAndPauseMidPrompt(*engine, Greedy(LongPrompt(*engine), 5, "s"), c);
  absl::Cleanup settle = [&] { CancelMidPrompt(*engine, id, c); };
  ASSERT_EQ(engine->Stats().state_copies.slot, 1);
  const Result other = testing_util::Run(*engine, Greedy(Prompt(6, 9), 3));
  EXPECT_EQ(other.finish, Finish::kLength);
  EXPECT_EQ(engine->Stats().state_copies.moved, 1);
  std::move(settle).Invoke();
  EXPECT_EQ(engine->Stats().slots_used, 1);
  ExpectSameSession(*engine, *ref);
}

// A prompt that runs to its end gives the copy's slot back with its last chunk, before the reply
// ends; the session then holds prompt and reply as the oracle's does.
TEST_P(SessionCheckpointTest, TheCopyGoesOnceThePromptIsIn) {
  auto engine = Start(4), ref = Start(4);
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(ref, nullptr);
  FirstTurn(*engine, *ref);
  const std::vector<int32_t> prompt = Prompt(40 * kStepTokens, 11);
  Collector c;
  absl::StatusOr<RequestId> id = engine->Submit(Greedy(prompt, 400, "s"), c.Sink());
  ASSERT_TRUE(id.ok()) << id.status();
  c.WaitTokens(1);
  engine->SetPaused(*id, true);
  absl::Cleanup settle = [&] {
    engine->SetPaused(*id, false);
    c.Wait();
  };
  // (The copy's slot went back in the step that fed the prompt's end; the published figures
  // follow within a step or two.)
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (engine->Stats().slots_used != 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(engine->Stats().slots_used, 1) << "the copy's slot is still taken";
  EXPECT_EQ(engine->Stats().state_copies.slot, 1);
  std::move(settle).Invoke();
  EXPECT_EQ(c.result().finish, Finish::kLength);
  EXPECT_EQ(c.result().tokens, testing_util::Run(*ref, Greedy(prompt, 400, "s")).tokens);
  ExpectSameSession(*engine, *ref);
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
