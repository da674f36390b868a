// A session turn that a stop string ends leaves the state holding the visible reply only: the
// next turn continues exactly as a one-off request on prompt + the visible reply's tokens + the
// next prompt would (the independent oracle: the reply's tokens worked out from Decode and Encode
// alone, not from the engine's stream bookkeeping). Also VisibleReplyTokens on hand-made traces.
#include "engine/session_reply.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "engine/detokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/engine/engine_testing.h"
#include "tests/testing/device_testing.h"

namespace linfer {
namespace {

using testing_util::Collector;
using testing_util::Result;

// A byte-level BPE (as Qwen's and Llama-3's) of 72 tokens: 8 characters (a–e, space, newline,
// '.') and every pair of them. Ids the model has beyond 72 decode to nothing.
std::unique_ptr<tokenizer::Tokenizer> PairTokenizer() {
  const std::vector<std::string> chars = {"a", "b", "c", "d", "e", "\xC4\xA0", "\xC4\x8A", "."};
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json merges = nlohmann::json::array();
  int id = 0;
  for (const std::string& c : chars) vocab[c] = id++;
  for (const std::string& a : chars) {
    for (const std::string& b : chars) {
      vocab[a + b] = id++;
      merges.push_back(a + " " + b);
    }
  }
  const nlohmann::json json = {
      {"version", "1.0"},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
      {"decoder", {{"type", "ByteLevel"}}}};
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> t =
      tokenizer::Tokenizer::FromJson(json.dump());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

GenerateRequest Sampled(std::vector<int32_t> prompt, int max_tokens, uint64_t seed) {
  GenerateRequest r = testing_util::Greedy(std::move(prompt), max_tokens);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = seed;
  r.sampling.logprobs.reset();
  return r;
}

struct Turn {
  Result result;
  TokenEvent final_event;
};

Turn RunTurn(Engine& engine, const GenerateRequest& r) {
  Collector c;
  absl::StatusOr<RequestId> id = engine.Submit(r, c.Sink());
  EXPECT_TRUE(id.ok()) << id.status();
  if (id.ok()) c.Wait();
  return {c.result(), c.Final()};
}

EngineOptions StopOptions(const tokenizer::Tokenizer* tok, int slots) {
  EngineOptions opts;
  opts.detokenizer = MakeDetokenizerFactory(tok);
  opts.encoder = MakeTextEncoder(tok);
  opts.batch_invariant = true;  // a session's state computed in steps = the one-off's prefill
  opts.max_slots = slots;
  opts.cuda_graphs = false;  // no padding slot: `slots` for the requests
  return opts;
}

// (fixture, device): CUDA with bf16 weights where the build and machine have it (skipped
// otherwise), fewer rounds there. Engines with the pair tokenizer's text (StopOptions).
class SessionReplyTest
    : public ::testing::TestWithParam<std::tuple<std::string, testing_util::DeviceCase>> {
 protected:
  void SetUp() override {
    if (testing_util::DeviceMissing(device_case())) GTEST_SKIP() << testing_util::kNoDevice;
    tok_ = PairTokenizer();
    ASSERT_NE(tok_, nullptr);
  }
  const std::string& fixture() const { return std::get<0>(GetParam()); }
  const testing_util::DeviceCase& device_case() const { return std::get<1>(GetParam()); }
  Device device() const { return device_case().device; }
  int Rounds(int cpu, int cuda) const { return device() == Device::kCpu ? cpu : cuda; }
  EngineOptions Options(int slots) const { return StopOptions(tok_.get(), slots); }
  std::unique_ptr<Engine> Start(const EngineOptions& opts) const {
    return testing_util::MakeEngineOn(testing_util::ServingLoadOptions(device()), opts, fixture());
  }

  std::unique_ptr<tokenizer::Tokenizer> tok_;
};

// What a stop-string turn leaves in the session, worked out from Decode and Encode alone: the most
// reply tokens whose decode is a prefix of the visible text, then the encoding of the rest.
struct VisibleReply {
  std::vector<int32_t> tokens;
  bool in_last = false;  // the stop string began in the reply's last token
  bool encoded = false;  // the visible part of a cut token was encoded
};

VisibleReply OracleReply(const tokenizer::Tokenizer& tok, const std::vector<int32_t>& g,
                         const std::string& visible) {
  VisibleReply out;
  size_t kept = 0;
  std::string head;
  for (size_t k = 1; k <= g.size(); ++k) {
    const std::string d = *tok.Decode(absl::MakeConstSpan(g).first(k), true);
    if (visible.rfind(d, 0) != 0) break;
    kept = k;
    head = d;
  }
  out.tokens.assign(g.begin(), g.begin() + static_cast<ptrdiff_t>(kept));
  const std::vector<int32_t> rest = *tok.Encode(visible.substr(head.size()));
  out.tokens.insert(out.tokens.end(), rest.begin(), rest.end());
  EXPECT_EQ(*tok.Decode(out.tokens, true), visible);
  // The text before the last token all visible: the stop string began in the last.
  const std::string before_last = *tok.Decode(absl::MakeConstSpan(g).first(g.size() - 1), true);
  out.in_last = visible.rfind(before_last, 0) == 0;
  out.encoded = !rest.empty();
  return out;
}

// The session stands at prompt + reply (the last token pending), and its next turn continues
// exactly as a one-off request on prompt + reply + the next prompt (on the CPU, batch-invariant;
// on CUDA the two take different kernels — token steps against one prefill, whose attention
// rounds to bf16 from 16 rows on — so greedy runs agree up to a near tie).
void ExpectContinues(Engine& engine, const std::string& session, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& reply, const TokenEvent& final_event,
                     int64_t vocab, int round) {
  ASSERT_TRUE(final_event.session_end.has_value());
  const int64_t want_position = static_cast<int64_t>(prompt.size() + reply.size());
  EXPECT_EQ(final_event.session_end->position, want_position);
  const absl::StatusOr<SessionInfo> info = engine.GetSession(session, "");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->position, want_position);
  std::vector<int32_t> next = testing_util::Prompt(3, 500 + round);
  for (int32_t& t : next) t %= static_cast<int32_t>(vocab);
  const Result continued = testing_util::Run(engine, testing_util::Greedy(next, 6, session));
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), reply.begin(), reply.end());
  all.insert(all.end(), next.begin(), next.end());
  const Result oneoff = testing_util::Run(engine, testing_util::Greedy(all, 6));
  SCOPED_TRACE(absl::StrCat("reply tokens ", reply.size()));
  if (engine.model().device() == Device::kCpu) {
    EXPECT_EQ(continued.tokens, oneoff.tokens);
  } else {
    testing_util::ExpectGreedyAgreesUntilNearTie(continued, oneoff, 2e-2);
  }
}

