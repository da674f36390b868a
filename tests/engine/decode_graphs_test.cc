// DecodeGraphs' padding, staging and device-input path, on the CPU (where it runs the padded step
// eagerly, capturing nothing): decode steps of changing sequence subsets (batch buckets 1…8,
// non-contiguous slots out of order, KV block widths growing past powers of two) give logits and
// states bit-identical to Model::Forward on the unpadded step, in batch-invariant mode (a row's
// arithmetic does not depend on the rows beside it, so the padding rows must not show). The
// capture and replay themselves need a GPU: engine_graph_test.
#include "engine/decode_graphs.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/device_context.h"
#include "kernels/transfer.h"
#include "models/model.h"
#include "models/state.h"
#include "tests/testing/fixture_paths.h"

namespace linfer {
namespace {

struct PadCase {
  std::string set, name;
};

class PaddedDecode : public ::testing::TestWithParam<PadCase> {};

std::vector<float> ToHostRows(const ExecContext& ctx, const TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  EXPECT_TRUE(Download(ctx, v, out.data()).ok());
  return out;
}

TEST_P(PaddedDecode, EqualsTheUnpaddedStepBitForBit) {
  const std::string dir =
      testing_util::FixtureSetDir(GetParam().set == "fla" ? LINFER_FLA_FIXTURES
                                                          : LINFER_HYBRID_FIXTURES) +
      "/" + GetParam().name;
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  absl::StatusOr<std::unique_ptr<DeviceContext>> dc =
      DeviceContext::Create({.device = Device::kCpu, .batch_invariant = true});
  ASSERT_TRUE(dc.ok()) << dc.status();
  const ExecContext& ctx = (*dc)->exec();
  constexpr int kSlots = 8, kPad = 6;  // the padding slot sits between used ones
  const KvOptions kv{8 << 20, 4};      // 4-token blocks: the width passes 1, 2, 4 and 8
  absl::StatusOr<ModelStates> a =
      ModelStates::Allocate(m.state_specs(), kSlots, m.device(), true, kv);
  absl::StatusOr<ModelStates> b =
      ModelStates::Allocate(m.state_specs(), kSlots, m.device(), true, kv);
  ASSERT_TRUE(a.ok() && b.ok());
  if (a->has_kv()) {
    ASSERT_TRUE(a->ReserveKv(ctx, kPad, 1, 0).ok());
  }
  absl::StatusOr<std::unique_ptr<DecodeGraphs>> graphs =
      DecodeGraphs::Create(&m, dc->get(), &*a, kPad, 8);
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  const int64_t vocab = m.vocab_size();
  const std::vector<int> slots = {0, 1, 2, 3, 4, 5, 7};
  std::vector<int64_t> position(kSlots, 0);
  // Prompts of different lengths, the same on both state sets.
  for (int slot : slots) {
    const int64_t len = 3 + 2 * slot;
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < len; ++i)
      prompt.push_back(static_cast<int32_t>((11 * i + slot) % vocab));
    const std::vector<Segment> seg = {{0, len, 0, slot}};
    EXPECT_FALSE((*graphs)->Accepts(seg));  // a prompt: not a decode step
    for (ModelStates* s : {&*a, &*b}) {
      ASSERT_TRUE(s->ReserveKv(ctx, slot, len, 0).ok());
      absl::StatusOr<Tensor> logits = Tensor::Empty(DType::kF32, {1, vocab});
      ASSERT_TRUE(m.Forward(ctx, {prompt, seg}, *s, logits->view()).ok());
      (*dc)->arena().Reset();
    }
    position[slot] = len;
  }
  const std::vector<std::vector<int>> steps = {
      {0, 1, 2, 3, 4, 5, 7}, {3, 1}, {2}, {7, 0, 4}, {5, 3, 1, 0, 2}, {4, 7}, {1, 2, 3, 4, 5}};
  for (int round = 0; round < 3; ++round) {
    for (size_t k = 0; k < steps.size(); ++k) {
      SCOPED_TRACE(testing::Message() << "round " << round << " step " << k);
      std::vector<int32_t> tokens;
      std::vector<Segment> segs;
      for (int slot : steps[k]) {
        segs.push_back({static_cast<int64_t>(segs.size()), 1, position[slot], slot});
        tokens.push_back(static_cast<int32_t>((7 * round + 5 * slot + k) % vocab));
        for (ModelStates* s : {&*a, &*b}) {
          ASSERT_TRUE(s->ReserveKv(ctx, slot, position[slot] + 1, position[slot]).ok());
        }
      }
      ASSERT_TRUE((*graphs)->Accepts(segs));
      ASSERT_TRUE((*graphs)->Prepare(segs).ok());
      absl::StatusOr<TensorView> got = (*graphs)->Run(tokens, segs, {});
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->dim(0), static_cast<int64_t>(segs.size()));
      const std::vector<float> pad_logits = ToHostRows(ctx, *got);
      absl::StatusOr<Tensor> want = Tensor::Empty(DType::kF32, {got->dim(0), vocab});
      ASSERT_TRUE(m.Forward(ctx, {tokens, segs}, *b, want->view()).ok());
      (*dc)->arena().Reset();
      ASSERT_EQ(std::memcmp(pad_logits.data(), want->data<float>(), want->nbytes()), 0);
      for (int slot : steps[k]) ++position[slot];
    }
  }
  for (int slot : slots) {
    HostState sa, sb;
    ASSERT_TRUE(a->CopyOut(ctx, slot, position[slot], &sa).ok());
    ASSERT_TRUE(b->CopyOut(ctx, slot, position[slot], &sb).ok());
    EXPECT_EQ(sa.bytes, sb.bytes) << "slot " << slot;
    EXPECT_EQ(sa.kv_bytes, sb.kv_bytes) << "slot " << slot;
  }
  EXPECT_EQ((*graphs)->captures(), 0);  // nothing is captured on the CPU
  EXPECT_FALSE((*graphs)->Accepts({{0, 1, 0, kPad}}));
  EXPECT_FALSE((*graphs)->Accepts(std::vector<Segment>(9, Segment{0, 1, 0, 0})));
}

