// Block-wise fp8 weights (models/fp8.h): e4m3fn decoding against values the OCP FP8 format
// defines, the block arithmetic on hand-made matrices with partial edge blocks, and WeightStore
// loading such tensors (every loader: Load, LoadHost, LoadMatrix, LoadPicked) from real files,
// with the errors that name a missing scale, a scale of the wrong shape, a non-finite scale, an
// fp8 NaN, a checkpoint without quantization_config.
#include "models/fp8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/weights.h"
#include "nlohmann/json.hpp"

namespace linfer {
namespace {

namespace fs = std::filesystem;

TEST(Fp8Test, E4m3ValuesAreTheFormatsValues) {
  // (byte, value): zero, the smallest subnormal 2^-9, the largest subnormal 7·2^-9, the smallest
  // normal 2^-6, one, 1.5, the largest finite value 448, and their negatives.
  const std::pair<uint8_t, float> cases[] = {
      {0x00, 0.0f},    {0x01, 0x1p-9f}, {0x07, 7 * 0x1p-9f}, {0x08, 0x1p-6f},  {0x38, 1.0f},
      {0x3C, 1.5f},    {0x40, 2.0f},    {0x7E, 448.0f},      {0x81, -0x1p-9f}, {0xB8, -1.0f},
      {0xFE, -448.0f}, {0x30, 0.5f},    {0x57, 15.0f},       {0x77, 240.0f},   {0x6E, 112.0f},
  };
  for (const auto& [bits, value] : cases) {
    EXPECT_EQ(E4m3ToF32(bits), value) << "byte 0x" << std::hex << int{bits};
  }
  EXPECT_TRUE(std::signbit(E4m3ToF32(0x80)) && E4m3ToF32(0x80) == 0.0f);
  EXPECT_TRUE(std::isnan(E4m3ToF32(0x7F)));
  EXPECT_TRUE(std::isnan(E4m3ToF32(0xFF)));
  // Every other byte is finite, |v| ≤ 448, and the positive bytes ascend with their values.
  for (int b = 0; b < 0x7E; ++b) {
    EXPECT_LT(E4m3ToF32(static_cast<uint8_t>(b)), E4m3ToF32(static_cast<uint8_t>(b + 1))) << b;
    EXPECT_EQ(E4m3ToF32(static_cast<uint8_t>(b | 0x80)), -E4m3ToF32(static_cast<uint8_t>(b)));
  }
}

Tensor Floats(Shape shape, const std::vector<float>& values) {
  absl::StatusOr<Tensor> t = Tensor::Empty(DType::kF32, shape);
  EXPECT_TRUE(t.ok());
  EXPECT_EQ(static_cast<size_t>(t->numel()), values.size());
  std::memcpy(t->data<float>(), values.data(), values.size() * sizeof(float));
  return *std::move(t);
}

// A 3 × 5 matrix in blocks of 2 × 3: scale blocks [[1, 2], [4, 8]], the second row of blocks and
// the second column of blocks partial.
TEST(Fp8Test, DequantizeScalesEachBlockIncludingPartialEdges) {
  std::vector<uint8_t> q(15, 0x38);  // all 1.0
  q[4] = 0x3C;                       // (0, 4): 1.5 in block (0, 1)
  q[10] = 0xB8;                      // (2, 0): −1 in block (1, 0)
  const Tensor scale = Floats({2, 2}, {1, 2, 4, 8});
  absl::StatusOr<Tensor> w = DequantizeFp8("w", q.data(), {3, 5}, "w_scale_inv", scale, 2, 3);
  ASSERT_TRUE(w.ok()) << w.status();
  const float want[15] = {1, 1, 1, 2, 3, 1, 1, 1, 2, 2, -4, 4, 4, 8, 8};
  for (int i = 0; i < 15; ++i) EXPECT_EQ(w->data<const float>()[i], want[i]) << i;
}

// A stack of two 2 × 2 matrices (fused experts [E, R, C]), one block each: each takes its own.
TEST(Fp8Test, DequantizeAStackUsesEachMatrixsScales) {
  const std::vector<uint8_t> q(8, 0x40);  // all 2.0
  const Tensor scale = Floats({2, 1, 1}, {0.25f, 3.0f});
  absl::StatusOr<Tensor> w =
      DequantizeFp8("e", q.data(), {2, 2, 2}, "e_scales_inv", scale, 128, 128);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->shape(), Shape({2, 2, 2}));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(w->data<const float>()[i], i < 4 ? 0.5f : 6.0f) << i;
}

// A stack of two 2 × 3 matrices in blocks of 1 × 2 (two block rows and columns each): matrix e,
// row r, column c takes scale [e, r, c / 2].
TEST(Fp8Test, DequantizeAStackWalksEachMatrixsBlockRows) {
  const std::vector<uint8_t> q(12, 0x38);  // all 1.0
  const Tensor scale = Floats({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  absl::StatusOr<Tensor> w = DequantizeFp8("e", q.data(), {2, 2, 3}, "e_scale_inv", scale, 1, 2);
  ASSERT_TRUE(w.ok()) << w.status();
  const float want[12] = {1, 1, 2, 3, 3, 4, 5, 5, 6, 7, 7, 8};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(w->data<const float>()[i], want[i]) << i;
}

// A tensor large enough to be split over threads: every element as the scalar formula has it, and
// of two bad bytes in different threads' rows the first is named.
TEST(Fp8Test, DequantizeALargeTensorOverThreads) {
  const Shape shape = {2, 2048, 1100};  // 4.5 M values, blocks 128 × 128 with partial edges
  const int64_t n = NumElements(shape), brows = 16, bcols = 9;
  std::vector<uint8_t> q(n);
  for (int64_t i = 0; i < n; ++i) {
    q[i] = static_cast<uint8_t>((i * 2654435761u) >> 7);
    if ((q[i] & 0x7F) == 0x7F) q[i] ^= 1;  // no NaN
  }
  std::vector<float> sv(2 * brows * bcols);
  for (size_t i = 0; i < sv.size(); ++i) sv[i] = 0.001f * static_cast<float>(i + 1);
  const Tensor scale = Floats({2, brows, bcols}, sv);
  absl::StatusOr<Tensor> w =
      DequantizeFp8("big", q.data(), shape, "big_scale_inv", scale, 128, 128);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t m = i / (2048 * 1100), r = i / 1100 % 2048, c = i % 1100;
    const float want = E4m3ToF32(q[i]) * sv[(m * brows + r / 128) * bcols + c / 128];
    ASSERT_EQ(w->data<const float>()[i], want) << i;
  }
  q[n - 5] = 0xFF;
  q[n / 3 + 7] = 0x7F;
  absl::StatusOr<Tensor> bad = DequantizeFp8("big", q.data(), shape, "s", scale, 128, 128);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(absl::StrCat("at element ", n / 3 + 7)), std::string::npos)
      << bad.status();
}

TEST(Fp8Test, DequantizeRefusesWhatIsNotAWeight) {
  const std::vector<uint8_t> q(6, 0x38);
  struct Bad {
    Shape shape;
    std::vector<float> scale;
    Shape scale_shape;
    std::vector<uint8_t> bytes;
    const char* needle;
  };
  const Bad cases[] = {
      {{2, 3}, {1, 1}, {1, 2}, q, "needs [1, 1]"},
      // as many scales as blocks, laid out the other way round ([3, 2] for a [2, 3] grid)
      {{8, 9}, {1, 2, 3, 4, 5, 6}, {3, 2}, std::vector<uint8_t>(72, 0x38), "needs [2, 3]"},
      {{2, 3}, {1, 1, 1, 1}, {4}, q, "needs [1, 1]"},
      {{6}, {1}, {1}, q, "scales need a matrix"},
      {{2, 3}, {NAN}, {1, 1}, q, "holds nan at element 0"},
      {{2, 3}, {INFINITY}, {1, 1}, q, "holds inf"},
      {{2, 3}, {1}, {1, 1}, {0x38, 0x38, 0x38, 0x38, 0xFF, 0x38}, "NaN (byte 0xff) at element 4"},
      // finite, but 448 · 3e38 is not: the weight would be infinite
      {{2, 3},
       {3e38f},
       {1, 1},
       {0x38, 0x7E, 0x38, 0x38, 0x38, 0x38},
       "overflows float at element 1"},
  };
  for (const Bad& b : cases) {
    const Tensor scale = Floats(b.scale_shape, b.scale);
    absl::StatusOr<Tensor> w =
        DequantizeFp8("w", b.bytes.data(), b.shape, "w_scale_inv", scale, 4, 4);
    ASSERT_FALSE(w.ok()) << b.needle;
    EXPECT_NE(w.status().message().find(b.needle), std::string::npos) << w.status();
  }
}

// Checkpoint files written byte by byte: the WeightStore's loaders on fp8 tensors.
class Fp8StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           (std::string("fp8_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  // One tensor of the file: its dtype, shape and bytes.
  struct Entry {
    std::string name, dtype;
    Shape shape;
    std::string bytes;
  };
  void Write(const std::vector<Entry>& entries) {
    nlohmann::json header = nlohmann::json::object();
    std::string data;
    for (const Entry& e : entries) {
      header[e.name] = {{"dtype", e.dtype},
                        {"shape", e.shape},
                        {"data_offsets", {data.size(), data.size() + e.bytes.size()}}};
      data += e.bytes;
    }
    const std::string h = header.dump();
    std::ofstream out(dir_ / "model.safetensors", std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(uint64_t{h.size()} >> (8 * i)));
    out << h << data;
  }
  static std::string F32Bytes(const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  // w [3, 4] in blocks of 2 × 2: rows of 0x38 (1.0), 0x40 (2.0), 0xB8 (−1); scales [[1, 0.5],
  // [4, 8]]: w = [[1, 1, .5, .5], [2, 2, 1, 1], [−4, −4, −8, −8]].
  std::vector<Entry> Matrix(const std::string& scale_suffix = "_scale_inv") {
    std::string q(4, '\x38');
    q += std::string(4, '\x40');
    q += std::string(4, '\xB8');
    return {{"w", "F8_E4M3", {3, 4}, q},
            {"w" + scale_suffix, "F32", {2, 2}, F32Bytes({1, 0.5f, 4, 8})},
            {"b", "F32", {1, 4}, F32Bytes({9, 9, 9, 9})}};
  }
  static constexpr float kW[12] = {1, 1, .5f, .5f, 2, 2, 1, 1, -4, -4, -8, -8};

  // A store with block-wise scales (`_scale_inv`) of rows × cols; 0 × 0: no fp8 scheme.
  absl::StatusOr<WeightStore> Open(int64_t rows = 2, int64_t cols = 2) {
    return OpenWith(rows > 0 ? Blocks(rows, cols) : Fp8Scheme());
  }
  absl::StatusOr<WeightStore> OpenWith(const Fp8Scheme& scheme) {
    absl::StatusOr<WeightStore> s = WeightStore::Open(dir_);
    if (s.ok()) s->set_fp8(scheme);
    return s;
  }
  static Fp8Scheme Blocks(int64_t rows, int64_t cols) {
    return {Fp8Scheme::Strategy::kBlock, rows, cols, "_scale_inv"};
  }
  // Loading "w" as `shape` through a store with `scheme` fails with an error holding every needle.
  void ExpectMatrixError(const Fp8Scheme& scheme, const Shape& shape,
                         const std::vector<std::string>& needles) {
    absl::StatusOr<WeightStore> store = OpenWith(scheme);
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<Tensor> w = store->LoadMatrix("w", shape);
    ASSERT_FALSE(w.ok()) << needles.front();
    for (const std::string& needle : needles) {
      EXPECT_NE(w.status().message().find(needle), std::string::npos) << w.status();
    }
  }
  fs::path dir_;
};

TEST_F(Fp8StoreTest, EveryLoaderDequantizes) {
  for (const char* suffix : {"_scale_inv", "_scales_inv"}) {
    SCOPED_TRACE(suffix);
    Write(Matrix(suffix));
    absl::StatusOr<WeightStore> store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<Tensor> host = store->LoadHost("w", {3, 4});
    ASSERT_TRUE(host.ok()) << host.status();
    for (int i = 0; i < 12; ++i) EXPECT_EQ(host->data<const float>()[i], kW[i]) << i;
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      store->set_target({Device::kCpu, dtype});
      absl::StatusOr<Tensor> m = store->LoadMatrix("w", {3, 4});
      ASSERT_TRUE(m.ok()) << m.status();
      ASSERT_EQ(m->dtype(), dtype);
      absl::StatusOr<Tensor> back = ToF32(m->view());
      ASSERT_TRUE(back.ok());
      for (int i = 0; i < 12; ++i) EXPECT_EQ(back->data<const float>()[i], kW[i]) << i;
      // Rows 2 and 0 of the fp8 tensor under an f32 one (LoadPicked converts each part).
      absl::StatusOr<Tensor> picked =
          store->LoadPicked({{"w", {3, 4}, 2, 1}, {"b", {1, 4}}, {"w", {3, 4}, 0, 1}});
      ASSERT_TRUE(picked.ok()) << picked.status();
      ASSERT_EQ(picked->shape(), Shape({3, 4}));
      absl::StatusOr<Tensor> p = ToF32(picked->view());
      ASSERT_TRUE(p.ok());
      const float want[12] = {-4, -4, -8, -8, 9, 9, 9, 9, 1, 1, .5f, .5f};
      for (int i = 0; i < 12; ++i) EXPECT_EQ(p->data<const float>()[i], want[i]) << i;
    }
    // The scale was read: not listed as unused, and not counted as a parameter.
    EXPECT_TRUE(store->Unused().empty());
    EXPECT_EQ(store->loaded_elements(), 12 + 4);
  }
}

// Kept as stored (Target::keep_fp8): LoadMatrix and all-fp8 LoadPicked give F8_E4M3 tensors with
// their rows' scales, reading back as the dequantized values; picks may start with an empty part;
// a pick mixing fp8 and f32 parts is dequantized, and LoadPickedRuns splits it into runs.
TEST_F(Fp8StoreTest, KeptWeightsCarryTheirRowsScales) {
  std::vector<Entry> entries = Matrix();
  entries.push_back({"z", "F8_E4M3", {0, 4}, ""});
  entries.push_back({"z_scale_inv", "F32", {0, 2}, ""});
  Write(entries);
  absl::StatusOr<WeightStore> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  store->set_target({Device::kCpu, DType::kF32, /*keep_fp8=*/true});
  auto values = [](const Tensor& t) {
    absl::StatusOr<Tensor> f = ToF32(t.view());
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? std::vector<float>(f->data<float>(), f->data<float>() + f->numel())
                  : std::vector<float>();
  };
  absl::StatusOr<Tensor> w = store->LoadMatrix("w", {3, 4});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->dtype(), DType::kF8E4M3);
  EXPECT_TRUE(w->view().has_scales());
  EXPECT_EQ(values(*w), std::vector<float>(kW, kW + 12));
  // Rows 2, then 0 and 1 as two groups of one (stride 1), after an empty part.
  absl::StatusOr<Tensor> picked =
      store->LoadPicked({{"z", {0, 4}}, {"w", {3, 4}, 2, 1}, {"w", {3, 4}, 0, 1, 2, 1}});
  ASSERT_TRUE(picked.ok()) << picked.status();
  EXPECT_EQ(picked->dtype(), DType::kF8E4M3);
  EXPECT_EQ(values(*picked), std::vector<float>({-4, -4, -8, -8, 1, 1, .5f, .5f, 2, 2, 1, 1}));
  absl::StatusOr<Tensor> mixed = store->LoadPicked({{"w", {3, 4}, 2, 1}, {"b", {1, 4}}});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->dtype(), DType::kF32);
  EXPECT_EQ(values(*mixed), std::vector<float>({-4, -4, -8, -8, 9, 9, 9, 9}));
  absl::StatusOr<std::vector<Tensor>> runs =
      store->LoadPickedRuns({{"w", {3, 4}, 2, 1}, {"w", {3, 4}, 0, 1}, {"b", {1, 4}}});
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[0].dtype(), DType::kF8E4M3);
  EXPECT_EQ(values((*runs)[0]), std::vector<float>({-4, -4, -8, -8, 1, 1, .5f, .5f}));
  EXPECT_EQ((*runs)[1].dtype(), DType::kF32);
  EXPECT_FALSE(store->LoadPickedRuns({}).ok());
  // The bytes held: 12 fp8 bytes + 3 rows × 2 scales, and so on.
  EXPECT_GT(store->loaded_bytes(), 0);
}

