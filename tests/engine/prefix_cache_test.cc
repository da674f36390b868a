// The prefix state cache's index: the longest saved prefix, owner scopes, the LRU budget, the
// disk tier, shared states, and the device tier's slots (a fake pool). The engine resuming from
// it: prefix_cache_engine_test.cc.
#include "engine/prefix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/engine/engine_testing.h"

namespace linfer {
namespace {
HostState FakeState(int64_t position, size_t bytes) {
  HostState s;
  s.bytes.assign(bytes, static_cast<uint8_t>(position));
  s.position = position;
  return s;
}

// Lookup of a host or disk entry: its state and length.
bool Look(PrefixCache& c, const std::string& owner, absl::Span<const int32_t> tokens,
          int64_t min_len, int64_t max_len, std::shared_ptr<const HostState>* state, int64_t* len) {
  PrefixHit hit;
  if (!c.Lookup(owner, tokens, min_len, max_len, &hit)) return false;
  EXPECT_EQ(hit.slot, -1);
  *state = hit.state;
  *len = hit.len;
  return true;
}

std::vector<int32_t> Range(int n, int start = 0) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

TEST(PrefixCacheIndexTest, LongestPrefixOwnersAndBounds) {
  PrefixCache c(MakePrefixCacheOptions(1 << 20, 0));
  const std::vector<int32_t> t = Range(100);
  c.Insert("a", absl::MakeSpan(t).subspan(0, 10), FakeState(10, 8));
  c.Insert("a", absl::MakeSpan(t).subspan(0, 40), FakeState(40, 8));
  c.Insert("a", absl::MakeSpan(t).subspan(0, 70), FakeState(70, 8));
  std::shared_ptr<const HostState> s;
  int64_t len = 0;
  ASSERT_TRUE(Look(c, "a", t, 1, 99, &s, &len));
  EXPECT_EQ(len, 70);
  EXPECT_EQ(s->position, 70);
  ASSERT_TRUE(Look(c, "a", t, 1, 69, &s, &len));  // at most 69 tokens may come from the cache
  EXPECT_EQ(len, 40);
  EXPECT_FALSE(Look(c, "a", t, 50, 69, &s, &len));  // none between 50 and 69
  EXPECT_FALSE(Look(c, "b", t, 1, 99, &s, &len));   // another owner sees nothing
  std::vector<int32_t> other = t;
  other[5] = 999;  // diverges before every saved prefix but... none of length ≤ 5 exists
  EXPECT_FALSE(Look(c, "a", other, 1, 99, &s, &len));
  other = t;
  other[50] = 999;  // diverges after 40
  ASSERT_TRUE(Look(c, "a", other, 1, 99, &s, &len));
  EXPECT_EQ(len, 40);
  EXPECT_TRUE(c.Contains("a", absl::MakeSpan(t).subspan(0, 40)));
  EXPECT_FALSE(c.Contains("a", absl::MakeSpan(t).subspan(0, 41)));
  const PrefixCacheStats st = c.stats();
  EXPECT_EQ(st.entries, 3);
  EXPECT_EQ(st.inserts, 3);
  EXPECT_EQ(st.hits, 3);
  EXPECT_EQ(st.hit_tokens, 70 + 40 + 40);
}

// Branch points: where a prompt parts from an earlier one that shared its beginning, rounded
// down to the granule; per owner, only past min_len, only for earlier prompts, forgotten oldest
// first beyond the memory's capacity.
TEST(PrefixCacheIndexTest, BranchPointsAreWherePromptsPart) {
  PrefixCache c(MakePrefixCacheOptions(1 << 20, 0));
  ASSERT_EQ(c.options().branch_granule, 64);
  const std::vector<int32_t> x = Range(300);
  std::vector<int32_t> y = x;
  y[150] = 999;                                   // shares 150 tokens with x
  EXPECT_EQ(c.BranchPoint("a", x, 0, 299), 0);    // nothing before it
  EXPECT_EQ(c.BranchPoint("a", y, 0, 299), 128);  // parts at 150: the multiple of 64 below
  std::vector<int32_t> y2 = x;
  y2[150] = 998;  // parts where y does: past a saved 128 nothing more is shared
  EXPECT_EQ(c.BranchPoint("a", y2, 128, 299), 0);
  EXPECT_EQ(c.BranchPoint("a", x, 0, 299), 256);  // x again: all of its multiples seen
  EXPECT_EQ(c.BranchPoint("a", x, 0, 200), 192);  // within max_len
  EXPECT_EQ(c.BranchPoint("b", x, 0, 299), 0);    // another owner's prompts are not seen
  std::vector<int32_t> z = x;
  z[10] = 999;  // parts before the first multiple
  EXPECT_EQ(c.BranchPoint("a", z, 0, 299), 0);
  EXPECT_EQ(c.stats().branch_points, 3);
  c.Clear();
  EXPECT_EQ(c.BranchPoint("a", x, 0, 299), 0);  // forgotten
  PrefixCacheOptions off = MakePrefixCacheOptions(1 << 20, 0);
  off.branch_granule = 0;
  PrefixCache none(off);
  EXPECT_EQ(none.BranchPoint("a", x, 0, 299), 0);
  EXPECT_EQ(none.BranchPoint("a", x, 0, 299), 0);
  // The memory keeps the last 2^17 prefixes: 2^17 prompts of one new multiple each push x's out.
  PrefixCache small(MakePrefixCacheOptions(1 << 20, 0));
  EXPECT_EQ(small.BranchPoint("a", x, 0, 64), 0);
  std::vector<int32_t> p(64);
  for (int i = 0; i < (1 << 17); ++i) {
    p[0] = 100000 + i;
    small.BranchPoint("a", p, 0, 64);
  }
  EXPECT_EQ(small.BranchPoint("a", x, 0, 64), 0);
  EXPECT_EQ(small.BranchPoint("a", x, 0, 64), 64);
}

TEST(PrefixCacheIndexTest, LeastRecentlyUsedGoesFirstWithinTheBudget) {
  // Each entry: 1,000 state bytes + 4 bytes per key token.
  PrefixCache c(MakePrefixCacheOptions(3 * 1040, 0));
  const std::vector<int32_t> a = Range(10), b = Range(10, 100), d = Range(10, 200),
                             e = Range(10, 300);
  c.Insert("o", a, FakeState(10, 1000));
  c.Insert("o", b, FakeState(10, 1000));
  c.Insert("o", d, FakeState(10, 1000));
  std::shared_ptr<const HostState> s;
  int64_t len;
  ASSERT_TRUE(Look(c, "o", a, 1, 10, &s, &len));  // a is now the most recent
  c.Insert("o", e, FakeState(10, 1000));          // evicts b
  EXPECT_TRUE(c.Contains("o", a));
  EXPECT_FALSE(c.Contains("o", b));
  EXPECT_TRUE(c.Contains("o", d));
  EXPECT_TRUE(c.Contains("o", e));
  EXPECT_EQ(c.stats().evictions, 1);
  EXPECT_LE(c.stats().bytes, 3 * 1040);
  c.Insert("o", Range(10, 400), FakeState(10, 5000));  // larger than the budget: not kept
  EXPECT_FALSE(c.Contains("o", Range(10, 400)));
  PrefixCache off(MakePrefixCacheOptions(0, 0));
  off.Insert("o", a, FakeState(10, 10));
  EXPECT_FALSE(Look(off, "o", a, 1, 10, &s, &len));
}

int CountEntryFiles(const std::string& dir) {
  int n = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    n += f.path().filename().string().ends_with(".lnfprefix");
  }
  return n;
}

TEST(PrefixCacheIndexTest, DiskTierTakesWhatRamPushesOutAndGivesItBack) {
  const std::string dir = testing_util::FreshDir("linfer_prefix_disk");
  { std::ofstream(dir + "/00000000000000aa.lnfprefix") << "left over by a crashed server"; }
  // RAM: one 1,040-byte entry; disk: two.
  PrefixCache c(MakePrefixCacheOptions(1040, 0, dir, 2 * 1040));
  EXPECT_EQ(CountEntryFiles(dir), 0) << "leftover entry files are removed at start";
  const std::vector<int32_t> a = Range(10), b = Range(10, 100), d = Range(10, 200),
                             e = Range(10, 300);
  c.Insert("o", a, FakeState(10, 1000));
  c.Insert("o", b, FakeState(10, 1000));  // a → disk
  c.Insert("o", d, FakeState(10, 1000));  // b → disk
  PrefixCacheStats st = c.stats();
  EXPECT_EQ(st.entries, 1);
  EXPECT_EQ(st.disk_entries, 2);
  EXPECT_EQ(st.disk_bytes, 2 * 1040);
  EXPECT_EQ(st.spills, 2);
  EXPECT_EQ(st.evictions, 0);
  EXPECT_EQ(CountEntryFiles(dir), 2);
  std::shared_ptr<const HostState> s;
  int64_t len = 0;
  ASSERT_TRUE(Look(c, "o", a, 1, 10, &s, &len));  // from disk, back to RAM (d → disk)
  EXPECT_EQ(len, 10);
  EXPECT_EQ(s->position, 10);
  EXPECT_EQ(s->bytes, FakeState(10, 1000).bytes);
  st = c.stats();
  EXPECT_EQ(st.disk_hits, 1);
  EXPECT_EQ(st.entries, 1);
  EXPECT_EQ(st.disk_entries, 2);
  c.Insert("o", e, FakeState(10, 1000));  // a → disk, which drops its oldest (b)
  EXPECT_FALSE(c.Contains("o", b));
  EXPECT_TRUE(c.Contains("o", a) && c.Contains("o", d) && c.Contains("o", e));
  EXPECT_EQ(c.stats().evictions, 1);
  EXPECT_EQ(CountEntryFiles(dir), 2);
  // A damaged file is dropped with a log line, and the lookup goes on to shorter prefixes.
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(100);
    io.put('\x5a');
  }
  EXPECT_FALSE(Look(c, "o", d, 1, 10, &s, &len));
  EXPECT_EQ(c.stats().disk_errors, 1);
  EXPECT_FALSE(c.Contains("o", d));
  c.Clear();
  EXPECT_EQ(CountEntryFiles(dir), 0);
  c.Insert("o", a, FakeState(10, 1000));
  c.Insert("o", b, FakeState(10, 1000));
  EXPECT_EQ(CountEntryFiles(dir), 1);
}

