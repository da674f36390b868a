// The token mixer of one layer (the linear-attention part of a block), and the helpers its
// family implementations share. A mixer reads and updates one state block per sequence.
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
#include "kernels/cpu/parallel.h"
#include "kernels/recurrence.h"
#include "kernels/tensor.h"
#include "models/config.h"
#include "models/weights.h"

namespace linfer {

enum class RecurrenceMode {
  kAuto,       // chunked when a segment has ≥ chunk_size tokens, recurrent otherwise
  kChunked,    // always the chunked form
  kRecurrent,  // always token by token
};

// One sequence's rows in the packed batch and its state block for this layer.
struct MixerSegment {
  int64_t row_begin = 0;
  int64_t num_tokens = 0;
  float* state = nullptr;  // this layer's block of the sequence state (state_floats() floats)
  int64_t position = 0;    // tokens the sequence has already consumed (RoPE offset)
};

struct MixerOptions {
  RecurrenceMode mode = RecurrenceMode::kAuto;
  int chunk_size = 64;
};

class TokenMixer {
 public:
  virtual ~TokenMixer() = default;
  // Floats in one sequence's state block for this layer (recurrent + conv + normaliser).
  virtual int64_t state_floats() const = 0;
  // x: [T, D] normalised hidden states of all segments (packed); out: [T, D].
  virtual absl::Status Forward(const TensorView& x, absl::Span<const MixerSegment> segments,
                               const MixerOptions& options, const TensorView& out) = 0;
};

// Builds layer `layer`'s mixer for config.family, binding its weights from `store`.
absl::StatusOr<std::unique_ptr<TokenMixer>> CreateMixer(const ModelConfig& config, int layer,
                                                        WeightStore& store);

// ---- helpers shared by the family implementations (models/families/*.cc) ----

// "model.layers.{layer}.attn." + name
std::string AttnName(int layer, absl::string_view name);

// An f32 [rows, cols] scratch matrix.
absl::StatusOr<Tensor> Scratch(int64_t rows, int64_t cols);

// Runs fn(segment_index, head) for every pair; in parallel when `work` (≈ flops of all pairs)
// pays for waking the threads (a lone decode token of a small model does not).
template <typename Fn>
void ForEachSegmentHead(int64_t num_segments, int heads, int64_t work, Fn&& fn) {
  cpu::ParallelFor<cpu::Schedule::kDynamic>(
      num_segments * heads, work > (int64_t{1} << 21),
      [&](int64_t i) { fn(i / heads, static_cast<int>(i % heads)); });
}

// A packed projection output, one row per token: head h's `dim` floats of row r start at
// At(r, h); rows are `width` floats apart.
struct PackedHeads {
  float* data = nullptr;
  int64_t width = 0;
  int64_t dim = 0;
  float* At(int64_t row, int64_t head) const { return data + row * width + head * dim; }
};

// The recurrence's q, k, v and o of one head over a segment starting at token row `row`: query
// head qh, key head kh, value head vh, output head oh (heads differ under grouped or value-head
// sharing). Gates, β, the state and the normaliser are left to the caller.
inline HeadSequence PackedHeadSequence(const PackedHeads& q, const PackedHeads& k,
                                       const PackedHeads& v, const PackedHeads& o, int64_t row,
                                       int64_t qh, int64_t kh, int64_t vh, int64_t oh) {
  HeadSequence hs;
  hs.q = q.At(row, qh);
  hs.q_stride = q.width;
  hs.k = k.At(row, kh);
  hs.k_stride = k.width;
  hs.v = v.At(row, vh);
  hs.v_stride = v.width;
  hs.o = o.At(row, oh);
  hs.o_stride = o.width;
  return hs;
}

// The attention scale 1/√d_k applied to q.
inline float QueryScale(int64_t dk) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
}

// ≈ flops of the recurrence over `tokens` tokens of `heads` heads with a [dk, dv] state.
inline int64_t RecurrenceWork(int64_t tokens, int64_t heads, int64_t dk, int64_t dv) {
  return 4 * tokens * heads * dk * dv;
}

// The recurrence over one head's segment, in the form `options` selects.
void RunRecurrence(const RecurrenceSpec& spec, const HeadSequence& seq, int64_t num_tokens,
                   const MixerOptions& options);

// y = act(conv(x Wᵀ)) when `conv` is given (each segment's conv state at `conv_offset` floats
// into its state block), else y = act(x Wᵀ). x [T, D], w [C, D], y [T, C].
absl::Status ProjectConv(const TensorView& x, const Tensor& w, const Tensor* conv,
                         absl::Span<const MixerSegment> segments, int64_t conv_offset,
                         Activation act, Tensor& y);

// Short conv over each segment's rows of x [T, C] into y, with the segment's conv state at
// `state_offset` floats into its state block ([C, W] floats).
absl::Status ConvSegments(const TensorView& x, const Tensor& weight,
                          absl::Span<const MixerSegment> segments, int64_t state_offset,
                          Activation act, const TensorView& y);

}  // namespace linfer
