// Sampler tests: validation, greedy, filters (exact candidate sets and empirical draws), penalties,
// logit bias, seeds and logprobs. Every random draw uses a fixed seed, so nothing is flaky.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace linfer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<float> LogOf(const std::vector<double>& probs) {
  std::vector<float> out;
  for (const double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

std::vector<int32_t> CandidateIds(const SamplingParams& p, const std::vector<float>& logits) {
  std::vector<Candidate> c;
  FilterCandidates(p, logits, &c);
  std::vector<int32_t> ids;
  for (const Candidate& x : c) ids.push_back(x.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<double> Softmax(const std::vector<float>& logits, double t) {
  const double m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p;
  double z = 0.0;
  for (const float x : logits) z += std::exp((x - m) / t);
  for (const float x : logits) p.push_back(std::exp((x - m) / t) / z);
  return p;
}

// Pearson chi-square of `draws` samples against `probs` (cells with prob 0 must stay empty).
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& probs, int draws) {
  double chi2 = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    EXPECT_TRUE(probs[i] > 0.0 || counts[i] == 0) << "token " << i << " is outside the set";
    if (probs[i] > 0.0) chi2 += std::pow(counts[i] - probs[i] * draws, 2) / (probs[i] * draws);
  }
  return chi2;
}

std::vector<int> Histogram(const SamplingParams& p, const std::vector<float>& logits, int draws) {
  Sampler sampler(p);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++counts[sampler.Sample(logits, {}, {})->token];
  return counts;
}

TEST(ValidateSamplingParamsTest, AcceptsDefaultsAndBoundaries) {
  EXPECT_TRUE(ValidateSamplingParams({}, 10).ok());
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = -1;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.logit_bias = {{0, -100.0f}, {9, 100.0f}};
  p.logprobs = 20;
  EXPECT_TRUE(ValidateSamplingParams(p, 10).ok());
}

TEST(ValidateSamplingParamsTest, RejectsEachFieldByName) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<std::function<void(SamplingParams&)>, std::string>> cases = {
      {[](SamplingParams& p) { p.temperature = -0.5f; }, "temperature must be a finite"},
      {[&](SamplingParams& p) { p.temperature = nan; }, "temperature"},
      {[&](SamplingParams& p) { p.temperature = inf; }, "temperature"},
      {[](SamplingParams& p) { p.top_k = -2; }, "top_k"},
      {[](SamplingParams& p) { p.top_p = 1.5f; }, "top_p must be in (0, 1], got 1.5"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p"},
      {[&](SamplingParams& p) { p.top_p = nan; }, "top_p"},
      {[](SamplingParams& p) { p.min_p = -0.1f; }, "min_p must be in [0, 1]"},
      {[](SamplingParams& p) { p.min_p = 1.1f; }, "min_p"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty"},
      {[&](SamplingParams& p) { p.repetition_penalty = inf; }, "repetition_penalty"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty must be in [-2, 2]"},
      {[](SamplingParams& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty"},
      {[](SamplingParams& p) {
         p.logit_bias = {{10, 1.0f}};
       },
       "logit_bias: token id"},
      {[](SamplingParams& p) {
         p.logit_bias = {{-1, 1.0f}, {12, 1.0f}};
       },
       "got -1"},
      {[&](SamplingParams& p) {
         p.logit_bias = {{3, inf}};
       },
       "logit_bias[3] must be in [-100, 100], got inf"},
      {[](SamplingParams& p) {
         p.logit_bias = {{3, 1e30f}};  // gRPC took any finite bias; HTTP OpenAI's range
       },
       "logit_bias[3] must be in [-100, 100]"},
      {[](SamplingParams& p) { p.logprobs = 21; }, "logprobs must be in [0, 20], got 21"},
      {[](SamplingParams& p) { p.logprobs = -1; }, "logprobs"},
  };
  for (const auto& [mutate, message] : cases) {
    SamplingParams p;
    mutate(p);
    const absl::Status s = ValidateSamplingParams(p, 10);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
  }
  EXPECT_THAT(std::string(ValidateSamplingParams({}, 0).message()), HasSubstr("vocab_size"));
}

TEST(SamplerTest, GreedyPicksArgmaxLowestIdOnTiesAndIsTheZeroTemperatureLimit) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler sampler(p);
  EXPECT_EQ(sampler.Sample({1.0f, 3.0f, -2.0f, 2.5f}, {}, {})->token, 1);
  EXPECT_EQ(sampler.Sample({1.0f, 3.0f, 3.0f, 3.0f}, {}, {})->token, 1);
  EXPECT_EQ(sampler.Sample({-5.0f}, {}, {})->token, 0);
  // The temperature -> 0 limit (below 1e-5 it is greedy by definition).
  const std::vector<float> logits = {0.1f, 2.0f, 1.5f, -1.0f, 1.9f};
  for (const float t : {1e-6f, 1e-3f, 1e-2f}) {
    p.temperature = t;
    p.seed = 7;
    Sampler cold(p);
    for (int i = 0; i < 2000; ++i) ASSERT_EQ(cold.Sample(logits, {}, {})->token, 1) << t;
  }
}

TEST(SamplerTest, TopK1EqualsGreedy) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 1;
  p.seed = 11;
  Sampler sampler(p);
  for (int row = 0; row < 200; ++row) {
    std::vector<float> logits(1000);
    for (float& x : logits) x = normal(rng);
    const auto argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
    ASSERT_EQ(sampler.Sample(logits, {}, {})->token, argmax);
  }
}

TEST(FilterCandidatesTest, ExactSets) {
  const std::vector<float> logits = LogOf({0.1, 0.5, 0.15, 0.25});
  SamplingParams p;
  EXPECT_THAT(CandidateIds(p, logits), ElementsAre(0, 1, 2, 3));
  p.top_k = 2;
  EXPECT_THAT(CandidateIds(p, logits), ElementsAre(1, 3));
  p.top_k = -1;
  p.top_p = 0.7f;  // 0.5 (0 above it), 0.25 (0.5 above), not 0.15 (0.75 above)
  EXPECT_THAT(CandidateIds(p, logits), ElementsAre(1, 3));
  p.top_p = 0.8f;
  EXPECT_THAT(CandidateIds(p, logits), ElementsAre(1, 2, 3));
  p.top_p = 0.05f;
  EXPECT_THAT(CandidateIds(p, logits), ElementsAre(1));
  p.top_p = 1.0f;
  p.min_p = 0.25f;  // threshold 0.125
  EXPECT_THAT(CandidateIds(p, logits), ElementsAre(1, 2, 3));
  p.min_p = 0.6f;
  EXPECT_THAT(CandidateIds(p, logits), ElementsAre(1));
  p.min_p = 0.4f;  // ratios to the max: 0.2, 1, 0.3, 0.5
  EXPECT_THAT(CandidateIds(p, logits), ElementsAre(1, 3));
  p.temperature = 2.0f;  // ratios become their square roots: 0.45, 1, 0.55, 0.71
  EXPECT_THAT(CandidateIds(p, logits), ElementsAre(0, 1, 2, 3));

  // Top-p applies after top-k, on the renormalised rest.
  const std::vector<float> four = LogOf({0.4, 0.3, 0.2, 0.1});
  p = SamplingParams{};
  p.top_p = 0.5f;
  EXPECT_THAT(CandidateIds(p, four), ElementsAre(0, 1));  // 0.4 above token 1 < 0.5
  p.top_k = 2;  // renormalised: 4/7, 3/7; 4/7 above token 1 >= 0.5
  EXPECT_THAT(CandidateIds(p, four), ElementsAre(0));
}

// The candidate set by brute force: full sort, min-p, top-k, then top-p on the renormalised rest.
std::vector<int32_t> ReferenceCandidates(const SamplingParams& p,
                                         const std::vector<float>& logits) {
  const std::vector<double> probs = Softmax(logits, p.temperature);
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
  });
  std::vector<int32_t> kept;
  for (const int32_t id : order) {
    if (probs[id] >= p.min_p * probs[order[0]]) kept.push_back(id);
  }
  if (p.top_k > 0 && kept.size() > static_cast<size_t>(p.top_k)) kept.resize(p.top_k);
  double mass = 0.0, above = 0.0;
  for (const int32_t id : kept) mass += probs[id];
  size_t n = 0;
  while (n < kept.size() && above < p.top_p * mass) above += probs[kept[n++]];
  kept.resize(n);
  return kept;  // best first
}

void ExpectMatchesReference(const SamplingParams& p, const std::vector<float>& logits) {
  std::vector<int32_t> expected = ReferenceCandidates(p, logits);
  const std::vector<int32_t> got = CandidateIds(p, logits);
  SCOPED_TRACE(testing::Message() << "top_k " << p.top_k << " min_p " << p.min_p << " top_p "
                                  << p.top_p << ": " << got.size() << " kept");
  // Summation order (and the float exp) may move a boundary by one token at most.
  EXPECT_NEAR(static_cast<double>(got.size()), static_cast<double>(expected.size()), 1.0);
  expected.resize(std::min(expected.size(), got.size()));
  for (const int32_t id : expected) {
    ASSERT_TRUE(std::binary_search(got.begin(), got.end(), id)) << id;
  }
}

TEST(FilterCandidatesTest, LargeVocabMatchesFullSortReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> flat(100000);
  for (float& x : flat) x = normal(rng);
  std::vector<float> peaked = flat;  // 10 tokens hold most of the mass
  for (int i = 0; i < 10; ++i) peaked[i * 9973 + 11] += 9.0f + 0.3f * static_cast<float>(i);
  struct Case {
    int32_t top_k;
    float min_p, top_p;
  };
  for (const Case c : {Case{0, 0.0f, 0.1f}, Case{0, 0.0f, 0.5f}, Case{0, 0.0f, 0.9f},
                       Case{0, 0.0f, 0.99f}, Case{5000, 0.0f, 0.9f}, Case{0, 0.01f, 0.9f},
                       Case{20000, 0.001f, 0.5f}, Case{0, 0.05f, 1.0f}, Case{300, 0.0f, 1.0f}}) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_k = c.top_k;
    p.min_p = c.min_p;
    p.top_p = c.top_p;
    ASSERT_GT(ReferenceCandidates(p, flat).size(), 64u);  // large sets: the radix select
    ExpectMatchesReference(p, flat);
    ExpectMatchesReference(p, peaked);  // top-p alone: the 64 best often suffice
  }
  SamplingParams p;
  p.top_p = 0.5f;
  ASSERT_LT(ReferenceCandidates(p, peaked).size(), 10u);
  ExpectMatchesReference(p, peaked);

  // Equal logits (every weight exactly 1): the lowest ids win.
  const std::vector<float> equal(10000, 0.0f);
  p = SamplingParams{};
  p.top_p = 0.5f;  // the mass above token j is j / 10000
  std::vector<int32_t> expected(5000);
  for (int32_t i = 0; i < 5000; ++i) expected[i] = i;
  EXPECT_EQ(CandidateIds(p, equal), expected);
  p.top_k = 8000;  // the 8000 lowest ids, then half of them
  expected.resize(4000);
  EXPECT_EQ(CandidateIds(p, equal), expected);
  // An exact boundary within the 64 best: 8 equal tokens (ids 0..7) hold all the mass.
  std::vector<float> eight(8192, -100.0f);
  std::fill(eight.begin(), eight.begin() + 8, 0.0f);
  p.top_k = 0;
  EXPECT_THAT(CandidateIds(p, eight), ElementsAre(0, 1, 2, 3));
}

