// Unit tests of the load generator's pure parts: arrivals, workloads, the metric arithmetic
// (compared with what numpy / vLLM compute for the same inputs), the multi-turn follow-up summary
// and the OpenAI client's SSE reading and request bodies.
#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "tests/bench/loadgen/arrivals.h"
#include "tests/bench/loadgen/compare.h"
#include "tests/bench/loadgen/metrics.h"
#include "tests/bench/loadgen/multiturn.h"
#include "tests/bench/loadgen/openai_client.h"
#include "tests/bench/loadgen/workload.h"

namespace linfer::bench {
namespace {

TEST(ArrivalsTest, InfiniteRateSendsAllAtZero) {
  absl::StatusOr<std::vector<double>> t = ArrivalTimes(5, {});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, std::vector<double>(5, 0.0));
}

TEST(ArrivalsTest, RescaledToEndAtNOverRateAndSeeded) {
  for (double burstiness : {0.5, 1.0, 4.0}) {
    ArrivalOptions o{.request_rate = 4, .burstiness = burstiness, .seed = 7};
    absl::StatusOr<std::vector<double>> t = ArrivalTimes(100, o);
    ASSERT_TRUE(t.ok());
    EXPECT_NEAR(t->back(), 25.0, 1e-9);
    for (size_t i = 1; i < t->size(); ++i) EXPECT_LE((*t)[i - 1], (*t)[i]);
    EXPECT_EQ(*t, *ArrivalTimes(100, o));
    o.seed = 8;
    EXPECT_NE(*t, *ArrivalTimes(100, o));
  }
}

TEST(ArrivalsTest, InfiniteBurstinessIsAConstantGap) {
  ArrivalOptions o{.request_rate = 2, .burstiness = std::numeric_limits<double>::infinity()};
  absl::StatusOr<std::vector<double>> t = ArrivalTimes(4, o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, (std::vector<double>{0.5, 1.0, 1.5, 2.0}));
}

TEST(ArrivalsTest, RejectsBadOptions) {
  EXPECT_FALSE(ArrivalTimes(3, {.request_rate = 0}).ok());
  EXPECT_FALSE(ArrivalTimes(3, {.request_rate = 1, .burstiness = 0}).ok());
}

TEST(WorkloadTest, LengthsWithinTheRangeAndSharedPrefix) {
  RandomWorkloadOptions o;
  o.num_prompts = 50;
  o.input_len = 20;
  o.output_len = 10;
  o.range_ratio = 0.5;
  o.prefix_len = 8;
  o.num_prefixes = 2;
  o.vocab = 96;
  absl::StatusOr<std::vector<RequestSpec>> r = RandomRequests(o);
  ASSERT_TRUE(r.ok());
  for (const RequestSpec& s : *r) {
    EXPECT_GE(s.prompt.size(), 8u + 10u);
    EXPECT_LE(s.prompt.size(), 8u + 30u);
    EXPECT_GE(s.output_len, 5);
    EXPECT_LE(s.output_len, 15);
    for (int32_t id : s.prompt) EXPECT_TRUE(id >= 0 && id < 96);
  }
  int same_as_first = 0;
  for (const RequestSpec& s : *r) {
    same_as_first += std::equal(s.prompt.begin(), s.prompt.begin() + 8, (*r)[0].prompt.begin());
  }
  EXPECT_GT(same_as_first, 5);
  EXPECT_LT(same_as_first, 50);
  o.vocab = 1;
  EXPECT_FALSE(RandomRequests(o).ok());
}

TEST(WorkloadTest, ConversationsAreExactWithoutRange) {
  ConversationOptions o{
      .conversations = 3, .turns = 4, .input_len = 7, .output_len = 5, .vocab = 50};
  absl::StatusOr<std::vector<Conversation>> c = Conversations(o);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->size(), 3u);
  for (const Conversation& conv : *c) {
    ASSERT_EQ(conv.turns.size(), 4u);
    for (const RequestSpec& t : conv.turns) {
      EXPECT_EQ(t.prompt.size(), 7u);
      EXPECT_EQ(t.output_len, 5);
    }
  }
}

TEST(WorkloadTest, FirstTurnLenMakesALongFirstTurnOnly) {
  ConversationOptions o{
      .conversations = 2, .turns = 3, .input_len = 7, .output_len = 5, .vocab = 50, .seed = 3};
  const std::vector<Conversation> plain = Conversations(o).value();
  o.first_turn_len = 7;  // the same as input_len: the same conversations (the same draws)
  const std::vector<Conversation> same = Conversations(o).value();
  for (size_t c = 0; c < plain.size(); ++c) {
    for (size_t t = 0; t < plain[c].turns.size(); ++t) {
      EXPECT_EQ(same[c].turns[t].prompt, plain[c].turns[t].prompt);
    }
  }
  o.first_turn_len = 300;
  absl::StatusOr<std::vector<Conversation>> c = Conversations(o);
  ASSERT_TRUE(c.ok());
  for (const Conversation& conv : *c) {
    ASSERT_EQ(conv.turns.size(), 3u);
    EXPECT_EQ(conv.turns[0].prompt.size(), 300u);
    EXPECT_EQ(conv.turns[1].prompt.size(), 7u);
    EXPECT_EQ(conv.turns[2].prompt.size(), 7u);
    for (const RequestSpec& t : conv.turns) EXPECT_EQ(t.output_len, 5);
  }
  EXPECT_NE((*c)[0].turns[0].prompt, (*c)[1].turns[0].prompt);
  o.range_ratio = 0.5;
  const std::vector<Conversation> ranged = Conversations(o).value();
  for (const Conversation& conv : ranged) {
    EXPECT_GE(conv.turns[0].prompt.size(), 150u);
    EXPECT_LE(conv.turns[0].prompt.size(), 450u);
  }
  o.first_turn_len = -1;
  const absl::Status st = Conversations(o).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--first_turn_len"), absl::string_view::npos) << st;
}

