// Presample (kernels/presample.h): the CPU twin against a full sort, and every device against the
// CPU twin — the same ids and logits exactly (ties broken by the lower id, NaN last), the same
// argmax, and the log-sum-exp to rounding — on random rows, rows with many ties, masked (−inf)
// vocabularies, ±inf and NaN, for K from 1 to 64 and vocabularies from K to 152K. The draws
// (PresampleDraws): the CPU twin against a float64 inverse CDF, every device against the CPU twin
// (the same tokens and logits, the weight sums to double rounding).
#include "kernels/presample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/sampling_math.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::DeviceCase;
using testing_util::RandomFloats;
using testing_util::TestContext;
using testing_util::ToDevice;

struct Result {
  std::vector<int32_t> ids, argmax;
  std::vector<float> logits, lse;
};

Result RunPresample(const ExecContext& ctx, const std::vector<float>& x, int64_t rows,
                    int64_t vocab, int64_t k, int64_t pad = 0) {
  Tensor t = ToDevice(ctx, x, {rows, vocab + pad});
  Tensor ids = ToDevice(ctx, std::vector<int32_t>(rows * k, -7), DType::kI32, {rows, k});
  Tensor logits = testing_util::Poisoned(ctx, {rows, k});
  Tensor argmax = ToDevice(ctx, std::vector<int32_t>(rows, -7), DType::kI32, {rows});
  Tensor lse = testing_util::Poisoned(ctx, {rows});
  const absl::Status s = Presample(ctx, t.view().Cols(pad, vocab),
                                   {ids.view(), logits.view(), argmax.view(), lse.view()});
  EXPECT_TRUE(s.ok()) << s;
  return {testing_util::ToHostAs<int32_t>(ctx, ids.view()),
          testing_util::ToHostAs<int32_t>(ctx, argmax.view()),
          testing_util::ToHost(ctx, logits.view()), testing_util::ToHost(ctx, lse.view())};
}

// Rows of several kinds: random, heavy ties, a masked vocabulary, ±inf, NaN, all −inf.
std::vector<float> Rows(int64_t rows, int64_t vocab, uint32_t seed) {
  std::vector<float> x = RandomFloats(rows * vocab, seed, 3.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * vocab;
    switch (r % 6) {
      case 1:  // ties: a few distinct values
        for (int64_t v = 0; v < vocab; ++v) row[v] = std::round(row[v]);
        break;
      case 2:  // most of the vocabulary masked
        for (int64_t v = 0; v < vocab; ++v) {
          if (v % 7 != 3) row[v] = -INFINITY;
        }
        break;
      case 3:  // infinities and a NaN
        row[vocab / 2] = INFINITY;
        row[vocab / 3] = NAN;
        row[0] = -INFINITY;
        break;
      case 4:
        std::fill(row, row + vocab, -INFINITY);
        break;
      default:
        break;
    }
  }
  return x;
}

TEST(PresampleCpuTest, MatchesAFullSortAndADoubleLogSumExp) {
  const int64_t rows = 6, vocab = 500, k = 17;
  const std::vector<float> x = Rows(rows, vocab, 5);
  TestContext cpu(Device::kCpu);
  const Result r = RunPresample(cpu.ctx, x, rows, vocab, k);
  for (int64_t b = 0; b < rows; ++b) {
    const float* row = x.data() + b * vocab;
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    auto key = [&](int32_t i) { return std::isnan(row[i]) ? -INFINITY : row[i]; };
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t c) {
      if (std::isnan(row[a]) != std::isnan(row[c])) return std::isnan(row[c]);
      return key(a) > key(c);
    });
    for (int64_t i = 0; i < k; ++i) EXPECT_EQ(r.ids[b * k + i], order[i]) << b << " " << i;
    EXPECT_EQ(r.argmax[b], order[0]);
    double m = -INFINITY, s = 0;
    bool nan = false;
    for (int64_t v = 0; v < vocab; ++v) {
      nan |= std::isnan(row[v]);
      if (!std::isnan(row[v])) m = std::max<double>(m, row[v]);
    }
    if (std::isinf(m)) {
      EXPECT_EQ(r.lse[b], m) << b;
    } else if (nan) {
      EXPECT_TRUE(std::isnan(r.lse[b])) << b;
    } else {
      for (int64_t v = 0; v < vocab; ++v) s += std::exp(row[v] - m);
      EXPECT_NEAR(r.lse[b], m + std::log(s), 1e-5) << b;
    }
  }
}

