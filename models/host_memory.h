// Host memory for states kept off the device: the session host tier, the prefix cache, preempted
// sequences and checkpoints (HostState's bytes). With a CUDA engine it is pinned (page-locked), so
// that the pool's copy doors move it at full PCIe bandwidth without a staging copy; otherwise, and
// whenever pinned memory runs out, plain heap memory.
//
// Pinned blocks are recycled (cudaFreeHost waits for the whole device): a freed block goes to a
// free list of its size class (powers of two split in eighths, so at most 1/8 is wasted) and the
// next state of that class, or of a class up to a quarter smaller, takes it. Free blocks beyond a
// cache limit go back to the system, so pinned memory stays within what the host budgets hold at
// once plus the limit. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/tensor.h"

namespace linfer {

// From now on, host states are allocated pinned for `device` (AllocatePinnedHostMemory): the
// engine calls it when it runs on CUDA; with kCpu the blocks are plain memory through the same
// recycling (tests). Process-wide and idempotent.
void UsePinnedHostStates(Device device, int64_t cache_limit_bytes = int64_t{1} << 30);

struct HostStateMemoryStats {
  int64_t pinned_bytes = 0;  // pinned memory held (in use + cached for reuse)
  int64_t cached_bytes = 0;  // of which free, waiting for reuse
  int64_t pinned_allocations = 0, reuses = 0, heap_fallbacks = 0, pinned_frees = 0;
};
HostStateMemoryStats GetHostStateMemoryStats();

// Raw blocks (below the allocator): n > 0 bytes, 64-byte aligned.
void* AllocateHostStateBytes(size_t n);
void FreeHostStateBytes(void* p);

template <typename T>
struct HostStateAllocator {
  using value_type = T;
  HostStateAllocator() = default;
  template <typename U>
  HostStateAllocator(const HostStateAllocator<U>&) {}  // NOLINT: allocators convert implicitly
  T* allocate(size_t n) { return static_cast<T*>(AllocateHostStateBytes(n * sizeof(T))); }
  void deallocate(T* p, size_t) { FreeHostStateBytes(p); }
  // resize(n) default-initialises (leaves bytes as they are) instead of zeroing: every state copy
  // sizes its buffer and then overwrites all of it (a 20 MB state's memset cost as much as its
  // copy over PCIe, once per snapshot, offload or export).
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const HostStateAllocator<U>&) const {
    return true;
  }
};

// A state's bytes in host memory (pinned with a CUDA engine).
using HostBytes = std::vector<uint8_t, HostStateAllocator<uint8_t>>;

}  // namespace linfer
