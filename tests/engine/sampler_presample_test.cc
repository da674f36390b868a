// Sampler::SampleTop against Sampler::Sample: rows cut to their K best by the pre-sampler's CPU
// twin (kernels/presample.h) give the same tokens from the same seeds as the whole rows, over
// peaked, flat, tied and tiny-vocabulary logits and every filter combination SamplesFromTop
// accepts; the logprobs agree to the rounding of the log-sum-exp. The oracle is the full-row
// sampler itself, fed in lockstep.
#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "gtest/gtest.h"
#include "kernels/presample.h"

namespace linfer {
namespace {

struct Presampled {
  std::vector<int32_t> ids, argmax;
  std::vector<float> logits, lse;
};

// Rows [rows, vocab] through the CPU pre-sampler with K = k.
Presampled PresampleRows(std::vector<float>& x, int64_t rows, int64_t vocab, int64_t k) {
  Presampled p;
  p.ids.resize(rows * k);
  p.logits.resize(rows * k);
  p.argmax.resize(rows);
  p.lse.resize(rows);
  const ExecContext ctx = CpuContext();
  const PresampleOutput out{TensorView(p.ids.data(), DType::kI32, {rows, k}),
                            TensorView(p.logits.data(), DType::kF32, {rows, k}),
                            TensorView(p.argmax.data(), DType::kI32, {rows}),
                            TensorView(p.lse.data(), DType::kF32, {rows})};
  EXPECT_TRUE(Presample(ctx, TensorView(x.data(), DType::kF32, {rows, vocab}), out).ok());
  return p;
}

struct Shape {
  std::string name;
  int64_t vocab;
  float scale;    // logits ~ N(0, scale²)
  float quantum;  // > 0: logits rounded to multiples (ties)
};

struct Case {
  std::string name;
  SamplingParams params;
  bool expect_top;  // whether SamplesFromTop(64) holds
};

std::vector<Case> Cases() {
  std::vector<Case> c;
  auto add = [&](std::string name, float t, int k, float top_p, float min_p,
                 std::optional<int32_t> logprobs, bool expect) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.logprobs = logprobs;
    c.push_back({std::move(name), p, expect});
  };
  add("greedy", 0.0f, 0, 1.0f, 0.0f, 5, true);
  add("greedy_filters_ignored", 0.0f, 0, 0.3f, 0.0f, std::nullopt, true);
  add("top_k_1", 0.8f, 1, 1.0f, 0.0f, std::nullopt, true);
  add("top_k_40", 1.0f, 40, 1.0f, 0.0f, 3, true);
  add("top_k_64_top_p", 0.7f, 64, 0.9f, 0.0f, std::nullopt, true);
  add("top_k_min_p_logprobs", 1.2f, 20, 1.0f, 0.1f, 20, true);
  add("min_p", 1.0f, 0, 1.0f, 0.05f, 1, true);
  add("min_p_top_p", 0.5f, 0, 0.8f, 0.3f, std::nullopt, true);
  add("min_p_tiny", 1.0f, 0, 1.0f, 1e-4f, std::nullopt, true);  // often the whole row after all
  add("dense", 1.0f, 0, 1.0f, 0.0f, std::nullopt, false);
  add("top_p_alone", 0.9f, 0, 0.9f, 0.0f, std::nullopt, false);
  add("top_k_beyond_k", 1.0f, 65, 1.0f, 0.0f, std::nullopt, false);
  return c;
}

TEST(SampleTopTest, SameTokensFromTheSameSeedsAsTheWholeRow) {
  const std::vector<Shape> shapes = {{"peaked", 5000, 3.0f, 0.0f},
                                     {"flat", 5000, 0.3f, 0.0f},
                                     {"ties", 1000, 2.0f, 0.5f},
                                     {"tiny_vocab", 40, 2.0f, 0.0f}};
  constexpr int64_t kRows = 150;
  for (const Shape& shape : shapes) {
    std::mt19937 gen(7);
    std::normal_distribution<float> normal(0.0f, shape.scale);
    std::vector<float> x(kRows * shape.vocab);
    for (float& v : x) {
      v = normal(gen);
      if (shape.quantum > 0) v = std::round(v / shape.quantum) * shape.quantum;
    }
    const int64_t k = std::min<int64_t>(kMaxPresampleK, shape.vocab);
    const Presampled pre = PresampleRows(x, kRows, shape.vocab, k);
    for (const Case& c : Cases()) {
      SCOPED_TRACE(shape.name + " / " + c.name);
      SamplingParams p = c.params;
      p.seed = 1234;
      Sampler full(p), top(p);
      if (k == kMaxPresampleK) {
        ASSERT_EQ(top.SamplesFromTop(static_cast<int>(k)), c.expect_top);
      }
      if (!top.SamplesFromTop(static_cast<int>(k))) continue;
      int from_top = 0;
      for (int64_t r = 0; r < kRows; ++r) {
        const absl::Span<const float> row(x.data() + r * shape.vocab, shape.vocab);
        const absl::StatusOr<SampleResult> want = full.Sample(row, {}, {});
        ASSERT_TRUE(want.ok()) << want.status();
        const PresampledRow cut{{pre.ids.data() + r * k, static_cast<size_t>(k)},
                                {pre.logits.data() + r * k, static_cast<size_t>(k)},
                                pre.lse[r],
                                shape.vocab};
        absl::StatusOr<std::optional<SampleResult>> got = top.SampleTop(cut);
        ASSERT_TRUE(got.ok()) << got.status();
        SampleResult g;
        if (got->has_value()) {
          ++from_top;
          g = **got;
        } else {  // what the engine does: the whole row, the random stream untouched so far
          g = *top.Sample(row, {}, {});
        }
        ASSERT_EQ(g.token, want->token) << "row " << r;
        EXPECT_NEAR(g.logprob, want->logprob, 2e-5) << "row " << r;
        ASSERT_EQ(g.top_logprobs.size(), want->top_logprobs.size());
        for (size_t i = 0; i < g.top_logprobs.size(); ++i) {
          EXPECT_EQ(g.top_logprobs[i].first, want->top_logprobs[i].first) << "row " << r;
          EXPECT_NEAR(g.top_logprobs[i].second, want->top_logprobs[i].second, 2e-5);
        }
      }
      // Every accepted case is served from the K best on most rows of the peaked and tied logits
      // (on flat ones min-p keeps more than K tokens: the whole row then; a top-k as large as the
      // vocabulary is no filter, so there it is a draw over the whole row).
      if (shape.name != "flat" && c.name != "min_p_tiny" && c.params.top_k < shape.vocab) {
        EXPECT_GT(from_top, kRows / 2);
      }
    }
  }
}

TEST(SampleTopTest, BiasAndPenaltiesNeedTheWholeRow) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_TRUE(Sampler(p).SamplesFromTop(64));
  p.logit_bias = {{3, 1.0f}};
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64));
  p.logit_bias.clear();
  p.repetition_penalty = 1.1f;
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64));
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.5f;
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64));
  p.presence_penalty = 0.0f;
  p.frequency_penalty = -0.5f;
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64));
  p.frequency_penalty = 0.0f;
  p.logprobs = 20;
  EXPECT_FALSE(Sampler(p).SamplesFromTop(16));  // more logprobs than candidates
  EXPECT_TRUE(Sampler(p).SamplesFromTop(20));
}

TEST(SampleTopTest, NonFiniteRowsAreAnError) {
  for (float bad : {std::nanf(""), INFINITY}) {
    std::vector<float> x = {1.0f, 0.5f, bad, -2.0f, 0.0f};
    const Presampled pre = PresampleRows(x, 1, 5, 3);
    SamplingParams p;
    p.temperature = 0.0f;
    Sampler s(p);
    absl::StatusOr<std::optional<SampleResult>> r =
        s.SampleTop({pre.ids, pre.logits, pre.lse[0], 5});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
    EXPECT_NE(r.status().message().find("non-finite"), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace linfer
