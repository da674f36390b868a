// The engine's sampling context on the CPU (exact): min_tokens keeps EOS and the stop tokens from
// being sampled, then lets them end the output, on one request whose penalties see its whole
// output; a fork fed only a prompt's last token, with the rest as penalty_context, samples as the
// whole prompt does under repetition_penalty.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/engine.h"
#include "tests/engine/engine_testing.h"

namespace linfer {
namespace {

using testing_util::Greedy;
using testing_util::Result;

TEST(EngineSamplingTest, MinTokensBansTheEndsUntilItThenTheyEnd) {
  auto engine = testing_util::MakeEngine();
  ASSERT_TRUE(engine != nullptr);
  const std::vector<int32_t> prompt = testing_util::Prompt(20, 3);
  GenerateRequest r = Greedy(prompt, 8);
  r.stop.ignore_eos = false;
  r.stop.eos_token_id = 5;
  r.stop.stop_token_ids = {9};
  r.sampling.logit_bias = {{5, 100.0f}, {9, 50.0f}};  // EOS forced, the stop id next
  Result first = testing_util::Run(*engine, r);
  EXPECT_EQ(first.tokens, std::vector<int32_t>{5});
  EXPECT_EQ(first.finish, Finish::kStop);

  r.stop.min_tokens = 3;
  Result later = testing_util::Run(*engine, r);
  ASSERT_EQ(later.tokens.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(later.tokens[i], 5) << i;
    EXPECT_NE(later.tokens[i], 9) << i;
  }
  EXPECT_EQ(later.tokens[3], 5);  // the bias is the request's again
  EXPECT_EQ(later.finish, Finish::kStop);

  r.stop.min_tokens = 8;  // as long as max_tokens: never an end
  Result none = testing_util::Run(*engine, r);
  EXPECT_EQ(none.tokens.size(), 8u);
  EXPECT_EQ(std::count(none.tokens.begin(), none.tokens.end(), 5), 0);
  EXPECT_EQ(none.finish, Finish::kLength);

  // Under ignore_eos too (vLLM bans its EOS within min_tokens whatever ignore_eos says), where it
  // then ends nothing.
  r.stop.ignore_eos = true;
  r.stop.min_tokens = 3;
  Result ignoring = testing_util::Run(*engine, r);
  ASSERT_EQ(ignoring.tokens.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ignoring.tokens[i] == 5, i >= 3) << i;

  r.stop.min_tokens = -1;
  EXPECT_EQ(engine->Submit(r, [](TokenEvent) {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EngineSamplingTest, MinTokensLeavesPenalizedGreedyOutputAsItWas) {
  auto engine = testing_util::MakeEngine();
  ASSERT_TRUE(engine != nullptr);
  GenerateRequest r = Greedy(testing_util::Prompt(30, 4), 12);
  r.sampling.repetition_penalty = 1.8f;
  r.sampling.frequency_penalty = 1.5f;
  r.sampling.presence_penalty = 0.5f;
  const Result plain = testing_util::Run(*engine, r);
  for (int min : {1, 6, 11}) {
    r.stop.min_tokens = min;
    EXPECT_EQ(testing_util::Run(*engine, r).tokens, plain.tokens) << "min_tokens " << min;
  }
}

TEST(EngineSamplingTest, PenaltyContextStandsForThePromptInTheState) {
  auto engine = testing_util::MakeEngine();
  ASSERT_TRUE(engine != nullptr);
  // A prompt that holds what greedy would pick next, so that the penalty on it matters.
  std::vector<int32_t> prompt = testing_util::Prompt(30, 5);
  const testing_util::Result picks = testing_util::Run(*engine, Greedy(prompt, 10));
  prompt.insert(prompt.end(), picks.tokens.begin(), picks.tokens.end());
  prompt.insert(prompt.end(), prompt.begin(), prompt.begin() + 30);
  GenerateRequest whole = Greedy(prompt, 10);
  whole.sampling.repetition_penalty = 2.0f;
  const Result want = testing_util::Run(*engine, whole);

  ASSERT_TRUE(engine->CreateSession("base", "").ok());
  GenerateRequest prefill = Greedy({prompt.begin(), prompt.end() - 1}, 1, "base");
  prefill.prefill_only = true;
  ASSERT_EQ(testing_util::Run(*engine, prefill).finish, Finish::kLength);
  ASSERT_TRUE(engine->ForkSession("base", "fork", "").ok());
  GenerateRequest last = whole;
  last.prompt = {prompt.back()};
  last.session_id = "fork";
  Result without = testing_util::Run(*engine, last);
  EXPECT_NE(without.tokens, want.tokens) << "the fork alone sees one prompt token";
  last.session_id = "base";
  last.penalty_context.assign(prompt.begin(), prompt.end() - 1);
  EXPECT_EQ(testing_util::Run(*engine, last).tokens, want.tokens);

  last.penalty_context = {-1};
  EXPECT_EQ(engine->Submit(last, [](TokenEvent) {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace linfer