// Quantizing on load (Target::quantize_fp8, a checkpoint without fp8 weights): LoadMatrix gives
// fp8 in 128 × 128 blocks, LoadTable (embeddings, LM head) and the gate projections stay f32.
TEST_F(Fp8StoreTest, QuantizingOnLoadSparesTablesAndGates) {
  Write({{"w", "F32", {3, 4}, F32Bytes({1, 1, .5f, .5f, 2, 2, 1, 1, -4, -4, -8, -8})},
         {"model.layers.0.mlp.shared_expert_gate.weight", "F32", {1, 4}, F32Bytes({1, 2, 3, 4})}});
  absl::StatusOr<WeightStore> store = Open(0, 0);
  ASSERT_TRUE(store.ok()) << store.status();
  store->set_target({Device::kCpu, DType::kF32, false, /*quantize_fp8=*/true});
  absl::StatusOr<Tensor> w = store->LoadMatrix("w", {3, 4});
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->dtype(), DType::kF8E4M3);
  EXPECT_EQ(w->view().scale_block_cols(), kFp8QuantizeBlock);
  // One block: the scale is 8 / 448, and these values are e4m3 multiples of it.
  absl::StatusOr<Tensor> back = ToF32(w->view());
  ASSERT_TRUE(back.ok());
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(back->data<float>()[i], kW[i], 1e-6) << i;
  absl::StatusOr<Tensor> table = store->LoadTable("w", {3, 4});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->dtype(), DType::kF32);
  absl::StatusOr<Tensor> gate =
      store->LoadMatrix("model.layers.0.mlp.shared_expert_gate.weight", {1, 4});
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_EQ(gate->dtype(), DType::kF32);
}

