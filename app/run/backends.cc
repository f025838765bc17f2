#include "app/run/backends.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/host/host_executor.h"
#include "core/error.h"
#include "sim/sim_executor.h"
#ifdef TANDEM_HAVE_CUDA
#include "backend/cuda/cuda_executor.h"
#include "backend/nccl/nccl_executor.h"
#endif

namespace tandem::app {

namespace {
constexpr std::array<std::string_view, 5> kKnownBackends{"host", "sim", "cuda", "nccl", "nccl-native"};
}  // namespace

std::span<const std::string_view> known_backends() { return kKnownBackends; }

bool backend_built(std::string_view name) {
#ifdef TANDEM_HAVE_CUDA
  return std::find(kKnownBackends.begin(), kKnownBackends.end(), name) != kKnownBackends.end();
#else
  return name == "host" || name == "sim";
#endif
}

#ifdef TANDEM_HAVE_CUDA
namespace {
// The device backends, with the backend's name in front of their errors ("backend 'cuda': no CUDA
// device: ...").
std::unique_ptr<Executor> make_device_executor(std::string_view name) {
  try {
    if (name == "cuda") {
      // TANDEM_CUDA_GRAPH=1: launch each run as a CUDA graph (docs/real-hardware.md).
      const char* graph = std::getenv("TANDEM_CUDA_GRAPH");
      return std::make_unique<cuda::CudaExecutor>(
          cuda::CudaOptions{.graph = graph != nullptr && std::string_view(graph) == "1"});
    }
    const nccl::NcclMode mode = name == "nccl" ? nccl::NcclMode::kSchedule : nccl::NcclMode::kNative;
    return std::make_unique<nccl::NcclExecutor>(nccl::NcclOptions{.mode = mode});
  } catch (const Error& error) {
    fail(error.code(), "backend '{}': {}", name, error.what());
  }
}
}  // namespace
#endif

std::unique_ptr<Executor> make_sim_executor(const models::ClusterSpec& cluster, const sim::NetworkModel& network) {
  return std::make_unique<sim::SimExecutor>(cluster, sim::SimExecutorOptions{.network = network});
}

std::unique_ptr<Executor> make_executor(std::string_view name) {
  if (name == "host") return std::make_unique<HostExecutor>();
  if (name == "sim") return make_sim_executor(models::cluster_preset("dgx-h100"));
#ifdef TANDEM_HAVE_CUDA
  if (name == "cuda" || name == "nccl" || name == "nccl-native") return make_device_executor(name);
#endif
  if (std::find(kKnownBackends.begin(), kKnownBackends.end(), name) != kKnownBackends.end()) {
    fail(ErrorCode::kUnsupported,
         "backend '{}' is not in this build: it needs the CUDA toolkit and NCCL at configure time "
         "(docs/real-hardware.md)",
         name);
  }
  fail(ErrorCode::kInvalidArgument, "unknown backend '{}'; backends: {}", name, fmt::join(kKnownBackends, ", "));
}

}  // namespace tandem::app
