// Tensors, 16-bit conversions, GEMM, norms, activations, short conv, RoPE and feature maps
// against direct evaluations of their formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/activation.h"
#include "kernels/context.h"
#include "kernels/feature_map.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/segments.h"
#include "kernels/short_conv.h"
#include "kernels/tensor.h"

namespace linfer {
namespace {

TensorView F32(std::vector<float>& v, Shape shape) {
  return TensorView(v.data(), DType::kF32, std::move(shape));
}

const ExecContext kCpu = CpuContext();

TEST(TensorTest, AllocatesAlignedAndReshapes) {
  absl::StatusOr<Tensor> t = Tensor::Zeros(DType::kF32, {3, 5});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data<float>()) % 64, 0u);
  EXPECT_EQ(t->numel(), 15);
  EXPECT_EQ(t->data<float>()[14], 0.0f);
  EXPECT_TRUE(t->Reshape({5, 3}).ok());
  EXPECT_FALSE(t->Reshape({4, 4}).ok());
  EXPECT_FALSE(Tensor::Empty(DType::kF32, {-1}).ok());
  EXPECT_EQ(t->view().Rows(2, 2).data<float>(), t->data<float>() + 6);
}

TEST(TensorTest, SixteenBitConversions) {
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBf16(1.00390625f), 0x3f80);  // halfway: rounds to even
  EXPECT_EQ(F32ToBf16(1.01171875f), 0x3f82);  // halfway: rounds to even (up)
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(0x7c00)));
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite positive f16 round-trips
    ASSERT_EQ(F32ToF16(F16ToF32(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(F32ToF16(1e6f), 0x7c00);
  std::vector<uint16_t> bf = {0x3f80, 0x4000, 0xbf80};
  TensorView v(bf.data(), DType::kBF16, {3});
  absl::StatusOr<Tensor> f = ToF32(v);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->data<float>()[1], 2.0f);
  EXPECT_EQ(f->data<float>()[2], -1.0f);
}

TEST(GemmTest, LinearMatchesLoops) {
  std::mt19937 rng(1);
  std::normal_distribution<float> n;
  const int m = 7, k = 33, o = 5;
  std::vector<float> x(m * k), w(o * k), b(o), y(m * o);
  for (auto* v : {&x, &w, &b}) {
    for (auto& e : *v) e = n(rng);
  }
  TensorView bias = F32(b, {o});
  ASSERT_TRUE(Linear(kCpu, F32(x, {m, k}), F32(w, {o, k}), F32(y, {m, o}), &bias).ok());
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < o; ++j) {
      double acc = b[j];
      for (int p = 0; p < k; ++p) acc += double(x[i * k + p]) * w[j * k + p];
      EXPECT_NEAR(y[i * o + j], acc, 1e-4);
    }
  }
  EXPECT_FALSE(Linear(kCpu, F32(x, {m, k}), F32(w, {o, k - 1}), F32(y, {m, o})).ok());
  // A column slice of x (row stride k) equals the same columns copied out.
  std::vector<float> x2(m * 8), y2(m * o), y3(m * o);
  for (int i = 0; i < m; ++i) std::copy_n(&x[i * k + 3], 8, &x2[i * 8]);
  std::vector<float> w2(w.begin(), w.begin() + o * 8);
  ASSERT_TRUE(Linear(kCpu, F32(x, {m, k}).Cols(3, 8), F32(w2, {o, 8}), F32(y2, {m, o})).ok());
  ASSERT_TRUE(Linear(kCpu, F32(x2, {m, 8}), F32(w2, {o, 8}), F32(y3, {m, o})).ok());
  EXPECT_EQ(y2, y3);
}