TEST(PrefixCacheIndexTest, ADamagedFileThatWasTheOwnersOnlyEntry) {
  const std::string dir = testing_util::FreshDir("linfer_prefix_disk_solo");
  PrefixCache c(MakePrefixCacheOptions(1040, 0, dir, 2 * 1040));
  const std::vector<int32_t> x = Range(10), y = Range(10, 50);
  c.Insert("solo", x, FakeState(10, 1000));
  c.Insert("other", y, FakeState(10, 1000));  // x → disk
  ASSERT_EQ(CountEntryFiles(dir), 1);
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    std::filesystem::resize_file(f.path(), 100);  // truncated
  }
  std::shared_ptr<const HostState> s;
  int64_t len = 0;
  EXPECT_FALSE(Look(c, "solo", Range(12), 1, 12, &s, &len));
  EXPECT_FALSE(c.Contains("solo", x));
  EXPECT_EQ(c.stats().disk_errors, 1);
  EXPECT_EQ(c.stats().disk_entries, 0);
  ASSERT_TRUE(Look(c, "other", y, 1, 10, &s, &len));
  EXPECT_EQ(len, 10);
}

// Entry files renamed over each other (the same length: the position check cannot tell), or
// written by another cache (another process on the directory), pass the CRC; they are dropped
// instead of resuming a prompt from another prompt's state.
TEST(PrefixCacheIndexTest, AnEntryFileReplacedBehindTheCacheIsDropped) {
  const std::string dir = testing_util::FreshDir("linfer_prefix_disk_swap");
  PrefixCache c(MakePrefixCacheOptions(1040, 0, dir, 2 * 1040));
  const std::vector<int32_t> x = Range(10), y = Range(10, 50), z = Range(10, 90);
  c.Insert("o", x, FakeState(10, 1000));
  c.Insert("o", y, FakeState(10, 1000));
  c.Insert("o", z, FakeState(10, 1000));  // x and y → disk
  std::vector<std::filesystem::path> files;
  for (const auto& f : std::filesystem::directory_iterator(dir)) files.push_back(f.path());
  ASSERT_EQ(files.size(), 2u);
  std::filesystem::rename(files[0], dir + "/swap");
  std::filesystem::rename(files[1], files[0]);
  std::filesystem::rename(dir + "/swap", files[1]);
  std::shared_ptr<const HostState> s;
  int64_t len = 0;
  EXPECT_FALSE(Look(c, "o", x, 1, 10, &s, &len));
  EXPECT_FALSE(Look(c, "o", y, 1, 10, &s, &len));
  EXPECT_EQ(c.stats().disk_errors, 2);
  // Another cache's file for the same key.
  const std::string other_dir = testing_util::FreshDir("linfer_prefix_disk_other");
  PrefixCache other(MakePrefixCacheOptions(1040, 0, other_dir, 2 * 1040));
  for (PrefixCache* cache : {&c, &other}) {
    cache->Insert("o", x, FakeState(10, 1000));
    cache->Insert("o", y, FakeState(10, 1000));  // z (c) or x (other) → disk
  }
  c.Insert("o", Range(10, 130), FakeState(10, 1000));  // x → disk in c too
  std::filesystem::path mine, theirs;
  for (const auto& f : std::filesystem::directory_iterator(other_dir)) theirs = f.path();
  mine = std::filesystem::path(dir) / theirs.filename();
  ASSERT_TRUE(std::filesystem::exists(mine)) << mine;
  std::filesystem::copy_file(theirs, mine, std::filesystem::copy_options::overwrite_existing);
  EXPECT_FALSE(Look(c, "o", x, 1, 10, &s, &len));
  EXPECT_EQ(c.stats().disk_errors, 3);
  EXPECT_TRUE(Look(c, "o", y, 1, 10, &s, &len));  // its own file is fine
}

