// Mixer factory and shared helpers.
#include "models/mixer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/gemm.h"
#include "kernels/short_conv.h"
#include "kernels/status_macros.h"
#include "models/families/families.h"

namespace linfer {

absl::StatusOr<std::unique_ptr<TokenMixer>> CreateMixer(const ModelConfig& config, int layer,
                                                        WeightStore& store) {
  switch (config.family) {
    case Family::kGatedDeltaNet:
      return CreateGatedDeltaNetMixer(config, layer, store);
    case Family::kDeltaNet:
      return CreateDeltaNetMixer(config, layer, store);
    case Family::kGla:
      return CreateGlaMixer(config, layer, store);
    case Family::kRetNet:
      return CreateRetNetMixer(config, layer, store);
    case Family::kLinearAttn:
      return CreateLinearAttnMixer(config, layer, store);
  }
  return absl::InternalError("unknown family");
}

std::string AttnName(int layer, absl::string_view name) {
  return absl::StrCat("model.layers.", layer, ".attn.", name);
}

absl::StatusOr<Tensor> Scratch(int64_t rows, int64_t cols) {
  return Tensor::Empty(DType::kF32, {rows, cols});
}

void RunRecurrence(const RecurrenceSpec& spec, const HeadSequence& seq, int64_t num_tokens,
                   const MixerOptions& options) {
  const bool chunked = options.mode == RecurrenceMode::kChunked ||
                       (options.mode == RecurrenceMode::kAuto && num_tokens >= options.chunk_size);
  if (chunked) {
    ChunkedForward(spec, seq, num_tokens, options.chunk_size);
  } else {
    RecurrentForward(spec, seq, num_tokens);
  }
}

absl::Status ConvSegments(const TensorView& x, const Tensor& weight,
                          absl::Span<const MixerSegment> segments, int64_t state_offset,
                          Activation act, const TensorView& y) {
  const int64_t channels = x.dim(1);
  const int64_t width = weight.dim(-1);
  for (const MixerSegment& seg : segments) {
    TensorView state(seg.state + state_offset, DType::kF32, {channels, width});
    RETURN_IF_ERROR(ShortConv(x.Rows(seg.row_begin, seg.num_tokens), weight.view(), state, act,
                              y.Rows(seg.row_begin, seg.num_tokens)));
  }
  return absl::OkStatus();
}

absl::Status ProjectConv(const TensorView& x, const Tensor& w, const Tensor* conv,
                         absl::Span<const MixerSegment> segments, int64_t conv_offset,
                         Activation act, Tensor& y) {
  if (conv == nullptr) {
    RETURN_IF_ERROR(Linear(x, w.view(), y.view()));
    ActivateInPlace(act, y.data<float>(), y.numel());
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Tensor raw, Scratch(y.dim(0), y.dim(1)));
  RETURN_IF_ERROR(Linear(x, w.view(), raw.view()));
  return ConvSegments(raw.view(), *conv, segments, conv_offset, act, y.view());
}

}  // namespace linfer
