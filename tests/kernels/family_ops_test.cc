// The RWKV-7, Mamba2 and Based/ReBased ops (kernels/rwkv7.h, kernels/mamba2.h, LayerNorm, the
// Taylor / quadratic feature maps): their formulas on the CPU, and every op on every device
// against the CPU twin over ragged segments with strided inputs (the CUDA instance skips
// without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/activation.h"
#include "kernels/feature_map.h"
#include "kernels/gates.h"
#include "kernels/mamba2.h"
#include "kernels/norm.h"
#include "kernels/rwkv7.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::AllNear;
using testing_util::DeviceCase;
using testing_util::Poisoned;
using testing_util::RandomFloats;
using testing_util::SegmentTable;
using testing_util::TestContext;
using testing_util::ToDevice;
using testing_util::ToHost;

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

std::vector<float> Map(FeatureMapKind kind, const std::vector<float>& x) {
  const int64_t d = static_cast<int64_t>(x.size());
  std::vector<float> y(FeatureMapDim(kind, d));
  const ExecContext ctx = CpuContext();
  EXPECT_TRUE(FeatureMap(ctx, kind, TensorView(const_cast<float*>(x.data()), DType::kF32, {1, d}),
                         TensorView(y.data(), DType::kF32, {1, static_cast<int64_t>(y.size())}))
                  .ok());
  return y;
}

// φ(q)·φ(k) is the kernel each map approximates exactly.
TEST(FamilyOpsTest, QuadraticFeatureMapsGiveTheirKernels) {
  const int64_t d = 6;
  const std::vector<float> q = RandomFloats(d, 1), k = RandomFloats(d, 2);
  const double s = Dot(q, k);
  EXPECT_EQ(FeatureMapDim(FeatureMapKind::kTaylor, d), 1 + d + d * (d + 1) / 2);
  EXPECT_NEAR(Dot(Map(FeatureMapKind::kTaylor, q), Map(FeatureMapKind::kTaylor, k)),
              1 + s / std::sqrt(d) + s * s / (2.0 * d), 1e-5);
  EXPECT_NEAR(Dot(Map(FeatureMapKind::kQuadratic, q), Map(FeatureMapKind::kQuadratic, k)),
              s * s / d, 1e-5);
  // Feature order: [1, x/d^¼, diagonal, pairs (0,1), (0,2), ...].
  const std::vector<float> t = Map(FeatureMapKind::kTaylor, q);
  EXPECT_FLOAT_EQ(t[0], 1.0f);
  EXPECT_NEAR(t[1 + d + d], q[0] * q[1] / std::sqrt(d), 1e-6);
}

// One RWKV-7 head step by hand: S = diag(e^w)S0 − (kk·a)(kkᵀS0) + k vᵀ, o = Sᵀr.
TEST(FamilyOpsTest, Rwkv7RecurrenceUsesTheUndecayedStateForTheLowRankTerm) {
  const int64_t dk = 2, dv = 1;
  std::vector<float> r = {1, 2}, w = {-0.5f, -0.1f}, k = {0.3f, -0.2f}, v = {2}, kk = {0.6f, 0.8f},
                     a = {0.5f, 0.25f}, state = {1, -1}, o = {0};
  auto view = [](std::vector<float>& x, Shape s) { return TensorView(x.data(), DType::kF32, s); };
  const Segment seg{0, 1, 0, 0};
  const ExecContext ctx = CpuContext();
  ASSERT_TRUE(Rwkv7Recurrence(ctx,
                              {view(r, {1, dk}), view(w, {1, dk}), view(k, {1, dk}),
                               view(v, {1, dv}), view(kk, {1, dk}), view(a, {1, dk})},
                              HostSegments({&seg, 1}), view(state, {1, 1, dk, dv}), {},
                              view(o, {1, dv}))
                  .ok());
  const double sa = -(0.6 * 1 + 0.8 * -1);  // −kkᵀ S0
  const double s0 = std::exp(-0.5) * 1 + 0.6 * 0.5 * sa + 0.3 * 2;
  const double s1 = std::exp(-0.1) * -1 + 0.8 * 0.25 * sa - 0.2 * 2;
  EXPECT_NEAR(state[0], s0, 1e-6);
  EXPECT_NEAR(state[1], s1, 1e-6);
  EXPECT_NEAR(o[0], s0 * 1 + s1 * 2, 1e-5);
}

