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
// mean_cached_tokens, mean/median/pNN ttft_ms, mean_e2el_ms}, ...] and "sessions" (bool).
// Sessions are created before a conversation's first turn and deleted after its last.
absl::StatusOr<nlohmann::json> RunMultiTurn(BenchClient& client,
                                            const std::vector<Conversation>& conversations,
                                            const MultiTurnOptions& options);

}  // namespace linfer::bench
