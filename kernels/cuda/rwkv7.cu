// RWKV-7 ops (kernels/rwkv7.h), f32:
//   TokenShift δ_t = x_{t−1} − x_t (x_{−1} from the slot);  MixRows y = x + d·m;
//   Rwkv7Keys kk = l2norm_head(k·k_k), k' = k·(1 + (a−1)·k_a);  ValueResidual y = v + (f−v)·σ(z);
//   Rwkv7Bonus y_h = (o_h + Σ(r·k·r_k)_h · v_h)·g_h;
//   Rwkv7Recurrence S ← diag(e^w)S − (kk·a)(kkᵀS) + k vᵀ, o = Sᵀr.
// Mapping: TokenShift one block per segment, threads over columns, walking its tokens in order;
// pointwise ops a grid-stride loop; Keys/Bonus one warp per (row, head); the recurrence one block
// per (segment, head, tile of up to 128 state columns) with one thread per state column j
// (S[:, j] in registers, kDk values): the per-token vectors r, e^w, k, kk·a, kk go through shared
// memory (each column tile loads them), everything else is thread-local.
#include <algorithm>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = 8;

__global__ void TokenShiftKernel(Mat x, const int64_t* table, float* state, Mat delta, int64_t n) {
  PdlEnter();
  const Row4 s = LoadSegment(table, blockIdx.x);
  float* prev = state + s.slot * n;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    float p = prev[c];
    for (int64_t r = s.row_begin; r < s.row_begin + s.num_tokens; ++r) {
      const float v = x(r, c);
      delta(r, c) = p - v;
      p = v;
    }
    prev[c] = p;
  }
}

enum class Op { kMix, kValueResidual };

template <Op kOp>
__global__ void PointwiseKernel(Mat a, Mat b, Mat z, const float* m, Mat y, int64_t rows,
                                int64_t cols) {
  PdlEnter();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * cols;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    if constexpr (kOp == Op::kMix) {
      y(r, c) = a(r, c) + b(r, c) * m[c];
    } else {
      const float v = a(r, c);
      y(r, c) = v + (b(r, c) - v) * DeviceSigmoid(z(r, c));
    }
  }
}

template <Op kOp>
absl::Status LaunchPointwise(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                             const TensorView& z, const float* m, const TensorView& y) {
  const int64_t rows = y.dim(0), cols = y.dim(1);
  if (rows * cols == 0) return absl::OkStatus();
  LaunchKernel(PointwiseKernel<kOp>, GridFor(rows * cols, kThreads), kThreads, 0, Stream(ctx),
               AsMat(a), AsMat(b), z.empty() ? Mat{nullptr, 0} : AsMat(z), m, AsMat(y), rows, cols);
  return CheckLaunch("Rwkv7PointwiseKernel");
}

