// The engine against hostile or unlucky inputs (issue: hardening): forged state blobs, the end of
// a stream's text, prompts cut short on a session, unpredictable per-owner session ids, quotas
// and fair eviction, sessions that survive a restart of the engine.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "engine/detokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/engine/engine_testing.h"
#include "zlib.h"

namespace linfer {
namespace {

GenerateRequest Greedy(std::vector<int32_t> prompt, int max_tokens, std::string session = "") {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  r.session_id = std::move(session);
  return r;
}

// Rewrites a v2 blob's JSON header with `edit` and recomputes the CRC (what an attacker can do).
std::string Forge(const std::string& blob, const std::function<void(nlohmann::json&)>& edit) {
  uint32_t header_bytes;
  std::memcpy(&header_bytes, blob.data() + 12, 4);
  nlohmann::json j = nlohmann::json::parse(blob.substr(16, header_bytes));
  edit(j);
  const size_t payload = (16 + header_bytes + 7) / 8 * 8;
  const std::string state = blob.substr(payload, blob.size() - payload - 4);
  std::string h = j.dump();
  std::string out = blob.substr(0, 12);
  const uint32_t n = static_cast<uint32_t>(h.size());
  out.append(reinterpret_cast<const char*>(&n), 4);
  out += h;
  out.append((8 - out.size() % 8) % 8, '\0');
  out += state;
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(out.size())));
  out.append(reinterpret_cast<const char*>(&crc), 4);
  return out;
}
TEST(EngineHardeningTest, ForgedBlobsAreRefusedAndNobodyElseIsHurt) {
  auto engine = testing_util::MakeEngine();
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  testing_util::Run(*engine, Greedy(testing_util::Prompt(10, 1), 3, "s"));
  const std::string blob = *engine->ExportSession("s", "");
  // Eight victims stream while the attacker imports forged blobs.
  std::vector<std::unique_ptr<testing_util::Collector>> victims;
  for (int i = 0; i < 8; ++i) {
    victims.push_back(std::make_unique<testing_util::Collector>());
    ASSERT_TRUE(
        engine->Submit(Greedy(testing_util::Prompt(20, i), 200), victims.back()->Sink()).ok());
  }
  struct Attack {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
  };
  for (const Attack& a : std::vector<Attack>{
           {"pending", [](nlohmann::json& j) { j["pending"] = 96 + 5; }},
           {"position", [](nlohmann::json& j) { j["position"] = INT64_MAX; }},
           {"position", [](nlohmann::json& j) { j["position"] = -3; }},
           {"section", [](nlohmann::json& j) { j["sections"][0]["bytes"] = 4; }},
           {"section", [](nlohmann::json& j) { j["sections"] = "x"; }},
           {"fingerprint", [](nlohmann::json& j) { j["model_fingerprint"] = 7; }},
           {"text_tail",
            [](nlohmann::json& j) {
              j["text_tail"] = {1, 96};
            }},
           {"text_tail", [](nlohmann::json& j) { j["text_tail"] = std::vector<int>(65, 1); }},
           {"text_tail", [](nlohmann::json& j) { j["text_tail"] = "x"; }},
       }) {
    absl::StatusOr<std::string> id = engine->ImportSession("", "", Forge(blob, a.edit));
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << a.what;
    EXPECT_NE(id.status().message().find(a.what), std::string::npos) << id.status();
  }
  // NaN in the state values.
  std::string nan_blob = blob;
  const float nan = std::nanf("");
  std::memcpy(nan_blob.data() + nan_blob.size() - 4 - 64, &nan, 4);
  const uint32_t crc = static_cast<uint32_t>(crc32(
      0L, reinterpret_cast<const Bytef*>(nan_blob.data()), static_cast<uInt>(nan_blob.size() - 4)));
  std::memcpy(nan_blob.data() + nan_blob.size() - 4, &crc, 4);
  absl::Status st = engine->ImportSession("", "", nan_blob).status();
  EXPECT_NE(st.message().find("NaN"), std::string::npos) << st;
  for (auto& v : victims) {
    v->Wait();
    EXPECT_EQ(v->result().finish, Finish::kLength);
    EXPECT_EQ(v->result().tokens.size(), 200u);
  }
}

