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

// An internal session's state moved to the disk tier is scratch (".lnfscratch"): the next engine
// on the directory removes the file instead of taking it for a client's session.
TEST(EngineHardeningTest, TheServersOwnStatesOnDiskAreNotSessionsAfterARestart) {
  EngineOptions opts;
  opts.max_slots = 1;
  opts.tiers.host_bytes = 12288;  // one state of the default fixture
  opts.tiers.disk_dir = testing_util::FreshDir("linfer_scratch_states");
  auto files = [&](const std::string& extension) {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(opts.tiers.disk_dir)) {
      n += e.path().extension() == extension ? 1 : 0;
    }
    return n;
  };
  std::string internal;
  {
    auto engine = testing_util::MakeEngine(opts);
    ASSERT_NE(engine, nullptr);
    absl::StatusOr<std::string> id = engine->CreateInternalSession("alice");
    ASSERT_TRUE(id.ok()) << id.status();
    internal = *id;
    // Each next session takes the one slot: the one before goes to host RAM, which holds one
    // state, so the least recently used (the internal one) goes to disk.
    for (const std::string& s : {internal, std::string("c"), std::string("d")}) {
      if (s != internal) {
        ASSERT_TRUE(engine->CreateSession(s, "alice").ok());
      }
      GenerateRequest r = Greedy({1, 2, 3}, 2, s);
      r.owner = "alice";
      ASSERT_EQ(testing_util::Run(*engine, r).finish, Finish::kLength) << s;
    }
    EXPECT_EQ(engine->GetSession(internal, "alice")->tier, Tier::kDisk);
    EXPECT_EQ(files(".lnfscratch"), 1);
  }  // the shutdown writes "c" and "d", not the internal one
  auto engine = testing_util::MakeEngine(opts);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(files(".lnfscratch"), 0);
  EXPECT_EQ(files(".lnfstate"), 2);
  EXPECT_EQ(engine->ListSessions("alice")->size(), 2u);
  EXPECT_EQ(engine->GetSession(internal, "alice").status().code(), absl::StatusCode::kNotFound);
}

