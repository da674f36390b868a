// Sampler::SampleTop against Sampler::Sample: rows cut to their K best by the pre-sampler's CPU
// twin (kernels/presample.h) — with its draw over the whole row for temperature alone and top-p
// alone, made with the uniform the sampler drew ahead — give the same tokens from the same seeds
// as the whole rows, over peaked, flat, tied and tiny-vocabulary logits and every filter
// combination SamplesFromTop accepts; the logprobs agree to the rounding of the log-sum-exp. The
// oracle is the full-row sampler itself, fed in lockstep.
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
  std::vector<int32_t> ids, argmax, drawn;
  std::vector<float> logits, lse, inv_t, drawn_logit;
  std::vector<int64_t> bits;
  std::vector<double> weight_sum;
};

// Rows [rows, vocab] through the CPU pre-sampler with K = k; with `inv_t` (per row), also draws
// with the uniforms `bits`.
Presampled PresampleRows(std::vector<float>& x, int64_t rows, int64_t vocab, int64_t k,
                         std::vector<float> inv_t = {}, std::vector<int64_t> bits = {}) {
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
  const TensorView logits(x.data(), DType::kF32, {rows, vocab});
  if (inv_t.empty()) {
    EXPECT_TRUE(Presample(ctx, logits, out).ok());
    return p;
  }
  p.inv_t = std::move(inv_t);
  p.bits = std::move(bits);
  p.weight_sum.resize(rows);
  p.drawn.resize(rows);
  p.drawn_logit.resize(rows);
  const PresampleDraws d{TensorView(p.inv_t.data(), DType::kF32, {rows}),
                         TensorView(p.bits.data(), DType::kI64, {rows}),
                         TensorView(p.weight_sum.data(), DType::kF64, {rows}),
                         TensorView(p.drawn.data(), DType::kI32, {rows}),
                         TensorView(p.drawn_logit.data(), DType::kF32, {rows})};
  EXPECT_TRUE(Presample(ctx, logits, out, &d).ok());
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
  bool expect_top;              // whether SamplesFromTop(64, vocab) holds above 4,096 tokens
  bool small_vocab_top = true;  // … and at or below 4,096
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
  add("dense", 1.0f, 0, 1.0f, 0.0f, std::nullopt, true);
  add("dense_hot_logprobs", 1.7f, 0, 1.0f, 0.0f, 4, true);
  add("top_p_alone", 0.9f, 0, 0.9f, 0.0f, std::nullopt, true);
  c.back().small_vocab_top = false;  // Sample walks the whole sorted row there, not the 64 best
  add("top_p_alone_cold_logprobs", 0.5f, -1, 0.7f, 0.0f, 2, true);
  c.back().small_vocab_top = false;
  add("top_k_beyond_k", 1.0f, 65, 1.0f, 0.0f, std::nullopt, false);
  c.back().small_vocab_top = false;
  return c;
}

