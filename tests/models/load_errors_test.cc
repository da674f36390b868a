// Bad checkpoints get a clear error naming what is wrong, never a crash: truncated files,
// invalid header JSON, offsets past the end, overlapping tensors, unknown dtypes, missing or
// misshapen tensors, unknown model_type, inconsistent dims, unsupported options.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "models/model.h"
#include "models/safetensors.h"
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
  // A valid checkpoint directory copied from a reference fixture.
  fs::path CopyFixture(const std::string& name) {
    const fs::path dst = dir_ / name;
    fs::copy(fs::path(LINFER_FLA_FIXTURES) / name, dst, fs::copy_options::recursive);
    return dst;
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
  // Rewrite the checkpoint without one tensor (a valid file that lacks it).
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
      SafetensorsFile::Open(d / "model.safetensors");
  ASSERT_TRUE(f.ok());
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  const std::string victim = "model.layers.1.attn.dt_bias";
  for (const auto& [name, e] : (*f)->entries()) {
    if (name == victim) continue;
    absl::StatusOr<TensorView> v = (*f)->View(name);
    ASSERT_TRUE(v.ok());
    header[name] = {{"dtype", e.dtype},
                    {"shape", e.shape},
                    {"data_offsets", {data.size(), data.size() + v->nbytes()}}};
    data.append(static_cast<const char*>(v->raw()), v->nbytes());
  }
  f->reset();
  fs::remove(d / "model.safetensors");
  const fs::path saved = dir_;
  dir_ = d;
  WriteRaw(header.dump(), data);
  dir_ = saved;
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
      {"attn", {{"layers", {1}}, {"num_heads", 2}}, "hybrid softmax-attention"},
      {"attnres_block_size", 2, "attnres_block_size"},
      {"hidden_act", "gelu", "hidden_act 'gelu'"},
  };
  for (const Edit& e : edits) {
    const fs::path d = CopyFixture("gdn_default");
    nlohmann::json c = ReadJson(d / "config.json");
    c[e.key] = e.value;
    WriteJson(d / "config.json", c);
    ExpectLoadError(d, e.needle);
    fs::remove_all(d);
  }
  const fs::path d = CopyFixture("gdn_default");
  std::ofstream(d / "config.json") << "{\"model_type\": ";
  ExpectLoadError(d, "not valid JSON");
}

TEST_F(LoadErrorsTest, WrongShapeIsNamed) {
  const fs::path d = CopyFixture("deltanet_default");
  nlohmann::json c = ReadJson(d / "config.json");
  c["conv_size"] = 3;
  WriteJson(d / "config.json", c);
  ExpectLoadError(d, "tensor 'model.layers.0.attn.q_conv1d.weight' has shape");
}

TEST_F(LoadErrorsTest, MissingFiles) {
  ExpectLoadError(dir_ / "nope", "config.json");
  const fs::path d = CopyFixture("gla_default");
  fs::remove(d / "model.safetensors");
  ExpectLoadError(d, "no *.safetensors file");
}

}  // namespace
}  // namespace linfer
