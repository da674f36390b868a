// Unicode character properties and string transforms (ICU), with the semantics of the Rust
// functions the reference tokenizers library calls (char::is_whitespace, to_lowercase, nfc...).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace linfer::tokenizer {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// Rust char::is_whitespace: the Unicode White_Space property.
bool IsWhitespace(char32_t c);
// Rust char::is_numeric: general category Nd, Nl or No.
bool IsNumeric(char32_t c);
// ASCII punctuation (Rust is_ascii_punctuation) or general category P*.
bool IsPunctuation(char32_t c);
// Rust regex `\w`: Alphabetic, Mark, Decimal_Number, Connector_Punctuation or Join_Control.
bool IsWordChar(char32_t c);
// Combining mark (general category Mn), as StripAccents removes after NFD.
bool IsNonSpacingMark(char32_t c);

// Applies a Unicode normalization form to valid UTF-8 text.
absl::StatusOr<std::string> Normalize(absl::string_view text, NormalForm form);

// Lowercases character by character with the full (one-to-many) mapping and no context, as
// Rust's char::to_lowercase does.
std::string Lowercase(absl::string_view text);

}  // namespace linfer::tokenizer