TEST(SampleTopTest, SameTokensFromTheSameSeedsAsTheWholeRow) {
  const std::vector<Shape> shapes = {{"sharp", 30000, 8.0f, 0.0f},
                                     {"peaked", 5000, 3.0f, 0.0f},
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
      const bool accepted = top.SamplesFromTop(static_cast<int>(k), shape.vocab);
      if (k == kMaxPresampleK) {
        ASSERT_EQ(accepted, shape.vocab > 4096 ? c.expect_top : c.small_vocab_top);
      }
      if (!accepted) continue;
      int from_top = 0;
      for (int64_t r = 0; r < kRows; ++r) {
        const absl::Span<const float> row(x.data() + r * shape.vocab, shape.vocab);
        const absl::StatusOr<SampleResult> want = full.Sample(row, {}, {});
        ASSERT_TRUE(want.ok()) << want.status();
        PresampledRow cut{{pre.ids.data() + r * k, static_cast<size_t>(k)},
                          {pre.logits.data() + r * k, static_cast<size_t>(k)},
                          pre.lse[r],
                          shape.vocab,
                          std::nullopt};
        if (top.NeedsDeviceDraw()) {  // as the engine: the uniform ahead, the device's draw
          std::vector<float> one(row.begin(), row.end());
          const int64_t bits = static_cast<int64_t>(top.DrawAhead());
          ASSERT_EQ(static_cast<int64_t>(top.DrawAhead()), bits);  // drawn once
          const Presampled d =
              PresampleRows(one, 1, shape.vocab, k, {1.0f / p.temperature}, {bits});
          cut.draw = PresampledRow::Draw{d.weight_sum[0], d.drawn[0], d.drawn_logit[0]};
        }
        absl::StatusOr<std::optional<SampleResult>> got = top.SampleTop(cut);
        ASSERT_TRUE(got.ok()) << got.status();
        SampleResult g;
        if (got->has_value()) {
          ++from_top;
          g = **got;
        } else {  // what the engine does: the whole row, with the uniform drawn ahead if any
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
      // vocabulary is no filter, so there it is a draw over the whole row); top-p alone on the
      // sharp ones (a normal's tail holds most of the mass on the others). A draw over the whole
      // row never needs it.
      if (c.name.starts_with("dense")) {
        EXPECT_EQ(from_top, kRows);
      } else if (c.name.starts_with("top_p_alone")) {
        if (shape.name == "sharp") {
          EXPECT_GT(from_top, kRows / 2);
        }
      } else if (shape.name != "flat" && c.name != "min_p_tiny" && c.params.top_k < shape.vocab) {
        EXPECT_GT(from_top, kRows / 2);
      }
    }
  }
}

TEST(SampleTopTest, BiasAndPenaltiesNeedTheWholeRow) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_TRUE(Sampler(p).SamplesFromTop(64, 50000));
  p.logit_bias = {{3, 1.0f}};
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64, 50000));
  p.logit_bias.clear();
  p.repetition_penalty = 1.1f;
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64, 50000));
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.5f;
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64, 50000));
  p.presence_penalty = 0.0f;
  p.frequency_penalty = -0.5f;
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64, 50000));
  p.frequency_penalty = 0.0f;
  p.logprobs = 20;
  EXPECT_FALSE(Sampler(p).SamplesFromTop(16, 50000));  // more logprobs than candidates
  EXPECT_TRUE(Sampler(p).SamplesFromTop(20, 50000));
}

TEST(SampleTopTest, NonFiniteRowsAreAnError) {
  for (float bad : {std::nanf(""), INFINITY}) {
    std::vector<float> x = {1.0f, 0.5f, bad, -2.0f, 0.0f};
    const Presampled pre = PresampleRows(x, 1, 5, 3);
    SamplingParams p;
    p.temperature = 0.0f;
    Sampler s(p);
    absl::StatusOr<std::optional<SampleResult>> r =
        s.SampleTop({pre.ids, pre.logits, pre.lse[0], 5, std::nullopt});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
    EXPECT_NE(r.status().message().find("non-finite"), std::string::npos) << r.status();
  }
}

// The uniform drawn ahead is the one the sample uses, whichever path samples: a sampler that drew
// ahead and one that did not give the same tokens from the same seed, draw after draw; a drawing
// row without the device's draw is an error, not a guess.
TEST(SampleTopTest, TheUniformDrawnAheadIsTheSamplesOwn) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 99;
  Sampler ahead(p), plain(p);
  ASSERT_TRUE(ahead.NeedsDeviceDraw());
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(300);
  for (int i = 0; i < 50; ++i) {
    for (float& v : x) v = normal(gen);
    if (i % 2 == 0) ahead.DrawAhead();
    const absl::StatusOr<SampleResult> a = ahead.Sample(x, {}, {}), b = plain.Sample(x, {}, {});
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->token, b->token) << i;
  }
  const Presampled pre = PresampleRows(x, 1, 300, 8);
  absl::StatusOr<std::optional<SampleResult>> r =
      ahead.SampleTop({pre.ids, pre.logits, pre.lse[0], 300, std::nullopt});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  p.temperature = 0.0f;
  EXPECT_FALSE(Sampler(p).NeedsDeviceDraw());
  p.temperature = 1.0f;
  p.top_k = 5;
  EXPECT_FALSE(Sampler(p).NeedsDeviceDraw());
  p.top_k = 0;
  p.top_p = 0.5f;
  EXPECT_TRUE(Sampler(p).NeedsDeviceDraw());
  p.min_p = 0.1f;
  EXPECT_FALSE(Sampler(p).NeedsDeviceDraw());
}

}  // namespace
}  // namespace linfer