TEST(MultiTurnTest, FollowUpsShareOfResentHistoryFromTheCache) {
  auto turn = [](double ttft_s, int64_t cached, bool success) {
    RequestResult r;
    r.success = success;
    r.ttft_s = ttft_s;
    r.cached_tokens = cached;
    return r;
  };
  // A first turn (no history), two follow-ups, and a failed follow-up (left out).
  const std::vector<RequestResult> rs = {turn(5, 0, true), turn(0.1, 999, true),
                                         turn(0.3, 1000, true), turn(9, 0, false)};
  const nlohmann::json j = FollowUps(rs, {0, 1000, 3000, 4000}, MetricsOptions{});
  EXPECT_EQ(j["count"], 2);
  EXPECT_EQ(j["history_tokens"], 4000);
  EXPECT_EQ(j["cached_tokens"], 1999);
  EXPECT_DOUBLE_EQ(j["cached_share"].get<double>(), 1999.0 / 4000);
  EXPECT_NEAR(j["mean_ttft_ms"].get<double>(), 200, 1e-9);
  EXPECT_NEAR(j["median_ttft_ms"].get<double>(), 200, 1e-9);
  EXPECT_TRUE(j.contains("p99_ttft_ms"));
  EXPECT_TRUE(FollowUps({turn(1, 0, true)}, {0}, MetricsOptions{})["cached_share"].is_null());
}

TEST(MetricsTest, PercentileMatchesNumpy) {
  // numpy.percentile([1, 2, 3, 4, 10], [50, 90, 99]) == [3, 7.6, 9.76]
  const std::vector<double> v = {4, 1, 10, 3, 2};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 3);
  EXPECT_NEAR(Percentile(v, 90), 7.6, 1e-12);
  EXPECT_NEAR(Percentile(v, 99), 9.76, 1e-12);
  EXPECT_EQ(Percentile({}, 99), 0);
  EXPECT_EQ(PercentileKey(99), "p99");
  EXPECT_EQ(PercentileKey(99.9), "p99.9");
}

TEST(MetricsTest, ParsesGoodputAndPercentiles) {
  absl::StatusOr<Slo> slo = ParseGoodput("ttft:500 tpot:50,e2el:2000");
  ASSERT_TRUE(slo.ok());
  EXPECT_EQ(slo->ttft_ms, 500);
  EXPECT_EQ(slo->tpot_ms, 50);
  EXPECT_EQ(slo->e2el_ms, 2000);
  EXPECT_FALSE(ParseGoodput("").value().any());
  EXPECT_FALSE(ParseGoodput("itl:5").ok());
  EXPECT_FALSE(ParseGoodput("ttft").ok());
  EXPECT_EQ(ParsePercentiles("90, 99.9").value(), (std::vector<double>{90, 99.9}));
  EXPECT_FALSE(ParsePercentiles("0").ok());
}

RequestResult Done(double start, double ttft, double latency, int64_t out) {
  RequestResult r;
  r.success = true;
  r.start_s = start;
  r.ttft_s = ttft;
  r.latency_s = latency;
  r.prompt_tokens = r.usage_prompt_tokens = 10;
  r.output_tokens = r.received_tokens = r.requested_tokens = out;
  for (int64_t i = 1; i < out; ++i) r.itls_s.push_back((latency - ttft) / (out - 1));
  return r;
}

