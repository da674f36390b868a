// UTF-8 validation and lossy repair (see utf8.h).
#include "models/tokenizer/utf8.h"

#include "absl/strings/str_cat.h"

namespace linfer::tokenizer {
namespace {

// Length of the longest valid prefix (1..4) of a sequence at `p` with `avail` bytes, and whether
// that prefix is a complete character. Follows the Unicode "maximal subpart" rule.
struct Prefix {
  int length;
  bool complete;
};

Prefix ValidPrefix(const unsigned char* p, size_t avail) {
  const unsigned char b = p[0];
  if (b < 0x80) return {1, true};
  int width = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    width = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    width = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    width = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return {1, false};
  }
  int n = 1;
  if (avail < 2 || p[1] < lo || p[1] > hi) return {1, false};
  n = 2;
  while (n < width) {
    if (static_cast<size_t>(n) >= avail || p[n] < 0x80 || p[n] > 0xBF) return {n, false};
    ++n;
  }
  return {n, true};
}

}  // namespace

absl::Status ValidateUtf8(absl::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const Prefix prefix = ValidPrefix(p + i, text.size() - i);
    if (!prefix.complete) {
      return absl::InvalidArgumentError(
          absl::StrCat("input is not valid UTF-8 (bad byte sequence at offset ", i, ")"));
    }
    i += prefix.length;
  }
  return absl::OkStatus();
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string LossyUtf8(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0;
  while (i < bytes.size()) {
    const Prefix prefix = ValidPrefix(p + i, bytes.size() - i);
    if (prefix.complete) {
      out.append(bytes.data() + i, prefix.length);
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += prefix.length;
  }
  return out;
}

bool EndsWithReplacementChar(absl::string_view text) {
  return text.size() >= 3 && text.substr(text.size() - 3) == "\xEF\xBF\xBD";
}

}  // namespace linfer::tokenizer