struct RoundCounts {
  int in_last = 0, earlier = 0, encoded = 0;
};

// Rounds of: a sampled reply with no stop string, then the same turn in a session with a stop
// string cut out of its text (`include`: include_stop_str_in_output, the text through the stop
// string visible), and the checks above.
RoundCounts RunStopRounds(Engine& engine, const tokenizer::Tokenizer& tok, int rounds,
                          bool include = false) {
  RoundCounts counts;
  const int64_t vocab = std::min<int64_t>(72, engine.model().vocab_size());
  std::mt19937 rng(7);
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    std::vector<int32_t> prompt = testing_util::Prompt(5, 100 + round);
    for (int32_t& t : prompt) t %= static_cast<int32_t>(vocab);
    const uint64_t seed = 1000 + round;
    const Result whole = testing_util::Run(engine, Sampled(prompt, 24, seed));
    if (whole.text.size() < 4) continue;
    const size_t at = 1 + rng() % (whole.text.size() - 2);
    const std::string stop =
        whole.text.substr(at, 1 + rng() % std::min<size_t>(3, whole.text.size() - at));
    const std::string session = absl::StrCat("s", round);
    EXPECT_TRUE(engine.CreateSession(session, "").ok());
    GenerateRequest r = Sampled(prompt, 24, seed);
    r.session_id = session;
    r.stop.stop_strings = {stop};
    r.stop.include_stop_str_in_output = include;
    const Turn turn = RunTurn(engine, r);
    EXPECT_EQ(turn.result.finish, Finish::kStop);
    const std::string visible =
        whole.text.substr(0, whole.text.find(stop) + (include ? stop.size() : 0));
    EXPECT_EQ(turn.result.text, visible);
    if (turn.result.finish != Finish::kStop || turn.result.text != visible) return counts;
    const VisibleReply reply = OracleReply(tok, turn.result.tokens, visible);
    ++(reply.in_last ? counts.in_last : counts.earlier);
    counts.encoded += reply.encoded ? 1 : 0;
    SCOPED_TRACE(absl::StrCat("stop '", stop, "', visible '", visible, "'"));
    ExpectContinues(engine, session, prompt, reply.tokens, turn.final_event, vocab, round);
    EXPECT_TRUE(engine.DeleteSession(session, "").ok());
  }
  return counts;
}

