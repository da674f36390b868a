// Python string / bytes literal evaluation for RWKV World vocabulary lines (see rwkv_world.h).
// Only the literal forms that Python's repr() writes, plus the escapes a hand-edited file may
// use; everything else is an error rather than a guess.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "models/tokenizer/rwkv_world.h"
#include "models/tokenizer/utf8.h"

namespace linfer::tokenizer {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Reads exactly `digits` hex digits at body[*pos] and advances past them.
absl::StatusOr<uint32_t> ReadHex(absl::string_view body, size_t* pos, int digits, char escape) {
  uint32_t value = 0;
  for (int i = 0; i < digits; ++i) {
    const int h = *pos + i < body.size() ? HexValue(body[*pos + i]) : -1;
    if (h < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("truncated \\%c escape (needs %d hex digits)", escape, digits));
    }
    value = value * 16 + static_cast<uint32_t>(h);
  }
  *pos += digits;
  return value;
}

// Appends code point `cp` of a str literal as UTF-8.
absl::Status AppendCodePoint(uint32_t cp, std::string* out) {
  if (cp > 0x10FFFF) {
    return absl::InvalidArgumentError(absl::StrFormat("code point U+%X is out of range", cp));
  }
  if (cp >= 0xD800 && cp <= 0xDFFF) {
    return absl::InvalidArgumentError(
        absl::StrFormat("surrogate U+%04X cannot be encoded as UTF-8", cp));
  }
  AppendUtf8(static_cast<char32_t>(cp), out);
  return absl::OkStatus();
}

// The value of a one-character escape (\n, \t, ...), or -1.
int SimpleEscape(char c) {
  switch (c) {
    case '\\':
    case '\'':
    case '"':
      return c;
    case 'a':
      return 7;
    case 'b':
      return 8;
    case 'f':
      return 12;
    case 'n':
      return 10;
    case 'r':
      return 13;
    case 't':
      return 9;
    case 'v':
      return 11;
    default:
      return -1;
  }
}

// Evaluates the escape at body[*pos] (just after the backslash) and advances past it.
absl::Status AppendEscape(absl::string_view body, bool is_bytes, size_t* pos, std::string* out) {
  const char c = body[(*pos)++];
  if (const int simple = SimpleEscape(c); simple >= 0) {
    out->push_back(static_cast<char>(simple));
    return absl::OkStatus();
  }
  if (c >= '0' && c <= '7') {
    uint32_t value = static_cast<uint32_t>(c - '0');
    for (int i = 0; i < 2 && *pos < body.size() && body[*pos] >= '0' && body[*pos] <= '7'; ++i) {
      value = value * 8 + static_cast<uint32_t>(body[(*pos)++] - '0');
    }
    if (value > 0377) {
      return absl::InvalidArgumentError(absl::StrFormat("octal escape \\%o is above \\377", value));
    }
    if (is_bytes) {
      out->push_back(static_cast<char>(value));
      return absl::OkStatus();
    }
    return AppendCodePoint(value, out);
  }
  if (c == 'x' || (!is_bytes && (c == 'u' || c == 'U'))) {
    const int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
    absl::StatusOr<uint32_t> value = ReadHex(body, pos, digits, c);
    if (!value.ok()) return value.status();
    if (is_bytes) {
      out->push_back(static_cast<char>(*value));
      return absl::OkStatus();
    }
    return AppendCodePoint(*value, out);
  }
  if (c == 'N' && !is_bytes) {
    return absl::InvalidArgumentError("\\N{...} escapes are not supported");
  }
  if (c >= 0x20 && c < 0x7F) {
    return absl::InvalidArgumentError(absl::StrFormat("invalid escape sequence \\%c", c));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "invalid escape sequence: backslash before byte 0x%02X", static_cast<unsigned char>(c)));
}

}  // namespace

absl::StatusOr<std::string> ParsePythonStringLiteral(absl::string_view literal) {
  if (absl::Status s = ValidateUtf8(literal); !s.ok()) return s;
  while (!literal.empty() && (literal.front() == ' ' || literal.front() == '\t')) {
    literal.remove_prefix(1);
  }
  while (!literal.empty() && (literal.back() == ' ' || literal.back() == '\t')) {
    literal.remove_suffix(1);
  }
  bool is_bytes = false;
  if (!literal.empty() && (literal.front() == 'b' || literal.front() == 'B')) {
    is_bytes = true;
    literal.remove_prefix(1);
  } else if (!literal.empty() && (literal.front() == 'u' || literal.front() == 'U')) {
    literal.remove_prefix(1);
  }
  if (literal.empty() || (literal.front() != '\'' && literal.front() != '"')) {
    return absl::InvalidArgumentError(
        "expected a Python string literal: an optional b prefix, then ' or \"");
  }
  const char quote = literal.front();
  if (literal.size() >= 3 && literal[1] == quote && literal[2] == quote) {
    return absl::InvalidArgumentError("triple-quoted literals are not supported");
  }
  const absl::string_view body = literal.substr(1);
  std::string out;
  size_t pos = 0;
  while (pos < body.size()) {
    const char c = body[pos++];
    if (c == quote) {
      if (pos != body.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("unexpected text after the closing quote at column ", pos + 1));
      }
      return out;
    }
    if (c == '\\') {
      if (pos == body.size()) break;
      if (absl::Status s = AppendEscape(body, is_bytes, &pos, &out); !s.ok()) return s;
      continue;
    }
    if (is_bytes && static_cast<unsigned char>(c) >= 0x80) {
      return absl::InvalidArgumentError("bytes literals may hold only ASCII characters");
    }
    out.push_back(c);
  }
  return absl::InvalidArgumentError("unterminated string literal (no closing quote)");
}

}  // namespace linfer::tokenizer