TEST(SamplerTest, TemperatureSamplingMatchesSoftmax) {
  const std::vector<float> logits = {0.3f, -1.0f, 1.2f, 0.0f, 2.0f, -0.5f, 0.8f, 1.0f};
  SamplingParams p;
  p.temperature = 0.7f;
  p.seed = 1234;
  const int draws = 50000;
  // 7 degrees of freedom: P(chi2 > 30) < 1e-4, and the seed is fixed.
  EXPECT_LT(ChiSquare(Histogram(p, logits, draws), Softmax(logits, 0.7), draws), 30.0);
}

TEST(SamplerTest, TopPAndMinPDrawOnlyFromTheirSetsWithRenormalisedProbs) {
  const std::vector<float> logits = LogOf({0.1, 0.5, 0.15, 0.25});
  const int draws = 40000;
  SamplingParams p;
  p.seed = 99;
  p.top_p = 0.8f;  // keeps {1, 2, 3}
  // 2 degrees of freedom: P(chi2 > 19) < 1e-4.
  EXPECT_LT(ChiSquare(Histogram(p, logits, draws), {0.0, 0.5 / 0.9, 0.15 / 0.9, 0.25 / 0.9}, draws),
            19.0);
  p.top_p = 1.0f;
  p.min_p = 0.4f;  // keeps {1, 3}
  EXPECT_LT(ChiSquare(Histogram(p, logits, draws), {0.0, 0.5 / 0.75, 0.0, 0.25 / 0.75}, draws),
            16.0);
  p.min_p = 0.0f;
  p.top_k = 3;
  EXPECT_LT(ChiSquare(Histogram(p, logits, draws), {0.0, 0.5 / 0.9, 0.15 / 0.9, 0.25 / 0.9}, draws),
            19.0);
}

