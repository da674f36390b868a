// Bad checkpoints get a clear error naming what is wrong, never a crash: truncated files,
// invalid header JSON, offsets past the end, overlapping tensors, unknown dtypes, missing or
// misshapen tensors, unknown model_type, inconsistent dims, unsupported options.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <tuple>

#include "models/generation_config.h"
#include "models/model.h"
#include "models/safetensors.h"
#include "models/weights.h"
#include "nlohmann/json.hpp"

namespace linfer {
namespace {

namespace fs = std::filesystem;

class LoadErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  // Writes a safetensors file from a header JSON string and a data buffer.
  fs::path WriteRaw(const std::string& header, const std::string& data,
                    const std::string& name = "model.safetensors") {
    const fs::path p = dir_ / name;
    std::ofstream out(p, std::ios::binary);
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << header << data;
    return p;
  }
  // A valid checkpoint directory copied from a reference fixture (fla, or hybrid).
  fs::path CopyFixture(const std::string& name) {
    const fs::path dst = dir_ / name;
    fs::copy(fs::path(LINFER_FLA_FIXTURES) / name, dst, fs::copy_options::recursive);
    return dst;
  }
  // Writes `value` over element `element` of the F32 tensor `name` in DIR/model.safetensors.
  static void OverwriteF32(const fs::path& dir, const std::string& name, int64_t element,
                           float value) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
        SafetensorsFile::Open(dir / "model.safetensors");
    ASSERT_TRUE(f.ok()) << f.status();
    const SafetensorsFile::Entry& e = (*f)->entries().at(name);
    ASSERT_EQ(e.dtype, "F32");
    uint64_t header = 0;
    std::ifstream(dir / "model.safetensors", std::ios::binary)
        .read(reinterpret_cast<char*>(&header), 8);
    std::fstream io(dir / "model.safetensors", std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(static_cast<std::streamoff>(8 + header + e.begin + element * sizeof(float)));
    io.write(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  fs::path CopyHybrid(const std::string& name) {
    const fs::path dst = dir_ / name;
    fs::remove_all(dst);
    fs::copy(fs::path(LINFER_HYBRID_FIXTURES) / name, dst, fs::copy_options::recursive);
    return dst;
  }
  // Hybrid fixture `name` with `patch`'s fields set in its text config (text_config of the
  // multimodal layout): loading it fails with an error containing `needle`.
  void ExpectHybridConfigError(const std::string& name, const nlohmann::json& patch,
                               const std::string& needle) {
    const fs::path d = CopyHybrid(name);
    nlohmann::json c = ReadJson(d / "config.json");
    for (const auto& [key, value] : patch.items()) {
      (c.contains("text_config") ? c["text_config"] : c)[key] = value;
    }
    WriteJson(d / "config.json", c);
    SCOPED_TRACE(name + " " + patch.dump());
    ExpectLoadError(d, needle);
    fs::remove_all(d);
  }
  // Hybrid fixture `name` without tensor `victim`: loading it names the tensor.
  void ExpectHybridMissingTensor(const std::string& name, const std::string& victim) {
    const fs::path d = CopyHybrid(name);
    DropTensor(d, victim);
    ExpectLoadError(d, "missing tensor '" + victim + "'");
    fs::remove_all(d);
  }
  static nlohmann::json ReadJson(const fs::path& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in);
  }
  static void WriteJson(const fs::path& p, const nlohmann::json& j) {
    std::ofstream(p) << j.dump();
  }

  // Loads `dir` and expects an error whose message contains `needle`.
  static void ExpectLoadError(const fs::path& dir, const std::string& needle) {
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(dir);
    ASSERT_FALSE(m.ok()) << "loaded although it should fail with: " << needle;
    EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status();
  }

  // Rewrites `dir`'s model.safetensors without tensor `victim` (a valid file that lacks it).
  void DropTensor(const fs::path& dir, const std::string& victim) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
        SafetensorsFile::Open(dir / "model.safetensors");
    ASSERT_TRUE(f.ok()) << f.status();
    nlohmann::json header = nlohmann::json::object();
    std::string data;
    for (const auto& [name, e] : (*f)->entries()) {
      if (name == victim) continue;
      absl::StatusOr<absl::string_view> bytes = (*f)->Data(name);  // any dtype (fp8 too)
      ASSERT_TRUE(bytes.ok());
      header[name] = {{"dtype", e.dtype},
                      {"shape", e.shape},
                      {"data_offsets", {data.size(), data.size() + bytes->size()}}};
      data.append(bytes->data(), bytes->size());
    }
    f->reset();
    fs::remove(dir / "model.safetensors");
    const fs::path saved = dir_;
    dir_ = dir;
    WriteRaw(header.dump(), data);
    dir_ = saved;
  }

