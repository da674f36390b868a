// A loaded fla-format language model on the CPU: embedding → N pre-norm blocks (token mixer +
// SwiGLU MLP) → final RMSNorm → LM head, run over a batch of sequences with their own states.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/tensor.h"
#include "models/config.h"
#include "models/mixer.h"

namespace linfer {

// One sequence's recurrent state for every layer (recurrent + conv + normaliser blocks, f32,
// laid out layer after layer as the model's state_floats() says) and its token count.
// Copyable: a copy is a fork.
struct SequenceState {
  std::vector<float> data;
  int64_t position = 0;  // tokens consumed so far
};

// Where a sequence's state lives: `data` has the model's state_floats() floats (a
// SequenceState, or a slot of the engine's state pool); `position` counts consumed tokens.
struct StateRef {
  float* data = nullptr;
  int64_t* position = nullptr;
};

struct SequenceInput {
  SequenceInput(absl::Span<const int32_t> t, SequenceState* s)
      : tokens(t),
        state{s->data.data(), &s->position},
        state_floats(static_cast<int64_t>(s->data.size())) {}
  SequenceInput(absl::Span<const int32_t> t, StateRef s, int64_t floats)
      : tokens(t), state(s), state_floats(floats) {}
  absl::Span<const int32_t> tokens;
  StateRef state;        // read and advanced by Forward
  int64_t state_floats;  // must equal the model's state_floats()
};

struct ForwardOptions {
  RecurrenceMode mode = RecurrenceMode::kAuto;
  int chunk_size = 64;
  bool all_logits = false;  // logits for every input token, not just each sequence's last
};

class Model {
 public:
  // Reads DIR/config.json and DIR/*.safetensors; every tensor is checked by name and shape.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::filesystem::path& dir);

  const ModelConfig& config() const { return config_; }
  int64_t vocab_size() const { return config_.vocab_size; }
  // f32 values in one sequence's state, and their bytes.
  int64_t state_floats() const { return layer_offsets_.back(); }
  int64_t state_bytes() const { return state_floats() * static_cast<int64_t>(sizeof(float)); }
  int64_t num_parameters() const { return num_parameters_; }
  // Identity of config + weights; state blobs record it so a state is never loaded into
  // another model.
  uint64_t fingerprint() const { return fingerprint_; }
  SequenceState NewState() const;

  // Runs every sequence's tokens from its state, advancing the states. Returns f32 logits:
  // [Σ tokens, vocab] with all_logits, else [batch, vocab] (each sequence's last token).
  // Every sequence needs ≥ 1 token; token ids must be in [0, vocab).
  absl::StatusOr<Tensor> Forward(absl::Span<const SequenceInput> batch,
                                 const ForwardOptions& options = {});

 private:
  struct Block {
    Tensor attn_norm, mlp_norm, gate_proj, up_proj, down_proj;
    std::unique_ptr<TokenMixer> mixer;
  };
  absl::Status BindWeights(WeightStore& store);
  absl::Status RunBlock(const Block& block, int layer, absl::Span<const SequenceInput> batch,
                        const std::vector<int64_t>& rows, const MixerOptions& options, Tensor& h);

  ModelConfig config_;
  Tensor embeddings_, final_norm_, lm_head_;  // lm_head_ is empty when tied
  std::vector<Block> blocks_;
  std::vector<int64_t> layer_offsets_;  // state block of layer i: [offsets[i], offsets[i+1])
  int64_t num_parameters_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace linfer