// Per output channel (compressed-tensors' `weight_scale` [R, 1], or [R]) and per tensor (a scale
// of shape [], [1] or [1, 1]): each row, or the whole tensor, takes its scale.
TEST_F(Fp8StoreTest, ChannelAndTensorScales) {
  const std::string q = std::string(4, '\x38') + std::string(4, '\x40') + std::string(4, '\xB8');
  const Fp8Scheme channel{Fp8Scheme::Strategy::kChannel, 0, 0, "_scale"};
  const Fp8Scheme tensor{Fp8Scheme::Strategy::kTensor, 0, 0, "_scale"};
  struct Case {
    Fp8Scheme scheme;
    Shape scale_shape;
    std::vector<float> scale;
    std::vector<float> want;
  };
  const Case cases[] = {
      {channel, {3, 1}, {1, .5f, 2}, {1, 1, 1, 1, 1, 1, 1, 1, -2, -2, -2, -2}},
      {channel, {3}, {1, .5f, 2}, {1, 1, 1, 1, 1, 1, 1, 1, -2, -2, -2, -2}},
      {tensor,
       {},
       {0.25f},
       {.25f, .25f, .25f, .25f, .5f, .5f, .5f, .5f, -.25f, -.25f, -.25f, -.25f}},
      {tensor, {1}, {2}, {2, 2, 2, 2, 4, 4, 4, 4, -2, -2, -2, -2}},
      {tensor, {1, 1}, {1}, {1, 1, 1, 1, 2, 2, 2, 2, -1, -1, -1, -1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.scheme.StrategyName()) + " " + ShapeString(c.scale_shape));
    Write({{"w", "F8_E4M3", {3, 4}, q}, {"w_scale", "BF16", c.scale_shape, [&] {
                                           std::string b;
                                           for (float v : c.scale) {
                                             const uint16_t h = F32ToBf16(v);
                                             b.append(reinterpret_cast<const char*>(&h), 2);
                                           }
                                           return b;
                                         }()}});
    absl::StatusOr<WeightStore> store = OpenWith(c.scheme);
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<Tensor> w = store->LoadHost("w", {3, 4});
    ASSERT_TRUE(w.ok()) << w.status();
    for (int i = 0; i < 12; ++i) EXPECT_EQ(w->data<const float>()[i], c.want[i]) << i;
  }
  // A per-tensor scheme over per-channel scales: refused, naming what it needs.
  Write({{"w", "F8_E4M3", {3, 4}, q}, {"w_scale", "F32", {3, 1}, F32Bytes({1, 1, 1})}});
  ExpectMatrixError(tensor, {3, 4}, {"'w_scale' has shape [3, 1]", "needs [1, 1]"});
}

