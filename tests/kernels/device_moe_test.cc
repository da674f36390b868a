// MoeRoute and MoeExperts (kernels/moe.h) on every device against a float64 oracle written from
// transformers' Qwen3_5MoeSparseMoeBlock: softmax over all experts, the top k by probability,
// renormalised, each expert's SwiGLU MLP, the shared expert's sigmoid gate. Also: ties, NaN and
// infinite logits, bf16 weights, refusals, and (CPU) batch invariance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/moe.h"
#include "tests/kernels/device_ops_fixture.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::AllNear;
using testing_util::Bf16Bits;
using testing_util::Poisoned;
using testing_util::RandomFloats;
using testing_util::RoundToBf16;
using testing_util::ToDevice;
using testing_util::ToHost;
using testing_util::ToHostAs;

class DeviceMoeTest : public testing_util::DeviceOpsTest {};

struct Routing {
  std::vector<int32_t> idx;
  std::vector<double> w;
};

// Full softmax in float64, experts by decreasing probability (ties: lower index), top k
// renormalised (or, without `normalize`, their probabilities as they are).
Routing OracleRoute(const std::vector<float>& logits, int64_t t, int64_t e, int64_t k,
                    bool normalize = true) {
  Routing r;
  for (int64_t row = 0; row < t; ++row) {
    const float* l = logits.data() + row * e;
    const double m = *std::max_element(l, l + e);
    std::vector<double> p(e);
    double z = 0;
    for (int64_t i = 0; i < e; ++i) z += p[i] = std::exp(double(l[i]) - m);
    for (double& v : p) v /= z;
    std::vector<int32_t> order(e);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    double s = 0;
    for (int64_t j = 0; j < k; ++j) s += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      r.idx.push_back(order[j]);
      r.w.push_back(normalize ? p[order[j]] / s : p[order[j]]);
    }
  }
  return r;
}

// y[t] = y0[t] + Σ_j w_j · down_e(silu(gate_e x) ⊙ up_e x) + σ(s_t) shared[t], in float64.
std::vector<float> OracleExperts(const std::vector<float>& x, const Routing& r,
                                 const std::vector<float>& gate_up, const std::vector<float>& down,
                                 const std::vector<float>* shared, const std::vector<float>* gate,
                                 const std::vector<float>& y0, int64_t t, int64_t d, int64_t inter,
                                 int64_t k) {
  std::vector<float> y(t * d);
  for (int64_t row = 0; row < t; ++row) {
    std::vector<double> acc(d, 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = r.idx[row * k + j];
      std::vector<double> a(inter);
      for (int64_t i = 0; i < inter; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < d; ++c) {
          g += double(gate_up[(e * 2 * inter + i) * d + c]) * x[row * d + c];
          u += double(gate_up[(e * 2 * inter + inter + i) * d + c]) * x[row * d + c];
        }
        a[i] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t c = 0; c < d; ++c) {
        double o = 0;
        for (int64_t i = 0; i < inter; ++i) o += double(down[(e * d + c) * inter + i]) * a[i];
        acc[c] += r.w[row * k + j] * o;
      }
    }
    for (int64_t c = 0; c < d; ++c) {
      double v = y0.empty() ? 0.0 : y0[row * d + c];
      v += acc[c];
      if (shared != nullptr) v += (*shared)[row * d + c] / (1 + std::exp(-double((*gate)[row])));
      y[row * d + c] = static_cast<float>(v);
    }
  }
  return y;
}

struct RouteOut {
  std::vector<int32_t> idx;
  std::vector<float> w;
};

// Logits given as [t, e] go in as columns 3… of a wider [t, e + 5] matrix (a row stride).
RouteOut RunRoute(const ExecContext& ctx, const std::vector<float>& logits, int64_t t, int64_t e,
                  int64_t k, bool normalize = true) {
  std::vector<float> wide(t * (e + 5), -7.0f);
  for (int64_t r = 0; r < t; ++r) std::copy_n(&logits[r * e], e, &wide[r * (e + 5) + 3]);
  Tensor l = ToDevice(ctx, wide, {t, e + 5});
  Tensor idx = ToDevice(ctx, std::vector<int32_t>(t * k, -1), DType::kI32, {t, k});
  Tensor w = Poisoned(ctx, {t, k});
  const absl::Status s = MoeRoute(ctx, l.view().Cols(3, e), idx.view(), w.view(), normalize);
  EXPECT_TRUE(s.ok()) << s;
  return {ToHostAs<int32_t>(ctx, idx.view()), ToHost(ctx, w.view())};
}