TEST(EngineHardeningTest, SessionIdsAreRandomAndScopedByOwner) {
  auto engine = testing_util::MakeEngine();
  std::set<std::string> ids;
  for (int i = 0; i < 50; ++i) {
    absl::StatusOr<std::string> id = engine->CreateSession("", "alice");
    ASSERT_TRUE(id.ok()) << id.status();
    ASSERT_EQ(id->size(), 2u + 32u) << *id;  // "s-" + 128 bits in hex
    EXPECT_EQ(id->substr(0, 2), "s-");
    ids.insert(*id);
  }
  EXPECT_EQ(ids.size(), 50u);
  // Another owner neither sees alice's ids nor collides with them.
  const std::string taken = *ids.begin();
  EXPECT_EQ(engine->GetSession(taken, "bob").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(engine->CreateSession(taken, "bob").ok());
  EXPECT_EQ(engine->CreateSession(taken, "alice").status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(engine->ListSessions("bob")->size(), 1u);
}

TEST(EngineHardeningTest, QuotasAndFairEvictionProtectOtherOwners) {
  EngineOptions opts;
  opts.max_slots = 2;
  opts.tiers.host_bytes = 8 * 12288;  // eight idle states in RAM, no disk tier
  opts.tiers.max_sessions_per_owner = 6;
  auto engine = testing_util::MakeEngine(opts);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(engine->CreateSession(absl::StrCat("v", i), "victim").ok());
  for (int i = 0; i < 3; ++i) {
    GenerateRequest r = Greedy({1, 2}, 1, absl::StrCat("v", i));
    r.owner = "victim";
    testing_util::Run(*engine, r);
  }
  absl::StatusOr<std::string> blob = engine->ExportSession("v0", "victim");
  ASSERT_TRUE(blob.ok());
  int imported = 0;
  absl::Status last;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<std::string> id = engine->ImportSession("", "attacker", *blob);
    if (id.ok()) {
      ++imported;
    } else {
      last = id.status();
    }
  }
  EXPECT_EQ(imported, 6);
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  // The attacker filled the host tier; eviction took its own sessions, not the victim's.
  EXPECT_EQ(engine->ListSessions("victim")->size(), 3u);
}

// An evicted session's client is told so, not just "not found" (the store remembers the last
// kMaxGone evictions); with a disk tier that cannot be written, that is the reason given.
TEST(EngineHardeningTest, AnEvictedSessionSaysWhy) {
  for (const bool unwritable_disk : {false, true}) {
    EngineOptions opts;
    opts.max_slots = 1;
    opts.tiers.host_bytes = 12288;  // one idle state of the default fixture
    const std::string dir = testing_util::FreshDir("linfer_evicted");
    if (unwritable_disk) opts.tiers.disk_dir = dir;
    auto engine = testing_util::MakeEngine(opts);
    ASSERT_NE(engine, nullptr);
    if (unwritable_disk) std::filesystem::remove_all(dir);
    for (const char* id : {"a", "b", "c"}) {  // each takes the slot; a, then b, go to RAM
      ASSERT_TRUE(engine->CreateSession(id, "").ok());
      testing_util::Run(*engine, Greedy({1, 2, 3}, 2, id));
    }
    const absl::Status gone = engine->GetSession("a", "").status();
    EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound) << gone;
    EXPECT_EQ(gone.message(),
              unwritable_disk
                  ? "session 'a' not found: it was evicted: its state could not be written to the "
                    "session disk tier (the server's log says why)"
                  : "session 'a' not found: it was evicted: the server's host memory for sessions "
                    "was full");
    EXPECT_TRUE(engine->GetSession("b", "").ok());
  }
}

