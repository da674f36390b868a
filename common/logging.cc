// Log: one line per message, whatever bytes the message carries.
#include "common/logging.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace linfer {
namespace {

// The length of the valid UTF-8 sequence at s[i] (1–4), or 0 when it is not one.
size_t Utf8Length(absl::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  }
  if (n == 3 && ((c == 0xE0 && b(i + 1) < 0xA0) || (c == 0xED && b(i + 1) >= 0xA0))) return 0;
  if (n == 4 && ((c == 0xF0 && b(i + 1) < 0x90) || (c == 0xF4 && b(i + 1) >= 0x90))) return 0;
  return n;
}

// C1 controls (U+0080–U+009F: NEL, CSI), the line and paragraph separators and the bidi
// controls: terminals and log viewers may break a line or reorder text at them.
bool LayoutCharacter(absl::string_view utf8) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(utf8[k]); };
  if (utf8.size() == 2) return b(0) == 0xC2 && b(1) < 0xA0;
  if (utf8.size() != 3 || b(0) != 0xE2) return false;
  const unsigned cp = (b(1) & 0x3Fu) << 6 | (b(2) & 0x3Fu);  // U+2000 + cp
  return (cp >= 0x28 && cp <= 0x2E) || (cp >= 0x66 && cp <= 0x69) || cp == 0x0E || cp == 0x0F;
}

}  // namespace

std::string LogLine(absl::string_view message) {
  std::string out;
  const size_t shown = std::min(message.size(), kMaxLogMessageBytes);
  out.reserve(shown + 16);
  for (size_t i = 0; i < shown;) {
    const unsigned char c = static_cast<unsigned char>(message[i]);
    if (c >= 0x20 && c < 0x7F) {
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (size_t n = c >= 0x80 ? Utf8Length(message, i) : 0;
               n > 0 && !LayoutCharacter(message.substr(i, n))) {
      out.append(message.data() + i, n);
      i += n;
    } else {  // control characters (a newline could forge a line) and invalid UTF-8
      absl::StrAppendFormat(&out, "\\x%02x", c);
      ++i;
    }
  }
  if (shown < message.size()) {
    absl::StrAppend(&out, "... (", message.size() - shown, " more bytes)");
  }
  return out;
}

void Log(LogLevel level, absl::string_view message) {
  const char tag = level == LogLevel::kInfo ? 'I' : level == LogLevel::kWarning ? 'W' : 'E';
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
  const std::string text = LogLine(message);
  std::fprintf(stderr, "%c %s linfer: %s\n", tag, stamp, text.c_str());
}

}  // namespace linfer