TEST_P(DeviceMoeTest, RouteMatchesTheOracle) {
  for (auto [t, e, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 8, 2},
                         {37, 64, 8},
                         {5, 256, 8},
                         {3, 300, 64},
                         {4, 7, 7}}) {
    const std::vector<float> logits = RandomFloats(t * e, 11 + e, 2.0f);
    for (bool normalize : {true, false}) {  // Qwen3.5 MoE; Qwen3-Next's norm_topk_prob false
      const RouteOut got = RunRoute(dev(), logits, t, e, k, normalize);
      const Routing want = OracleRoute(logits, t, e, k, normalize);
      EXPECT_EQ(got.idx, want.idx) << t << "×" << e << " top " << k;
      EXPECT_TRUE(AllNear(got.w, std::vector<float>(want.w.begin(), want.w.end()), 1e-6, 1e-5))
          << t << "×" << e << " top " << k << " normalize " << normalize;
    }
  }
}

TEST_P(DeviceMoeTest, RouteTiesNanAndInfinities) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {
      1,    1,   1,   1,   1,   1,     // all equal: the lowest indices, equal weights
      nan,  2,   nan, 2,   0,   5,     // NaN ranks last; the tie at 2 goes to index 1 first
      nan,  nan, nan, nan, nan, nan,   // all NaN: 0, 1, 2 at 1/3
      -inf, 3,   inf, 0,   inf, -inf,  // +∞ twice: those two share the weight
  };
  const RouteOut got = RunRoute(dev(), logits, 4, 6, 3);
  EXPECT_EQ(got.idx, (std::vector<int32_t>{0, 1, 2, 5, 1, 3, 0, 1, 2, 2, 4, 1}));
  const float third = 1.0f / 3.0f, e3 = std::exp(-3.0f), s = 1 + 2 * e3;
  EXPECT_TRUE(AllNear(
      got.w, {third, third, third, 1 / s, e3 / s, e3 / s, third, third, third, 0.5f, 0.5f, 0.0f},
      1e-6, 1e-6));
  // Unnormalised: the probabilities over all six (NaN and −∞ count 0; all NaN: 1/6 each).
  const RouteOut raw = RunRoute(dev(), logits, 4, 6, 3, false);
  EXPECT_EQ(raw.idx, got.idx);
  const float sixth = 1.0f / 6.0f, z = 1 + 2 * e3 + std::exp(-5.0f);
  EXPECT_TRUE(AllNear(
      raw.w, {sixth, sixth, sixth, 1 / z, e3 / z, e3 / z, sixth, sixth, sixth, 0.5f, 0.5f, 0.0f},
      1e-6, 1e-6));
}

struct ExpertsCase {
  int64_t t, d, inter, e, k;
  bool shared, accumulate;
};

// Runs MoeExperts with weights of `wtype` (values `gate_up`, `down` as given, already bf16-exact
// for bf16); x is columns 2… of a [t, d + 3] matrix.
std::vector<float> RunExperts(const ExecContext& ctx, const ExpertsCase& c,
                              const std::vector<float>& x, const std::vector<int32_t>& idx,
                              const std::vector<float>& w, const std::vector<float>& gate_up,
                              const std::vector<float>& down, const std::vector<float>& shared,
                              const std::vector<float>& gate, const std::vector<float>& y0,
                              DType wtype, absl::Status* status = nullptr) {
  std::vector<float> xw(c.t * (c.d + 3), 9.0f);
  for (int64_t r = 0; r < c.t; ++r) std::copy_n(&x[r * c.d], c.d, &xw[r * (c.d + 3) + 2]);
  Tensor tx = ToDevice(ctx, xw, {c.t, c.d + 3});
  Tensor ti = ToDevice(ctx, idx, DType::kI32, {c.t, c.k});
  Tensor tw = ToDevice(ctx, w, {c.t, c.k});
  const Shape gu_shape{c.e, 2 * c.inter, c.d}, dn_shape{c.e, c.d, c.inter};
  Tensor tgu = wtype == DType::kBF16 ? ToDevice(ctx, Bf16Bits(gate_up), DType::kBF16, gu_shape)
                                     : ToDevice(ctx, gate_up, gu_shape);
  Tensor tdn = wtype == DType::kBF16 ? ToDevice(ctx, Bf16Bits(down), DType::kBF16, dn_shape)
                                     : ToDevice(ctx, down, dn_shape);
  Tensor ts = ToDevice(ctx, shared, {c.t, c.d});
  // The gate logit is column 1 of a [t, 2] matrix (a row stride, as a slice of a wider product).
  std::vector<float> gw(c.t * 2, 0.0f);
  for (int64_t r = 0; r < c.t; ++r) gw[r * 2 + 1] = gate[r];
  Tensor tg = ToDevice(ctx, gw, {c.t, 2});
  Tensor ty = c.accumulate ? ToDevice(ctx, y0, {c.t, c.d}) : Poisoned(ctx, {c.t, c.d});
  const MoeShared sh{ts.view(), tg.view().Cols(1, 1)};
  const absl::Status s = MoeExperts(ctx, tx.view().Cols(2, c.d), ti.view(), tw.view(), tgu.view(),
                                    tdn.view(), c.shared ? &sh : nullptr, ty.view(), c.accumulate);
  if (status != nullptr) {
    *status = s;
  } else {
    EXPECT_TRUE(s.ok()) << s;
  }
  return ToHost(ctx, ty.view());
}

