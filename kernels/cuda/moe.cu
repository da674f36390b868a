// Mixture-of-experts ops (kernels/moe.h) on the device, a first correct version:
//   RouteKernel   one block per token: k rounds of a block-wide argmax over the logits not yet
//                 chosen (larger logit, or equal and lower index; NaN ranks as −∞), then the
//                 weights w_j = e^{l_j − l_1} / Σ_i e^{l_i − l_1} in the CPU twin's order.
//   UpKernel      H[p, r] = W_gate_up[e_p, r, :] · x[t_p, :] for every (token, choice) pair
//                 p = t·k + j: one warp per output row (8 a block), grid (pairs, 2I / 8).
//   DownKernel    O[p, c] = W_down[e_p, c, :] · (silu(H[p, :I]) ⊙ H[p, I:]), the activation staged
//                 in shared memory once per block: grid (pairs, D / 8).
//   CombineKernel y[t, c] (+)= Σ_j w[t, j] O[t·k + j, c] (+ σ(s_t) · shared[t, c]).
// Each pair reads its expert's 3·I·D weights whole: at decode a batch of B tokens reads
// min(B·k, E) experts' weights about B·k / min(B·k, E) times over. A grouped GEMM over the pairs
// sorted by expert (each expert's weights read once per step) is the next step for prefill and
// large batches; measured only when a GPU run has timed this one.
#include <cuda_bf16.h>

#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

constexpr int kRouteThreads = 128;
constexpr int kWarps = 8;  // output rows per block of UpKernel / DownKernel
constexpr int kCombineThreads = 256;
constexpr int64_t kMaxInter = 12288;  // DownKernel's activation row in 48 KB of shared memory

template <typename W>
__device__ inline float Widen(W w) {
  if constexpr (std::is_same_v<W, __nv_bfloat16>) {
    return __bfloat162float(w);
  } else {
    return w;
  }
}

__device__ inline float RankKey(float v) { return isnan(v) ? -INFINITY : v; }
// (v, e) ranks before (bv, be).
__device__ inline bool Before(float v, int e, float bv, int be) {
  return v > bv || (v == bv && e < be);
}

__global__ void RouteKernel(const float* logits, int64_t ld, int experts, int k, bool normalize,
                            int32_t* idx, float* weights) {
  PdlEnter();
  __shared__ int chosen[kMaxMoeTopK];
  __shared__ float chosen_key[kMaxMoeTopK];
  __shared__ float warp_key[kRouteThreads / 32];
  __shared__ int warp_idx[kRouteThreads / 32];
  const int64_t t = blockIdx.x;
  const float* l = logits + t * ld;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int j = 0; j < k; ++j) {
    float bv = -INFINITY;
    int be = 0x7fffffff;
    for (int e = threadIdx.x; e < experts; e += kRouteThreads) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken |= chosen[i] == e;
      const float v = RankKey(l[e]);
      if (!taken && Before(v, e, bv, be)) bv = v, be = e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oe = __shfl_xor_sync(0xffffffffu, be, o);
      if (Before(ov, oe, bv, be)) bv = ov, be = oe;
    }
    if (lane == 0) warp_key[warp] = bv, warp_idx[warp] = be;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kRouteThreads / 32; ++w) {
        if (Before(warp_key[w], warp_idx[w], bv, be)) bv = warp_key[w], be = warp_idx[w];
      }
      chosen[j] = be;
      chosen_key[j] = bv;
    }
    __syncthreads();
  }
  const float top = chosen_key[0];
  // e^{key − top}, or with ±∞ at the top 1 for the entries equal to it and 0 for the others.
  auto weight = [top](float v) { return isfinite(top) ? expf(v - top) : (v == top ? 1.0f : 0.0f); };
  float sum = 0.0f;
  if (!normalize) {  // the whole row's normaliser: per-thread partial sums, then a fixed tree
    __shared__ float warp_sum[kRouteThreads / 32];
    for (int e = threadIdx.x; e < experts; e += kRouteThreads) sum += weight(RankKey(l[e]));
    sum = WarpSum(sum);
    if (lane == 0) warp_sum[warp] = sum;
    __syncthreads();
    sum = 0.0f;
    for (int w = 0; w < kRouteThreads / 32; ++w) sum += warp_sum[w];
  }
  if (threadIdx.x != 0) return;
  float w[kMaxMoeTopK];
  float top_sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    w[j] = weight(chosen_key[j]);
    top_sum += w[j];
  }
  if (normalize) sum = top_sum;
  for (int j = 0; j < k; ++j) {
    idx[t * k + j] = chosen[j];
    weights[t * k + j] = w[j] / sum;
  }
}

template <typename W>
__global__ void UpKernel(const float* x, int64_t x_ld, const int32_t* idx, int k, int experts,
                         const W* gate_up, int64_t d, int64_t rows, float* h) {
  PdlEnter();
  const int64_t p = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t{blockIdx.y} * kWarps + (threadIdx.x >> 5);
  if (r >= rows) return;
  const int e = idx[p];
  float* out = h + p * rows + r;
  if (e < 0 || e >= experts) {
    if (lane == 0) *out = NAN;
    return;
  }
  const W* wr = gate_up + (int64_t{e} * rows + r) * d;
  const float* xr = x + p / k * x_ld;
  float acc = 0.0f;
  for (int64_t c = lane; c < d; c += 32) acc += Widen(wr[c]) * xr[c];
  acc = WarpSum(acc);
  if (lane == 0) *out = acc;
}

