// About the heap memory one allocation of `n` bytes takes with glibc's malloc: 16 bytes a chunk
// beyond what was asked, rounded up to 16; nothing for nothing (an empty container allocates
// none). The memory estimates of the stored responses and the structured-output grammars use it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace linfer {

inline int64_t HeapBytes(size_t n) {
  return n == 0 ? 0 : static_cast<int64_t>((n + 16 + 15) / 16 * 16);
}

}  // namespace linfer