// The K a device takes: the CPU any K ≤ 64 and ≤ the vocabulary; CUDA (where the build has it)
// fewer above 524,288 ids, none above 33.5 M (its candidates share one block's shared memory).
TEST(PresampleCpuTest, MaxKByDeviceAndVocabulary) {
  EXPECT_EQ(MaxPresampleK(Device::kCpu, 248320), kMaxPresampleK);
  EXPECT_EQ(MaxPresampleK(Device::kCpu, 40), 40);
  EXPECT_EQ(MaxPresampleK(Device::kCpu, 0), 0);
  if (MaxPresampleK(Device::kCuda, 1000) == 0) GTEST_SKIP() << "a build without CUDA";
  EXPECT_EQ(MaxPresampleK(Device::kCuda, 1000), 64);
  EXPECT_EQ(MaxPresampleK(Device::kCuda, 524288), 64);
  EXPECT_EQ(MaxPresampleK(Device::kCuda, 524289), 63);
  EXPECT_EQ(MaxPresampleK(Device::kCuda, 1000000), 33);
  EXPECT_EQ(MaxPresampleK(Device::kCuda, int64_t{1} << 26), 0);
}

class PresampleDeviceTest : public ::testing::TestWithParam<DeviceCase> {
 protected:
  void SetUp() override {
    if (testing_util::DeviceMissing(GetParam())) GTEST_SKIP() << testing_util::kNoDevice;
    dev_ = std::make_unique<TestContext>(GetParam().device);
  }
  std::unique_ptr<TestContext> dev_;
  TestContext cpu_{Device::kCpu};
};

TEST_P(PresampleDeviceTest, MatchesTheCpuTwinExactly) {
  struct Case {
    int64_t rows, vocab, k, pad;
  };
  for (const Case& c : {Case{1, 151936, 64, 0}, Case{6, 1000, 1, 0}, Case{6, 64, 64, 3},
                        Case{257, 4099, 20, 0}, Case{12, 248320, 40, 5}}) {
    const std::vector<float> x = Rows(c.rows, c.vocab + c.pad, 9);
    const Result d = RunPresample(dev_->ctx, x, c.rows, c.vocab, c.k, c.pad);
    const Result h = RunPresample(cpu_.ctx, x, c.rows, c.vocab, c.k, c.pad);
    const std::string what = absl::StrCat(c.rows, "×", c.vocab, " K ", c.k);
    EXPECT_EQ(d.ids, h.ids) << what;
    EXPECT_EQ(d.argmax, h.argmax) << what;
    for (size_t i = 0; i < d.logits.size(); ++i) {
      EXPECT_TRUE(d.logits[i] == h.logits[i] ||
                  (std::isnan(d.logits[i]) && std::isnan(h.logits[i])))
          << what << " at " << i;
    }
    for (int64_t b = 0; b < c.rows; ++b) {
      if (std::isnan(h.lse[b]) || std::isinf(h.lse[b])) {
        EXPECT_TRUE(d.lse[b] == h.lse[b] || (std::isnan(d.lse[b]) && std::isnan(h.lse[b])))
            << what << " row " << b << ": " << d.lse[b] << " vs " << h.lse[b];
      } else {
        EXPECT_NEAR(d.lse[b], h.lse[b], 1e-5 * std::max(1.0f, std::abs(h.lse[b])))
            << what << " row " << b;
      }
    }
  }
}

