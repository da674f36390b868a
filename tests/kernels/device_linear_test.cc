// Linear and Embedding at model shapes on every device: f32 weights against the CPU twin, and on
// CUDA bf16 weights (and tables) against the CPU twin on the same bf16-rounded operands — the
// products then differ only by the f32 accumulation order. The CPU takes bf16 and f16 weights too
// and widens them exactly (x stays f32); CUDA refuses f16 weights.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/activation.h"
#include "kernels/cuda/ops.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "tests/kernels/device_ops_fixture.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::AllNear;
using testing_util::Bf16Bits;
using testing_util::RandomFloats;
using testing_util::RoundToBf16;
using testing_util::ToDevice;
using testing_util::ToHost;

class DeviceLinearTest : public testing_util::DeviceOpsTest {};

// y = x[:, off : off + k] · wᵀ + bias (+ y0 when accumulating), w stored as `wtype`; x holds
// m rows of k + 9 values (off = 5: rows neither 16-byte aligned nor a multiple of 4 apart), or
// with `aligned` of k + 8 (off = 4: both).
std::vector<float> RunLinear(const ExecContext& ctx, const std::vector<float>& x,
                             const std::vector<float>& w, DType wtype, const std::vector<float>& b,
                             const std::vector<float>& y0, int64_t m, int64_t k, int64_t n,
                             bool accumulate, bool aligned = false) {
  Tensor tx = ToDevice(ctx, std::vector<float>(x.begin(), x.begin() + m * (k + (aligned ? 8 : 9))),
                       {m, k + (aligned ? 8 : 9)});
  Tensor tw = wtype == DType::kBF16 ? ToDevice(ctx, Bf16Bits(w), DType::kBF16, {n, k})
                                    : ToDevice(ctx, w, {n, k});
  Tensor tb = ToDevice(ctx, b, {n}), ty = ToDevice(ctx, y0, {m, n});
  const TensorView bias = tb.view();
  const absl::Status s =
      Linear(ctx, tx.view().Cols(aligned ? 4 : 5, k), tw.view(), ty.view(), &bias, accumulate);
  EXPECT_TRUE(s.ok()) << s;
  return ToHost(ctx, ty.view());
}

TEST_P(DeviceLinearTest, F32WeightsAtModelShapes) {
  for (int64_t m : {1, 64, 300}) {
    const int64_t k = 1024, n = 704;
    const std::vector<float> x = RandomFloats(m * (k + 9), 1), w = RandomFloats(n * k, 2, 0.03f);
    const std::vector<float> b = RandomFloats(n, 3), y0 = RandomFloats(m * n, 4);
    for (bool acc : {false, true}) {
      EXPECT_TRUE(AllNear(RunLinear(dev(), x, w, DType::kF32, b, y0, m, k, n, acc),
                          RunLinear(cpu(), x, w, DType::kF32, b, y0, m, k, n, acc), 1e-4, 1e-4))
          << "m " << m << " accumulate " << acc;
    }
  }
}