// Misuse is an error that says what is wrong: Run without Prepare, a step Prepare does not take,
// a padding slot outside the pool, and Model::Forward given device inputs of the wrong shape.
TEST(PaddedDecodeErrors, MisuseIsRefusedByName) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Load(testing_util::FixtureSetDir(LINFER_FLA_FIXTURES) + "/gdn_default");
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::unique_ptr<DeviceContext>> dc = DeviceContext::Create({});
  ASSERT_TRUE(dc.ok());
  absl::StatusOr<ModelStates> states =
      ModelStates::Allocate((*model)->state_specs(), 4, Device::kCpu);
  ASSERT_TRUE(states.ok());
  absl::StatusOr<std::unique_ptr<DecodeGraphs>> graphs =
      DecodeGraphs::Create(model->get(), dc->get(), &*states, 3, 4);
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  const std::vector<Segment> segs = {{0, 1, 0, 0}};
  const std::vector<int32_t> tokens = {5};
  absl::Status st = (*graphs)->Run(tokens, segs, {}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("Prepare"), std::string::npos) << st;
  st = (*graphs)->Prepare({{0, 2, 0, 0}});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(DecodeGraphs::Create(model->get(), dc->get(), &*states, 4, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Device inputs whose token buffer does not match the step.
  std::vector<int32_t> two_tokens = {5, 6}, last = {0};
  std::vector<int64_t> table(4, 0);
  StepDeviceInputs d;
  d.tokens = TensorView(two_tokens.data(), DType::kI32, {2});
  d.table = TensorView(table.data(), DType::kI64, {1, 4});
  d.last_rows = TensorView(last.data(), DType::kI32, {1});
  absl::StatusOr<Tensor> logits = Tensor::Empty(DType::kF32, {1, (*model)->vocab_size()});
  ASSERT_TRUE(logits.ok());
  st = (*model)->Forward((*dc)->exec(), {tokens, segs, &d}, *states, logits->view());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("device input tokens"), std::string::npos) << st;
}

INSTANTIATE_TEST_SUITE_P(
    Models, PaddedDecode,
    ::testing::Values(PadCase{"fla", "gdn_default"}, PadCase{"fla", "gla_default"},
                      PadCase{"fla", "retnet_default"}, PadCase{"hybrid", "gdn_hybrid_full"},
                      PadCase{"hybrid", "gdn_hybrid_window"}, PadCase{"hybrid", "qwen35_text_f32"},
                      PadCase{"hybrid", "qwen35moe_text_fused"},
                      PadCase{"hybrid", "qwen3next_bf16_step2_unnormed"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace linfer
