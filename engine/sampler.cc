// Sampling: bias and penalties on a copy of the logits, then greedy argmax or a seeded draw over
// the min-p / top-k / top-p candidates; raw-model logprobs on request.
#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace linfer {
namespace {

constexpr float kGreedyTemperature = 1e-5f;  // below this, temperature means greedy (vLLM)
constexpr int32_t kMaxLogprobs = 20;
constexpr size_t kTopPSortFirst = 64;  // top-p first sorts this many candidates

template <typename... Args>
absl::Status Invalid(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(args...));
}

// Strict weak order: higher logit first, lower id first on ties.
bool Better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

float Max(absl::Span<const float> x) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (size_t i = 0; i < x.size(); ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// Index of the largest value, lowest index on ties (0 when every value is NaN).
int32_t ArgMax(absl::Span<const float> x) {
  const float m = Max(x);
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == m) return static_cast<int32_t>(i);
  }
  return 0;
}

// exp(c) to float precision (Cephes' expf polynomial) for c in [kExpMin, 0], and exactly 0 at
// kExpMin. Branch-free so that loops over it vectorise (gcc threads jumps through a clamp written
// here, hence the separate clamping pass in Exponentiate).
constexpr float kExpMin = -87.0f;  // exp(-87) ~ 1.6e-38, the edge of normal floats
inline float ExpClamped(float c) {
  const float n = (c * 1.44269504f + 12582912.0f) - 12582912.0f;  // round(c / ln 2)
  const float r = (c - n * 0.693359375f) + n * 2.12194440e-4f;    // c - n ln 2, in two steps
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const int32_t keep = -static_cast<int32_t>(c > kExpMin);              // all ones, or 0 at kExpMin
  const int32_t bits = ((static_cast<int32_t>(n) + 127) << 23) & keep;  // 2^n or 0
  return (p * r * r + r + 1.0f) * std::bit_cast<float>(bits);
}

// w[i] = exp((x[i] - max) * inv_t), 0 where that is below exp(kExpMin) (and for -inf); max must be
// the finite maximum of x.
void Exponentiate(absl::Span<const float> x, float max, float inv_t, float* w) {
#pragma omp simd
  for (size_t i = 0; i < x.size(); ++i) {
    const float t = (x[i] - max) * inv_t;
    w[i] = t < kExpMin ? kExpMin : t;
  }
#pragma omp simd
  for (size_t i = 0; i < x.size(); ++i) w[i] = ExpClamped(w[i]);
}

// A uniform double in [0, 1) from the 53 high bits of one 64-bit draw (fully specified, unlike
// std::uniform_real_distribution, so the stream is the same on every standard library).
double Uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Inverse CDF over unnormalised weights w (not all 0); u in [0, 1).
int32_t DrawDense(absl::Span<const float> w, double u) {
  double total = 0.0;
#pragma omp simd reduction(+ : total)
  for (size_t i = 0; i < w.size(); ++i) total += w[i];
  const double target = u * total;
  double acc = 0.0;
  for (size_t i = 0; i < w.size(); ++i) {
    acc += w[i];
    if (target < acc) return static_cast<int32_t>(i);
  }
  size_t last = w.size() - 1;  // target within rounding of total: the last possible token
  while (last > 0 && w[last] == 0.0f) --last;
  return static_cast<int32_t>(last);
}

int32_t DrawCandidate(const std::vector<Candidate>& c, double u) {
  double total = 0.0;
  for (const Candidate& x : c) total += x.weight;
  const double target = u * total;
  double acc = 0.0;
  for (const Candidate& x : c) {
    acc += x.weight;
    if (target < acc) return x.id;
  }
  return c.back().id;
}

