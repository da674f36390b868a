// Host-state memory (models/host_memory.h) with the recycling pool on: blocks are aligned and
// writable, a freed block is reused by the next state of its size class, the classes waste at
// most 1/8, heap blocks from before the switch are still freed correctly, states copy and move,
// and threads can allocate and free at once. The pool runs here over plain memory
// (UsePinnedHostStates(kCpu)); on CUDA the same code hands out cudaHostAlloc blocks. Its own
// binary: the switch is process-wide.
#include "models/host_memory.h"

#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "models/state.h"

namespace linfer {
namespace {

TEST(HostStateMemoryTest, PinnedBlocksAreRecycledBySizeClass) {
  HostBytes before(1000, 7);  // a heap block from before the switch
  UsePinnedHostStates(Device::kCpu);
  const HostStateMemoryStats s0 = GetHostStateMemoryStats();
  {
    HostBytes a(100000, 1);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    EXPECT_EQ(a[99999], 1);
  }
  const HostStateMemoryStats s1 = GetHostStateMemoryStats();
  EXPECT_EQ(s1.pinned_allocations, s0.pinned_allocations + 1);
  EXPECT_GT(s1.cached_bytes, s0.cached_bytes);
  // At most 1/8 (and the header) more than asked for.
  EXPECT_LE(s1.pinned_bytes - s0.pinned_bytes, 100000 + 100000 / 8 + 64 + 4096);
  {
    HostBytes b(99000, 2);  // the same class: the freed block again
    std::memset(b.data(), 3, b.size());
  }
  const HostStateMemoryStats s2 = GetHostStateMemoryStats();
  EXPECT_EQ(s2.pinned_allocations, s1.pinned_allocations);
  EXPECT_EQ(s2.reuses, s1.reuses + 1);
  EXPECT_EQ(s2.pinned_bytes, s1.pinned_bytes);
  EXPECT_EQ(before[999], 7);
  before = HostBytes(5, 1);  // the old heap block goes back to the heap
  HostState x;
  x.bytes.assign(3000, 9);
  x.kv_bytes.assign(70000, 4);
  HostState y = x;  // copies are independent blocks
  y.bytes[0] = 1;
  EXPECT_EQ(x.bytes[0], 9);
  HostState z = std::move(x);
  EXPECT_EQ(z.kv_bytes.size(), 70000u);
  EXPECT_EQ(z.total_bytes(), 73000);
}

TEST(HostStateMemoryTest, ThreadsAllocateAndFreeAtOnce) {
  UsePinnedHostStates(Device::kCpu);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 500; ++i) {
        HostBytes b(static_cast<size_t>(1 + (i * 977 + t * 131) % 50000), static_cast<uint8_t>(t));
        ASSERT_EQ(b.back(), static_cast<uint8_t>(t));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const HostStateMemoryStats s = GetHostStateMemoryStats();
  EXPECT_EQ(s.cached_bytes, s.pinned_bytes);  // everything is back in the free lists
  EXPECT_GT(s.reuses, 1000);
}

TEST(HostStateMemoryTest, NearbyClassesShareBlocksAndTheCacheIsBounded) {
  UsePinnedHostStates(Device::kCpu);
  { HostBytes big(100000, 1); }
  const HostStateMemoryStats s0 = GetHostStateMemoryStats();
  { HostBytes smaller(85000, 2); }  // a class under a quarter smaller: the same block
  const HostStateMemoryStats s1 = GetHostStateMemoryStats();
  EXPECT_EQ(s1.pinned_allocations, s0.pinned_allocations);
  EXPECT_EQ(s1.reuses, s0.reuses + 1);
  // A cache of 256 KiB (what was cached beyond it goes at once): of six 100 kB states freed
  // together, only two stay cached.
  UsePinnedHostStates(Device::kCpu, 256 << 10);
  EXPECT_LE(GetHostStateMemoryStats().cached_bytes, 256 << 10);
  {
    std::vector<HostBytes> many;
    for (int i = 0; i < 6; ++i) many.emplace_back(100000, 3);
  }
  const HostStateMemoryStats s2 = GetHostStateMemoryStats();
  EXPECT_LE(s2.cached_bytes, 256 << 10);
  EXPECT_GE(s2.pinned_frees, s1.pinned_frees + 3);
  EXPECT_EQ(s2.cached_bytes, s2.pinned_bytes);  // nothing is in use
  UsePinnedHostStates(Device::kCpu);            // back to the default for the other tests
}

}  // namespace
}  // namespace linfer