void CheckExperts(const ExecContext& ctx, const ExpertsCase& c, DType wtype, uint32_t seed) {
  const std::vector<float> x = RandomFloats(c.t * c.d, seed);
  std::vector<float> gate_up = RandomFloats(c.e * 2 * c.inter * c.d, seed + 1, 0.2f);
  std::vector<float> down = RandomFloats(c.e * c.d * c.inter, seed + 2, 0.2f);
  if (wtype == DType::kBF16) gate_up = RoundToBf16(gate_up), down = RoundToBf16(down);
  const std::vector<float> logits = RandomFloats(c.t * c.e, seed + 3, 2.0f);
  const Routing r = OracleRoute(logits, c.t, c.e, c.k);
  const std::vector<float> w(r.w.begin(), r.w.end());
  const std::vector<float> shared = RandomFloats(c.t * c.d, seed + 4);
  const std::vector<float> gate = RandomFloats(c.t, seed + 5, 2.0f);
  const std::vector<float> y0 = RandomFloats(c.t * c.d, seed + 6);
  const std::vector<float> got =
      RunExperts(ctx, c, x, r.idx, w, gate_up, down, shared, gate, y0, wtype);
  // The oracle takes the weights as f32 rounded them (w), so only the products' order differs.
  Routing rf = r;
  rf.w.assign(w.begin(), w.end());
  const std::vector<float> want =
      OracleExperts(x, rf, gate_up, down, c.shared ? &shared : nullptr, &gate,
                    c.accumulate ? y0 : std::vector<float>(), c.t, c.d, c.inter, c.k);
  EXPECT_TRUE(AllNear(got, want, 2e-5, 1e-4))
      << "t " << c.t << " d " << c.d << " I " << c.inter << " E " << c.e << " k " << c.k
      << " shared " << c.shared << " accumulate " << c.accumulate;
}

TEST_P(DeviceMoeTest, ExpertsMatchTheOracle) {
  uint32_t seed = 100;
  for (const ExpertsCase& c :
       {ExpertsCase{1, 48, 24, 16, 4, true, true}, ExpertsCase{5, 48, 24, 16, 4, false, false},
        ExpertsCase{70, 64, 40, 8, 2, true, false}, ExpertsCase{3, 33, 7, 5, 5, true, true},
        ExpertsCase{9, 40, 16, 300, 8, true, true},
        // several 64-pair tiles an expert (CUDA's grouped GEMMs), widths off the tiles' multiples
        ExpertsCase{300, 72, 40, 16, 4, true, false},
        // more experts than OffsetsKernel's 1024 threads, and more tokens than one pass
        // (kMoePassTokens)
        ExpertsCase{4100, 40, 16, 2000, 4, false, false},
        // a hidden size of 0: nothing to compute (CUDA used to launch grids of no blocks)
        ExpertsCase{4, 0, 8, 4, 2, true, true}, ExpertsCase{40, 0, 8, 4, 2, false, false}}) {
    CheckExperts(dev(), c, DType::kF32, seed += 10);
  }
}

