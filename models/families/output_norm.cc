// OutputNormGate: the per-head output norm (+ gate) that ends GDN/DeltaNet/GLA/RetNet mixers.
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/status_macros.h"
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
    ASSIGN_OR_RETURN(n.g_proj_, store.Load(AttnName(layer, "g_proj.weight"), {value_dim, hidden}));
  }
  n.gated_ = gated;
  n.dv_ = dv;
  n.eps_ = eps;
  n.act_ = act;
  return n;
}

absl::Status OutputNormGate::Apply(const TensorView& x, const TensorView& o) const {
  const TensorView w = weight_.view();
  if (!gated_) return RmsNorm(o, w, static_cast<float>(eps_), dv_, o);
  ASSIGN_OR_RETURN(Tensor g, Scratch(o.dim(0), o.dim(1)));
  RETURN_IF_ERROR(Linear(x, g_proj_.view(), g.view()));
  return GatedRmsNorm(o, g.view(), w, static_cast<float>(eps_), dv_, act_, o);
}

}  // namespace linfer