// The checkpoint's fingerprint (which state blobs and sessions carry) covers fp8 weights' bytes,
// not only their names and shapes.
TEST_F(Fp8StoreTest, FingerprintCoversTheFp8Bytes) {
  std::vector<Entry> entries = Matrix();
  Write(entries);
  uint64_t before = 0, after = 0, again = 0;
  {
    absl::StatusOr<WeightStore> a = Open();  // (its mapping must be gone before the rewrite)
    ASSERT_TRUE(a.ok());
    before = a->Fingerprint(7);
  }
  entries[0].bytes[5] = '\x41';  // one fp8 value: 2.0 → 2.25
  Write(entries);
  for (uint64_t* f : {&after, &again}) {
    absl::StatusOr<WeightStore> b = Open();
    ASSERT_TRUE(b.ok());
    *f = b->Fingerprint(7);
  }
  EXPECT_NE(before, after);
  EXPECT_EQ(after, again);
}

// compressed-tensors' asymmetric weights carry a zero point: refused, not loaded as symmetric.
TEST_F(Fp8StoreTest, AZeroPointIsRefused) {
  const std::string q(12, '\x38');
  Write({{"w", "F8_E4M3", {3, 4}, q},
         {"w_scale", "F32", {3, 1}, F32Bytes({1, 1, 1})},
         {"w_zero_point", "F32", {3, 1}, F32Bytes({0, 1, 0})}});
  ExpectMatrixError({Fp8Scheme::Strategy::kChannel, 0, 0, "_scale"}, {3, 4},
                    {"has a zero point ('w_zero_point')"});
}

