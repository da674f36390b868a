// The Attention op (paged KV and sliding-window ring) on every device against a naive float64
// oracle: ragged segments over shuffled block tables, a prompt split into two steps (the second
// attends to what the first wrote), GQA, windows shorter and longer than the chunk — at a tiny
// shape, at prefill shapes (segments of 16+ new tokens: CUDA's tiled kernel; head_dim up to 256,
// query groups of 1 to 20 heads) and for decode rows after 700-token prompts (CUDA's split key
// ranges); and the copies of strided views the models rely on. CUDA's prefill segments take the
// tensor-core kernel and bf16 tolerances (2e-2) by default and with LINFER_CUDA_ATTENTION=staged
// or =flash (K/V staged once per segment as bf16 tiles: the windowless cases); =tiled or =simple
// the f32 kernels and f32 tolerances. LINFER_CUDA_DECODE_ATTENTION=grouped: the short segments'
// rows with a warp per group of query heads (tests/gpu/run_on_gpu.sh reruns these with it). Caches
// in f32, and in bf16 against the oracle over rounded keys and values.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::AllNear;
using testing_util::DeviceCase;
using testing_util::Poisoned;
using testing_util::RandomFloats;
using testing_util::RoundToBf16;

// Each value rounded to the nearest e4m3 one (saturating at ±448), as an fp8 KV cache stores it.
std::vector<float> RoundToE4m3(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = E4m3ToF32(E4m3FromDouble(x[i]));
  return out;
}
using testing_util::SegmentTable;
using testing_util::TestContext;
using testing_util::ToDevice;
using testing_util::ToHost;

constexpr int kQ = 4, kKv = 2, kD = 8, kSlots = 5, kBlock = 4;

struct Seq {
  int64_t slot, len, split;  // tokens [0, split) in step 1, [split, len) in step 2
};

struct Shape {
  int q_heads, kv_heads, head_dim, block_tokens;
  std::vector<Seq> seqs;  // slots < kSlots
};

const Shape kTiny = {kQ, kKv, kD, kBlock, {{3, 23, 9}, {0, 1, 0}, {4, 40, 1}, {1, 7, 6}}};
// Prefill shapes: segments of 70, 45, 30, 17 and 16 new tokens next to 1-token ones.
const std::vector<Seq> kLong = {{0, 100, 30}, {1, 45, 0}, {2, 17, 16}, {3, 5, 2}, {4, 33, 17}};
const std::vector<Shape> kPrefillShapes = {
    {8, 2, 128, 16, kLong},   // groups of 4: 4 rows × 4 heads per block
    {6, 2, 72, 16, kLong},    // groups of 3: 5 rows × 3 heads (15 units)
    {16, 1, 256, 16, kLong},  // one group of 16 = one row per block; the widest head
    {20, 1, 40, 16, kLong},   // a group wider than a block: two head blocks, the second part-full
    {2, 2, 33, 16, kLong},    // no grouping; an odd head_dim
    // 100 new tokens after 200 cached (key tiles wholly from the cache, then mixed), and a head
    // between 128 and 256 wide (the second column half of a 256-padded head part-empty).
    {4, 2, 200, 16, {{0, 300, 200}, {1, 90, 70}, {2, 20, 0}}},
};
// Decode rows after long prompts (CUDA splits each row's keys over many warps and joins them).
const Shape kLongDecode = {4, 1, 64, 32, {{0, 700, 699}, {1, 300, 299}, {2, 5, 4}, {3, 64, 63}}};
// Qwen3.5's attention (8 query heads on 2 kv heads of 256): with LINFER_CUDA_DECODE_ATTENTION=
// grouped a CUDA warp attends a kv head's 4 query heads at once (8 features a lane each).
const Shape kQwenDecode = {8, 2, 256, 16, {{0, 300, 299}, {1, 129, 128}, {2, 3, 2}}};

// softmax(scale q·k) v over keys p − window < j ≤ p (all j ≤ p without a window), float64.
std::vector<double> Oracle(const Shape& sh, const std::vector<float>& q,
                           const std::vector<float>& k, const std::vector<float>& v, int64_t len,
                           int window) {
  const int kQ = sh.q_heads, kKv = sh.kv_heads, kD = sh.head_dim;
  std::vector<double> out(len * kQ * kD, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kD));
  for (int64_t p = 0; p < len; ++p) {
    for (int h = 0; h < kQ; ++h) {
      const int kh = h / (kQ / kKv);
      const int64_t lo = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
      std::vector<double> s;
      double mx = -INFINITY;
      for (int64_t j = lo; j <= p; ++j) {
        double dot = 0;
        for (int x = 0; x < kD; ++x)
          dot += double{q[(p * kQ + h) * kD + x]} * k[(j * kKv + kh) * kD + x];
        s.push_back(dot * scale);
        mx = std::max(mx, s.back());
      }
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t j = lo; j <= p; ++j) {
        for (int x = 0; x < kD; ++x) {
          out[(p * kQ + h) * kD + x] += s[j - lo] / sum * v[(j * kKv + kh) * kD + x];
        }
      }
    }
  }
  return out;
}

