// StopChecker tests: stop strings across token boundaries (held back, released, never emitted),
// stop token ids, EOS, max_tokens, include_stop_str_in_output, and a randomised check against a
// whole-text reference.
#include "engine/stop.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace linfer {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kText = 100;  // an ordinary token id

StopParams Params(std::vector<std::string> stops, int max_tokens = 1000) {
  StopParams p;
  p.stop_strings = std::move(stops);
  p.max_tokens = max_tokens;
  p.eos_token_id = 2;
  p.stop_token_ids = {7};
  return p;
}

// Feeds `deltas` as ordinary tokens; returns what was emitted after each.
std::vector<std::string> Feed(StopChecker& c, const std::vector<std::string>& deltas) {
  std::vector<std::string> out;
  for (const std::string& d : deltas) out.push_back(c.Append(kText, d).text);
  return out;
}

TEST(ValidateStopParamsTest, RejectsEachFieldByName) {
  EXPECT_TRUE(ValidateStopParams(Params({"a", "</s>"}), 10).ok());
  StopParams p = Params({});
  p.max_tokens = 0;
  EXPECT_THAT(std::string(ValidateStopParams(p, 10).message()),
              HasSubstr("max_tokens must be >= 1, got 0"));
  p = Params({});
  p.stop_token_ids = {3, 10};
  EXPECT_THAT(std::string(ValidateStopParams(p, 10).message()),
              HasSubstr("stop_token_ids[1] must be in [0, 10), got 10"));
  EXPECT_THAT(std::string(ValidateStopParams(Params({"x", ""}), 10).message()),
              HasSubstr("stop_strings[1] must not be empty"));
  EXPECT_THAT(std::string(ValidateStopParams(Params({"ok\xC3"}), 10).message()),
              HasSubstr("stop_strings[0] must be valid UTF-8"));
  EXPECT_TRUE(ValidateStopParams(Params({"\xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80"}), 10).ok());
  p = Params({});
  p.eos_token_id = -1;
  const absl::Status s = ValidateStopParams(p, 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("eos_token_id"));
}

TEST(StopCheckerTest, StopStringSplitAcrossThreeTokens) {
  StopChecker c(Params({"<end>"}));
  EXPECT_EQ(c.Append(kText, "Hello <").text, "Hello ");
  EXPECT_EQ(c.Append(kText, "en").text, "");
  const StopOutput out = c.Append(kText, "d> never");
  EXPECT_EQ(out.text, "");
  EXPECT_EQ(out.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.stop_string, "<end>");
  EXPECT_FALSE(out.stop_token_id);
  EXPECT_EQ(c.num_tokens(), 3);
  // Finished: later calls emit nothing and repeat the reason.
  const StopOutput again = c.Append(kText, "more");
  EXPECT_EQ(again.text, "");
  EXPECT_EQ(again.finish_reason, FinishReason::kStop);
  EXPECT_EQ(again.stop_string, "<end>");
}

TEST(StopCheckerTest, DivergingPrefixIsReleased) {
  StopChecker c(Params({"<end>"}));
  EXPECT_EQ(Feed(c, {"a<e", "x", "<", "<en", "d", "!"}),
            (std::vector<std::string>{"a", "<ex", "", "<", "", "<end!"}));
  EXPECT_FALSE(c.finished());
  EXPECT_EQ(Feed(c, {"text <e"}), std::vector<std::string>{"text "});
  EXPECT_EQ(c.Flush(), "<e");
}

TEST(StopCheckerTest, OverlappingStopStrings) {
  StopChecker c(Params({"<|end|>", "<|eot|>"}));
  EXPECT_EQ(Feed(c, {"ok <|e", "o"}), (std::vector<std::string>{"ok ", ""}));
  StopOutput out = c.Append(kText, "t|> tail");
  EXPECT_EQ(out.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.stop_string, "<|eot|>");

  // The string completing first wins, whatever the list order; at equal ends, the earliest start.
  StopChecker first(Params({"abcd", "bc"}));
  out = first.Append(kText, "xabcd");
  EXPECT_EQ(out.text, "xa");
  EXPECT_EQ(out.stop_string, "bc");
  StopChecker longest(Params({"bc", "abc"}));
  out = longest.Append(kText, "xabc");
  EXPECT_EQ(out.text, "x");
  EXPECT_EQ(out.stop_string, "abc");
  // A held prefix of one string can complete another.
  StopChecker nested(Params({"aab", "ab"}));
  EXPECT_EQ(nested.Append(kText, "a").text, "");
  out = nested.Append(kText, "b");
  EXPECT_EQ(out.stop_string, "ab");
  EXPECT_EQ(out.text, "");
}

TEST(StopCheckerTest, StopTokenIdFlushesHeldTextButNotItsOwn) {
  StopChecker c(Params({"<end>"}));
  EXPECT_EQ(c.Append(kText, "hi <").text, "hi ");
  const StopOutput out = c.Append(7, "[seven]");
  EXPECT_EQ(out.text, "<");
  EXPECT_EQ(out.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.stop_token_id, 7);
  EXPECT_FALSE(out.stop_string);
}