TEST_P(PresampleDeviceTest, RefusesBadK) {
  const ExecContext& ctx = dev_->ctx;
  Tensor x = testing_util::Poisoned(ctx, {2, 50});
  for (int64_t k : {0, 65, 51}) {
    Tensor ids = ToDevice(ctx, std::vector<int32_t>(2 * k), DType::kI32, {2, k});
    Tensor logits = testing_util::Poisoned(ctx, {2, k});
    Tensor argmax = ToDevice(ctx, std::vector<int32_t>(2), DType::kI32, {2});
    Tensor lse = testing_util::Poisoned(ctx, {2});
    EXPECT_FALSE(
        Presample(ctx, x.view(), {ids.view(), logits.view(), argmax.view(), lse.view()}).ok())
        << k;
  }
}

struct Draws {
  std::vector<int32_t> token;
  std::vector<float> logit;
  std::vector<double> weight_sum;
};

// Presample with draws: row b draws at 1/temperature inv_t[b] (0: none) with uniform bits[b].
Draws RunDraws(const ExecContext& ctx, const std::vector<float>& x, int64_t rows, int64_t vocab,
               int64_t k, int64_t pad, const std::vector<float>& inv_t,
               const std::vector<int64_t>& bits) {
  Tensor t = ToDevice(ctx, x, {rows, vocab + pad});
  Tensor ids = ToDevice(ctx, std::vector<int32_t>(rows * k, -7), DType::kI32, {rows, k});
  Tensor logits = testing_util::Poisoned(ctx, {rows, k});
  Tensor argmax = ToDevice(ctx, std::vector<int32_t>(rows, -7), DType::kI32, {rows});
  Tensor lse = testing_util::Poisoned(ctx, {rows});
  Tensor it = ToDevice(ctx, inv_t, {rows});
  Tensor b = ToDevice(ctx, bits, DType::kI64, {rows});
  Tensor sum = ToDevice(ctx, std::vector<double>(rows, -7.0), DType::kF64, {rows});
  Tensor token = ToDevice(ctx, std::vector<int32_t>(rows, -7), DType::kI32, {rows});
  Tensor logit = testing_util::Poisoned(ctx, {rows});
  const PresampleDraws d{it.view(), b.view(), sum.view(), token.view(), logit.view()};
  const absl::Status s = Presample(ctx, t.view().Cols(pad, vocab),
                                   {ids.view(), logits.view(), argmax.view(), lse.view()}, &d);
  EXPECT_TRUE(s.ok()) << s;
  return {testing_util::ToHostAs<int32_t>(ctx, token.view()),
          testing_util::ToHost(ctx, logit.view()), testing_util::ToHostAs<double>(ctx, sum.view())};
}

// Per row: 1/temperature (every third row 0: no draw) and 53 random bits (a few at the ends of
// [0, 1)).
void DrawInputs(int64_t rows, uint32_t seed, std::vector<float>* inv_t,
                std::vector<int64_t>* bits) {
  std::mt19937_64 gen(seed);
  for (int64_t r = 0; r < rows; ++r) {
    inv_t->push_back(r % 3 == 2 ? 0.0f : 1.0f / (0.2f + 0.3f * static_cast<float>(r % 7)));
    const uint64_t u = gen() >> 11;
    bits->push_back(static_cast<int64_t>(r % 11 == 5   ? 0
                                         : r % 11 == 6 ? (uint64_t{1} << 53) - 1
                                                       : u));
  }
}

