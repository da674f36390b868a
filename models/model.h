// A loaded language model (fla format, Qwen3.5/3.6 in transformers' format, transformers'
// Mamba2) on one device: embedding → N pre-norm blocks (token mixer + SwiGLU MLP, or for Qwen3.5
// MoE a mixture of experts (models/moe.h); RWKV-7: time mix + channel mix with LayerNorms;
// Mamba2: mixer only) → final norm → LM head, run over the
// packed tokens of a step's segments, each segment reading and writing its slot of a ModelStates.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/context.h"
#include "kernels/norm.h"
#include "kernels/segments.h"
#include "kernels/tensor.h"
#include "models/config.h"
#include "models/mixer.h"
#include "models/moe.h"
#include "models/state.h"

namespace linfer {

struct LoadOptions {
  Device device = Device::kCpu;
  // Matmul weights and the embedding table: f32, bf16, or f16 (CPU); arithmetic stays f32.
  DType matrix_dtype = DType::kF32;
  // The recurrent state's storage (f32 arithmetic either way): bf16 halves a slot on CUDA, for the
  // families whose recurrence is the shared op (not RWKV-7, not Mamba2). Conv states and token
  // shifts stay f32.
  DType state_dtype = DType::kF32;
  // The attention layers' keys and values (paged KV cache and sliding-window rings): f32, bf16
  // (half the bytes a token) or fp8 e4m3 (kF8E4M3, a quarter: scale 1, rounded to nearest even
  // and saturating at ±448, as vLLM's --kv-cache-dtype fp8 without calibrated scales), on every
  // device; attention reads every key and value as stored, so this step's own keys too, and
  // computes in f32.
  DType kv_dtype = DType::kF32;
  // fp8 checkpoints (models/fp8.h): their fp8 matmul weights kept as stored with their scales
  // (kKeep: the products read them as the values dequantizing on load gives — the CPU a block at
  // a time; CUDA by its fp8 GEMV, or widened to bf16 a chunk at a time for cuBLASLt; the
  // embedding table is dequantized on CUDA), or dequantized on load to matrix_dtype (kDequantize).
  // kAuto keeps them on the CPU and dequantizes them on CUDA (until a GPU run has passed CUDA's
  // fp8 tests and timed them).
  enum class Fp8Weights { kAuto, kKeep, kDequantize };
  Fp8Weights fp8_weights = Fp8Weights::kAuto;
  // Checkpoints without fp8 weights: quantize the matmul weights to fp8 on load (vLLM's
  // `--quantization fp8`; models/fp8.h QuantizeFp8: 128 × 128 blocks, not the embeddings, the LM
  // head or the small gate projections), held as kKeep holds them. A no-op for fp8 checkpoints.
  bool quantize_fp8 = false;
};

struct ForwardOptions {
  RecurrenceMode mode = RecurrenceMode::kAuto;
  int chunk_size = 64;
  bool all_logits = false;  // logits for every input token, not just each segment's last
};

// A step's inputs already on the device, at addresses the caller keeps (a CUDA graph replays a
// step with them: engine/decode_graphs.h): tokens I32 [tokens], the segment table I64
// [segments, 4], the last row of each segment I32 [segments] (unused with all_logits) and, for
// models with paged KV layers, the block tables (host copy and device copy, [segments,
// max_blocks] with max_blocks ≥ what every segment's slot holds).
struct StepDeviceInputs {
  TensorView tokens, table, last_rows;
  BlockTableView blocks;
};

// One step's input: token ids packed segment after segment, and the segment table (rows, slot,
// position). Every segment has ≥ 1 token; ids are in [0, vocab) (checked when requests are
// accepted, see ValidateTokenIds). With `on_device`, Forward uploads nothing and reads those
// buffers instead (they must hold the same tokens and table).
struct StepInput {
  absl::Span<const int32_t> tokens;
  absl::Span<const Segment> segments;
  const StepDeviceInputs* on_device = nullptr;
  // Without ForwardOptions::all_logits: the rows whose logits are computed, in this order (null:
  // each segment's last). The engine's prompt logprobs ask for every row of some segments.
  const std::vector<int32_t>* logit_rows = nullptr;
};

// InvalidArgument naming `what`[i] when a token id is outside [0, vocab).
absl::Status ValidateTokenIds(absl::Span<const int32_t> ids, int64_t vocab, absl::string_view what);

class Model {
 public:
  // Reads DIR/config.json and DIR/*.safetensors; every tensor is checked by name and shape.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::filesystem::path& dir,
                                                     const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  int64_t vocab_size() const { return config_.vocab_size; }
  Device device() const { return device_; }
  DType matrix_dtype() const { return matrix_dtype_; }  // the matmul weights' storage
  // Per layer, what one sequence keeps; and the bytes of its slot-resident part.
  const std::vector<LayerStateSpecs>& state_specs() const { return specs_; }
  int64_t state_bytes() const { return SlotStateBytes(specs_); }
  int64_t num_parameters() const { return num_parameters_; }
  // Bytes of every weight as the device holds it (an fp8 weight's scales included).
  int64_t weight_bytes() const { return weight_bytes_; }
  // Whether matmul weights are held as fp8: the checkpoint's kept as stored
  // (LoadOptions::fp8_weights), or quantized on load (quantized_on_load).
  bool fp8_kept() const { return fp8_kept_; }
  bool quantized_on_load() const { return quantized_on_load_; }
  // For reports (linfer info, Models.Info): the quant_method of the checkpoint's fp8 weights, or
  // "fp8" for weights quantized on load, else empty; and how they are held: "kept", "quantized"
  // or "dequantized" (empty without fp8 weights).
  std::string quantization() const;
  std::string fp8_weights() const;
  // Identity of config + weights; state blobs record it so a state is never loaded into
  // another model.
  uint64_t fingerprint() const { return fingerprint_; }