  fs::path dir_;
};

const char kOneTensor[] = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST_F(LoadErrorsTest, ValidFileOpens) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(WriteRaw(
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})",
      std::string(8, '\0')));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  absl::StatusOr<TensorView> v = (*f)->View("a");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->dtype(), DType::kBF16);
  EXPECT_EQ(v->numel(), 4);
}

TEST_F(LoadErrorsTest, SafetensorsStructuralErrors) {
  struct Bad {
    std::string header, data, needle;
  };
  const Bad cases[] = {
      {"{not json", std::string(8, '\0'), "not valid JSON"},
      {"[1,2]", "", "not an object"},
      {kOneTensor, std::string(4, '\0'), "past the end of the data"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'),
       "needs 12 bytes"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       std::string(12, '\0'), "overlaps"},
      {R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'),
       "unknown dtype 'Q4'"},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0'),
       "non-negative"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::string(8, '\0'),
       "begin > end"},
      {R"({"a":{"dtype":"F32","shape":[2]}})", std::string(8, '\0'), "data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0'),
       "gap of 4"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       std::string(8, '\0'), "the header names 'a' twice"},
  };
  for (const Bad& b : cases) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
        SafetensorsFile::Open(WriteRaw(b.header, b.data));
    ASSERT_FALSE(f.ok()) << b.header;
    EXPECT_NE(f.status().message().find(b.needle), std::string::npos) << f.status();
    EXPECT_NE(f.status().message().find("model.safetensors"), std::string::npos) << f.status();
  }
}

