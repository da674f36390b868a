// fp8 weights kept as stored (kernels/tensor.h Tensor::Scaled: e4m3 bytes, f32 scales per row and
// block of columns) on every device: Linear and MoeExperts against the CPU twin over the values
// dequantizing on load gives (E4m3ToF32(q) · s in f32). CUDA's fp8 GEMV (1–32 rows, in passes of 8)
// reads those very values and keeps x in f32, so only the summation order differs; its other paths
// (the tensor-core kernel for 33–256 rows, widening to bf16 for cuBLASLt beyond and for shapes the
// others do not take) round the values and x to bf16, as cuBLASLt's bf16 products do, so their
// oracle gets both operands rounded. LINFER_CUDA_FP8=dequantize takes the widening everywhere,
// =mma the tensor cores wherever the shapes allow (tests/gpu/run_on_gpu.sh reruns these tests
// both ways).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/ops.h"
#include "kernels/gemm.h"
#include "kernels/moe.h"
#include "tests/kernels/device_ops_fixture.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::AllNear;
using testing_util::RandomFloats;
using testing_util::RoundToBf16;
using testing_util::ToDevice;
using testing_util::ToHost;

class DeviceFp8Test : public testing_util::DeviceOpsTest {};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// An fp8 weight's parts: bytes (never the NaNs 0x7F / 0xFF), scales of both signs over
// 2⁻¹⁴…2⁻¹⁰ (values up to about ±0.4), and the values they stand for.
struct Fp8Parts {
  Shape shape;
  int64_t block_cols;
  std::vector<uint8_t> q;
  std::vector<float> scales, values;
};

Fp8Parts MakeParts(const Shape& shape, int64_t bc, uint32_t seed) {
  const int64_t k = shape.back(), rows = NumElements(shape) / k, sc = CeilDiv(k, bc);
  Fp8Parts p{shape, bc, std::vector<uint8_t>(rows * k), std::vector<float>(rows * sc),
             std::vector<float>(rows * k)};
  std::mt19937 rng(seed);
  for (uint8_t& b : p.q) {
    do {
      b = static_cast<uint8_t>(rng());
    } while ((b & 0x7F) == 0x7F);
  }
  std::uniform_real_distribution<float> e(-14.0f, -10.0f);
  for (float& s : p.scales) s = std::exp2(e(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      p.values[r * k + c] = E4m3ToF32(p.q[r * k + c]) * p.scales[r * sc + c / bc];
    }
  }
  return p;
}

// The weight on ctx's device, as the loader holds it.
Tensor Kept(const ExecContext& ctx, const Fp8Parts& p) {
  Shape scale_shape = p.shape;
  scale_shape.back() = CeilDiv(p.shape.back(), p.block_cols);
  Tensor values = ToDevice(ctx, p.q, DType::kF8E4M3, p.shape);
  Tensor scales = ToDevice(ctx, p.scales, scale_shape);
  absl::StatusOr<Tensor> kept = Tensor::Scaled(std::move(values), std::move(scales), p.block_cols);
  EXPECT_TRUE(kept.ok()) << kept.status();
  return *std::move(kept);
}

// y = x · wᵀ + bias (+ y0), x [m, k] as columns 4… of a [m, k + 8] matrix; w either the kept
// fp8 weight or f32 values [n, k].
std::vector<float> RunLinear(const ExecContext& ctx, const std::vector<float>& x, const Tensor& w,
                             const std::vector<float>& b, const std::vector<float>& y0, int64_t m,
                             bool accumulate) {
  const int64_t n = w.dim(0), k = w.dim(1);
  Tensor tx = ToDevice(ctx, x, {m, k + 8});
  Tensor tb = ToDevice(ctx, b, {n}), ty = ToDevice(ctx, y0, {m, n});
  const TensorView bias = tb.view();
  const absl::Status s = Linear(ctx, tx.view().Cols(4, k), w.view(), ty.view(), &bias, accumulate);
  EXPECT_TRUE(s.ok()) << s;
  return ToHost(ctx, ty.view());
}

// Block widths of Qwen's checkpoints (128), of the GEMV's smallest piece (16), one block a row,
// and widths the GEMV does not take (13; k not a multiple of 16), at 1–9 rows, 32 (the GEMV's
// last: four passes), 33 and 130 (tensor cores: one and three row tiles) and 300 (widened); k 1040
// and 272 (the tensor cores' last inner tile partial); k 12288
// (x staged in two slabs at 1 row, three at 2; 8 warps a column pair) and 2100 × 4096 (two chunks
// of the bf16 widening: the second's bias, scales and columns of y start at row 2048).
TEST_P(DeviceFp8Test, LinearMatchesTheDequantizedValues) {
  const bool cuda = GetParam().device == Device::kCuda;
  struct Shape3 {
    int64_t k, n, bc;
  };
  uint32_t seed = 10;
  for (const Shape3& s : {Shape3{1024, 1537, 128}, Shape3{256, 300, 16}, Shape3{2048, 257, 2048},
                          Shape3{4096, 130, 128}, Shape3{1000, 300, 128}, Shape3{1024, 77, 13},
                          Shape3{12288, 40, 128}, Shape3{4096, 2100, 128}, Shape3{1040, 300, 16},
                          Shape3{272, 130, 16}}) {
    const Fp8Parts p = MakeParts({s.n, s.k}, s.bc, seed += 10);
    Tensor kept = Kept(dev(), p);
    const Tensor dequantized = ToDevice(cpu(), p.values, {s.n, s.k});
    const Tensor rounded = ToDevice(cpu(), RoundToBf16(p.values), {s.n, s.k});
    const std::vector<float> b = RandomFloats(s.n, seed + 1);
    for (int64_t m : {1, 2, 3, 5, 8, 9, 32, 33, 130, 300}) {
      const bool gemv = !cuda || std::string(cuda::Fp8Path(m, kept.view())) == "gemv";
      const std::vector<float> x = RandomFloats(m * (s.k + 8), seed + 2 + m);
      const std::vector<float> y0 = RandomFloats(m * s.n, seed + 3);
      for (bool acc : {false, true}) {
        SCOPED_TRACE(absl::StrCat("k ", s.k, " n ", s.n, " block ", s.bc, " m ", m, " accumulate ",
                                  acc, " path ", cuda ? cuda::Fp8Path(m, kept.view()) : "cpu"));
        // Without accumulation y's old values must not matter: NaN there.
        const std::vector<float> y_in = acc ? y0 : std::vector<float>(y0.size(), NAN);
        const std::vector<float> got = RunLinear(dev(), x, kept, b, y_in, m, acc);
        const std::vector<float> want =
            gemv ? RunLinear(cpu(), x, dequantized, b, y0, m, acc)
                 : RunLinear(cpu(), RoundToBf16(x), rounded, b, y0, m, acc);
        EXPECT_TRUE(AllNear(got, want, 1e-4, 1e-4));
      }
    }
  }
}

