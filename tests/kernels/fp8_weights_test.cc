// fp8 weights kept as their checkpoint stores them (kernels/tensor.h Tensor::Scaled, CPU): e4m3
// bytes with f32 scales per row and block of columns. The products, the embedding gather and the
// mixture-of-experts ops must see exactly the values dequantizing on load gives (Q·S rounded once
// in f32, models/fp8.h), so every result here is compared bit for bit with the same op over those
// f32 values; the e4m3 decoding itself is checked against the format's constants.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/context.h"
#include "kernels/cpu/invariant_gemm.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/moe.h"
#include "kernels/tensor.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::RandomFloats;

// Random e4m3 bytes (every finite one may come; never the NaNs 0x7F / 0xFF).
std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) {
    do {
      b = static_cast<uint8_t>(rng());
    } while ((b & 0x7F) == 0x7F);
  }
  return v;
}

// Scales of both signs over ~2⁻¹²…2⁴, as checkpoints' block scales range.
std::vector<float> RandomScales(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> e(-12.0f, 4.0f);
  std::vector<float> v(n);
  for (float& s : v) s = std::exp2(e(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
  return v;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// An fp8 weight of `shape` (rank ≥ 2) with row scales in blocks of `bc` columns, and its values
// dequantized as models/fp8.h does: E4m3ToF32(q) · s in f32.
struct Fp8Weight {
  Tensor kept;
  std::vector<float> values;
};

Fp8Weight MakeWeight(const Shape& shape, int64_t bc, uint32_t seed) {
  const int64_t k = shape.back(), rows = NumElements(shape) / k, sc = CeilDiv(k, bc);
  const std::vector<uint8_t> q = RandomBytes(rows * k, seed);
  const std::vector<float> s = RandomScales(rows * sc, seed + 1);
  Shape scale_shape = shape;
  scale_shape.back() = sc;
  absl::StatusOr<Tensor> values = Tensor::Empty(DType::kF8E4M3, shape);
  absl::StatusOr<Tensor> scales = Tensor::Empty(DType::kF32, scale_shape);
  EXPECT_TRUE(values.ok() && scales.ok());
  std::memcpy(values->data<void>(), q.data(), q.size());
  std::memcpy(scales->data<void>(), s.data(), s.size() * sizeof(float));
  absl::StatusOr<Tensor> kept = Tensor::Scaled(*std::move(values), *std::move(scales), bc);
  EXPECT_TRUE(kept.ok()) << kept.status();
  Fp8Weight w{*std::move(kept), std::vector<float>(rows * k)};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c)
      w.values[r * k + c] = E4m3ToF32(q[r * k + c]) * s[r * sc + c / bc];
  }
  return w;
}

// The fp8 KV cache's conversion by bits gives E4m3FromDouble's byte for every float whose low 8
// mantissa bits are zero (all 2²⁴ of them, both signs: every rounding boundary and tie of e4m3
// lies on those), for a spread of the others, and for ±∞ and NaN.
TEST(Fp8WeightsTest, F32ToE4m3IsE4m3FromDouble) {
  for (uint32_t hi = 0; hi < (1u << 24); ++hi) {
    for (uint32_t low : {0u, hi & 0xffu}) {
      const float x = std::bit_cast<float>((hi << 8) | low);
      if (std::isnan(x)) continue;
      ASSERT_EQ(F32ToE4m3(x), E4m3FromDouble(x)) << "bits 0x" << std::hex << ((hi << 8) | low);
    }
  }
  EXPECT_EQ(F32ToE4m3(INFINITY), 0x7E);
  EXPECT_EQ(F32ToE4m3(-INFINITY), 0xFE);
  EXPECT_EQ(F32ToE4m3(NAN), 0x7F);
  EXPECT_EQ(F32ToE4m3(-NAN), 0x7F);
}

TEST(Fp8WeightsTest, E4m3BytesDecodeToTheFormatsValues) {
  EXPECT_EQ(E4m3ToF32(0x00), 0.0f);
  EXPECT_EQ(E4m3ToF32(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(E4m3ToF32(0x07), std::ldexp(7.0f, -9));  // the largest subnormal
  EXPECT_EQ(E4m3ToF32(0x08), std::ldexp(1.0f, -6));  // the smallest normal
  EXPECT_EQ(E4m3ToF32(0x38), 1.0f);
  EXPECT_EQ(E4m3ToF32(0x7E), 448.0f);
  EXPECT_EQ(E4m3ToF32(0xC0), -2.0f);
  EXPECT_TRUE(std::isnan(E4m3ToF32(0x7F)) && std::isnan(E4m3ToF32(0xFF)));
}

// The kernel's block dequantization (vectorized where the build is) gives table · scale, bit for
// bit, for every finite byte, at block widths that split its 8-lane vectors and at one block a row.
TEST(Fp8WeightsTest, DequantizedRowsAreTheValueTimesTheScale) {
  std::vector<uint8_t> all;
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) != 0x7F) all.push_back(static_cast<uint8_t>(b));
  }
  for (int64_t k : {1, 7, 8, 9, 24, 40, 254}) {
    for (int64_t bc : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{13}, int64_t{24}, k}) {
      const int64_t rows = 3, sc = CeilDiv(k, bc);
      std::vector<uint8_t> q(rows * k);
      for (size_t i = 0; i < q.size(); ++i) q[i] = all[(i * 37 + k) % all.size()];
      const std::vector<float> s = RandomScales(rows * sc, static_cast<uint32_t>(k * 100 + bc));
      std::vector<float> got(rows * k, -1.0f);
      cpu::DequantizeFp8Rows(q.data(), rows, k, {s.data(), bc}, got.data());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          const float want = E4m3ToF32(q[r * k + c]) * s[r * sc + c / bc];
          ASSERT_EQ(std::memcmp(&got[r * k + c], &want, sizeof(float)), 0)
              << "byte 0x" << std::hex << int{q[r * k + c]} << std::dec << " k=" << k
              << " bc=" << bc << " at " << r << "," << c;
        }
      }
    }
  }
}

