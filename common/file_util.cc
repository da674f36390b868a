// ReadFile / WriteFileAtomic over POSIX file descriptors.
#include "common/file_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace linfer {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

bool WriteAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes, FileKinds kinds) {
  struct stat st {};
  const bool stream = kinds == FileKinds::kAlsoStreams && ::stat(path.c_str(), &st) == 0 &&
                      (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode));
  // O_NONBLOCK unless a stream is welcome: opening a FIFO would wait for a writer;
  // ReadOpenFile refuses it as not regular.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (stream ? 0 : O_NONBLOCK));
  if (fd < 0)
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  absl::StatusOr<std::string> out =
      stream ? ReadStream(fd, path, max_bytes) : ReadOpenFile(fd, path, max_bytes);
  ::close(fd);
  return out;
}

absl::StatusOr<std::string> ReadStream(int fd, const std::string& path, int64_t max_bytes) {
  std::string out;
  try {
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return absl::DataLossError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
      }
      if (n == 0) return out;
      if (static_cast<int64_t>(out.size()) + n > max_bytes) {
        return absl::FailedPreconditionError(
            absl::StrCat(path, " holds more than the limit of ", max_bytes, " bytes"));
      }
      out.append(buf, static_cast<size_t>(n));
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("not enough memory to read ", path, " (", out.size(), " bytes so far)"));
  }
}

absl::StatusOr<std::string> ReadOpenFile(int fd, const std::string& path, int64_t max_bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  if (st.st_size > max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is ", st.st_size, " bytes, more than the limit of ", max_bytes));
  }
  std::string out;
  try {
    out.resize(static_cast<size_t>(st.st_size));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("not enough memory to read ", path, " (", st.st_size, " bytes)"));
  }
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (done != out.size()) {
    return absl::DataLossError(
        absl::StrCat("short read of ", path, " (", done, " of ", out.size(), " bytes)"));
  }
  return out;
}

bool IsStaleTemporary(const std::string& path) {
  const size_t at = path.rfind(".tmp.");
  int64_t pid = 0;
  if (at == std::string::npos || !absl::SimpleAtoi(path.substr(at + 5), &pid) || pid <= 0 ||
      pid > INT32_MAX || pid == ::getpid()) {
    return false;
  }
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

absl::Status WriteFileAtomic(const std::string& path, absl::string_view bytes, int mode,
                             bool durable) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Errno("cannot create", tmp);
  ::fchmod(fd, static_cast<mode_t>(mode));  // O_CREAT's mode is masked by the umask
  if (!WriteAll(fd, bytes) || (durable && ::fsync(fd) != 0)) {
    absl::Status s = Errno("cannot write", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = Errno("cannot rename to", path);
    ::unlink(tmp.c_str());
    return s;
  }
  if (!durable) return absl::OkStatus();
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::Status PrepareDirectory(const std::string& path, absl::string_view what) {
  auto refused = [&](absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, ": ", why));
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return refused(std::strerror(errno));
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return refused(absl::StrCat("cannot create it: ", ec.message()));
    ::chmod(path.c_str(), 0700);  // made here: for this process's user alone
    return absl::OkStatus();
  }
  if (!S_ISDIR(st.st_mode)) return refused("not a directory");
  if (::access(path.c_str(), R_OK | W_OK | X_OK) != 0) {
    return refused(absl::StrCat("cannot list and write into it (", std::strerror(errno), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DirectoryLock> DirectoryLock::Acquire(const std::string& dir,
                                                     absl::string_view what) {
  const std::string path = (std::filesystem::path(dir) / ".linfer.lock").string();
  // flock needs no write access: an existing file (another user's, in a shared directory) is
  // opened as it is, and a new one is readable by all (it holds nothing).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) {
    fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  }
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", dir, ": cannot open ", path, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " ", dir, ": another linfer server uses this directory (", path,
                       " is locked); give each server a directory of its own"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", dir, ": cannot lock ", path, ": ", std::strerror(err)));
  }
  return DirectoryLock(fd);
}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

uint64_t RaiseDescriptorLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    const rlim_t before = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) rl.rlim_cur = before;
  }
  return static_cast<uint64_t>(rl.rlim_cur);
}

}  // namespace linfer
