// Turning one row of logits into a token, with vLLM/OpenAI sampling semantics: logit bias,
// repetition / presence / frequency penalties, temperature, min-p, top-k, top-p, per-request seed
// and top-n logprobs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/sampling_math.h"

namespace linfer {

// Per-request sampling settings. Defaults are vLLM's (and OpenAI's) and turn every filter off.
struct SamplingParams {
  // Divides the logits. 0 (anything below 1e-5, as in vLLM) means greedy: argmax of the biased
  // and penalised logits, lowest id on ties; min_p, top_k and top_p are then irrelevant.
  float temperature = 1.0f;
  int32_t top_k = 0;   // keep the k most likely tokens; 0 or -1: off
  float top_p = 1.0f;  // (0, 1]: keep the smallest top set whose probability reaches top_p
  float min_p = 0.0f;  // [0, 1]: drop tokens with prob < min_p * (prob of the most likely one)
  // > 0, 1 = off. For every distinct token seen in the prompt OR the output: a positive logit is
  // divided by it, a negative one multiplied (HF / vLLM).
  float repetition_penalty = 1.0f;
  // [-2, 2], 0 = off; OpenAI / vLLM, over the output tokens only:
  // logit -= frequency_penalty * count(token) + presence_penalty * (count(token) > 0).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Token id -> value in [-100, 100] added to its logit before anything else (a large negative
  // value all but bans a token, a large positive one forces it), or −∞: never sampled.
  std::map<int32_t, float> logit_bias;
  // vLLM's allowed_token_ids: only these tokens are ever sampled — every other one (EOS and the
  // stop tokens included) gets a logit of −∞ after bias and penalties; null: every token. Shared
  // (read-only) by the copies a request's choices and steps make.
  std::shared_ptr<const std::vector<int32_t>> allowed_token_ids;
  // vLLM's bad_words, tokenized (server/request_builder.h): a sequence's last token is never
  // sampled where the output so far ends with the rest of it (a one-token sequence: never). The
  // output only: the prompt does not count.
  std::vector<std::vector<int32_t>> bad_words_ids;
  // Same seed + same logits ⇒ same tokens, whatever else is in the batch. nullopt: a fresh seed
  // from std::random_device.
  std::optional<uint64_t> seed;
  // nullopt: no logprobs (nothing extra computed). n in [0, 20]: the sampled token's logprob plus
  // the n most likely tokens'. As vLLM's default (logprobs_mode "raw_logprobs"), logprobs are the
  // log-softmax of the RAW model logits: before bias, penalties, temperature and any filter.
  std::optional<int32_t> logprobs;
  // vLLM's logprob_token_ids (needs `logprobs`): the top logprobs are these tokens' raw logprobs,
  // in this order, instead of the most likely ones (a classifier's labels, say).
  std::vector<int32_t> logprob_token_ids;
};

// The most top logprobs a request may ask for (OpenAI's limit).
inline constexpr int32_t kMaxLogprobs = 20;

// logit_bias entries one request may give (each prompt and choice of a request holds a copy).
inline constexpr size_t kMaxLogitBias = 4096;
// allowed_token_ids one request may give (each choice holds a copy).
inline constexpr size_t kMaxAllowedTokenIds = size_t{1} << 16;
// bad_words_ids sequences, and tokens in each.
inline constexpr size_t kMaxBadWords = 256;
inline constexpr size_t kMaxBadWordTokens = 64;
// logprob_token_ids one request may give.
inline constexpr size_t kMaxLogprobTokenIds = 1024;

// Returns InvalidArgument naming the first bad field, e.g. "top_p must be in (0, 1], got 1.5".
// vocab_size: the model's vocabulary (logit_bias keys must lie in [0, vocab_size)).
absl::Status ValidateSamplingParams(const SamplingParams& params, int64_t vocab_size);

struct SampleResult {
  int32_t token = -1;
  // Raw-model logprob of `token`; 0 when params.logprobs is nullopt.
  float logprob = 0.0f;
  // The params.logprobs most likely (token, raw logprob), most likely first, lowest id on ties.
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

// The raw-model logprob of `token` in `logits` (log-softmax, as SampleResult's) and the `top_n`
// most likely tokens', most likely first (lowest id on ties): prompt logprobs.
SampleResult RawLogprobs(absl::Span<const float> logits, int32_t token, int32_t top_n);

// A token surviving the filters.
struct Candidate {
  int32_t id;
  float logit;   // after bias and penalties, before temperature
  float weight;  // exp((logit - max logit) / temperature): its unnormalised probability
};

// Adds logit_bias, then applies repetition, frequency and presence penalties, in place.
// logits: [vocab]. Token ids outside [0, vocab) in any input are ignored. Cost: O(bias entries)
// plus O(prompt + output) only when a penalty is on.
void ApplyBiasAndPenalties(const SamplingParams& params, absl::Span<const int32_t> prompt_tokens,
                           absl::Span<const int32_t> output_tokens, absl::Span<float> logits);

// The sampling candidates of `logits` (already biased and penalised), filtered in vLLM's order:
// min-p on the temperature-scaled distribution, then top-k, then top-p on what is left
// (renormalised). Requires temperature >= 1e-5. `out` is cleared and filled in a deterministic
// order; tokens whose probability underflows float (below ~1e-38 of the top one) are never
// candidates. Non-empty when `logits` holds a finite value. Cost: O(vocab): top-k by a k-heap;
// top-p from the 64 best when they hold the mass, else one histogram pass and a radix select.
void FilterCandidates(const SamplingParams& params, absl::Span<const float> logits,
                      std::vector<Candidate>* out);

// One row as the device pre-sampler leaves it (kernels/presample.h): its K largest raw logits,
// largest first (the lower id first among equal logits), and the log-sum-exp of the whole row;
// for a row whose sampler NeedsDeviceDraw, also the device's temperature draw over the whole row.
struct PresampledRow {
  absl::Span<const int32_t> ids;   // [K], K ≥ 1
  absl::Span<const float> logits;  // [K]
  float logsumexp = 0.0f;
  int64_t vocab = 0;  // the row's full length
  struct Draw {
    double weight_sum = 0.0;  // Σ_v exp((x_v − max) / temperature) (kernels/sampling_math.h)
    int32_t token = -1;       // the draw over the whole row with DrawAhead's uniform
    float logit = 0.0f;       // that token's raw logit
  };
  std::optional<Draw> draw;
};

// One request's sampler. Owns its RNG, so it is deterministic given the seed and independent of
// the batch. Not thread-safe (one request = one sampler = one thread at a time); copyable, and a
// copy continues the same random stream (fork).
class Sampler {
 public:
  // `params` must have passed ValidateSamplingParams.
  explicit Sampler(const SamplingParams& params);

