// Hybrid model configs: fla's `attn` option (fla/models/hybrid.py normalize_hybrid_attention
// config) and Qwen3.5/3.6 (transformers' Qwen3_5TextConfig / Qwen3_5Config; the defaults and
// rules are in tests/models/reference/NOTES_qwen3_5.md with their source lines).
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/moe.h"
#include "models/config.h"

namespace linfer {
namespace {

using Json = nlohmann::json;

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: ", what));
}

absl::StatusOr<int64_t> Positive(const ConfigFields& f, absl::string_view key, int64_t def,
                                 int64_t max = kMaxModelDim) {
  ASSIGN_OR_RETURN(int64_t v, f.Int(key, def));
  if (v < 1 || v > max) {
    return Bad(absl::StrCat("'", key, "' must be in [1, ", max, "], got ", v));
  }
  return v;
}

// One fla attn spec (a dict) into the config's attention layers.
absl::Status AddFlaSpec(const Json& spec, ModelConfig* c) {
  if (!spec.is_object()) return Bad("each 'attn' spec must be an object");
  ConfigFields f(spec);
  if (!f.Has("layers") || !f.Has("num_heads")) {
    return Bad("an 'attn' spec needs 'layers' and 'num_heads'");
  }
  AttentionLayerConfig a;
  ASSIGN_OR_RETURN(a.num_heads, Positive(f, "num_heads", 0, 1 << 16));
  ASSIGN_OR_RETURN(a.num_kv_heads, Positive(f, "num_kv_heads", a.num_heads, 1 << 16));
  ASSIGN_OR_RETURN(a.window, f.Int("window_size", 0));
  ASSIGN_OR_RETURN(a.qkv_bias, f.Bool("qkv_bias", false));
  ASSIGN_OR_RETURN(a.rope_theta, f.Float("rope_theta", 10000.0));
  if (spec.contains("rope_theta") && spec["rope_theta"].is_null()) {
    return Bad("attn 'rope_theta' must be a number, not null");
  }
  if (a.window < 0 || a.window > (int64_t{1} << 24)) {
    return Bad(absl::StrCat("attn 'window_size' must be null or positive, got ", a.window));
  }
  if (!(a.rope_theta > 0) || !std::isfinite(a.rope_theta)) {
    return Bad("attn 'rope_theta' must be positive");
  }
  if (c->hidden_size % a.num_heads != 0 || a.num_heads % a.num_kv_heads != 0) {
    return Bad(absl::StrCat("attn: hidden_size (", c->hidden_size, ") must be a multiple of ",
                            "num_heads (", a.num_heads, "), itself a multiple of num_kv_heads (",
                            a.num_kv_heads, ")"));
  }
  a.head_dim = c->hidden_size / a.num_heads;
  a.rotary_dim = a.head_dim;
  if (a.head_dim % 2 != 0) return Bad(absl::StrCat("attn head dim ", a.head_dim, " must be even"));
  const Json& layers = spec["layers"];
  if (!layers.is_array()) return Bad("attn 'layers' must be a list of layer indices");
  for (const Json& l : layers) {
    if (!l.is_number_integer() || l.get<int64_t>() < 0 ||
        l.get<int64_t>() >= c->num_hidden_layers) {
      return Bad(absl::StrCat("attn layer index ", l.dump().substr(0, 32), " is not in [0, ",
                              c->num_hidden_layers, ")"));
    }
    if (!c->attention_layers.emplace(l.get<int64_t>(), a).second) {
      return Bad(absl::StrCat("attn layer ", l.get<int64_t>(), " is listed twice"));
    }
  }
  return absl::OkStatus();
}

// layer_types (legacy names remapped), else every full_attention_interval-th layer.
absl::StatusOr<std::vector<bool>> QwenAttentionLayers(const Json& text, int64_t n) {
  std::vector<bool> attention(static_cast<size_t>(n), false);
  auto it = text.find("layer_types");
  if (it == text.end() || it->is_null()) {
    ConfigFields f(text);
    ASSIGN_OR_RETURN(int64_t interval, Positive(f, "full_attention_interval", 4, 1 << 16));
    for (int64_t i = 0; i < n; ++i) attention[i] = (i + 1) % interval == 0;
    return attention;
  }
  if (!it->is_array() || static_cast<int64_t>(it->size()) != n) {
    return Bad(absl::StrCat("'layer_types' must list ", n, " layer types"));
  }
  for (int64_t i = 0; i < n; ++i) {
    const Json& t = (*it)[i];
    const std::string s = t.is_string() ? t.get<std::string>() : "";
    if (s == "full_attention" || s == "attention") {
      attention[i] = true;
    } else if (s != "linear_attention" && s != "mamba") {
      return Bad(absl::StrCat("layer_types[", i, "] must be linear_attention or full_attention, ",
                              "got ", t.dump().substr(0, 40)));
    }
  }
  return attention;
}

// rope_parameters (or the legacy rope_scaling, which transformers takes instead when it is a
// non-empty object) wins over top-level fields, then the defaults. The legacy "type" is
// rope_type's old name.
absl::Status QwenRope(const Json& text, AttentionLayerConfig* a) {
  Json rp = Json::object();
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = text.find(key);
    if (it == text.end() || it->is_null()) continue;
    if (!it->is_object()) {
      return Bad(absl::StrCat("'", key, "' must be an object, got ", it->dump().substr(0, 40)));
    }
    if (!it->empty()) rp = *it;
  }
  ConfigFields inner(rp), outer(text);
  ASSIGN_OR_RETURN(std::string legacy_type, inner.String("type", "default"));
  ASSIGN_OR_RETURN(std::string type, inner.String("rope_type", legacy_type));
  if (type == "mrope") type = "default";  // transformers' rewrite of Qwen2-VL's legacy name
  if (type != "default")
    return absl::UnimplementedError(absl::StrCat("config.json: rope_type '", type.substr(0, 32),
                                                 "' is not supported (only 'default')"));
  ASSIGN_OR_RETURN(double theta, outer.Float("rope_theta", 10000.0));
  ASSIGN_OR_RETURN(a->rope_theta, inner.Float("rope_theta", theta));
  ASSIGN_OR_RETURN(double partial, outer.Float("partial_rotary_factor", 0.25));
  ASSIGN_OR_RETURN(partial, inner.Float("partial_rotary_factor", partial));
  if (!(a->rope_theta > 0) || !std::isfinite(a->rope_theta) || !(partial > 0 && partial <= 1)) {
    return Bad("rope_theta must be positive and partial_rotary_factor in (0, 1]");
  }
  a->rotary_dim = static_cast<int64_t>(static_cast<double>(a->head_dim) * partial);
  if (a->rotary_dim < 2 || a->rotary_dim % 2 != 0) {
    return Bad(absl::StrCat("the rotary dim int(head_dim · partial_rotary_factor) = ",
                            a->rotary_dim, " must be even and ≥ 2"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseFlaHybridAttention(const Json& attn, ModelConfig* c) {
  if (attn.is_null()) return absl::OkStatus();
  if (attn.is_object()) return AddFlaSpec(attn, c);
  if (!attn.is_array()) return Bad("'attn' must be null, an object or a list of objects");
  for (const Json& spec : attn) RETURN_IF_ERROR(AddFlaSpec(spec, c));
  return absl::OkStatus();
}

absl::Status ParseQwen3_5Config(const Json& j, ModelConfig* c) {
  c->family = Family::kQwen3_5;
  c->qwen_layout = true;
  const bool next = c->model_type == "qwen3_next";
  const bool moe = next || c->model_type == "qwen3_5_moe" || c->model_type == "qwen3_5_moe_text";
  c->fused_gdn_projections = next;
  const bool multimodal = c->model_type == "qwen3_5" || c->model_type == "qwen3_5_moe";
  const std::string text_type = moe ? "qwen3_5_moe_text" : "qwen3_5_text";
  c->text = j;
  if (multimodal) {
    auto it = j.find("text_config");
    if (it != j.end() && !it->is_null() && !it->is_object()) {
      return Bad(absl::StrCat("'text_config' must be an object, got ", it->dump().substr(0, 40)));
    }
    // (null or absent: transformers' defaults, which the checkpoint's shapes then refuse)
    c->text = it != j.end() && it->is_object() ? *it : Json::object();
    const std::string sub = c->text.contains("model_type") && c->text["model_type"].is_string()
                                ? c->text["model_type"].get<std::string>()
                                : text_type;
    if (sub != text_type)
      return Bad(
          absl::StrCat("text_config.model_type '", sub.substr(0, 32), "' is not ", text_type));
    c->weight_prefix = "model.language_model.";
  }
  ConfigFields t(c->text), top(j);
  // Defaults: transformers' Qwen3_5TextConfig, Qwen3_5MoeTextConfig (no dense MLP width) or
  // Qwen3NextConfig.
  ASSIGN_OR_RETURN(c->vocab_size, Positive(t, "vocab_size", next ? 151936 : 248320, kMaxVocabSize));
  ASSIGN_OR_RETURN(c->hidden_size, Positive(t, "hidden_size", moe ? 2048 : 4096));
  // Qwen3-Next with num_experts 0 is a dense model (every layer's MLP of intermediate_size).
  ASSIGN_OR_RETURN(const int64_t experts, t.Int("num_experts", next ? 512 : 256));
  if (moe && !(next && experts == 0)) {
    MoeConfig& m = c->moe;
    ASSIGN_OR_RETURN(m.experts, Positive(t, "num_experts", next ? 512 : 256, kMaxMoeExperts));
    ASSIGN_OR_RETURN(m.top_k, Positive(t, "num_experts_per_tok", next ? 10 : 8, kMaxMoeTopK));
    ASSIGN_OR_RETURN(m.intermediate, Positive(t, "moe_intermediate_size", 512));
    ASSIGN_OR_RETURN(m.shared_intermediate, Positive(t, "shared_expert_intermediate_size", 512));
    if (m.top_k > m.experts) {
      return Bad(absl::StrCat("num_experts_per_tok (", m.top_k, ") must not exceed num_experts (",
                              m.experts, ")"));
    }
  }
  if (!moe || next) {
    ASSIGN_OR_RETURN(c->intermediate_size, Positive(t, "intermediate_size", next ? 5632 : 12288));
  }
  ASSIGN_OR_RETURN(c->num_hidden_layers, Positive(t, "num_hidden_layers",
                                                  next  ? 48
                                                  : moe ? 40
                                                        : 32,
                                                  kMaxModelLayers));
  if (next && c->moe.experts > 0) {  // Qwen3_5MoeTextConfig deletes these three: every layer
                                     // MoE, the weights renormalised
    MoeConfig& m = c->moe;
    ASSIGN_OR_RETURN(m.normalize, t.Bool("norm_topk_prob", true));
    ASSIGN_OR_RETURN(m.sparse_step, Positive(t, "decoder_sparse_step", 1, kMaxModelLayers));
    // Entries name the layers that keep a dense MLP; any other value matches no layer (as in
    // transformers' `layer_idx not in mlp_only_layers`).
    auto it = c->text.find("mlp_only_layers");
    if (it != c->text.end() && !it->is_null()) {
      if (!it->is_array() || it->size() > (size_t{1} << 16)) {
        return Bad("'mlp_only_layers' must be a list of at most 65536 layer indices");
      }
      for (const Json& l : *it) {
        if (!l.is_number_integer()) {
          return Bad(
              absl::StrCat("mlp_only_layers entry ", l.dump().substr(0, 32), " is not an integer"));
        }
        const int64_t layer = l.get<int64_t>();
        if (layer >= 0 && layer < c->num_hidden_layers) m.dense_layers.push_back(layer);
      }
    }
  }
  ASSIGN_OR_RETURN(c->norm_eps, t.Float("rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(c->hidden_act, t.String("hidden_act", "silu"));
  ASSIGN_OR_RETURN(c->max_position_embeddings, t.Int("max_position_embeddings", 32768));
  if (c->max_position_embeddings < 1) {
    return Bad(absl::StrCat("'max_position_embeddings' must be positive, got ",
                            c->max_position_embeddings));
  }
  // The loaded model's own flag: the top level for the multimodal class, the text config's else.
  ASSIGN_OR_RETURN(c->tie_word_embeddings,
                   (multimodal ? top : t).Bool("tie_word_embeddings", false));
  for (auto [key, id] : {std::pair{"bos_token_id", &c->bos_token_id},
                         {"eos_token_id", &c->eos_token_id},
                         {"pad_token_id", &c->pad_token_id}}) {
    ASSIGN_OR_RETURN(*id, t.OptionalInt(key));
    if (*id && (**id < 0 || **id >= c->vocab_size)) *id = std::nullopt;  // generation_config rules
  }
  if (c->hidden_act != "silu" && c->hidden_act != "swish") {
    return absl::UnimplementedError(absl::StrCat(
        "config.json: hidden_act '", c->hidden_act.substr(0, 32), "' is not supported (silu)"));
  }
  if (!(c->norm_eps >= 0 && c->norm_eps <= 1)) return Bad("'rms_norm_eps' must be in [0, 1]");
  AttentionLayerConfig a;
  a.qwen_gated = true;
  ASSIGN_OR_RETURN(a.num_heads, Positive(t, "num_attention_heads", 16, 1 << 16));
  ASSIGN_OR_RETURN(a.num_kv_heads, Positive(t, "num_key_value_heads", moe ? 2 : 4, 1 << 16));
  ASSIGN_OR_RETURN(a.head_dim, Positive(t, "head_dim", 256, 1 << 16));
  ASSIGN_OR_RETURN(a.qkv_bias, t.Bool("attention_bias", false));
  if (a.num_heads % a.num_kv_heads != 0) {
    return Bad(absl::StrCat("num_attention_heads (", a.num_heads,
                            ") must be a multiple of num_key_value_heads (", a.num_kv_heads, ")"));
  }
  RETURN_IF_ERROR(QwenRope(c->text, &a));
  ASSIGN_OR_RETURN(std::vector<bool> attention, QwenAttentionLayers(c->text, c->num_hidden_layers));
  for (int64_t i = 0; i < c->num_hidden_layers; ++i) {
    if (attention[i]) c->attention_layers.emplace(i, a);
  }
  return absl::OkStatus();
}

}  // namespace linfer