// Fills result->logprob and result->top_logprobs from the log-softmax of the raw logits.
// scratch: resized to [vocab].
void FillLogprobs(absl::Span<const float> logits, int32_t top_n, std::vector<float>* scratch,
                  SampleResult* result) {
  const float max = Max(logits);
  scratch->resize(logits.size());
  Exponentiate(logits, max, 1.0f, scratch->data());
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (size_t i = 0; i < scratch->size(); ++i) sum += (*scratch)[i];
  const double log_z = static_cast<double>(max) + std::log(sum);
  result->logprob = static_cast<float>(logits[result->token] - log_z);
  if (top_n <= 0) return;
  // One pass keeping the best top_n in order: O(vocab) on typical inputs.
  std::vector<Candidate> best;
  best.reserve(top_n + 1);
  for (size_t i = 0; i < logits.size(); ++i) {
    const Candidate c{static_cast<int32_t>(i), logits[i], 0.0f};
    if (static_cast<int32_t>(best.size()) == top_n && !Better(c, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), c, Better), c);
    if (static_cast<int32_t>(best.size()) > top_n) best.pop_back();
  }
  result->top_logprobs.reserve(best.size());
  for (const Candidate& c : best) {
    result->top_logprobs.emplace_back(c.id, static_cast<float>(c.logit - log_z));
  }
}

// Keeps the K best candidates, K = min{k : weight of the k best >= top_p * total}: a token stays
// while the mass ranked above it is < top_p. Sorts the 64 best (usually enough), else narrows K
// with nth_element on halving ranges, keeping [0, lo) = the lo best, of mass < target.
void ApplyTopP(float top_p, std::vector<Candidate>* candidates) {
  std::vector<Candidate>& c = *candidates;
  double total = 0.0;
  for (const Candidate& x : c) total += x.weight;
  const double target = static_cast<double>(top_p) * total;
  const size_t head = std::min(c.size(), kTopPSortFirst);
  std::partial_sort(c.begin(), c.begin() + head, c.end(), Better);
  double mass = 0.0;
  for (size_t i = 0; i < head; ++i) {
    mass += c[i].weight;
    if (mass >= target) {
      c.resize(i + 1);
      return;
    }
  }
  size_t lo = head, hi = c.size();  // K in (lo, hi]
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(c.begin() + lo, c.begin() + mid, c.begin() + hi, Better);
    double m = mass;
    for (size_t i = lo; i < mid; ++i) m += c[i].weight;
    if (m >= target) {
      hi = mid;
    } else {
      lo = mid;
      mass = m;
    }
  }
  c.resize(hi);
}

