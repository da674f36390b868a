// The layer-level recurrence on CUDA (kernels/recurrence.h): plans one call over all segments and
// heads. Segments shorter than the chunk threshold (decode steps, short prompts) go to the
// token-by-token step kernel (recurrent_step.cu), which reads and writes each state once per
// call; longer ones go to the tensor-core chunked path: chunk offsets → per-chunk matrices
// (chunk_prep.cu / chunk_prep_gla.cu, parallel over all chunks) → per-segment scan
// (chunk_scan.cu) → with the split scan, the outputs of all chunks (chunk_out.cu). The two paths
// own disjoint segments, so both may run in one call. The chunked path always cuts 64-token chunks
// (RecurrenceOptions::chunk_size only sets the threshold in kAuto) and covers dk ≤ 256 without the
// normaliser; other shapes run token by token.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/env_option.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/recurrence_kernels.cuh"

namespace linfer::cuda {
namespace {

PackedInput Pack(const TensorView& t, int64_t dim, int64_t heads) {
  PackedInput in;
  if (t.empty() || t.dim(1) == 0) return in;
  in.p = t.data<const float>();
  in.ld = t.row_stride();
  in.share = static_cast<int>(heads / (t.dim(1) / dim));
  in.vec4 = dim % 4 == 0 && in.ld % 4 == 0 && reinterpret_cast<uintptr_t>(in.p) % 16 == 0;
  return in;
}

// LINFER_CUDA_SCAN: unset or "pipelined" (ChunkScanPipeKernel: cp.async double buffering, the
// default since the H200 run of 2026-11-27 at ba0e522: 1.9–4.0× "plain" on the benchmark's
// prefills, 1.0–1.7× "split"), "plain" (ChunkScanKernel) or "split" (ChunkScanSplitKernel and
// ChunkOutKernel: only the state's recurrence on the sequential path). The per-channel decay takes
// the plain scan in every mode.
absl::string_view ScanMode() {
  static const absl::string_view mode =
      EnvOption("LINFER_CUDA_SCAN", {"pipelined", "plain", "split"});
  return mode;
}

// LINFER_CUDA_PREP: unset or "substitution" (chunk_prep's (I + A)⁻¹ one column per thread, the
// default), "blocked" (by 16×16 blocks, all threads; it passed on the H200 but timed the same as
// the substitution, 0.99–1.00×: chunk_prep waits on its loads, not on the inverse).
bool BlockedInverse() {
  static const bool blocked =
      EnvOption("LINFER_CUDA_PREP", {"substitution", "blocked"}) == "blocked";
  return blocked;
}

}  // namespace

int64_t MinChunkTokens(const RecurrenceSpec& spec, const RecurrenceOptions& options) {
  const bool tensor_cores = spec.dk <= 256 && !spec.normalize;
  if (!tensor_cores) return INT64_MAX;
  switch (options.mode) {
    case RecurrenceMode::kRecurrent:
      return INT64_MAX;
    case RecurrenceMode::kChunked:
      return 1;
    case RecurrenceMode::kAuto:
      return std::max(1, options.chunk_size);
  }
  return INT64_MAX;
}

absl::Status Recurrence(const ExecContext& ctx, const RecurrenceSpec& spec,
                        const RecurrenceInputs& in, const Segments& segs, const TensorView& state,
                        const TensorView& z, const RecurrenceOptions& options,
                        const TensorView& o) {
  // The chunked path's scratch (per-chunk matrices; the split scan's U and chunk states: about
  // 3 KB per token and head) is dead once this call's kernels have run: the next ops reuse it.
  const ScratchScope scratch_scope(ctx);
  const int64_t heads = o.dim(1) / spec.dv;
  RecParams p;
  p.q = Pack(in.q, spec.dk, heads);
  p.k = Pack(in.k, spec.dk, heads);
  p.v = Pack(in.v, spec.dv, heads);
  p.decay = spec.decay == DecayKind::kVector   ? kDecayVector
            : spec.decay == DecayKind::kScalar ? kDecayScalar
                                               : kDecayNone;
  p.g = Pack(in.g, spec.decay == DecayKind::kVector ? spec.dk : 1, heads);
  if (spec.decay == DecayKind::kScalar && in.g.empty()) {
    p.fixed = in.head_log_decay.data<const float>();
  }
  if (spec.delta_rule) p.beta = Pack(in.beta, 1, heads);
  if (in.gdn.has_value()) {  // Recurrence (kernels/recurrence.cc) leaves it only to the step kernel
    p.gdn = true;
    p.a_log = in.gdn->a_log.data<const float>();
    p.dt_bias = in.gdn->dt_bias.data<const float>();
    p.beta_scale = in.gdn->beta_scale;
    p.l2_eps = in.gdn->l2_eps;
  }
  p.o = o.data<float>();
  p.o_ld = o.row_stride();
  p.state = state.raw();
  p.state_bf16 = state.dtype() == DType::kBF16;
  p.z = spec.normalize ? z.data<float>() : nullptr;
  p.segs = segs.device.data<const int64_t>();
  p.heads = static_cast<int>(heads);
  p.dk = spec.dk;
  p.dv = spec.dv;
  p.delta = spec.delta_rule;
  p.normalize = spec.normalize;
  p.scale = spec.scale;

  p.min_chunk_tokens = MinChunkTokens(spec, options);
  const int n = static_cast<int>(segs.host.size());
  int64_t stepped = 0, chunked = 0, total_chunks = 0;
  for (const Segment& s : segs.host) {
    if (s.num_tokens >= p.min_chunk_tokens) {
      ++chunked;
      total_chunks += CeilDiv(s.num_tokens, kChunk);
    } else {
      ++stepped;
    }
  }
  if (p.gdn && chunked > 0) {
    return absl::InternalError("Recurrence (CUDA): GdnPrep reached the chunked path unprepared");
  }
  // Every check and scratch allocation before the first launch, and the chunked path's launches
  // (whose launchers opt in shared memory, which could fail) before the step kernel's: both
  // update states in place, so a failure after either would leave states advanced.
  const cudaStream_t stream = Stream(ctx);
  // The kernels move a state's rows 16 (f32) or 8 (bf16) bytes at a time where dv % 4 == 0: its
  // base must allow it (an allocation does; a view at an odd offset would fault).
  if (spec.dv % 4 == 0 && reinterpret_cast<uintptr_t>(state.raw()) % (p.state_bf16 ? 8 : 16) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Recurrence (CUDA): the state ",
                                                   state.DebugString(), " is not ",
                                                   p.state_bf16 ? 8 : 16, "-byte aligned"));
  }
  if (n > 65535 || heads > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("Recurrence (CUDA): ", n, " segments × ", heads,
                                                   " heads (at most 65535 of each)"));
  }
  if (stepped > 0 && p.normalize) {
    ASSIGN_OR_RETURN(const TensorView z_next, Scratch(ctx, DType::kF32, {n, heads, spec.dk}));
    p.z_next = z_next.data<float>();
  }
  TensorView offsets;
  int sms = 0;
  if (chunked > 0) {
    if (total_chunks * heads > (int64_t{1} << 31) - 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Recurrence: ", total_chunks, " chunks × ", heads, " heads in one call"));
    }
    const int64_t pkgs = total_chunks * heads;
    ASSIGN_OR_RETURN(offsets, Scratch(ctx, DType::kI32, {n + 1 + chunked}));  // + chunked_segs
    ASSIGN_OR_RETURN(const TensorView m, Scratch(ctx, DType::kBF16, {pkgs, kChunk, kChunk}));
    p.chunk_offsets = offsets.data<const int32_t>();
    p.chunked_segs = p.chunk_offsets + n + 1;
    p.m = m.data<__nv_bfloat16>();
    p.blocked_inverse = BlockedInverse();
    const absl::string_view mode = ScanMode();
    const bool split = mode == "split" && p.decay != kDecayVector;
    if (spec.delta_rule && !split) {  // the split scan takes T's products W and U0 instead
      ASSIGN_OR_RETURN(const TensorView t, Scratch(ctx, DType::kBF16, {pkgs, kChunk, kChunk}));
      p.t = t.data<__nv_bfloat16>();
    }
    if (mode != "plain" && p.decay != kDecayVector) {
      const int64_t dk_tile = DkTile(spec.dk);
      ASSIGN_OR_RETURN(const TensorView qb, Scratch(ctx, DType::kBF16, {pkgs, kChunk, dk_tile}));
      ASSIGN_OR_RETURN(const TensorView kb, Scratch(ctx, DType::kBF16, {pkgs, kChunk, dk_tile}));
      ASSIGN_OR_RETURN(const TensorView gates, Scratch(ctx, DType::kF32, {pkgs, kGateLd}));
      p.qb = qb.data<__nv_bfloat16>();
      p.kb = kb.data<__nv_bfloat16>();
      p.gates = gates.data<float>();
      if (split) {
        p.split = true;
        p.u_ld = static_cast<int>(CeilDiv(spec.dv, 64) * 64);
        ASSIGN_OR_RETURN(const TensorView u0, Scratch(ctx, DType::kF32, {pkgs, kChunk, p.u_ld}));
        ASSIGN_OR_RETURN(const TensorView ut, Scratch(ctx, DType::kBF16, {pkgs, p.u_ld, kChunk}));
        ASSIGN_OR_RETURN(const TensorView hc, Scratch(ctx, DType::kBF16, {pkgs, p.u_ld, dk_tile}));
        p.u0 = u0.data<float>();
        p.ut = ut.data<__nv_bfloat16>();
        p.hc = hc.data<__nv_bfloat16>();
        if (spec.delta_rule) {
          ASSIGN_OR_RETURN(const TensorView w, Scratch(ctx, DType::kBF16, {pkgs, kChunk, dk_tile}));
          p.w = w.data<__nv_bfloat16>();
        }
      }
    }
    ASSIGN_OR_RETURN(sms, DeviceAttribute(cudaDevAttrMultiProcessorCount));
  }
  if (stepped > 0) RETURN_IF_ERROR(PrepareStep(p));
  if (p.split) RETURN_IF_ERROR(PrepareChunkOut(p));  // its shared memory allowed before any launch
  if (chunked > 0) {
    RETURN_IF_ERROR(
        LaunchChunkOffsets(p, n, offsets.data<int32_t>(), offsets.data<int32_t>() + n + 1, stream));
    if (p.decay == kDecayVector) {
      RETURN_IF_ERROR(LaunchChunkPrepVector(p, n, total_chunks, stream));
    } else {
      RETURN_IF_ERROR(LaunchChunkPrep(p, n, total_chunks, stream));
    }
    RETURN_IF_ERROR(LaunchChunkScan(p, chunked, 2 * int64_t{sms}, stream));
    if (p.split) RETURN_IF_ERROR(LaunchChunkOut(p, n, total_chunks, stream));
  }
  return stepped > 0 ? LaunchStep(p, n, stream) : absl::OkStatus();
}

}  // namespace linfer::cuda