// Hand-made routing: experts with exactly one full 64-pair tile, with two tiles, with a partial
// one, and experts with no pairs at all (CUDA's grouped GEMMs from 8 pairs an expert on).
TEST_P(DeviceMoeTest, ExpertsWithFullPartialAndNoTiles) {
  const ExpertsCase c{64 + 128 + 5, 40, 24, 5, 1, true, true};
  std::vector<int32_t> idx;
  for (int i = 0; i < 64; ++i) idx.push_back(4);   // one full tile
  for (int i = 0; i < 128; ++i) idx.push_back(0);  // two full tiles
  for (int i = 0; i < 5; ++i) idx.push_back(2);    // a partial one; experts 1 and 3: none
  std::mt19937 rng(3);
  std::shuffle(idx.begin(), idx.end(), rng);
  const std::vector<float> x = RandomFloats(c.t * c.d, 41);
  const std::vector<float> gate_up = RandomFloats(c.e * 2 * c.inter * c.d, 42, 0.2f);
  const std::vector<float> down = RandomFloats(c.e * c.d * c.inter, 43, 0.2f);
  const std::vector<float> shared = RandomFloats(c.t * c.d, 44), gate = RandomFloats(c.t, 45);
  const std::vector<float> y0 = RandomFloats(c.t * c.d, 46), w = RandomFloats(c.t, 47);
  const std::vector<float> got =
      RunExperts(dev(), c, x, idx, w, gate_up, down, shared, gate, y0, DType::kF32);
  const Routing r{idx, std::vector<double>(w.begin(), w.end())};
  EXPECT_TRUE(
      AllNear(got, OracleExperts(x, r, gate_up, down, &shared, &gate, y0, c.t, c.d, c.inter, c.k),
              2e-5, 1e-4));
}

// CUDA does not check the ids (that would cost a host sync): an id outside [0, E) makes its
// token's row NaN and leaves the others as they should be, on the per-pair path (few pairs) and
// the grouped one. (The CPU refuses them: RefusesBadArguments.)
TEST_P(DeviceMoeTest, BadIdsGiveNanRowsOnTheDevice) {
  if (GetParam().device == Device::kCpu) GTEST_SKIP() << "the CPU refuses bad ids";
  for (const int64_t t : {2, 40}) {
    const ExpertsCase c{t, 16, 8, 4, 2, false, false};
    const Routing r = OracleRoute(RandomFloats(t * c.e, 51), t, c.e, c.k);
    std::vector<int32_t> idx = r.idx;
    idx[1 * c.k + 0] = -1;       // token 1
    idx[(t - 1) * c.k + 1] = 4;  // the last token: E
    const std::vector<float> x = RandomFloats(t * c.d, 52);
    const std::vector<float> gate_up = RandomFloats(c.e * 2 * c.inter * c.d, 53, 0.2f);
    const std::vector<float> down = RandomFloats(c.e * c.d * c.inter, 54, 0.2f);
    const std::vector<float> w(r.w.begin(), r.w.end()), none(t * c.d, 0.0f), g(t, 0.0f);
    const std::vector<float> got =
        RunExperts(dev(), c, x, idx, w, gate_up, down, none, g, none, DType::kF32);
    const std::vector<float> want =
        OracleExperts(x, r, gate_up, down, nullptr, nullptr, {}, t, c.d, c.inter, c.k);
    for (int64_t row = 0; row < t; ++row) {
      const bool bad = row == 1 || row == t - 1;
      for (int64_t col = 0; col < c.d; ++col) {
        const float v = got[row * c.d + col];
        if (bad) {
          EXPECT_TRUE(std::isnan(v)) << "t " << t << " row " << row << " col " << col;
        } else {
          EXPECT_NEAR(v, want[row * c.d + col], 2e-5 + 1e-4 * std::abs(want[row * c.d + col]))
              << "t " << t << " row " << row << " col " << col;
        }
      }
    }
  }
}

TEST_P(DeviceMoeTest, Bf16WeightsMatchTheOracleOnRoundedWeights) {
  CheckExperts(dev(), ExpertsCase{1, 64, 32, 16, 4, true, true}, DType::kBF16, 7);
  CheckExperts(dev(), ExpertsCase{33, 64, 32, 16, 4, true, false}, DType::kBF16, 8);
}

