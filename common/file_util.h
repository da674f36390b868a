// Whole-file reading and writing with errors that name the file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace linfer {

// What ReadFile reads unless told otherwise: configuration-sized files (JSON, templates, keys,
// certificates).
inline constexpr int64_t kMaxTextFileBytes = int64_t{64} << 20;

enum class FileKinds {
  kRegularOnly,  // files a directory holds (a model's, the server's own): a FIFO is refused
  kAlsoStreams,  // a file the user named: also a FIFO or character device (/dev/stdin, <(...)),
                 // read to its end as `cat` would
};

// Reads a whole regular file (binary). NotFound when it cannot be opened; FailedPrecondition when
// it is not a regular file (a directory; a FIFO, never waited on, unless kAlsoStreams) or holds
// more than `max_bytes`; ResourceExhausted when there is not the memory for it; DataLoss when
// reading fails part-way.
absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes = kMaxTextFileBytes,
                                     FileKinds kinds = FileKinds::kRegularOnly);

// A stream's bytes (a pipe, a terminal) read to its end, at most `max_bytes`.
absl::StatusOr<std::string> ReadStream(int fd, const std::string& path, int64_t max_bytes);

// The same for a descriptor the caller opened (and closes), read from offset 0 whatever its
// position; `path` names the file in errors.
absl::StatusOr<std::string> ReadOpenFile(int fd, const std::string& path, int64_t max_bytes);

// Writes `bytes` to `path` atomically: a temporary file beside it (PATH.tmp.PID, mode `mode`),
// fsync, rename, fsync of the directory. A crash leaves either the old file or the new one, never
// a torn one. `durable` false skips the fsyncs (for caches that need not survive a crash).
absl::Status WriteFileAtomic(const std::string& path, absl::string_view bytes, int mode = 0600,
                             bool durable = true);

// Whether `path` is a temporary of WriteFileAtomic (PATH.tmp.PID) whose process is gone: a write
// that a killed process never finished.
bool IsStaleTemporary(const std::string& path);

// A directory this process keeps its files in (`what` names it in errors, e.g.
// "--session_disk_dir"). One that exists must be a directory it can write into, and its mode is
// left as it is (it must be readable, writable and searchable); one that does not is made, with
// its missing parents, the last mode 0700.
// FailedPrecondition naming `what` and `path` otherwise (a file, a dangling link, no access).
absl::Status PrepareDirectory(const std::string& path, absl::string_view what);

// An exclusive flock(2) on DIR/.linfer.lock, held while the object lives: one server per disk
// directory (two on one directory would index, overwrite and remove each other's files).
class DirectoryLock {
 public:
  // FailedPrecondition naming `what` and `dir` when another process (or another DirectoryLock)
  // holds it, or the lock file cannot be made.
  static absl::StatusOr<DirectoryLock> Acquire(const std::string& dir, absl::string_view what);
  DirectoryLock(DirectoryLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  ~DirectoryLock();

 private:
  explicit DirectoryLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Raises this process's soft limit on open descriptors to the hard one (servers and load
// generators hold one per connection) and returns the soft limit in force afterwards.
uint64_t RaiseDescriptorLimit();

}  // namespace linfer
