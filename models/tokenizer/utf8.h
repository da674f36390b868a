// UTF-8 helpers: validation, code point iteration, and lossy repair with the same replacement
// rule as Rust's String::from_utf8_lossy (one U+FFFD per maximal invalid subpart).
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace linfer::tokenizer {

// OK when `text` is well-formed UTF-8; otherwise InvalidArgument naming the byte offset.
absl::Status ValidateUtf8(absl::string_view text);

// Length in bytes of the sequence starting with lead byte `b` (1 for invalid leads).
inline int Utf8SequenceLength(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xF0) return 4;
  if (b >= 0xE0) return 3;
  if (b >= 0xC0) return 2;
  return 1;
}

// Decodes the code point at `text[pos]`; `text` must be valid UTF-8. Sets `*len` to its length.
inline char32_t DecodeUtf8(absl::string_view text, size_t pos, int* len) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  const int n = Utf8SequenceLength(p[0]);
  *len = n;
  switch (n) {
    case 1:
      return p[0];
    case 2:
      return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    case 3:
      return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    default:
      return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
             (p[3] & 0x3Fu);
  }
}

// Appends the UTF-8 encoding of `cp` to `out`.
void AppendUtf8(char32_t cp, std::string* out);

// Returns `bytes` with every invalid sequence replaced by U+FFFD (Rust from_utf8_lossy rule).
std::string LossyUtf8(absl::string_view bytes);

// True when `text` ends with U+FFFD.
bool EndsWithReplacementChar(absl::string_view text);

}  // namespace linfer::tokenizer