  // Runs every segment from its slot's state, updating the states in place. `logits` (f32 on the
  // model's device) is [segments, vocab], or [tokens, vocab] with all_logits. Scratch comes from
  // ctx.arena (not reset here); the caller owns positions (segments carry them) and, for models
  // with full-attention layers, reserves each segment's KV blocks first (ModelStates::ReserveKv).
  // One thread at a time per model: layers hand per-step values on through the model's
  // LayerLinks (RWKV-7's value residual).
  absl::Status Forward(const ExecContext& ctx, const StepInput& in, const ModelStates& states,
                       const TensorView& logits, const ForwardOptions& options = {}) const;

 private:
  struct Norm {  // RMSNorm weight, or RWKV-7's LayerNorm weight and bias (bias may be empty)
    Tensor w, b;
  };
  struct Block {
    Norm attn_norm, mlp_norm;        // mlp_norm unused by Mamba2 (no feed-forward)
    Tensor gate_up_proj, down_proj;  // gate_proj and up_proj stacked by rows: one GEMM
    std::unique_ptr<SparseMoe> moe;  // the MLP of MoE models (then gate_up_proj is empty)
    std::unique_ptr<TokenMixer> mixer;
    std::unique_ptr<TokenMixer> ffn;  // RWKV-7's channel mix (stateful) instead of the MLP
    size_t mixer_states = 0;          // the layer's states: the mixer's, then the ffn's
  };
  absl::Status BindWeights(WeightStore& store);
  absl::StatusOr<Norm> LoadNorm(WeightStore& store, const std::string& prefix) const;
  NormParams BlockNorm() const;  // the block and final RMSNorms (zero-centred for Qwen3.5)
  absl::Status ApplyNorm(const ExecContext& ctx, const TensorView& x, const Norm& norm,
                         const TensorView& y) const;
  // h ← h + r, then y = ApplyNorm(h) (one pass where the norm is an RMSNorm).
  absl::Status AddApplyNorm(const ExecContext& ctx, const TensorView& h, const TensorView& r,
                            const Norm& norm, const TensorView& y) const;
  absl::Status RunBlock(const ExecContext& ctx, const Block& block, const Segments& segs,
                        absl::Span<const TensorView> states, const MixerOptions& options,
                        const TensorView& h) const;

  ModelConfig config_;
  Device device_ = Device::kCpu;
  DType matrix_dtype_ = DType::kF32;
  Tensor embeddings_, lm_head_;  // lm_head_ is empty when tied
  Norm final_norm_, pre_norm_;   // pre_norm_: RWKV-7's LayerNorm on the embeddings (or empty)
  std::vector<Block> blocks_;
  std::unique_ptr<LayerLinks> links_ = std::make_unique<LayerLinks>();
  std::vector<LayerStateSpecs> specs_;
  int64_t num_parameters_ = 0;
  int64_t weight_bytes_ = 0;
  bool fp8_kept_ = false;
  bool quantized_on_load_ = false;
  uint64_t fingerprint_ = 0;
};

}  // namespace linfer
