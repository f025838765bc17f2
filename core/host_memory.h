// Host memory for the commands that build or run large things (schedules, the host backend's rank
// threads, the simulator's actors, rank buffers): aligned rank buffers, the budget a command may
// plan on, and one check that a run fits in it, made before the run starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <string>

namespace tandem {

// Buffers start on cache-line boundaries.
inline constexpr std::align_val_t kBufferAlignment{64};
// Leave this share of the measured available memory to everything else (not applied to an
// explicit TANDEM_MEMORY_LIMIT).
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

// The memory a command may plan on and where that figure comes from.
struct MemoryBudget {
  double bytes = 0;
  std::string source;  // "MemAvailable", "the cgroup's memory.max", "TANDEM_MEMORY_LIMIT"
};

// TANDEM_MEMORY_LIMIT when set (a size as the size options take it: bytes, or binary K, M, G: "512M"), else
// kMemoryHeadroom of the lower of /proc/meminfo's MemAvailable and what the process's cgroup (v2)
// has left under memory.max. Empty where none can be read. Throws Error(kInvalidArgument) for a
// malformed TANDEM_MEMORY_LIMIT.
std::optional<MemoryBudget> memory_budget();

// Throws Error(kInvalidArgument) "<what> needs 12.3 GiB of host memory; 9.8 GiB is available
// (MemAvailable)<advice>" when `needed_bytes` exceeds the budget (nothing when it is unknown).
// `advice` starts with "; " or is empty.
void require_host_memory(double needed_bytes, const std::string& what, const std::string& advice = "");

// A figure of bytes for messages: "812 MiB", "3.4 GiB".
std::string memory_text(double bytes);

}  // namespace tandem