// A hit hands out the cache's own state (tens of MB on a real model: a copy per hit cost the
// engine thread milliseconds), and the reader's handle outlives the entry's eviction.
TEST(PrefixCacheIndexTest, LookupsShareTheSavedStateWithoutCopying) {
  PrefixCache c(MakePrefixCacheOptions(1040, 0));
  const std::vector<int32_t> a = Range(10), b = Range(10, 30);
  c.Insert("o", a, FakeState(10, 1000));
  std::shared_ptr<const HostState> s1, s2;
  int64_t len = 0;
  ASSERT_TRUE(Look(c, "o", a, 1, 10, &s1, &len));
  ASSERT_TRUE(Look(c, "o", a, 1, 10, &s2, &len));
  EXPECT_EQ(s1.get(), s2.get());
  c.Insert("o", b, FakeState(10, 1000));  // the budget holds one entry: a goes
  EXPECT_FALSE(c.Contains("o", a));
  EXPECT_EQ(s1->bytes, FakeState(10, 1000).bytes);
  EXPECT_EQ(s1->position, 10);
}

TEST(PrefixCacheIndexTest, TheDestructorRemovesItsFiles) {
  const std::string dir = testing_util::FreshDir("linfer_prefix_disk_dtor");
  {
    PrefixCache c(MakePrefixCacheOptions(1040, 0, dir, 4 * 1040));
    for (int i = 0; i < 4; ++i) c.Insert("o", Range(10, 100 * i), FakeState(10, 1000));
    EXPECT_EQ(CountEntryFiles(dir), 3);
  }
  EXPECT_EQ(CountEntryFiles(dir), 0);
}