TEST_F(LoadErrorsTest, TruncatedFiles) {
  const fs::path p = WriteRaw(kOneTensor, std::string(8, '\0'));
  const std::string whole = [&] {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  for (size_t keep : {size_t{0}, size_t{5}, size_t{8}, size_t{20}, whole.size() - 1}) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << whole.substr(0, keep);
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(p);
    EXPECT_FALSE(f.ok()) << "kept " << keep << " bytes";
  }
  EXPECT_EQ(SafetensorsFile::Open(dir_ / "absent.safetensors").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(LoadErrorsTest, UnsupportedDtypeIsRefusedWhenUsed) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(
      WriteRaw(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')));
  ASSERT_TRUE(f.ok());
  absl::StatusOr<TensorView> v = (*f)->View("a");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("I64"), std::string::npos);
}

TEST_F(LoadErrorsTest, MissingTensorIsNamed) {
  const fs::path d = CopyFixture("gdn_default");
  const std::string victim = "model.layers.1.attn.dt_bias";
  DropTensor(d, victim);
  ExpectLoadError(d, "missing tensor '" + victim + "'");
}

TEST_F(LoadErrorsTest, ConfigErrors) {
  struct Edit {
    const char* key;
    nlohmann::json value;
    const char* needle;
  };
  const Edit edits[] = {
      {"model_type", "mamba9", "unsupported model_type 'mamba9'"},
      {"hidden_size", 48, "has shape"},  // weights no longer match the config
      {"num_heads", 3, "has shape"},
      {"num_v_heads", 3, "num_v_heads (3) must be a multiple of num_heads (2)"},
      {"head_dim", 0, "positive"},
      {"vocab_size", -1, "'vocab_size' must be positive"},
      {"hidden_size", "big", "field 'hidden_size' must be an integer"},
      {"attn", {{"layers", {1}}, {"num_heads", 2}}, "model.layers.1.attn.q_proj.weight' has shape"},
      {"attnres_block_size", 2, "attnres_block_size"},
      {"hidden_act", "gelu", "hidden_act 'gelu'"},
      // Sizes whose products overflowed (undefined behaviour) before a shape could disagree.
      {"head_dim", int64_t{1} << 62, "'head_dim' must be at most 65536"},
      {"num_v_heads", int64_t{1} << 40, "'num_v_heads' must be at most 65536"},
      {"expand_v", 1e300, "head_dim · expand_v"},
      {"expand_v", 1e-30, "head_dim · expand_v"},
  };
  for (const Edit& e : edits) {
    const fs::path d = CopyFixture("gdn_default");
    nlohmann::json c = ReadJson(d / "config.json");
    c[e.key] = e.value;
    WriteJson(d / "config.json", c);
    ExpectLoadError(d, e.needle);
    fs::remove_all(d);
  }
  for (const char* fixture : {"deltanet_default", "gla_default", "linear_attn_hadamard"}) {
    for (const auto& [key, value, needle] :
         {std::tuple<const char*, double, const char*>{"expand_k", 1e300, "hidden_size · expand_k"},
          {"expand_v", -2, "hidden_size · expand_v"},
          {"num_heads", 1e12, "'num_heads' must be at most 65536"}}) {
      SCOPED_TRACE(std::string(fixture) + " " + key);
      const fs::path d = CopyFixture(fixture);
      nlohmann::json c = ReadJson(d / "config.json");
      c[key] = std::string(key) == "num_heads" ? nlohmann::json(int64_t{1000000000000})
                                               : nlohmann::json(value);
      WriteJson(d / "config.json", c);
      ExpectLoadError(d, needle);
      fs::remove_all(d);
    }
  }
  const fs::path d = CopyFixture("gdn_default");
  std::ofstream(d / "config.json") << "{\"model_type\": ";
  ExpectLoadError(d, "not valid JSON");
}

// Qwen3.5 checkpoints (both layouts) with one thing wrong: the error names the field or tensor.
TEST_F(LoadErrorsTest, HybridConfigErrors) {
  if (!fs::exists(fs::path(LINFER_HYBRID_FIXTURES) / "qwen35_text_f32")) {
    GTEST_SKIP() << "hybrid fixtures not written (" << LINFER_HYBRID_FIXTURES << ")";
  }
  struct Edit {
    const char* fixture;
    const char* key;  // in the text config (text_config of the multimodal layout)
    nlohmann::json value;
    const char* needle;
  };
  const Edit edits[] = {
      {"qwen35_text_f32",
       "layer_types",
       {"linear_attention", "sliding_attention", "full_attention", "linear_attention"},
       "layer_types[1] must be linear_attention or full_attention"},
      {"qwen35_text_f32", "layer_types", {"linear_attention"}, "'layer_types' must list 4"},
      {"qwen35_text_f32", "num_attention_heads", 3,
       "num_attention_heads (3) must be a multiple of num_key_value_heads (2)"},
      {"qwen35_text_f32", "linear_num_value_heads", 3,
       "linear_num_value_heads (3) must be a multiple of linear_num_key_heads (2)"},
      {"qwen35_text_f32", "head_dim", 16, "self_attn.q_proj.weight' has shape"},
      {"qwen35_text_f32", "linear_key_head_dim", 8, "linear_attn.in_proj_qkv.weight' has shape"},
      {"qwen35_text_f32", "max_position_embeddings", -5,
       "'max_position_embeddings' must be "
       "positive"},
      {"qwen35_text_f32", "hidden_act", "gelu", "hidden_act 'gelu'"},
      {"qwen35_text_f32", "rope_parameters", {{"rope_type", "yarn"}}, "rope_type 'yarn'"},
      // transformers reads a legacy rope_scaling instead, and its "type" as rope_type
      {"qwen35_text_f32", "rope_scaling", {{"type", "yarn"}, {"factor", 4.0}}, "rope_type 'yarn'"},
      {"qwen35_text_f32",
       "rope_scaling",
       {{"type", "linear"}, {"factor", 2.0}},
       "rope_type 'linear'"},
      {"qwen35_text_f32", "rope_parameters", "x", "'rope_parameters' must be an object, got \"x\""},
      {"qwen35_text_f32", "rope_scaling", 4, "'rope_scaling' must be an object"},
      // ("type": "mrope" is default RoPE, as transformers has it: this one fails on its theta)
      {"qwen35_text_f32",
       "rope_scaling",
       {{"type", "mrope"}, {"rope_theta", -1}},
       "rope_theta must be positive"},
      {"qwen35_vlm_f32", "num_key_value_heads", 0, "num_key_value_heads"},
      {"qwen35_vlm_f32", "model_type", "llama", "text_config.model_type 'llama'"},
      // mixture of experts
      {"qwen35moe_text_fused", "num_experts_per_tok", 9,
       "num_experts_per_tok (9) must not exceed num_experts (8)"},
      {"qwen35moe_text_fused", "num_experts", 7, "mlp.gate.weight' has shape"},
      {"qwen35moe_text_fused", "moe_intermediate_size", 0, "'moe_intermediate_size' must be in"},
      {"qwen35moe_text_fused", "moe_intermediate_size", 20, "mlp.experts.gate_up_proj' has shape"},
      {"qwen35moe_text_fused", "shared_expert_intermediate_size", 16,
       "mlp.shared_expert.gate_proj.weight' has shape"},
      {"qwen35moe_text_fused", "num_experts_per_tok", 65,
       "'num_experts_per_tok' must be in [1, 64]"},
      {"qwen35moe_vlm_bf16_per_expert", "moe_intermediate_size", 20,
       "mlp.experts.0.gate_proj.weight' has shape"},
      {"qwen35moe_vlm_bf16_per_expert", "model_type", "qwen3_5_text",
       "text_config.model_type 'qwen3_5_text' is not qwen3_5_moe_text"},
      // Qwen3-Next
      {"qwen3next_f32", "mlp_only_layers", {"x"}, "mlp_only_layers entry \"x\" is not an integer"},
      {"qwen3next_f32", "mlp_only_layers", "all", "'mlp_only_layers' must be a list"},
      {"qwen3next_f32", "decoder_sparse_step", 0, "'decoder_sparse_step' must be in"},
      {"qwen3next_f32", "mlp_only_layers", {2}, "missing tensor 'model.layers.1.mlp.gate.weight'"},
      {"qwen3next_f32", "norm_topk_prob", "yes", "'norm_topk_prob' must be true or false"},
      {"qwen3next_f32", "linear_num_value_heads", 8, "linear_attn.in_proj_qkvz.weight' has shape"},
      // a dense config over MoE tensors: the dense MLP's tensors are missing, by name
      {"qwen35moe_text_fused", "model_type", "qwen3_5_text", "mlp.gate_proj.weight"},
  };
  for (const Edit& e : edits) ExpectHybridConfigError(e.fixture, {{e.key, e.value}}, e.needle);
  // Qwen3.5's tensors under a Qwen3-Next config (dense MLPs, as this checkpoint has): its fused
  // projection is named as missing.
  ExpectHybridConfigError("qwen35_text_f32",
                          {{"model_type", "qwen3_next"}, {"mlp_only_layers", {0, 1, 2, 3}}},
                          "missing tensor 'model.layers.0.linear_attn.in_proj_qkvz.weight'");
  // A multimodal config whose text_config is not an object is named as such (it was taken as
  // absent: every text tensor then had the "wrong shape").
  const fs::path d = CopyHybrid("qwen35_vlm_f32");
  nlohmann::json c = ReadJson(d / "config.json");
  c["text_config"] = "x";
  WriteJson(d / "config.json", c);
  ExpectLoadError(d, "'text_config' must be an object, got \"x\"");
  fs::remove_all(d);
}

// A Qwen3-Next config whose fused projection would have 2^33 rows: the shape mismatch is named
// before anything of that size is built (it once ended in std::bad_alloc).
TEST_F(LoadErrorsTest, HugeFusedProjectionIsNamedNotAllocated) {
  if (!fs::exists(fs::path(LINFER_HYBRID_FIXTURES) / "qwen3next_f32")) {
    GTEST_SKIP() << "hybrid fixtures not written (" << LINFER_HYBRID_FIXTURES << ")";
  }
  ExpectHybridConfigError("qwen3next_f32",
                          {{"linear_num_key_heads", 1},
                           {"linear_num_value_heads", 65536},
                           {"linear_value_head_dim", 65536}},
                          "linear_attn.in_proj_qkvz.weight' has shape");
}

// A Qwen3.5 MoE checkpoint missing one expert tensor (either layout): the error names it.
TEST_F(LoadErrorsTest, MoeMissingTensorIsNamed) {
  if (!fs::exists(fs::path(LINFER_HYBRID_FIXTURES) / "qwen35moe_text_fused")) {
    GTEST_SKIP() << "hybrid fixtures not written (" << LINFER_HYBRID_FIXTURES << ")";
  }
  for (auto [fixture, victim] :
       {std::pair{"qwen35moe_text_fused", "model.layers.1.mlp.experts.down_proj"},
        {"qwen35moe_text_fused", "model.layers.3.mlp.shared_expert_gate.weight"},
        {"qwen35moe_text_fused", "model.layers.0.mlp.gate.weight"},
        {"qwen35moe_vlm_bf16_per_expert",
         "model.language_model.layers.2.mlp.experts.5.up_proj.weight"},
        {"qwen35moe_vlm_bf16_per_expert",
         "model.language_model.layers.0.mlp.shared_expert.down_proj.weight"}}) {
    ExpectHybridMissingTensor(fixture, victim);
  }
}

// Block-wise fp8 checkpoints with one thing wrong in quantization_config or the scales: the error
// names the field or tensor.
TEST_F(LoadErrorsTest, Fp8CheckpointErrors) {
  if (!fs::exists(fs::path(LINFER_HYBRID_FIXTURES) / "qwen35_text_fp8")) {
    GTEST_SKIP() << "hybrid fixtures not written (" << LINFER_HYBRID_FIXTURES << ")";
  }
  const nlohmann::json fp8 = {{"quant_method", "fp8"}, {"weight_block_size", {24, 40}}};
  const std::pair<nlohmann::json, const char*> edits[] = {
      {nullptr,
       "tensor 'model.layers.0.mlp.gate_proj.weight' is stored as F8_E4M3, but "
       "config.json has no quantization_config"},
      {{{"quant_method", "gptq"}, {"bits", 4}}, "quant_method 'gptq' is not supported"},
      {{{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}},
       "scale tensor 'model.layers.0.mlp.gate_proj.weight_scale_inv' has shape [4, 2]"},
      {{{"quant_method", "fp8"}, {"weight_block_size", {40, 24}}}, "in blocks of 40 x 24"},
      // no weight_block_size: per-tensor `weight_scale`, which this checkpoint does not have
      {{{"quant_method", "fp8"}},
       "fp8 tensor 'model.layers.0.mlp.gate_proj.weight' has no scale tensor "
       "'model.layers.0.mlp.gate_proj.weight_scale'"},
      {{{"quant_method", "compressed-tensors"},
        {"format", "float-quantized"},
        {"config_groups",
         {{"group_0",
           {{"weights", {{"type", "float"}, {"num_bits", 8}, {"strategy", "channel"}}}}}}}},
       "has no scale tensor 'model.layers.0.mlp.gate_proj.weight_scale'"},
      {{{"quant_method", "fp8"}, {"weight_block_size", {24, 40}}, {"fmt", "e5m2"}}, "fmt 'e5m2'"},
  };
  for (const auto& [value, needle] : edits) {
    ExpectHybridConfigError("qwen35_text_fp8", {{"quantization_config", value}}, needle);
  }
  // The fixture as written loads (each edit above is what breaks it).
  const fs::path d = CopyHybrid("qwen35_text_fp8");
  ASSERT_EQ(ReadJson(d / "config.json")["quantization_config"]["weight_block_size"],
            fp8["weight_block_size"]);
  ASSERT_TRUE(Model::Load(d).ok());
  DropTensor(d, "model.layers.3.mlp.down_proj.weight_scale_inv");
  ExpectLoadError(d,
                  "fp8 tensor 'model.layers.3.mlp.down_proj.weight' has no scale tensor "
                  "'model.layers.3.mlp.down_proj.weight_scale_inv'");
}

TEST_F(LoadErrorsTest, HybridMissingTensorIsNamed) {
  if (!fs::exists(fs::path(LINFER_HYBRID_FIXTURES) / "qwen35_text_f32")) {
    GTEST_SKIP() << "hybrid fixtures not written (" << LINFER_HYBRID_FIXTURES << ")";
  }
  for (const char* victim :
       {"model.layers.2.self_attn.q_norm.weight", "model.layers.0.linear_attn.A_log",
        "model.layers.1.linear_attn.conv1d.weight", "lm_head.weight"}) {
    ExpectHybridMissingTensor("qwen35_text_f32", victim);
  }
}

// A KV cache dtype other than f32, bf16 or fp8 is refused, naming it.
TEST_F(LoadErrorsTest, UnsupportedKvDTypeIsNamed) {
  if (!fs::exists(fs::path(LINFER_HYBRID_FIXTURES) / "qwen35_text_f32")) {
    GTEST_SKIP() << "hybrid fixtures not written (" << LINFER_HYBRID_FIXTURES << ")";
  }
  LoadOptions options;
  options.kv_dtype = DType::kF16;
  const absl::StatusOr<std::unique_ptr<Model>> m =
      Model::Load((fs::path(LINFER_HYBRID_FIXTURES) / "qwen35_text_f32").string(), options);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("KV dtype f16"), std::string::npos) << m.status();
}

TEST_F(LoadErrorsTest, WrongShapeIsNamed) {
  const fs::path d = CopyFixture("deltanet_default");
  nlohmann::json c = ReadJson(d / "config.json");
  c["conv_size"] = 3;
  WriteJson(d / "config.json", c);
  ExpectLoadError(d, "tensor 'model.layers.0.attn.q_conv1d.weight' has shape");
}

// A matmul weight stored in the dtype it is loaded as keeps its bytes (no f32 round trip); one
// stored in another dtype is converted (f32 → bf16 rounds to nearest even).
TEST_F(LoadErrorsTest, SixteenBitWeightsStoredAsLoadedKeepTheirBytes) {
  const std::string name = "model.layers.0.attn.q_proj.weight";
  for (const char* fixture : {"gdn_bf16", "gdn_default"}) {
    SCOPED_TRACE(fixture);
    absl::StatusOr<WeightStore> store = WeightStore::Open(CopyFixture(fixture));
    ASSERT_TRUE(store.ok()) << store.status();
    store->set_target({Device::kCpu, DType::kBF16});
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
        SafetensorsFile::Open(fs::path(LINFER_FLA_FIXTURES) / fixture / "model.safetensors");
    ASSERT_TRUE(f.ok()) << f.status();
    absl::StatusOr<TensorView> stored = store->Stored(name, (*f)->entries().at(name).shape);
    ASSERT_TRUE(stored.ok()) << stored.status();
    EXPECT_EQ(stored->dtype(), std::string(fixture) == "gdn_bf16" ? DType::kBF16 : DType::kF32);
    const Shape shape = stored->shape();
    absl::StatusOr<Tensor> w = store->LoadMatrix(name, shape);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_EQ(w->dtype(), DType::kBF16);
    const uint16_t* got = w->data<const uint16_t>();
    for (int64_t i = 0; i < w->numel(); ++i) {
      uint16_t want;
      if (stored->dtype() == DType::kBF16) {
        std::memcpy(&want, static_cast<const char*>(stored->raw()) + 2 * i, 2);
      } else {
        float f;
        std::memcpy(&f, static_cast<const char*>(stored->raw()) + 4 * i, 4);
        want = F32ToBf16(f);
      }
      ASSERT_EQ(got[i], want) << "element " << i;
    }
  }
}

// Stacked matmul weights: the parts' rows in order, at the target dtype; a part of another width or
// a missing part is refused by name.
TEST_F(LoadErrorsTest, StackedWeightsKeepThePartsInOrder) {
  std::string data;
  for (int i = 0; i < 17; ++i) {
    const float v = 0.5f * static_cast<float>(i) - 3.0f;
    data.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  WriteRaw(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
           R"("b":{"dtype":"F32","shape":[1,3],"data_offsets":[24,36]},)"
           R"("c":{"dtype":"F32","shape":[2,4],"data_offsets":[36,68]}})",
           data);
  absl::StatusOr<WeightStore> store = WeightStore::Open(dir_);
  ASSERT_TRUE(store.ok()) << store.status();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    store->set_target({Device::kCpu, dtype});
    absl::StatusOr<Tensor> w = store->LoadStacked({{"a", {2, 3}}, {"b", {1, 3}}});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_EQ(w->shape(), Shape({3, 3}));
    ASSERT_EQ(w->dtype(), dtype);
    for (int i = 0; i < 9; ++i) {
      const float want = 0.5f * static_cast<float>(i) - 3.0f;
      if (dtype == DType::kF32) {
        EXPECT_EQ(w->data<const float>()[i], want) << i;
      } else {
        EXPECT_EQ(w->data<const uint16_t>()[i], F32ToBf16(want)) << i;
      }
    }
  }
  absl::StatusOr<Tensor> wide = store->LoadStacked({{"a", {2, 3}}, {"c", {2, 4}}});
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("'c' is not a matrix as wide as 'a'"), std::string::npos)
      << wide.status();
  absl::StatusOr<Tensor> missing = store->LoadStacked({{"a", {2, 3}}, {"nope", {1, 3}}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos) << missing.status();
  EXPECT_FALSE(store->LoadStacked({}).ok());
}

// f16 weights (--weight_dtype f16) refuse a matmul weight beyond f16's range instead of turning it
// into infinity; f32 and bf16 load the same file.
TEST_F(LoadErrorsTest, F16WeightsRefuseOutOfRangeValues) {
  const fs::path d = CopyFixture("gla_default");
  const std::string victim = "model.layers.0.attn.g_proj.weight";
  OverwriteF32(d, victim, 5, 1e5f);
  absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(d, {Device::kCpu, DType::kF16});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("tensor '" + victim + "' holds 100000 at element 5"),
            std::string::npos)
      << m.status();
  EXPECT_NE(m.status().message().find("f16"), std::string::npos) << m.status();
  for (DType ok : {DType::kF32, DType::kBF16}) {
    EXPECT_TRUE(Model::Load(d, {Device::kCpu, ok}).ok()) << DTypeName(ok);
  }
}

