// Random gated_deltanet checkpoints: projections ~ N(0, 1/fan_in), norms 1, fla-like gates.
#include "tests/testing/random_checkpoint.h"

#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/config.h"
#include "nlohmann/json.hpp"

namespace linfer::testing_util {

std::vector<int32_t> RandomTokens(int n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

absl::Status WriteRandomGdnCheckpoint(const std::filesystem::path& dir, const GdnShape& s) {
  std::filesystem::create_directories(dir);
  const int64_t dk = s.head_dim, dv = static_cast<int64_t>(dk * s.expand_v);
  const int64_t key = s.heads * dk, value = s.heads * dv;
  const int64_t inter = s.intermediate > 0 ? s.intermediate : DefaultIntermediateSize(s.hidden, 4);
  nlohmann::json config = {{"model_type", "gated_deltanet"},
                           {"architectures", {"GatedDeltaNetForCausalLM"}},
                           {"hidden_size", s.hidden},
                           {"num_hidden_layers", s.layers},
                           {"num_heads", s.heads},
                           {"head_dim", dk},
                           {"expand_v", s.expand_v},
                           {"intermediate_size", inter},
                           {"vocab_size", s.vocab},
                           {"bos_token_id", 1},
                           {"eos_token_id", 2},
                           {"norm_eps", 1e-6}};
  std::ofstream(dir / "config.json") << config.dump(2);

  std::mt19937_64 rng(s.seed);
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors;
  auto normal = [&](const std::string& name, std::vector<int64_t> shape, double std) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::normal_distribution<float> dist(0.0f, static_cast<float>(std));
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    tensors[name] = {std::move(shape), std::move(v)};
  };
  auto fill = [&](const std::string& name, std::vector<int64_t> shape, auto&& f) {
    std::vector<float> v(shape[0]);
    for (int64_t i = 0; i < shape[0]; ++i) v[i] = f(i);
    tensors[name] = {std::move(shape), std::move(v)};
  };
  auto ones = [](int64_t) { return 1.0f; };
  const double d = static_cast<double>(s.hidden);
  normal("model.embeddings.weight", {s.vocab, s.hidden}, 1.0);
  normal("lm_head.weight", {s.vocab, s.hidden}, 1.0 / std::sqrt(d));
  fill("model.norm.weight", {s.hidden}, ones);
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    fill(p + "attn_norm.weight", {s.hidden}, ones);
    fill(p + "mlp_norm.weight", {s.hidden}, ones);
    normal(p + "attn.q_proj.weight", {key, s.hidden}, 1 / std::sqrt(d));
    normal(p + "attn.k_proj.weight", {key, s.hidden}, 1 / std::sqrt(d));
    normal(p + "attn.v_proj.weight", {value, s.hidden}, 1 / std::sqrt(d));
    normal(p + "attn.g_proj.weight", {value, s.hidden}, 1 / std::sqrt(d));
    normal(p + "attn.a_proj.weight", {s.heads, s.hidden}, 1 / std::sqrt(d));
    normal(p + "attn.b_proj.weight", {s.heads, s.hidden}, 1 / std::sqrt(d));
    normal(p + "attn.o_proj.weight", {s.hidden, value}, 1 / std::sqrt(double(value)));
    normal(p + "attn.q_conv1d.weight", {key, 1, 4}, 0.5);
    normal(p + "attn.k_conv1d.weight", {key, 1, 4}, 0.5);
    normal(p + "attn.v_conv1d.weight", {value, 1, 4}, 0.5);
    fill(p + "attn.A_log", {s.heads},
         [&](int64_t h) { return std::log(1.0f + 15.0f * h / s.heads); });
    fill(p + "attn.dt_bias", {s.heads}, [](int64_t) { return -3.0f; });
    fill(p + "attn.o_norm.weight", {dv}, ones);
    normal(p + "mlp.gate_proj.weight", {inter, s.hidden}, 1 / std::sqrt(d));
    normal(p + "mlp.up_proj.weight", {inter, s.hidden}, 1 / std::sqrt(d));
    normal(p + "mlp.down_proj.weight", {s.hidden, inter}, 1 / std::sqrt(double(inter)));
  }
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t bytes = static_cast<int64_t>(t.second.size() * sizeof(float));
    header[name] = {
        {"dtype", "F32"}, {"shape", t.first}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << h;
  for (const auto& [name, t] : tensors) {
    out.write(reinterpret_cast<const char*>(t.second.data()),
              static_cast<std::streamsize>(t.second.size() * sizeof(float)));
  }
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", dir.string()));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ModelDirOrRandom(const std::string& dir) {
  if (!dir.empty()) return dir;
  const std::filesystem::path out = std::filesystem::temp_directory_path() / "linfer_bench_gdn";
  absl::Status st = WriteRandomGdnCheckpoint(out, {});
  if (!st.ok()) return st;
  return out.string();
}

}  // namespace linfer::testing_util