// The device tier against a fake pool that records what it lends and gets back: a kept slot is
// found as a slot, TakeSlot hands it over, the least recently used one goes back to the pool with
// its state moved to host RAM (or dropped when it does not fit), a duplicate prefix gives its new
// slot straight back, a host or disk entry for the prefix is replaced, Clear and the destructor
// give every slot back, and each slot comes back exactly once.
TEST(PrefixCacheIndexTest, DeviceTierLendsSlotsAndGivesThemBack) {
  std::vector<int> released, snapshotted;
  auto tier = [&](PrefixCache& c) {
    c.SetSlotTier({[&](int slot) -> absl::StatusOr<HostState> {
                     snapshotted.push_back(slot);
                     return FakeState(10, 1000);
                   },
                   [&](int slot) { released.push_back(slot); }, 1000});
  };
  const std::vector<int32_t> a = Range(10), b = Range(10, 100), d = Range(10, 200);
  {
    PrefixCache c(MakePrefixCacheOptions(1040, 0));
    tier(c);
    ASSERT_TRUE(c.device_tier());
    c.InsertSlot("o", a, 7);
    c.InsertSlot("o", b, 8);
    c.InsertSlot("o", a, 9);  // a is there already: 9 goes straight back
    EXPECT_EQ(released, std::vector<int>{9});
    EXPECT_EQ(c.device_entries(), 2);
    PrefixHit hit;
    ASSERT_TRUE(c.Lookup("o", Range(12), 1, 12, &hit));  // a, now the most recent
    EXPECT_EQ(hit.len, 10);
    EXPECT_EQ(hit.slot, 7);
    EXPECT_EQ(hit.state, nullptr);
    // b is the least recently used: its state goes to host RAM, its slot back to the pool.
    ASSERT_TRUE(c.ReleaseOldestSlot());
    EXPECT_EQ(snapshotted, std::vector<int>{8});
    EXPECT_EQ(released, (std::vector<int>{9, 8}));
    EXPECT_EQ(c.stats().entries, 1);
    ASSERT_TRUE(c.Lookup("o", b, 1, 10, &hit));
    EXPECT_EQ(hit.slot, -1);
    ASSERT_NE(hit.state, nullptr);
    EXPECT_EQ(hit.state->position, 10);
    // A kept slot replaces the host entry of its prefix.
    c.InsertSlot("o", b, 11);
    EXPECT_EQ(c.stats().entries, 0);
    EXPECT_EQ(c.device_entries(), 2);
    EXPECT_EQ(c.TakeSlot("o", a), 7);  // handed over, not released; its state to host RAM first
    EXPECT_EQ(snapshotted, (std::vector<int>{8, 7}));
    EXPECT_EQ(released, (std::vector<int>{9, 8}));
    EXPECT_EQ(c.TakeSlot("o", a), -1);
    EXPECT_TRUE(c.Contains("o", a));
    ASSERT_TRUE(c.Lookup("o", a, 1, 10, &hit));
    EXPECT_EQ(hit.slot, -1);
    ASSERT_NE(hit.state, nullptr);
    c.InsertSlot("o", d, 12);
    c.Clear();  // in no particular order
    std::sort(released.begin() + 2, released.end());
    EXPECT_EQ(released, (std::vector<int>{9, 8, 11, 12}));
    EXPECT_EQ(c.device_entries(), 0);
    c.InsertSlot("o", a, 13);
  }
  EXPECT_EQ(released, (std::vector<int>{9, 8, 11, 12, 13})) << "the destructor gives 13 back";
  // A host budget too small for a state: the released slot's state is dropped, not moved.
  {
    released.clear();
    snapshotted.clear();
    PrefixCache c(MakePrefixCacheOptions(500, 0));
    tier(c);
    c.InsertSlot("o", a, 3);
    ASSERT_TRUE(c.ReleaseOldestSlot());
    EXPECT_TRUE(snapshotted.empty());
    EXPECT_EQ(released, std::vector<int>{3});
    EXPECT_EQ(c.stats().entries + c.device_entries(), 0);
    EXPECT_FALSE(c.ReleaseOldestSlot());
  }
  // Off (options.device_tier false, or the cache off): a slot handed in goes back at once.
  {
    released.clear();
    PrefixCacheOptions o = MakePrefixCacheOptions(1040, 0);
    o.device_tier = false;
    PrefixCache c(o);
    tier(c);
    EXPECT_FALSE(c.device_tier());
    c.InsertSlot("o", a, 5);
    EXPECT_EQ(released, std::vector<int>{5});
    EXPECT_EQ(c.device_entries(), 0);
  }
}