template <typename W>
__global__ void DownKernel(const float* h, const int32_t* idx, int experts, const W* down,
                           int64_t d, int64_t inter, float* o) {
  PdlEnter();
  extern __shared__ float act[];
  const int64_t p = blockIdx.x;
  const float* hp = h + p * 2 * inter;
  for (int64_t i = threadIdx.x; i < inter; i += kWarps * 32) {
    act[i] = DeviceSwiGlu(hp[i], hp[inter + i]);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t{blockIdx.y} * kWarps + (threadIdx.x >> 5);
  if (r >= d) return;
  const int e = idx[p];
  float* out = o + p * d + r;
  if (e < 0 || e >= experts) {
    if (lane == 0) *out = NAN;
    return;
  }
  const W* wr = down + (int64_t{e} * d + r) * inter;
  float acc = 0.0f;
  for (int64_t i = lane; i < inter; i += 32) acc += Widen(wr[i]) * act[i];
  acc = WarpSum(acc);
  if (lane == 0) *out = acc;
}

__global__ void CombineKernel(const float* o, const float* weights, int k, int64_t d,
                              const float* shared, int64_t shared_ld, const float* gate,
                              int64_t gate_ld, Mat y, bool accumulate) {
  PdlEnter();
  const int64_t t = blockIdx.x;
  const int64_t c = int64_t{blockIdx.y} * kCombineThreads + threadIdx.x;
  if (c >= d) return;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) acc += weights[t * k + j] * o[(t * k + j) * d + c];
  if (shared != nullptr) acc += DeviceSigmoid(gate[t * gate_ld]) * shared[t * shared_ld + c];
  y(t, c) = accumulate ? y(t, c) + acc : acc;
}

template <typename W>
absl::Status RunExperts(const ExecContext& ctx, const TensorView& x, const TensorView& idx,
                        const TensorView& weights, const TensorView& gate_up,
                        const TensorView& down, const MoeShared* shared, const TensorView& y,
                        bool accumulate) {
  const int64_t t = x.dim(0), d = x.dim(1), k = idx.dim(1), pairs = t * k;
  const int64_t experts = gate_up.dim(0), inter = down.dim(2);
  if (inter > kMaxInter) {
    return absl::UnimplementedError(absl::StrCat("MoeExperts on CUDA: expert width ", inter, " > ",
                                                 kMaxInter, " is not supported"));
  }
  ScratchScope scope(ctx);
  ASSIGN_OR_RETURN(TensorView h, Scratch(ctx, DType::kF32, {pairs, 2 * inter}));
  ASSIGN_OR_RETURN(TensorView o, Scratch(ctx, DType::kF32, {pairs, d}));
  const cudaStream_t stream = Stream(ctx);
  const int* ids = idx.data<const int32_t>();
  LaunchKernel(
      UpKernel<W>,
      dim3(static_cast<unsigned>(pairs), static_cast<unsigned>(CeilDiv(2 * inter, kWarps))),
      kWarps * 32, 0, stream, x.data<const float>(), x.row_stride(), ids, static_cast<int>(k),
      static_cast<int>(experts), gate_up.data<const W>(), d, 2 * inter, h.data<float>());
  RETURN_IF_ERROR(CheckLaunch("MoeExperts UpKernel"));
  LaunchKernel(DownKernel<W>,
               dim3(static_cast<unsigned>(pairs), static_cast<unsigned>(CeilDiv(d, kWarps))),
               kWarps * 32, sizeof(float) * inter, stream, h.data<const float>(), ids,
               static_cast<int>(experts), down.data<const W>(), d, inter, o.data<float>());
  RETURN_IF_ERROR(CheckLaunch("MoeExperts DownKernel"));
  LaunchKernel(CombineKernel,
               dim3(static_cast<unsigned>(t), static_cast<unsigned>(CeilDiv(d, kCombineThreads))),
               kCombineThreads, 0, stream, o.data<const float>(), weights.data<const float>(),
               static_cast<int>(k), d,
               shared != nullptr ? shared->out.data<const float>() : nullptr,
               shared != nullptr ? shared->out.row_stride() : 0,
               shared != nullptr ? shared->gate.data<const float>() : nullptr,
               shared != nullptr ? shared->gate.row_stride() : 0, AsMat(y), accumulate);
  return CheckLaunch("MoeExperts CombineKernel");
}

}  // namespace

absl::Status MoeRoute(const ExecContext& ctx, const TensorView& logits, const TensorView& idx,
                      const TensorView& weights, bool normalize) {
  LaunchKernel(RouteKernel, dim3(static_cast<unsigned>(logits.dim(0))), kRouteThreads, 0,
               Stream(ctx), logits.data<const float>(), logits.row_stride(),
               static_cast<int>(logits.dim(1)), static_cast<int>(idx.dim(1)), normalize,
               idx.data<int32_t>(), weights.data<float>());
  return CheckLaunch("MoeRoute RouteKernel");
}

absl::Status MoeExperts(const ExecContext& ctx, const TensorView& x, const TensorView& idx,
                        const TensorView& weights, const TensorView& gate_up,
                        const TensorView& down, const MoeShared* shared, const TensorView& y,
                        bool accumulate) {
  if (gate_up.dtype() == DType::kBF16) {
    return RunExperts<__nv_bfloat16>(ctx, x, idx, weights, gate_up, down, shared, y, accumulate);
  }
  return RunExperts<float>(ctx, x, idx, weights, gate_up, down, shared, y, accumulate);
}

}  // namespace linfer::cuda
