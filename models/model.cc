// Model loading and the batched forward pass.
#include "models/model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/activation.h"
#include "kernels/gemm.h"
#include "kernels/logging.h"
#include "kernels/norm.h"
#include "kernels/status_macros.h"

namespace linfer {

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::filesystem::path& dir) {
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  ASSIGN_OR_RETURN(WeightStore store, WeightStore::Open(dir));
  std::unique_ptr<Model> m(new Model());
  m->config_ = std::move(config);
  absl::Status s = m->BindWeights(store);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("loading ", dir.string(), ": ", s.message()));
  }
  m->fingerprint_ = store.Fingerprint(Fnv1a64(m->config_.raw.dump()));
  std::vector<std::string> unused = store.Unused();
  if (!unused.empty()) {
    unused.resize(std::min<size_t>(unused.size(), 5));
    Log(LogLevel::kWarning,
        absl::StrCat(dir.string(), ": checkpoint tensors not used: ", absl::StrJoin(unused, ", ")));
  }
  return m;
}

absl::Status Model::BindWeights(WeightStore& store) {
  const int64_t d = config_.hidden_size, v = config_.vocab_size, i = config_.intermediate_size;
  ASSIGN_OR_RETURN(embeddings_, store.Load("model.embeddings.weight", {v, d}));
  ASSIGN_OR_RETURN(final_norm_, store.Load("model.norm.weight", {d}));
  if (!config_.tie_word_embeddings || store.Has("lm_head.weight")) {
    ASSIGN_OR_RETURN(lm_head_, store.Load("lm_head.weight", {v, d}));
  }
  layer_offsets_ = {0};
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    Block b;
    const std::string p = absl::StrCat("model.layers.", l, ".");
    ASSIGN_OR_RETURN(b.attn_norm, store.Load(p + "attn_norm.weight", {d}));
    ASSIGN_OR_RETURN(b.mlp_norm, store.Load(p + "mlp_norm.weight", {d}));
    ASSIGN_OR_RETURN(b.gate_proj, store.Load(p + "mlp.gate_proj.weight", {i, d}));
    ASSIGN_OR_RETURN(b.up_proj, store.Load(p + "mlp.up_proj.weight", {i, d}));
    ASSIGN_OR_RETURN(b.down_proj, store.Load(p + "mlp.down_proj.weight", {d, i}));
    ASSIGN_OR_RETURN(b.mixer, CreateMixer(config_, l, store));
    layer_offsets_.push_back(layer_offsets_.back() + b.mixer->state_floats());
    blocks_.push_back(std::move(b));
  }
  num_parameters_ = store.loaded_elements();
  return absl::OkStatus();
}

SequenceState Model::NewState() const {
  SequenceState s;
  s.data.assign(static_cast<size_t>(state_floats()), 0.0f);
  return s;
}

absl::Status Model::RunBlock(const Block& block, int layer, absl::Span<const SequenceInput> batch,
                             const std::vector<int64_t>& rows, const MixerOptions& options,
                             Tensor& h) {
  const int64_t t = h.dim(0), d = config_.hidden_size, inter = config_.intermediate_size;
  const float eps = static_cast<float>(config_.norm_eps);
  ASSIGN_OR_RETURN(Tensor x, Tensor::Empty(DType::kF32, {t, d}));
  ASSIGN_OR_RETURN(Tensor mixed, Tensor::Empty(DType::kF32, {t, d}));
  RETURN_IF_ERROR(RmsNorm(h.view(), block.attn_norm.view(), eps, d, x.view()));
  std::vector<MixerSegment> segments(batch.size());
  for (size_t s = 0; s < batch.size(); ++s) {
    segments[s] = {rows[s], static_cast<int64_t>(batch[s].tokens.size()),
                   batch[s].state.data + layer_offsets_[layer], *batch[s].state.position};
  }
  RETURN_IF_ERROR(block.mixer->Forward(x.view(), segments, options, mixed.view()));
  float* hp = h.data<float>();
  const float* mp = mixed.data<float>();
  for (int64_t j = 0; j < t * d; ++j) hp[j] += mp[j];
  RETURN_IF_ERROR(RmsNorm(h.view(), block.mlp_norm.view(), eps, d, x.view()));
  ASSIGN_OR_RETURN(Tensor gate, Tensor::Empty(DType::kF32, {t, inter}));
  ASSIGN_OR_RETURN(Tensor up, Tensor::Empty(DType::kF32, {t, inter}));
  RETURN_IF_ERROR(Linear(x.view(), block.gate_proj.view(), gate.view()));
  RETURN_IF_ERROR(Linear(x.view(), block.up_proj.view(), up.view()));
  RETURN_IF_ERROR(SwiGlu(gate.view(), up.view(), gate.view()));
  return Linear(gate.view(), block.down_proj.view(), h.view(), nullptr, /*accumulate=*/true);
}

