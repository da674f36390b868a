// Sampling: bias and penalties on a copy of the logits, then greedy argmax or a seeded draw over
// the min-p / top-k / top-p candidates; raw-model logprobs on request.
#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/stop.h"
#include "kernels/sampling_math.h"

namespace linfer {
namespace {

constexpr float kGreedyTemperature = 1e-5f;  // below this, temperature means greedy (vLLM)
// Top-p alone over more than kTopPShortlistVocab tokens first tries the kTopPShortlist best.
constexpr size_t kTopPShortlist = 64;
constexpr size_t kTopPShortlistVocab = 4096;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <typename... Args>
absl::Status Invalid(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(args...));
}

// Strict weak order: higher logit first, lower id first on ties.
bool Better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

float Max(absl::Span<const float> x) {
  float m = kNegInf;
#pragma omp simd reduction(max : m)
  for (size_t i = 0; i < x.size(); ++i) m = x[i] > m ? x[i] : m;
  // OpenMP starts each lane's maximum at the type's least value, which clang takes to be
  // -FLT_MAX, not −∞: a row of −∞ (every token banned) would come out as -FLT_MAX.
  constexpr float kLowest = std::numeric_limits<float>::lowest();
  if (m == kLowest && std::find(x.begin(), x.end(), kLowest) == x.end()) return kNegInf;
  return m;
}

// The first i >= from with passes(v[i]), else v.size(). `passes` must be monotone increasing:
// blocks of 64 are skipped by their vectorised maximum (the filters keep few of the vocabulary).
template <typename Pred>
size_t NextPassing(absl::Span<const float> v, size_t from, Pred passes) {
  constexpr size_t kBlock = 64;
  for (size_t i = from; i < v.size(); ++i) {
    if (i % kBlock == 0 && i + kBlock <= v.size() && !passes(Max(v.subspan(i, kBlock)))) {
      i += kBlock - 1;
    } else if (passes(v[i])) {
      return i;
    }
  }
  return v.size();
}

// Index of the largest value, lowest index on ties (0 when every value is NaN).
int32_t ArgMax(absl::Span<const float> x) {
  const auto it = std::find(x.begin(), x.end(), Max(x));
  return it == x.end() ? 0 : static_cast<int32_t>(it - x.begin());
}

uint64_t RandomSeed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

double Sum(const std::vector<Candidate>& c) {
  double total = 0.0;
  for (const Candidate& x : c) total += x.weight;
  return total;
}

int32_t DrawCandidate(const std::vector<Candidate>& c, double u) {
  const double target = u * Sum(c);
  double acc = 0.0;
  for (const Candidate& x : c) {
    acc += x.weight;
    if (target < acc) return x.id;
  }
  return c.back().id;
}

// Fills result's logprobs from the log-softmax of the raw logits; scratch: resized to [vocab].
void FillLogprobs(absl::Span<const float> logits, int32_t top_n, std::vector<float>* scratch,
                  SampleResult* result, absl::Span<const int32_t> only = {}) {
  const float max = Max(logits);
  scratch->resize(logits.size());
  SampleWeights(logits, max, 1.0f, scratch->data());
  const double log_z =
      static_cast<double>(max) + std::log(SumWeights(scratch->data(), scratch->size()));
  result->logprob = static_cast<float>(logits[result->token] - log_z);
  if (!only.empty()) {  // logprob_token_ids: these, in their order
    for (const int32_t id : only) {
      if (id >= 0 && static_cast<size_t>(id) < logits.size()) {
        result->top_logprobs.emplace_back(id, static_cast<float>(logits[id] - log_z));
      }
    }
    return;
  }
  if (top_n <= 0) return;
  // The best top_n in order, by binary insertion (safe even with NaN logits).
  const size_t n = std::min(static_cast<size_t>(top_n), logits.size());
  std::vector<Candidate> best;
  best.reserve(n + 1);
  for (size_t i = 0; i < logits.size(); ++i) {
    // Once full, only a logit above the worst's enters (a tie loses: its id is higher).
    if (best.size() == n && (i = NextPassing(logits, i, [&](float v) {
                               return v > best.back().logit;
                             })) == logits.size()) {
      break;
    }
    const Candidate c{static_cast<int32_t>(i), logits[i], 0.0f};
    best.insert(std::upper_bound(best.begin(), best.end(), c, Better), c);
    if (best.size() > n) best.pop_back();
  }
  result->top_logprobs.reserve(best.size());
  for (const Candidate& c : best) {
    result->top_logprobs.emplace_back(c.id, static_cast<float>(c.logit - log_z));
  }
}

// Order-preserving key of a finite logit: a smaller key is a larger logit (-0 counts as +0).
uint32_t DescendingKey(float logit) {
  const uint32_t u = std::bit_cast<uint32_t>(logit + 0.0f);
  return (u & 0x80000000u) ? u : ~(u | 0x80000000u);
}

// Top-p keeps the K best, K = min{k : weight of the k best >= top_p * total}: a token stays while
// the mass ranked above it is < top_p. O(n): a radix select on DescendingKey (11, 11, 10 bits).
constexpr int kRadixShift[] = {21, 10, 0};
uint32_t Digit(float logit, int level) {
  return (DescendingKey(logit) >> kRadixShift[level]) & (level == 2 ? 0x3FFu : 0x7FFu);
}

// The digit (bucket) where the cumulative mass, from *cum, reaches target; *cum becomes the mass
// before it. mass: per digit, of the tokens still undecided (weights are > 0: 0 means empty).
uint32_t Boundary(const std::vector<double>& mass, double target, double* cum) {
  uint32_t last = 0;
  for (uint32_t d = 0; d < mass.size(); ++d) {
    if (mass[d] == 0.0) continue;
    last = d;
    if (*cum + mass[d] >= target) return d;
    *cum += mass[d];
  }
  *cum -= mass[last];  // not reached, by rounding: the last digit present
  return last;
}

// c[0, kept) are kept (mass kept_mass); c[kept, end) share the boundary's digits above `level`;
// the rest is dropped. Narrows with the remaining levels, then sorts what is left.
void FinishTopP(double target, int level, size_t kept, size_t end, double kept_mass,
                std::vector<Candidate>* candidates) {
  std::vector<Candidate>& c = *candidates;
  for (; level < 3 && end - kept > 256; ++level) {  // a few hundred are simply sorted
    std::vector<double> mass(2048, 0.0);
    for (size_t i = kept; i < end; ++i) mass[Digit(c[i].logit, level)] += c[i].weight;
    const uint32_t b = Boundary(mass, target, &kept_mass);
    const auto mid = std::partition(c.begin() + kept, c.begin() + end,
                                    [&](const Candidate& x) { return Digit(x.logit, level) < b; });
    end = std::partition(mid, c.begin() + end,
                         [&](const Candidate& x) { return Digit(x.logit, level) == b; }) -
          c.begin();
    kept = mid - c.begin();
  }
  std::sort(c.begin() + kept, c.begin() + end, Better);  // equal logits: lowest ids first
  for (double m = kept_mass; kept < end && m < target; ++kept) m += c[kept].weight;
  c.resize(std::max<size_t>(kept, 1));
}

// Top-p straight from the dense arrays: one histogram of (max - x) / t in 1/16-nat buckets (at
// most 87 * 16 < 2048), so only the kept tokens and the boundary bucket's become candidates.
void DenseTopP(float top_p, float max, float inv_t, absl::Span<const float> x,
               absl::Span<const float> w, std::vector<Candidate>* out) {
  auto bucket = [&](float logit) {  // clamped: -inf (and NaN) go to the last bucket
    const float v = (max - logit) * inv_t * 16.0f;
    return static_cast<uint32_t>(v < 2047.0f ? v : 2047.0f);
  };
  std::vector<double> mass(2048, 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    if (w[i] > 0.0f) mass[bucket(x[i])] += w[i];
  }
  const double target = top_p * std::accumulate(mass.begin(), mass.end(), 0.0);
  double kept_mass = 0.0;
  const uint32_t b = Boundary(mass, target, &kept_mass);
  auto passes = [&](float v) { return bucket(v) <= b; };
  for (size_t i = NextPassing(x, 0, passes); i < x.size(); i = NextPassing(x, i + 1, passes)) {
    if (w[i] > 0.0f) out->push_back({static_cast<int32_t>(i), x[i], w[i]});
  }
  const auto mid = std::partition(out->begin(), out->end(),
                                  [&](const Candidate& c) { return bucket(c.logit) < b; });
  FinishTopP(target, 0, mid - out->begin(), out->size(), kept_mass, out);
}

// Appends the tokens with w >= min_w, only the k best of them when k < vocab (by a heap whose
// front is the worst: once full, only a logit above its logit enters).
void Gather(absl::Span<const float> x, absl::Span<const float> w, float min_w, size_t k,
            std::vector<Candidate>* out) {
  const bool heap = k < x.size();
  bool full = false;
  float worst = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    if (full && (i = NextPassing(x, i, [&](float v) { return v > worst; })) == x.size()) break;
    if (!full && (i = NextPassing(w, i, [&](float v) { return v >= min_w; })) == x.size()) break;
    if (!(w[i] >= min_w)) continue;
    const Candidate c{static_cast<int32_t>(i), x[i], w[i]};
    if (out->size() < k) {
      out->push_back(c);
      if (heap) std::push_heap(out->begin(), out->end(), Better);
    } else {
      std::pop_heap(out->begin(), out->end(), Better);
      out->back() = c;
      std::push_heap(out->begin(), out->end(), Better);
    }
    if (heap && out->size() == k) full = true, worst = out->front().logit;
  }
}