TEST_F(Fp8StoreTest, ErrorsNameTheTensor) {
  Write(Matrix());
  ExpectMatrixError(
      Fp8Scheme(), {3, 4},  // the config said nothing of fp8
      {"tensor 'w' is stored as F8_E4M3, but config.json has no quantization_config"});
  ExpectMatrixError(Blocks(4, 4), {3, 4},  // blocks the scale does not tile
                    {"scale tensor 'w_scale_inv' has shape [2, 2]", "needs [1, 1]"});
  ExpectMatrixError(Blocks(2, 2), {4, 3},  // the config's shape differs
                    {"tensor 'w' has shape [3, 4]"});
  std::vector<Entry> entries = Matrix();
  entries.erase(entries.begin() + 1);  // no scale
  Write(entries);
  {
    absl::StatusOr<WeightStore> store = Open();
    ASSERT_TRUE(store.ok());
    for (int loader = 0; loader < 3; ++loader) {
      absl::StatusOr<Tensor> w = loader == 0   ? store->LoadMatrix("w", {3, 4})
                                 : loader == 1 ? store->Load("w", {3, 4})
                                               : store->LoadStacked({{"w", {3, 4}}});
      ASSERT_FALSE(w.ok()) << loader;
      EXPECT_NE(w.status().message().find("fp8 tensor 'w' has no scale tensor 'w_scale_inv'"),
                std::string::npos)
          << w.status();
    }
  }
  entries = Matrix();
  entries[1].bytes = F32Bytes({1, NAN, 4, 8});
  Write(entries);
  ExpectMatrixError(Blocks(2, 2), {3, 4}, {"scale tensor 'w_scale_inv' holds nan at element 1"});
  entries = Matrix();
  entries[0].dtype = "F8_E5M2";  // the other fp8 format: not what quant_method "fp8" stores
  Write(entries);
  ExpectMatrixError(Blocks(2, 2), {3, 4}, {"has dtype F8_E5M2"});
}

