// Presample (kernels/presample.h): the CPU twin against a full sort, and every device against the
// CPU twin — the same ids and logits exactly (ties broken by the lower id, NaN last), the same
// argmax, and the log-sum-exp to rounding — on random rows, rows with many ties, masked (−inf)
// vocabularies, ±inf and NaN, for K from 1 to 64 and vocabularies from K to 152K.
#include "kernels/presample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
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

INSTANTIATE_TEST_SUITE_P(Devices, PresampleDeviceTest,
                         ::testing::ValuesIn(testing_util::AllDeviceCases()),
                         testing_util::DeviceCaseName);

}  // namespace
}  // namespace linfer