TEST_P(DeviceLinearTest, Bf16WeightsEqualF32OnRoundedOperands) {
  const int64_t k = 1024, n = 1537;  // odd: the GEMV kernel's last warp has one column
  const std::vector<float> w = RandomFloats(n * k, 5, 0.03f), b = RandomFloats(n, 6);
  if (GetParam().device == Device::kCpu) {
    // The CPU keeps x in f32: the product over the widened weights.
    for (int64_t m : {1, 2, 9, 64}) {
      const std::vector<float> x = RandomFloats(m * (k + 9), 8 + m), y0 = RandomFloats(m * n, 9);
      const std::vector<float> got = RunLinear(dev(), x, w, DType::kBF16, b, y0, m, k, n, true);
      const std::vector<float> want =
          RunLinear(cpu(), x, RoundToBf16(w), DType::kF32, b, y0, m, k, n, true);
      EXPECT_TRUE(AllNear(got, want, 1e-5, 1e-5)) << "m " << m;
    }
    return;
  }
  // 1–8 rows: also the GEMV kernel's (LINFER_CUDA_GEMV=1), with x rows aligned or not.
  for (int64_t m : {1, 2, 3, 4, 5, 8, 16, 64, 256, 300}) {
    for (bool aligned : {false, true}) {
      const std::vector<float> x = RandomFloats(m * (k + 9), 8 + m), y0 = RandomFloats(m * n, 9);
      // The device rounds x to bf16 itself; the oracle gets both operands pre-rounded.
      for (bool acc : {false, true}) {
        // Without accumulation y's old values must not matter: NaN there.
        const std::vector<float> y_in = acc ? y0 : std::vector<float>(y0.size(), NAN);
        const std::vector<float> got =
            RunLinear(dev(), x, w, DType::kBF16, b, y_in, m, k, n, acc, aligned);
        const std::vector<float> want = RunLinear(cpu(), RoundToBf16(x), RoundToBf16(w),
                                                  DType::kF32, b, y0, m, k, n, acc, aligned);
        EXPECT_TRUE(AllNear(got, want, 1e-4, 1e-4))
            << "m " << m << " aligned " << aligned << " accumulate " << acc;
      }
    }
  }
}

// The GEMV's other work splits (LINFER_CUDA_GEMV=1; at k = 1024 above every shape splits a
// column's k in 4 on an H200): k 256 (no split: no shared-memory join, lane 0 of each warp
// writes), 512 (2), 4096 (8), and k 1020 (no multiple of 8: bf16 weights go to cuBLASLt). Each
// against the product over bf16-rounded operands (the CPU keeps x in f32, as above).
TEST_P(DeviceLinearTest, Bf16WeightsAtEveryGemvSplit) {
  const bool cuda = GetParam().device == Device::kCuda;
  for (const auto& [k, n] :
       {std::pair<int64_t, int64_t>{256, 1537}, {512, 1537}, {4096, 257}, {1020, 300}}) {
    const std::vector<float> w = RandomFloats(n * k, 51, 0.03f), b = RandomFloats(n, 52);
    for (int64_t m : {1, 3, 8}) {
      SCOPED_TRACE(absl::StrCat("k ", k, " n ", n, " m ", m));
      const std::vector<float> x = RandomFloats(m * (k + 8), 53 + m), y0 = RandomFloats(m * n, 54);
      for (bool acc : {false, true}) {
        const std::vector<float> y_in = acc ? y0 : std::vector<float>(y0.size(), NAN);
        const std::vector<float> got =
            RunLinear(dev(), x, w, DType::kBF16, b, y_in, m, k, n, acc, true);
        const std::vector<float> want = RunLinear(cpu(), cuda ? RoundToBf16(x) : x, RoundToBf16(w),
                                                  DType::kF32, b, y0, m, k, n, acc, true);
        EXPECT_TRUE(AllNear(got, want, 1e-4, 1e-4)) << "accumulate " << acc;
      }
    }
  }
}

