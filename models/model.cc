// Model loading and the batched forward pass, as op calls on the model's device.
#include "models/model.h"

#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/activation.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/transfer.h"
#include "models/families/families.h"
#include "models/kv_cache.h"

namespace linfer {

absl::Status ValidateTokenIds(absl::Span<const int32_t> ids, int64_t vocab,
                              absl::string_view what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "[", i, "] = ", ids[i], " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

std::string Model::quantization() const {
  return quantized_on_load_ ? "fp8" : config_.quantization.method;
}

std::string Model::fp8_weights() const {
  if (quantization().empty()) return "";
  return quantized_on_load_ ? "quantized" : fp8_kept_ ? "kept" : "dequantized";
}

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::filesystem::path& dir,
                                                   const LoadOptions& options) {
  if (!MatrixDTypeSupported(options.device, options.matrix_dtype) ||
      options.matrix_dtype == DType::kF8E4M3) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight dtype ", absl::AsciiStrToLower(DTypeName(options.matrix_dtype)),
                     " on ", DeviceName(options.device), ": f32 or bf16 (or f16 on the cpu)"));
  }
  using Fp8Weights = LoadOptions::Fp8Weights;
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  ASSIGN_OR_RETURN(WeightStore store, WeightStore::Open(dir));
  // auto keeps them on the CPU; on CUDA only `keep` does (its fp8 products are opt-in until a
  // GPU run has passed their tests and timed them).
  const bool keep_fp8 =
      config.quantization.fp8.strategy != Fp8Scheme::Strategy::kNone &&
      (options.fp8_weights == Fp8Weights::kKeep ||
       (options.device == Device::kCpu && options.fp8_weights == Fp8Weights::kAuto));
  const bool quantize =
      options.quantize_fp8 && config.quantization.fp8.strategy == Fp8Scheme::Strategy::kNone;
  store.set_target({options.device, options.matrix_dtype, keep_fp8, quantize});
  store.set_fp8(config.quantization.fp8);
  std::unique_ptr<Model> m(new Model());
  m->config_ = std::move(config);
  m->device_ = options.device;
  m->matrix_dtype_ = options.matrix_dtype;
  m->fp8_kept_ = keep_fp8 || quantize;
  m->quantized_on_load_ = quantize;
  absl::Status s = m->BindWeights(store);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("loading ", dir.string(), ": ", s.message()));
  }
  m->fingerprint_ = store.Fingerprint(Fnv1a64(m->config_.raw.dump()));
  if (options.state_dtype != DType::kF32) {
    const Family family = m->config_.family;
    if (options.state_dtype != DType::kBF16 || options.device != Device::kCuda ||
        family == Family::kRwkv7 || family == Family::kMamba2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "state dtype ", absl::AsciiStrToLower(DTypeName(options.state_dtype)), " on ",
          DeviceName(options.device), " for ", m->config_.model_type,
          ": only f32, or bf16 on CUDA for the shared-recurrence families (not rwkv7, mamba2)"));
    }
    for (LayerStateSpecs& layer : m->specs_) {
      for (StateSpec& spec : layer) {
        if (spec.name == "recurrent") spec.dtype = options.state_dtype;
      }
    }
  }
  if (options.kv_dtype != DType::kF32) {
    if (options.kv_dtype != DType::kBF16 && options.kv_dtype != DType::kF8E4M3) {
      return absl::InvalidArgumentError(
          absl::StrCat("KV dtype ", absl::AsciiStrToLower(DTypeName(options.kv_dtype)),
                       ": only f32, bf16 or fp8 (f8_e4m3)"));
    }
    for (LayerStateSpecs& layer : m->specs_) {
      for (StateSpec& spec : layer) {
        if (spec.name == "kv") spec.dtype = options.kv_dtype;  // attention layers' paged or ring KV
      }
    }
  }
  // A multimodal Qwen3.5 checkpoint also holds the vision tower and the multi-token-prediction
  // head, which a text server does not run. An fp8 checkpoint with static activation scales holds
  // them as `*.input_scale` (compressed-tensors, vLLM) or `*activation_scale` (transformers'
  // FP8Linear and fused experts), and an fp8 KV cache's or attention's as `*.k_scale`,
  // `*.v_scale`, `*.kv_scale`, `*.q_scale` (AutoFP8: `k_proj.output_scale`): linfer computes with
  // unquantized activations, keys and values.
  constexpr absl::string_view kActivationScales[] = {
      ".input_scale", "activation_scale", ".output_scale", ".k_scale",
      ".v_scale",     ".kv_scale",        ".q_scale"};
  std::vector<std::string> unused, skipped;
  int64_t activation_scales = 0;
  for (std::string& name : store.Unused()) {
    if (!m->config_.quantization.method.empty() &&
        absl::c_any_of(kActivationScales,
                       [&](absl::string_view suffix) { return absl::EndsWith(name, suffix); })) {
      ++activation_scales;
      continue;
    }
    if (name == "lm_head.weight" && m->config_.tie_word_embeddings) {
      Log(LogLevel::kInfo, absl::StrCat(dir.string(), ": lm_head.weight not used: the config ties ",
                                        "the output to the embeddings (as transformers does)"));
      continue;
    }
    const bool extra =
        m->config_.qwen_layout && (name.starts_with("model.visual.") || name.starts_with("mtp.") ||
                                   name.starts_with("model.mtp."));
    (extra ? skipped : unused).push_back(std::move(name));
  }
  if (!skipped.empty()) {
    Log(LogLevel::kInfo, absl::StrCat(dir.string(), ": ignoring ", skipped.size(),
                                      " vision-tower and MTP tensors (model.visual.*, mtp.*)"));
  }
  if (activation_scales > 0) {
    // An fp8 KV cache (--kv_dtype fp8) stores keys and values with scale 1, as vLLM does without
    // calibrated scales: the checkpoint's are not applied either way.
    Log(LogLevel::kInfo,
        absl::StrCat(
            dir.string(), ": ignoring ", activation_scales,
            " fp8 activation and KV scales (*.input_scale, *activation_scale, "
            "*.output_scale, *.k_scale, *.v_scale, *.kv_scale, *.q_scale): activations are "
            "not quantized",
            KvBytesPerToken(m->specs_) == 0 ? " (and the model keeps no KV cache)"
            : options.kv_dtype == DType::kF8E4M3
                ? ", and the KV cache is fp8 e4m3 with scale 1"
                : absl::StrCat(", and the KV cache is ",
                               absl::AsciiStrToLower(DTypeName(options.kv_dtype)))));
  }
  if (!unused.empty()) {
    const size_t n = unused.size();
    unused.resize(std::min<size_t>(n, 5));
    Log(LogLevel::kWarning, absl::StrCat(dir.string(), ": ", n, " checkpoint tensors not used: ",
                                         absl::StrJoin(unused, ", "), n > 5 ? ", ..." : ""));
  }
  return m;
}