// Row slices of a kept weight (a stacked projection's runs) keep their rows' scales.
TEST_P(DeviceFp8Test, RowSlicesKeepTheirScales) {
  const int64_t k = 512, n = 96;
  const Fp8Parts p = MakeParts({n, k}, 128, 7);
  Tensor kept = Kept(dev(), p);
  for (const auto& [begin, count] : {std::pair<int64_t, int64_t>{0, 32}, {40, 56}}) {
    for (int64_t m : {1, 4, 20}) {
      Tensor tx = ToDevice(dev(), RandomFloats(m * k, 8 + m), {m, k});
      Tensor ty = testing_util::Poisoned(dev(), {m, count});
      ASSERT_TRUE(Linear(dev(), tx.view(), kept.view().Rows(begin, count), ty.view()).ok());
      const std::vector<float> rows(p.values.begin() + begin * k,
                                    p.values.begin() + (begin + count) * k);
      const bool gemv = GetParam().device == Device::kCpu ||
                        std::string(cuda::Fp8Path(m, kept.view().Rows(begin, count))) == "gemv";
      const std::vector<float> x = RandomFloats(m * k, 8 + m);
      Tensor wx = ToDevice(cpu(), gemv ? x : RoundToBf16(x), {m, k});
      Tensor ww = ToDevice(cpu(), gemv ? rows : RoundToBf16(rows), {count, k});
      Tensor wy = ToDevice(cpu(), std::vector<float>(m * count, 0.0f), {m, count});
      ASSERT_TRUE(Linear(cpu(), wx.view(), ww.view(), wy.view()).ok());
      EXPECT_TRUE(AllNear(ToHost(dev(), ty.view()), ToHost(cpu(), wy.view()), 1e-4, 1e-4))
          << "rows " << begin << "+" << count << " m " << m;
    }
  }
}

// MoeExperts over fp8 experts (3-D scaled stacks) against the CPU over the dequantized values:
// the per-pair path (few tokens) and the grouped one (from 8 pairs an expert).
TEST_P(DeviceFp8Test, MoeExpertsMatchTheDequantizedValues) {
  uint32_t seed = 300;
  for (const auto& [t, d, inter, e, k] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{1, 256, 128, 16, 4},
        {3, 200, 72, 8, 2},
        {300, 256, 128, 8, 4}}) {
    SCOPED_TRACE(absl::StrCat("t ", t, " d ", d, " I ", inter, " E ", e, " k ", k));
    const Fp8Parts gu = MakeParts({e, 2 * inter, d}, 128, seed += 10);
    const Fp8Parts dn = MakeParts({e, d, inter}, 128, seed + 1);
    Tensor kgu = Kept(dev(), gu), kdn = Kept(dev(), dn);
    std::vector<int32_t> idx(t * k);
    std::mt19937 rng(seed + 2);
    for (int64_t r = 0; r < t; ++r) {
      std::vector<int32_t> all(e);
      for (int32_t i = 0; i < e; ++i) all[i] = i;
      std::shuffle(all.begin(), all.end(), rng);
      std::copy_n(all.begin(), k, idx.begin() + r * k);
    }
    const std::vector<float> x = RandomFloats(t * d, seed + 3), w = RandomFloats(t * k, seed + 4);
    auto run = [&](const ExecContext& ctx, const Tensor& gate_up, const Tensor& down) {
      Tensor tx = ToDevice(ctx, x, {t, d});
      Tensor ti = ToDevice(ctx, idx, DType::kI32, {t, k});
      Tensor tw = ToDevice(ctx, w, {t, k});
      Tensor ty = testing_util::Poisoned(ctx, {t, d});
      const absl::Status s = MoeExperts(ctx, tx.view(), ti.view(), tw.view(), gate_up.view(),
                                        down.view(), nullptr, ty.view(), false);
      EXPECT_TRUE(s.ok()) << s;
      return ToHost(ctx, ty.view());
    };
    const Tensor fgu = ToDevice(cpu(), gu.values, gu.shape);
    const Tensor fdn = ToDevice(cpu(), dn.values, dn.shape);
    EXPECT_TRUE(AllNear(run(dev(), kgu, kdn), run(cpu(), fgu, fdn), 2e-5, 1e-4));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceFp8Test,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