// LINFER_CUDA_GEMM_TUNE=1 (run_on_gpu.sh reruns the Linear tests with it): a product whose rows
// are a decode bucket (a power of two ≤ 256) has its algorithm timed once per shape, and one of
// 3 or 300 rows has not; the tuned product is still the product — every candidate ran several
// times on a scratch output, so an accumulating y gains it once — and a second call (cached) gives
// the same bits. f32 weights: the GEMV (bf16 only) cannot take the rows instead.
TEST_P(DeviceLinearTest, GemmTuningTimesEachDecodeBucketOnce) {
  if (GetParam().device != Device::kCuda) GTEST_SKIP() << "cuBLASLt tuning is CUDA's";
  if (!cuda::GemmTuning().enabled) {
    GTEST_SKIP() << "LINFER_CUDA_GEMM_TUNE is not 1 (tests/gpu/run_on_gpu.sh runs this with it)";
  }
  const int64_t k = 776, n = 1003;  // a shape no other test takes: its first call tunes
  const std::vector<float> w = RandomFloats(n * k, 31, 0.03f), b = RandomFloats(n, 32);
  for (const auto& [m, tuned] :
       {std::pair<int64_t, bool>{4, true}, {3, false}, {256, true}, {300, false}, {1, true}}) {
    SCOPED_TRACE(absl::StrCat("m ", m));
    const std::vector<float> x = RandomFloats(m * (k + 8), 33 + m), y0 = RandomFloats(m * n, 34);
    const int64_t before = cuda::GemmTuning().products;
    const std::vector<float> got = RunLinear(dev(), x, w, DType::kF32, b, y0, m, k, n, true, true);
    EXPECT_EQ(cuda::GemmTuning().products - before, tuned ? 1 : 0);
    EXPECT_TRUE(
        AllNear(got, RunLinear(cpu(), x, w, DType::kF32, b, y0, m, k, n, true, true), 1e-4, 1e-4));
    EXPECT_EQ(RunLinear(dev(), x, w, DType::kF32, b, y0, m, k, n, true, true), got);
    EXPECT_EQ(cuda::GemmTuning().products - before, tuned ? 1 : 0) << "tuned twice";
  }
  EXPECT_GT(cuda::GemmTuning().candidates, 0) << "no candidate was ever timed";
  EXPECT_EQ(cuda::GemmTuning().fallbacks, 0);
}

// RmsNormLinear: RmsNorm(x; g) · wᵀ. The CPU runs the two ops (bit for bit); CUDA folds the norm
// into the GEMV where it runs (LINFER_CUDA_GEMV=1: 1–4 rows; run_on_gpu.sh reruns this
// with it) and else runs the two ops too — against the CPU's norm, rounded to bf16, times the
// bf16-rounded weights: the fold's sum of squares has another order, so a rounded input may move
// by one bf16 step now and then. With and without a (zero-centred) norm weight.
TEST_P(DeviceLinearTest, RmsNormLinearIsTheNormThenTheProduct) {
  const int64_t k = 1024, n = 1537;
  const std::vector<float> w = RandomFloats(n * k, 21, 0.03f), g = RandomFloats(k, 22, 0.5f);
  for (int64_t m : {1, 2, 3, 4, 5, 8, 16}) {
    for (int weight = 0; weight < 3; ++weight) {  // none, plain, zero-centred
      SCOPED_TRACE(absl::StrCat("m ", m, " weight ", weight));
      const std::vector<float> x = RandomFloats(m * k, 23 + m, 2.0f);
      const NormParams p{1e-6f, k, weight == 2};
      auto run = [&](const ExecContext& ctx, bool fold, DType wtype, const std::vector<float>& wv) {
        Tensor tx = ToDevice(ctx, x, {m, k});
        Tensor tg = ToDevice(ctx, g, {k});
        Tensor tw = wtype == DType::kBF16 ? ToDevice(ctx, Bf16Bits(wv), DType::kBF16, {n, k})
                                          : ToDevice(ctx, wv, {n, k});
        Tensor ty = ToDevice(ctx, std::vector<float>(m * n, NAN), {m, n});
        const TensorView gv = weight == 0 ? TensorView() : tg.view();
        absl::Status s;
        if (fold) {
          s = RmsNormLinear(ctx, tx.view(), gv, p, tw.view(), ty.view());
        } else {  // the two ops, the norm's output rounded to bf16 for bf16 weights
          Tensor normed = ToDevice(ctx, std::vector<float>(m * k, NAN), {m, k});
          s = RmsNorm(ctx, tx.view(), gv, p, normed.view());
          std::vector<float> xn = ToHost(ctx, normed.view());
          if (wtype == DType::kBF16 || ctx.device == Device::kCuda) xn = RoundToBf16(xn);
          Tensor txn = ToDevice(ctx, xn, {m, k});
          if (s.ok()) s = Linear(ctx, txn.view(), tw.view(), ty.view());
        }
        EXPECT_TRUE(s.ok()) << s;
        return ToHost(ctx, ty.view());
      };
      if (GetParam().device == Device::kCpu) {
        for (DType wtype : {DType::kF32, DType::kBF16}) {
          // The same two ops without rounding the norm in between (the CPU keeps x in f32).
          Tensor tx = ToDevice(cpu(), x, {m, k}), tg = ToDevice(cpu(), g, {k});
          Tensor normed = ToDevice(cpu(), std::vector<float>(m * k, NAN), {m, k});
          Tensor tw = wtype == DType::kBF16 ? ToDevice(cpu(), Bf16Bits(w), DType::kBF16, {n, k})
                                            : ToDevice(cpu(), w, {n, k});
          Tensor want = ToDevice(cpu(), std::vector<float>(m * n, NAN), {m, n});
          const TensorView gv = weight == 0 ? TensorView() : tg.view();
          ASSERT_TRUE(RmsNorm(cpu(), tx.view(), gv, p, normed.view()).ok());
          ASSERT_TRUE(Linear(cpu(), normed.view(), tw.view(), want.view()).ok());
          EXPECT_EQ(run(cpu(), true, wtype, w), ToHost(cpu(), want.view())) << DTypeName(wtype);
        }
        continue;
      }
      EXPECT_TRUE(AllNear(run(dev(), true, DType::kBF16, w),
                          run(cpu(), false, DType::kBF16, RoundToBf16(w)), 2e-3, 2e-3));
    }
  }
  // Refusals, by name: a norm over other than x's width, a weight of another length.
  Tensor tx = ToDevice(dev(), std::vector<float>(2 * 16, 1.0f), {2, 16});
  Tensor tw = ToDevice(dev(), std::vector<float>(8 * 16, 1.0f), {8, 16});
  Tensor tg = ToDevice(dev(), std::vector<float>(8, 1.0f), {8});
  Tensor ty = ToDevice(dev(), std::vector<float>(2 * 8, 0.0f), {2, 8});
  const absl::Status group =
      RmsNormLinear(dev(), tx.view(), TensorView(), {1e-6f, 8, false}, tw.view(), ty.view());
  EXPECT_EQ(group.code(), absl::StatusCode::kInvalidArgument) << group;
  EXPECT_NE(group.message().find("group"), absl::string_view::npos) << group;
  const absl::Status length =
      RmsNormLinear(dev(), tx.view(), tg.view(), {1e-6f, 16, false}, tw.view(), ty.view());
  EXPECT_EQ(length.code(), absl::StatusCode::kInvalidArgument) << length;
  EXPECT_NE(length.message().find("norm weight"), absl::string_view::npos) << length;
}