TEST(PenaltiesTest, FollowTheFormulas) {
  const std::vector<float> raw = {1.0f, 2.0f, -3.0f, 4.0f, -0.5f, 0.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.logit_bias = {{4, 1.0f}};
  const std::vector<int32_t> prompt = {1, 2, 1, 99};     // 99: outside the vocab, ignored
  const std::vector<int32_t> output = {2, 3, 3, -1, 5};  // -1: ignored
  std::vector<float> x = raw;
  ApplyBiasAndPenalties(p, prompt, output, absl::MakeSpan(x));
  std::vector<float> want = raw;
  want[4] += 1.0f;                            // bias only (never seen)
  want[1] = 2.0f / 2.0f;                      // prompt only: repetition
  want[2] = -3.0f * 2.0f - 0.5f * 1 - 0.25f;  // prompt and output, count 1
  want[3] = 4.0f / 2.0f - 0.5f * 2 - 0.25f;   // output only, count 2
  want[5] = 0.0f * 2.0f - 0.5f * 1 - 0.25f;   // zero logit stays zero under repetition
  EXPECT_EQ(x, want);

  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.repetition_penalty = 3.0f;
  EXPECT_EQ(Sampler(greedy).Sample({1.0f, 2.0f, 0.5f}, {}, {})->token, 1);
  EXPECT_EQ(Sampler(greedy).Sample({1.0f, 2.0f, 0.5f}, {}, {1})->token, 0);
}

TEST(SamplerTest, LogitBiasForcesAndBansTokens) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, 3.0f};
  SamplingParams p;
  p.seed = 5;
  p.logit_bias = {{2, 100.0f}};
  Sampler forced(p);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(forced.Sample(logits, {}, {})->token, 2);
  p.temperature = 0.0f;
  p.logit_bias = {{3, -100.0f}};
  EXPECT_EQ(Sampler(p).Sample(logits, {}, {})->token, 0);
  // −∞ (min_tokens' ban of EOS and the stop tokens) is never sampled, even where a temperature
  // would spread −100 out: 3 (−100 + 3) / 1000 would be as likely as the others.
  constexpr float kNever = -std::numeric_limits<float>::infinity();
  p.temperature = 1000.0f;
  p.logit_bias = {{3, kNever}, {0, kNever}};
  EXPECT_TRUE(ValidateSamplingParams(p, 4).ok());
  Sampler banned(p);
  for (int i = 0; i < 2000; ++i) {
    const int32_t t = banned.Sample(logits, {}, {})->token;
    ASSERT_TRUE(t == 1 || t == 2) << t;
  }
  p.logit_bias = {{3, std::numeric_limits<float>::infinity()}};
  EXPECT_FALSE(ValidateSamplingParams(p, 4).ok());  // +∞ stays refused
}