TEST_P(DeviceMoeTest, RefusesBadArguments) {
  const int64_t t = 2, d = 8, inter = 4, e = 3;
  Tensor x = ToDevice(dev(), RandomFloats(t * d, 1), {t, d});
  Tensor y = Poisoned(dev(), {t, d});
  Tensor gu = ToDevice(dev(), RandomFloats(e * 2 * inter * d, 2), {e, 2 * inter, d});
  Tensor dn = ToDevice(dev(), RandomFloats(e * d * inter, 3), {e, d, inter});
  Tensor w = ToDevice(dev(), std::vector<float>(t * 4, 0.25f), {t, 4});
  Tensor idx4 = ToDevice(dev(), std::vector<int32_t>(t * 4, 0), DType::kI32, {t, 4});
  // k = 4 > E = 3.
  absl::Status s = MoeExperts(dev(), x.view(), idx4.view(), w.view(), gu.view(), dn.view(), nullptr,
                              y.view(), false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("idx"), absl::string_view::npos) << s;
  // down's width must match gate_up's 2I.
  Tensor dn_bad = ToDevice(dev(), RandomFloats(e * d * 5, 3), {e, d, 5});
  Tensor idx2 = ToDevice(dev(), std::vector<int32_t>{0, 1, 2, 0}, DType::kI32, {t, 2});
  Tensor w2 = ToDevice(dev(), std::vector<float>(t * 2, 0.5f), {t, 2});
  s = MoeExperts(dev(), x.view(), idx2.view(), w2.view(), gu.view(), dn_bad.view(), nullptr,
                 y.view(), false);
  EXPECT_NE(s.message().find("gate_up"), absl::string_view::npos) << s;
  // x and y may not overlap.
  s = MoeExperts(dev(), x.view(), idx2.view(), w2.view(), gu.view(), dn.view(), nullptr, x.view(),
                 false);
  EXPECT_NE(s.message().find("overlap"), absl::string_view::npos) << s;
  // Route: k beyond the experts.
  Tensor logits = ToDevice(dev(), RandomFloats(t * e, 4), {t, e});
  s = MoeRoute(dev(), logits.view(), idx4.view(), w.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // No tokens: nothing to do (and nothing launched).
  auto empty = [&](DType dtype, Shape shape) {
    absl::StatusOr<Tensor> t = Tensor::Empty(dtype, shape, dev().device);
    EXPECT_TRUE(t.ok()) << t.status();
    return *std::move(t);
  };
  Tensor x0 = empty(DType::kF32, {0, d}), y0 = empty(DType::kF32, {0, d});
  Tensor i0 = empty(DType::kI32, {0, 2}), w0 = empty(DType::kF32, {0, 2});
  Tensor l0 = empty(DType::kF32, {0, e});
  EXPECT_TRUE(MoeRoute(dev(), l0.view(), i0.view(), w0.view()).ok());
  EXPECT_TRUE(MoeExperts(dev(), x0.view(), i0.view(), w0.view(), gu.view(), dn.view(), nullptr,
                         y0.view(), false)
                  .ok());
  // The device's limits are named (CUDA: expert width and hidden size).
  EXPECT_TRUE(MoeSupported(Device::kCpu, 1 << 20, 1 << 20).ok());
  const absl::Status wide = MoeSupported(Device::kCuda, 2048, 20000);
  EXPECT_EQ(wide.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(wide.message().find("expert width 20000"), absl::string_view::npos) << wide;
  if (GetParam().device == Device::kCpu) {  // the CPU checks the ids themselves
    Tensor bad = ToDevice(dev(), std::vector<int32_t>{0, 1, 3, 0}, DType::kI32, {t, 2});
    s = MoeExperts(dev(), x.view(), bad.view(), w2.view(), gu.view(), dn.view(), nullptr, y.view(),
                   false);
    EXPECT_NE(s.message().find("idx[1, 0] = 3"), absl::string_view::npos) << s;
  }
}

// Under batch_invariant a token's output has the same bits whatever else shares the call.
TEST(MoeCpuTest, BatchInvariantRowsDoNotDependOnTheBatch) {
  testing_util::TestContext tc(Device::kCpu);
  ExecContext ctx = tc.ctx;
  ctx.batch_invariant = true;
  const ExpertsCase all{40, 64, 32, 8, 3, true, false};
  const std::vector<float> x = RandomFloats(all.t * all.d, 1);
  const std::vector<float> gate_up = RandomFloats(all.e * 2 * all.inter * all.d, 2, 0.2f);
  const std::vector<float> down = RandomFloats(all.e * all.d * all.inter, 3, 0.2f);
  const Routing r = OracleRoute(RandomFloats(all.t * all.e, 4), all.t, all.e, all.k);
  const std::vector<float> w(r.w.begin(), r.w.end());
  const std::vector<float> shared = RandomFloats(all.t * all.d, 5), gate = RandomFloats(all.t, 6);
  const std::vector<float> whole =
      RunExperts(ctx, all, x, r.idx, w, gate_up, down, shared, gate, {}, DType::kF32);
  for (int64_t row : {0, 17, 39}) {
    ExpertsCase one = all;
    one.t = 1;
    auto slice = [&](const std::vector<float>& v, int64_t width) {
      return std::vector<float>(v.begin() + row * width, v.begin() + (row + 1) * width);
    };
    const std::vector<int32_t> idx(r.idx.begin() + row * all.k, r.idx.begin() + (row + 1) * all.k);
    const std::vector<float> alone =
        RunExperts(ctx, one, slice(x, all.d), idx, slice(w, all.k), gate_up, down,
                   slice(shared, all.d), slice(gate, 1), {}, DType::kF32);
    EXPECT_EQ(alone, slice(whole, all.d)) << "row " << row;
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceMoeTest,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