TEST(NormTest, RmsNormGatedAndL2) {
  std::vector<float> x = {1, 2, 3, 4, -1, 0, 0, 1}, w = {1, 0.5f, 2, 1}, y(8), g(8, 1.0f);
  ASSERT_TRUE(RmsNorm(kCpu, F32(x, {2, 4}), F32(w, {4}), {0.0f, 4}, F32(y, {2, 4})).ok());
  const float r = 1 / std::sqrt(7.5f);
  EXPECT_NEAR(y[1], 2 * r * 0.5f, 1e-6);
  EXPECT_NEAR(y[4], -1 / std::sqrt(0.5f), 1e-6);
  // Zero-centred weight (Qwen3.5): applied as 1 + w.
  ASSERT_TRUE(RmsNorm(kCpu, F32(x, {2, 4}), F32(w, {4}), {0.0f, 4, true}, F32(y, {2, 4})).ok());
  EXPECT_NEAR(y[1], 2 * r * 1.5f, 1e-6);
  // Per-group (head) norm with group 2.
  std::vector<float> w2 = {1, 1};
  ASSERT_TRUE(RmsNorm(kCpu, F32(x, {2, 4}), F32(w2, {2}), {0.0f, 2}, F32(y, {2, 4})).ok());
  EXPECT_NEAR(y[2], 3 / std::sqrt(12.5f), 1e-6);
  ASSERT_TRUE(GatedRmsNorm(kCpu, F32(x, {2, 4}), F32(g, {2, 4}), F32(w, {4}), {0.0f, 4},
                           Activation::kSilu, F32(y, {2, 4}))
                  .ok());
  EXPECT_NEAR(y[3], 4 * r * (1 / (1 + std::exp(-1.0f))), 1e-6);
  EXPECT_FALSE(RmsNorm(kCpu, F32(x, {2, 4}), F32(w, {4}), {0.0f, 3}, F32(y, {2, 4})).ok());
  std::vector<float> l = {3, 4}, lo(2);
  ASSERT_TRUE(L2Normalize(kCpu, F32(l, {1, 2}), 2, 1e-6f, F32(lo, {1, 2})).ok());
  EXPECT_NEAR(lo[0], 3 / std::sqrt(25 + 1e-6f), 1e-7);
  ASSERT_TRUE(SumNormalize(kCpu, F32(l, {1, 2}), 2, 1.0f, F32(lo, {1, 2})).ok());
  EXPECT_NEAR(lo[1], 4 / 8.0f, 1e-7);
}

TEST(ActivationTest, Values) {
  EXPECT_NEAR(Activate(Activation::kSilu, 1.0f), 0.7310586f, 1e-6);
  EXPECT_NEAR(Activate(Activation::kEluPlusOne, -1.0f), std::exp(-1.0f), 1e-7);
  EXPECT_NEAR(Activate(Activation::kElu, -1.0f), std::exp(-1.0f) - 1, 1e-7);
  EXPECT_EQ(Softplus(30.0f), 30.0f);
  EXPECT_NEAR(Softplus(0.0f), std::log(2.0f), 1e-7);
  EXPECT_NEAR(LogSigmoid(-100.0f), -100.0f, 1e-5);
  EXPECT_NEAR(LogSigmoid(2.0f), -std::log1p(std::exp(-2.0f)), 1e-7);
  EXPECT_FALSE(ParseActivation("mish").ok());
  std::vector<float> gate = {1, -2}, up = {3, 4}, out(2);
  ASSERT_TRUE(SwiGlu(kCpu, F32(gate, {1, 2}), F32(up, {1, 2}), F32(out, {1, 2})).ok());
  EXPECT_NEAR(out[1], -2 / (1 + std::exp(2.0f)) * 4, 1e-6);
}