TEST_P(SessionReplyTest, AStopStringIsTakenBackOutOfTheSessionState) {
  // The prefix cache's device tier off: it would keep the one-off replies' states in the free slots
  // (and the copies would go to host RAM).
  EngineOptions opts = Options(4);
  opts.prefix_cache.device_tier = false;
  auto engine = Start(opts);
  ASSERT_NE(engine, nullptr);
  const RoundCounts counts = RunStopRounds(*engine, *tok_, Rounds(150, 30));
  // Both ways were taken: a stop string in the reply's last token (the state is kept) and one
  // that began in an earlier token (back to the reply's start, the visible tokens fed again).
  EXPECT_GT(counts.in_last, 0);
  EXPECT_GT(counts.earlier, 0);
  EXPECT_GT(counts.encoded, 0);
  // Every state copy was in a free slot (the earlier rounds went back from there).
  const EngineStats stats = engine->Stats();
  EXPECT_GT(stats.state_copies.slot, 0);
  EXPECT_EQ(stats.state_copies.host, 0);
  EXPECT_EQ(stats.state_copies.moved, 0);
  EXPECT_EQ(stats.slots_used, 0);
}

// include_stop_str_in_output: the stop string is in the answer, so it stays in the state, but no
// more (the rest of the token it ends in is taken out); nothing is held back, so no state copy.
TEST_P(SessionReplyTest, AnIncludedStopStringStaysAndWhatFollowsItGoes) {
  auto engine = Start(Options(4));
  ASSERT_NE(engine, nullptr);
  const RoundCounts counts = RunStopRounds(*engine, *tok_, Rounds(60, 16), /*include=*/true);
  EXPECT_GT(counts.encoded, 0) << "a stop string that ends inside a token";
  const EngineStats stats = engine->Stats();
  EXPECT_EQ(stats.state_copies.slot + stats.state_copies.host, 0);
}

// Every token's text is "ab" then the first byte of "é", held back by the detokenizer until the
// next token completes it (so never settled): "ab", "éab", "éab", … and the held byte at the end.
constexpr char kEAcute[] = "\xC3\xA9";  // "é"

class SplitCharText : public Detokenizer {
 public:
  std::string Push(int32_t) override {
    std::string out = held_ ? absl::StrCat(kEAcute, "ab") : "ab";
    held_ = true;
    return out;
  }
  std::string Flush() override { return std::exchange(held_, false) ? "\xC3" : ""; }
  bool Settled() const override { return !held_; }

 private:
  bool held_ = false;
};

// A stop string in the output ends the text (and a session's state) with it: the byte the
// detokenizer holds after it is not flushed out at the end, as it is at max_tokens.
TEST(StopStringInOutputTest, EndsTheTextWithTheStopString) {
  EngineOptions opts;
  opts.detokenizer = [](absl::Span<const int32_t>) { return std::make_unique<SplitCharText>(); };
  auto engine = testing_util::MakeEngine(opts);
  ASSERT_NE(engine, nullptr);
  GenerateRequest r = testing_util::Greedy(testing_util::Prompt(5, 1), 3);
  r.stop.stop_strings = {absl::StrCat(kEAcute, "a")};
  r.stop.include_stop_str_in_output = true;
  const Result stopped = testing_util::Run(*engine, r);
  EXPECT_EQ(stopped.finish, Finish::kStop);
  EXPECT_EQ(stopped.text, absl::StrCat("ab", kEAcute, "a"));
  r.stop.stop_strings = {"zz"};
  const Result whole = testing_util::Run(*engine, r);
  EXPECT_EQ(whole.finish, Finish::kLength);
  // The held byte flushed at the end.
  EXPECT_EQ(whole.text, absl::StrCat("ab", kEAcute, "ab", kEAcute, "ab\xC3"));
}