// Products over fp8 weights equal the f32 products over their dequantized values, bit for bit, at
// every row count (one row through many, the OpenMP threads at k = 1000), tile edge and block
// width; accumulating too.
TEST(Fp8WeightsTest, ProductsEqualTheDequantizedProducts) {
  for (int64_t n : {5, 67, 400}) {
    for (int64_t k : {9, 64, 1000}) {
      for (int64_t bc : {int64_t{8}, int64_t{13}, int64_t{16}, int64_t{128}, k}) {
        const Fp8Weight w = MakeWeight({n, k}, bc, static_cast<uint32_t>(n + k + bc));
        const std::vector<float> x = RandomFloats(20 * k, static_cast<uint32_t>(k));
        for (int64_t m : {1, 2, 3, 5, 8, 9, 13, 20}) {
          for (bool acc : {false, true}) {
            std::vector<float> want = RandomFloats(m * n, 77), got = want;
            cpu::InvariantGemm(x.data(), k, w.values.data(), want.data(), n, m, n, k, acc);
            const TensorView v = w.kept.view();
            cpu::InvariantGemm(x.data(), k, v.raw(), cpu::WeightFormat::kF8E4M3, got.data(), n, m,
                               n, k, acc, {v.scales(), v.scale_block_cols()});
            ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
                << "m=" << m << " n=" << n << " k=" << k << " bc=" << bc << " acc=" << acc;
          }
        }
      }
    }
  }
}