TEST_P(DeviceLinearTest, Bf16EmbeddingTableWidensExactly) {
  const std::vector<float> table = RoundToBf16(RandomFloats(300 * 40, 11));
  const std::vector<int32_t> ids = {0, 299, 17, 17, 150};
  auto run = [&](const ExecContext& ctx, DType dtype) {
    Tensor t = dtype == DType::kBF16 ? ToDevice(ctx, Bf16Bits(table), DType::kBF16, {300, 40})
                                     : ToDevice(ctx, table, {300, 40});
    Tensor tok = ToDevice(ctx, ids, DType::kI32, {5});
    Tensor out = testing_util::Poisoned(ctx, {5, 40});
    const absl::Status s = Embedding(ctx, t.view(), tok.view(), out.view());
    EXPECT_TRUE(s.ok()) << s;
    return ToHost(ctx, out.view());
  };
  EXPECT_EQ(run(dev(), DType::kBF16), run(cpu(), DType::kF32));
}

TEST_P(DeviceLinearTest, F16WeightsOnTheCpuOnly) {
  const int64_t m = 3, k = 40, n = 24;
  std::vector<uint16_t> bits(n * k);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = F32ToF16(0.01f * static_cast<float>(i % 17));
  Tensor tx = ToDevice(dev(), RandomFloats(m * k, 12), {m, k});
  Tensor tw = ToDevice(dev(), bits, DType::kF16, {n, k});
  Tensor ty = testing_util::Poisoned(dev(), {m, n});
  const absl::Status s = Linear(dev(), tx.view(), tw.view(), ty.view());
  if (GetParam().device == Device::kCuda) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return;
  }
  ASSERT_TRUE(s.ok()) << s;
  std::vector<float> wide(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) wide[i] = F16ToF32(bits[i]);
  const std::vector<float> x = ToHost(dev(), tx.view()), y = ToHost(dev(), ty.view());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t t = 0; t < k; ++t) ref += double{x[i * k + t]} * wide[j * k + t];
      EXPECT_NEAR(y[i * n + j], ref, 1e-5) << i << "," << j;
    }
  }
}