// The server's own sessions (CreateInternalSession: the OpenAI n > 1 choices) and their forks
// hold states without counting against the owner's session and byte quotas, and its list does
// not show them: a key at its limit still gets n > 1 replies, a key with none held is not told
// it holds some.
TEST(EngineHardeningTest, TheServersOwnSessionsAreOutsideTheQuotasAndTheList) {
  EngineOptions opts;
  opts.tiers.max_sessions_per_owner = 2;
  opts.tiers.max_bytes_per_owner = 2 * 12288;  // two states of the default fixture
  auto engine = testing_util::MakeEngine(opts);
  std::vector<std::string> internal;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::string> id = engine->CreateInternalSession("alice");
    ASSERT_TRUE(id.ok()) << id.status();
    GenerateRequest r = Greedy({1, 2, 3}, 2, *id);
    r.owner = "alice";
    ASSERT_EQ(testing_util::Run(*engine, r).finish, Finish::kLength);
    internal.push_back(*id);
  }
  absl::StatusOr<std::string> fork = engine->ForkInternalSession(internal[0], "alice");
  ASSERT_TRUE(fork.ok()) << fork.status();
  internal.push_back(*fork);
  EXPECT_TRUE(engine->ListSessions("alice")->empty());
  EXPECT_TRUE(engine->GetSession(*fork, "alice").ok());  // by its id, to its owner
  ASSERT_TRUE(engine->CreateSession("a", "alice").ok());
  ASSERT_TRUE(engine->CreateSession("b", "alice").ok());
  const absl::Status third = engine->CreateSession("c", "alice").status();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted) << third;
  EXPECT_NE(third.message().find("already holds 2 sessions"), std::string::npos) << third;
  EXPECT_TRUE(engine->SessionForTurn("a", "alice").ok());
  ASSERT_EQ(engine->ListSessions("alice")->size(), 2u);
  // A client's fork of one is the client's: held to its quota.
  const absl::Status client_fork = engine->ForkSession(internal[1], "f", "alice").status();
  EXPECT_EQ(client_fork.code(), absl::StatusCode::kResourceExhausted) << client_fork;
  // Deleting them gives the client nothing back, and takes nothing of its own.
  for (const std::string& id : internal) ASSERT_TRUE(engine->DeleteSession(id, "alice").ok());
  EXPECT_EQ(engine->CreateSession("c", "alice").status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(engine->DeleteSession("a", "alice").ok());
  EXPECT_TRUE(engine->CreateSession("c", "alice").ok());
  // (And below the quota, listed.)
  absl::StatusOr<std::string> base = engine->CreateInternalSession("alice");
  ASSERT_TRUE(base.ok() && engine->DeleteSession("b", "alice").ok());
  ASSERT_TRUE(engine->ForkSession(*base, "f", "alice").ok());
  EXPECT_EQ(engine->ListSessions("alice")->size(), 2u);
}

TEST(EngineHardeningTest, ImportIntoATierTooSmallForOneStateIsAnError) {
  EngineOptions opts;
  opts.tiers.host_bytes = 100;  // smaller than one state, and no disk tier
  auto engine = testing_util::MakeEngine(opts);
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  testing_util::Run(*engine, Greedy({1, 2, 3}, 2, "s"));
  absl::StatusOr<std::string> blob = engine->ExportSession("s", "");
  ASSERT_TRUE(blob.ok());
  absl::StatusOr<std::string> id = engine->ImportSession("t", "", *blob);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted) << id.status();
  EXPECT_EQ(engine->GetSession("t", "").status().code(), absl::StatusCode::kNotFound);
}

TEST(EngineHardeningTest, APromptCutShortLeavesTheSessionAsItWas) {
  EngineOptions opts;
  opts.scheduler.max_step_tokens = 8;  // a long prompt takes many steps
  auto engine = testing_util::MakeEngine(opts);
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  testing_util::Run(*engine, Greedy(testing_util::Prompt(12, 3), 2, "s"));
  const SessionInfo before = *engine->GetSession("s", "");
  ASSERT_TRUE(engine->ForkSession("s", "twin", "").ok());
  // A 20,000-token prompt with a deadline it cannot meet.
  GenerateRequest cut = Greedy(testing_util::Prompt(20000, 4), 5, "s");
  cut.deadline = absl::Now() + absl::Milliseconds(150);
  testing_util::Result r = testing_util::Run(*engine, cut);
  EXPECT_EQ(r.finish, Finish::kDeadline);
  const SessionInfo after = *engine->GetSession("s", "");
  EXPECT_EQ(after.position, before.position);
  EXPECT_EQ(after.turns, before.turns);
  // And it continues exactly like its untouched twin.
  testing_util::Result a = testing_util::Run(*engine, Greedy({5, 6, 7}, 6, "s"));
  testing_util::Result b = testing_util::Run(*engine, Greedy({5, 6, 7}, 6, "twin"));
  EXPECT_EQ(a.tokens, b.tokens);
}

