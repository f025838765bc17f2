#include "core/host_memory.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string_view>

#include "core/error.h"
#include "core/file_read.h"
#include "core/sizes.h"

namespace tandem {
namespace {

std::optional<double> meminfo_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024.0;
  }
  return std::nullopt;
}

// memory.max - memory.current of this process's cgroup (v2); empty when unlimited or unknown.
std::optional<double> cgroup_left() {
  std::ifstream self("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  }
  if (path.empty()) return std::nullopt;
  const std::string dir = "/sys/fs/cgroup" + path;
  std::ifstream max_file(dir + "/memory.max"), current_file(dir + "/memory.current");
  std::string max_text;
  double current = 0;
  if (!(max_file >> max_text) || max_text == "max" || !(current_file >> current)) return std::nullopt;
  char* end = nullptr;
  const double max = std::strtod(max_text.c_str(), &end);
  if (end == max_text.c_str() || *end != '\0') return std::nullopt;
  return std::max(0.0, max - current);
}

// TANDEM_MEMORY_LIMIT's value, a size as every size option takes it (core/sizes.h).
double parse_limit(std::string_view text) {
  int64_t bytes = 0;
  try {
    bytes = parse_size_bytes(text, "TANDEM_MEMORY_LIMIT");
  } catch (const Error&) {
  }
  if (bytes <= 0) {
    fail(ErrorCode::kInvalidArgument, "TANDEM_MEMORY_LIMIT={}: expected a positive size in bytes (e.g. 512M or 8G)",
         text);
  }
  return static_cast<double>(bytes);
}

}  // namespace

std::optional<MemoryBudget> memory_budget() {
  if (const char* limit = std::getenv("TANDEM_MEMORY_LIMIT"); limit != nullptr && *limit != '\0') {
    return MemoryBudget{parse_limit(limit), "TANDEM_MEMORY_LIMIT"};
  }
  const std::optional<double> available = meminfo_available();
  const std::optional<double> cgroup = cgroup_left();
  if (cgroup && (!available || *cgroup < *available)) return MemoryBudget{kMemoryHeadroom * *cgroup, "the cgroup's memory.max"};
  if (available) return MemoryBudget{kMemoryHeadroom * *available, "MemAvailable"};
  return std::nullopt;
}

std::string memory_text(double bytes) {
  return byte_size_text(static_cast<uint64_t>(std::max(0.0, std::round(bytes))));
}

void require_host_memory(double needed_bytes, const std::string& what, const std::string& advice) {
  const std::optional<MemoryBudget> budget = memory_budget();
  if (budget && needed_bytes > budget->bytes) {
    fail(ErrorCode::kInvalidArgument, "{} needs {} of host memory; {} is available ({}){}", what,
         memory_text(needed_bytes), memory_text(budget->bytes), budget->source, advice);
  }
}

}  // namespace tandem