// CUDA's prefill on tensor cores: the default (or "staged", "flash"), unless
// LINFER_CUDA_ATTENTION names another kernel.
bool TensorMode() {
  const char* v = std::getenv("LINFER_CUDA_ATTENTION");
  return v == nullptr || std::string(v).empty() || std::string(v) == "tensor" ||
         std::string(v) == "staged" || std::string(v) == "flash";
}

class AttentionTest : public ::testing::TestWithParam<DeviceCase> {
 protected:
  void SetUp() override {
    if (testing_util::DeviceMissing(GetParam())) GTEST_SKIP() << testing_util::kNoDevice;
    dev_ = std::make_unique<TestContext>(GetParam().device);
  }

  // Runs the sequences in two steps and compares step 2's outputs (and step 1's) to the oracle.
  void Check(int window, const Shape& sh = kTiny) {
    const ExecContext& ctx = dev_->ctx;
    const int kQ = sh.q_heads, kKv = sh.kv_heads, kD = sh.head_dim, kBlock = sh.block_tokens;
    const std::vector<Seq>& seqs = sh.seqs;
    // Per sequence, the whole prompt's q, k, v (host).
    std::vector<std::vector<float>> q, k, v;
    for (size_t i = 0; i < seqs.size(); ++i) {
      q.push_back(RandomFloats(seqs[i].len * kQ * kD, 100 + i));
      k.push_back(RandomFloats(seqs[i].len * kKv * kD, 200 + i));
      v.push_back(RandomFloats(seqs[i].len * kKv * kD, 300 + i, value_scale_));
    }
    // Storage and shuffled block tables (each sequence's blocks scattered over the pool).
    int64_t longest = 0;
    for (const Seq& e : seqs) longest = std::max(longest, e.len);
    const int64_t max_blocks = (longest + kBlock - 1) / kBlock, blocks = kSlots * max_blocks;
    std::vector<int32_t> ids(blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
    KvCacheRef kv;
    const linfer::Shape storage_shape = window > 0 ? linfer::Shape{kSlots, 2, window, kKv, kD}
                                                   : linfer::Shape{blocks, kBlock, 2, kKv, kD};
    // bf16 and fp8: NaN bits (0x7fc0, 0x7f) everywhere, as Poisoned does for f32.
    Tensor storage = kv_dtype_ == DType::kBF16
                         ? ToDevice(ctx, std::vector<uint16_t>(NumElements(storage_shape), 0x7fc0),
                                    DType::kBF16, storage_shape)
                     : kv_dtype_ == DType::kF8E4M3
                         ? ToDevice(ctx, std::vector<uint8_t>(NumElements(storage_shape), 0x7f),
                                    DType::kF8E4M3, storage_shape)
                         : Poisoned(ctx, storage_shape);
    kv.kind = window > 0 ? KvCacheRef::Kind::kRing : KvCacheRef::Kind::kPaged;
    kv.storage = storage.view();
    for (int step = 0; step < 2; ++step) {
      std::vector<Segment> segs;
      std::vector<float> sq, sk, sv;
      std::vector<int32_t> table;
      std::vector<size_t> which;
      int64_t row = 0;
      for (size_t i = 0; i < seqs.size(); ++i) {
        const int64_t from = step == 0 ? 0 : seqs[i].split,
                      to = step == 0 ? seqs[i].split : seqs[i].len;
        if (to == from) continue;
        segs.push_back({row, to - from, from, seqs[i].slot});
        which.push_back(i);
        sq.insert(sq.end(), q[i].begin() + from * kQ * kD, q[i].begin() + to * kQ * kD);
        sk.insert(sk.end(), k[i].begin() + from * kKv * kD, k[i].begin() + to * kKv * kD);
        sv.insert(sv.end(), v[i].begin() + from * kKv * kD, v[i].begin() + to * kKv * kD);
        for (int64_t b = 0; b < max_blocks; ++b)
          table.push_back(ids[seqs[i].slot * max_blocks + b]);
        row += to - from;
      }
      const int64_t n = static_cast<int64_t>(segs.size());
      Tensor tq = ToDevice(ctx, sq, {row, kQ * kD}), tk = ToDevice(ctx, sk, {row, kKv * kD});
      Tensor tv = ToDevice(ctx, sv, {row, kKv * kD}), out = Poisoned(ctx, {row, kQ * kD});
      Tensor seg_table = SegmentTable(ctx, segs);
      Tensor block_table = ToDevice(ctx, table, DType::kI32, {n, max_blocks});
      Segments s{segs, seg_table.view(), {table, block_table.view(), max_blocks, kBlock}};
      const AttentionParams p{kQ, kKv, kD,
                              static_cast<float>(1.0 / std::sqrt(static_cast<double>(kD))), window};
      absl::Status st = Attention(ctx, tq.view(), tk.view(), tv.view(), s, kv, p, out.view());
      ASSERT_TRUE(st.ok()) << st;
      const std::vector<float> got = ToHost(ctx, out.view());
      for (size_t si = 0; si < segs.size(); ++si) {
        const size_t i = which[si];
        // A bf16 or fp8 cache holds, and every query reads, the keys and values rounded to it.
        const auto stored = [&](const std::vector<float>& x) {
          return kv_dtype_ == DType::kBF16     ? RoundToBf16(x)
                 : kv_dtype_ == DType::kF8E4M3 ? RoundToE4m3(x)
                                               : x;
        };
        const std::vector<double> want =
            Oracle(sh, q[i], stored(k[i]), stored(v[i]), seqs[i].len, window);
        const int64_t from = segs[si].position, count = segs[si].num_tokens;
        std::vector<float> a(got.begin() + segs[si].row_begin * kQ * kD,
                             got.begin() + (segs[si].row_begin + count) * kQ * kD);
        std::vector<float> b(want.begin() + from * kQ * kD,
                             want.begin() + (from + count) * kQ * kD);
        // CUDA's prefill segments on tensor cores (the default): bf16 operands.
        const bool bf16 = GetParam().device == Device::kCuda && count >= 16 && TensorMode();
        EXPECT_TRUE(AllNear(a, b, (bf16 ? 2e-2 : 1e-5) * value_scale_, bf16 ? 2e-2 : 1e-4))
            << "window " << window << " step " << step << " sequence " << i << " heads " << kQ
            << "/" << kKv << " head_dim " << kD << " kv " << DTypeName(kv_dtype_);
      }
    }
  }

  // The cases a narrower cache (kv_dtype_) runs: paged, narrow rings, long decodes, prefills.
  void CheckStoredCases() {
    Check(0);
    for (int window : {1, 8}) Check(window);
    for (int window : {0, 100}) {
      Check(window, kLongDecode);
      Check(window, kQwenDecode);
    }
    for (const Shape& sh : kPrefillShapes) {
      for (int window : {0, 40}) Check(window, sh);
    }
  }

  std::unique_ptr<TestContext> dev_;
  DType kv_dtype_ = DType::kF32;  // the cache's storage
  float value_scale_ = 1.0f;      // the values' standard deviation
};

TEST_P(AttentionTest, PagedMatchesTheOracleAcrossSteps) { Check(0); }
TEST_P(AttentionTest, RingWindowsMatchTheOracleAcrossSteps) {
  for (int window : {1, 3, 8, 64}) Check(window);
}
TEST_P(AttentionTest, LongContextDecodeMatchesTheOracle) {
  for (int window : {0, 100}) {
    Check(window, kLongDecode);
    Check(window, kQwenDecode);
  }
}
TEST_P(AttentionTest, PrefillSegmentsMatchTheOracle) {
  for (const Shape& sh : kPrefillShapes) {
    // Paged, and rings narrower than a key tile, than a segment, and wider than every sequence.
    for (int window : {0, 5, 40, 128}) Check(window, sh);
  }
}

// A bf16 cache: the same cases against the oracle over keys and values rounded to bf16 — a
// query reads this step's own keys as the cache stores them too, so the f32 kernels (the CPU's,
// CUDA's decode and tiled ones) meet it at f32 tolerances and a prompt split over two steps gives
// what it would in one.
TEST_P(AttentionTest, Bf16CacheMatchesTheOracleOnRoundedKeys) {
  kv_dtype_ = DType::kBF16;
  CheckStoredCases();
}

// An fp8 e4m3 cache (scale 1, saturating): the same cases against the oracle over keys and values
// rounded to the nearest e4m3 value (kernels/tensor.h E4m3FromDouble), exactly what the CPU and
// CUDA write and what a query reads of this step's own keys; the tensor cores take them exactly
// (every e4m3 value is a bf16 one).
TEST_P(AttentionTest, Fp8CacheMatchesTheOracleOnRoundedKeys) {
  kv_dtype_ = DType::kF8E4M3;
  CheckStoredCases();
  // Values of standard deviation 600: most beyond ±448, stored saturated (the CPU's rounding and
  // CUDA's __NV_SATFINITE conversion must agree there too), with a paged decode and a prefill.
  value_scale_ = 600.0f;
  Check(0);
  Check(0, kQwenDecode);
  Check(0, kPrefillShapes[0]);
}

// One decode row after 299 cached tokens next to a 400-token prompt in the same step: correct,
// and on CUDA the decode row's key splits (64 here) reserve partials for the decode row alone,
// not for the prompt's rows too (they once did: rows × heads × splits × (2 + head_dim) floats,
// 54 MB here, 95 GB asked of cudaMalloc in a Qwen3.5-0.8B step of 8192 rows on an H200).
TEST_P(AttentionTest, MixedStepKeepsItsScratchSmall) {
  Check(0, {8, 2, 64, 16, {{0, 300, 299}, {1, 400, 0}}});
  EXPECT_LT(dev_->arena.capacity_bytes(), int64_t{8} << 20);
}

TEST_P(AttentionTest, RefusesBadShapes) {
  const ExecContext& ctx = dev_->ctx;
  const std::vector<Segment> segs = {{0, 2, 0, 0}};
  Tensor seg_table = SegmentTable(ctx, segs);
  Tensor q = Poisoned(ctx, {2, kQ * kD}), k = Poisoned(ctx, {2, kKv * kD});
  Tensor v = Poisoned(ctx, {2, kKv * kD}), out = Poisoned(ctx, {2, kQ * kD});
  Tensor ring = Poisoned(ctx, {1, 2, 3, kKv, kD});
  KvCacheRef kv{KvCacheRef::Kind::kRing, ring.view()};
  const Segments s{segs, seg_table.view(), {}};
  // Window 4 does not match the ring's width 3; 3 query heads do not group over 2 kv heads.
  EXPECT_FALSE(
      Attention(ctx, q.view(), k.view(), v.view(), s, kv, {kQ, kKv, kD, 1.0f, 4}, out.view()).ok());
  EXPECT_FALSE(
      Attention(ctx, q.view(), k.view(), v.view(), s, kv, {3, kKv, kD, 1.0f, 3}, out.view()).ok());
  // A cache stored as f16 (f32, bf16 or fp8 only), by name.
  Tensor f16_ring =
      ToDevice(ctx, std::vector<uint16_t>(2 * 3 * kKv * kD, 0), DType::kF16, {1, 2, 3, kKv, kD});
  const absl::Status f16 =
      Attention(ctx, q.view(), k.view(), v.view(), s, {KvCacheRef::Kind::kRing, f16_ring.view()},
                {kQ, kKv, kD, 1.0f, 3}, out.view());
  EXPECT_EQ(f16.code(), absl::StatusCode::kInvalidArgument) << f16;
  EXPECT_NE(f16.message().find("kv storage"), std::string::npos) << f16;
  // A paged cache without block tables.
  Tensor paged = Poisoned(ctx, {4, kBlock, 2, kKv, kD});
  EXPECT_FALSE(Attention(ctx, q.view(), k.view(), v.view(), s,
                         {KvCacheRef::Kind::kPaged, paged.view()}, {kQ, kKv, kD, 1.0f, 0},
                         out.view())
                   .ok());
}

// Strided ↔ contiguous copies (a column block of a wider tensor) against the host.
TEST_P(AttentionTest, StridedCopiesMoveEachRow) {
  const ExecContext& ctx = dev_->ctx;
  const std::vector<float> wide = RandomFloats(6 * 10, 5);
  Tensor w = ToDevice(ctx, wide, {6, 10}), narrow = Poisoned(ctx, {6, 4});
  ASSERT_TRUE(CopyTensor(ctx, w.view().Cols(3, 4), narrow.view()).ok());
  std::vector<float> want;
  for (int r = 0; r < 6; ++r)
    want.insert(want.end(), wide.begin() + r * 10 + 3, wide.begin() + r * 10 + 7);
  EXPECT_TRUE(AllNear(ToHost(ctx, narrow.view()), want, 0, 0));
  // And back into another column block.
  ASSERT_TRUE(CopyTensor(ctx, narrow.view(), w.view().Cols(0, 4)).ok());
  const std::vector<float> back = ToHost(ctx, w.view());
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 4; ++c) EXPECT_EQ(back[r * 10 + c], wide[r * 10 + 3 + c]);
    for (int c = 4; c < 10; ++c) EXPECT_EQ(back[r * 10 + c], wide[r * 10 + c]);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, AttentionTest,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
