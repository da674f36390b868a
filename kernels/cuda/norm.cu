// Normalisations over groups of contiguous columns (kernels/norm.h), f32:
//   RmsNorm      y = x · rsqrt(mean(x²) + eps) · (w (+1 when zero-centred))
//   AddRmsNorm   x ← x + r, then RmsNorm (each thread adds, stores and later rereads its columns)
//   GatedRmsNorm y = RmsNorm(x; w) · act(gate)
//   L2Normalize  y = x · rsqrt(Σx² + eps);   SumNormalize y = x / (Σx + eps)
// Mapping: groups narrower than kBlockGroup (heads) take one warp per (row, group), 8 warps per
// block; lanes stride over the group's columns (coalesced), a warp shuffle reduces the sum, then
// the same lanes write y. Wider groups (a model's hidden size) take a block of 256 threads each,
// reduced through shared memory: a warp alone walks 2048 columns in 64 dependent loads, 29 µs per
// RMSNorm of one row on an H200 (a third of the 1.3B GDN's batch-1 decode step), where a block
// issues each thread's 8 loads at once. y may alias x: each element is read before the
// reduction and written after it, by the same thread. The RMS norms may write y as bf16 (the
// input of a bf16 matmul: its conversion pass saved).
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

enum class Kind { kRms, kGatedRms, kL2, kSum, kAddRms };

struct NormArgs {
  Mat x, gate, y;
  __nv_bfloat16* yb;  // non-null: y is written here as bf16 instead (row stride ldyb)
  int64_t ldyb;
  Mat res;         // kAddRms: x ← x + res before the norm
  const float* w;  // [group] or null
  int64_t rows, group, groups_per_row;
  float eps, shift;  // shift: 1 for a zero-centred weight
  int act;
};

constexpr int kWarpsPerBlock = 8;
constexpr int64_t kBlockGroup = 512;  // groups at least this wide: a block each

// kThreads lanes (a warp, or a block of kWarpsPerBlock warps) normalise item `item`.
template <Kind kKind, int kThreads>
__device__ void NormItem(const NormArgs& p, int64_t item, int lane) {
  const int64_t r = item / p.groups_per_row, c0 = (item % p.groups_per_row) * p.group;
  float* xr = &p.x(r, c0);
  float acc = 0.0f;
#pragma unroll 4
  for (int64_t j = lane; j < p.group; j += kThreads) {
    float v = xr[j];
    if constexpr (kKind == Kind::kAddRms) {  // the sum, written back, is reread by this thread
      v += p.res(r, c0 + j);
      xr[j] = v;
    }
    acc += kKind == Kind::kSum ? v : v * v;
  }
  acc = WarpSum(acc);
  if constexpr (kThreads > 32) {
    __shared__ float part[kThreads / 32];
    if (lane % 32 == 0) part[lane / 32] = acc;
    __syncthreads();
    acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kThreads / 32; ++i) acc += part[i];
  }
  float inv;
  if constexpr (kKind == Kind::kRms || kKind == Kind::kGatedRms || kKind == Kind::kAddRms) {
    inv = rsqrtf(acc / static_cast<float>(p.group) + p.eps);
  } else if constexpr (kKind == Kind::kL2) {
    inv = rsqrtf(acc + p.eps);
  } else {
    inv = 1.0f / (acc + p.eps);
  }
#pragma unroll 4
  for (int64_t j = lane; j < p.group; j += kThreads) {
    float v = xr[j] * inv;
    if constexpr (kKind == Kind::kRms || kKind == Kind::kGatedRms || kKind == Kind::kAddRms) {
      if (p.w != nullptr) v *= p.w[j] + p.shift;
    }
    if constexpr (kKind == Kind::kGatedRms) v *= DeviceActivate(p.act, p.gate(r, c0 + j));
    if (p.yb != nullptr) {
      p.yb[r * p.ldyb + c0 + j] = FloatToBf16(v);
    } else {
      p.y(r, c0 + j) = v;
    }
  }
}