// A weight holding NaN or an infinity (a corrupt download or conversion) is refused at load,
// naming the tensor and the element, whatever the weights become; every request used to fail
// instead, blaming the sequence's state.
TEST_F(LoadErrorsTest, NonFiniteWeightsAreRefusedByName) {
  const std::string victim = "model.layers.0.attn.g_proj.weight";
  const fs::path d = CopyFixture("gla_default");
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    OverwriteF32(d, victim, 7, bad);
    const std::string want =
        absl::StrCat("tensor '", victim, "' holds ", std::isnan(bad) ? "NaN" : "an infinity",
                     " at element 7: the checkpoint is corrupt");
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(d, {Device::kCpu, dtype});
      ASSERT_FALSE(m.ok()) << DTypeName(dtype);
      EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
      EXPECT_NE(m.status().message().find(want), std::string::npos) << m.status();
    }
  }
}

TEST_F(LoadErrorsTest, IndexNamesOnlyFilesOfTheDirectory) {
  const fs::path d = CopyFixture("gla_default");
  for (const char* shard : {"/etc/passwd", "../gla_default/model.safetensors", ".."}) {
    WriteJson(d / "model.safetensors.index.json", {{"weight_map", {{"model.norm.weight", shard}}}});
    ExpectLoadError(d, "not a file name in the checkpoint directory");
  }
}

