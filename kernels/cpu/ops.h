// The CPU twins of every op (kernels/cpu/*.cc), called by the dispatchers in kernels/*.cc after
// they validated shapes and dtypes. Same signatures and contracts as the public ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/context.h"
#include "kernels/embedding.h"
#include "kernels/feature_map.h"
#include "kernels/gates.h"
#include "kernels/gemm.h"
#include "kernels/mamba2.h"
#include "kernels/moe.h"
#include "kernels/norm.h"
#include "kernels/presample.h"
#include "kernels/recurrence.h"
#include "kernels/rope.h"
#include "kernels/rwkv7.h"
#include "kernels/segments.h"
#include "kernels/short_conv.h"
#include "kernels/transfer.h"

namespace linfer::cpu {

absl::Status Upload(const ExecContext& ctx, const void* host, const TensorView& dst);
absl::Status Download(const ExecContext& ctx, const TensorView& src, void* host);
absl::Status CopyTensor(const ExecContext& ctx, const TensorView& src, const TensorView& dst);
// dst ← src between f32 and bf16 (round to nearest even, or exact widening), [M, N] with row
// strides: the CPU side of bf16 matmul inputs (kernels/gemm.h MatmulInputDType).
void ConvertRows(const TensorView& src, const TensorView& dst);
absl::Status ZeroTensor(const ExecContext& ctx, const TensorView& dst);
absl::Status Synchronize(const ExecContext& ctx);
std::string BlasCoreName();     // see kernels/gemm.h
std::string BlasCoreUpgrade();  // see kernels/gemm.h
absl::Status Linear(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                    const TensorView& y, const TensorView* bias, bool accumulate);
absl::Status RmsNorm(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                     const NormParams& p, const TensorView& y);
absl::Status LayerNorm(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                       const TensorView& b, const NormParams& p, const TensorView& y);
absl::Status Mamba2Gates(const ExecContext& ctx, const TensorView& dt, const TensorView& dt_bias,
                         const TensorView& a_log, float lo, float hi, const TensorView& delta,
                         const TensorView& g);
absl::Status ScaleGroups(const ExecContext& ctx, const TensorView& x, const TensorView& s,
                         bool accumulate, const TensorView& y);
absl::Status BiasActivate(const ExecContext& ctx, const TensorView& x, const TensorView& b,
                          Activation act, const TensorView& y);
absl::Status TokenShift(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                        const TensorView& state, const TensorView& delta);
absl::Status MixRows(const ExecContext& ctx, const TensorView& x, const TensorView& d,
                     const TensorView& m, const TensorView& y);
absl::Status Rwkv7Keys(const ExecContext& ctx, const TensorView& k, const TensorView& a,
                       const TensorView& k_k, const TensorView& k_a, int64_t head_dim,
                       bool fused_norm, const TensorView& kk, const TensorView& k_out);
absl::Status Rwkv7ValueResidual(const ExecContext& ctx, const TensorView& v,
                                const TensorView& v_first, const TensorView& z,
                                const TensorView& y);
absl::Status Rwkv7Bonus(const ExecContext& ctx, const TensorView& o, const TensorView& r,
                        const TensorView& k, const TensorView& r_k, const TensorView& v,
                        const TensorView& g, int64_t heads, const TensorView& y);
absl::Status Rwkv7Recurrence(const ExecContext& ctx, const Rwkv7Inputs& in, const Segments& segs,
                             const TensorView& state, const RecurrenceOptions& options,
                             const TensorView& o);
absl::Status GatedRmsNorm(const ExecContext& ctx, const TensorView& x, const TensorView& gate,
                          const TensorView& w, const NormParams& p, Activation act,
                          const TensorView& y);
absl::Status L2Normalize(const ExecContext& ctx, const TensorView& x, int64_t group, float eps,
                         const TensorView& y);
absl::Status SumNormalize(const ExecContext& ctx, const TensorView& x, int64_t group, float eps,
                          const TensorView& y);
absl::Status Activate(const ExecContext& ctx, Activation act, const TensorView& x,
                      const TensorView& y);
absl::Status SwiGlu(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                    const TensorView& out);
absl::Status Add(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                 const TensorView& out);
absl::Status Mul(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                 const TensorView& out, Activation act_b);
absl::Status GdnGates(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                      const TensorView& a_log, const TensorView& dt_bias, float beta_scale,
                      const TensorView& g, const TensorView& beta);
absl::Status SigmoidScale(const ExecContext& ctx, const TensorView& x, float scale,
                          const TensorView& y);
absl::Status GlaDecay(const ExecContext& ctx, const TensorView& x, float normalizer,
                      float clamp_min, const TensorView& y);
absl::Status Fill(const ExecContext& ctx, float value, const TensorView& y);
absl::Status FeatureMap(const ExecContext& ctx, FeatureMapKind kind, const TensorView& x,
                        const TensorView& y);
absl::Status Rope(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                  const RopeParams& p);
// x_head_stride is set (never 0) by the dispatcher.
absl::Status HeadNormRope(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                          const Segments& segs, const HeadNormRopeParams& p, const TensorView& y);
absl::Status ShortConv(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                       const Segments& segs, const TensorView& state, Activation act,
                       const TensorView& y);
absl::Status Embedding(const ExecContext& ctx, const TensorView& table, const TensorView& tokens,
                       const TensorView& out);
absl::Status GatherRows(const ExecContext& ctx, const TensorView& x, const TensorView& rows,
                        const TensorView& out);
absl::Status Recurrence(const ExecContext& ctx, const RecurrenceSpec& spec,
                        const RecurrenceInputs& in, const Segments& segs, const TensorView& state,
                        const TensorView& z, const RecurrenceOptions& options, const TensorView& o);
absl::Status Presample(const ExecContext& ctx, const TensorView& logits, const PresampleOutput& out,
                       const PresampleDraws* draws);

absl::Status Attention(const ExecContext& ctx, const TensorView& q, const TensorView& k,
                       const TensorView& v, const Segments& segs, const KvCacheRef& kv,
                       const AttentionParams& p, const TensorView& out);

absl::Status MoeRoute(const ExecContext& ctx, const TensorView& logits, const TensorView& idx,
                      const TensorView& weights, bool normalize);
absl::Status MoeExperts(const ExecContext& ctx, const TensorView& x, const TensorView& idx,
                        const TensorView& weights, const TensorView& gate_up,
                        const TensorView& down, const MoeShared* shared, const TensorView& y,
                        bool accumulate);

}  // namespace linfer::cpu