// The token of each drawing row lies where u · Σw falls in a float64 inverse CDF (w by std::exp,
// to 1e-5 of the total), its logit is the row's, and Σw is the float64 sum to 1e-5; rows without
// a draw get −1, 0, 0; rows whose maximum is not finite their argmax.
TEST(PresampleCpuTest, DrawsMatchAFloat64InverseCdf) {
  const int64_t rows = 40, vocab = 3000, k = 5;
  std::vector<float> x = Rows(rows, vocab, 21);
  for (int64_t r = 5; r < rows; r += 6) {  // sharper rows too: a few tokens hold the mass
    for (int64_t v = 0; v < vocab; ++v) x[r * vocab + v] *= 6.0f;
  }
  std::vector<float> inv_t;
  std::vector<int64_t> bits;
  DrawInputs(rows, 4, &inv_t, &bits);
  TestContext cpu(Device::kCpu);
  const Draws d = RunDraws(cpu.ctx, x, rows, vocab, k, 0, inv_t, bits);
  const Result top = RunPresample(cpu.ctx, x, rows, vocab, k);
  int drawn = 0;
  for (int64_t b = 0; b < rows; ++b) {
    SCOPED_TRACE(b);
    const float* row = x.data() + b * vocab;
    const float m = top.logits[b * k];
    if (!(inv_t[b] > 0.0f)) {
      EXPECT_EQ(d.token[b], -1);
      EXPECT_EQ(d.weight_sum[b], 0.0);
      EXPECT_EQ(d.logit[b], 0.0f);
      continue;
    }
    if (!std::isfinite(m)) {
      EXPECT_EQ(d.token[b], top.argmax[b]);
      EXPECT_EQ(d.weight_sum[b], 0.0);
      continue;
    }
    if (std::any_of(row, row + vocab, [](float v) { return std::isnan(v); })) continue;
    std::vector<double> cdf(vocab);
    double acc = 0.0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double e = (static_cast<double>(row[v]) - m) * inv_t[b];
      acc += e < kSampleExpMin ? 0.0 : std::exp(e);
      cdf[v] = acc;
    }
    EXPECT_NEAR(d.weight_sum[b], acc, 1e-5 * acc);
    const double target = UniformFromBits(static_cast<uint64_t>(bits[b])) * acc;
    const int32_t t = d.token[b];
    ASSERT_GE(t, 0);
    ASSERT_LT(t, vocab);
    EXPECT_LE(t == 0 ? 0.0 : cdf[t - 1], target + 1e-5 * acc);
    EXPECT_GT(cdf[t] + 1e-5 * acc, target);
    EXPECT_GT(std::exp((static_cast<double>(row[t]) - m) * inv_t[b]), 0.0);
    EXPECT_EQ(d.logit[b], row[t]);
    ++drawn;
  }
  EXPECT_GT(drawn, rows / 3);
}

// 1/temperature = ∞ (a temperature that underflows; the sampler itself takes temperatures under
// 1e-5 as greedy): no weight is positive, and the draw falls back to the argmax (the CPU used to
// give token 0, its CUDA twin the argmax).
TEST(PresampleCpuTest, AnInfiniteInverseTemperatureDrawsTheArgmax) {
  const int64_t rows = 3, vocab = 500, k = 4;
  const std::vector<float> x = Rows(rows, vocab, 5);
  const std::vector<float> inv_t(rows, std::numeric_limits<float>::infinity());
  const std::vector<int64_t> bits = {0, int64_t{1} << 52, (int64_t{1} << 53) - 1};
  TestContext cpu(Device::kCpu);
  const Draws d = RunDraws(cpu.ctx, x, rows, vocab, k, 0, inv_t, bits);
  const Result top = RunPresample(cpu.ctx, x, rows, vocab, k);
  for (int64_t b = 0; b < rows; ++b) {
    EXPECT_EQ(d.token[b], top.argmax[b]) << "row " << b;
    EXPECT_NE(top.argmax[b], 0) << "row " << b << ": the test needs an argmax other than 0";
  }
}