TEST(MetricsTest, SummarizeCountsThroughputTpotGoodputAndConcurrency) {
  std::vector<RequestResult> rs = {Done(0, 0.1, 1.1, 11), Done(0.5, 0.3, 2.3, 5),
                                   Done(3, 0.2, 0.2, 1)};
  RequestResult failed;
  failed.error = "UNAVAILABLE: x";
  rs.push_back(failed);
  RequestResult cut;  // in flight at the run's time cap: counted apart from failures
  cut.error = "DEADLINE_EXCEEDED: Deadline Exceeded";
  rs.push_back(cut);
  MetricsOptions o;
  o.slo.ttft_ms = 250;
  const nlohmann::json j = Summarize(rs, 4.0, o);
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["cut_at_time_cap"], 1);
  EXPECT_EQ(j["errors"].size(), 2u);
  EXPECT_EQ(j["total_input_tokens"], 30);
  EXPECT_EQ(j["total_output_tokens"], 17);
  EXPECT_EQ(j["length_mismatches"], 0);
  EXPECT_DOUBLE_EQ(j["request_throughput"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["output_throughput"].get<double>(), 17 / 4.0);
  EXPECT_DOUBLE_EQ(j["total_token_throughput"].get<double>(), 47 / 4.0);
  EXPECT_DOUBLE_EQ(j["request_goodput"].get<double>(), 2 / 4.0);            // ttft 0.1 and 0.2 s
  EXPECT_NEAR(j["mean_tpot_ms"].get<double>(), (100.0 + 500.0) / 2, 1e-9);  // out>1 only
  EXPECT_NEAR(j["mean_ttft_ms"].get<double>(), 200, 1e-9);
  EXPECT_EQ(j["max_concurrent_requests"], 2);
  EXPECT_FALSE(j.contains("itls"));
  EXPECT_TRUE(j.contains("p99_itl_ms"));
  EXPECT_TRUE(j.contains("p90_e2el_ms"));
  EXPECT_TRUE(Summarize(rs, 4.0, MetricsOptions{})["request_goodput"].is_null());
}

TEST(SseReaderTest, EventsCutAnywhereAndMultiLineData) {
  const std::string stream =
      ": comment\n\ndata: {\"a\":1}\n\nevent: x\r\ndata: one\r\ndata:two\r\n\r\n\n"
      "data: [DONE]\n\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseReader r;
    std::vector<std::string> got;
    auto fn = [&](absl::string_view d) { got.emplace_back(d); };
    r.Feed(absl::string_view(stream).substr(0, cut), fn);
    r.Feed(absl::string_view(stream).substr(cut), fn);
    // "\r\n\r\n" ends the third event only at the bare "\n\n" that follows it.
    ASSERT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "one\ntwo", "[DONE]"})) << cut;
  }
}

TEST(CompletionEventTest, TokensFinishUsageAndErrors) {
  CompletionEvent e =
      ParseCompletionEvent(R"({"choices":[{"index":0,"text":"ab","finish_reason":null}]})");
  EXPECT_TRUE(e.token && !e.finished && !e.has_usage && e.error.empty());
  e = ParseCompletionEvent(R"({"choices":[{"index":0,"text":"","finish_reason":null}]})");
  EXPECT_TRUE(e.token);  // one chunk per token, even one that decodes to no text yet
  e = ParseCompletionEvent(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})");
  EXPECT_TRUE(e.token && e.finished);  // the last token's chunk (EOS: no text), as vllm bench
  e = ParseCompletionEvent(R"({"choices":[{"text":"x","finish_reason":"stop"}]})");
  EXPECT_TRUE(e.token && e.finished);
  e = ParseCompletionEvent(R"({"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3,)"
                           R"("prompt_tokens_details":{"cached_tokens":2}}})");
  EXPECT_TRUE(e.has_usage && !e.token && e.prompt_tokens == 4 && e.completion_tokens == 3 &&
              e.cached_tokens == 2);
  EXPECT_TRUE(ParseCompletionEvent("[DONE]").done);
  EXPECT_EQ(ParseCompletionEvent(R"({"error":{"message":"boom"}})").error, "boom");
  EXPECT_FALSE(ParseCompletionEvent("{not json").error.empty());
}

TEST(CompletionBodyTest, SameRequestAsGrpc) {
  RequestSpec spec{.prompt = {5, 6, 7}, .output_len = 9};
  nlohmann::json j = CompletionBody(MakeRequest(spec, 0, 3, ""), "tiny");
  EXPECT_EQ(j["prompt"], nlohmann::json({5, 6, 7}));
  EXPECT_EQ(j["max_tokens"], 9);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_EQ(j["temperature"], 0.0);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_FALSE(j.contains("seed"));
  j = CompletionBody(MakeRequest(spec, 0.5, 3, "s1"), "");
  EXPECT_EQ(j["seed"], 3);
  EXPECT_EQ(j["session_id"], "s1");
  EXPECT_FALSE(j.contains("model"));
}

TEST(CompareRunsTest, PooledThroughputRatio) {
  auto run = [](double tokens, double seconds) {
    return nlohmann::json{{"total_output_tokens", tokens}, {"duration", seconds}};
  };
  nlohmann::json j = CompareRuns({run(900, 1), run(900, 2)}, {run(1000, 1), run(1000, 1)});
  EXPECT_DOUBLE_EQ(j["openai_output_throughput"].get<double>(), 600);
  EXPECT_DOUBLE_EQ(j["grpc_output_throughput"].get<double>(), 1000);
  EXPECT_DOUBLE_EQ(j["openai_grpc_output_throughput_ratio"].get<double>(), 0.6);
  EXPECT_EQ(j["openai"], run(900, 1));
  EXPECT_EQ(j["grpc_runs"].size(), 2u);
  EXPECT_EQ(j["backend"], "compare");
  EXPECT_EQ(CompareRuns({run(1, 1)}, {run(0, 1)})["openai_grpc_output_throughput_ratio"], 0.0);
}

}  // namespace
}  // namespace linfer::bench