// The disk tiers' directories: a path that is not a directory is refused when the engine is made,
// naming the flag (it was taken, and the sessions lost at shutdown); a directory that exists keeps
// its mode (it used to be set to 0700, whatever it was: a shared one, or any path given); one that
// does not is made, 0700.
TEST(EngineHardeningTest, TheDiskDirectoriesAreCheckedAndTheirModesLeftAlone) {
  const std::string dir = testing_util::FreshDir("linfer_disk_dirs");
  const std::string model =
      testing_util::FixtureSetDir(LINFER_FLA_FIXTURES) + "/" + std::string("gdn_default");
  auto create = [&](const std::string& sessions, const std::string& prefixes) {
    EngineOptions o;
    o.state_memory_bytes = 64 << 20;
    o.tiers.disk_dir = sessions;
    o.prefix_cache.disk_dir = prefixes;
    o.prefix_cache.budget_bytes = 1 << 20;
    o.prefix_cache.disk_budget_bytes = 1 << 20;
    absl::StatusOr<std::unique_ptr<Model>> m = Model::Load(model, {});
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? Engine::Create(*std::move(m), o).status() : m.status();
  };
  auto mode = [](const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  };
  const std::string file = dir + "/a-file";
  std::ofstream(file) << "not a directory";
  ASSERT_EQ(::chmod(file.c_str(), 0644), 0);
  const std::string shared = dir + "/shared";
  ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  for (const auto& [sessions, prefixes, flag] : {std::tuple{file, shared, "--session_disk_dir"},
                                                 {shared, file, "--prefix_cache_disk_dir"}}) {
    const absl::Status refused = create(sessions, prefixes);
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
    EXPECT_EQ(refused.message(), absl::StrCat(flag, " ", file, ": not a directory")) << refused;
  }
  EXPECT_EQ(mode(file), 0644u);
  const std::string made = dir + "/new/sessions";
  ASSERT_TRUE(create(shared, made).ok());
  EXPECT_EQ(mode(shared), 01777u);
  EXPECT_EQ(mode(made), 0700u);
  // One server per directory: while an engine lives, another on either of its directories is
  // refused by name (two would index, overwrite and remove each other's files); both tiers may
  // share one directory; the lock goes with the engine.
  auto open = [&](const std::string& sessions, const std::string& prefixes) {
    EngineOptions o;
    o.tiers.disk_dir = sessions;
    o.prefix_cache.disk_dir = prefixes;
    o.prefix_cache.budget_bytes = 1 << 20;
    o.prefix_cache.disk_budget_bytes = 1 << 20;
    return testing_util::MakeEngine(o);
  };
  {
    auto holder = open(shared, shared);
    ASSERT_NE(holder, nullptr);
    for (const auto& [sessions, prefixes, flag] : {std::tuple{shared, made, "--session_disk_dir"},
                                                   {made, shared, "--prefix_cache_disk_dir"}}) {
      const absl::Status refused = create(sessions, prefixes);
      EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
      EXPECT_EQ(refused.message().rfind(
                    absl::StrCat(flag, " ", shared, ": another linfer server uses this"), 0),
                0u)
          << refused;
    }
  }
  EXPECT_TRUE(create(made, shared).ok());
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

// A session write that a killed shutdown left unfinished (NAME.lnfstate.tmp.PID of a process that
// is gone) is removed when the disk tier is indexed; other files stay.
TEST(EngineHardeningTest, UnfinishedSessionWritesAreRemovedAtStart) {
  const std::string dir = testing_util::FreshDir("linfer_stale_tmp");
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // a process that is gone
  const std::string stale = absl::StrCat(dir, "/-s.lnfstate.tmp.", child);
  const std::string live = absl::StrCat(dir, "/-t.lnfstate.tmp.", getppid());
  const std::string other = absl::StrCat(dir, "/notes.txt.tmp.", child);
  for (const std::string& f : {stale, live, other}) std::ofstream(f) << "partial";
  EngineOptions opts;
  opts.tiers.disk_dir = dir;
  auto engine = testing_util::MakeEngine(opts);
  ASSERT_NE(engine, nullptr);
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(live));  // its process may still finish it
  EXPECT_TRUE(std::filesystem::exists(other));
  EXPECT_EQ(engine->ListSessions("")->size(), 0u);
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

TEST(EngineHardeningTest, SessionsSurviveARestartOnTheDiskTier) {
  const std::string dir = testing_util::FreshDir("linfer_restart");
  EngineOptions opts;
  opts.max_slots = 2;
  opts.tiers.host_bytes = 2 * 12288;
  opts.tiers.disk_dir = dir;
  std::vector<int32_t> continued;
  std::map<std::string, int64_t> positions;
  {
    auto engine = testing_util::MakeEngine(opts);
    for (int i = 0; i < 6; ++i) {  // some end up in slots, some in RAM, some on disk
      const std::string id = absl::StrCat("r", i);
      ASSERT_TRUE(engine->CreateSession(id, "").ok());
      testing_util::Run(*engine, Greedy(testing_util::Prompt(10 + i, i), 3, id));
    }
    const absl::StatusOr<std::vector<SessionInfo>> listed = engine->ListSessions("");
    ASSERT_TRUE(listed.ok());
    for (const SessionInfo& s : *listed) positions[s.id] = s.position;
    ASSERT_TRUE(engine->ForkSession("r0", "twin", "").ok());
    continued = testing_util::Run(*engine, Greedy({4, 5}, 5, "twin")).tokens;
    ASSERT_TRUE(engine->DeleteSession("twin", "").ok());
    engine->Stop();  // graceful: every session is written to disk
  }
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    struct stat st;
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    // (The directory's lock file holds nothing: readable by all, so that a server of another
    // user can open it in a shared directory.)
    EXPECT_EQ(st.st_mode & 0777, e.path().filename() == ".linfer.lock" ? 0644u : 0600u) << e.path();
  }
  // A corrupt file and a file of another model are skipped, and left in place.
  { std::ofstream(dir + "/0000000000000000-junk.lnfstate") << "not a state"; }
  auto engine = testing_util::MakeEngine(opts);
  absl::StatusOr<std::vector<SessionInfo>> listed = engine->ListSessions("");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 6u);
  for (const SessionInfo& s : *listed) EXPECT_EQ(s.position, positions[s.id]) << s.id;
  EXPECT_EQ(testing_util::Run(*engine, Greedy({4, 5}, 5, "r0")).tokens, continued);
  EXPECT_TRUE(std::filesystem::exists(dir + "/0000000000000000-junk.lnfstate"));
}

