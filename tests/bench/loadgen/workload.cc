// Random token-id prompts and conversations from a seeded std::mt19937_64.
#include "tests/bench/loadgen/workload.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace linfer::bench {
namespace {

absl::Status CheckLengths(int input_len, int output_len, double range_ratio, int64_t vocab) {
  if (input_len < 1) return absl::InvalidArgumentError("--input_len must be ≥ 1");
  if (output_len < 1) return absl::InvalidArgumentError("--output_len must be ≥ 1");
  if (!(range_ratio >= 0 && range_ratio < 1)) {
    return absl::InvalidArgumentError("--range_ratio must be in [0, 1)");
  }
  if (vocab < 2) return absl::InvalidArgumentError(absl::StrCat("vocabulary too small: ", vocab));
  return absl::OkStatus();
}

// Uniform in [floor(L·(1 − r)), ceil(L·(1 + r))], at least 1, like vLLM's random dataset.
int DrawLength(int len, double r, std::mt19937_64& rng) {
  const int lo = std::max(1, static_cast<int>(std::floor(len * (1 - r))));
  const int hi = std::max(lo, static_cast<int>(std::ceil(len * (1 + r))));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

std::vector<int32_t> DrawTokens(int n, int64_t vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = id(rng);
  return t;
}

}  // namespace

absl::Status RandomWorkloadOptions::Validate() const {
  if (num_prompts < 0) return absl::InvalidArgumentError("--num_prompts must be ≥ 0");
  if (prefix_len < 0) return absl::InvalidArgumentError("--prefix_len must be ≥ 0");
  if (num_prefixes < 1) return absl::InvalidArgumentError("--num_prefixes must be ≥ 1");
  return CheckLengths(input_len, output_len, range_ratio, vocab);
}

absl::StatusOr<std::vector<RequestSpec>> RandomRequests(const RandomWorkloadOptions& o) {
  if (absl::Status st = o.Validate(); !st.ok()) return st;
  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < o.num_prefixes; ++i)
    prefixes.push_back(DrawTokens(o.prefix_len, o.vocab, rng));
  std::uniform_int_distribution<int> pick(0, o.num_prefixes - 1);
  std::vector<RequestSpec> out(o.num_prompts);
  for (RequestSpec& r : out) {
    r.prompt = prefixes[pick(rng)];
    const std::vector<int32_t> tail =
        DrawTokens(DrawLength(o.input_len, o.range_ratio, rng), o.vocab, rng);
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    r.output_len = DrawLength(o.output_len, o.range_ratio, rng);
  }
  return out;
}

absl::Status ConversationOptions::Validate() const {
  if (conversations < 1) return absl::InvalidArgumentError("--conversations must be ≥ 1");
  if (turns < 1) return absl::InvalidArgumentError("--turns must be ≥ 1");
  if (first_turn_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--first_turn_len must be ≥ 0 (0: --input_len), not ", first_turn_len));
  }
  return CheckLengths(input_len, output_len, range_ratio, vocab);
}

absl::StatusOr<std::vector<Conversation>> Conversations(const ConversationOptions& o) {
  if (absl::Status st = o.Validate(); !st.ok()) return st;
  std::mt19937_64 rng(o.seed);
  std::vector<Conversation> out(o.conversations);
  for (Conversation& c : out) {
    c.turns.resize(o.turns);
    for (size_t i = 0; i < c.turns.size(); ++i) {
      RequestSpec& t = c.turns[i];
      const int len = i == 0 && o.first_turn_len > 0 ? o.first_turn_len : o.input_len;
      t.prompt = DrawTokens(DrawLength(len, o.range_ratio, rng), o.vocab, rng);
      t.output_len = DrawLength(o.output_len, o.range_ratio, rng);
    }
  }
  return out;
}

}  // namespace linfer::bench