// min-p, top-k, then top-p, from the weights w = exp((x - max) / t), whose maximum is 1: min-p is
// then w >= min_p (and min_w > 0 drops the tokens whose weight underflowed).
void SelectCandidates(const SamplingParams& p, absl::Span<const float> x, float max,
                      absl::Span<const float> w, std::vector<Candidate>* out) {
  out->clear();
  const bool top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < x.size();
  const float min_w = std::max(p.min_p, std::numeric_limits<float>::denorm_min());
  if (!top_k && !(p.min_p > 0.0f) && p.top_p < 1.0f && x.size() > kTopPShortlistVocab) {
    // Top-p alone: the 64 best usually hold the mass (a peaked distribution), else a histogram.
    const double target = static_cast<double>(p.top_p) * SumWeights(w.data(), w.size());
    Gather(x, w, min_w, kTopPShortlist, out);
    std::sort(out->begin(), out->end(), Better);
    double mass = 0.0;
    for (size_t i = 0; i < out->size(); ++i) {
      if ((mass += (*out)[i].weight) < target) continue;
      out->resize(i + 1);
      return;
    }
    out->clear();
    return DenseTopP(p.top_p, max, 1.0f / p.temperature, x, w, out);
  }
  Gather(x, w, min_w, top_k ? static_cast<size_t>(p.top_k) : x.size(), out);
  // The heap's order depends on the scan; draws walk the candidates in order, so sort them into
  // the pre-sampler's order (Sampler::SampleTop then draws the same token from the same seed).
  if (top_k) std::sort(out->begin(), out->end(), Better);
  if (p.top_p < 1.0f && out->size() > 1) {
    FinishTopP(static_cast<double>(p.top_p) * Sum(*out), 0, 0, out->size(), 0.0, out);
  }
}

