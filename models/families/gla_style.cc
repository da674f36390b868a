// LoadGlaStyleLayer: the config fields and weights gla and retnet share.
#include "models/families/gla_style.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/mixer.h"

namespace linfer {

absl::StatusOr<GlaStyleLayer> LoadGlaStyleLayer(const ModelConfig& config, int layer,
                                                WeightStore& store,
                                                const GlaStyleDefaults& defaults) {
  ConfigFields f(config.raw);
  GlaStyleLayer g;
  g.d = config.hidden_size;
  ASSIGN_OR_RETURN(double expand_k, f.Float("expand_k", defaults.expand_k));
  ASSIGN_OR_RETURN(double expand_v, f.Float("expand_v", defaults.expand_v));
  ASSIGN_OR_RETURN(g.h, f.Size("num_heads", defaults.num_heads));
  ASSIGN_OR_RETURN(int64_t kv_heads, f.Size("num_kv_heads", g.h));
  ASSIGN_OR_RETURN(std::optional<std::string> fmap, f.OptionalString("feature_map"));
  ASSIGN_OR_RETURN(bool use_output_gate, f.Bool("use_output_gate", true));
  ASSIGN_OR_RETURN(bool affine, f.Bool("elementwise_affine", true));
  ASSIGN_OR_RETURN(bool fuse_norm, f.Bool("fuse_norm", true));
  ASSIGN_OR_RETURN(g.key_dim, ScaledSize("hidden_size · expand_k", g.d, expand_k));
  ASSIGN_OR_RETURN(g.value_dim, ScaledSize("hidden_size · expand_v", g.d, expand_v));
  if (g.h <= 0 || kv_heads <= 0 || g.h % kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: num_heads (", g.h,
                                                   ") must be a positive multiple of "
                                                   "num_kv_heads (",
                                                   kv_heads, ")"));
  }
  g.groups = g.h / kv_heads;
  if (g.key_dim <= 0 || g.value_dim <= 0 || g.key_dim % g.h != 0 || g.value_dim % g.h != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: ", config.model_type, " key_dim (", g.key_dim, ") and value_dim (",
        g.value_dim, ") must be positive multiples of num_heads (", g.h, ")"));
  }
  g.dk = g.key_dim / g.h;
  g.dv = g.value_dim / g.h;
  if (fmap) {
    ASSIGN_OR_RETURN(g.feature_map, ParseActivation(*fmap));
  }
  auto matrix = [&](absl::string_view name, Shape shape) {
    return store.LoadMatrix(AttnName(layer, name), shape);
  };
  ASSIGN_OR_RETURN(g.q_proj, matrix("q_proj.weight", {g.key_dim, g.d}));
  ASSIGN_OR_RETURN(g.k_proj, matrix("k_proj.weight", {g.kv_key_dim(), g.d}));
  ASSIGN_OR_RETURN(g.v_proj, matrix("v_proj.weight", {g.kv_value_dim(), g.d}));
  ASSIGN_OR_RETURN(g.o_proj, matrix("o_proj.weight", {g.d, g.value_dim}));
  ASSIGN_OR_RETURN(Activation gate_act, ParseActivation(config.hidden_act));
  const bool fused = config.hidden_act == "swish" && fuse_norm && use_output_gate;
  ASSIGN_OR_RETURN(g.norm, OutputNormGate::Load(
                               store, layer, fused ? "g_norm_swish_gate" : "g_norm", affine,
                               use_output_gate, g.dv, g.value_dim, g.d, config.norm_eps, gate_act));
  return g;
}

}  // namespace linfer