// Through the ops: Linear (any context: fp8 always takes the invariant kernel) on the whole weight
// and on a row slice, SwiGluLinear, RmsNormLinear, the embedding gather, and the experts of a
// mixture with [E, 2I, D] / [E, D, I] fp8 weights.
TEST(Fp8WeightsTest, OpsReadScaledViews) {
  const int64_t m = 6, k = 40, n = 29, bc = 16;
  const Fp8Weight w = MakeWeight({n, k}, bc, 5);
  std::vector<float> x = RandomFloats(m * k, 6), wf = w.values;
  const TensorView xv(x.data(), DType::kF32, {m, k}), wfv(wf.data(), DType::kF32, {n, k});
  Arena arena(Device::kCpu);
  ExecContext exact = CpuContext(&arena);
  exact.batch_invariant = true;
  std::vector<float> want(m * n), got(m * n);
  ASSERT_TRUE(Linear(exact, xv, wfv, TensorView(want.data(), DType::kF32, {m, n})).ok());
  ASSERT_TRUE(
      Linear(ExecContext{}, xv, w.kept.view(), TensorView(got.data(), DType::kF32, {m, n})).ok());
  EXPECT_EQ(got, want);
  // Rows 7..18 of the weight: their own scales come with them.
  std::vector<float> part(m * 12);
  ASSERT_TRUE(Linear(ExecContext{}, xv, w.kept.view().Rows(7, 12),
                     TensorView(part.data(), DType::kF32, {m, 12}))
                  .ok());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < 12; ++j) EXPECT_EQ(part[i * 12 + j], want[i * n + 7 + j]) << i << j;
  }
  // SwiGluLinear (gate, up → silu(gate)·up, then the product).
  {
    std::vector<float> g1 = RandomFloats(m * k, 11), u = RandomFloats(m * k, 12), g2 = g1;
    std::vector<float> a(m * n), b(m * n);
    ASSERT_TRUE(SwiGluLinear(exact, TensorView(g1.data(), DType::kF32, {m, k}),
                             TensorView(u.data(), DType::kF32, {m, k}), wfv,
                             TensorView(a.data(), DType::kF32, {m, n}))
                    .ok());
    ASSERT_TRUE(SwiGluLinear(ExecContext{}, TensorView(g2.data(), DType::kF32, {m, k}),
                             TensorView(u.data(), DType::kF32, {m, k}), w.kept.view(),
                             TensorView(b.data(), DType::kF32, {m, n}))
                    .ok());
    EXPECT_EQ(a, b) << "SwiGluLinear";
  }
  // The embedding gather: rows of the table as their dequantized values.
  {
    std::vector<int32_t> ids = {3, 0, 28, 3, 17};
    std::vector<float> rows(ids.size() * k);
    ASSERT_TRUE(
        Embedding(ExecContext{}, w.kept.view(),
                  TensorView(ids.data(), DType::kI32, {static_cast<int64_t>(ids.size())}),
                  TensorView(rows.data(), DType::kF32, {static_cast<int64_t>(ids.size()), k}))
            .ok());
    for (size_t t = 0; t < ids.size(); ++t) {
      EXPECT_EQ(0, std::memcmp(rows.data() + t * k, wf.data() + ids[t] * k, k * sizeof(float)))
          << "token " << ids[t];
    }
  }
  // Mixture of experts: 3 experts, 2 a token.
  {
    const int64_t e = 3, inter = 24, d = k, t = 5, top = 2;
    const Fp8Weight gate_up = MakeWeight({e, 2 * inter, d}, bc, 21);
    const Fp8Weight down = MakeWeight({e, d, inter}, 8, 22);
    std::vector<float> gu = gate_up.values, dn = down.values, xs = RandomFloats(t * d, 23);
    std::vector<int32_t> idx = {0, 2, 1, 0, 2, 1, 1, 2, 0, 1};
    std::vector<float> weights = {0.6f, 0.4f, 0.7f, 0.3f, 0.5f, 0.5f, 0.9f, 0.1f, 0.2f, 0.8f};
    const TensorView idv(idx.data(), DType::kI32, {t, top}),
        wv(weights.data(), DType::kF32, {t, top});
    std::vector<float> a(t * d), b(t * d);
    absl::Status f32 = MoeExperts(exact, TensorView(xs.data(), DType::kF32, {t, d}), idv, wv,
                                  TensorView(gu.data(), DType::kF32, {e, 2 * inter, d}),
                                  TensorView(dn.data(), DType::kF32, {e, d, inter}), nullptr,
                                  TensorView(a.data(), DType::kF32, {t, d}), false);
    ASSERT_TRUE(f32.ok()) << f32;
    absl::Status s =
        MoeExperts(exact, TensorView(xs.data(), DType::kF32, {t, d}), idv, wv, gate_up.kept.view(),
                   down.kept.view(), nullptr, TensorView(b.data(), DType::kF32, {t, d}), false);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(a, b) << "MoeExperts";
  }
}

