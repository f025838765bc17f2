#include "core/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace tandem {
namespace {

// What a file that is not a regular file is, for the message.
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

[[noreturn]] void refuse_kind(const std::filesystem::path& path, std::string_view what, mode_t mode) {
  if (S_ISDIR(mode)) fail(ErrorCode::kIo, "{} '{}' is a folder, not a file", what, path.string());
  fail(ErrorCode::kIo, "{} '{}' is {}, not a regular file", what, path.string(), kind_of(mode));
}

[[noreturn]] void refuse_size(const std::filesystem::path& path, std::string_view what, uint64_t size,
                              uint64_t max_bytes, std::string_view grew) {
  fail(ErrorCode::kIo, "{} '{}' is {}{} ({} bytes), over the limit of {} ({} bytes)", what, path.string(), grew,
       byte_size_text(size), size, byte_size_text(max_bytes), max_bytes);
}

[[noreturn]] void cannot_read(const std::filesystem::path& path, std::string_view what, int error) {
  fail(ErrorCode::kIo, "cannot read {} '{}': {}", what, path.string(), std::strerror(error));
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() { ::close(fd_); }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string byte_size_text(uint64_t bytes) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  uint64_t unit_bytes = 1;
  int unit = -1;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    unit_bytes *= 1024;
    ++unit;
  }
  if (bytes % unit_bytes == 0) return fmt::format("{} {}", bytes / unit_bytes, kUnits[unit]);
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

void read_file_bounded(const std::filesystem::path& path, uint64_t max_bytes, std::string_view what,
                       std::string& bytes) {
  // stat first: a device or a FIFO is refused without being opened (opening a FIFO for reading
  // waits for a writer; opening a device may do something).
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) cannot_read(path, what, errno);
  if (!S_ISREG(info.st_mode)) refuse_kind(path, what, info.st_mode);
  if (static_cast<uint64_t>(info.st_size) > max_bytes) refuse_size(path, what, info.st_size, max_bytes, "");

  // The path may have been replaced since: O_NONBLOCK keeps a FIFO from blocking the open, and the
  // opened file is checked again.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) cannot_read(path, what, errno);
  const FileDescriptor file(fd);
  if (::fstat(file.get(), &info) != 0) cannot_read(path, what, errno);
  if (!S_ISREG(info.st_mode)) refuse_kind(path, what, info.st_mode);
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  if (size > max_bytes) refuse_size(path, what, size, max_bytes, "");

  // One byte more than the size, so that a file that grew shows; it may grow to max_bytes + 1 at most.
  bytes.resize(static_cast<size_t>(size) + 1);
  size_t filled = 0;
  for (;;) {
    if (filled == bytes.size()) {
      if (filled > max_bytes) refuse_size(path, what, filled, max_bytes, "at least ");
      bytes.resize(static_cast<size_t>(std::min<uint64_t>(max_bytes + 1, uint64_t{2} * bytes.size())));
    }
    const ssize_t got = ::read(file.get(), bytes.data() + filled, bytes.size() - filled);
    if (got < 0) {
      if (errno == EINTR) continue;
      cannot_read(path, what, errno);
    }
    if (got == 0) break;
    filled += static_cast<size_t>(got);
  }
  if (filled > max_bytes) refuse_size(path, what, filled, max_bytes, "at least ");
  bytes.resize(filled);
}

std::string read_file_bounded(const std::filesystem::path& path, uint64_t max_bytes, std::string_view what) {
  std::string bytes;
  read_file_bounded(path, max_bytes, what, bytes);
  return bytes;
}

}  // namespace tandem