// A request refused before it computed anything (an empty prompt on a session with nothing
// pending) is no turn: the session is as it was (it counted one per refusal).
TEST(EngineHardeningTest, ARefusedEmptyPromptIsNoTurn) {
  auto engine = testing_util::MakeEngine();
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  for (int i = 0; i < 3; ++i) {
    testing_util::Collector c;
    ASSERT_TRUE(engine->Submit(Greedy({}, 2, "s"), c.Sink()).ok());
    c.Wait();
    EXPECT_EQ(c.result().finish, Finish::kError);
    EXPECT_NE(c.Final().error.message().find("prompt is empty"), std::string::npos)
        << c.Final().error;
  }
  EXPECT_EQ(engine->GetSession("s", "")->turns, 0);
  EXPECT_EQ(engine->GetSession("s", "")->position, 0);
  testing_util::Run(*engine, Greedy({1, 2}, 2, "s"));
  EXPECT_EQ(engine->GetSession("s", "")->turns, 1);
}

// The context-length error counts a session's pending token as the session's (as Sessions.Get's
// tokens do), not as the prompt's.
TEST(EngineHardeningTest, TheContextLengthErrorCountsThePendingTokenAsTheSessions) {
  EngineOptions opts;
  opts.max_model_len = 64;
  auto engine = testing_util::MakeEngine(opts);
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  testing_util::Run(*engine, Greedy(testing_util::Prompt(10, 1), 5, "s"));  // 14 fed + 1 pending
  testing_util::Collector c;
  ASSERT_TRUE(engine->Submit(Greedy({1}, 60, "s"), c.Sink()).ok());
  c.Wait();
  EXPECT_NE(c.Final().error.message().find(
                "76 tokens (15 held by the session, 1 in the prompt, 60 for max_tokens)"),
            std::string::npos)
      << c.Final().error;
}

// A fork's bad new id is named as the request names it.
TEST(EngineHardeningTest, AForksBadNewIdIsNamedAsSuch) {
  auto engine = testing_util::MakeEngine();
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  const absl::Status st = engine->ForkSession("s", "a/b", "").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(st.message().rfind("new_session_id may only contain", 0), 0u) << st;
  EXPECT_EQ(engine->ForkSession("s", std::string(129, 'x'), "")
                .status()
                .message()
                .rfind("new_session_id must have 1 to 128 characters", 0),
            0u);
}

// An engine with the prefix cache on, the state of a 64-token prompt (*prefix) saved in it, and an
// empty session "fresh".
std::unique_ptr<Engine> EngineWithCachedPrefix(EngineOptions opts, std::vector<int32_t>* prefix) {
  opts.prefix_cache = MakePrefixCacheOptions(int64_t{64} << 20, 1024);
  auto engine = testing_util::MakeEngine(opts);
  if (engine == nullptr) return nullptr;
  *prefix = testing_util::Prompt(64, 5);
  testing_util::Run(*engine, Greedy(*prefix, 1));  // saves the prefix's state
  if (!engine->CreateSession("fresh", "").ok()) return nullptr;
  return engine;
}

// A new session's first prompt that resumes from a prefix-cache hit and is cut short keeps the
// session empty: the long-prompt checkpoint must not replace the empty state the hit's checkpoint
// holds (it held the cached prefix, which the client never sent on this session).
TEST(EngineHardeningTest, AFirstPromptFromThePrefixCacheCutShortLeavesTheSessionEmpty) {
  EngineOptions opts;
  opts.scheduler.max_step_tokens = 8;  // the 20,064-token prompt takes about 2,500 steps
  std::vector<int32_t> prefix;
  auto engine = EngineWithCachedPrefix(opts, &prefix);
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->CreateSession("twin", "").ok());
  std::vector<int32_t> prompt = prefix;
  const std::vector<int32_t> more = testing_util::Prompt(20000, 6);
  prompt.insert(prompt.end(), more.begin(), more.end());
  GenerateRequest cut = Greedy(prompt, 5, "fresh");
  cut.deadline = absl::Now() + absl::Milliseconds(150);
  const testing_util::Result r = testing_util::Run(*engine, cut);
  ASSERT_EQ(r.finish, Finish::kDeadline);
  EXPECT_GE(engine->Stats().prefix_cache.hits, 1);  // the case at hand: resumed from the cache
  const SessionInfo after = *engine->GetSession("fresh", "");
  EXPECT_EQ(after.position, 0);
  EXPECT_EQ(after.turns, 0);
  testing_util::Result a = testing_util::Run(*engine, Greedy({7, 8, 9}, 6, "fresh"));
  testing_util::Result b = testing_util::Run(*engine, Greedy({7, 8, 9}, 6, "twin"));
  EXPECT_EQ(a.tokens, b.tokens);
}