// --session_ttl_s: sessions idle for longer than the TTL are deleted from every tier (their disk
// files too); a request keeps a session alive (reading it with Get or List does not), and a
// session busy with a request never expires while the request runs.
// A session file another model wrote (or a damaged one) is left in place, and no session of this
// server takes its name: creating that id is refused, so a shutdown never writes over it.
TEST(EngineHardeningTest, AnotherModelsSessionFileIsNeverOverwritten) {
  const std::string dir = testing_util::FreshDir("linfer_foreign");
  EngineOptions opts;
  opts.tiers.disk_dir = dir;
  std::vector<int32_t> continued;
  {
    auto a = testing_util::MakeEngine(opts);
    ASSERT_TRUE(a->CreateSession("keep", "").ok());
    testing_util::Run(*a, Greedy({1, 2, 3}, 3, "keep"));
    a->Stop();
  }
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".lnfstate") continue;  // (not the directory's lock)
    std::ifstream in(e.path(), std::ios::binary);
    files[e.path().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_EQ(files.size(), 1u);
  {
    auto b = testing_util::MakeEngine(opts, "deltanet_default");
    ASSERT_NE(b, nullptr);
    const absl::StatusOr<std::string> taken = b->CreateSession("keep", "");
    EXPECT_EQ(taken.status().code(), absl::StatusCode::kAlreadyExists) << taken.status();
    EXPECT_NE(taken.status().message().find("cannot read"), std::string::npos) << taken.status();
    EXPECT_EQ(taken.status().message().find(dir), std::string::npos) << "no server paths";
    ASSERT_TRUE(b->CreateSession("other", "").ok());
    testing_util::Run(*b, Greedy({1, 2}, 2, "other"));
    b->Stop();
  }
  for (const auto& [path, bytes] : files) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), bytes) << path;
  }
  auto a = testing_util::MakeEngine(opts);
  EXPECT_TRUE(a->GetSession("keep", "").ok());
  EXPECT_EQ(a->CreateSession("other", "").status().code(), absl::StatusCode::kAlreadyExists)
      << "the other model's session is this one's foreign file now";
}