// One slot: the session's own. The state copies go to host RAM, and back from there.
TEST_P(SessionReplyTest, WithNoSlotFreeTheStateCopyIsInHostRam) {
  auto engine = Start(Options(1));
  ASSERT_NE(engine, nullptr);
  const RoundCounts counts = RunStopRounds(*engine, *tok_, Rounds(40, 16));
  EXPECT_GT(counts.earlier, 0);
  const EngineStats stats = engine->Stats();
  EXPECT_GT(stats.state_copies.host, 0);
  EXPECT_EQ(stats.state_copies.slot, 0);
}

// Forwards a turn's events to a Collector; at the first event after which some of the reply's
// text is held back (its tokens decode to more than came out) and the turn goes on, blocks the
// engine thread until Release(): the test acts while the engine holds the state copy.
class HoldGate {
 public:
  HoldGate(const tokenizer::Tokenizer* tok, Collector* collector)
      : tok_(tok), collector_(collector) {}
  EventSink Sink() {
    return [this, inner = collector_->Sink()](TokenEvent e) {
      const bool last = e.finish != Finish::kNone;
      if (e.token >= 0) tokens_.push_back(e.token);
      shown_ += e.text;
      inner(std::move(e));
      absl::MutexLock l(&mu_);
      if (last) {
        ended_ = true;
        return;
      }
      if (held_ || tok_->Decode(tokens_, true)->size() <= shown_.size()) return;
      held_ = true;
      mu_.Await(absl::Condition(&released_));
    };
  }
  // Whether the turn was held (false: it ended first).
  bool WaitHeld() {
    absl::MutexLock l(&mu_);
    auto news = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return held_ || ended_; };
    mu_.Await(absl::Condition(&news));
    return held_;
  }
  void Release() {
    absl::MutexLock l(&mu_);
    released_ = true;
  }

 private:
  const tokenizer::Tokenizer* tok_;
  Collector* collector_;
  std::vector<int32_t> tokens_;  // engine thread
  std::string shown_;            // engine thread
  absl::Mutex mu_;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

// Two slots: the session's and its state copy's. A one-off request arriving while the turn is
// paused (held text, the copy in the second slot) gets that slot — the copy moves to host RAM —
// and the turn, resumed, still takes its stop string back out of the state from there.
TEST_P(SessionReplyTest, AStateCopyInASlotMovesToHostRamWhenTheSlotIsNeeded) {
  EngineOptions opts = Options(2);
  opts.prefix_cache.budget_bytes = 0;  // no saved states in slots
  auto engine = Start(opts);
  ASSERT_NE(engine, nullptr);
  const int64_t vocab = std::min<int64_t>(72, engine->model().vocab_size());
  int held = 0;
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    std::vector<int32_t> prompt = testing_util::Prompt(5, 300 + round);
    for (int32_t& t : prompt) t %= static_cast<int32_t>(vocab);
    const uint64_t seed = 3000 + round;
    const Result whole = testing_util::Run(*engine, Sampled(prompt, 24, seed));
    if (whole.text.size() < 4) continue;
    // From the second character to the end: held back from the token it begins in on, the
    // visible reply its first character.
    const std::string stop = whole.text.substr(1);
    const std::string session = absl::StrCat("h", round);
    ASSERT_TRUE(engine->CreateSession(session, "").ok());
    GenerateRequest r = Sampled(prompt, 24, seed);
    r.session_id = session;
    r.stop.stop_strings = {stop};
    Collector turn, other;
    HoldGate gate(tok_.get(), &turn);
    absl::StatusOr<RequestId> id = engine->Submit(r, gate.Sink());
    ASSERT_TRUE(id.ok()) << id.status();
    bool other_in = false;
    // Whatever fails below: the engine thread is let go, and both requests end before the sinks
    // they write to go out of scope.
    absl::Cleanup settle = [&] {
      gate.Release();
      engine->SetPaused(*id, false);
      turn.Wait();
      if (other_in) other.Wait();
    };
    if (gate.WaitHeld()) {
      ++held;
      const EngineStats before = engine->Stats();
      EXPECT_EQ(before.slots_used, 2) << "the session's slot and its state copy's";
      engine->SetPaused(*id, true);
      absl::Notification other_done;
      absl::StatusOr<RequestId> other_id =
          engine->Submit(testing_util::Greedy(prompt, 4), [&, sink = other.Sink()](TokenEvent e) {
            const bool last = e.finish != Finish::kNone;
            sink(std::move(e));
            if (last) other_done.Notify();
          });
      other_in = other_id.ok();
      ASSERT_TRUE(other_in) << other_id.status();
      gate.Release();
      // It can only run on the copy's slot (no other is free while the turn is paused).
      ASSERT_TRUE(other_done.WaitForNotificationWithTimeout(absl::Seconds(60)))
          << "the one-off request got no slot while the turn was paused";
      EXPECT_EQ(other.result().finish, Finish::kLength);
      const EngineStats during = engine->Stats();
      EXPECT_EQ(during.state_copies.moved, before.state_copies.moved + 1);
      EXPECT_EQ(during.slots_used, 1);
      engine->SetPaused(*id, false);
    }
    std::move(settle).Invoke();
    const Result result = turn.result();
    ASSERT_EQ(result.finish, Finish::kStop);
    const std::string visible = whole.text.substr(0, whole.text.find(stop));
    ASSERT_EQ(result.text, visible);
    const VisibleReply reply = OracleReply(*tok_, result.tokens, visible);
    ExpectContinues(*engine, session, prompt, reply.tokens, turn.Final(), vocab, round);
    ASSERT_TRUE(engine->DeleteSession(session, "").ok());
  }
  EXPECT_GT(held, 0);
  EXPECT_EQ(engine->Stats().slots_used, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Devices, SessionReplyTest,
    ::testing::Combine(::testing::Values(std::string("gdn_default"),
                                         testing_util::FixtureSetDir(LINFER_HYBRID_FIXTURES) +
                                             "/qwen35_text_f32"),
                       ::testing::ValuesIn(testing_util::AllDeviceCases())),
    [](const ::testing::TestParamInfo<SessionReplyTest::ParamType>& info) {
      const std::string& f = std::get<0>(info.param);
      return (f.find("qwen35") != std::string::npos ? std::string("qwen35") : f) + "_" +
             std::get<1>(info.param).name;
    });