// E4m3FromDouble (quantizing on load): every finite byte's value encodes back to that byte; a
// value halfway between two neighbours takes the even byte; beyond ±448 saturates; below half the
// smallest subnormal gives ±0.
TEST(Fp8Test, E4m3FromDoubleRoundsToNearestEven) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;
    const double v = E4m3ToF32(static_cast<uint8_t>(b));
    EXPECT_EQ(E4m3FromDouble(v), b) << "byte " << b;
    // Halfway to the next byte up in magnitude (0x7E is the largest).
    if ((b & 0x7F) < 0x7E) {
      const double next = E4m3ToF32(static_cast<uint8_t>(b + 1));
      const int even = (b & 1) == 0 ? b : b + 1;
      EXPECT_EQ(E4m3FromDouble((v + next) / 2), even) << "halfway above byte " << b;
      EXPECT_EQ(E4m3FromDouble(v + (next - v) * 0.49), b) << b;
      EXPECT_EQ(E4m3FromDouble(v + (next - v) * 0.51), b + 1) << b;
    }
  }
  EXPECT_EQ(E4m3FromDouble(464.0), 0x7E);
  EXPECT_EQ(E4m3FromDouble(1e300), 0x7E);
  EXPECT_EQ(E4m3FromDouble(-1e9), 0xFE);
  EXPECT_EQ(E4m3FromDouble(std::ldexp(1.0, -11)), 0x00);  // a quarter of the smallest subnormal
  EXPECT_EQ(E4m3FromDouble(-std::ldexp(1.0, -11)), 0x80);
  EXPECT_EQ(E4m3FromDouble(std::ldexp(1.0, -10)), 0x00);  // half of it: ties to the even 0
  EXPECT_EQ(E4m3FromDouble(std::ldexp(3.0, -11)), 0x01);
}