TEST(SamplerTest, BanHoldsUntilUnbanThenTheRequestsBiasReturns) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, 3.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.logit_bias = {{2, 10.0f}};  // the request's own bias: forces 2
  Sampler s(p);
  s.Ban(std::vector<int32_t>{2, 3, 2});
  EXPECT_EQ(s.Sample(logits, {}, {})->token, 0);
  PresampledRow top{{}, {}, 0.0f, 4, std::nullopt};
  const std::vector<int32_t> ids = {3, 0, 1, 2};
  const std::vector<float> best = {3.0f, 2.0f, 1.0f, 0.0f};
  top.ids = ids;
  top.logits = best;
  ASSERT_TRUE(s.SamplesFromTop(4, 4));
  EXPECT_EQ((*s.SampleTop(top))->token, 0);
  s.Unban();
  EXPECT_EQ(s.Sample(logits, {}, {})->token, 2);
  EXPECT_EQ(s.params().logit_bias, (std::map<int32_t, float>{{2, 10.0f}}));
  s.Unban();  // again: nothing
  EXPECT_EQ(s.Sample(logits, {}, {})->token, 2);
}

std::vector<int32_t> Generate(Sampler sampler, int n) {
  std::vector<float> logits(100);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0.01f * static_cast<float>(i % 7);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(sampler.Sample(logits, {}, out)->token);
  return out;
}

