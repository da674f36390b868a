// The GPT-2 byte-level alphabet: every byte maps to one printable code point (U+0021..U+0143),
// so that any byte string becomes a string of "byte characters" and back.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace linfer::tokenizer {

// The code point that stands for byte `b`.
char32_t ByteToChar(unsigned char b);

// The byte a code point stands for, or -1 when `c` is not in the alphabet.
int CharToByte(char32_t c);

// Maps every byte of `bytes` to its character (UTF-8 output).
std::string ByteLevelEncode(absl::string_view bytes);

// Appends the bytes of a token written in byte characters; when some character is outside the
// alphabet, appends the token's own UTF-8 bytes instead (as the reference decoder does).
void ByteLevelDecodeToken(absl::string_view token, std::string* out);

}  // namespace linfer::tokenizer