absl::StatusOr<Model::Norm> Model::LoadNorm(WeightStore& store, const std::string& prefix) const {
  Norm n;
  const int64_t d = config_.hidden_size;
  ASSIGN_OR_RETURN(n.w, store.Load(prefix + ".weight", {d}));
  if (config_.family == Family::kRwkv7) {
    ASSIGN_OR_RETURN(bool bias, ConfigFields(config_.raw).Bool("norm_bias", true));
    if (bias) {
      ASSIGN_OR_RETURN(n.b, store.Load(prefix + ".bias", {d}));
    }
  }
  return n;
}

absl::Status Model::BindWeights(WeightStore& store) {
  const int64_t d = config_.hidden_size, v = config_.vocab_size, i = config_.intermediate_size;
  const std::string& pre = config_.weight_prefix;
  const bool qwen = config_.qwen_layout;
  const bool rwkv = config_.family == Family::kRwkv7, mamba = config_.family == Family::kMamba2;
  // Mamba2's old embedding key (`backbone.embedding.`) is remapped by transformers and fla.
  const std::string emb =
      qwen ? "embed_tokens.weight"
      : mamba && !store.Has(pre + "embeddings.weight") && store.Has(pre + "embedding.weight")
          ? "embedding.weight"
          : "embeddings.weight";
  ASSIGN_OR_RETURN(embeddings_, store.LoadTable(pre + emb, {v, d}));
  ASSIGN_OR_RETURN(final_norm_, LoadNorm(store, pre + (mamba ? "norm_f" : "norm")));
  // Tied: the embeddings, even when the file holds an lm_head.weight (transformers re-ties it).
  if (!config_.tie_word_embeddings) {
    ASSIGN_OR_RETURN(lm_head_, store.LoadTable("lm_head.weight", {v, d}));
  }
  ASSIGN_OR_RETURN(bool norm_first, ConfigFields(config_.raw).Bool("norm_first", true));
  if (rwkv && norm_first) {
    ASSIGN_OR_RETURN(pre_norm_, LoadNorm(store, LayerPrefix(config_, 0) + "pre_norm"));
  }
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    Block b;
    const std::string p = LayerPrefix(config_, l);
    ASSIGN_OR_RETURN(b.attn_norm, LoadNorm(store, p + (qwen    ? "input_layernorm"
                                                       : mamba ? "norm"
                                                               : "attn_norm")));
    if (!mamba) {
      ASSIGN_OR_RETURN(b.mlp_norm, LoadNorm(store, p + (qwen   ? "post_attention_layernorm"
                                                        : rwkv ? "ffn_norm"
                                                               : "mlp_norm")));
    }
    if (rwkv) {
      ASSIGN_OR_RETURN(b.ffn, CreateRwkv7ChannelMix(config_, l, store));
    } else if (IsMoeLayer(config_, l)) {
      ASSIGN_OR_RETURN(b.moe, SparseMoe::Load(config_, l, store));
    } else if (!mamba) {
      ASSIGN_OR_RETURN(b.gate_up_proj, store.LoadStacked({{p + "mlp.gate_proj.weight", {i, d}},
                                                          {p + "mlp.up_proj.weight", {i, d}}}));
      ASSIGN_OR_RETURN(b.down_proj, store.LoadMatrix(p + "mlp.down_proj.weight", {d, i}));
    }
    ASSIGN_OR_RETURN(b.mixer, CreateMixer(config_, l, store, links_.get()));
    LayerStateSpecs specs = b.mixer->state_specs();
    b.mixer_states = specs.size();
    if (b.ffn) {
      for (StateSpec& s : b.ffn->state_specs()) specs.push_back(std::move(s));
    }
    specs_.push_back(std::move(specs));
    blocks_.push_back(std::move(b));
  }
  num_parameters_ = store.loaded_elements();
  weight_bytes_ = store.loaded_bytes();
  return absl::OkStatus();
}

