// The executors `--backend NAME` can select in this build.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "core/executor.h"

namespace tandem::app {

// Every backend name tandem knows, built into this binary or not: host, sim, cuda, nccl (tandem's
// schedules on NCCL), nccl-native (NCCL's own collectives).
std::span<const std::string_view> known_backends();

// Whether this binary has `name` (cuda and nccl need the CUDA toolkit and NCCL at build time).
bool backend_built(std::string_view name);

// The executor for `name`. Throws Error(kUnsupported) for a known backend this build lacks, or
// when its hardware is missing ("no CUDA device: ..."), and Error(kInvalidArgument) for an unknown
// name (listing the known ones).
std::unique_ptr<Executor> make_executor(std::string_view name);

}  // namespace tandem::app
