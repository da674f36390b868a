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

#include "absl/strings/str_cat.h"
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

// `rows` rows of `shape`'s logits drawn from `gen`.
std::vector<float> RandomLogits(const Shape& shape, int64_t rows, std::mt19937& gen) {
  std::normal_distribution<float> normal(0.0f, shape.scale);
  std::vector<float> x(rows * shape.vocab);
  for (float& v : x) {
    v = normal(gen);
    if (shape.quantum > 0) v = std::round(v / shape.quantum) * shape.quantum;
  }
  return x;
}

// Row r of `pre` (K = k) as the engine hands it to SampleTop, without a draw.
PresampledRow Cut(const Presampled& pre, int64_t r, int64_t k, int64_t vocab) {
  return {{pre.ids.data() + r * k, static_cast<size_t>(k)},
          {pre.logits.data() + r * k, static_cast<size_t>(k)},
          pre.lse[r],
          vocab,
          std::nullopt};
}

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
    std::vector<float> x = RandomLogits(shape, kRows, gen);
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
        PresampledRow cut = Cut(pre, r, k, shape.vocab);
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

// Bias and penalties that can raise a logit (a positive bias, repetition < 1, negative frequency
// or presence) need the whole row; ones that only lower logits do not, for greedy, top-k and
// min-p rows — but a draw over the whole row (plain temperature, top-p alone) still does.
TEST(SampleTopTest, OnlyLoweringBiasAndPenaltiesWorkFromTheBest) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_TRUE(Sampler(p).SamplesFromTop(64, 50000));
  p.logit_bias = {{3, 1.0f}};
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64, 50000));
  p.logit_bias = {{3, -100.0f}, {9, 0.0f}};
  EXPECT_TRUE(Sampler(p).SamplesFromTop(64, 50000));
  p.logit_bias.clear();
  p.repetition_penalty = 1.1f;
  EXPECT_TRUE(Sampler(p).SamplesFromTop(64, 50000));
  p.repetition_penalty = 0.9f;
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64, 50000));
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.5f;
  EXPECT_TRUE(Sampler(p).SamplesFromTop(64, 50000));
  p.temperature = 1.0f;  // a draw over the whole row
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64, 50000));
  p.top_k = 20;  // Qwen3.5's recommended sampling: top-k 20, presence 1.5
  p.top_p = 0.8f;
  p.presence_penalty = 1.5f;
  EXPECT_TRUE(Sampler(p).SamplesFromTop(64, 50000));
  p.top_k = 0;  // top-p alone
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64, 50000));
  p.min_p = 0.05f;
  EXPECT_TRUE(Sampler(p).SamplesFromTop(64, 50000));
  p.presence_penalty = 0.0f;
  p.frequency_penalty = -0.5f;
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64, 50000));
  p = SamplingParams();
  p.temperature = 0.0f;
  p.logprobs = 20;
  EXPECT_FALSE(Sampler(p).SamplesFromTop(16, 50000));  // more logprobs than candidates
  EXPECT_TRUE(Sampler(p).SamplesFromTop(20, 50000));
}