  // logits: [vocab] f32 for the next position (token -1 if empty). prompt_tokens: the context the
  // model saw before this request's output (prompt, or session history + prompt: both feed
  // repetition_penalty); output_tokens: what this request generated so far. Spans are only read
  // during the call. Cost at vocab 152k, one core: ~0.05 ms greedy, ~0.2 ms with temperature,
  // top-k or min-p, ~0.3-1 ms with top-p alone (more when top-p keeps a large share).
  // A non-finite logit is an Internal error (a corrupt state), never undefined behaviour.
  // `allowed` (structured output; empty: every token): a bitset over the vocabulary, token t
  // allowed when bit t % 64 of word t / 64 is set; the others are dropped before anything else
  // (as a logit of -inf after bias and penalties), so greedy, min-p, top-k and top-p all see the
  // allowed tokens only — and of those, allowed_token_ids' and not bad_words_ids'. Logprobs stay
  // those of the raw logits. At least one token must be allowed.
  absl::StatusOr<SampleResult> Sample(absl::Span<const float> logits,
                                      absl::Span<const int32_t> prompt_tokens,
                                      absl::Span<const int32_t> output_tokens,
                                      absl::Span<const uint64_t> allowed = {});

  // Whether SampleTop can stand in for Sample with rows cut to their `k` best (of a vocabulary of
  // `vocab`): no allowed_token_ids, bad_words_ids or logprob_token_ids, no more than k logprobs,
  // and greedy, or top-k
  // ≤ k, or min-p (checked per row), or a temperature draw over the whole row and top-p alone (with
  // the device's draw, NeedsDeviceDraw; top-p alone on more than 4,096 tokens with k = 64, as
  // Sample shortlists them, else the whole row). With logit bias or penalties only greedy, top-k ≤
  // k and min-p, and only when they lower logits (repetition ≥ 1, frequency and presence ≥ 0,
  // biases ≤ 0: Qwen's recommended presence_penalty, say): no token beyond the k can then rise
  // above them.
  bool SamplesFromTop(int k, int64_t vocab) const;
  // Whether the pre-sampler must also draw for this row on the device (kernels/presample.h
  // PresampleDraws): a temperature draw over the whole row, or top-p alone (its weight sum).
  bool NeedsDeviceDraw() const;
  // Draws this token's uniform ahead of the step and returns its 53 bits (for the device's draw):
  // the one draw per sampled token that Sample or SampleTop then uses instead of drawing (so the
  // random stream is the same whichever of them samples). Twice without a sample in between: the
  // same bits.
  uint64_t DrawAhead();
  // min_tokens (StopParams): `ids` get a logit of −∞ (never sampled) until Unban, whatever bias
  // the request gave them, as vLLM's min_tokens logits processor does for EOS and the stop ids.
  // Unban restores the request's own biases. Both are cheap to call again.
  void Ban(absl::Span<const int32_t> ids);
  void Unban();
  // `token` taken without sampling (a constraint's forced token, TokenConstraint::Forced): its
  // raw logprobs as Sample would report them; no random draw. A non-finite logit or a token
  // outside the row is an Internal error.
  absl::StatusOr<SampleResult> Take(absl::Span<const float> logits, int32_t token);
  // The result Sample would give for the full row (the same token, the same random stream; the
  // logprobs to within the rounding of the log-sum-exp), or nullopt when this row needs the full
  // logits after all (min-p keeps tokens beyond the k, top-p alone's mass lies beyond the 64 best,
  // or with bias or penalties a token beyond the k could rank among those drawn from; a uniform
  // drawn ahead is kept for Sample, else none is drawn). prompt_tokens and output_tokens as
  // Sample's (the penalties' context; the same spans from one call to the next let the sampler
  // keep their index, extended as the output grows). Sample's non-finite check covers what the
  // pre-sampled row shows: a NaN or +inf anywhere (the log-sum-exp is not finite) is an Internal
  // error; a -inf logit alone is a token of probability 0. A row of a temperature draw without its
  // `draw` is an Internal error. Requires SamplesFromTop(row.ids.size(), vocab).
  absl::StatusOr<std::optional<SampleResult>> SampleTop(
      const PresampledRow& row, absl::Span<const int32_t> prompt_tokens = {},
      absl::Span<const int32_t> output_tokens = {});

  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }  // the seed in use (drawn if params.seed was nullopt)