TEST(ShortConvTest, PrefillEqualsStepsAndFormula) {
  const int c = 5, w = 4, t = 9;
  std::mt19937 rng(2);
  std::normal_distribution<float> n;
  std::vector<float> x(t * c), wt(c * w), state0(c * w);
  for (auto* v : {&x, &wt, &state0}) {
    for (auto& e : *v) e = n(rng);
  }
  std::vector<float> y(t * c), state = state0;
  const Segment seg{0, t, 0, 0};
  ASSERT_TRUE(ShortConv(kCpu, F32(x, {t, c}), F32(wt, {c, 1, w}), HostSegments({&seg, 1}),
                        F32(state, {1, c, w}), Activation::kSilu, F32(y, {t, c}))
                  .ok());
  // Direct formula over [state0 ++ x].
  for (int ch = 0; ch < c; ++ch) {
    std::vector<float> seq(state0.begin() + ch * w, state0.begin() + (ch + 1) * w);
    for (int i = 0; i < t; ++i) seq.push_back(x[i * c + ch]);
    for (int i = 0; i < t; ++i) {
      double acc = 0;
      for (int j = 0; j < w; ++j) acc += wt[ch * w + j] * seq[i + 1 + j];
      EXPECT_NEAR(y[i * c + ch], acc / (1 + std::exp(-acc)), 1e-5);
    }
    for (int j = 0; j < w; ++j) EXPECT_EQ(state[ch * w + j], seq[t + j]);
  }
  // Token-by-token steps give the same outputs and state.
  std::vector<float> y1(c), state1 = state0;
  for (int i = 0; i < t; ++i) {
    std::vector<float> xi(x.begin() + i * c, x.begin() + (i + 1) * c);
    const Segment one{0, 1, i, 0};
    ASSERT_TRUE(ShortConv(kCpu, F32(xi, {1, c}), F32(wt, {c, w}), HostSegments({&one, 1}),
                          F32(state1, {1, c, w}), Activation::kSilu, F32(y1, {1, c}))
                    .ok());
    for (int ch = 0; ch < c; ++ch) EXPECT_NEAR(y1[ch], y[i * c + ch], 1e-6);
  }
  EXPECT_EQ(state1, state);
}

TEST(RopeTest, RotatesHalvesByPosition) {
  std::vector<float> x = {1, 2, 3, 4, 1, 2, 3, 4};  // 2 tokens, 1 head of dim 4
  const Segment seg{0, 2, /*position=*/5, 0};
  ASSERT_TRUE(Rope(kCpu, F32(x, {2, 4}), HostSegments({&seg, 1}), {1, 4, 4, 10000.0}).ok());
  for (int r = 0; r < 2; ++r) {
    const double pos = 5 + r;
    for (int i = 0; i < 2; ++i) {
      const double th = pos * std::pow(10000.0, -2.0 * i / 4);
      const double a = 1 + i, b = 3 + i;
      EXPECT_NEAR(x[r * 4 + i], a * std::cos(th) - b * std::sin(th), 1e-5);
      EXPECT_NEAR(x[r * 4 + i + 2], b * std::cos(th) + a * std::sin(th), 1e-5);
    }
  }
}

TEST(RopeTest, PartialRotaryLeavesTheRestAlone) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};  // 1 token, 1 head of dim 8, rotary 4
  const Segment seg{0, 1, 3, 0};
  ASSERT_TRUE(Rope(kCpu, F32(x, {1, 8}), HostSegments({&seg, 1}), {1, 8, 4, 100.0}).ok());
  for (int i = 0; i < 2; ++i) {
    const double th = 3 * std::pow(100.0, -2.0 * i / 4);
    EXPECT_NEAR(x[i], (1 + i) * std::cos(th) - (3 + i) * std::sin(th), 1e-5);
  }
  EXPECT_EQ(x[4], 5);
  EXPECT_EQ(x[7], 8);
  EXPECT_FALSE(Rope(kCpu, F32(x, {1, 8}), HostSegments({&seg, 1}), {1, 8, 5, 100.0}).ok());
}

TEST(FeatureMapTest, DpfpAndHedgehog) {
  std::vector<float> x = {1.0f, -2.0f}, out(16);
  ASSERT_TRUE(FeatureMap(kCpu, FeatureMapKind::kDpfp, F32(x, {1, 2}), F32(out, {1, 16})).ok());
  const std::vector<float> r = {1, 0, -1, 0};  // fla: [relu(x), -relu(x)]
  for (int j = 1; j <= 4; ++j) {
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[(j - 1) * 4 + i], r[i] * r[((i - j) % 4 + 4) % 4]);
  }
  std::vector<float> h(4);
  ASSERT_TRUE(FeatureMap(kCpu, FeatureMapKind::kHedgehog, F32(x, {1, 2}), F32(h, {1, 4})).ok());
  const double e[4] = {std::exp(2.0), std::exp(-4.0), std::exp(-2.0), std::exp(4.0)};
  const double s = e[0] + e[1] + e[2] + e[3];
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(h[i], e[i] / s, 1e-6);
}

}  // namespace
}  // namespace linfer