TEST(SamplerTest, SeedsAreReproducibleAndIndependent) {
  SamplingParams p;
  p.top_p = 0.95f;
  p.seed = 42;
  const std::vector<int32_t> a = Generate(Sampler(p), 64);
  EXPECT_EQ(Generate(Sampler(p), 64), a);
  p.seed = 43;
  EXPECT_NE(Generate(Sampler(p), 64), a);
  p.seed.reset();
  Sampler unseeded(p);
  p.seed = unseeded.seed();
  EXPECT_EQ(Generate(unseeded, 64), Generate(Sampler(p), 64));
  EXPECT_NE(Generate(Sampler(SamplingParams{}), 64), Generate(Sampler(SamplingParams{}), 64));

  // Interleaving with another request's sampler does not change the stream; a copy forks it.
  p.seed = 42;
  Sampler mine(p), other(p);
  const std::vector<float> logits(100, 0.0f);
  std::vector<int32_t> interleaved;
  for (int i = 0; i < 64; ++i) {
    ASSERT_TRUE(other.Sample(logits, {}, {}).ok());
    interleaved.push_back(mine.Sample(logits, {}, {})->token);
  }
  Sampler alone(p);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(alone.Sample(logits, {}, {})->token, interleaved[i]);
  Sampler fork = mine;
  EXPECT_EQ(fork.Sample(logits, {}, {})->token, mine.Sample(logits, {}, {})->token);
}

TEST(SamplerTest, LogprobsAreRawSortedAndNormalised) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, -3.0f, 0.0f, 1.5f};
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_TRUE(Sampler(p).Sample(logits, {}, {})->top_logprobs.empty());
  p.logprobs = 0;
  p.logit_bias = {{5, 50.0f}};  // forces token 5; its logprob is still the raw one
  const SampleResult r0 = *Sampler(p).Sample(logits, {}, {});
  const std::vector<double> probs = Softmax(logits, 1.0);
  EXPECT_EQ(r0.token, 5);
  EXPECT_NEAR(r0.logprob, std::log(probs[5]), 1e-5);
  EXPECT_TRUE(r0.top_logprobs.empty());

  p.logprobs = 8;
  p.temperature = 0.5f;
  p.seed = 1;
  const SampleResult r = *Sampler(p).Sample(logits, {}, {});
  ASSERT_EQ(r.top_logprobs.size(), 8u);
  double total = 0.0;
  for (size_t i = 0; i < r.top_logprobs.size(); ++i) {
    const auto [id, lp] = r.top_logprobs[i];
    EXPECT_NEAR(lp, std::log(probs[id]), 1e-5);
    total += std::exp(lp);
    if (i > 0) {
      const auto [prev_id, prev_lp] = r.top_logprobs[i - 1];
      EXPECT_TRUE(prev_lp > lp || (prev_lp == lp && prev_id < id));
    }
  }
  EXPECT_NEAR(total, 1.0, 1e-5);
  EXPECT_EQ(r.top_logprobs[0].first, 1);  // tie between 1 and 3: lowest id first
  EXPECT_EQ(r.top_logprobs[1].first, 3);
}

TEST(SamplerTest, NonFiniteLogitsAreAnErrorNotUndefinedBehaviour) {
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    for (float temperature : {0.0f, 1.0f}) {
      SamplingParams p;
      p.temperature = temperature;
      p.top_p = 0.5f;
      absl::StatusOr<SampleResult> r = Sampler(p).Sample({1.0f, bad, 0.5f}, {}, {});
      ASSERT_FALSE(r.ok()) << bad;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
      EXPECT_NE(r.status().message().find("non-finite"), std::string::npos) << r.status();
    }
  }
}