// With bias and penalties that lower logits, SampleTop gives what Sample gives on the whole row
// (the same tokens from the same seeds; the logprobs, raw, to the log-sum-exp's rounding): a
// prompt that holds many of the best tokens and an output that grows by the sampled tokens, so
// repetition, frequency and presence penalties hit the best candidates, some of them out of the
// K (all K of some rows, which a harsh repetition penalty then ranks below tokens beyond them); a
// ban (−100) on every other row's best token. Rows it cannot settle take the whole row, as the
// engine does. The greedy cases must pick another token than the raw argmax on some rows.
TEST(SampleTopTest, LoweringPenaltiesGiveTheWholeRowsTokens) {
  struct PenaltyCase {
    std::string name;
    float temperature;
    int top_k;
    float top_p, min_p, repetition, frequency, presence;
    bool ban;
  };
  const std::vector<PenaltyCase> cases = {
      {"greedy_repetition", 0.0f, 0, 1.0f, 0.0f, 1.3f, 0.0f, 0.0f, false},
      {"greedy_ban", 0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, true},
      {"greedy_harsh_repetition", 0.0f, 0, 1.0f, 0.0f, 3.0f, 0.0f, 0.0f, false},
      {"top_k_20_harsh_repetition", 0.8f, 20, 1.0f, 0.0f, 3.0f, 0.0f, 0.0f, false},
      {"greedy_ban_and_presence", 0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.8f, true},
      {"qwen_top_k_20_presence_1.5", 0.7f, 20, 0.8f, 0.0f, 1.0f, 0.0f, 1.5f, false},
      {"top_k_40_all_three", 1.0f, 40, 0.9f, 0.0f, 1.1f, 0.5f, 0.3f, true},
      {"top_k_48_frequency", 0.9f, 48, 1.0f, 0.0f, 1.0f, 1.0f, 0.0f, false},
      {"min_p_presence", 1.0f, 0, 1.0f, 0.1f, 1.0f, 0.0f, 1.0f, false},
      {"min_p_top_p_repetition", 0.6f, 0, 0.9f, 0.2f, 1.2f, 0.0f, 0.0f, true},
  };
  const std::vector<Shape> shapes = {
      {"peaked", 5000, 3.0f, 0.0f}, {"sharp", 30000, 8.0f, 0.0f}, {"ties", 1000, 2.0f, 0.5f}};
  constexpr int64_t kRows = 120, kK = 64;
  for (const Shape& shape : shapes) {
    std::mt19937 gen(11);
    std::vector<float> x = RandomLogits(shape, kRows, gen);
    const Presampled pre = PresampleRows(x, kRows, shape.vocab, kK);
    // A prompt of the rows' best tokens (every third of each row's 30 best) and random ones.
    std::vector<int32_t> prompt;
    for (int64_t r = 0; r < kRows; r += 4) {
      for (int64_t i = 0; i < 30; i += 3) prompt.push_back(pre.ids[r * kK + i]);
    }
    // … and all K best of every eighth row: a harsh repetition penalty sends the winner beyond.
    for (int64_t r = 1; r < kRows; r += 8) {
      for (int64_t i = 0; i < kK; ++i) prompt.push_back(pre.ids[r * kK + i]);
    }
    std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(shape.vocab) - 1);
    for (int i = 0; i < 200; ++i) prompt.push_back(any(gen));
    for (const PenaltyCase& c : cases) {
      SCOPED_TRACE(shape.name + " / " + c.name);
      SamplingParams p;
      p.temperature = c.temperature;
      p.top_k = c.top_k;
      p.top_p = c.top_p;
      p.min_p = c.min_p;
      p.repetition_penalty = c.repetition;
      p.frequency_penalty = c.frequency;
      p.presence_penalty = c.presence;
      p.logprobs = 2;
      p.seed = 77;
      std::vector<int32_t> output;
      int from_top = 0, moved = 0;
      for (int64_t r = 0; r < kRows; ++r) {
        p.logit_bias.clear();
        if (c.ban && r % 2 == 1) p.logit_bias = {{pre.ids[r * kK], -100.0f}};
        Sampler full(p), top(p);  // fresh each row with the row's bias; the stream: see below
        ASSERT_TRUE(top.SamplesFromTop(static_cast<int>(kK), shape.vocab));
        const absl::Span<const float> row(x.data() + r * shape.vocab, shape.vocab);
        PresampledRow cut = Cut(pre, r, kK, shape.vocab);
        const absl::StatusOr<SampleResult> want = full.Sample(row, prompt, output);
        ASSERT_TRUE(want.ok()) << want.status();
        absl::StatusOr<std::optional<SampleResult>> got = top.SampleTop(cut, prompt, output);
        ASSERT_TRUE(got.ok()) << got.status();
        SampleResult g;
        if (got->has_value()) {
          ++from_top;
          g = **got;
        } else {
          g = *top.Sample(row, prompt, output);
        }
        ASSERT_EQ(g.token, want->token) << "row " << r;
        EXPECT_NEAR(g.logprob, want->logprob, 2e-5) << "row " << r;
        ASSERT_EQ(g.top_logprobs.size(), want->top_logprobs.size());
        output.push_back(want->token);
        moved += want->token != pre.ids[r * kK];
        p.seed = *p.seed + 1;
      }
      if (c.temperature == 0.0f) {
        EXPECT_GT(moved, 0);
      }
      // Most rows are settled by the K best (min-p on the flatter rows keeps more than K; on the
      // 1,000-token rows nearly every token is in the context, which a harsh repetition penalty
      // lowers, so the winner often lies beyond the K).
      const bool harsh_on_small = shape.vocab <= 1000 && c.repetition >= 2.0f;
      if ((c.min_p == 0.0f || shape.name == "sharp") && !harsh_on_small) {
        EXPECT_GT(from_top, kRows / 2);
      }
    }
  }
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
  // A device draw outside the vocabulary (a corrupt download) is an error naming the token.
  for (const int32_t bad : {-1, 300}) {
    ahead.DrawAhead();
    PresampledRow row = Cut(pre, 0, 8, 300);
    row.draw = PresampledRow::Draw{1.0, bad, 0.0f};
    r = ahead.SampleTop(row);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
    EXPECT_NE(r.status().message().find(absl::StrCat("token ", bad)), std::string::npos)
        << r.status();
  }
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