// The same first prompt cut short while it still waits (the one running place taken): the session
// keeps no turn either (the hit had counted its tokens as computed, so the request ended as a
// finished turn).
TEST(EngineHardeningTest, AFirstPromptFromThePrefixCacheCutShortWhileWaitingCountsNoTurn) {
  EngineOptions opts;
  opts.scheduler.max_running = 1;
  std::vector<int32_t> prefix;
  auto engine = EngineWithCachedPrefix(opts, &prefix);
  ASSERT_NE(engine, nullptr);
  testing_util::Collector hog;  // holds the one running place well past the other's deadline
  GenerateRequest busy = Greedy(testing_util::Prompt(20000, 1), 1);
  busy.deadline = absl::Now() + absl::Milliseconds(600);
  ASSERT_TRUE(engine->Submit(busy, hog.Sink()).ok());
  std::vector<int32_t> prompt = prefix;
  prompt.insert(prompt.end(), {1, 2, 3});
  GenerateRequest cut = Greedy(prompt, 5, "fresh");
  cut.deadline = absl::Now() + absl::Milliseconds(100);
  const testing_util::Result r = testing_util::Run(*engine, cut);
  hog.Wait();
  ASSERT_EQ(r.finish, Finish::kDeadline);
  const SessionInfo after = *engine->GetSession("fresh", "");
  EXPECT_EQ(after.position, 0);
  EXPECT_EQ(after.turns, 0);
}

// A session's prompt shorter than one step's budget is still split when another request takes
// the budget (each running sequence gets a token a step first, the rest goes in arrival order):
// cut short by a deadline part-way, the session must be as it was (it used to keep the part
// computed: the checkpoint was taken only for prompts longer than the budget).
TEST(EngineHardeningTest, AShortPromptSplitByAnotherRequestCutShortLeavesTheSession) {
  EngineOptions opts;
  opts.scheduler.max_step_tokens = 400;
  auto engine = testing_util::MakeEngine(opts);
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  testing_util::Run(*engine, Greedy(testing_util::Prompt(12, 3), 2, "s"));
  const SessionInfo before = *engine->GetSession("s", "");
  ASSERT_TRUE(engine->ForkSession("s", "twin", "").ok());
  for (const int ms : {5, 15, 40, 80}) {
    SCOPED_TRACE(ms);
    testing_util::Collector hog;  // arrives first: takes all but a token a step of the budget
    GenerateRequest big = Greedy(testing_util::Prompt(20000, 9), 1);
    big.deadline = absl::Now() + absl::Milliseconds(ms + 400);
    ASSERT_TRUE(engine->Submit(big, hog.Sink()).ok());
    GenerateRequest cut = Greedy(testing_util::Prompt(300, 4), 5, "s");
    cut.deadline = absl::Now() + absl::Milliseconds(ms);
    const testing_util::Result r = testing_util::Run(*engine, cut);
    hog.Wait();
    if (r.finish != Finish::kDeadline) continue;  // the prompt ran whole in time: nothing cut
    const SessionInfo after = *engine->GetSession("s", "");
    EXPECT_EQ(after.position, before.position);
    EXPECT_EQ(after.turns, before.turns);
  }
  testing_util::Result a = testing_util::Run(*engine, Greedy({5, 6, 7}, 6, "s"));
  testing_util::Result b = testing_util::Run(*engine, Greedy({5, 6, 7}, 6, "twin"));
  EXPECT_EQ(a.tokens, b.tokens);
}

// A tokenizer of 96 byte-fallback tokens <0x20>..<0x7F>: random ids make incomplete and invalid
// UTF-8, which the stream must end exactly as Decode renders it.
std::unique_ptr<tokenizer::Tokenizer> ByteTokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int i = 0; i < 96; ++i) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", 0x80 + (i % 64) + (i >= 64 ? 0x40 : 0));
    vocab[name] = i;
  }
  const nlohmann::json tok = {{"version", "1.0"},
                              {"model",
                               {{"type", "BPE"},
                                {"byte_fallback", true},
                                {"vocab", vocab},
                                {"merges", nlohmann::json::array()}}},
                              {"decoder", {{"type", "ByteFallback"}}}};
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> t =
      tokenizer::Tokenizer::FromJson(tok.dump());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