// Structured output's mask: every mode draws from the allowed tokens only, and among them with
// the distribution of the filters applied to the masked logits (a chi-square against the exact
// masked-then-filtered probabilities); logprobs stay those of the raw logits.
TEST(SamplerTest, AllowedMaskRestrictsEveryModeToItsTokens) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(300);
  for (float& x : logits) x = normal(rng);
  const size_t best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<uint64_t> mask((logits.size() + 63) / 64, 0);
  std::vector<bool> allowed(logits.size(), false);
  for (size_t i = 0; i < logits.size(); ++i) {
    if ((i % 7 == 3 || i % 11 == 0) && i != best) {
      allowed[i] = true;
      mask[i / 64] |= uint64_t{1} << (i % 64);
    }
  }
  ASSERT_FALSE(allowed[best]);  // the unmasked argmax is banned: greedy must differ
  auto params = [](float t, int k, float top_p, float min_p) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = 9;
    return p;
  };
  for (const SamplingParams& p :
       {params(0.0f, 0, 1.0f, 0.0f), params(1.0f, 0, 1.0f, 0.0f), params(0.7f, 5, 1.0f, 0.0f),
        params(1.0f, 0, 0.5f, 0.0f), params(1.0f, 0, 1.0f, 0.2f), params(0.8f, 20, 0.9f, 0.0f)}) {
    SCOPED_TRACE(testing::Message() << "t " << p.temperature << " k " << p.top_k << " p " << p.top_p
                                    << " min_p " << p.min_p);
    // The exact distribution: the filters over the masked logits (banned ones at -inf).
    std::vector<float> masked = logits;
    for (size_t i = 0; i < masked.size(); ++i) {
      if (!allowed[i]) masked[i] = -std::numeric_limits<float>::infinity();
    }
    std::vector<double> probs(logits.size(), 0.0);
    if (p.temperature < 1e-5f) {
      probs[std::max_element(masked.begin(), masked.end()) - masked.begin()] = 1.0;
    } else {
      std::vector<Candidate> c;
      FilterCandidates(p, masked, &c);
      double z = 0.0;
      for (const Candidate& x : c) z += x.weight;
      for (const Candidate& x : c) probs[x.id] = x.weight / z;
    }
    Sampler sampler(p);
    std::vector<int> counts(logits.size(), 0);
    constexpr int kDraws = 4000;
    for (int i = 0; i < kDraws; ++i) {
      absl::StatusOr<SampleResult> r = sampler.Sample(logits, {}, {}, mask);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(allowed[r->token]) << r->token;
      ++counts[r->token];
    }
    int cells = 0;
    for (double q : probs) cells += q > 0.0;
    if (cells > 1) {
      EXPECT_LT(ChiSquare(counts, probs, kDraws), 3.0 * cells + 30.0);
    }
  }
  SamplingParams lp;
  lp.temperature = 0.0f;
  lp.logprobs = 2;
  absl::StatusOr<SampleResult> r = Sampler(lp).Sample(logits, {}, {}, mask);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->top_logprobs[0].first, static_cast<int32_t>(best));  // raw: the banned argmax
  std::vector<uint64_t> none(mask.size(), 0);
  EXPECT_EQ(Sampler(lp).Sample(logits, {}, {}, none).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(Sampler(lp).Sample(logits, {}, {}, absl::MakeSpan(mask).subspan(0, 2)).status().code(),
            absl::StatusCode::kInternal);
}

// vLLM's allowed_token_ids: only the listed tokens, in every mode (EOS too only when listed);
// logprobs stay raw; the pre-sampler's top rows are not enough for it.
TEST(SamplerTest, AllowedTokenIdsRestrictEveryModeToThem) {
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.5f, 0.0f, -1.0f};
  SamplingParams p;
  p.allowed_token_ids = std::make_shared<const std::vector<int32_t>>(std::vector<int32_t>{2, 4, 5});
  p.seed = 3;
  ASSERT_TRUE(ValidateSamplingParams(p, 6).ok());
  Sampler sampled(p);
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 3000; ++i) ++counts[sampled.Sample(logits, {}, {})->token];
  EXPECT_EQ(counts[0] + counts[1] + counts[3], 0);
  const std::vector<double> probs = {0,
                                     0,
                                     std::exp(1.0) / (std::exp(1.0) + 1 + std::exp(-1.0)),
                                     0,
                                     1 / (std::exp(1.0) + 1 + std::exp(-1.0)),
                                     std::exp(-1.0) / (std::exp(1.0) + 1 + std::exp(-1.0))};
  EXPECT_LT(ChiSquare(counts, probs, 3000), 20.0);
  p.temperature = 0.0f;
  p.logprobs = 1;
  absl::StatusOr<SampleResult> r = Sampler(p).Sample(logits, {}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, 2);
  EXPECT_EQ(r->top_logprobs[0].first, 0);  // raw logprobs: the unlisted argmax
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64, 6));
  // With an allowed mask (structured output) too: what both allow.
  std::vector<uint64_t> mask = {(uint64_t{1} << 4) | (uint64_t{1} << 1)};
  EXPECT_EQ(Sampler(p).Sample(logits, {}, {}, mask)->token, 4);
  mask = {uint64_t{1} << 1};
  EXPECT_EQ(Sampler(p).Sample(logits, {}, {}, mask).status().code(),
            absl::StatusCode::kInvalidArgument);
  p.allowed_token_ids = std::make_shared<const std::vector<int32_t>>(std::vector<int32_t>{2, 6});
  EXPECT_THAT(ValidateSamplingParams(p, 6).message(), HasSubstr("allowed_token_ids[1]"));
}

