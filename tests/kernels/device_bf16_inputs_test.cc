// bf16 matmul inputs (kernels/gemm.h MatmulInputDType, LINFER_CUDA_BF16_INPUTS): RmsNorm,
// AddRmsNorm and GatedRmsNorm writing bf16 give their f32 result rounded to nearest even (the CPU
// exactly; CUDA within one bf16 step, its rsqrtf against the CPU's 1/sqrt), Linear takes a bf16 x
// as it is (the product the f32 x of the same values gives), and the ops that do not take bf16
// refuse it by name. On every device; the CUDA instance skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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
using testing_util::ToHostFloats;

class DeviceBf16InputsTest : public testing_util::DeviceOpsTest {};

enum class Norm { kRms, kAddRms, kGatedRms };

// The norm of `x` (rows × cols, read from a view at column 3 of rows cols + 5 wide: strided)
// into a y of dtype `out` (bf16: NaN-poisoned first); returns y as floats and, for AddRmsNorm,
// the updated h.
struct NormRun {
  std::vector<float> y, h;
};
NormRun RunNorm(const ExecContext& ctx, Norm kind, int64_t rows, int64_t cols, int64_t group,
                DType out) {
  const int64_t ld = cols + 5;
  Tensor x = ToDevice(ctx, RandomFloats(rows * ld, 1, 2.0f), {rows, ld});
  Tensor r = ToDevice(ctx, RandomFloats(rows * cols, 2), {rows, cols});
  Tensor g = ToDevice(ctx, RandomFloats(rows * cols, 3, 3.0f), {rows, cols});
  Tensor w = ToDevice(ctx, RandomFloats(group, 4, 0.5f), {group});
  Tensor y = out == DType::kBF16 ? ToDevice(ctx, std::vector<uint16_t>(rows * cols, 0x7fc0),
                                            DType::kBF16, {rows, cols})
                                 : testing_util::Poisoned(ctx, {rows, cols});
  const TensorView xv = x.view().Cols(3, cols);
  const NormParams p{1e-6f, group, kind == Norm::kAddRms};
  absl::Status s;
  switch (kind) {
    case Norm::kRms:
      s = RmsNorm(ctx, xv, w.view(), p, y.view());
      break;
    case Norm::kAddRms:
      s = AddRmsNorm(ctx, xv, r.view(), w.view(), p, y.view());
      break;
    case Norm::kGatedRms:
      s = GatedRmsNorm(ctx, xv, g.view(), w.view(), p, Activation::kSilu, y.view());
      break;
  }
  EXPECT_TRUE(s.ok()) << s;
  return {ToHostFloats(ctx, y.view()), ToHost(ctx, x.view())};  // h: all of x's rows
}

TEST_P(DeviceBf16InputsTest, NormsWriteTheirF32ResultRoundedToBf16) {
  struct Shape {
    int64_t rows, cols, group;
  };
  // A hidden-size norm (a block per row on CUDA) and per-head norms (a warp per head).
  for (const Shape& sh : {Shape{3, 1024, 1024}, Shape{5, 256, 128}}) {
    for (Norm kind : {Norm::kRms, Norm::kAddRms, Norm::kGatedRms}) {
      const std::string what =
          absl::StrCat("norm ", static_cast<int>(kind), " cols ", sh.cols, " group ", sh.group);
      const NormRun got = RunNorm(dev(), kind, sh.rows, sh.cols, sh.group, DType::kBF16);
      const NormRun want = RunNorm(cpu(), kind, sh.rows, sh.cols, sh.group, DType::kF32);
      if (GetParam().device == Device::kCpu) {
        EXPECT_EQ(got.y, RoundToBf16(want.y)) << what;
        EXPECT_EQ(got.h, want.h) << what;
      } else {  // one bf16 step (2⁻⁸ relative) where the f32 results straddle a rounding point
        EXPECT_TRUE(AllNear(got.y, RoundToBf16(want.y), 1e-6, 1.0 / 128)) << what;
        EXPECT_TRUE(AllNear(got.h, want.h, 1e-6, 1e-6)) << what;
      }
    }
  }
}