// min-p, top-k (a heap of the k best, its front the worst), then top-p, from the weights
// w = exp((x - max) / t), whose maximum is 1: min-p is then simply w >= min_p.
void SelectCandidates(const SamplingParams& p, absl::Span<const float> x, absl::Span<const float> w,
                      std::vector<Candidate>* out) {
  out->clear();
  const bool top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < x.size();
  const size_t k = top_k ? static_cast<size_t>(p.top_k) : x.size();
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(w[i] > 0.0f && w[i] >= p.min_p)) continue;
    const Candidate c{static_cast<int32_t>(i), x[i], w[i]};
    if (out->size() < k) {
      out->push_back(c);
      if (top_k) std::push_heap(out->begin(), out->end(), Better);
    } else if (Better(c, out->front())) {
      std::pop_heap(out->begin(), out->end(), Better);
      out->back() = c;
      std::push_heap(out->begin(), out->end(), Better);
    }
  }
  if (p.top_p < 1.0f && out->size() > 1) ApplyTopP(p.top_p, out);
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p, int64_t vocab_size) {
  if (vocab_size <= 0) return Invalid("vocab_size must be > 0, got ", vocab_size);
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return Invalid("temperature must be a finite number >= 0, got ", p.temperature);
  }
  if (p.top_k < -1) return Invalid("top_k must be -1 or 0 (off) or > 0, got ", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return Invalid("top_p must be in (0, 1], got ", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return Invalid("min_p must be in [0, 1], got ", p.min_p);
  if (!std::isfinite(p.repetition_penalty) || !(p.repetition_penalty > 0.0f)) {
    return Invalid("repetition_penalty must be a finite number > 0, got ", p.repetition_penalty);
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return Invalid("presence_penalty must be in [-2, 2], got ", p.presence_penalty);
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return Invalid("frequency_penalty must be in [-2, 2], got ", p.frequency_penalty);
  }
  for (const auto& [id, bias] : p.logit_bias) {  // in id order
    if (id < 0 || id >= vocab_size) {
      return Invalid("logit_bias token id must be in [0, ", vocab_size, "), got ", id);
    }
    if (!std::isfinite(bias)) return Invalid("logit_bias[", id, "] must be finite, got ", bias);
  }
  if (p.logprobs && (*p.logprobs < 0 || *p.logprobs > kMaxLogprobs)) {
    return Invalid("logprobs must be in [0, ", kMaxLogprobs, "], got ", *p.logprobs);
  }
  return absl::OkStatus();
}

void ApplyBiasAndPenalties(const SamplingParams& p, absl::Span<const int32_t> prompt_tokens,
                           absl::Span<const int32_t> output_tokens, absl::Span<float> logits) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  auto in_vocab = [vocab](int32_t t) { return t >= 0 && t < vocab; };
  for (const auto& [id, bias] : p.logit_bias) {
    if (in_vocab(id)) logits[id] += bias;
  }
  if (p.repetition_penalty != 1.0f) {
    std::vector<uint8_t> seen(logits.size(), 0);  // each distinct token is penalised once
    auto penalise = [&](int32_t t) {
      if (!in_vocab(t) || seen[t]) return;
      seen[t] = 1;
      float& x = logits[t];
      x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
    };
    for (const int32_t t : prompt_tokens) penalise(t);
    for (const int32_t t : output_tokens) penalise(t);
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    std::vector<int32_t> sorted(output_tokens.begin(), output_tokens.end());
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0, j = 0; i < sorted.size(); i = j) {
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      if (!in_vocab(sorted[i])) continue;
      float& x = logits[sorted[i]];
      x -= p.frequency_penalty * static_cast<float>(j - i);
      x -= p.presence_penalty;
    }
  }
}

void FilterCandidates(const SamplingParams& p, absl::Span<const float> logits,
                      std::vector<Candidate>* out) {
  out->clear();
  if (logits.empty()) return;
  const float max = Max(logits);
  if (!(max > -std::numeric_limits<float>::infinity())) return;
  std::vector<float> w(logits.size());
  Exponentiate(logits, max, 1.0f / p.temperature, w.data());
  SelectCandidates(p, logits, w, out);
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  if (params_.seed) {
    seed_ = *params_.seed;
  } else {
    std::random_device device;
    seed_ = (static_cast<uint64_t>(device()) << 32) ^ device();
  }
  rng_.seed(seed_);
}

bool Sampler::greedy() const { return params_.temperature < kGreedyTemperature; }

SampleResult Sampler::Sample(absl::Span<const float> logits,
                             absl::Span<const int32_t> prompt_tokens,
                             absl::Span<const int32_t> output_tokens) {
  SampleResult result;
  if (logits.empty()) return result;
  absl::Span<const float> x = logits;
  const SamplingParams& p = params_;
  if (!p.logit_bias.empty() || p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f ||
      p.presence_penalty != 0.0f) {
    processed_.assign(logits.begin(), logits.end());
    ApplyBiasAndPenalties(p, prompt_tokens, output_tokens, absl::MakeSpan(processed_));
    x = processed_;
  }
  const float max = Max(x);
  if (greedy() || !(max > -std::numeric_limits<float>::infinity())) {
    result.token = ArgMax(x);
  } else {
    weights_.resize(x.size());
    Exponentiate(x, max, 1.0f / p.temperature, weights_.data());
    const double u = Uniform01(rng_);  // exactly one draw per sampled token
    if (p.top_k <= 0 && p.top_p >= 1.0f && p.min_p <= 0.0f) {
      result.token = DrawDense(weights_, u);
    } else {
      SelectCandidates(p, x, weights_, &candidates_);
      result.token = candidates_.empty() ? ArgMax(x) : DrawCandidate(candidates_, u);
    }
  }
  if (p.logprobs) FillLogprobs(logits, *p.logprobs, &weights_, &result);
  return result;
}

}  // namespace linfer
