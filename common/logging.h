// Minimal leveled logging to stderr (the Debian Abseil has no absl/log).
#pragma once

#include "absl/strings/string_view.h"

namespace linfer {

enum class LogLevel { kInfo, kWarning, kError };

// Writes "<level> <time> <message>\n" to stderr in one write. Thread-safe.
void Log(LogLevel level, absl::string_view message);

}  // namespace linfer
