// DeviceContext: what each device's context provides, and on CUDA that a captured decode step
// (bf16 embedding and projections, l2norm, gates, the recurrence step, the pre-sampler) replayed
// as a CUDA graph with new tokens and a new segment table gives the eager results bit for bit.
#include "kernels/device_context.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/embedding.h"
#include "kernels/gates.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/presample.h"
#include "kernels/recurrence.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::Bf16Bits;
using testing_util::RandomFloats;
using testing_util::ToDevice;
using testing_util::ToHost;
using testing_util::ToHostAs;

TEST(DeviceContextTest, CpuContextHasNoStreamAndCannotCapture) {
  absl::StatusOr<std::unique_ptr<DeviceContext>> ctx = DeviceContext::Create({Device::kCpu});
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_EQ((*ctx)->exec().device, Device::kCpu);
  EXPECT_EQ((*ctx)->exec().stream, nullptr);
  EXPECT_EQ((*ctx)->exec().arena, &(*ctx)->arena());
  EXPECT_TRUE((*ctx)->Synchronize().ok());
  EXPECT_EQ((*ctx)->BeginCapture().code(), absl::StatusCode::kUnimplemented);
  EXPECT_FALSE((*ctx)->EndCapture().ok());
}

TEST(DeviceContextTest, CudaContextIsUnavailableWithoutADevice) {
  absl::StatusOr<std::unique_ptr<DeviceContext>> ctx = DeviceContext::Create({Device::kCuda});
  if (CudaAvailable()) {
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    EXPECT_NE((*ctx)->exec().stream, nullptr);
    EXPECT_NE((*ctx)->exec().blas, nullptr);
  } else {
    EXPECT_EQ(ctx.status().code(), absl::StatusCode::kUnavailable) << ctx.status();
  }
}

// One decode step of a GDN-like layer for B sequences, reading tokens and the segment table from
// fixed device buffers (what a graph replays) and writing logits' top-K.
struct DecodeStep {
  static constexpr int64_t kVocab = 3000, kDim = 256, kHeads = 4, kDk = 64, kDv = 64, kK = 8;
  int64_t batch, slots;
  Tensor table, wqkv, wab, a_log, dt_bias, wout;  // weights
  Tensor tokens, segs, state;                     // per-step inputs and the state
  Tensor ids, top_logits, argmax, lse;            // outputs

  DecodeStep(const ExecContext& c, int64_t b) : batch(b), slots(2 * b + 1) {
    table = ToDevice(c, Bf16Bits(RandomFloats(kVocab * kDim, 1)), DType::kBF16, {kVocab, kDim});
    wqkv = ToDevice(c, Bf16Bits(RandomFloats(3 * kHeads * kDk * kDim, 2, 0.06f)), DType::kBF16,
                    {3 * kHeads * kDk, kDim});
    wab = ToDevice(c, Bf16Bits(RandomFloats(2 * kHeads * kDim, 3, 0.06f)), DType::kBF16,
                   {2 * kHeads, kDim});
    a_log = ToDevice(c, RandomFloats(kHeads, 4, 0.3f), {kHeads});
    dt_bias = ToDevice(c, RandomFloats(kHeads, 5, 0.3f), {kHeads});
    wout = ToDevice(c, Bf16Bits(RandomFloats(kVocab * kHeads * kDv, 6, 0.06f)), DType::kBF16,
                    {kVocab, kHeads * kDv});
    tokens = ToDevice(c, std::vector<int32_t>(b), DType::kI32, {b});
    segs = ToDevice(c, std::vector<int64_t>(4 * b), DType::kI64, {b, 4});
    state = testing_util::Poisoned(c, {slots, kHeads, kDk, kDv});
    ids = ToDevice(c, std::vector<int32_t>(b * kK), DType::kI32, {b, kK});
    top_logits = testing_util::Poisoned(c, {b, kK});
    argmax = ToDevice(c, std::vector<int32_t>(b), DType::kI32, {b});
    lse = testing_util::Poisoned(c, {b});
  }