// What logit_bias and the penalties do to token `id` (in the context or not, `count` times in the
// output): sampling_math.h's PenalizedLogit arguments.
LogitAdjustment Adjustment(const SamplingParams& p, int32_t id, bool in_context, int32_t count) {
  LogitAdjustment a;
  if (auto it = p.logit_bias.find(id); it != p.logit_bias.end()) {
    a.has_bias = true;
    a.bias = it->second;
  }
  a.in_context = in_context;
  a.repetition = p.repetition_penalty;
  a.count = count;
  a.frequency = p.frequency_penalty;
  a.presence = p.presence_penalty;
  return a;
}

}  // namespace

SampleResult RawLogprobs(absl::Span<const float> logits, int32_t token, int32_t top_n) {
  SampleResult r;
  r.token = token;
  std::vector<float> scratch;
  FillLogprobs(logits, top_n, &scratch, &r);
  return r;
}

absl::Status ValidateSamplingParams(const SamplingParams& p, int64_t vocab_size) {
  if (vocab_size <= 0) return Invalid("vocab_size must be > 0, got ", vocab_size);
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return Invalid("temperature must be a finite number >= 0, got ", p.temperature);
  }
  if (p.top_k < -1) return Invalid("top_k must be -1 or 0 (off) or > 0, got ", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) return Invalid("top_p must be in (0, 1], got ", p.top_p);
  if (!(p.min_p >= 0 && p.min_p <= 1)) return Invalid("min_p must be in [0, 1], got ", p.min_p);
  if (!std::isfinite(p.repetition_penalty) || !(p.repetition_penalty > 0.0f)) {
    return Invalid("repetition_penalty must be a finite number > 0, got ", p.repetition_penalty);
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return Invalid("presence_penalty must be in [-2, 2], got ", p.presence_penalty);
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return Invalid("frequency_penalty must be in [-2, 2], got ", p.frequency_penalty);
  }
  // At most kMaxLogitBias values, and −∞ (a ban) on at most as many ids as a request may stop on
  // (gRPC clients can send −∞; min_tokens' bans go through Sampler::Ban instead).
  constexpr float kNever = -std::numeric_limits<float>::infinity();
  const auto banned = static_cast<size_t>(std::count_if(
      p.logit_bias.begin(), p.logit_bias.end(), [&](const auto& e) { return e.second == kNever; }));
  if (p.logit_bias.size() - banned > kMaxLogitBias) {
    return Invalid("logit_bias: at most ", kMaxLogitBias, " tokens, got ",
                   p.logit_bias.size() - banned);
  }
  if (banned > kMaxStopTokenIds + kMaxModelEndIds + 1) {
    return Invalid("logit_bias: at most ", kMaxStopTokenIds + kMaxModelEndIds + 1,
                   " tokens banned (-inf), got ", banned);
  }
  for (const auto& [id, bias] : p.logit_bias) {  // in id order
    if (id < 0 || id >= vocab_size) {
      return Invalid("logit_bias: token id must be in [0, ", vocab_size, "), got ", id);
    }
    // OpenAI's range (NaN is outside it), or −∞: the token is never sampled.
    if (!(bias >= -100 && bias <= 100) && bias != kNever) {
      return Invalid("logit_bias[", id, "] must be in [-100, 100], got ", bias);
    }
  }
  if (p.logprobs && (*p.logprobs < 0 || *p.logprobs > kMaxLogprobs)) {
    return Invalid("logprobs must be in [0, ", kMaxLogprobs, "], got ", *p.logprobs);
  }
  if (!p.logprob_token_ids.empty() && !p.logprobs) {
    return Invalid("logprob_token_ids: needs logprobs");
  }
  if (p.logprob_token_ids.size() > kMaxLogprobTokenIds) {
    return Invalid("logprob_token_ids: at most ", kMaxLogprobTokenIds, " ids, got ",
                   p.logprob_token_ids.size());
  }
  for (size_t i = 0; i < p.logprob_token_ids.size(); ++i) {
    const int32_t id = p.logprob_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return Invalid("logprob_token_ids[", i, "] must be in [0, ", vocab_size, "), got ", id);
    }
  }
  const std::vector<int32_t> no_ids;
  const std::vector<int32_t>& allowed = p.allowed_token_ids ? *p.allowed_token_ids : no_ids;
  if (p.allowed_token_ids && allowed.empty()) return Invalid("allowed_token_ids: empty");
  if (allowed.size() > kMaxAllowedTokenIds) {
    return Invalid("allowed_token_ids: at most ", kMaxAllowedTokenIds, " ids, got ",
                   allowed.size());
  }
  for (size_t i = 0; i < allowed.size(); ++i) {
    const int32_t id = allowed[i];
    if (id < 0 || id >= vocab_size) {
      return Invalid("allowed_token_ids[", i, "] must be in [0, ", vocab_size, "), got ", id);
    }
  }
  if (p.bad_words_ids.size() > kMaxBadWords) {
    return Invalid("bad_words: at most ", kMaxBadWords, " token sequences, got ",
                   p.bad_words_ids.size());
  }
  for (size_t i = 0; i < p.bad_words_ids.size(); ++i) {
    const std::vector<int32_t>& w = p.bad_words_ids[i];
    if (w.empty() || w.size() > kMaxBadWordTokens) {
      return Invalid("bad_words: token sequence ", i, " must have 1 to ", kMaxBadWordTokens,
                     " tokens, got ", w.size());
    }
    for (const int32_t id : w) {
      if (id < 0 || id >= vocab_size) {
        return Invalid("bad_words: token sequence ", i, " holds ", id, ", outside [0, ", vocab_size,
                       ")");
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// Internal error naming the first non-finite logit of a row (a corrupt state).
absl::Status CheckFiniteRow(absl::Span<const float> logits) {
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) {
      return absl::InternalError(absl::StrCat("the model produced a non-finite logit (", logits[i],
                                              " for token ", i,
                                              "); the sequence's state is corrupt"));
    }
  }
  return absl::OkStatus();
}

// allowed_token_ids (as the bitset `allowed`, empty: none) and bad_words_ids on `logits` (biased
// and penalised): the tokens they rule out at this position get −∞.
void ApplyAllowedAndBadWords(const SamplingParams& p, absl::Span<const uint64_t> allowed,
                             absl::Span<const int32_t> output_tokens, absl::Span<float> logits) {
  const auto vocab = static_cast<int64_t>(logits.size());
  if (!allowed.empty()) {
    for (int64_t i = 0; i < vocab; ++i) {
      if (!((allowed[static_cast<size_t>(i) / 64] >> (i % 64)) & 1)) logits[i] = kNegInf;
    }
  }
  for (const std::vector<int32_t>& w : p.bad_words_ids) {
    const size_t before = w.size() - 1;  // the tokens that must end the output
    if (w.empty() || before > output_tokens.size() || w.back() < 0 || w.back() >= vocab) continue;
    if (std::equal(w.begin(), w.end() - 1, output_tokens.end() - static_cast<ptrdiff_t>(before))) {
      logits[w.back()] = kNegInf;
    }
  }
}

}  // namespace