TEST_P(PresampleDeviceTest, DrawsMatchTheCpuTwin) {
  struct Case {
    int64_t rows, vocab, k, pad;
  };
  for (const Case& c : {Case{1, 151936, 64, 0}, Case{7, 1000, 1, 0}, Case{6, 64, 64, 3},
                        Case{257, 4099, 20, 0}, Case{12, 248320, 40, 5}, Case{3, 600000, 32, 0}}) {
    std::vector<float> x = Rows(c.rows, c.vocab + c.pad, 13);
    for (int64_t r = 5; r < c.rows; r += 6) {
      for (int64_t v = 0; v < c.vocab + c.pad; ++v) x[r * (c.vocab + c.pad) + v] *= 6.0f;
    }
    std::vector<float> inv_t;
    std::vector<int64_t> bits;
    DrawInputs(c.rows, 8, &inv_t, &bits);
    // 1/temperature = ∞ in one row: the maximum's weight NaN, the others' 0 — no weight positive.
    if (c.rows == 7) inv_t[1] = std::numeric_limits<float>::infinity();
    const Draws d = RunDraws(dev_->ctx, x, c.rows, c.vocab, c.k, c.pad, inv_t, bits);
    const Draws h = RunDraws(cpu_.ctx, x, c.rows, c.vocab, c.k, c.pad, inv_t, bits);
    const std::string what = absl::StrCat(c.rows, "×", c.vocab, " K ", c.k);
    EXPECT_EQ(d.token, h.token) << what;
    for (int64_t b = 0; b < c.rows; ++b) {
      EXPECT_TRUE(d.logit[b] == h.logit[b] || (std::isnan(d.logit[b]) && std::isnan(h.logit[b])))
          << what << " row " << b;
      // The same double additions in the same order: the same sum, bit for bit.
      EXPECT_TRUE(d.weight_sum[b] == h.weight_sum[b] ||
                  (std::isnan(d.weight_sum[b]) && std::isnan(h.weight_sum[b])))
          << what << " row " << b << ": " << d.weight_sum[b] << " vs " << h.weight_sum[b];
    }
  }
}

TEST_P(PresampleDeviceTest, RefusesBadDraws) {
  const ExecContext& ctx = dev_->ctx;
  Tensor x = testing_util::Poisoned(ctx, {2, 50});
  Tensor ids = ToDevice(ctx, std::vector<int32_t>(8), DType::kI32, {2, 4});
  Tensor logits = testing_util::Poisoned(ctx, {2, 4});
  Tensor argmax = ToDevice(ctx, std::vector<int32_t>(2), DType::kI32, {2});
  Tensor lse = testing_util::Poisoned(ctx, {2});
  Tensor f32 = testing_util::Poisoned(ctx, {2}), f32_3 = testing_util::Poisoned(ctx, {3});
  Tensor i64 = ToDevice(ctx, std::vector<int64_t>(2), DType::kI64, {2});
  Tensor f64 = ToDevice(ctx, std::vector<double>(2), DType::kF64, {2});
  Tensor i32 = ToDevice(ctx, std::vector<int32_t>(2), DType::kI32, {2});
  const PresampleOutput out{ids.view(), logits.view(), argmax.view(), lse.view()};
  const PresampleDraws good{f32.view(), i64.view(), f64.view(), i32.view(), f32.view()};
  for (int which = 0; which < 4; ++which) {
    PresampleDraws bad = good;
    switch (which) {
      case 0:
        bad.inv_temperature = f32_3.view();  // 3 rows for 2
        break;
      case 1:
        bad.uniform_bits = i32.view();  // I32 bits
        break;
      case 2:
        bad.weight_sum = f32.view();  // F32 sum
        break;
      case 3:
        bad.token = TensorView();  // missing
        break;
    }
    const absl::Status s = Presample(ctx, x.view(), out, &bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << which << ": " << s;
  }
  EXPECT_TRUE(Presample(ctx, x.view(), out, &good).ok());
}

INSTANTIATE_TEST_SUITE_P(Devices, PresampleDeviceTest,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
