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
#include <vector>

#include "absl/strings/str_cat.h"
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

// (fixture, device): CUDA with bf16 weights where the build and machine have it (skipped
// otherwise), fewer rounds there.
class SessionReplyTest
    : public ::testing::TestWithParam<std::tuple<std::string, testing_util::DeviceCase>> {
 protected:
  void SetUp() override {
    if (testing_util::DeviceMissing(device_case())) GTEST_SKIP() << testing_util::kNoDevice;
  }
  const std::string& fixture() const { return std::get<0>(GetParam()); }
  const testing_util::DeviceCase& device_case() const { return std::get<1>(GetParam()); }
};

TEST_P(SessionReplyTest, AStopStringIsTakenBackOutOfTheSessionState) {
  std::unique_ptr<tokenizer::Tokenizer> tok = PairTokenizer();
  ASSERT_NE(tok, nullptr);
  EngineOptions opts;
  opts.detokenizer = MakeDetokenizerFactory(tok.get());
  opts.encoder = MakeTextEncoder(tok.get());
  opts.batch_invariant = true;  // a session's state computed in steps = the one-off's prefill
  opts.max_slots = 4;
  const Device device = device_case().device;
  auto engine =
      testing_util::MakeEngineOn(testing_util::ServingLoadOptions(device), opts, fixture());
  ASSERT_NE(engine, nullptr);
  const int64_t vocab = std::min<int64_t>(72, engine->model().vocab_size());
  std::mt19937 rng(7);
  int in_last = 0, earlier = 0, cut_tokens = 0;
  const int rounds = device == Device::kCpu ? 150 : 30;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    std::vector<int32_t> prompt = testing_util::Prompt(5, 100 + round);
    for (int32_t& t : prompt) t %= static_cast<int32_t>(vocab);
    const uint64_t seed = 1000 + round;
    // The reply with no stop string, then a stop string cut out of its text.
    const Result whole = testing_util::Run(*engine, Sampled(prompt, 24, seed));
    if (whole.text.size() < 4) continue;
    const size_t at = 1 + rng() % (whole.text.size() - 2);
    const std::string stop =
        whole.text.substr(at, 1 + rng() % std::min<size_t>(3, whole.text.size() - at));
    const std::string session = absl::StrCat("s", round);
    ASSERT_TRUE(engine->CreateSession(session, "").ok());
    GenerateRequest r = Sampled(prompt, 24, seed);
    r.session_id = session;
    r.stop.stop_strings = {stop};
    const Turn turn = RunTurn(*engine, r);
    ASSERT_EQ(turn.result.finish, Finish::kStop);
    const std::string visible = whole.text.substr(0, whole.text.find(stop));
    ASSERT_EQ(turn.result.text, visible);
    // The oracle: the most reply tokens whose decode is a prefix of the visible text, then the
    // encoding of the rest.
    const std::vector<int32_t>& g = turn.result.tokens;
    size_t kept = 0;
    std::string head;
    for (size_t k = 1; k <= g.size(); ++k) {
      const std::string d = *tok->Decode(absl::MakeConstSpan(g).first(k), true);
      if (visible.rfind(d, 0) != 0) break;
      kept = k;
      head = d;
    }
    std::vector<int32_t> reply(g.begin(), g.begin() + static_cast<ptrdiff_t>(kept));
    const std::vector<int32_t> rest = *tok->Encode(visible.substr(head.size()));
    reply.insert(reply.end(), rest.begin(), rest.end());
    ASSERT_EQ(*tok->Decode(reply, true), visible);
    // The stop string began in the reply's last token when the text before it is all visible.
    const std::string before_last = *tok->Decode(absl::MakeConstSpan(g).first(g.size() - 1), true);
    ++(visible.rfind(before_last, 0) == 0 ? in_last : earlier);
    cut_tokens += rest.empty() ? 0 : 1;
    // Where the session stands: prompt + reply, the last token pending.
    ASSERT_TRUE(turn.final_event.session_end.has_value());
    const int64_t want_position = static_cast<int64_t>(prompt.size() + reply.size());
    EXPECT_EQ(turn.final_event.session_end->position, want_position);
    const absl::StatusOr<SessionInfo> info = engine->GetSession(session, "");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->position, want_position);
    // The next turn continues the visible conversation.
    std::vector<int32_t> next = testing_util::Prompt(3, 500 + round);
    for (int32_t& t : next) t %= static_cast<int32_t>(vocab);
    const Result continued = testing_util::Run(*engine, testing_util::Greedy(next, 6, session));
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), reply.begin(), reply.end());
    all.insert(all.end(), next.begin(), next.end());
    const Result oneoff = testing_util::Run(*engine, testing_util::Greedy(all, 6));
    EXPECT_EQ(continued.tokens, oneoff.tokens)
        << "stop '" << stop << "', visible '" << visible << "', reply tokens " << reply.size();
    ASSERT_TRUE(engine->DeleteSession(session, "").ok());
  }
  // Both ways were taken: a stop string in the reply's last token (the state is kept) and one
  // that began in an earlier token (back to the reply's start, the visible tokens fed again).
  EXPECT_GT(in_last, 0);
  EXPECT_GT(earlier, 0);
  EXPECT_GT(cut_tokens, 0);
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