NormParams Model::BlockNorm() const {
  return {static_cast<float>(config_.norm_eps), config_.hidden_size, config_.qwen_layout};
}

absl::Status Model::ApplyNorm(const ExecContext& ctx, const TensorView& x, const Norm& norm,
                              const TensorView& y) const {
  if (config_.family == Family::kRwkv7)
    return LayerNorm(ctx, x, norm.w.view(), norm.b.view(), BlockNorm(), y);
  return RmsNorm(ctx, x, norm.w.view(), BlockNorm(), y);
}

absl::Status Model::AddApplyNorm(const ExecContext& ctx, const TensorView& h, const TensorView& r,
                                 const Norm& norm, const TensorView& y) const {
  if (config_.family == Family::kRwkv7) {
    RETURN_IF_ERROR(Add(ctx, h, r, h));
    return ApplyNorm(ctx, h, norm, y);
  }
  return AddRmsNorm(ctx, h, r, norm.w.view(), BlockNorm(), y);  // one pass
}

absl::Status Model::RunBlock(const ExecContext& ctx, const Block& block, const Segments& segs,
                             absl::Span<const TensorView> states, const MixerOptions& options,
                             const TensorView& h) const {
  const int64_t t = h.dim(0), d = config_.hidden_size, inter = config_.intermediate_size;
  ASSIGN_OR_RETURN(TensorView x, Scratch(ctx, t, d));
  ASSIGN_OR_RETURN(TensorView mixed, Scratch(ctx, t, d));
  // The norms write the mixer's and the MLP's inputs in the dtype their projections take (bf16
  // on CUDA with LINFER_CUDA_BF16_INPUTS: kernels/gemm.h MatmulInputDType); RWKV-7's LayerNorm
  // and the FFN mixers take f32.
  const bool rms = config_.family != Family::kRwkv7;
  const absl::Span<const TensorView> mixer_states = states.subspan(0, block.mixer_states);
  if (rms && block.mixer->FoldsInputNorm(ctx, t)) {  // h is a plain RMSNorm's input here
    RETURN_IF_ERROR(block.mixer->ForwardNormed(ctx, h, {block.attn_norm.w.view(), BlockNorm()},
                                               segs, mixer_states, options, mixed));
  } else {
    TensorView mixer_x = x;
    if (rms && block.mixer->InputDType(ctx) == DType::kBF16) {
      ASSIGN_OR_RETURN(mixer_x, Scratch(ctx, DType::kBF16, {t, d}));
    }
    RETURN_IF_ERROR(ApplyNorm(ctx, h, block.attn_norm, mixer_x));
    RETURN_IF_ERROR(block.mixer->Forward(ctx, mixer_x, segs, mixer_states, options, mixed));
  }
  if (config_.family == Family::kMamba2) return Add(ctx, h, mixed, h);
  if (block.ffn) {
    RETURN_IF_ERROR(AddApplyNorm(ctx, h, mixed, block.mlp_norm, x));
    RETURN_IF_ERROR(
        block.ffn->Forward(ctx, x, segs, states.subspan(block.mixer_states), options, mixed));
    return Add(ctx, h, mixed, h);
  }
  if (block.moe) {  // its router and experts read x in f32
    RETURN_IF_ERROR(AddApplyNorm(ctx, h, mixed, block.mlp_norm, x));
    return block.moe->Forward(ctx, x, h);
  }
  TensorView mlp_x = x;
  if (rms && MatmulInputDType(ctx, block.gate_up_proj.view()) == DType::kBF16) {
    ASSIGN_OR_RETURN(mlp_x, Scratch(ctx, DType::kBF16, {t, d}));
  }
  RETURN_IF_ERROR(AddApplyNorm(ctx, h, mixed, block.mlp_norm, mlp_x));
  ASSIGN_OR_RETURN(TensorView gate_up, Scratch(ctx, t, 2 * inter));
  RETURN_IF_ERROR(Linear(ctx, mlp_x, block.gate_up_proj.view(), gate_up));
  // h += (silu(gate) ⊙ up) W_down, the activation folded into the product's read of its input.
  return SwiGluLinear(ctx, gate_up.Cols(0, inter), gate_up.Cols(inter, inter),
                      block.down_proj.view(), h, /*accumulate=*/true);
}