absl::StatusOr<Tensor> Model::Forward(absl::Span<const SequenceInput> batch,
                                      const ForwardOptions& options) {
  if (options.chunk_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk size must be ≥ 1, got ", options.chunk_size));
  }
  const int64_t d = config_.hidden_size, v = config_.vocab_size;
  std::vector<int64_t> rows;  // first packed row of each sequence
  int64_t total = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceInput& in = batch[s];
    if (in.state.data == nullptr || in.state.position == nullptr ||
        in.state_floats != state_floats()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s, ": state missing or not made by this model"));
    }
    if (in.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " has no tokens"));
    }
    for (int32_t id : in.tokens) {
      if (id < 0 || id >= v) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": token id ", id,
                                                       " is outside the vocabulary [0, ", v, ")"));
      }
    }
    rows.push_back(total);
    total += static_cast<int64_t>(in.tokens.size());
  }
  ASSIGN_OR_RETURN(Tensor h, Tensor::Empty(DType::kF32, {total, d}));
  for (size_t s = 0; s < batch.size(); ++s) {
    for (size_t i = 0; i < batch[s].tokens.size(); ++i) {
      std::copy_n(embeddings_.data<float>() + int64_t{batch[s].tokens[i]} * d, d,
                  h.data<float>() + (rows[s] + static_cast<int64_t>(i)) * d);
    }
  }
  const MixerOptions mixer_options{options.mode, options.chunk_size};
  for (size_t l = 0; l < blocks_.size(); ++l) {
    RETURN_IF_ERROR(RunBlock(blocks_[l], static_cast<int>(l), batch, rows, mixer_options, h));
  }
  for (const SequenceInput& in : batch) {
    *in.state.position += static_cast<int64_t>(in.tokens.size());
  }
  // Final norm and LM head over the rows whose logits are wanted.
  Tensor last;
  const TensorView* rows_view = &h.view();
  if (!options.all_logits) {
    ASSIGN_OR_RETURN(last, Tensor::Empty(DType::kF32, {static_cast<int64_t>(batch.size()), d}));
    for (size_t s = 0; s < batch.size(); ++s) {
      const int64_t r = rows[s] + static_cast<int64_t>(batch[s].tokens.size()) - 1;
      std::copy_n(h.data<float>() + r * d, d, last.data<float>() + static_cast<int64_t>(s) * d);
    }
    rows_view = &last.view();
  }
  RETURN_IF_ERROR(
      RmsNorm(*rows_view, final_norm_.view(), static_cast<float>(config_.norm_eps), d, *rows_view));
  ASSIGN_OR_RETURN(Tensor logits, Tensor::Empty(DType::kF32, {rows_view->dim(0), v}));
  const Tensor& head = lm_head_.rank() > 0 ? lm_head_ : embeddings_;
  RETURN_IF_ERROR(Linear(*rows_view, head.view(), logits.view()));
  return logits;
}

}  // namespace linfer