// One warp per item.
template <Kind kKind>
__global__ void NormKernel(NormArgs p) {
  PdlEnter();
  const int64_t item = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (item >= p.rows * p.groups_per_row) return;
  NormItem<kKind, 32>(p, item, static_cast<int>(threadIdx.x % 32));
}

// One block per item (kBlockGroup and wider).
template <Kind kKind>
__global__ void NormBlockKernel(NormArgs p) {
  PdlEnter();
  NormItem<kKind, 32 * kWarpsPerBlock>(p, blockIdx.x, static_cast<int>(threadIdx.x));
}

template <Kind kKind>
absl::Status Launch(const ExecContext& ctx, const NormArgs& p) {
  const int64_t items = p.rows * p.groups_per_row;
  if (items == 0) return absl::OkStatus();
  if (p.group >= kBlockGroup) {
    if (items > (int64_t{1} << 31) - 1) {
      return absl::InvalidArgumentError(absl::StrCat("norm: ", items, " groups exceed a grid"));
    }
    LaunchKernel(NormBlockKernel<kKind>, static_cast<unsigned>(items), 32 * kWarpsPerBlock, 0,
                 Stream(ctx), p);
    return CheckLaunch("NormBlockKernel");
  }
  LaunchKernel(NormKernel<kKind>, static_cast<unsigned>(CeilDiv(items, kWarpsPerBlock)),
               32 * kWarpsPerBlock, 0, Stream(ctx), p);
  return CheckLaunch("NormKernel");
}

NormArgs Args(const TensorView& x, const TensorView& y, int64_t group, float eps) {
  NormArgs p{};
  p.x = AsMat(x);
  if (y.dtype() == DType::kBF16) {  // kernels/norm.cc allows it for the RMS norms only
    p.y = {nullptr, 0};
    p.yb = y.data<__nv_bfloat16>();
    p.ldyb = y.row_stride();
  } else {
    p.y = AsMat(y);
  }
  p.gate = {nullptr, 0};
  p.res = {nullptr, 0};
  p.rows = x.dim(0);
  p.group = group;
  p.groups_per_row = x.dim(1) / group;
  p.eps = eps;
  return p;
}

}  // namespace

absl::Status RmsNorm(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                     const NormParams& np, const TensorView& y) {
  NormArgs p = Args(x, y, np.group, np.eps);
  p.w = w.empty() ? nullptr : w.data<const float>();
  p.shift = np.zero_centered ? 1.0f : 0.0f;
  return Launch<Kind::kRms>(ctx, p);
}

absl::Status AddRmsNorm(const ExecContext& ctx, const TensorView& h, const TensorView& r,
                        const TensorView& w, const NormParams& np, const TensorView& y) {
  NormArgs p = Args(h, y, np.group, np.eps);
  p.w = w.empty() ? nullptr : w.data<const float>();
  p.shift = np.zero_centered ? 1.0f : 0.0f;
  p.res = AsMat(r);
  return Launch<Kind::kAddRms>(ctx, p);
}

absl::Status GatedRmsNorm(const ExecContext& ctx, const TensorView& x, const TensorView& gate,
                          const TensorView& w, const NormParams& np, Activation act,
                          const TensorView& y) {
  NormArgs p = Args(x, y, np.group, np.eps);
  p.w = w.empty() ? nullptr : w.data<const float>();
  p.shift = np.zero_centered ? 1.0f : 0.0f;
  p.gate = AsMat(gate);
  p.act = static_cast<int>(act);
  return Launch<Kind::kGatedRms>(ctx, p);
}

absl::Status L2Normalize(const ExecContext& ctx, const TensorView& x, int64_t group, float eps,
                         const TensorView& y) {
  return Launch<Kind::kL2>(ctx, Args(x, y, group, eps));
}

absl::Status SumNormalize(const ExecContext& ctx, const TensorView& x, int64_t group, float eps,
                          const TensorView& y) {
  return Launch<Kind::kSum>(ctx, Args(x, y, group, eps));
}

}  // namespace linfer::cuda
