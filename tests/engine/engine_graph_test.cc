// CUDA graphs of decode steps (engine/decode_graphs.h) against the eager engine on the same GPU:
// the same greedy tokens and logprobs within the batch tolerance, for recurrent models and
// hybrids with paged and sliding-window KV, sequences joining and leaving (batch buckets 1…8
// with padding rows), sessions continued across requests; graphs were captured and replayed, the
// padding slot is not reported as used. On the CPU the option is ignored (checked here too);
// every other engine test on CUDA runs with graphs on, since they are the default there.
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_testing.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::Greedy;

std::string Fixture(const std::string& set, const std::string& name) {
  return testing_util::FixtureSetDir(set == "fla" ? LINFER_FLA_FIXTURES : LINFER_HYBRID_FIXTURES) +
         "/" + name;
}

struct GraphCase {
  std::string set, name;
};

class GraphReplay : public ::testing::TestWithParam<GraphCase> {};

// n token ids in [0, 64): the smallest vocabulary of the fixtures below (retnet_default's).
std::vector<int32_t> Prompt(int n, uint32_t seed) {
  std::vector<int32_t> p = testing_util::Prompt(n, seed);
  for (int32_t& t : p) t %= 64;
  return p;
}

// Five requests at once (the batch shrinks 5 → 1 as they finish at different lengths), then a
// session continued over three requests and deleted, on both engines.
std::vector<testing_util::Result> Workload(Engine& engine) {
  std::vector<testing_util::Result> results;
  std::vector<std::unique_ptr<testing_util::Collector>> cs;
  for (int i = 0; i < 5; ++i) {
    auto c = std::make_unique<testing_util::Collector>();
    const absl::StatusOr<RequestId> id =
        engine.Submit(Greedy(Prompt(9 + 13 * i, 40 + i), 12 + 9 * i), c->Sink());
    EXPECT_TRUE(id.ok()) << id.status();
    if (id.ok()) cs.push_back(std::move(c));  // a refused request never finishes: not waited for
  }
  for (auto& c : cs) {
    c->Wait();
    results.push_back(c->result());
  }
  EXPECT_TRUE(engine.CreateSession("s", "").ok());
  for (int turn = 0; turn < 3; ++turn) {
    results.push_back(testing_util::Run(engine, Greedy(Prompt(5 + turn, 70 + turn), 20, "s")));
  }
  EXPECT_TRUE(engine.DeleteSession("s", "").ok());
  return results;
}

TEST_P(GraphReplay, EqualsEager) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  const std::string dir = Fixture(GetParam().set, GetParam().name);
  const LoadOptions load = testing_util::ServingLoadOptions(Device::kCuda);
  EngineOptions graphs, eager;
  eager.cuda_graphs = false;
  auto a = testing_util::MakeEngineOn(load, graphs, dir);
  auto b = testing_util::MakeEngineOn(load, eager, dir);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  EXPECT_EQ(a->Stats().slots_total + 1, b->Stats().slots_total);  // the padding slot
  const std::vector<testing_util::Result> want = Workload(*b), got = Workload(*a);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i].finish, Finish::kLength);
    EXPECT_EQ(got[i].tokens, want[i].tokens);
    testing_util::ExpectLogprobsNear(got[i], want[i], 2e-3);
  }
  const EngineStats st = a->Stats();
  EXPECT_GE(st.graph_captures, 3);  // batch buckets 1, 2, 4, 8 at least in part
  EXPECT_GT(st.graph_steps_total, 40);
  EXPECT_EQ(b->Stats().graph_steps_total, 0);
  a->Stop();
  EXPECT_EQ(a->Stats().slots_used, 0);  // every sequence gone; the padding slot is not counted
  std::printf("%s: %lld graph captures, %lld replayed steps of %lld\n", GetParam().name.c_str(),
              static_cast<long long>(st.graph_captures),
              static_cast<long long>(st.graph_steps_total), static_cast<long long>(st.steps_total));
}

INSTANTIATE_TEST_SUITE_P(Models, GraphReplay,
                         ::testing::Values(GraphCase{"fla", "gdn_default"},
                                           GraphCase{"fla", "retnet_default"},
                                           GraphCase{"hybrid", "gdn_hybrid_full"},
                                           GraphCase{"hybrid", "gdn_hybrid_window"},
                                           GraphCase{"hybrid", "qwen35_text_bf16_tied"},
                                           GraphCase{"hybrid", "qwen35moe_text_fused"},
                                           GraphCase{"hybrid", "qwen3next_bf16_step2_unnormed"}),
                         [](const auto& info) { return info.param.name; });

TEST(GraphReplayCpu, TheOptionIsIgnoredOnTheCpu) {
  auto engine = testing_util::MakeEngine();
  ASSERT_NE(engine, nullptr);
  EngineOptions off;
  off.cuda_graphs = false;
  auto eager = testing_util::MakeEngine(off);
  EXPECT_EQ(engine->Stats().slots_total, eager->Stats().slots_total);
  EXPECT_EQ(testing_util::Run(*engine, Greedy(testing_util::Prompt(10, 1), 8)).tokens,
            testing_util::Run(*eager, Greedy(testing_util::Prompt(10, 1), 8)).tokens);
  EXPECT_EQ(engine->Stats().graph_steps_total, 0);
}

}  // namespace
}  // namespace linfer
