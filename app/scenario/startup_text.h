// The start-up table (sim/startup.h) as `tandem reliability`, `tandem plan` and start-up scenarios
// print it: one row per job, one column per phase, seconds.
#pragma once

#include <span>
#include <string>

#include "sim/startup.h"

namespace tandem::app {

// Rows of `label` (the first column's header; each row's label is label_of[i] when given, else its
// GPU count), then launch, store, communicators, group barriers (only when some row has them), first
// collectives and the total. Ends with a newline.
std::string startup_table(std::span<const sim::StartupResult> rows, std::span<const std::string> labels = {},
                          const std::string& label = "GPUs");

}  // namespace tandem::app
