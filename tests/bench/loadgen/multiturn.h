// The multi-turn chat workload: N conversations × M turns, either on persistent sessions (each
// turn sends only the new user turn) or as full histories without sessions (each turn resends all
// previous turns and replies), with time to first token reported per turn.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tests/bench/loadgen/client.h"
#include "tests/bench/loadgen/metrics.h"
#include "tests/bench/loadgen/workload.h"

namespace linfer::bench {

struct MultiTurnOptions {
  bool with_sessions = true;
  int max_concurrency = 0;  // conversations in flight at once; 0: all of them
  double duration_s = 600;  // no turn starts after this; running ones are cancelled
  double temperature = 0;
  uint64_t seed = 0;
  bool progress = true;
  MetricsOptions metrics;
};

// Runs the conversations (turns of one conversation in order, conversations in parallel) and
// returns Summarize() over all turns plus "per_turn": [{turn, count, mean_prompt_tokens,
// mean_cached_tokens, mean_history_tokens, cached_share, mean/median/pNN ttft_ms, mean_e2el_ms},
// ...] and "sessions" (bool); without sessions also "follow_ups" (FollowUps over turns ≥ 2).
// Sessions are created before a conversation's first turn and deleted after its last.
absl::StatusOr<nlohmann::json> RunMultiTurn(BenchClient& client,
                                            const std::vector<Conversation>& conversations,
                                            const MultiTurnOptions& options);

// Follow-up turns of full-history conversations: results[i] resent history_tokens[i] tokens of
// previous prompts and replies (0: a first turn, left out). Returns {count, history_tokens,
// cached_tokens, cached_share (cached / history: the share of the resent history that the server
// served from its prefix cache; null without history), mean/median/pNN ttft_ms}, over the
// successful ones.
nlohmann::json FollowUps(const std::vector<RequestResult>& results,
                         const std::vector<int64_t>& history_tokens, const MetricsOptions& options);

}  // namespace linfer::bench