// The chunked form (chunks of 7, 16 and 64, crossing segment ends) equals token by token, outputs
// and final states, from non-zero states.
TEST(FamilyOpsTest, Rwkv7ChunkedEqualsRecurrent) {
  const std::vector<Segment> segs = {{0, 3, 0, 1}, {3, 50, 0, 0}, {53, 20, 0, 2}};
  const int64_t t = 73, h = 2, dk = 8, dv = 5;
  std::vector<float> r = RandomFloats(t * h * dk, 31), k = RandomFloats(t * h * dk, 32),
                     v = RandomFloats(t * h * dv, 33), w = RandomFloats(t * h * dk, 34),
                     a = RandomFloats(t * h * dk, 35), kk = RandomFloats(t * h * dk, 36);
  for (float& x : w) x = -0.6065f / (1.0f + std::exp(-x));
  for (float& x : a) x = 1.0f / (1.0f + std::exp(-x));
  for (int64_t row = 0; row < t * h; ++row) {  // unit kk per head, as l2norm makes it
    float ss = 0;
    for (int64_t i = 0; i < dk; ++i) ss += kk[row * dk + i] * kk[row * dk + i];
    for (int64_t i = 0; i < dk; ++i) kk[row * dk + i] /= std::sqrt(ss);
  }
  auto run = [&](RecurrenceMode mode, int chunk) {
    std::vector<float> state = RandomFloats(3 * h * dk * dv, 37, 0.5f), o(t * h * dv);
    auto view = [](std::vector<float>& x, Shape s) { return TensorView(x.data(), DType::kF32, s); };
    const Rwkv7Inputs in{view(r, {t, h * dk}), view(w, {t, h * dk}),  view(k, {t, h * dk}),
                         view(v, {t, h * dv}), view(kk, {t, h * dk}), view(a, {t, h * dk})};
    EXPECT_TRUE(Rwkv7Recurrence(CpuContext(), in, HostSegments(segs), view(state, {3, h, dk, dv}),
                                {mode, chunk}, view(o, {t, h * dv}))
                    .ok());
    o.insert(o.end(), state.begin(), state.end());
    return o;
  };
  const std::vector<float> ref = run(RecurrenceMode::kRecurrent, 64);
  for (int chunk : {7, 16, 64}) {
    EXPECT_TRUE(AllNear(run(RecurrenceMode::kChunked, chunk), ref, 1e-4, 1e-4)) << chunk;
  }
}

class FamilyDeviceOpsTest : public ::testing::TestWithParam<DeviceCase> {
 protected:
  void SetUp() override {
    if (testing_util::DeviceMissing(GetParam())) GTEST_SKIP() << testing_util::kNoDevice;
    dev_ = std::make_unique<TestContext>(GetParam().device);
  }
  ::testing::AssertionResult Near(const std::vector<float>& a, const std::vector<float>& b) {
    return AllNear(a, b, GetParam().atol * 10, GetParam().rtol * 10);
  }
  std::unique_ptr<TestContext> dev_;
  TestContext cpu_{Device::kCpu};
};

std::vector<Segment> Ragged() {
  const int64_t lens[] = {1, 2, 17, 40}, slots[] = {3, 0, 5, 1};
  std::vector<Segment> segs;
  for (int64_t i = 0, row = 0; i < 4; row += lens[i++]) segs.push_back({row, lens[i], i, slots[i]});
  return segs;
}

