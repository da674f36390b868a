// config.json parsing on its own (no checkpoint): every numeric field is range-checked before it
// is converted, so huge or out-of-range numbers get an error naming the field, never UB.
#include "models/config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace linfer {
namespace {

const char kBase[] =
    R"({"model_type": "gated_deltanet", "hidden_size": 64, "num_hidden_layers": 2,
        "vocab_size": 96)";

// kBase plus `extra` members (a leading comma is added).
std::string Config(const std::string& extra) {
  return std::string(kBase) + (extra.empty() ? "" : ", " + extra) + "}";
}

void ExpectError(const std::string& text, const std::string& needle1, const std::string& needle2) {
  absl::StatusOr<ModelConfig> c = ParseModelConfigText(text);
  ASSERT_FALSE(c.ok()) << "accepted: " << text;
  EXPECT_NE(c.status().message().find(needle1), std::string::npos) << c.status();
  EXPECT_NE(c.status().message().find(needle2), std::string::npos) << c.status();
}

TEST(ConfigTest, ParsesTextLikeLoadModelConfig) {
  absl::StatusOr<ModelConfig> c = ParseModelConfigText(
      Config(R"("intermediate_size": 96, "bos_token_id": 1, "eos_token_id": 2)"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, Family::kGatedDeltaNet);
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->intermediate_size, 96);
  EXPECT_EQ(c->eos_token_id, 2);
  // An integral float is an integer (some exporters write 64.0).
  c = ParseModelConfigText(Config(R"("intermediate_size": 96.0)"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->intermediate_size, 96);
  ExpectError("{\"model_type\": ", "config.json", "not valid JSON");
  ExpectError("[1]", "config.json", "not a JSON object");
}

TEST(ConfigTest, HugeNumbersInIntegerFieldsAreErrorsNotUb) {
  // Each of these used to convert a double or uint64 beyond int64 (UB or a wrapped value).
  for (const char* value : {"1e300", "-1e300", "9.3e18", "-9.3e18", "18446744073709551615",
                            "9223372036854775808", "1.8446744073709552e19"}) {
    ExpectError(Config(std::string("\"intermediate_size\": ") + value), "'intermediate_size'",
                "integer");
  }
  ExpectError(R"({"model_type": "gla", "hidden_size": 1e300})", "'hidden_size'", "integer");
  ExpectError(Config(R"("pad_token_id": 1e19)"), "'pad_token_id'", "integer");
}

TEST(ConfigTest, SizesAreBounded) {
  ExpectError(Config(R"("intermediate_size": 4611686018427387904)"), "'intermediate_size'",
              "at most");
  ExpectError(R"({"model_type": "gla", "hidden_size": 4611686018427387904})", "'hidden_size'",
              "at most");
  ExpectError(R"({"model_type": "gla", "num_hidden_layers": 4294967296})", "'num_hidden_layers'",
              "at most");
  // Token ids are int32: a larger vocabulary cannot be addressed.
  ExpectError(R"({"model_type": "gla", "vocab_size": 2147483648})", "'vocab_size'", "at most");
  // hidden_ratio feeds the default intermediate size (a double -> int64 conversion).
  ExpectError(Config(R"("hidden_ratio": 1e300)"), "'hidden_ratio'", "too large");
  ExpectError(Config(R"("hidden_ratio": 1e-300)"), "'intermediate_size'", "positive");
}

TEST(ConfigTest, FloatsAreFiniteAndInRange) {
  // norm_eps is converted to float in the forward pass; 1e300 has no float value.
  ExpectError(Config(R"("norm_eps": 1e300)"), "'norm_eps'", "[0, 1]");
  ExpectError(Config(R"("norm_eps": -1e-6)"), "'norm_eps'", "[0, 1]");
  absl::StatusOr<ModelConfig> c = ParseModelConfigText(Config(R"("norm_eps": 1e-5)"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-5);
}

TEST(ConfigTest, SpecialTokenIdsAreInsideTheVocabulary) {
  // The engine keeps token ids as int32 and compares them with sampled tokens.
  ExpectError(Config(R"("eos_token_id": 4294967298)"), "'eos_token_id'", "[0, 96)");
  ExpectError(Config(R"("bos_token_id": 96)"), "'bos_token_id'", "[0, 96)");
  ExpectError(Config(R"("eos_token_id": -1)"), "'eos_token_id'", "[0, 96)");
}

TEST(ConfigTest, DeepNestingIsRefusedNotAStackOverflow) {
  // Copying or printing a 300,000-deep value recursed once per level and overflowed the stack.
  const int depth = 300000;
  ExpectError(Config("\"x\": " + std::string(depth, '[') + std::string(depth, ']')), "config.json",
              "nested deeper than");
  ExpectError(R"({"model_type": "gla", "hidden_size": )" + std::string(depth, '[') +
                  std::string(depth, ']') + "}",
              "config.json", "nested deeper than");
  // Real configs nest a few levels; a few dozen are fine.
  EXPECT_TRUE(
      ParseModelConfigText(Config("\"x\": " + std::string(60, '[') + std::string(60, ']'))).ok());
}

TEST(ConfigTest, LongValuesAreTruncatedInErrors) {
  const std::string long_string(10000, 'x');
  for (const std::string& text :
       {"{\"model_type\": \"" + long_string + "\"}",
        "{\"model_type\": \"gla\", \"hidden_size\": \"" + long_string + "\"}",
        Config("\"hidden_act\": \"" + long_string + "\"")}) {
    absl::StatusOr<ModelConfig> c = ParseModelConfigText(text);
    ASSERT_FALSE(c.ok());
    EXPECT_LT(c.status().message().size(), 300u) << c.status();
  }
}

// The MoE configs' defaults are transformers' (Qwen3_5MoeTextConfig, Qwen3NextConfig): a bare
// model_type resolves to the published shapes.
TEST(ConfigTest, MixtureOfExpertsDefaults) {
  for (const char* text : {R"({"model_type": "qwen3_5_moe_text"})",
                           R"({"model_type": "qwen3_5_moe", "text_config": {}})"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<ModelConfig> c = ParseModelConfigText(text);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->hidden_size, 2048);
    EXPECT_EQ(c->num_hidden_layers, 40);
    EXPECT_EQ(c->vocab_size, 248320);
    EXPECT_EQ(c->intermediate_size, 0);
    EXPECT_EQ(c->attention_layers.size(), 10u);
    EXPECT_EQ(c->attention_layers.at(3).num_kv_heads, 2);
    EXPECT_EQ(c->moe.experts, 256);
    EXPECT_EQ(c->moe.top_k, 8);
    EXPECT_EQ(c->moe.intermediate, 512);
    EXPECT_EQ(c->moe.shared_intermediate, 512);
    EXPECT_TRUE(c->moe.normalize);
    EXPECT_FALSE(c->fused_gdn_projections);
    for (int64_t l = 0; l < 40; ++l) EXPECT_TRUE(IsMoeLayer(*c, l)) << l;
  }
  // Qwen3_5MoeTextConfig deletes Qwen3-Next's dense-layer and norm_topk_prob fields: ignored.
  absl::StatusOr<ModelConfig> c = ParseModelConfigText(
      R"({"model_type": "qwen3_5_moe_text", "mlp_only_layers": [0], "norm_topk_prob": false,
          "decoder_sparse_step": 2})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(IsMoeLayer(*c, 0) && IsMoeLayer(*c, 1) && c->moe.normalize);
  c = ParseModelConfigText(R"({"model_type": "qwen3_next"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 151936);
  EXPECT_EQ(c->num_hidden_layers, 48);
  EXPECT_EQ(c->intermediate_size, 5632);
  EXPECT_EQ(c->moe.experts, 512);
  EXPECT_EQ(c->moe.top_k, 10);
  EXPECT_TRUE(c->moe.normalize);
  EXPECT_EQ(c->moe.sparse_step, 1);
  EXPECT_TRUE(c->moe.dense_layers.empty());
  for (int64_t l = 0; l < 48; ++l) EXPECT_TRUE(IsMoeLayer(*c, l)) << l;
  EXPECT_TRUE(c->fused_gdn_projections);
  // num_experts 0: a dense Qwen3-Next; mlp_only_layers entries that name no layer match none.
  c = ParseModelConfigText(
      R"({"model_type": "qwen3_next", "num_experts": 0, "num_hidden_layers": 4})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->moe.experts, 0);
  EXPECT_FALSE(IsMoeLayer(*c, 0));
  c = ParseModelConfigText(
      R"({"model_type": "qwen3_next", "num_hidden_layers": 4, "mlp_only_layers": [9, -1, 2, 2]})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->moe.dense_layers, (std::vector<int64_t>{2, 2}));
  EXPECT_TRUE(IsMoeLayer(*c, 0) && IsMoeLayer(*c, 3) && !IsMoeLayer(*c, 2));
  // Dense where listed or off the sparse step.
  c = ParseModelConfigText(
      R"({"model_type": "qwen3_next", "num_hidden_layers": 6, "decoder_sparse_step": 2,
          "mlp_only_layers": [3], "norm_topk_prob": false})");
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<bool> moe;
  for (int64_t l = 0; l < 6; ++l) moe.push_back(IsMoeLayer(*c, l));
  EXPECT_EQ(moe, (std::vector<bool>{false, true, false, false, false, true}));
  EXPECT_FALSE(c->moe.normalize);
  // The dense Qwen3.5 has no experts.
  c = ParseModelConfigText(R"({"model_type": "qwen3_5_text"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->moe.experts, 0);
  EXPECT_FALSE(IsMoeLayer(*c, 0));
}

// quantization_config: fp8 at the top level (also of a multimodal config) or in text_config;
// every other method, format, scale strategy or block shape is refused by name.
TEST(ConfigTest, QuantizationConfigIsFp8OrRefused) {
  const std::string fp8 =
      R"("quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme":
         "dynamic", "weight_block_size": [128, 64], "modules_to_not_convert": ["lm_head"]})";
  for (const std::string& text :
       {Config(fp8), "{\"model_type\": \"qwen3_5_moe\", \"text_config\": {}, " + fp8 + "}",
        "{\"model_type\": \"qwen3_5\", \"text_config\": {" + fp8 + "}}"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<ModelConfig> c = ParseModelConfigText(text);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->quantization.method, "fp8");
    EXPECT_EQ(c->quantization.fp8.strategy, Fp8Scheme::Strategy::kBlock);
    EXPECT_EQ(c->quantization.fp8.block_rows, 128);
    EXPECT_EQ(c->quantization.fp8.block_cols, 64);
    EXPECT_EQ(c->quantization.fp8.scale_suffix, "_scale_inv");
    EXPECT_EQ(c->quantization.activation_scheme, "dynamic");
  }
  absl::StatusOr<ModelConfig> plain =
      ParseModelConfigText(Config(R"("quantization_config": null)"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->quantization.method.empty());
  EXPECT_EQ(plain->quantization.fp8.strategy, Fp8Scheme::Strategy::kNone);
  // Without weight_block_size: one `weight_scale` a tensor (vLLM's per-tensor fp8 checkpoints).
  absl::StatusOr<ModelConfig> tensor = ParseModelConfigText(
      Config(R"("quantization_config": {"quant_method": "fp8", "activation_scheme": "static"})"));
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->quantization.fp8.strategy, Fp8Scheme::Strategy::kTensor);
  EXPECT_EQ(tensor->quantization.fp8.scale_suffix, "_scale");
  EXPECT_EQ(tensor->quantization.activation_scheme, "static");
  // compressed-tensors, float-quantized: per channel, per tensor, per block; `weight_scale`.
  const std::string ct =
      R"("quantization_config": {"quant_method": "compressed-tensors", "format":
         "float-quantized", "ignore": ["lm_head"], "config_groups": {"group_0": {"targets":
         ["Linear"], "weights": {"type": "float", "num_bits": 8, "symmetric": true, )";
  const std::pair<const char*, Fp8Scheme> schemes[] = {
      {R"("strategy": "channel"}, "input_activations": {"type": "float", "num_bits": 8,
          "strategy": "token", "dynamic": true}}}})",
       {Fp8Scheme::Strategy::kChannel, 0, 0, "_scale"}},
      {R"("strategy": "tensor"}, "input_activations": {"dynamic": false}}}})",
       {Fp8Scheme::Strategy::kTensor, 0, 0, "_scale"}},
      {R"("strategy": "block", "block_structure": [128, 128]}}}})",
       {Fp8Scheme::Strategy::kBlock, 128, 128, "_scale"}},
  };
  for (const auto& [rest, want] : schemes) {
    absl::StatusOr<ModelConfig> c = ParseModelConfigText(Config(ct + rest));
    ASSERT_TRUE(c.ok()) << c.status() << rest;
    EXPECT_EQ(c->quantization.method, "compressed-tensors");
    EXPECT_EQ(c->quantization.fp8.strategy, want.strategy) << rest;
    EXPECT_EQ(c->quantization.fp8.block_rows, want.block_rows);
    EXPECT_EQ(c->quantization.fp8.scale_suffix, "_scale");
  }
  ExpectError(Config(ct + R"("strategy": "group", "group_size": 128}}}})"), "config.json",
              "strategy 'group'");
  // No strategy: inferred from group_size as compressed-tensors does (-1: per channel).
  absl::StatusOr<ModelConfig> inferred =
      ParseModelConfigText(Config(ct + R"("group_size": -1}}}})"));
  ASSERT_TRUE(inferred.ok()) << inferred.status();
  EXPECT_EQ(inferred->quantization.fp8.strategy, Fp8Scheme::Strategy::kChannel);
  ExpectError(Config(ct + R"("group_size": 64}}}})"), "config.json", "strategy 'group'");
  // The older string spelling of block_structure.
  absl::StatusOr<ModelConfig> spelled =
      ParseModelConfigText(Config(ct + R"("strategy": "block", "block_structure": "128x64"}}}})"));
  ASSERT_TRUE(spelled.ok()) << spelled.status();
  EXPECT_EQ(spelled->quantization.fp8.block_rows, 128);
  EXPECT_EQ(spelled->quantization.fp8.block_cols, 64);
  ExpectError(Config(ct + R"("strategy": "block", "block_structure": "128by64"}}}})"),
              "config.json", "block_structure must be");
  // A static input group anywhere makes the activation scheme static.
  absl::StatusOr<ModelConfig> two = ParseModelConfigText(Config(
      R"("quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
         "a": {"format": "float-quantized", "weights": {"type": "float", "strategy": "channel"},
               "input_activations": {"dynamic": false}},
         "b": {"format": "float-quantized", "weights": {"type": "float", "strategy": "channel"}}}})"));
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->quantization.activation_scheme, "static");
  const std::pair<const char*, const char*> refused[] = {
      {R"("format": "float-quantized", "config_groups": {"g": {"weights": {"type": "float",
          "symmetric": false}}})",
       "asymmetric fp8 weights (with zero points) are not supported"},
      {R"("format": "float-quantized", "transform_config": {"config_groups": {"u": {"type":
          "hadamard"}}}, "config_groups": {"g": {"weights": {"type": "float"}}})",
       "transform_config"},
      {R"("format": "float-quantized", "sparsity_config": {"format": "sparse-24-bitmask"},
          "config_groups": {"g": {"weights": {"type": "float"}}})",
       "sparsity format 'sparse-24-bitmask'"},
      {R"("format": "float-quantized", "sparsity_config": "dense", "config_groups": {"g":
          {"weights": {"type": "float"}}})",
       "sparsity_config must be an object"},
      {R"("format": "float-quantized", "config_groups": {"a": {"weights": {"type": "float",
          "strategy": "channel"}}, "b": {"weights": {"type": "float", "strategy": "tensor"}}})",
       "different weight schemes"},
      {R"("format": "int-quantized", "config_groups": {"a": {"format": "float-quantized",
          "weights": {"type": "float"}}, "b": {"weights": {"type": "float"}}})",
       "format 'int-quantized'"},
  };
  for (const auto& [rest, needle] : refused) {
    ExpectError(
        Config(std::string(R"("quantization_config": {"quant_method": "compressed-tensors", )") +
               rest + "}"),
        "config.json", needle);
  }
  ExpectError(Config(ct + R"("strategy": "block"}}}})"), "config.json", "block_structure must be");
  ExpectError(Config(R"("quantization_config": {"quant_method": "compressed-tensors", "format":
                     "pack-quantized", "config_groups": {"g": {"weights": {"type": "int",
                     "num_bits": 4, "strategy": "group"}}}})"),
              "format 'pack-quantized' is not supported", "float-quantized");
  ExpectError(Config(R"("quantization_config": {"quant_method": "compressed-tensors", "format":
                     "float-quantized", "config_groups": {"g": {"weights": {"type": "int",
                     "num_bits": 8}}}})"),
              "8-bit int weights are not supported", "config_groups.g");
  ExpectError(Config(R"("quantization_config": {"quant_method": "compressed-tensors", "format":
                     "float-quantized", "config_groups": {}})"),
              "has no 'config_groups'", "compressed-tensors");
  const std::pair<const char*, const char*> bad[] = {
      {R"("gptq")", "'quantization_config' must be an object"},
      {R"({"bits": 4})", "has no 'quant_method'"},
      {R"({"quant_method": "awq"})", "quant_method 'awq' is not supported"},
      {R"({"quant_method": "bitsandbytes"})", "'bitsandbytes' is not supported"},
      {R"({"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]})", "fmt 'e5m2'"},
      {R"({"quant_method": "fp8", "weight_block_size": [128]})", "weight_block_size must be"},
      {R"({"quant_method": "fp8", "weight_block_size": [0, 128]})", "got [0,128]"},
      {R"({"quant_method": "fp8", "weight_block_size": [128, -1]})", "weight_block_size must be"},
      {R"({"quant_method": "fp8", "weight_block_size": [128, 1e30]})", "weight_block_size must"},
      {R"({"quant_method": "fp8", "weight_block_size": [16777217, 1]})", "up to 16777216"},
      {R"({"quant_method": "fp8", "weight_block_size": "128x128"})", "weight_block_size must"},
      {R"({"quant_method": "fp8", "weight_block_size": [1, 1], "activation_scheme": "never"})",
       "activation_scheme 'never' must be dynamic or static"},
  };
  for (const auto& [value, needle] : bad) {
    ExpectError(Config(std::string("\"quantization_config\": ") + value), "config.json", needle);
  }
}

}  // namespace
}  // namespace linfer
