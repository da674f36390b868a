// Pointwise ops on [M, N] f32 views with row strides (kernels/activation.h, kernels/gates.h):
//   Activate y = act(x); SwiGlu out = silu(gate)·up; Add / Mul (out = a·act(b));
//   SigmoidScale y = σ(x)·s;
//   GlaDecay y = max(logsigmoid(x)/n, clamp); Fill y = c;
//   GdnGates g = −exp(A_log[h])·softplus(a + dt_bias[h]), β = σ(b)·s.
// Mapping: one thread per element over a grid-stride loop on the flattened [M, N] index (column
// fastest, so a warp reads consecutive columns of a row: coalesced for any row stride). These
// are memory-bound: one read per input, one write per output.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace linfer::cuda {
namespace {

static_assert(static_cast<int>(Activation::kIdentity) == 0 &&
                  static_cast<int>(Activation::kSilu) == 1 &&
                  static_cast<int>(Activation::kGelu) == 7,
              "DeviceActivate (cuda_check.cuh) numbers the activations as kernels/activation.h");

enum class Op { kActivate, kSwiGlu, kAdd, kMul, kSigmoidScale, kGlaDecay, kFill };

struct PointwiseArgs {
  Mat a, b, out;
  int64_t rows, cols;
  int act;
  float p0, p1;  // scale / normalizer, clamp / fill value
};

__device__ inline float DeviceLogSigmoid(float x) {
  return x < 0.0f ? x - log1pf(expf(x)) : -log1pf(expf(-x));
}

template <Op kOp>
__global__ void PointwiseKernel(PointwiseArgs p) {
  PdlEnter();
  const int64_t n = p.rows * p.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / p.cols, c = i % p.cols;
    float y = 0.0f;
    if constexpr (kOp == Op::kActivate) {
      y = DeviceActivate(p.act, p.a(r, c));
    } else if constexpr (kOp == Op::kSwiGlu) {
      y = DeviceSwiGlu(p.a(r, c), p.b(r, c));
    } else if constexpr (kOp == Op::kAdd) {
      y = p.a(r, c) + p.b(r, c);
    } else if constexpr (kOp == Op::kMul) {  // p.act 0 (identity): b itself
      y = p.a(r, c) * (p.act == 0 ? p.b(r, c) : DeviceActivate(p.act, p.b(r, c)));
    } else if constexpr (kOp == Op::kSigmoidScale) {
      y = DeviceSigmoid(p.a(r, c)) * p.p0;
    } else if constexpr (kOp == Op::kGlaDecay) {
      const float d = DeviceLogSigmoid(p.a(r, c)) / p.p0;
      y = d < p.p1 ? p.p1 : d;  // keeps NaN, as the CPU twin's std::max(d, clamp)
    } else {
      y = p.p1;
    }
    p.out(r, c) = y;
  }
}

template <Op kOp>
absl::Status Launch(const ExecContext& ctx, const PointwiseArgs& p) {
  if (p.rows * p.cols == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  LaunchKernel(PointwiseKernel<kOp>, GridFor(p.rows * p.cols, kThreads), kThreads, 0, Stream(ctx),
               p);
  return CheckLaunch("PointwiseKernel");
}

PointwiseArgs Args(const TensorView& a, const TensorView& b, const TensorView& out) {
  PointwiseArgs p{};
  p.a = AsMat(a);
  p.b = b.empty() ? Mat{nullptr, 0} : AsMat(b);
  p.out = AsMat(out);
  p.rows = out.dim(0);
  p.cols = out.dim(1);
  return p;
}

struct GateArgs {
  Mat a, b, g, beta;
  const float* a_log;
  const float* dt_bias;
  int64_t rows, heads;
  float beta_scale;
};

__global__ void GdnGatesKernel(GateArgs p) {
  PdlEnter();
  const int64_t n = p.rows * p.heads;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / p.heads, h = i % p.heads;
    p.g(r, h) = -expf(p.a_log[h]) * DeviceSoftplus(p.a(r, h) + p.dt_bias[h]);
    p.beta(r, h) = DeviceSigmoid(p.b(r, h)) * p.beta_scale;
  }
}

}  // namespace

absl::Status Activate(const ExecContext& ctx, Activation act, const TensorView& x,
                      const TensorView& y) {
  PointwiseArgs p = Args(x, {}, y);
  p.act = static_cast<int>(act);
  return Launch<Op::kActivate>(ctx, p);
}

absl::Status SwiGlu(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                    const TensorView& out) {
  return Launch<Op::kSwiGlu>(ctx, Args(gate, up, out));
}

absl::Status Add(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                 const TensorView& out) {
  return Launch<Op::kAdd>(ctx, Args(a, b, out));
}

absl::Status Mul(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                 const TensorView& out, Activation act_b) {
  PointwiseArgs p = Args(a, b, out);
  p.act = static_cast<int>(act_b);
  return Launch<Op::kMul>(ctx, p);
}

absl::Status SigmoidScale(const ExecContext& ctx, const TensorView& x, float scale,
                          const TensorView& y) {
  PointwiseArgs p = Args(x, {}, y);
  p.p0 = scale;
  return Launch<Op::kSigmoidScale>(ctx, p);
}

absl::Status GlaDecay(const ExecContext& ctx, const TensorView& x, float normalizer,
                      float clamp_min, const TensorView& y) {
  PointwiseArgs p = Args(x, {}, y);
  p.p0 = normalizer;
  p.p1 = clamp_min;
  return Launch<Op::kGlaDecay>(ctx, p);
}

absl::Status Fill(const ExecContext& ctx, float value, const TensorView& y) {
  PointwiseArgs p = Args(y, {}, y);
  p.p1 = value;
  return Launch<Op::kFill>(ctx, p);
}

absl::Status GdnGates(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                      const TensorView& a_log, const TensorView& dt_bias, float beta_scale,
                      const TensorView& g, const TensorView& beta) {
  const GateArgs p{AsMat(a),
                   AsMat(b),
                   AsMat(g),
                   AsMat(beta),
                   a_log.data<const float>(),
                   dt_bias.data<const float>(),
                   g.dim(0),
                   g.dim(1),
                   beta_scale};
  if (p.rows * p.heads == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  LaunchKernel(GdnGatesKernel, GridFor(p.rows * p.heads, kThreads), kThreads, 0, Stream(ctx), p);
  return CheckLaunch("GdnGatesKernel");
}

}  // namespace linfer::cuda