  absl::Status Run(const ExecContext& c, const std::vector<Segment>& host_segs) {
    auto scratch = [&](int64_t cols) { return Scratch(c, DType::kF32, {batch, cols}); };
    absl::StatusOr<TensorView> x = scratch(kDim), qkv = scratch(3 * kHeads * kDk);
    absl::StatusOr<TensorView> ab = scratch(2 * kHeads), g = scratch(kHeads),
                               beta = scratch(kHeads);
    absl::StatusOr<TensorView> o = scratch(kHeads * kDv), logits = scratch(kVocab);
    for (const auto* t : {&x, &qkv, &ab, &g, &beta, &o, &logits}) {
      if (!t->ok()) return t->status();
    }
    const TensorView q = qkv->Cols(0, kHeads * kDk), k = qkv->Cols(kHeads * kDk, kHeads * kDk);
    absl::Status s = Embedding(c, table.view(), tokens.view(), *x);
    if (s.ok()) s = Linear(c, *x, wqkv.view(), *qkv);
    if (s.ok()) s = L2Normalize(c, q, kDk, 1e-6f, q);
    if (s.ok()) s = L2Normalize(c, k, kDk, 1e-6f, k);
    if (s.ok()) s = Linear(c, *x, wab.view(), *ab);
    if (s.ok()) {
      s = GdnGates(c, ab->Cols(0, kHeads), ab->Cols(kHeads, kHeads), a_log.view(), dt_bias.view(),
                   1.0f, *g, *beta);
    }
    RecurrenceInputs in;
    in.q = q;
    in.k = k;
    in.v = qkv->Cols(2 * kHeads * kDk, kHeads * kDv);
    in.g = *g;
    in.beta = *beta;
    const RecurrenceSpec spec{kDk, kDv, DecayKind::kScalar, true, false, 0.125f};
    if (s.ok()) s = Recurrence(c, spec, in, {host_segs, segs.view()}, state.view(), {}, {}, *o);
    if (s.ok()) s = Linear(c, *o, wout.view(), *logits);
    if (s.ok()) {
      s = Presample(c, *logits, {ids.view(), top_logits.view(), argmax.view(), lse.view()});
    }
    return s;
  }
};

struct StepResult {
  std::vector<int32_t> ids, argmax;
  std::vector<float> top_logits, lse, state;
  bool operator==(const StepResult&) const = default;
};

TEST(CudaGraphTest, ReplayedDecodeStepEqualsEagerBitForBit) {
  if (!CudaAvailable()) GTEST_SKIP() << testing_util::kNoDevice;
  absl::StatusOr<std::unique_ptr<DeviceContext>> dc = DeviceContext::Create({Device::kCuda});
  ASSERT_TRUE(dc.ok()) << dc.status();
  DeviceContext& d = **dc;
  const ExecContext& c = d.exec();
  for (int64_t batch : {1, 8, 64}) {
    DecodeStep step(c, batch);
    const std::vector<float> state0 =
        RandomFloats(step.slots * DecodeStep::kHeads * DecodeStep::kDk * DecodeStep::kDv, 9, 0.1f);
    // Two inputs of the same shape: different tokens and different (non-contiguous) slots.
    std::vector<std::vector<int32_t>> tokens(2);
    std::vector<std::vector<Segment>> segs(2);
    for (int64_t i = 0; i < batch; ++i) {
      tokens[0].push_back(static_cast<int32_t>((37 * i + 11) % DecodeStep::kVocab));
      tokens[1].push_back(static_cast<int32_t>((53 * i + 5) % DecodeStep::kVocab));
      segs[0].push_back({i, 1, 10 + i, 2 * i});
      segs[1].push_back({i, 1, 3 * i, (2 * i + 1) % step.slots});
    }
    auto set_inputs = [&](int which) {
      ASSERT_TRUE(Upload(c, tokens[which].data(), step.tokens.view()).ok());
      ASSERT_TRUE(Upload(c, segs[which].data(), step.segs.view()).ok());
      ASSERT_TRUE(Upload(c, state0.data(), step.state.view()).ok());
      ASSERT_TRUE(d.Synchronize().ok());
    };
    auto result = [&] {
      EXPECT_TRUE(d.Synchronize().ok());
      return StepResult{ToHostAs<int32_t>(c, step.ids.view()),
                        ToHostAs<int32_t>(c, step.argmax.view()), ToHost(c, step.top_logits.view()),
                        ToHost(c, step.lse.view()), ToHost(c, step.state.view())};
    };
    StepResult eager[2];
    for (int which : {0, 1}) {
      set_inputs(which);
      d.arena().Reset();
      ASSERT_TRUE(step.Run(c, segs[which]).ok());
      eager[which] = result();
    }
    d.arena().Reset();  // one block now holds a whole step: the capture allocates nothing
    ASSERT_TRUE(d.BeginCapture().ok());
    const absl::Status captured = step.Run(c, segs[0]);
    absl::StatusOr<DeviceGraph> graph = d.EndCapture();
    ASSERT_TRUE(captured.ok()) << captured;
    ASSERT_TRUE(graph.ok()) << graph.status();
    for (int which : {1, 0}) {
      set_inputs(which);
      ASSERT_TRUE(graph->Replay().ok());
      EXPECT_TRUE(result() == eager[which]) << "batch " << batch << " input " << which;
    }
  }
}

}  // namespace
}  // namespace linfer
