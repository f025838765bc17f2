// The executors `--backend NAME` can select in this build.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "core/executor.h"
#include "models/cluster.h"
#include "sim/simulator.h"

namespace tandem::app {

// Every backend name tandem knows, built into this binary or not: host, sim, cuda, nccl (tandem's
// schedules on NCCL), nccl-native (NCCL's own collectives).
std::span<const std::string_view> known_backends();

// Whether this binary has `name` (cuda and nccl need the CUDA toolkit and NCCL at build time).
bool backend_built(std::string_view name);

// The executor for `name`. Throws Error(kUnsupported) for a known backend this build lacks, or
// when its hardware is missing ("no CUDA device: ..."), and Error(kInvalidArgument) for an unknown
// name (listing the known ones). "sim" is sim::SimExecutor on the default cluster (one dgx-h100
// node, the default network model): make_sim_executor for another. `tandem bench --backend sim`
// and `tandem run` on sim keep their own sweep and loop paths.
std::unique_ptr<Executor> make_executor(std::string_view name);

// sim::SimExecutor on `cluster`, rank r on GPU r. SimGrid allows one platform per process: a
// second simulated executor in one process throws Error(kBackend) (sim::run_isolated, sim/isolated.h,
// runs work in a child process).
std::unique_ptr<Executor> make_sim_executor(const models::ClusterSpec& cluster,
                                            const sim::NetworkModel& network = sim::NetworkModel{});

}  // namespace tandem::app