// What a scaled tensor refuses: scales of the wrong shape, a reshape that changes the rows'
// width; a column slice has no scales, and a product over it names that. ToF32 dequantizes.
TEST(Fp8WeightsTest, ScaledTensorsKeepTheirScalesOrRefuse) {
  {
    absl::StatusOr<Tensor> v = Tensor::Empty(DType::kF8E4M3, {4, 10});
    absl::StatusOr<Tensor> s = Tensor::Empty(DType::kF32, {4, 2});
    absl::StatusOr<Tensor> t = Tensor::Scaled(*std::move(v), *std::move(s), 4);
    EXPECT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("must be [4, 3]"), std::string::npos) << t.status();
  }
  Fp8Weight w = MakeWeight({6, 10}, 4, 31);
  EXPECT_NE(w.kept.view().DebugString().find("scales"), std::string::npos);
  EXPECT_FALSE(w.kept.Reshape({60}).ok());
  EXPECT_FALSE(w.kept.Reshape({3, 20}).ok());
  ASSERT_TRUE(w.kept.Reshape({2, 3, 10}).ok());
  EXPECT_EQ(w.kept.view().scales(), w.kept.view().Rows(0, 1).scales());
  EXPECT_EQ(w.kept.view().Rows(1, 1).scales(), w.kept.view().scales() + 3 * 3);
  ASSERT_TRUE(w.kept.Reshape({6, 10}).ok());
  absl::StatusOr<Tensor> f32 = ToF32(w.kept.view());
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ(std::vector<float>(f32->data<float>(), f32->data<float>() + 60), w.values);

  std::vector<float> x(2 * 5, 1.0f), y(2 * 6);
  absl::Status s = Linear(ExecContext{}, TensorView(x.data(), DType::kF32, {2, 5}),
                          w.kept.view().Cols(0, 5), TensorView(y.data(), DType::kF32, {2, 6}));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has no scales"), std::string::npos) << s;
  // Converted to fp8 with no scales (the fp8 KV cache's form): the bytes nearest each value,
  // saturating at ±448, and ToF32 reads them back unscaled.
  const std::vector<float> big = {0.1f, -3.0f, 500.0f, -1e30f, 448.0f, 2e-3f};
  absl::StatusOr<Tensor> narrow =
      FromF32(TensorView(const_cast<float*>(big.data()), DType::kF32, {2, 3}), DType::kF8E4M3);
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  EXPECT_FALSE(narrow->view().has_scales());
  absl::StatusOr<Tensor> back = ToF32(narrow->view());
  ASSERT_TRUE(back.ok()) << back.status();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(back->data<float>()[i], E4m3ToF32(E4m3FromDouble(big[i]))) << i;
  }
  EXPECT_EQ(back->data<float>()[2], 448.0f);
  EXPECT_EQ(back->data<float>()[3], -448.0f);
}

// Empty fp8 weights still carry their scales: they convert, and products over them run.
TEST(Fp8WeightsTest, EmptyScaledTensorsStayScaled) {
  for (const Shape& shape : {Shape{0, 4}, Shape{3, 0}}) {
    absl::StatusOr<Tensor> v = Tensor::Empty(DType::kF8E4M3, shape);
    absl::StatusOr<Tensor> sc = Tensor::Empty(DType::kF32, {shape[0], (shape[1] + 1) / 2});
    ASSERT_TRUE(v.ok() && sc.ok());
    absl::StatusOr<Tensor> t = Tensor::Scaled(*std::move(v), *std::move(sc), 2);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(t->view().has_scales());
    absl::StatusOr<Tensor> f = ToF32(t->view());
    EXPECT_TRUE(f.ok() && f->numel() == 0) << f.status();
    std::vector<float> x(2 * 4, 1.0f), y(2 * 3, 5.0f);
    const int64_t k = shape[1], n = shape[0];
    absl::Status st = Linear(ExecContext{}, TensorView(x.data(), DType::kF32, {2, k}), t->view(),
                             TensorView(y.data(), DType::kF32, {2, n}));
    EXPECT_TRUE(st.ok()) << st;
  }
}

}  // namespace
}  // namespace linfer