 private:
  bool greedy() const;
  bool dense() const;        // temperature over the whole row: no top-k, top-p or min-p
  bool top_p_alone() const;  // top-p without top-k or min-p
  bool adjusts() const;      // logit bias or a penalty
  bool lowers_only() const;  // … that never raises a logit
  // Bias and penalties of token `id` (SampleTop), from penalty_index_.
  LogitAdjustment AdjustmentOf(int32_t id, absl::Span<const int32_t> prompt_tokens,
                               absl::Span<const int32_t> output_tokens);
  // The uniform for this token: the one drawn ahead, else a fresh draw.
  double NextUniform();

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::optional<uint64_t> ahead_;  // DrawAhead's bits, until a sample uses them
  // Ban's ids with the bias each had before (nullopt: none).
  std::vector<std::pair<int32_t, std::optional<float>>> banned_;
  std::vector<float> processed_;        // [vocab] scratch: biased and penalised logits
  std::vector<float> weights_;          // [vocab] scratch: exp((logit - max) / temperature)
  std::vector<Candidate> candidates_;   // scratch, reused across calls
  std::vector<Candidate> top_;          // scratch: the K best as Sample sees them
  std::vector<uint64_t> allowed_bits_;  // allowed_token_ids as a bitset, made on first use
  // The penalties' context for SampleTop: the prompt's distinct tokens (sorted) and the span they
  // came from, and the output tokens counted so far.
  struct PenaltyIndex {
    const int32_t* prompt_data = nullptr;
    size_t prompt_size = 0;
    std::vector<int32_t> prompt;
    std::vector<int32_t> output;
    std::unordered_map<int32_t, int32_t> counts;
  } penalty_index_;
};

}  // namespace linfer