// Every RWKV-7 op of one time-mix layer over ragged segments (H = 2 heads of dk × dv; inputs are
// column slices of a wider buffer, so rows are strided).
std::vector<float> RunRwkv7(const ExecContext& ctx, int64_t dk, int64_t dv) {
  const std::vector<Segment> segs = Ragged();
  const int64_t t = 60, h = 2, n = h * dk;
  Tensor wide = ToDevice(ctx, RandomFloats(t * (2 * n + h * dv), 1), {t, 2 * n + h * dv});
  const TensorView x = wide.view().Cols(0, n), a_raw = wide.view().Cols(n, n),
                   z = wide.view().Cols(2 * n, h * dv);
  Tensor shift = ToDevice(ctx, RandomFloats(6 * n, 2), {6, n});
  Tensor mix = ToDevice(ctx, RandomFloats(n, 3), {n}), k_k = ToDevice(ctx, RandomFloats(n, 4), {n});
  Tensor k_a = ToDevice(ctx, RandomFloats(n, 5), {n}), r_k = ToDevice(ctx, RandomFloats(n, 6), {n});
  Tensor vf = ToDevice(ctx, RandomFloats(t * h * dv, 7), {t, h * dv});
  Tensor state = ToDevice(ctx, RandomFloats(6 * h * dk * dv, 8, 0.1f), {6, h, dk, dv});
  Tensor delta = Poisoned(ctx, {t, n}), xm = Poisoned(ctx, {t, n}), kk = Poisoned(ctx, {t, n});
  Tensor k = Poisoned(ctx, {t, n}), w = Poisoned(ctx, {t, n}), a = Poisoned(ctx, {t, n});
  Tensor v = Poisoned(ctx, {t, h * dv}), o = Poisoned(ctx, {t, h * dv});
  Tensor table = SegmentTable(ctx, segs);
  const Segments s{segs, table.view(), {}};
  EXPECT_TRUE(TokenShift(ctx, x, s, shift.view(), delta.view()).ok());
  EXPECT_TRUE(MixRows(ctx, x, delta.view(), mix.view(), xm.view()).ok());
  EXPECT_TRUE(Activate(ctx, Activation::kSigmoid, a_raw, a.view()).ok());
  EXPECT_TRUE(SigmoidScale(ctx, xm.view(), -0.6f, w.view()).ok());
  EXPECT_TRUE(
      Rwkv7Keys(ctx, xm.view(), a.view(), k_k.view(), k_a.view(), dk, false, kk.view(), k.view())
          .ok());
  EXPECT_TRUE(Rwkv7ValueResidual(ctx, z, vf.view(), z, v.view()).ok());
  EXPECT_TRUE(Rwkv7Recurrence(ctx, {x, w.view(), k.view(), v.view(), kk.view(), a.view()}, s,
                              state.view(), {}, o.view())
                  .ok());
  EXPECT_TRUE(LayerNorm(ctx, o.view(), v.view().Rows(0, 1).Reshaped({h * dv}),
                        vf.view().Rows(1, 1).Reshaped({h * dv}), {1e-3f, dv}, o.view())
                  .ok());
  EXPECT_TRUE(Rwkv7Bonus(ctx, o.view(), x, k.view(), r_k.view(), v.view(), z, h, o.view()).ok());
  std::vector<float> out = ToHost(ctx, o.view());
  for (const Tensor* e : {&shift, &state, &kk}) {
    const std::vector<float> more = ToHost(ctx, e->view());
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

TEST_P(FamilyDeviceOpsTest, Rwkv7OpsMatchTheCpuTwin) {
  EXPECT_TRUE(Near(RunRwkv7(dev_->ctx, 16, 8), RunRwkv7(cpu_.ctx, 16, 8)));
}

// Value heads wider than one CUDA block of state columns (128): three column tiles, the last
// partial, at the largest key dim (the most registers per thread).
TEST_P(FamilyDeviceOpsTest, Rwkv7WideValueHeadsMatchTheCpuTwin) {
  EXPECT_TRUE(Near(RunRwkv7(dev_->ctx, 128, 300), RunRwkv7(cpu_.ctx, 128, 300)));
}

std::vector<float> RunMamba2AndMaps(const ExecContext& ctx) {
  const int64_t t = 9, h = 4, p = 6;
  Tensor wide = ToDevice(ctx, RandomFloats(t * (h + h * p), 11), {t, h + h * p});
  const TensorView dt = wide.view().Cols(0, h), x = wide.view().Cols(h, h * p);
  Tensor bias = ToDevice(ctx, RandomFloats(h, 12), {h}),
         alog = ToDevice(ctx, RandomFloats(h, 13), {h});
  Tensor d_full = ToDevice(ctx, RandomFloats(h * p, 14), {h * p});
  Tensor delta = Poisoned(ctx, {t, h}), g = Poisoned(ctx, {t, h}), y = Poisoned(ctx, {t, h * p});
  Tensor taylor = Poisoned(ctx, {t * h, FeatureMapDim(FeatureMapKind::kTaylor, p)});
  Tensor quad = Poisoned(ctx, {t * h, FeatureMapDim(FeatureMapKind::kQuadratic, p)});
  EXPECT_TRUE(
      Mamba2Gates(ctx, dt, bias.view(), alog.view(), 0.05f, 1.5f, delta.view(), g.view()).ok());
  EXPECT_TRUE(ScaleGroups(ctx, x, delta.view(), false, y.view()).ok());
  EXPECT_TRUE(ScaleGroups(ctx, x, alog.view(), true, y.view()).ok());
  EXPECT_TRUE(ScaleGroups(ctx, x, d_full.view(), true, y.view()).ok());
  EXPECT_TRUE(BiasActivate(ctx, y.view(), d_full.view(), Activation::kSilu, y.view()).ok());
  EXPECT_TRUE(
      FeatureMap(ctx, FeatureMapKind::kTaylor, y.view().Reshaped({t * h, p}), taylor.view()).ok());
  EXPECT_TRUE(
      FeatureMap(ctx, FeatureMapKind::kQuadratic, y.view().Reshaped({t * h, p}), quad.view()).ok());
  std::vector<float> out;
  for (const Tensor* e : {&delta, &g, &y, &taylor, &quad}) {
    const std::vector<float> more = ToHost(ctx, e->view());
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

TEST_P(FamilyDeviceOpsTest, Mamba2OpsAndQuadraticMapsMatchTheCpuTwin) {
  EXPECT_TRUE(Near(RunMamba2AndMaps(dev_->ctx), RunMamba2AndMaps(cpu_.ctx)));
}

TEST_P(FamilyDeviceOpsTest, RefusesBadShapes) {
  const ExecContext& ctx = dev_->ctx;
  Tensor x = Poisoned(ctx, {3, 8}), d = Poisoned(ctx, {3, 8}), m = Poisoned(ctx, {7});
  Tensor state = Poisoned(ctx, {2, 8});
  EXPECT_FALSE(MixRows(ctx, x.view(), d.view(), m.view(), d.view()).ok());
  const Segment bad_slot{0, 3, 0, 2};
  EXPECT_FALSE(TokenShift(ctx, x.view(), {{&bad_slot, 1}, {}}, state.view(), d.view()).ok());
  const Segment ok_seg{0, 3, 0, 1};
  EXPECT_FALSE(TokenShift(ctx, x.view(), {{&ok_seg, 1}, {}}, state.view(), x.view()).ok());
  EXPECT_FALSE(ScaleGroups(ctx, x.view(), m.view(), false, d.view()).ok());
  EXPECT_FALSE(
      Rwkv7Bonus(ctx, x.view(), x.view(), x.view(), m.view(), x.view(), x.view(), 3, x.view())
          .ok());
}

INSTANTIATE_TEST_SUITE_P(Devices, FamilyDeviceOpsTest,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