TEST(EngineHardeningTest, StreamedTextEqualsDecodeForEveryFinishReason) {
  std::unique_ptr<tokenizer::Tokenizer> tok = ByteTokenizer();
  ASSERT_NE(tok, nullptr);
  EngineOptions opts;
  opts.detokenizer = MakeDetokenizerFactory(tok.get());
  auto engine = testing_util::MakeEngine(opts);
  for (int variant = 0; variant < 4; ++variant) {
    GenerateRequest r = Greedy(testing_util::Prompt(5, 10 + variant), variant == 0 ? 9 : 60000);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 100 + variant;
    if (variant == 2) r.deadline = absl::Now() + absl::Milliseconds(30);
    testing_util::Collector c;
    absl::StatusOr<RequestId> id = engine->Submit(r, c.Sink());
    ASSERT_TRUE(id.ok());
    if (variant == 1) {
      c.WaitTokens(7);
      engine->Cancel(*id);
    }
    if (variant == 3) {
      c.WaitTokens(3);
      engine->Stop(absl::ZeroDuration());
    }
    c.Wait();
    const testing_util::Result res = c.result();
    absl::StatusOr<std::string> want = tok->Decode(res.tokens, /*skip_special_tokens=*/true);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(res.text, *want) << "finish " << FinishName(res.finish) << " after "
                               << res.tokens.size() << " tokens";
    EXPECT_FALSE(res.tokens.empty());
  }
}

// The output's text continues the prompt's: with a Metaspace decoder (Llama-2's, fla's models')
// the first token "▁w7" is " w7", where a decode of the output alone drops the space.
TEST(EngineHardeningTest, TheTextContinuesThePrompt) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int i = 0; i < 96; ++i) vocab[absl::StrCat("\xE2\x96\x81w", i)] = i;
  const nlohmann::json json = {
      {"version", "1.0"},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
      {"decoder",
       {{"type", "Metaspace"},
        {"replacement", "\xE2\x96\x81"},
        {"prepend_scheme", "always"},
        {"split", true}}}};
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok =
      tokenizer::Tokenizer::FromJson(json.dump());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EngineOptions opts;
  opts.detokenizer = MakeDetokenizerFactory(tok->get());
  auto engine = testing_util::MakeEngine(opts);
  const std::vector<int32_t> prompt = testing_util::Prompt(5, 3);
  testing_util::Collector c;
  ASSERT_TRUE(engine->Submit(Greedy(prompt, 6), c.Sink()).ok());
  c.Wait();
  const testing_util::Result res = c.result();
  ASSERT_EQ(res.tokens.size(), 6u);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), res.tokens.begin(), res.tokens.end());
  const std::string head = *(*tok)->Decode(prompt, true);
  const std::string whole = *(*tok)->Decode(all, true);
  ASSERT_EQ(whole.rfind(head, 0), 0u);
  EXPECT_EQ(res.text, whole.substr(head.size()));
  EXPECT_EQ(res.text, " " + *(*tok)->Decode(res.tokens, true));
  // A session's next turn (nothing but its pending token) and a fork's continue its text too.
  ASSERT_TRUE(engine->CreateSession("s", "").ok());
  EXPECT_EQ(testing_util::Run(*engine, Greedy(prompt, 3, "s")).text.substr(0, 1), " ");
  for (const char* session : {"s", "twin"}) {
    if (std::string(session) == "twin") {
      ASSERT_TRUE(engine->ForkSession("s", "twin", "").ok());
    }
    const testing_util::Result next = testing_util::Run(*engine, Greedy({}, 4, session));
    ASSERT_EQ(next.tokens.size(), 4u) << session;
    EXPECT_EQ(next.text, " " + *(*tok)->Decode(next.tokens, true)) << session;
  }
  // So does a session exported and imported into another engine (its blob keeps the tail).
  const absl::StatusOr<std::string> blob = engine->ExportSession("s", "");
  ASSERT_TRUE(blob.ok()) << blob.status();
  auto other = testing_util::MakeEngine(opts);
  ASSERT_TRUE(other->ImportSession("moved", "", *blob).ok());
  const testing_util::Result moved = testing_util::Run(*other, Greedy({}, 4, "moved"));
  ASSERT_EQ(moved.tokens.size(), 4u);
  EXPECT_EQ(moved.text, " " + *(*tok)->Decode(moved.tokens, true));
}

}  // namespace
}  // namespace linfer