namespace {

// The shapes and devices of a step's device-resident inputs (their contents are the caller's).
absl::Status CheckDeviceInputs(const StepInput& in, const ModelStates& states,
                               const ForwardOptions& options) {
  const StepDeviceInputs& d = *in.on_device;
  const int64_t n = static_cast<int64_t>(in.segments.size());
  const int64_t total = static_cast<int64_t>(in.tokens.size());
  auto bad = [](const char* what, const TensorView& t) {
    return absl::InvalidArgumentError(
        absl::StrCat("Forward: device input ", what, " ", t.DebugString(), " does not fit"));
  };
  if (d.tokens.dtype() != DType::kI32 || d.tokens.rank() != 1 || d.tokens.dim(0) != total ||
      d.tokens.device() != states.device()) {
    return bad("tokens", d.tokens);
  }
  if (d.table.dtype() != DType::kI64 || d.table.rank() != 2 || d.table.dim(0) != n ||
      d.table.dim(1) != 4 || d.table.device() != states.device()) {
    return bad("table", d.table);
  }
  if (!options.all_logits && in.logit_rows == nullptr &&
      (d.last_rows.dtype() != DType::kI32 || d.last_rows.rank() != 1 || d.last_rows.dim(0) != n)) {
    return bad("last_rows", d.last_rows);
  }
  if (states.has_kv()) {
    const BlockTableView& b = d.blocks;
    if (b.block_tokens != states.kv().block_tokens() ||
        static_cast<int64_t>(b.host.size()) != n * b.max_blocks || b.device.rank() != 2 ||
        b.device.dim(0) != n || b.device.dim(1) != b.max_blocks) {
      return bad("block tables", b.device);
    }
    for (int64_t s = 0; s < n; ++s) {
      if (states.kv().held(static_cast<int>(in.segments[s].slot)) > b.max_blocks) {
        return bad("block tables (narrower than a slot's blocks)", b.device);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Model::Forward(const ExecContext& ctx, const StepInput& in, const ModelStates& states,
                            const TensorView& logits, const ForwardOptions& options) const {
  if (ctx.device != device_ || states.device() != device_ ||
      states.specs().size() != specs_.size()) {
    return absl::InvalidArgumentError(
        "Forward: context, states and model are on different "
        "devices or the states belong to another model");
  }
  const int64_t d = config_.hidden_size, v = config_.vocab_size;
  const int64_t n = static_cast<int64_t>(in.segments.size());
  const Segments host_segs{in.segments, {}};
  const int64_t total = host_segs.total_tokens();
  if (total != static_cast<int64_t>(in.tokens.size()) || n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Forward: ", in.tokens.size(), " tokens for segments covering ", total));
  }
  for (int64_t s = 0, row = 0; s < n; ++s) {
    const Segment& seg = in.segments[s];
    if (seg.row_begin != row || seg.num_tokens < 1 || seg.slot < 0 ||
        seg.slot >= states.num_slots() || seg.position < 0) {
      return absl::InvalidArgumentError(absl::StrCat("Forward: segment ", s, " (rows ",
                                                     seg.row_begin, "+", seg.num_tokens, ", slot ",
                                                     seg.slot, ") is not a valid packed segment"));
    }
    if (states.has_kv() &&
        states.kv().BlocksNeeded(static_cast<int>(seg.slot), seg.position + seg.num_tokens) > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Forward: slot ", seg.slot, " has no KV blocks reserved for positions up to ",
          seg.position + seg.num_tokens, " (ModelStates::ReserveKv)"));
    }
    row += seg.num_tokens;
  }
  const bool listed = !options.all_logits && in.logit_rows != nullptr;
  if (listed) {
    for (const int32_t r : *in.logit_rows) {
      if (r < 0 || r >= total) {
        return absl::InvalidArgumentError(
            absl::StrCat("Forward: logit row ", r, " is not one of the step's ", total, " rows"));
      }
    }
  }
  const int64_t out_rows = options.all_logits ? total
                           : listed           ? static_cast<int64_t>(in.logit_rows->size())
                                              : n;
  if (logits.dtype() != DType::kF32 || logits.rank() != 2 || logits.dim(0) != out_rows ||
      logits.dim(1) != v) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: logits ", logits.DebugString(),
                                                   " must be F32[", out_rows, ", ", v, "]"));
  }
  // Step inputs to the device: tokens, the segment table and (without all_logits) last rows.
  if (in.on_device != nullptr) RETURN_IF_ERROR(CheckDeviceInputs(in, states, options));
  TensorView tokens, table;
  if (in.on_device != nullptr) {
    tokens = in.on_device->tokens;
    table = in.on_device->table;
  } else {
    ASSIGN_OR_RETURN(tokens, Scratch(ctx, DType::kI32, {total}));
    RETURN_IF_ERROR(Upload(ctx, in.tokens.data(), tokens));
    ASSIGN_OR_RETURN(table, Scratch(ctx, DType::kI64, {n, 4}));
    RETURN_IF_ERROR(Upload(ctx, in.segments.data(), table));
  }
  // The last rows' indices go up with the other inputs, before any kernel: eager steps then queue
  // all their launches without the host waiting on the stream (kernels/op_timer.h relies on it).
  TensorView last_rows;
  if (!listed && !options.all_logits && in.on_device != nullptr) {
    last_rows = in.on_device->last_rows;
  } else if (!options.all_logits) {
    std::vector<int32_t> last;  // each segment's last row, unless the caller listed the rows
    if (!listed) {
      for (const Segment& s : in.segments) {
        last.push_back(static_cast<int32_t>(s.row_begin + s.num_tokens - 1));
      }
    }
    const std::vector<int32_t>& up = listed ? *in.logit_rows : last;
    ASSIGN_OR_RETURN(last_rows, Scratch(ctx, DType::kI32, {out_rows}));
    RETURN_IF_ERROR(Upload(ctx, up.data(), last_rows));
  }
  Segments segs{in.segments, table, {}};
  BlockTables blocks;
  if (states.has_kv() && in.on_device != nullptr) {
    segs.blocks = in.on_device->blocks;
  } else if (states.has_kv()) {
    ASSIGN_OR_RETURN(blocks, states.kv().StepTables(ctx, in.segments));
    segs.blocks = blocks.view();
  }

