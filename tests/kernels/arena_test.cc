// Arena (kernels/context.h): bump allocation, Reset's coalescing into one block sized by the most
// bytes live at once, and the rewind that lets an op hand its scratch to the ops after it.
#include <gtest/gtest.h>

#include "kernels/context.h"

namespace linfer {
namespace {

void* Bytes(Arena& arena, int64_t n) {
  absl::StatusOr<TensorView> v = arena.Allocate(DType::kF32, {n / 4});
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? v->raw() : nullptr;
}

TEST(ArenaTest, ScratchScopeHandsItsBytesToTheNextAllocation) {
  Arena arena(Device::kCpu);
  ExecContext ctx = CpuContext(&arena);
  void* before = Bytes(arena, 4096);
  void* inside = nullptr;
  {
    const ScratchScope scope(ctx);
    inside = Bytes(arena, 65536);
    EXPECT_NE(Bytes(arena, 1024), inside);
    EXPECT_EQ(arena.peak_bytes(), 4096 + 65536 + 1024);
  }
  EXPECT_EQ(Bytes(arena, 256), inside);  // reused after the scope
  EXPECT_NE(before, inside);
  EXPECT_EQ(arena.peak_bytes(), 4096 + 65536 + 1024);  // the peak stays
}

TEST(ArenaTest, ResetCoalescesToThePeakNotTheSum) {
  Arena arena(Device::kCpu);
  ExecContext ctx = CpuContext(&arena);
  constexpr int64_t kBig = int64_t{3} << 20;  // over the 1 MiB first block: a second block
  Bytes(arena, 1 << 20);
  for (int layer = 0; layer < 8; ++layer) {
    const ScratchScope scope(ctx);
    Bytes(arena, kBig);
  }
  // Scopes 0 and 1 each had to add a block (3 MiB, then 6 MiB: their bytes stay used until
  // Reset); the later ones rewind within the 6 MiB block. Without rewinds: 1 + 8 · 3 MiB.
  constexpr int64_t kPeak = (1 << 20) + 3 * kBig;
  EXPECT_EQ(arena.peak_bytes(), kPeak);
  arena.Reset();
  EXPECT_EQ(arena.capacity_bytes(), kPeak);
  // The same step again fits the one block: nothing more is allocated and scopes reuse it.
  Bytes(arena, 1 << 20);
  void* first = nullptr;
  for (int layer = 0; layer < 8; ++layer) {
    const ScratchScope scope(ctx);
    void* p = Bytes(arena, kBig);
    if (layer == 0) first = p;
    EXPECT_EQ(p, first) << layer;
  }
  EXPECT_EQ(arena.capacity_bytes(), kPeak);
  EXPECT_EQ(arena.peak_bytes(), (1 << 20) + kBig);
}

// Reserve: one block of at least the bytes asked for, so a step of that size adds none; never
// smaller than what the arena holds, and only with nothing allocated.
TEST(ArenaTest, ReserveMakesOneBlockOfAtLeastTheBytes) {
  Arena arena(Device::kCpu);
  ASSERT_TRUE(arena.Reserve(int64_t{5} << 20).ok());
  EXPECT_EQ(arena.capacity_bytes(), int64_t{5} << 20);
  void* first = Bytes(arena, int64_t{2} << 20);
  Bytes(arena, int64_t{3} << 20);
  EXPECT_EQ(arena.capacity_bytes(), int64_t{5} << 20);  // both fit: no block added
  EXPECT_EQ(arena.Reserve(1 << 20).code(), absl::StatusCode::kFailedPrecondition);
  arena.Reset();
  ASSERT_TRUE(arena.Reserve(1 << 20).ok());  // smaller: the block stays
  EXPECT_EQ(arena.capacity_bytes(), int64_t{5} << 20);
  EXPECT_EQ(Bytes(arena, 1024), first);
  arena.Reset();
  ASSERT_TRUE(arena.Reserve(int64_t{7} << 20).ok());
  EXPECT_EQ(arena.capacity_bytes(), int64_t{7} << 20);
}

TEST(ArenaTest, ScopeWithoutAnArenaDoesNothing) {
  const ExecContext ctx = CpuContext(nullptr);
  const ScratchScope scope(ctx);  // no crash, no effect
  SUCCEED();
}

}  // namespace
}  // namespace linfer
