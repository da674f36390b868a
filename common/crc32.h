// CRC-32 (zlib's) of a byte string of any length (zlib takes at most 4 GiB per call).
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace linfer {

inline uint32_t Crc32(absl::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (!bytes.empty()) {
    const uInt part = static_cast<uInt>(std::min<size_t>(bytes.size(), size_t{1} << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), part);
    bytes.remove_prefix(part);
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace linfer