  ASSIGN_OR_RETURN(TensorView h, Scratch(ctx, total, d));
  RETURN_IF_ERROR(Embedding(ctx, embeddings_.view(), tokens, h));
  if (pre_norm_.w.rank() > 0) RETURN_IF_ERROR(ApplyNorm(ctx, h, pre_norm_, h));
  const MixerOptions mixer_options{options.mode, options.chunk_size};
  for (size_t l = 0; l < blocks_.size(); ++l) {
    RETURN_IF_ERROR(
        RunBlock(ctx, blocks_[l], segs, states.layer(static_cast<int>(l)), mixer_options, h));
  }
  TensorView rows = h;
  if (!options.all_logits) {
    ASSIGN_OR_RETURN(rows, Scratch(ctx, out_rows, d));
    RETURN_IF_ERROR(GatherRows(ctx, h, last_rows, rows));
  }
  const Tensor& head = lm_head_.rank() > 0 ? lm_head_ : embeddings_;
  // The final norm writes the LM head's input in the dtype it takes, as the block norms do.
  TensorView head_x = rows;
  if (config_.family != Family::kRwkv7 && MatmulInputDType(ctx, head.view()) == DType::kBF16) {
    ASSIGN_OR_RETURN(head_x, Scratch(ctx, DType::kBF16, {rows.dim(0), d}));
  }
  RETURN_IF_ERROR(ApplyNorm(ctx, rows, final_norm_, head_x));
  return Linear(ctx, head_x, head.view(), logits);
}

}  // namespace linfer
