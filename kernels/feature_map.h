// Parameter-free parts of the linear-attention feature maps (fla fla/modules/feature_map.py).
// The learned maps (hedgehog, t2r, Hadamard) are a Linear followed by these or a pointwise op.
#pragma once

#include "absl/status/status.h"
#include "kernels/context.h"

namespace linfer {

enum class FeatureMapKind {
  // DPFP, ν = 4, as fla defines it (not the paper's [relu(x), relu(−x)]): r = [relu(x),
  // −relu(x)] (2d); φ = concat_{j=1..4}(r ⊙ roll(r, j)) (8d), roll(r, j)[i] = r[(i − j) mod 2d].
  kDpfp,
  // Hedgehog after its linear layer: φ = softmax([2z, −2z]) over 2d entries.
  kHedgehog,
  // Based's Taylor map (fla TaylorFeatureMap): φ = [1, x/d^¼, x_i²/(√2·√d), x_i x_j/√d (i < j)],
  // 1 + d + d(d+1)/2 features, so φ(q)·φ(k) = 1 + q·k/√d + (q·k)²/(2d).
  kTaylor,
  // ReBased's quadratic map after its LayerNorm: φ = [x_i²/√d, √(2/d)·x_i x_j (i < j)],
  // d(d+1)/2 features, so φ(q)·φ(k) = (q·k)²/d.
  kQuadratic,
};
// (The i < j pairs run in torch.triu_indices(d, d, 1) order: row-major over i, then j.)

// Output features per input feature for the linear maps (8 for DPFP, 2 for hedgehog; 0 for the
// quadratic ones, whose width FeatureMapDim gives).
int FeatureMapExpansion(FeatureMapKind kind);
// Output features for input dim d.
int64_t FeatureMapDim(FeatureMapKind kind, int64_t d);

// x [rows, d] (each row one head's vector) → y [rows, FeatureMapDim(kind, d)]. f32.
absl::Status FeatureMap(const ExecContext& ctx, FeatureMapKind kind, const TensorView& x,
                        const TensorView& y);

}  // namespace linfer