// A session whose file went bad after it was indexed: its turn fails with DATA_LOSS naming the
// session, not where the server keeps its files (the log has the path).
TEST(EngineHardeningTest, ADamagedSessionFileFailsItsTurnWithoutTheServersPath) {
  const std::string dir = testing_util::FreshDir("linfer_damaged");
  EngineOptions opts;
  opts.tiers.disk_dir = dir;
  {
    auto a = testing_util::MakeEngine(opts);
    ASSERT_TRUE(a->CreateSession("s", "").ok());
    testing_util::Run(*a, Greedy({1, 2, 3}, 3, "s"));
    a->Stop();
  }
  auto b = testing_util::MakeEngine(opts);
  ASSERT_TRUE(b->GetSession("s", "").ok());
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ofstream(e.path(), std::ios::trunc) << "damaged";
  }
  // An export reads the file too.
  const absl::Status exported = b->ExportSession("s", "").status();
  EXPECT_EQ(exported.code(), absl::StatusCode::kDataLoss) << exported;
  EXPECT_NE(exported.message().find("session 's'"), std::string::npos) << exported;
  EXPECT_EQ(exported.message().find(dir), std::string::npos) << exported;
  testing_util::Collector c;
  ASSERT_TRUE(b->Submit(Greedy({4}, 2, "s"), c.Sink()).ok());
  c.Wait();
  const absl::Status st = c.Final().error;
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("session 's'"), std::string::npos) << st;
  EXPECT_EQ(st.message().find(dir), std::string::npos) << st;
  // And a file gone altogether.
  for (const auto& e : std::filesystem::directory_iterator(dir)) std::filesystem::remove(e.path());
  const absl::Status gone = b->ExportSession("s", "").status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kDataLoss) << gone;
  EXPECT_EQ(gone.message().find(dir), std::string::npos) << gone;
}

// A disk-tier file replaced while the server runs — another session's (another owner's too), or
// an older copy of the session's own — passes the CRC and the model's checks; read back it would
// continue the wrong conversation silently. Its turn fails with DATA_LOSS instead.
TEST(EngineHardeningTest, ASessionFileReplacedBehindTheServerIsRefused) {
  const std::string dir = testing_util::FreshDir("linfer_replaced");
  EngineOptions opts;
  opts.tiers.disk_dir = dir;
  auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::map<std::string, std::string> first;  // session → its file after one turn
  {
    auto a = testing_util::MakeEngine(opts);
    for (const char* owner : {"alice", "bob"}) {
      ASSERT_TRUE(a->CreateSession("s", owner).ok());
      GenerateRequest r = Greedy({1, 2, 3}, 3, "s");
      r.owner = owner;
      testing_util::Run(*a, r);
    }
    a->Stop();
  }
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".lnfstate") first[e.path().string()] = read(e.path());
  }
  ASSERT_EQ(first.size(), 2u);
  {
    auto b = testing_util::MakeEngine(opts);
    for (const char* owner : {"alice", "bob"}) {  // both move on alike: their files differ only
      GenerateRequest r = Greedy({4}, 2, "s");    // in the owner (written again at the stop)
      r.owner = owner;
      testing_util::Run(*b, r);
    }
    b->Stop();
  }
  auto c = testing_util::MakeEngine(opts);
  ASSERT_NE(c, nullptr);
  auto turn = [&](const std::string& owner) {
    GenerateRequest r = Greedy({5}, 2, "s");
    r.owner = owner;
    testing_util::Collector col;
    EXPECT_TRUE(c->Submit(r, col.Sink()).ok());
    col.Wait();
    return col.Final().error;
  };
  std::string alice_path, bob_path;
  for (const auto& [path, bytes] : first) {
    (path.find(OwnerTag("alice")) != std::string::npos ? alice_path : bob_path) = path;
  }
  ASSERT_FALSE(alice_path.empty() || bob_path.empty() || alice_path == bob_path);
  // Bob's file copied over alice's: the same id, the same tokens and state, another owner.
  { std::ofstream(alice_path, std::ios::binary | std::ios::trunc) << read(bob_path); }
  const absl::Status exported = c->ExportSession("s", "alice").status();
  EXPECT_EQ(exported.code(), absl::StatusCode::kDataLoss) << exported;
  // Alice's file an older copy of her own session: 6 tokens, where the session has 8.
  { std::ofstream(alice_path, std::ios::binary | std::ios::trunc) << first[alice_path]; }
  const absl::Status st = turn("alice");
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("session 's'"), std::string::npos) << st;
  // Bob's own session is untouched by all of it.
  EXPECT_TRUE(turn("bob").ok());
}

