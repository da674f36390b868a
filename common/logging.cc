// Log(): one fprintf per line so concurrent lines do not interleave.
#include "common/logging.h"

#include <cstdio>
#include <ctime>

namespace linfer {

void Log(LogLevel level, absl::string_view message) {
  const char tag = level == LogLevel::kInfo ? 'I' : level == LogLevel::kWarning ? 'W' : 'E';
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::fprintf(stderr, "%c %s linfer: %.*s\n", tag, stamp, static_cast<int>(message.size()),
               message.data());
}

}  // namespace linfer