void ApplyBiasAndPenalties(const SamplingParams& p, absl::Span<const int32_t> prompt_tokens,
                           absl::Span<const int32_t> output_tokens, absl::Span<float> logits) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  const bool repetition = p.repetition_penalty != 1.0f;
  // Per token: 1 = in the context (prompt or output), 2 = adjusted already (each token once).
  std::vector<uint8_t> mark(logits.size(), 0);
  if (repetition) {
    for (const absl::Span<const int32_t> part : {prompt_tokens, output_tokens}) {
      for (const int32_t t : part) {
        if (t >= 0 && t < vocab) mark[t] = 1;
      }
    }
  }
  std::vector<int32_t> output(output_tokens.begin(), output_tokens.end());
  std::sort(output.begin(), output.end());  // counts by binary search
  auto adjust = [&](int32_t id) {
    if (id < 0 || id >= vocab || (mark[id] & 2)) return;
    const auto [lo, hi] = std::equal_range(output.begin(), output.end(), id);
    const int32_t count = static_cast<int32_t>(hi - lo);
    logits[id] = PenalizedLogit(logits[id], Adjustment(p, id, mark[id] & 1, count));
    mark[id] |= 2;
  };
  // Every token an adjustment touches: bias entries, the context (repetition), the output
  // (frequency, presence).
  for (const auto& [id, bias] : p.logit_bias) adjust(id);
  if (repetition) {
    for (const int32_t t : prompt_tokens) adjust(t);
  }
  if (repetition || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (const int32_t t : output_tokens) adjust(t);
  }
}