__global__ void KeysKernel(Mat k, Mat a, const float* k_k, const float* k_a, Mat kk, Mat k_out,
                           int64_t rows, int64_t head_dim, int64_t heads, bool fused) {
  PdlEnter();
  const int64_t item = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (item >= rows * heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t r = item / heads, c0 = (item % heads) * head_dim;
  float ss = 0.0f;
  for (int64_t c = c0 + lane; c < c0 + head_dim; c += 32) {
    const float v = k(r, c) * k_k[c];
    ss += v * v;
  }
  ss = WarpSum(ss);
  const float inv = fused ? rsqrtf(ss + 1e-6f) : 1.0f / fmaxf(sqrtf(ss), 1e-12f);
  for (int64_t c = c0 + lane; c < c0 + head_dim; c += 32) {
    const float kv = k(r, c);
    kk(r, c) = kv * k_k[c] * inv;
    k_out(r, c) = kv * (1.0f + (a(r, c) - 1.0f) * k_a[c]);
  }
}

__global__ void BonusKernel(Mat o, Mat r, Mat k, const float* r_k, Mat v, Mat g, Mat y,
                            int64_t rows, int64_t heads, int64_t dk, int64_t dv) {
  PdlEnter();
  const int64_t item = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (item >= rows * heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t t = item / heads, h = item % heads;
  float s = 0.0f;
  for (int64_t i = h * dk + lane; i < (h + 1) * dk; i += 32) s += r(t, i) * k(t, i) * r_k[i];
  s = WarpSum(s);
  for (int64_t j = h * dv + lane; j < (h + 1) * dv; j += 32) {
    y(t, j) = (o(t, j) + s * v(t, j)) * g(t, j);
  }
}

struct RecurrenceArgs {
  Mat r, w, k, v, kk, a, o;
  const int64_t* table;
  float* state;  // [slots, H, kDk, dv]
  int64_t heads, dv;
};

// State columns per block: a thread keeps kDk floats of its column in registers (199 registers at
// kDk = 128), so wider value heads are tiled over blockIdx.z rather than given more threads.
constexpr int kRecurrenceThreads = 128;

template <int kDk>
__global__ void __launch_bounds__(kRecurrenceThreads) RecurrenceKernel(RecurrenceArgs p) {
  PdlEnter();
  __shared__ float sr[kDk], sdecay[kDk], sk[kDk], sb[kDk], skk[kDk];
  const Row4 seg = LoadSegment(p.table, blockIdx.x);
  const int64_t h = blockIdx.y, j = int64_t{blockIdx.z} * blockDim.x + threadIdx.x;
  const bool active = j < p.dv;
  float* st = p.state + (seg.slot * p.heads + h) * kDk * p.dv;
  float s[kDk];
#pragma unroll
  for (int i = 0; i < kDk; ++i) s[i] = active ? st[i * p.dv + j] : 0.0f;
  for (int64_t t = seg.row_begin; t < seg.row_begin + seg.num_tokens; ++t) {
    __syncthreads();
    for (int i = threadIdx.x; i < kDk; i += blockDim.x) {
      const int64_t c = h * kDk + i;
      sr[i] = p.r(t, c);
      sdecay[i] = expf(p.w(t, c));
      sk[i] = p.k(t, c);
      skk[i] = p.kk(t, c);
      sb[i] = skk[i] * p.a(t, c);
    }
    __syncthreads();
    if (!active) continue;
    const float vj = p.v(t, h * p.dv + j);
    float sa = 0.0f;
#pragma unroll
    for (int i = 0; i < kDk; ++i) sa -= skk[i] * s[i];
    float out = 0.0f;
#pragma unroll
    for (int i = 0; i < kDk; ++i) {
      s[i] = sdecay[i] * s[i] + sb[i] * sa + sk[i] * vj;
      out += s[i] * sr[i];
    }
    p.o(t, h * p.dv + j) = out;
  }
  if (!active) return;
#pragma unroll
  for (int i = 0; i < kDk; ++i) st[i * p.dv + j] = s[i];
}

template <int kDk>
absl::Status LaunchRecurrence(const ExecContext& ctx, const RecurrenceArgs& p, int64_t segments) {
  const int threads =
      static_cast<int>(std::min<int64_t>(CeilDiv(p.dv, 32) * 32, kRecurrenceThreads));
  LaunchKernel(RecurrenceKernel<kDk>,
               dim3(static_cast<unsigned>(segments), static_cast<unsigned>(p.heads),
                    static_cast<unsigned>(CeilDiv(p.dv, threads))),
               threads, 0, Stream(ctx), p);
  return CheckLaunch("Rwkv7RecurrenceKernel");
}

}  // namespace

absl::Status TokenShift(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                        const TensorView& state, const TensorView& delta) {
  if (segs.host.empty()) return absl::OkStatus();
  LaunchKernel(TokenShiftKernel, static_cast<unsigned>(segs.host.size()), kThreads, 0, Stream(ctx),
               AsMat(x), segs.device.data<const int64_t>(), state.data<float>(), AsMat(delta),
               x.dim(1));
  return CheckLaunch("TokenShiftKernel");
}

absl::Status MixRows(const ExecContext& ctx, const TensorView& x, const TensorView& d,
                     const TensorView& m, const TensorView& y) {
  return LaunchPointwise<Op::kMix>(ctx, x, d, TensorView(), m.data<const float>(), y);
}

absl::Status Rwkv7ValueResidual(const ExecContext& ctx, const TensorView& v,
                                const TensorView& v_first, const TensorView& z,
                                const TensorView& y) {
  return LaunchPointwise<Op::kValueResidual>(ctx, v, v_first, z, nullptr, y);
}

absl::Status Rwkv7Keys(const ExecContext& ctx, const TensorView& k, const TensorView& a,
                       const TensorView& k_k, const TensorView& k_a, int64_t head_dim,
                       bool fused_norm, const TensorView& kk, const TensorView& k_out) {
  const int64_t rows = k.dim(0), heads = k.dim(1) / head_dim;
  if (rows * heads == 0) return absl::OkStatus();
  LaunchKernel(KeysKernel, static_cast<unsigned>(CeilDiv(rows * heads, kWarpsPerBlock)),
               32 * kWarpsPerBlock, 0, Stream(ctx), AsMat(k), AsMat(a), k_k.data<const float>(),
               k_a.data<const float>(), AsMat(kk), AsMat(k_out), rows, head_dim, heads, fused_norm);
  return CheckLaunch("Rwkv7KeysKernel");
}

absl::Status Rwkv7Bonus(const ExecContext& ctx, const TensorView& o, const TensorView& r,
                        const TensorView& k, const TensorView& r_k, const TensorView& v,
                        const TensorView& g, int64_t heads, const TensorView& y) {
  const int64_t rows = o.dim(0);
  if (rows * heads == 0) return absl::OkStatus();
  LaunchKernel(BonusKernel, static_cast<unsigned>(CeilDiv(rows * heads, kWarpsPerBlock)),
               32 * kWarpsPerBlock, 0, Stream(ctx), AsMat(o), AsMat(r), AsMat(k),
               r_k.data<const float>(), AsMat(v), AsMat(g), AsMat(y), rows, heads, r.dim(1) / heads,
               o.dim(1) / heads);
  return CheckLaunch("Rwkv7BonusKernel");
}

absl::Status Rwkv7Recurrence(const ExecContext& ctx, const Rwkv7Inputs& in, const Segments& segs,
                             const TensorView& state, const RecurrenceOptions&,
                             const TensorView& o) {
  RecurrenceArgs p{
      AsMat(in.r),         AsMat(in.w),  AsMat(in.k), AsMat(in.v),
      AsMat(in.kk),        AsMat(in.a),  AsMat(o),    segs.device.data<const int64_t>(),
      state.data<float>(), state.dim(1), state.dim(3)};
  const int64_t segments = static_cast<int64_t>(segs.host.size()), dk = state.dim(2);
  if (segments == 0) return absl::OkStatus();
  switch (dk) {
    case 8:
      return LaunchRecurrence<8>(ctx, p, segments);
    case 16:
      return LaunchRecurrence<16>(ctx, p, segments);
    case 32:
      return LaunchRecurrence<32>(ctx, p, segments);
    case 64:
      return LaunchRecurrence<64>(ctx, p, segments);
    case 128:
      return LaunchRecurrence<128>(ctx, p, segments);
    default:
      return absl::UnimplementedError(
          absl::StrCat("Rwkv7Recurrence (CUDA): head_dim ", dk, " (built for 8, 16, 32, 64, 128)"));
  }
}

}  // namespace linfer::cuda