// y = x · wᵀ with bf16 w, x given as f32 or as bf16 (the same values), read from a view at
// column `off` of rows k + 8 wide (off 8: 16-byte aligned bf16 rows; 5: not).
std::vector<float> RunLinear(const ExecContext& ctx, const std::vector<float>& x,
                             const std::vector<float>& w, DType xtype, int64_t m, int64_t k,
                             int64_t n, int64_t off) {
  const int64_t ld = k + 8;
  Tensor tx = xtype == DType::kBF16 ? ToDevice(ctx, Bf16Bits(x), DType::kBF16, {m, ld})
                                    : ToDevice(ctx, x, {m, ld});
  Tensor tw = ToDevice(ctx, Bf16Bits(w), DType::kBF16, {n, k});
  Tensor ty = testing_util::Poisoned(ctx, {m, n});
  const absl::Status s = Linear(ctx, tx.view().Cols(off, k), tw.view(), ty.view());
  EXPECT_TRUE(s.ok()) << s;
  return ToHost(ctx, ty.view());
}

TEST_P(DeviceBf16InputsTest, LinearTakesABf16InputAsItIs) {
  const int64_t k = 1024, n = 1537;
  const std::vector<float> w = RandomFloats(n * k, 5, 0.03f);
  // 1–8 rows: also the GEMV kernel's (LINFER_CUDA_GEMV=1), which loads bf16 rows 16 bytes at once
  // when aligned.
  for (int64_t m : {1, 2, 8, 64, 300}) {
    const std::vector<float> x = RoundToBf16(RandomFloats(m * (k + 8), 7 + m));
    for (int64_t off : {8, 5}) {
      const std::vector<float> from_bf16 = RunLinear(dev(), x, w, DType::kBF16, m, k, n, off);
      const std::vector<float> from_f32 = RunLinear(dev(), x, w, DType::kF32, m, k, n, off);
      EXPECT_TRUE(AllNear(from_bf16, from_f32, 1e-5, 1e-5)) << "m " << m << " offset " << off;
    }
  }
}

TEST_P(DeviceBf16InputsTest, OpsThatTakeNoBf16RefuseItByName) {
  Tensor xb = ToDevice(dev(), Bf16Bits(RandomFloats(2 * 16, 1)), DType::kBF16, {2, 16});
  Tensor xf = ToDevice(dev(), RandomFloats(2 * 16, 2), {2, 16});
  Tensor wf = ToDevice(dev(), RandomFloats(8 * 16, 3), {8, 16});
  Tensor wb = ToDevice(dev(), Bf16Bits(RandomFloats(8 * 16, 4)), DType::kBF16, {8, 16});
  Tensor y = testing_util::Poisoned(dev(), {2, 8});
  auto expect_refused = [](const absl::Status& s, absl::string_view name, const char* what) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
    EXPECT_NE(s.message().find(name), std::string::npos) << what << ": " << s;
  };
  // A bf16 x needs bf16 weights; SwiGluLinear's gate stays f32.
  expect_refused(Linear(dev(), xb.view(), wf.view(), y.view()), "x", "Linear, f32 weights");
  expect_refused(SwiGluLinear(dev(), xb.view(), xb.view(), wb.view(), y.view()), "x",
                 "SwiGluLinear");
  // Only the RMS norms write bf16; no norm reads it.
  expect_refused(L2Normalize(dev(), xf.view(), 16, 1e-6f, xb.view()), "y", "L2Normalize");
  expect_refused(LayerNorm(dev(), xf.view(), {}, {}, {1e-6f, 16}, xb.view()), "y", "LayerNorm");
  expect_refused(RmsNorm(dev(), xb.view(), {}, {1e-6f, 16}, xf.view()), "x", "RmsNorm, bf16 x");
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceBf16InputsTest,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

TEST(MatmulInputDTypeTest, TheCpuKeepsF32Inputs) {
  testing_util::TestContext t(Device::kCpu);
  Tensor wb = ToDevice(t.ctx, Bf16Bits(RandomFloats(4, 1)), DType::kBF16, {2, 2});
  Tensor wf = ToDevice(t.ctx, RandomFloats(4, 2), {2, 2});
  EXPECT_EQ(MatmulInputDType(t.ctx, wb.view()), DType::kF32);
  EXPECT_EQ(MatmulInputDType(t.ctx, wf.view()), DType::kF32);
}

}  // namespace
}  // namespace linfer
