// Conversation workers: one thread per conversation in flight, each running its turns in order.
#include "tests/bench/loadgen/multiturn.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/bench/loadgen/progress.h"

namespace linfer::bench {
namespace {

struct Turn {
  bool sent = false;
  int64_t history_tokens = 0;  // previous prompts and replies resent ahead of the new user turn
  RequestResult result;
};

// Runs conversation `c`, writing turns[c * M + t]. Stops at the first failed turn.
void RunConversation(BenchClient& client, const Conversation& conv, int c,
                     const MultiTurnOptions& o, const std::string& id_prefix, Clock::time_point t0,
                     Clock::time_point deadline, ProgressBar& bar, std::vector<Turn>& turns) {
  const int m = static_cast<int>(conv.turns.size());
  std::string session;
  if (o.with_sessions) {
    session = absl::StrCat(id_prefix, "-", c);
    if (absl::Status st = client.CreateSession(session); !st.ok()) {
      turns[c * m].sent = true;
      turns[c * m].result.error = absl::StrCat("Sessions.Create: ", st.ToString());
      return;
    }
  }
  std::vector<int32_t> history;  // every previous prompt and reply (full-history mode)
  for (int t = 0; t < m && Clock::now() < deadline; ++t) {
    RequestSpec spec = conv.turns[t];
    Turn& turn = turns[c * m + t];
    if (!o.with_sessions) {
      turn.history_tokens = static_cast<int64_t>(history.size());
      history.insert(history.end(), spec.prompt.begin(), spec.prompt.end());
      spec.prompt = history;
    }
    const v1::GenerateRequest request =
        MakeRequest(spec, o.temperature, o.seed + c * m + t, session);
    turn.sent = true;
    bar.Started();
    turn.result = client.Run(request, t0, deadline, /*keep_output_ids=*/!o.with_sessions);
    bar.Finished(turn.result.success);
    if (!turn.result.success) break;
    history.insert(history.end(), turn.result.output_ids.begin(), turn.result.output_ids.end());
    turn.result.output_ids.clear();
  }
  if (o.with_sessions) (void)client.DeleteSession(session);
}

nlohmann::json PerTurn(const std::vector<Turn>& turns, int n, int m, const MultiTurnOptions& o) {
  nlohmann::json rows = nlohmann::json::array();
  for (int t = 0; t < m; ++t) {
    std::vector<double> ttfts, e2els;
    double prompt = 0, cached = 0, history = 0;
    for (int c = 0; c < n; ++c) {
      const RequestResult& r = turns[c * m + t].result;
      if (!turns[c * m + t].sent || !r.success) continue;
      ttfts.push_back(r.ttft_s * 1000);
      e2els.push_back(r.latency_s * 1000);
      prompt += r.prompt_tokens;
      cached += r.cached_tokens;
      history += turns[c * m + t].history_tokens;
    }
    const double k = std::max<size_t>(1, ttfts.size());
    nlohmann::json row;
    row["turn"] = t + 1;
    row["count"] = ttfts.size();
    row["mean_prompt_tokens"] = prompt / k;
    row["mean_cached_tokens"] = cached / k;
    row["mean_history_tokens"] = history / k;
    row["cached_share"] = history > 0 ? nlohmann::json(cached / history) : nlohmann::json(nullptr);
    double sum = 0;
    for (double x : ttfts) sum += x;
    row["mean_ttft_ms"] = sum / k;
    row["median_ttft_ms"] = Percentile(ttfts, 50);
    for (double p : o.metrics.percentiles)
      row[PercentileKey(p) + "_ttft_ms"] = Percentile(ttfts, p);
    sum = 0;
    for (double x : e2els) sum += x;
    row["mean_e2el_ms"] = sum / k;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

nlohmann::json FollowUps(const std::vector<RequestResult>& results,
                         const std::vector<int64_t>& history_tokens, const MetricsOptions& o) {
  std::vector<double> ttfts;
  int64_t history = 0, cached = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const RequestResult& r = results[i];
    if (!r.success || history_tokens[i] == 0) continue;
    ttfts.push_back(r.ttft_s * 1000);
    history += history_tokens[i];
    cached += r.cached_tokens;
  }
  double sum = 0;
  for (double x : ttfts) sum += x;
  nlohmann::json j;
  j["count"] = ttfts.size();
  j["history_tokens"] = history;
  j["cached_tokens"] = cached;
  j["cached_share"] =
      history > 0 ? nlohmann::json(static_cast<double>(cached) / history) : nlohmann::json(nullptr);
  j["mean_ttft_ms"] = sum / std::max<size_t>(1, ttfts.size());
  j["median_ttft_ms"] = Percentile(ttfts, 50);
  for (double p : o.percentiles) j[PercentileKey(p) + "_ttft_ms"] = Percentile(ttfts, p);
  return j;
}

absl::StatusOr<nlohmann::json> RunMultiTurn(BenchClient& client,
                                            const std::vector<Conversation>& conversations,
                                            const MultiTurnOptions& o) {
  const int n = static_cast<int>(conversations.size());
  if (n == 0) return absl::InvalidArgumentError("no conversations");
  const int m = static_cast<int>(conversations[0].turns.size());
  std::vector<Turn> turns(static_cast<size_t>(n) * m);
  const int workers = o.max_concurrency > 0 ? std::min(n, o.max_concurrency) : n;
  const std::string id_prefix =
      absl::StrCat("linfer-bench-", getpid(), "-", std::random_device()() % 1000000);
  std::atomic<int> next{0};
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
  Clock::time_point end;
  {
    ProgressBar bar(o.with_sessions ? "multiturn/sessions" : "multiturn/history", n * m,
                    o.progress);
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&] {
        for (int c; (c = next.fetch_add(1)) < n;) {
          RunConversation(client, conversations[c], c, o, id_prefix, t0, deadline, bar, turns);
        }
      });
    }
    for (std::thread& th : threads) th.join();
    end = Clock::now();
  }
  std::vector<RequestResult> sent;
  std::vector<int64_t> history;
  for (const Turn& t : turns) {
    if (!t.sent) continue;
    sent.push_back(t.result);
    history.push_back(t.history_tokens);
  }
  nlohmann::json j = Summarize(sent, std::chrono::duration<double>(end - t0).count(), o.metrics);
  j["not_sent"] = static_cast<int>(turns.size() - sent.size());
  j["sessions"] = o.with_sessions;
  j["per_turn"] = PerTurn(turns, n, m, o);
  if (!o.with_sessions) j["follow_ups"] = FollowUps(sent, history, o.metrics);
  return j;
}

}  // namespace linfer::bench