// A directory or a FIFO where a file belongs is refused by name (a FIFO used to block the load
// for ever, a directory as the shard index to abort the process).
TEST_F(LoadErrorsTest, FilesThatAreNotRegularAreRefusedNotWaitedOn) {
  for (const char* name : {"config.json", "model.safetensors", "model.safetensors.index.json"}) {
    for (const bool fifo : {false, true}) {
      SCOPED_TRACE(std::string(name) + (fifo ? " as a FIFO" : " as a directory"));
      const fs::path d = CopyFixture("gla_default");
      fs::remove(d / name);
      if (fifo) {
        ASSERT_EQ(::mkfifo((d / name).c_str(), 0600), 0);
      } else {
        fs::create_directory(d / name);
      }
      ExpectLoadError(d, "is not a regular file");
      fs::remove_all(d);
    }
  }
}

// generation_config.json's eos_token_id nested 150,000 deep was copied recursively (SIGSEGV).
TEST_F(LoadErrorsTest, DeepGenerationConfigIsRefused) {
  std::string deep;
  for (int i = 0; i < 150000; ++i) deep += '[';
  deep += '0';
  for (int i = 0; i < 150000; ++i) deep += ']';
  std::ofstream(dir_ / "generation_config.json") << "{\"eos_token_id\": " << deep << "}";
  absl::StatusOr<GenerationDefaults> d = LoadGenerationDefaults(dir_);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("nested deeper than"), std::string::npos) << d.status();
  std::ofstream(dir_ / "generation_config.json") << "{\"eos_token_id\": [1, 2";
  d = LoadGenerationDefaults(dir_);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("malformed JSON"), std::string::npos) << d.status();
}

TEST_F(LoadErrorsTest, MissingFiles) {
  ExpectLoadError(dir_ / "nope", "config.json");
  const fs::path d = CopyFixture("gla_default");
  fs::remove(d / "model.safetensors");
  ExpectLoadError(d, "no *.safetensors file");
}

}  // namespace
}  // namespace linfer
