// Host memory for the commands that run the host backend (bench, run): aligned rank buffers and
// a check that a run fits in what the machine has.
#pragma once

#include <cstddef>
#include <new>
#include <optional>
#include <string>

namespace tandem {

// Buffers start on cache-line boundaries.
inline constexpr std::align_val_t kBufferAlignment{64};
// Leave this share of the available memory to everything else.
inline constexpr double kMemoryHeadroom = 0.9;

// An uninitialised, aligned byte buffer (filling is the caller's business: checks poison it).
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t bytes)
      : data_(static_cast<std::byte*>(::operator new[](bytes == 0 ? 1 : bytes, kBufferAlignment))) {}
  ~AlignedBuffer() { ::operator delete[](data_, kBufferAlignment); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  std::byte* data() const { return data_; }

 private:
  std::byte* data_;
};

// MemAvailable from /proc/meminfo in bytes; empty where it cannot be read.
std::optional<double> available_memory_bytes();

// Throws Error(kInvalidArgument) with `what` and the sizes when `needed_bytes` exceeds the
// headroom share of the available memory (nothing when that is unknown).
void require_host_memory(double needed_bytes, const std::string& what);

}  // namespace tandem
