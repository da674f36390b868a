// Attention: checks (shapes, heads, cache layout, slots, block tables) and dispatch.
#include "kernels/attention.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/check.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace linfer {
namespace {

absl::Status CheckCache(const ExecContext& ctx, const Segments& segs, const KvCacheRef& kv,
                        const AttentionParams& p) {
  const DType st_dtype = kv.storage.dtype();
  if ((st_dtype != DType::kF32 && st_dtype != DType::kBF16 && st_dtype != DType::kF8E4M3) ||
      kv.storage.has_scales()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Attention: kv storage ", kv.storage.DebugString(), " is not f32, bf16 or fp8 (unscaled)"));
  }
  RETURN_IF_ERROR(CheckView(ctx, "Attention", "kv storage", kv.storage, kv.storage.dtype(), 5));
  RETURN_IF_ERROR(CheckContiguous("Attention", "kv storage", kv.storage));
  const TensorView& st = kv.storage;
  if (kv.kind == KvCacheRef::Kind::kRing) {
    if (p.window < 1 || st.dim(1) != 2 || st.dim(2) != p.window || st.dim(3) != p.kv_heads ||
        st.dim(4) != p.head_dim) {
      return absl::InvalidArgumentError(absl::StrCat("Attention: ring ", st.DebugString(),
                                                     " is not [slots, 2, ", p.window, ", ",
                                                     p.kv_heads, ", ", p.head_dim, "]"));
    }
    for (const Segment& s : segs.host) {
      if (s.slot < 0 || s.slot >= st.dim(0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("Attention: slot ", s.slot, " outside ", st.DebugString()));
      }
    }
    return absl::OkStatus();
  }
  const BlockTableView& bt = segs.blocks;
  if (bt.block_tokens < 1 || st.dim(1) != bt.block_tokens || st.dim(2) != 2 ||
      st.dim(3) != p.kv_heads || st.dim(4) != p.head_dim ||
      static_cast<int64_t>(bt.host.size()) !=
          static_cast<int64_t>(segs.host.size()) * bt.max_blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attention: paged storage ", st.DebugString(), " with ", bt.block_tokens,
                     " tokens per block and a table of ", bt.host.size(), " entries for ",
                     segs.host.size(), " segments × ", bt.max_blocks));
  }
  for (size_t s = 0; s < segs.host.size(); ++s) {
    const Segment& seg = segs.host[s];
    const int64_t needed = (seg.position + seg.num_tokens + bt.block_tokens - 1) / bt.block_tokens;
    if (needed > bt.max_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("Attention: segment ", s, " needs ", needed,
                                                     " blocks, the table has ", bt.max_blocks));
    }
    for (int64_t b = 0; b < needed; ++b) {
      const int32_t id = bt.host[s * bt.max_blocks + b];
      if (id < 0 || id >= st.dim(0)) {
        return absl::InvalidArgumentError(absl::StrCat("Attention: segment ", s, " block ", b,
                                                       " is ", id, ", outside ", st.dim(0)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Attention(const ExecContext& ctx, const TensorView& q, const TensorView& k,
                       const TensorView& v, const Segments& segs, const KvCacheRef& kv,
                       const AttentionParams& p, const TensorView& out) {
  RETURN_IF_ERROR(CheckSegmentTable(ctx, "Attention", segs));
  if (p.q_heads < 1 || p.kv_heads < 1 || p.q_heads % p.kv_heads != 0 || p.head_dim < 1 ||
      p.window < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Attention: ", p.q_heads, " query heads over ",
                                                   p.kv_heads, " kv heads of ", p.head_dim,
                                                   ", window ", p.window));
  }
  const int64_t t = segs.total_tokens();
  for (const auto& [name, view, heads] :
       {std::tuple<const char*, const TensorView*, int>{"q", &q, p.q_heads},
        {"k", &k, p.kv_heads},
        {"v", &v, p.kv_heads},
        {"out", &out, p.q_heads}}) {
    RETURN_IF_ERROR(CheckView(ctx, "Attention", name, *view, DType::kF32, 2));
    if (view->dim(0) != t || view->dim(1) != int64_t{heads} * p.head_dim) {
      return absl::InvalidArgumentError(absl::StrCat("Attention: ", name, " ", view->DebugString(),
                                                     " is not [", t, ", ", heads, "·", p.head_dim,
                                                     "]"));
    }
  }
  RETURN_IF_ERROR(CheckCache(ctx, segs, kv, p));
  if (t == 0) return absl::OkStatus();
  switch (ctx.device) {
    case Device::kCpu:
      return cpu::Attention(ctx, q, k, v, segs, kv, p, out);
    case Device::kCuda:
      return cuda::Attention(ctx, q, k, v, segs, kv, p, out);
  }
  return absl::InternalError("unknown device");
}

}  // namespace linfer
