// Minimal leveled logging to stderr (the Debian Abseil has no absl/log).
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace linfer {

enum class LogLevel { kInfo, kWarning, kError };

// Writes "<level> <time> <message>\n" to stderr in one write, the message as LogLine gives it.
// Thread-safe.
void Log(LogLevel level, absl::string_view message);

// What Log writes of `message`: one line whatever it carries (names from files, headers and
// requests) — control characters and bytes that are not UTF-8 as \xNN, and past
// kMaxLogMessageBytes cut with a count of the rest.
inline constexpr size_t kMaxLogMessageBytes = 16384;
std::string LogLine(absl::string_view message);

}  // namespace linfer
