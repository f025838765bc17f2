#include "app/backends.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/host/host_executor.h"
#include "core/error.h"

namespace tandem::app {

namespace {
constexpr std::array<std::string_view, 4> kKnownBackends{"host", "sim", "cuda", "nccl"};
}  // namespace

std::span<const std::string_view> known_backends() { return kKnownBackends; }

std::unique_ptr<Executor> make_executor(std::string_view name) {
  if (name == "host") return std::make_unique<HostExecutor>();
  if (std::find(kKnownBackends.begin(), kKnownBackends.end(), name) != kKnownBackends.end()) {
    fail(ErrorCode::kUnsupported, "backend '{}' is not available in this build yet (available: host)", name);
  }
  fail(ErrorCode::kInvalidArgument, "unknown backend '{}'; backends: {}", name, fmt::join(kKnownBackends, ", "));
}

}  // namespace tandem::app
