#include "core/host_memory.h"

#include <fstream>

#include "core/error.h"

namespace tandem {

std::optional<double> available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024.0;
  }
  return std::nullopt;
}

void require_host_memory(double needed_bytes, const std::string& what) {
  const std::optional<double> available = available_memory_bytes();
  if (available && needed_bytes > kMemoryHeadroom * *available) {
    fail(ErrorCode::kInvalidArgument, "{} needs {:.1f} GiB of host memory; {:.1f} GiB is available", what,
         needed_bytes / double(1 << 30), *available / double(1 << 30));
  }
}

}  // namespace tandem