// vLLM's bad_words: a one-token word is never sampled; a longer one's last token only right
// after the rest of it in the output (not the prompt).
TEST(SamplerTest, BadWordsBanTheirLastTokenAfterTheRest) {
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.bad_words_ids = {{0}, {2, 3, 1}};
  ASSERT_TRUE(ValidateSamplingParams(p, 4).ok());
  Sampler s(p);
  EXPECT_EQ(s.Sample(logits, {}, {})->token, 1);                          // 0 banned
  EXPECT_EQ(s.Sample(logits, {}, std::vector<int32_t>{3})->token, 1);     // not after 2 3
  EXPECT_EQ(s.Sample(logits, std::vector<int32_t>{2, 3}, {})->token, 1);  // the prompt's 2 3
  EXPECT_EQ(s.Sample(logits, {}, std::vector<int32_t>{2, 3})->token, 2);  // 1 banned there
  EXPECT_EQ(s.Sample(logits, {}, std::vector<int32_t>{1, 2, 3})->token, 2);
  EXPECT_FALSE(s.SamplesFromTop(64, 4));
  p.bad_words_ids = {{0}, {1}, {2}, {3}};
  EXPECT_THAT(Sampler(p).Sample(logits, {}, {}).status().message(), HasSubstr("bad_words"));
  p.bad_words_ids = {{0}, {}};
  EXPECT_THAT(ValidateSamplingParams(p, 4).message(), HasSubstr("token sequence 1"));
  p.bad_words_ids = {{0, 4}};
  EXPECT_THAT(ValidateSamplingParams(p, 4).message(), HasSubstr("outside [0, 4)"));
}

// vLLM's logprob_token_ids: the top logprobs are those tokens' raw logprobs, in the order given,
// whatever the sampled token; they need logprobs, and whole rows.
TEST(SamplerTest, LogprobTokenIdsGiveThoseTokensInTheirOrder) {
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 2;
  p.logprob_token_ids = {3, 1};
  ASSERT_TRUE(ValidateSamplingParams(p, 4).ok());
  absl::StatusOr<SampleResult> r = Sampler(p).Sample(logits, {}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, 0);
  double z = 0;
  for (const float x : logits) z += std::exp(x);
  ASSERT_EQ(r->top_logprobs.size(), 2u);
  EXPECT_EQ(r->top_logprobs[0].first, 3);
  EXPECT_NEAR(r->top_logprobs[0].second, 0.0 - std::log(z), 1e-6);
  EXPECT_EQ(r->top_logprobs[1].first, 1);
  EXPECT_NEAR(r->top_logprobs[1].second, 2.0 - std::log(z), 1e-6);
  EXPECT_NEAR(r->logprob, 3.0 - std::log(z), 1e-6);
  EXPECT_FALSE(Sampler(p).SamplesFromTop(64, 4));
  p.logprob_token_ids = {4};
  EXPECT_THAT(ValidateSamplingParams(p, 4).message(), HasSubstr("logprob_token_ids[0]"));
  p.logprob_token_ids = {1};
  p.logprobs.reset();
  EXPECT_THAT(ValidateSamplingParams(p, 4).message(), HasSubstr("needs logprobs"));
}

}  // namespace
}  // namespace linfer
