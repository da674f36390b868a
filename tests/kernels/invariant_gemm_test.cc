// The batch-invariant CPU GEMM: close to a float64 product, and every output row bit-identical to
// the same row computed alone (any M, any position in the call, any tile edge, threads or not) —
// the property OpenBLAS' sgemm lacks and the prefix cache's exactness rests on.
#include "kernels/cpu/invariant_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/tensor.h"

namespace linfer {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

TEST(InvariantGemmTest, MatchesAFloat64Product) {
  for (int64_t k : {1, 7, 8, 9, 64, 333}) {
    const int64_t m = 6, n = 11, ldx = k + 3, ldy = n + 2;
    const std::vector<float> x = Random(m * ldx, 1), w = Random(n * k, 2), y0 = Random(m * ldy, 3);
    for (bool acc : {false, true}) {
      std::vector<float> y = y0;
      cpu::InvariantGemm(x.data(), ldx, w.data(), y.data(), ldy, m, n, k, acc);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double ref = acc ? y0[i * ldy + j] : 0.0;
          double mag = std::abs(ref);
          for (int64_t t = 0; t < k; ++t) {
            ref += double{x[i * ldx + t]} * w[j * k + t];
            mag += std::abs(double{x[i * ldx + t]} * w[j * k + t]);
          }
          EXPECT_NEAR(y[i * ldy + j], ref, 1e-6 * mag + 1e-7) << i << "," << j << " k=" << k;
        }
        EXPECT_EQ(y[i * ldy + n], y0[i * ldy + n]) << "wrote past n";
      }
    }
  }
}

TEST(InvariantGemmTest, EveryRowEqualsItselfAlone) {
  // n = 67 and 400: tile edges (3 columns) and several weight blocks; k = 1000 with m = 64 runs
  // on the OpenMP threads.
  for (int64_t n : {5, 67, 400}) {
    for (int64_t k : {9, 64, 1000}) {
      const int64_t rows = 70;
      const std::vector<float> x = Random(rows * k, 10 + n), w = Random(n * k, 20 + k);
      std::vector<float> alone(rows * n);
      for (int64_t i = 0; i < rows; ++i) {
        cpu::InvariantGemm(x.data() + i * k, k, w.data(), alone.data() + i * n, n, 1, n, k, false);
      }
      for (int64_t m : {2, 3, 4, 5, 7, 8, 13, 64}) {
        for (int64_t off : {0, 1, 3}) {
          std::vector<float> y(m * n);
          cpu::InvariantGemm(x.data() + off * k, k, w.data(), y.data(), n, m, n, k, false);
          EXPECT_EQ(std::memcmp(y.data(), alone.data() + off * n, y.size() * sizeof(float)), 0)
              << "m=" << m << " rows from " << off << " n=" << n << " k=" << k;
        }
      }
    }
  }
}

TEST(InvariantGemmTest, LinearUsesItWhenTheContextAsks) {
  const int64_t m = 9, k = 40, n = 13;
  std::vector<float> x = Random(m * k, 5), w = Random(n * k, 6), b = Random(n, 7);
  std::vector<float> y(m * n), y1(n), want(m * n);
  ExecContext ctx;
  ctx.batch_invariant = true;
  const TensorView wv(w.data(), DType::kF32, {n, k}), bv(b.data(), DType::kF32, {n});
  ASSERT_TRUE(Linear(ctx, TensorView(x.data(), DType::kF32, {m, k}), wv,
                     TensorView(y.data(), DType::kF32, {m, n}), &bv)
                  .ok());
  cpu::InvariantGemm(x.data(), k, w.data(), want.data(), n, m, n, k, false);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) want[i * n + j] += b[j];
  }
  EXPECT_EQ(y, want);
  // Row 4 alone through Linear gives the same bits.
  ASSERT_TRUE(Linear(ctx, TensorView(x.data() + 4 * k, DType::kF32, {1, k}), wv,
                     TensorView(y1.data(), DType::kF32, {1, n}), &bv)
                  .ok());
  EXPECT_EQ(std::memcmp(y1.data(), y.data() + 4 * n, n * sizeof(float)), 0);
}

// 16-bit weights (bf16, f16): the product equals the f32 product over the widened weights bit for
// bit, both where the kernel widens as it loads (few rows) and where it widens a block into a
// buffer first (many rows), so rows stay batch-invariant across the two paths; through Linear too.
TEST(InvariantGemmTest, SixteenBitWeightsGiveTheBitsOfTheirWidening) {
  for (cpu::WeightFormat format : {cpu::WeightFormat::kBF16, cpu::WeightFormat::kF16}) {
    const bool bf16 = format == cpu::WeightFormat::kBF16;
    for (int64_t n : {5, 67, 400}) {
      for (int64_t k : {9, 64, 1000}) {
        const int64_t rows = 20;
        const std::vector<float> x = Random(rows * k, 30 + n), wf = Random(n * k, 40 + k);
        std::vector<uint16_t> w16(wf.size());
        std::vector<float> wide(wf.size());
        for (size_t i = 0; i < wf.size(); ++i) {
          w16[i] = bf16 ? F32ToBf16(wf[i]) : F32ToF16(wf[i]);
          wide[i] = bf16 ? Bf16ToF32(w16[i]) : F16ToF32(w16[i]);
        }
        for (int64_t m : {1, 2, 4, 5, 8, 9, 13, 20}) {
          std::vector<float> want(m * n), got(m * n);
          cpu::InvariantGemm(x.data(), k, wide.data(), want.data(), n, m, n, k, false);
          cpu::InvariantGemm(x.data(), k, w16.data(), format, got.data(), n, m, n, k, false);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
              << (bf16 ? "bf16" : "f16") << " m=" << m << " n=" << n << " k=" << k;
        }
      }
    }
    const int64_t m = 11, k = 37, n = 13;
    const std::vector<float> x = Random(m * k, 8), wf = Random(n * k, 9);
    std::vector<uint16_t> w16(wf.size());
    std::vector<float> wide(wf.size()), y(m * n), want(m * n);
    for (size_t i = 0; i < wf.size(); ++i) {
      w16[i] = bf16 ? F32ToBf16(wf[i]) : F32ToF16(wf[i]);
      wide[i] = bf16 ? Bf16ToF32(w16[i]) : F16ToF32(w16[i]);
    }
    const TensorView wv(w16.data(), bf16 ? DType::kBF16 : DType::kF16, {n, k});
    ASSERT_TRUE(Linear(ExecContext{}, TensorView(const_cast<float*>(x.data()), DType::kF32, {m, k}),
                       wv, TensorView(y.data(), DType::kF32, {m, n}))
                    .ok());
    cpu::InvariantGemm(x.data(), k, wide.data(), want.data(), n, m, n, k, false);
    EXPECT_EQ(y, want) << (bf16 ? "bf16" : "f16") << " through Linear";
  }
}

}  // namespace
}  // namespace linfer
