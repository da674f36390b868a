// The CUDA twins of every op (kernels/cuda/*.cu; stubs returning Unavailable when the build has no
// CUDA), called by the dispatchers in kernels/*.cc after they validated shapes and dtypes. Same
// signatures and contracts as the public ops; every launch is on ctx.stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

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
#include "kernels/op_timer.h"
#include "kernels/presample.h"
#include "kernels/recurrence.h"
#include "kernels/rope.h"
#include "kernels/rwkv7.h"
#include "kernels/segments.h"
#include "kernels/short_conv.h"
#include "kernels/transfer.h"

namespace linfer::cuda {

// Device memory (kernels/device_memory.cc dispatches here).
absl::StatusOr<void*> Allocate(size_t bytes);
void Free(void* p);
absl::Status ZeroSync(void* p, size_t bytes);
absl::StatusOr<void*> AllocatePinned(size_t bytes);
void FreePinned(void* p);
int DeviceCount();  // 0 without a usable GPU (or without CUDA in the build)
// Bytes of the current device's memory in use (total − free, cudaMemGetInfo).
// The current device's free and total memory (cudaMemGetInfo).
absl::StatusOr<std::pair<int64_t, int64_t>> MemoryFreeTotal();

absl::Status Upload(const ExecContext& ctx, const void* host, const TensorView& dst);
absl::Status Download(const ExecContext& ctx, const TensorView& src, void* host);
absl::Status CopyTensor(const ExecContext& ctx, const TensorView& src, const TensorView& dst);
absl::Status ZeroTensor(const ExecContext& ctx, const TensorView& dst);
absl::Status ZeroTensors(const ExecContext& ctx, absl::Span<const TensorView> dsts);
absl::Status CopyTensors(const ExecContext& ctx, absl::Span<const TensorView> srcs,
                         absl::Span<const TensorView> dsts);
absl::Status Synchronize(const ExecContext& ctx);
// dst ← the contiguous views `srcs` back to back, on `stream` (one kernel per kMaxZeroRanges views;
// memory.cu). A cudaStream_t passed as void*: this header is also compiled without CUDA.
absl::Status GatherTensors(void* stream, absl::Span<const TensorView> srcs, unsigned char* dst);
absl::StatusOr<std::shared_ptr<DownloadStager>> MakeDownloadStager(size_t buffer_bytes,
                                                                   int buffers);
// The staged copy of kernels/transfer.h's DownloadGathered; null when no staging buffer is free
// (nothing was queued: the caller copies at once).
absl::StatusOr<std::shared_ptr<PendingCopy>> DownloadGathered(
    const ExecContext& ctx, absl::Span<const TensorView> srcs, void* host,
    const std::shared_ptr<DownloadStager>& stager);
// kernels/op_timer.h (op_timer.cu).
absl::StatusOr<std::unique_ptr<OpTimer>> CreateOpTimer();
absl::Status Linear(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                    const TensorView& y, const TensorView* bias, bool accumulate);
// kernels/gemm.h RmsNormLinear as one GEMV launch when RmsNormLinearFolds(rows, w) (false: not
// taken, nothing queued): LINFER_CUDA_GEMV=1 and the GEMV takes these weights and 1–4 rows.
absl::StatusOr<bool> TryRmsNormLinear(const ExecContext& ctx, const TensorView& x,
                                      const TensorView& norm_w, const NormParams& p,
                                      const TensorView& w, const TensorView& y);
bool RmsNormLinearFolds(int64_t rows, const TensorView& w);
// Linear with fp8 weights (kF8E4M3 with scales; x f32): gemm_fp8.cu, called by Linear.
absl::Status LinearFp8(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                       const TensorView& y, const TensorView* bias, bool accumulate);
// out (bf16, contiguous [m, k]) = x (f32 [m, k], any row stride) rounded to nearest even, as the
// bf16 products round their input (gemm.cu's ConvertKernel).
absl::Status RoundToBf16(const ExecContext& ctx, const TensorView& x, const TensorView& out);
// Which of LinearFp8's paths takes m rows over w: "gemv", "mma" (tensor cores) or "widen".
const char* Fp8Path(int64_t m, const TensorView& w);
// LINFER_CUDA_BF16_INPUTS=1 (kernels/gemm.h MatmulInputDType); false without CUDA.
bool Bf16MatmulInputs();
// LINFER_CUDA_GEMM_TUNE=1 (gemm_tune.cuh): whether it is on; how many products' algorithms it
// chose, how many candidates it timed, and how often it fell back to the heuristic's first pick
// for want of memory. Zeros without CUDA.
struct GemmTuneStats {
  bool enabled = false;
  int64_t products = 0, candidates = 0, fallbacks = 0;
};
GemmTuneStats GemmTuning();
absl::Status SwiGluLinear(const ExecContext& ctx, const TensorView& gate, const TensorView& up,
                          const TensorView& w, const TensorView& y, bool accumulate);
absl::Status RmsNorm(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                     const NormParams& p, const TensorView& y);
absl::Status AddRmsNorm(const ExecContext& ctx, const TensorView& h, const TensorView& r,
                        const TensorView& w, const NormParams& p, const TensorView& y);
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
// x_head_stride is set (never 0) by the dispatcher. The fused kernel's widest head is
// kHeadNormRopeMaxDim: narrower than RmsNorm's block-per-group width (512), so it sums as RmsNorm's
// warp kernel does; kernels/rope.cc runs wider heads as RmsNorm, then Rope.
inline constexpr int kHeadNormRopeMaxDim = 511;
absl::Status HeadNormRope(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                          const Segments& segs, const HeadNormRopeParams& p, const TensorView& y);
absl::Status ShortConvs(const ExecContext& ctx, absl::Span<const ConvGroup> groups,
                        const Segments& segs, Activation act);
absl::Status Embedding(const ExecContext& ctx, const TensorView& table, const TensorView& tokens,
                       const TensorView& out);
absl::Status GatherRows(const ExecContext& ctx, const TensorView& x, const TensorView& rows,
                        const TensorView& out);
absl::Status Recurrence(const ExecContext& ctx, const RecurrenceSpec& spec,
                        const RecurrenceInputs& in, const Segments& segs, const TensorView& state,
                        const TensorView& z, const RecurrenceOptions& options, const TensorView& o);
// Recurrence's split of segments: those of at least this many tokens take the chunked path, the
// others the step kernel (INT64_MAX: all of them the step kernel).
int64_t MinChunkTokens(const RecurrenceSpec& spec, const RecurrenceOptions& options);
// The largest K the CUDA Presample takes for rows of `vocab` (kernels/presample.h).
int64_t MaxPresampleK(int64_t vocab);
absl::Status Presample(const ExecContext& ctx, const TensorView& logits, const PresampleOutput& out,
                       const PresampleDraws* draws);

absl::Status Attention(const ExecContext& ctx, const TensorView& q, const TensorView& k,
                       const TensorView& v, const Segments& segs, const KvCacheRef& kv,
                       const AttentionParams& p, const TensorView& out);

// kernels/moe.h (moe.cu).
absl::Status MoeRoute(const ExecContext& ctx, const TensorView& logits, const TensorView& idx,
                      const TensorView& weights, bool normalize);
absl::Status MoeExperts(const ExecContext& ctx, const TensorView& x, const TensorView& idx,
                        const TensorView& weights, const TensorView& gate_up,
                        const TensorView& down, const MoeShared* shared, const TensorView& y,
                        bool accumulate);

}  // namespace linfer::cuda
