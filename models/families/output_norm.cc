// OutputNormGate: the per-head output norm (+ gate) that ends GDN/DeltaNet/GLA/RetNet mixers.
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "models/families/families.h"

namespace linfer {

absl::StatusOr<OutputNormGate> OutputNormGate::Load(WeightStore& store, int layer,
                                                    absl::string_view norm_name, bool affine,
                                                    bool gated, int64_t dv, int64_t value_dim,
                                                    int64_t hidden, double eps, Activation act) {
  OutputNormGate n;
  if (affine) {
    ASSIGN_OR_RETURN(n.weight_,
                     store.Load(AttnName(layer, absl::StrCat(norm_name, ".weight")), {dv}));
  }
  if (gated) {
    ASSIGN_OR_RETURN(n.g_proj_,
                     store.LoadMatrix(AttnName(layer, "g_proj.weight"), {value_dim, hidden}));
  }
  n.gated_ = gated;
  n.dv_ = dv;
  n.eps_ = eps;
  n.act_ = act;
  return n;
}

absl::Status OutputNormGate::Apply(const ExecContext& ctx, const TensorView& x,
                                   const TensorView& o) const {
  if (!gated_) return RmsNorm(ctx, o, weight_.view(), Params(), o);
  ASSIGN_OR_RETURN(TensorView g, Scratch(ctx, o.dim(0), o.dim(1)));
  RETURN_IF_ERROR(Linear(ctx, x, g_proj_.view(), g));
  return ApplyGate(ctx, g, o);
}

absl::Status OutputNormGate::ApplyGate(const ExecContext& ctx, const TensorView& g,
                                       const TensorView& o) const {
  return GatedRmsNorm(ctx, o, g, weight_.view(), Params(), act_, o);
}

}  // namespace linfer
