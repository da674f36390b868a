// Host-state memory: a 64-byte header before each block says how it was allocated (heap, or
// pinned of which size class); pinned blocks go back to per-class free lists.
#include "models/host_memory.h"

#include <atomic>
#include <bit>
#include <cstdlib>
#include <map>
#include <new>

#include "absl/synchronization/mutex.h"
#include "kernels/device_memory.h"

namespace linfer {
namespace {

constexpr size_t kHeader = 64;  // keeps the caller's bytes 64-byte aligned
constexpr uint64_t kHeapMagic = 0x4c4e46484541500aULL, kPinnedMagic = 0x4c4e4650494e4e0aULL;

struct Header {
  uint64_t magic;
  uint64_t block_bytes;  // pinned: the size class (header included)
};
static_assert(sizeof(Header) <= kHeader);

struct PinnedPool {
  absl::Mutex mu;
  std::atomic<bool> enabled{false};
  Device device = Device::kCpu;
  std::map<size_t, std::vector<void*>> free ABSL_GUARDED_BY(mu);  // by size class
  HostStateMemoryStats stats ABSL_GUARDED_BY(mu);
};

PinnedPool& Pool() {
  static PinnedPool* pool = new PinnedPool();  // never destroyed: blocks may outlive main's scope
  return *pool;
}

// The smallest class ≥ n: 2^k · (8 + j) / 8, j in [0, 8).
size_t SizeClass(size_t n) {
  if (n <= 4096) return 4096;
  const int k = std::bit_width(n - 1) - 4;  // n - 1 < 2^(k + 4)
  const size_t step = size_t{1} << k;
  return (n + step - 1) / step * step;
}

void* Stamp(void* block, uint64_t magic, size_t block_bytes) {
  auto* h = static_cast<Header*>(block);
  h->magic = magic;
  h->block_bytes = block_bytes;
  return static_cast<char*>(block) + kHeader;
}

void* HeapBlock(size_t n) {
  void* block = std::aligned_alloc(kHeader, (n + kHeader + kHeader - 1) / kHeader * kHeader);
  if (block == nullptr) throw std::bad_alloc();
  return Stamp(block, kHeapMagic, 0);
}

}  // namespace

void UsePinnedHostStates(Device device) {
  PinnedPool& pool = Pool();
  absl::MutexLock lock(&pool.mu);
  pool.device = device;
  pool.enabled = true;
}

HostStateMemoryStats GetHostStateMemoryStats() {
  PinnedPool& pool = Pool();
  absl::MutexLock lock(&pool.mu);
  return pool.stats;
}

void* AllocateHostStateBytes(size_t n) {
  PinnedPool& pool = Pool();
  if (!pool.enabled.load(std::memory_order_relaxed)) return HeapBlock(n);
  const size_t cls = SizeClass(n + kHeader);
  absl::MutexLock lock(&pool.mu);
  std::vector<void*>& list = pool.free[cls];
  if (!list.empty()) {
    void* block = list.back();
    list.pop_back();
    pool.stats.cached_bytes -= static_cast<int64_t>(cls);
    ++pool.stats.reuses;
    return Stamp(block, kPinnedMagic, cls);
  }
  absl::StatusOr<void*> block = AllocatePinnedHostMemory(pool.device, cls);
  if (!block.ok()) {  // out of pinned memory (or no device after all): the heap still works
    ++pool.stats.heap_fallbacks;
    return HeapBlock(n);
  }
  pool.stats.pinned_bytes += static_cast<int64_t>(cls);
  ++pool.stats.pinned_allocations;
  return Stamp(*block, kPinnedMagic, cls);
}

void FreeHostStateBytes(void* p) {
  if (p == nullptr) return;
  void* block = static_cast<char*>(p) - kHeader;
  const Header h = *static_cast<Header*>(block);
  if (h.magic == kHeapMagic) {
    std::free(block);
    return;
  }
  if (h.magic != kPinnedMagic) std::abort();  // not ours: a heap corruption, never continue
  PinnedPool& pool = Pool();
  absl::MutexLock lock(&pool.mu);
  pool.free[h.block_bytes].push_back(block);
  pool.stats.cached_bytes += static_cast<int64_t>(h.block_bytes);
}

}  // namespace linfer
