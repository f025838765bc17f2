// Chrome / Perfetto traces (`tandem run --trace FILE`): the JSON trace-event format that
// ui.perfetto.dev and chrome://tracing open. A collective-loop run gives one track per rank with a
// slice per attempt of each collective (its bytes, algorithm, iteration, attempt and whether it
// completed), an "iterations" track with a slice per iteration (its outcome), faults as instant
// events where they hit and recovery actions (retry, shrink, reroute, abort) where they happened,
// on the run's clock: simulated on sim, wall on host and the device backends, so that a prediction
// and a measurement open side by side with the same structure. docs/traces.md has the format.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "app/common/nccl_tests_table.h"
#include "app/scenario/loop_run.h"
#include "app/scenario/scenario.h"
#include "app/scenario/scenario_run.h"
#include "app/scenario/training_run.h"

namespace tandem::app {

nlohmann::json loop_trace(const Scenario& scenario, const LoopResults& results);

// A bench sweep (`tandem bench --trace`): per size, the out-of-place then the in-place collective,
// back to back on the run's clock (each lasting its measured or simulated mean time), as a slice
// on a "sizes" track and on every rank's track (bench times a collective as a whole, so a rank's
// slice is the collective's); `algorithms` names what ran per row ("ring/Simple").
struct BenchTraceInfo {
  std::string title;     // "tandem bench all_reduce (sim)"
  std::string backend;   // "sim", "host", ...
  std::string collective;
  int ranks = 0;
  std::vector<std::string> algorithms;  // per row; empty: not known
};
nlohmann::json bench_trace(const BenchTraceInfo& info, const std::vector<BenchRow>& rows);

// A collective sweep (`tandem run --trace` on a sweep scenario): a process per cluster variant, a
// track per (collective, algorithm), each size a slice of its time, back to back in size order
// (sizes that did not run are left out); the run's clock (simulated on sim, wall on host).
nlohmann::json sweep_trace(const Scenario& scenario, const ScenarioResults& results);

// A training step (`tandem run --trace` on a training scenario): a process per (variant, layout),
// a track per stream of the step program ("s0/compute", "s0/tp", "s0/dp", ...), a slice per task
// (compute, or a collective with its label) on the simulated clock of one step.
nlohmann::json training_trace(const Scenario& scenario, const TrainingResults& results);

}  // namespace tandem::app
