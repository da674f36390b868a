// The token mixer of one layer (the sequence-mixing part of a block), and the helpers its family
// implementations share. A mixer declares its per-sequence state (StateSpecs) and describes its
// math once, as op calls on views; the ops run on whatever device the context names.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/activation.h"
#include "kernels/context.h"
#include "kernels/norm.h"
#include "kernels/recurrence.h"
#include "kernels/segments.h"
#include "models/config.h"
#include "models/state.h"
#include "models/weights.h"

namespace linfer {

using MixerOptions = RecurrenceOptions;

// A block's input RMSNorm handed to a mixer that folds it into its input projection
// (TokenMixer::FoldsInputNorm): weight [D] f32 (or empty) and its parameters.
struct InputNorm {
  TensorView w;
  NormParams params;
};

class TokenMixer {
 public:
  virtual ~TokenMixer() = default;
  // What the layer keeps per sequence; Forward receives one tensor per spec, in this order:
  // [slots, ...shape] for kFixed and kRing specs, the KV cache's storage [blocks, block_tokens,
  // ...shape] for a kPaged spec (addressed through the step's block tables, Segments::blocks).
  virtual std::vector<StateSpec> state_specs() const = 0;
  // The dtype Forward takes x in: f32, or bf16 where x only feeds projections whose weights take
  // bf16 inputs on ctx's device (kernels/gemm.h MatmulInputDType), so the block's norm writes it
  // as such and the products skip their conversion pass.
  virtual DType InputDType(const ExecContext&) const { return DType::kF32; }
  // x: [T, D] normalised hidden states of all segments (packed); out: [T, D], written.
  virtual absl::Status Forward(const ExecContext& ctx, const TensorView& x, const Segments& segs,
                               absl::Span<const TensorView> states, const MixerOptions& options,
                               const TensorView& out) = 0;
  // Whether, for a step of `rows` rows, ForwardNormed takes the hidden states before the block's
  // RMSNorm and folds the norm into its input projection (kernels/gemm.h RmsNormLinear: one launch
  // fewer where RmsNormLinearFolds). Default: never.
  virtual bool FoldsInputNorm(const ExecContext&, int64_t /*rows*/) const { return false; }
  // Forward with x = RmsNorm(h; norm) left to the mixer; h [T, D] f32 is only read.
  virtual absl::Status ForwardNormed(const ExecContext&, const TensorView&, const InputNorm&,
                                     const Segments&, absl::Span<const TensorView>,
                                     const MixerOptions&, const TensorView&) {
    return absl::UnimplementedError("this mixer does not fold its input norm");
  }
};

// Values one layer hands to later layers within one forward pass (RWKV-7's value residual:
// layer 0's v). The Model owns one per model and passes it to every mixer it creates; the views
// point into the step's arena and are valid for that step only. Model::Forward runs on one
// thread at a time per model, which makes this per-model scratch safe.
struct LayerLinks {
  TensorView v_first;  // [T, value_dim]
};

// Builds layer `layer`'s mixer for config.family, binding its weights from `store`.
absl::StatusOr<std::unique_ptr<TokenMixer>> CreateMixer(const ModelConfig& config, int layer,
                                                        WeightStore& store,
                                                        LayerLinks* links = nullptr);

// ---- helpers shared by the family implementations (models/families/*.cc) ----

// "<weight_prefix>layers.{layer}." (transformers' and fla's block prefix)
std::string LayerPrefix(const ModelConfig& config, int layer);

// "model.layers.{layer}.attn." + name (fla's mixer weights)
std::string AttnName(int layer, absl::string_view name);

// f32 [rows, cols] scratch from the step's arena.
absl::StatusOr<TensorView> Scratch(const ExecContext& ctx, int64_t rows, int64_t cols);

// The attention scale 1/√d_k applied to q.
inline float QueryScale(int64_t dk) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
}

// A short-conv state spec [channels, width] named `name`.
StateSpec ConvStateSpec(std::string name, int64_t channels, int64_t width);

// y = act(conv(x Wᵀ)) with each segment's conv state in `conv_state` ([slots, C, W]) when
// `conv` is non-empty, else y = act(x Wᵀ). x [T, D], w [C, D], y [T, C].
absl::Status ProjectConv(const ExecContext& ctx, const TensorView& x, const TensorView& w,
                         const TensorView& conv, const Segments& segs, const TensorView& conv_state,
                         Activation act, const TensorView& y);
// The same after the projection: y = act(conv(raw)), or act(raw) when `conv` is empty (raw may
// be a column view of a stacked projection's output).
absl::Status ConvOrActivate(const ExecContext& ctx, const TensorView& raw, const TensorView& conv,
                            const Segments& segs, const TensorView& conv_state, Activation act,
                            const TensorView& y);

}  // namespace linfer
