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
  int64_t cache_limit = int64_t{1} << 30;  // free pinned bytes kept for reuse
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

void UsePinnedHostStates(Device device, int64_t cache_limit_bytes) {
  PinnedPool& pool = Pool();
  std::vector<void*> trimmed;  // free blocks beyond a lowered limit go back to the system
  Device old_device;
  {
    absl::MutexLock lock(&pool.mu);
    old_device = pool.device;
    pool.device = device;
    pool.cache_limit = cache_limit_bytes;
    pool.enabled = true;
    for (auto it = pool.free.rbegin(); it != pool.free.rend(); ++it) {
      while (pool.stats.cached_bytes > pool.cache_limit && !it->second.empty()) {
        trimmed.push_back(it->second.back());
        it->second.pop_back();
        pool.stats.cached_bytes -= static_cast<int64_t>(it->first);
        pool.stats.pinned_bytes -= static_cast<int64_t>(it->first);
        ++pool.stats.pinned_frees;
      }
    }
  }
  for (void* block : trimmed) FreePinnedHostMemory(old_device, block);
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
  Device device;
  {
    absl::MutexLock lock(&pool.mu);
    // A free block of this class or up to a quarter larger (KV sizes vary with the tokens).
    for (auto it = pool.free.lower_bound(cls); it != pool.free.end() && it->first <= cls + cls / 4;
         ++it) {
      if (it->second.empty()) continue;
      void* block = it->second.back();
      it->second.pop_back();
      pool.stats.cached_bytes -= static_cast<int64_t>(it->first);
      ++pool.stats.reuses;
      return Stamp(block, kPinnedMagic, it->first);
    }
    device = pool.device;
  }
  absl::StatusOr<void*> block = AllocatePinnedHostMemory(device, cls);  // slow: not under the lock
  absl::MutexLock lock(&pool.mu);
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
  Device device;
  {
    absl::MutexLock lock(&pool.mu);
    if (pool.stats.cached_bytes + static_cast<int64_t>(h.block_bytes) <= pool.cache_limit) {
      pool.free[h.block_bytes].push_back(block);
      pool.stats.cached_bytes += static_cast<int64_t>(h.block_bytes);
      return;
    }
    pool.stats.pinned_bytes -= static_cast<int64_t>(h.block_bytes);
    ++pool.stats.pinned_frees;
    device = pool.device;
  }
  // Beyond the cache's limit the block goes back to the system (cudaFreeHost waits for the
  // device: rare by construction, when the host budgets shrink the states' sizes mix).
  FreePinnedHostMemory(device, block);
}

}  // namespace linfer