// Hand-made traces: "ab" "cd" "ef" with "cd"'s text held back by the detokenizer until "ef".
TEST(VisibleReplyTokensTest, KeepsWholeTokensAndEncodesTheCutOne) {
  ReplyTrace t;
  t.text = "abcdef";
  t.ends = {2, 2, 6};
  t.settled = {true, false, true};
  const std::vector<int32_t> g = {1, 2, 3};
  int encoded = 0;
  const TextEncoder encode = [&](absl::string_view text) -> absl::StatusOr<std::vector<int32_t>> {
    ++encoded;
    return std::vector<int32_t>(text.size(), 9);
  };
  auto agree = [](size_t, absl::Span<const int32_t>, absl::string_view) { return true; };
  auto refuse = [](size_t, absl::Span<const int32_t>, absl::string_view) { return false; };
  t.shown = 2;  // "ab": token 1 whole, token 2 held nothing out yet
  EXPECT_EQ(VisibleReplyTokens(g, t, encode, agree), (std::vector<int32_t>{1}));
  t.shown = 3;  // "abc": token 2 (held) is not whole within it
  EXPECT_EQ(VisibleReplyTokens(g, t, encode, agree), (std::vector<int32_t>{1, 9}));
  t.shown = 6;
  EXPECT_EQ(VisibleReplyTokens(g, t, encode, agree), (std::vector<int32_t>{1, 2, 3}));
  t.shown = 0;
  EXPECT_EQ(VisibleReplyTokens(g, t, encode, agree), (std::vector<int32_t>{}));
  EXPECT_EQ(encoded, 1);
  // An encoding that does not decode to the rest: the fewest tokens covering the visible text.
  t.shown = 3;
  EXPECT_EQ(VisibleReplyTokens(g, t, encode, refuse), (std::vector<int32_t>{1, 2, 3}));
  t.settled = {true, true, true};
  t.ends = {2, 4, 6};
  EXPECT_EQ(VisibleReplyTokens(g, t, encode, refuse), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(VisibleReplyTokens(g, t, nullptr, agree), (std::vector<int32_t>{1, 2}));
}

}  // namespace
}  // namespace linfer