void FilterCandidates(const SamplingParams& p, absl::Span<const float> logits,
                      std::vector<Candidate>* out) {
  out->clear();
  const float max = Max(logits);
  if (!(max > kNegInf)) return;  // empty, or nothing possible
  std::vector<float> w(logits.size());
  SampleWeights(logits, max, 1.0f / p.temperature, w.data());
  SelectCandidates(p, logits, max, w, out);
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), seed_(params.seed ? *params.seed : RandomSeed()), rng_(seed_) {}

bool Sampler::greedy() const { return params_.temperature < kGreedyTemperature; }

absl::StatusOr<SampleResult> Sampler::Sample(absl::Span<const float> logits,
                                             absl::Span<const int32_t> prompt_tokens,
                                             absl::Span<const int32_t> output_tokens,
                                             absl::Span<const uint64_t> allowed) {
  SampleResult result;
  if (logits.empty()) return result;
  RETURN_IF_ERROR(CheckFiniteRow(logits));
  absl::Span<const float> x = logits;
  const SamplingParams& p = params_;
  const bool restricted = p.allowed_token_ids != nullptr || !p.bad_words_ids.empty();
  if (!p.logit_bias.empty() || p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f ||
      p.presence_penalty != 0.0f || !allowed.empty() || restricted) {
    processed_.assign(logits.begin(), logits.end());
    ApplyBiasAndPenalties(p, prompt_tokens, output_tokens, absl::MakeSpan(processed_));
    if (p.allowed_token_ids != nullptr && allowed_bits_.size() != (processed_.size() + 63) / 64) {
      allowed_bits_.assign((processed_.size() + 63) / 64, 0);
      for (const int32_t id : *p.allowed_token_ids) {
        if (id >= 0 && static_cast<size_t>(id) < processed_.size()) {
          allowed_bits_[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
        }
      }
    }
    if (restricted) {
      const absl::Span<const uint64_t> bits = p.allowed_token_ids != nullptr
                                                  ? absl::MakeConstSpan(allowed_bits_)
                                                  : absl::Span<const uint64_t>();
      ApplyAllowedAndBadWords(p, bits, output_tokens, absl::MakeSpan(processed_));
    }
    if (!allowed.empty()) {
      if (allowed.size() * 64 < processed_.size()) {
        return absl::InternalError(absl::StrCat("the allowed-token mask covers ",
                                                allowed.size() * 64, " tokens of ",
                                                processed_.size()));
      }
      bool any = false;
      for (size_t i = 0; i < processed_.size(); ++i) {
        const bool ok = (allowed[i / 64] >> (i % 64)) & 1;
        any |= ok;
        if (!ok) processed_[i] = kNegInf;
      }
      if (!any) return absl::InternalError("the allowed-token mask allows no token");
    }
    x = processed_;
    if (!(Max(x) > kNegInf)) {  // every possible token banned (−∞ biases)
      return absl::InvalidArgumentError(
          restricted ? "allowed_token_ids, bad_words, logit_bias and min_tokens' ban of the stop "
                       "tokens leave no token the output may take next"
                     : "logit_bias: every token the output may take next is banned (-inf)");
    }
  }
  const float max = Max(x);
  if (greedy() || !(max > kNegInf)) {
    result.token = ArgMax(x);
  } else {
    weights_.resize(x.size());
    SampleWeights(x, max, 1.0f / p.temperature, weights_.data());
    const double u = NextUniform();  // exactly one draw per sampled token
    if (dense()) {
      result.token = DrawFromWeights(weights_, u);
    } else {
      SelectCandidates(p, x, max, weights_, &candidates_);
      result.token = candidates_.empty() ? ArgMax(x) : DrawCandidate(candidates_, u);
    }
  }
  if (p.logprobs) FillLogprobs(logits, *p.logprobs, &weights_, &result, p.logprob_token_ids);
  return result;
}

absl::StatusOr<SampleResult> Sampler::Take(absl::Span<const float> logits, int32_t token) {
  if (token < 0 || static_cast<size_t>(token) >= logits.size()) {
    return absl::InternalError(
        absl::StrCat("forced token ", token, " is outside the row of ", logits.size()));
  }
  RETURN_IF_ERROR(CheckFiniteRow(logits));
  SampleResult result;
  result.token = token;
  const SamplingParams& p = params_;
  if (p.logprobs) FillLogprobs(logits, *p.logprobs, &weights_, &result, p.logprob_token_ids);
  return result;
}

bool Sampler::dense() const {
  const SamplingParams& p = params_;
  return p.top_k <= 0 && p.top_p >= 1.0f && p.min_p <= 0.0f;
}

bool Sampler::top_p_alone() const {
  const SamplingParams& p = params_;
  return p.top_k <= 0 && p.top_p < 1.0f && p.min_p <= 0.0f;
}

double Sampler::NextUniform() {
  const uint64_t bits = ahead_ ? *ahead_ : rng_() >> 11;
  ahead_.reset();
  return UniformFromBits(bits);
}

bool Sampler::SamplesFromTop(int k, int64_t vocab) const {
  const SamplingParams& p = params_;
  if (p.logprobs && *p.logprobs > k) return false;
  if (p.allowed_token_ids != nullptr || !p.bad_words_ids.empty() || !p.logprob_token_ids.empty()) {
    return false;  // whole rows
  }
  if (adjusts()) {
    // Bias and penalties that only lower logits: the K best settle greedy, top-k and min-p rows
    // (SampleTop checks each row); a draw over the whole row would need every adjusted logit.
    return lowers_only() &&
           (greedy() || (p.top_k > 0 && p.top_k <= k) || (p.min_p > 0.0f && p.top_k <= 0));
  }
  // Top-p alone walks the 64 best on the whole row too, above 4,096 tokens (SelectCandidates).
  return greedy() || (p.top_k > 0 && p.top_k <= k) || (p.min_p > 0.0f && p.top_k <= 0) || dense() ||
         (top_p_alone() && static_cast<size_t>(k) >= kTopPShortlist &&
          vocab > static_cast<int64_t>(kTopPShortlistVocab));
}

bool Sampler::NeedsDeviceDraw() const { return !greedy() && (dense() || top_p_alone()); }

void Sampler::Ban(absl::Span<const int32_t> ids) {
  for (const int32_t id : ids) {
    if (std::any_of(banned_.begin(), banned_.end(), [&](const auto& b) { return b.first == id; })) {
      continue;
    }
    std::optional<float> before;
    if (auto it = params_.logit_bias.find(id); it != params_.logit_bias.end()) before = it->second;
    banned_.emplace_back(id, before);
    params_.logit_bias[id] = -std::numeric_limits<float>::infinity();
  }
}

void Sampler::Unban() {
  for (const auto& [id, before] : banned_) {
    if (before) {
      params_.logit_bias[id] = *before;
    } else {
      params_.logit_bias.erase(id);
    }
  }
  banned_.clear();
}

uint64_t Sampler::DrawAhead() {
  if (!ahead_) ahead_ = rng_() >> 11;
  return *ahead_;
}

bool Sampler::adjusts() const {
  const SamplingParams& p = params_;
  return !p.logit_bias.empty() || p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f ||
         p.presence_penalty != 0.0f;
}

bool Sampler::lowers_only() const {
  const SamplingParams& p = params_;
  return p.repetition_penalty >= 1.0f && p.frequency_penalty >= 0.0f &&
         p.presence_penalty >= 0.0f &&
         std::all_of(p.logit_bias.begin(), p.logit_bias.end(),
                     [](const auto& entry) { return entry.second <= 0.0f; });
}

LogitAdjustment Sampler::AdjustmentOf(int32_t id, absl::Span<const int32_t> prompt_tokens,
                                      absl::Span<const int32_t> output_tokens) {
  // The prompt's distinct tokens, sorted once per prompt; the output's counts, extended as it
  // grows (rebuilt if it is not the same output plus new tokens).
  PenaltyIndex& x = penalty_index_;
  if (x.prompt_data != prompt_tokens.data() || x.prompt_size != prompt_tokens.size() ||
      (!prompt_tokens.empty() &&
       !(std::binary_search(x.prompt.begin(), x.prompt.end(), prompt_tokens.front()) &&
         std::binary_search(x.prompt.begin(), x.prompt.end(), prompt_tokens.back())))) {
    x.prompt.assign(prompt_tokens.begin(), prompt_tokens.end());
    std::sort(x.prompt.begin(), x.prompt.end());
    x.prompt.erase(std::unique(x.prompt.begin(), x.prompt.end()), x.prompt.end());
    x.prompt_data = prompt_tokens.data();
    x.prompt_size = prompt_tokens.size();
  }
  if (output_tokens.size() < x.output.size() ||
      !std::equal(x.output.begin(), x.output.end(), output_tokens.begin())) {
    x.output.clear();
    x.counts.clear();
  }
  for (size_t i = x.output.size(); i < output_tokens.size(); ++i) {
    x.output.push_back(output_tokens[i]);
    ++x.counts[output_tokens[i]];
  }
  const auto it = x.counts.find(id);
  const int32_t count = it == x.counts.end() ? 0 : it->second;
  return Adjustment(params_, id,
                    count > 0 || std::binary_search(x.prompt.begin(), x.prompt.end(), id), count);
}

absl::StatusOr<std::optional<SampleResult>> Sampler::SampleTop(
    const PresampledRow& row, absl::Span<const int32_t> prompt_tokens,
    absl::Span<const int32_t> output_tokens) {
  const SamplingParams& p = params_;
  const size_t k = row.ids.size();
  if (k == 0 || row.logits.size() != k || !std::isfinite(row.logsumexp) ||
      !std::isfinite(row.logits[0])) {
    return absl::InternalError(absl::StrCat("the model produced a non-finite logit (row maximum ",
                                            k ? row.logits[0] : 0.0f, ", log-sum-exp ",
                                            row.logsumexp, "); the sequence's state is corrupt"));
  }
  SampleResult result;
  result.token = row.ids[0];
  float token_logit = row.logits[0];
  if (!greedy() && (dense() || top_p_alone()) && !row.draw) {
    return absl::InternalError("a pre-sampled row of a temperature draw came without its draw");
  }
  // The K best as Sample sees them: after bias and penalties (which only lower logits here, so no
  // token beyond the K rises above `bound`, the K-th raw logit), re-sorted into Sample's order.
  top_.clear();
  for (size_t i = 0; i < k; ++i) {
    top_.push_back({row.ids[i], row.logits[i], 0.0f});
  }
  const bool adjusted = adjusts();
  const float bound = static_cast<int64_t>(k) < row.vocab ? row.logits[k - 1] : -INFINITY;
  if (adjusted) {
    for (Candidate& c : top_)
      c.logit = PenalizedLogit(c.logit, AdjustmentOf(c.id, prompt_tokens, output_tokens));
    std::sort(top_.begin(), top_.end(), Better);
    // Every one of the K banned (−∞): the row's other tokens decide (the whole row).
    if (!(top_[0].logit > -INFINITY)) return std::nullopt;
  }
  if (greedy()) {
    if (adjusted && !(top_[0].logit > bound)) return std::nullopt;  // a token beyond may tie
    result.token = top_[0].id;
  } else if (adjusted && (dense() || top_p_alone())) {
    return std::nullopt;  // every adjusted logit counts (SamplesFromTop refuses these)
  } else if (dense()) {
    // The device drew over the whole row with this token's uniform (DrawAhead).
    NextUniform();
    if (row.draw->token < 0 || row.draw->token >= row.vocab) {
      return absl::InternalError(absl::StrCat("the device's draw is token ", row.draw->token,
                                              ", outside the vocabulary of ", row.vocab));
    }
    result.token = row.draw->token;
    token_logit = row.draw->logit;
  } else {
    const float max = top_[0].logit, inv_t = 1.0f / p.temperature;
    weights_.resize(k);
    for (size_t i = 0; i < k; ++i) weights_[i] = top_[i].logit;
    SampleWeights(weights_, max, inv_t, weights_.data());
    for (size_t i = 0; i < k; ++i) top_[i].weight = weights_[i];
    const float min_w = std::max(p.min_p, std::numeric_limits<float>::denorm_min());
    const bool top_k = p.top_k > 0 && p.top_k < row.vocab;
    candidates_.clear();
    if (top_p_alone()) {
      // Sample's shortlist: the 64 best (those of positive weight), kept while the mass ranked
      // above each is below top_p of the whole row's weight (the device's sum).
      const double target = static_cast<double>(p.top_p) * row.draw->weight_sum;
      double mass = 0.0;
      for (size_t i = 0; i < std::min<size_t>(k, kTopPShortlist) && top_[i].weight >= min_w; ++i) {
        candidates_.push_back(top_[i]);
        if ((mass += top_[i].weight) >= target) break;
      }
      if (!(mass >= target)) return std::nullopt;  // the 64 best do not hold it: the whole row
    } else {
      if (top_k ? static_cast<size_t>(p.top_k) > k : !(p.min_p > 0.0f)) return std::nullopt;
      for (size_t i = 0; i < k && (!top_k || candidates_.size() < static_cast<size_t>(p.top_k));
           ++i) {
        if (top_[i].weight >= min_w) candidates_.push_back(top_[i]);
      }
      // Tokens beyond the k: with all top-k found, none can outrank them (adjusted, only a
      // logit above the bound is sure to); else (min-p) none may pass min-p, i.e. the bound's
      // weight must be below it — else the full row.
      const bool complete = top_k && candidates_.size() == static_cast<size_t>(p.top_k);
      float bound_weight = 0.0f;
      SampleWeights({&bound, 1}, max, inv_t, &bound_weight);
      if (complete ? adjusted && !(candidates_.back().logit > bound) : bound_weight >= min_w) {
        return std::nullopt;
      }
      // Sample's order: the best first under top-k, else by id (the order of its scan).
      if (!top_k) {
        std::sort(candidates_.begin(), candidates_.end(),
                  [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
      }
      if (p.top_p < 1.0f && candidates_.size() > 1) {
        FinishTopP(static_cast<double>(p.top_p) * Sum(candidates_), 0, 0, candidates_.size(), 0.0,
                   &candidates_);
      }
    }
    const double u = NextUniform();
    result.token = candidates_.empty() ? top_[0].id : DrawCandidate(candidates_, u);
  }
  if (greedy() || !dense()) {  // a token of the K: its raw logit
    for (size_t i = 0; i < k; ++i) {
      if (row.ids[i] == result.token) token_logit = row.logits[i];
    }
  }
  if (p.logprobs) {
    const double log_z = row.logsumexp;
    result.logprob = static_cast<float>(token_logit - log_z);
    const size_t n = std::min(static_cast<size_t>(*p.logprobs), k);
    for (size_t i = 0; i < n; ++i) {
      result.top_logprobs.emplace_back(row.ids[i], static_cast<float>(row.logits[i] - log_z));
    }
  }
  return result;
}

}  // namespace linfer
