// Mixture-of-experts ops (CPU; kernels/moe.h). MoeExperts (one pass of at most kMoePassTokens
// tokens, ids in range: kernels/moe.cc) groups the (token, choice) pairs by expert and runs each
// expert's SwiGLU MLP over its rows with the CPU's Linear (so the batch-invariant GEMM applies
// under ctx.batch_invariant), then sums each token's k outputs in choice order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/activation.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/parallel.h"

namespace linfer::cpu {
namespace {

float RankKey(float v) { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; }

}  // namespace

absl::Status MoeRoute(const ExecContext&, const TensorView& logits, const TensorView& idx,
                      const TensorView& weights, bool normalize) {
  const int64_t rows = logits.dim(0), experts = logits.dim(1), k = idx.dim(1);
  std::vector<int32_t> order(static_cast<size_t>(experts));
  std::vector<float> key(static_cast<size_t>(experts));
  for (int64_t t = 0; t < rows; ++t) {
    const float* l = logits.data<const float>() + t * logits.row_stride();
    for (int64_t e = 0; e < experts; ++e) key[e] = RankKey(l[e]);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return key[a] > key[b] || (key[a] == key[b] && a < b);
    });
    int32_t* out_idx = idx.data<int32_t>() + t * k;
    float* out_w = weights.data<float>() + t * k;
    const float top = key[order[0]];
    // e^{key − top}, or with ±∞ at the top 1 for the entries equal to it and 0 for the others.
    auto weight = [&](float v) -> float {
      return std::isfinite(top) ? std::exp(v - top) : v == top;
    };
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      out_idx[j] = order[j];
      out_w[j] = weight(key[order[j]]);
      sum += out_w[j];
    }
    if (!normalize) {  // the whole row's normaliser, summed in expert order
      sum = 0.0f;
      for (int64_t e = 0; e < experts; ++e) sum += weight(key[e]);
    }
    for (int64_t j = 0; j < k; ++j) out_w[j] /= sum;
  }
  return absl::OkStatus();
}

absl::Status MoeExperts(const ExecContext& ctx, const TensorView& x, const TensorView& idx,
                        const TensorView& weights, const TensorView& gate_up,
                        const TensorView& down, const MoeShared* shared, const TensorView& y,
                        bool accumulate) {
  const int64_t t = x.dim(0), d = x.dim(1), k = idx.dim(1);
  const int64_t experts = gate_up.dim(0), inter = down.dim(2);
  const int32_t* ids = idx.data<const int32_t>();  // checked by the dispatcher
  // The pairs p = t·k + j of each expert, in increasing p.
  std::vector<int64_t> count(static_cast<size_t>(experts) + 1, 0);
  for (int64_t p = 0; p < t * k; ++p) ++count[ids[p] + 1];
  std::partial_sum(count.begin(), count.end(), count.begin());
  std::vector<int64_t> pairs(static_cast<size_t>(t * k));
  {
    std::vector<int64_t> at(count.begin(), count.end() - 1);
    for (int64_t p = 0; p < t * k; ++p) pairs[at[ids[p]]++] = p;
  }
  ScratchScope scope(ctx);
  ASSIGN_OR_RETURN(TensorView out, Scratch(ctx, DType::kF32, {t * k, d}));  // each pair's output
  const TensorView gu = gate_up.Reshaped({experts * 2 * inter, d});
  const TensorView dn = down.Reshaped({experts * d, inter});
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t n = count[e + 1] - count[e];
    if (n == 0) continue;
    const int64_t* mine = pairs.data() + count[e];
    ScratchScope expert_scope(ctx);
    ASSIGN_OR_RETURN(TensorView xe, Scratch(ctx, DType::kF32, {n, d}));
    ASSIGN_OR_RETURN(TensorView he, Scratch(ctx, DType::kF32, {n, 2 * inter}));
    ASSIGN_OR_RETURN(TensorView ye, Scratch(ctx, DType::kF32, {n, d}));
    for (int64_t r = 0; r < n; ++r) {
      std::copy_n(x.data<const float>() + mine[r] / k * x.row_stride(), d,
                  xe.data<float>() + r * d);
    }
    RETURN_IF_ERROR(cpu::Linear(ctx, xe, gu.Rows(e * 2 * inter, 2 * inter), he, nullptr, false));
    const TensorView act = he.Cols(0, inter);
    RETURN_IF_ERROR(cpu::SwiGlu(ctx, act, he.Cols(inter, inter), act));
    RETURN_IF_ERROR(cpu::Linear(ctx, act, dn.Rows(e * d, d), ye, nullptr, false));
    for (int64_t r = 0; r < n; ++r) {
      std::copy_n(ye.data<const float>() + r * d, d, out.data<float>() + mine[r] * d);
    }
  }
  const float* w = weights.data<const float>();
  ParallelFor(t, t * k * d >= (int64_t{1} << 16), [&](int64_t row) {
    float* dst = y.data<float>() + row * y.row_stride();
    const float s = shared != nullptr
                        ? Sigmoid(shared->gate.data<const float>()[row * shared->gate.row_stride()])
                        : 0.0f;
    const float* so = shared != nullptr
                          ? shared->out.data<const float>() + row * shared->out.row_stride()
                          : nullptr;
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j)
        acc += w[row * k + j] * out.data<const float>()[(row * k + j) * d + c];
      if (so != nullptr) acc += s * so[c];
      dst[c] = accumulate ? dst[c] + acc : acc;
    }
  });
  return absl::OkStatus();
}

}  // namespace linfer::cpu
