// Whole-file reading and writing with errors that name the file.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace linfer {

// What ReadFile reads unless told otherwise: configuration-sized files (JSON, templates, keys,
// certificates).
inline constexpr int64_t kMaxTextFileBytes = int64_t{64} << 20;

// Reads a whole regular file (binary). NotFound when it cannot be opened; FailedPrecondition when
// it is not a regular file (a directory, a FIFO: never waited on) or is larger than `max_bytes`;
// DataLoss when reading fails part-way.
absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     int64_t max_bytes = kMaxTextFileBytes);

// The same for a descriptor the caller opened (and closes), read from offset 0 whatever its
// position; `path` names the file in errors.
absl::StatusOr<std::string> ReadOpenFile(int fd, const std::string& path, int64_t max_bytes);

// Writes `bytes` to `path` atomically: a temporary file beside it (PATH.tmp.PID, mode `mode`),
// fsync, rename, fsync of the directory. A crash leaves either the old file or the new one, never
// a torn one. `durable` false skips the fsyncs (for caches that need not survive a crash).
absl::Status WriteFileAtomic(const std::string& path, absl::string_view bytes, int mode = 0600,
                             bool durable = true);

// Raises this process's soft limit on open descriptors to the hard one (servers and load
// generators hold one per connection) and returns the soft limit in force afterwards.
uint64_t RaiseDescriptorLimit();

}  // namespace linfer