TEST(EngineHardeningTest, IdleSessionsExpireAfterTheTtl) {
  const std::string dir = testing_util::FreshDir("linfer_ttl");
  EngineOptions opts;
  opts.max_slots = 2;
  opts.tiers.host_bytes = 12288;  // one idle state in RAM; the others go to disk
  opts.tiers.disk_dir = dir;
  opts.tiers.ttl = absl::Seconds(1);
  opts.housekeeping = absl::Milliseconds(50);
  auto engine = testing_util::MakeEngine(opts);
  for (const char* id : {"a", "b", "c", "kept", "busy"}) {
    ASSERT_TRUE(engine->CreateSession(id, "").ok());
    testing_util::Run(*engine, Greedy(testing_util::Prompt(8, 1), 2, id));
  }
  auto disk_files = [&dir] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      n += e.path().extension() == ".lnfstate";
    }
    return n;
  };
  {
    const absl::StatusOr<std::vector<SessionInfo>> listed = engine->ListSessions("");
    ASSERT_TRUE(listed.ok());
    ASSERT_EQ(listed->size(), 5u);
    std::set<Tier> tiers;
    for (const SessionInfo& s : *listed) tiers.insert(s.tier);
    EXPECT_EQ(tiers.size(), 3u) << "sessions in slots, in host RAM and on disk";
    EXPECT_GT(disk_files(), 0);
  }
  // "busy" runs a request that is paused (its client stopped reading) for longer than the TTL.
  testing_util::Collector busy;
  const absl::StatusOr<RequestId> busy_id =
      engine->Submit(Greedy({1, 2}, 60000, "busy"), busy.Sink());
  ASSERT_TRUE(busy_id.ok()) << busy_id.status();
  busy.WaitTokens(1);
  engine->SetPaused(*busy_id, true);
  // "kept" gets a request every 200 ms; the others are only looked at.
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Milliseconds(2500)) {
    testing_util::Run(*engine, Greedy({3}, 1, "kept"));
    EXPECT_TRUE(engine->ListSessions("").ok());
    absl::SleepFor(absl::Milliseconds(200));
  }
  for (const char* id : {"a", "b", "c"}) {
    const absl::Status gone = engine->GetSession(id, "").status();
    EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound) << id;
    EXPECT_EQ(gone.message(), absl::StrCat("session '", id, "' not found: it was deleted after ",
                                           "idling longer than --session_ttl_s"));
  }
  // The same id made again is a new session, found as such.
  ASSERT_TRUE(engine->CreateSession("a", "").ok());
  EXPECT_TRUE(engine->GetSession("a", "").ok());
  ASSERT_TRUE(engine->DeleteSession("a", "").ok());
  EXPECT_EQ(engine->GetSession("a", "").status().message(), "session 'a' not found");
  EXPECT_TRUE(engine->GetSession("kept", "").ok());
  absl::StatusOr<SessionInfo> b = engine->GetSession("busy", "");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->busy);
  int on_disk = 0;
  // Hold the StatusOr: a range-for over *temporary would read the destroyed vector.
  const absl::StatusOr<std::vector<SessionInfo>> listed = engine->ListSessions("");
  ASSERT_TRUE(listed.ok()) << listed.status();
  for (const SessionInfo& s : *listed) on_disk += s.tier == Tier::kDisk;
  EXPECT_EQ(disk_files(), on_disk) << "expired sessions' files are deleted";
  // Once its request ends, "busy" is idle like the others and expires a TTL later.
  engine->Cancel(*busy_id);
  busy.Wait();
  EXPECT_EQ(busy.result().finish, Finish::kCancelled) << "the request was still running";
  EXPECT_TRUE(engine->GetSession("busy", "").ok());
  const absl::Time released = absl::Now();
  while (engine->GetSession("busy", "").ok() && absl::Now() - released < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(engine->GetSession("busy", "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_GE(absl::Now() - released, absl::Milliseconds(500)) << "not long before its TTL";
}

}  // namespace
}  // namespace linfer