TEST(StopCheckerTest, EosStopsUnlessIgnored) {
  StopChecker c(Params({}));
  EXPECT_EQ(c.Append(kText, "a").text, "a");
  StopOutput out = c.Append(2, "</s>");
  EXPECT_EQ(out.text, "");
  EXPECT_EQ(out.finish_reason, FinishReason::kStop);
  EXPECT_FALSE(out.stop_token_id);  // EOS: vLLM's stop_reason is None
  EXPECT_FALSE(out.stop_string);

  StopParams p = Params({});
  p.ignore_eos = true;
  StopChecker ignoring(p);
  out = ignoring.Append(2, "</s>");
  EXPECT_EQ(out.text, "</s>");
  EXPECT_FALSE(out.finished());
  EXPECT_EQ(ignoring.Append(7, "x").finish_reason, FinishReason::kStop);  // stop ids still apply

  p.eos_token_id.reset();
  p.ignore_eos = false;
  StopChecker no_eos(p);
  EXPECT_FALSE(no_eos.Append(2, "z").finished());
}

TEST(StopCheckerTest, MinTokensDefersEveryStopButMaxTokens) {
  StopParams p = Params({"<end>"}, 6);
  p.min_tokens = 3;
  StopChecker c(p);
  EXPECT_EQ(c.Append(2, "E").text, "E");  // EOS and a stop id end nothing within min_tokens
  EXPECT_EQ(c.Append(7, "S").text, "S");
  // A stop string inside min_tokens ends nothing; its text is held back and released as usual.
  EXPECT_EQ(c.Append(kText, "<end><e").text, "<end>");
  // One that began inside min_tokens and ends after it does, cut where it began.
  StopOutput out = c.Append(kText, "nd>tail");
  EXPECT_EQ(out.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.text, "");
  EXPECT_EQ(out.stop_string, "<end>");

  StopChecker ids(p);
  for (int i = 0; i < 3; ++i) ASSERT_FALSE(ids.Append(2, "x").finished());
  out = ids.Append(2, "x");  // token min_tokens + 1
  EXPECT_EQ(out.finish_reason, FinishReason::kStop);
  EXPECT_FALSE(out.stop_token_id);

  p.min_tokens = 10;  // beyond max_tokens: the output runs to max_tokens
  StopChecker all(p);
  for (int i = 0; i < 5; ++i) ASSERT_FALSE(all.Append(7, "<end>").finished());
  EXPECT_EQ(all.Append(2, "").finish_reason, FinishReason::kLength);

  p.min_tokens = -1;
  EXPECT_THAT(std::string(ValidateStopParams(p, 10).message()),
              HasSubstr("min_tokens must be >= 0, got -1"));
}

TEST(StopCheckerTest, MaxTokensFlushesHeldText) {
  StopChecker c(Params({"<end>"}, 2));
  EXPECT_EQ(c.Append(kText, "a<").text, "a");
  const StopOutput out = c.Append(kText, "e");
  EXPECT_EQ(out.text, "<e");
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  EXPECT_EQ(FinishReasonName(out.finish_reason), "length");
  EXPECT_EQ(c.Flush(), "");

  // A stop string or a stop token on the last allowed token is a stop, not a length finish.
  StopChecker last(Params({"<end>"}, 2));
  last.Append(kText, "a<");
  EXPECT_EQ(last.Append(kText, "end>").finish_reason, FinishReason::kStop);
  StopChecker last_id(Params({}, 1));
  EXPECT_EQ(last_id.Append(7, "").finish_reason, FinishReason::kStop);
}

TEST(StopCheckerTest, IncludeStopStrInOutput) {
  StopParams p = Params({"<end>"});
  p.include_stop_str_in_output = true;
  StopChecker c(p);
  EXPECT_EQ(c.Append(kText, "Hello <").text, "Hello <");  // nothing held back
  EXPECT_EQ(c.Append(kText, "en").text, "en");
  const StopOutput out = c.Append(kText, "d> never");
  EXPECT_EQ(out.text, "d>");
  EXPECT_EQ(out.stop_string, "<end>");

  StopChecker token(p);
  EXPECT_EQ(token.Append(7, "[seven]").text, "[seven]");
}

TEST(StopCheckerTest, FinishReasonNames) {
  EXPECT_EQ(FinishReasonName(FinishReason::kNone), "");
  EXPECT_EQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
}

// Whole-text reference: the stop happens where a stop string first completes (earliest start on
// equal ends); the emitted text is everything before it (or through it, with include).
std::string Reference(const std::string& text, const std::vector<std::string>& stops,
                      bool include) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t best = std::string::npos;
    for (const std::string& s : stops) {
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) {
        best = std::min(best, end - s.size());
      }
    }
    if (best != std::string::npos) return text.substr(0, include ? end : best);
  }
  return text;
}

TEST(StopCheckerTest, RandomSplitsMatchWholeTextReference) {
  std::mt19937 rng(17);
  const std::string alphabet = "ab<>c";
  const std::vector<std::string> stops = {"<ab>", "b<c", "cc<", "aaaa"};
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int len = std::uniform_int_distribution<int>(0, 40)(rng);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    const bool include = trial % 2;
    StopParams p = Params(stops);
    p.include_stop_str_in_output = include;
    StopChecker c(p);
    std::string emitted;
    bool stopped = false;
    for (size_t i = 0; i < text.size() && !stopped;) {
      const size_t n = std::min<size_t>(text.size() - i, rng() % 4);  // empty deltas too
      const StopOutput out = c.Append(kText, text.substr(i, n));
      emitted += out.text;
      stopped = out.finished();
      i += n;
    }
    if (!stopped) emitted += c.Flush();
    ASSERT_EQ(emitted, Reference(text, stops, include)) << text << " include=" << include;
  }
}

}  // namespace
}  // namespace linfer
