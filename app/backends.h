// The executors `--backend NAME` can select in this build.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "core/executor.h"

namespace tandem::app {

// Every backend name tandem knows, built into this binary or not: host, sim, cuda, nccl.
std::span<const std::string_view> known_backends();

// The executor for `name`. Throws Error(kUnsupported) for a known backend this build lacks
// ("backend 'sim' is not available in this build yet") and Error(kInvalidArgument) for an unknown
// name (listing the known ones).
std::unique_ptr<Executor> make_executor(std::string_view name);

}  // namespace tandem::app