// SwiGluLinear = SwiGlu then Linear: exactly on CUDA with bf16 weights, where the product
// silu(g)·u is formed as x is rounded to bf16 (the conversion pass, or the GEMV's loads at 1–8
// rows) in the order SwiGlu's kernel uses, so both feed the same bf16 operand to the same product;
// other weights take SwiGlu then Linear over the strided gate (the BLAS may sum in another order).
// gate and up are strided columns of one [m, 2k + 9] tensor.
TEST_P(DeviceLinearTest, SwiGluLinearEqualsSwiGluThenLinear) {
  const int64_t k = 1024, n = 257, ld = 2 * k + 9;
  const std::vector<float> w = RandomFloats(n * k, 21, 0.03f);
  for (DType wtype : {DType::kF32, DType::kBF16}) {
    for (int64_t m : {1, 2, 3, 5, 8, 64, 300}) {
      for (bool acc : {false, true}) {
        const std::vector<float> gu = RandomFloats(m * ld, 22 + m), y0 = RandomFloats(m * n, 23);
        auto run = [&](const ExecContext& ctx, bool fused) {
          Tensor tgu = ToDevice(ctx, gu, {m, ld});
          Tensor tw = wtype == DType::kBF16 ? ToDevice(ctx, Bf16Bits(w), DType::kBF16, {n, k})
                                            : ToDevice(ctx, w, {n, k});
          Tensor ty = ToDevice(ctx, y0, {m, n});
          const TensorView gate = tgu.view().Cols(5, k), up = tgu.view().Cols(5 + k, k);
          absl::Status s;
          if (fused) {
            s = SwiGluLinear(ctx, gate, up, tw.view(), ty.view(), acc);
          } else {
            Tensor x = testing_util::Poisoned(ctx, {m, k});
            s.Update(SwiGlu(ctx, gate, up, x.view()));
            s.Update(Linear(ctx, x.view(), tw.view(), ty.view(), nullptr, acc));
          }
          EXPECT_TRUE(s.ok()) << s;
          return ToHost(ctx, ty.view());
        };
        const std::string what = absl::StrCat(DTypeName(wtype), " m ", m, " accumulate ", acc);
        const std::vector<float> fused = run(dev(), true), apart = run(dev(), false);
        if (GetParam().device == Device::kCuda && wtype == DType::kBF16) {
          EXPECT_EQ(fused, apart) << what;  // the same bf16 operand into the same product
        } else {  // SwiGlu into the strided gate, then Linear: another layout for the BLAS
          EXPECT_TRUE(AllNear(fused, apart, 1e-5, 1e-5)) << what;
        }
        if (wtype == DType::kF32) {
          EXPECT_TRUE(AllNear(fused, run(cpu(), false), 1e-4, 1e-4)) << what;
        }
      }
    }
  }
}

TEST_P(DeviceLinearTest, SwiGluLinearRefusesAMismatchedUp) {
  Tensor gate = ToDevice(dev(), RandomFloats(2 * 16, 1), {2, 16});
  Tensor up = ToDevice(dev(), RandomFloats(2 * 15, 2), {2, 15});
  Tensor w = ToDevice(dev(), RandomFloats(8 * 16, 3), {8, 16});
  Tensor y = testing_util::Poisoned(dev(), {2, 8});
  const absl::Status s = SwiGluLinear(dev(), gate.view(), up.view(), w.view(), y.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("up"), std::string::npos) << s;
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceLinearTest,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