// The device tier's token lists are host memory: within the host budget (a pool sized from a big
// GPU has thousands of free slots to lend). Over it, the least recently used entries go back to the
// pool, their states to host RAM where the budget takes them.
TEST(PrefixCacheIndexTest, DeviceTierKeysStayWithinTheHostBudget) {
  std::vector<int> released;
  PrefixCache c(MakePrefixCacheOptions(1000, 0));
  c.SetSlotTier({[&](int) -> absl::StatusOr<HostState> { return FakeState(100, 900); },
                 [&](int slot) { released.push_back(slot); }, 900});
  const std::vector<int32_t> a = Range(100), b = Range(100, 1000), d = Range(100, 2000);
  c.InsertSlot("o", a, 1);  // 400 bytes of key
  c.InsertSlot("o", b, 2);  // 800
  EXPECT_TRUE(released.empty());
  EXPECT_TRUE(c.DeviceTierFits(50));   // 1,000
  EXPECT_FALSE(c.DeviceTierFits(51));  // 1,004
  EXPECT_EQ(c.device_entries(), 2);
  c.InsertSlot("o", d, 3);  // 1,200 > 1,000: a, the oldest, goes (900 + 400 bytes: dropped)
  EXPECT_EQ(released, std::vector<int>{1});
  EXPECT_EQ(c.device_entries(), 2);
  EXPECT_FALSE(c.Contains("o", a));
  EXPECT_TRUE(c.Contains("o", b) && c.Contains("o", d));
  // Taken and released entries give their key bytes back: two more fit after one is taken.
  EXPECT_EQ(c.TakeSlot("o", b), 2);
  c.InsertSlot("o", Range(100, 3000), 4);
  EXPECT_EQ(released, std::vector<int>{1});
  EXPECT_EQ(c.device_entries(), 2);
  // One key longer than the whole budget is not kept.
  c.InsertSlot("o", Range(300, 4000), 5);
  EXPECT_EQ(c.device_entries(), 0) << "1,200 bytes alone: every entry went";
  std::sort(released.begin(), released.end());
  EXPECT_EQ(released, (std::vector<int>{1, 3, 4, 5}));
}

}  // namespace
}  // namespace linfer
