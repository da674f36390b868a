// Synthetic workloads of token-id prompts: random (vLLM's `random` dataset, with an optional
// shared prefix, i.e. the shared-prefix workload) and multi-turn chat conversations.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace linfer::bench {

// One request: the prompt's token ids and the exact number of tokens to generate (ignore_eos).
struct RequestSpec {
  std::vector<int32_t> prompt;
  int output_len = 0;
};

struct RandomWorkloadOptions {
  int num_prompts = 100;
  int input_len = 128;  // random part of each prompt
  int output_len = 32;
  // Lengths are uniform in [L·(1 − r), L·(1 + r)] (at least 1), r in [0, 1).
  double range_ratio = 0;
  int prefix_len = 0;    // shared-prefix workload: this many prefix tokens before the random part
  int num_prefixes = 1;  // distinct prefixes; each request draws one of them
  int64_t vocab = 0;     // token ids are drawn from [0, vocab)
  uint64_t seed = 0;

  absl::Status Validate() const;
};

// The same options and seed always give the same requests.
absl::StatusOr<std::vector<RequestSpec>> RandomRequests(const RandomWorkloadOptions& options);

struct ConversationOptions {
  int conversations = 4;
  int turns = 8;
  int input_len = 64;      // tokens of each user turn
  int first_turn_len = 0;  // tokens of each conversation's first user turn (a pasted document,
                           // say); 0: input_len
  int output_len = 32;     // tokens of each reply
  double range_ratio = 0;
  int64_t vocab = 0;
  uint64_t seed = 0;

  absl::Status Validate() const;
};

// A chat: the user turns (the replies come from the server while the benchmark runs).
struct Conversation {
  std::vector<RequestSpec> turns;  // prompt = the new user turn only
};

absl::StatusOr<std::vector<Conversation>> Conversations(const ConversationOptions& options);

}  // namespace linfer::bench
