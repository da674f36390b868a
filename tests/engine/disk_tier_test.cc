// The session disk tier and the disk directories under hostile conditions: files left by a
// killed shutdown, another model's or a damaged file, a file replaced behind the server's back,
// restarts, expiry, and the directories' checks and locks (the engine_hardening_test binary).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "tests/engine/engine_testing.h"

namespace linfer {
namespace {

using testing_util::Greedy;

// An internal session's state moved to the disk tier is scratch (".lnfscratch"): the next engine
// on the directory removes the file instead of taking it for a client's session.
TEST(DiskTierTest, TheServersOwnStatesOnDiskAreNotSessionsAfterARestart) {
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
TEST(DiskTierTest, TheDiskDirectoriesAreCheckedAndTheirModesLeftAlone) {
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

// A session write that a killed shutdown left unfinished (NAME.lnfstate.tmp.PID of a process that
// is gone) is removed when the disk tier is indexed; other files stay.
TEST(DiskTierTest, UnfinishedSessionWritesAreRemovedAtStart) {
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

TEST(DiskTierTest, SessionsSurviveARestartOnTheDiskTier) {
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

// A session file another model wrote (or a damaged one) is left in place, and no session of this
// server takes its name: creating that id is refused, so a shutdown never writes over it.
TEST(DiskTierTest, AnotherModelsSessionFileIsNeverOverwritten) {
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
TEST(DiskTierTest, ADamagedSessionFileFailsItsTurnWithoutTheServersPath) {
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
TEST(DiskTierTest, ASessionFileReplacedBehindTheServerIsRefused) {
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

// --session_ttl_s: sessions idle for longer than the TTL are deleted from every tier (their disk
// files too); a request keeps a session alive (reading it with Get or List does not), and a
// session busy with a request never expires while the request runs.
TEST(DiskTierTest, IdleSessionsExpireAfterTheTtl) {
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