// QuantizeFp8: scales are each block's max |w| / 448 (1 for zeros), every value dequantizes to
// within half an e4m3 step of w, a non-finite value is refused naming the tensor.
TEST(Fp8Test, QuantizeFp8ScalesBlocksAndBoundsTheError) {
  const int64_t e = 2, rows = 37, cols = 50, br = 16, bc = 24;
  absl::StatusOr<Tensor> w = Tensor::Empty(DType::kF32, {e, rows, cols});
  ASSERT_TRUE(w.ok());
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  float* v = w->data<float>();
  for (int64_t i = 0; i < w->numel(); ++i) v[i] = nd(rng) * std::ldexp(1.0f, (i / cols) % 9 - 4);
  for (int64_t r = 16; r < 32; ++r) {
    for (int64_t c = 24; c < 48; ++c) v[(rows + r) * cols + c] = 0.0f;  // matrix 1, block (1, 1)
  }
  absl::StatusOr<Tensor> q = QuantizeFp8("w", *w, br, bc);
  ASSERT_TRUE(q.ok()) << q.status();
  const TensorView qv = q->view();
  ASSERT_EQ(qv.scale_cols(), 3);
  absl::StatusOr<Tensor> back = ToF32(qv);
  ASSERT_TRUE(back.ok());
  for (int64_t g = 0; g < e * rows; ++g) {
    for (int64_t b = 0; b < 3; ++b) {
      float amax = 0;
      const int64_t r0 = g % rows / br * br, m = g / rows;
      for (int64_t r = r0; r < std::min(rows, r0 + br); ++r) {
        for (int64_t c = b * bc; c < std::min(cols, (b + 1) * bc); ++c) {
          amax = std::max(amax, std::abs(v[(m * rows + r) * cols + c]));
        }
      }
      const float want = amax > 0 ? static_cast<float>(double{amax} / 448.0) : 1.0f;
      ASSERT_EQ(qv.scales()[g * 3 + b], want) << "row " << g << " block " << b;
    }
    for (int64_t c = 0; c < cols; ++c) {
      const float s = qv.scales()[g * 3 + c / bc], x = v[g * cols + c];
      const float got = back->data<float>()[g * cols + c];
      // Half a step: 2⁻⁴ of the value among normals, 2⁻¹⁰·s among subnormals (and rounding).
      EXPECT_LE(std::abs(got - x), std::max(std::abs(x) / 16, s * std::ldexp(1.0f, -10)) * 1.0001f)
          << g << "," << c;
    }
  }
  v[5] = std::numeric_limits<float>::infinity();
  absl::StatusOr<Tensor> bad = QuantizeFp8("layers.0.w", *w, br, bc);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("layers.0.w"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace linfer
