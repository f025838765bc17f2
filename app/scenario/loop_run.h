// Running a collective-loop scenario: the collective `iterations` times on the scenario's cluster,
// through a run session (core/session.h: faults injected, the recovery policy applied, one flight
// recorder per rank, dumps when the watchdog or an error triggers them, and at the end when asked)
// over the backend's attempts: the simulator's (sim/sim_attempts.h, simulated time), the host's
// (backend/host/host_attempts.h: real threads, real data, wall time) or any executor's
// (ExecutorAttempts: cuda, nccl, device time). Then the analyzer's verdict on the dumps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "app/scenario/scenario.h"
#include "core/executor.h"
#include "core/fr_analysis.h"
#include "core/recovery.h"
#include "core/session.h"

namespace tandem::app {

// IterationResult and RankSlice: core/session.h.
struct LoopResults {
  ScenarioBackend backend = ScenarioBackend::kSim;
  int ranks = 0;                            // at the start
  std::vector<IterationResult> iterations;  // the ones that ran (an abort stops the loop)
  bool aborted = false;
  std::string dump_prefix;  // where dumps went ("" when none were written)
  std::vector<std::string> dump_reasons;
  std::string dump_note;  // why a dump could not be written (every rank had crashed), or ""
  bool dumps_removed = false;  // written to a temporary folder for the analysis, then removed (no --out)
  std::optional<FrAnalysis> analysis;  // of the dumps, when there are any
  std::vector<RankSlice> slices;       // every rank's attempts (hung and crashed ranks have none)

  double total_seconds() const;
  double fault_free_seconds() const;
};
// The results as JSON (results.json's core, and what a simulated loop's child process sends back:
// sim/isolated.h), all but `analysis` and `dumps_removed`, which run_loop works out afterwards.
void to_json(nlohmann::json& j, const LoopResults& results);
void from_json(const nlohmann::json& j, LoopResults& results);

struct LoopOptions {
  std::string out_dir;        // dumps go to <out_dir>/fr/ unless TORCH_FR_DUMP_TEMP_FILE says otherwise
  bool dump_on_exit = false;  // --dump-on-exit (or outputs.dumps)
  // The executor of the device path (cuda, nccl: one Executor::run per attempt, rank faults as
  // stalled transfers). Empty: make_executor(name(backend)). Tests pass the host executor here to
  // run the device path, backend kHost included, on the CPU.
  std::function<std::unique_ptr<Executor>()> executor;
};

LoopResults run_loop(const Scenario& scenario, ScenarioBackend backend, const LoopOptions& options);

// The loop expectations checked against the results: one line each, "PASS ..." or "FAIL ...".
struct LoopExpectationOutcome {
  bool pass = false;
  std::string line;
};
std::vector<LoopExpectationOutcome> evaluate_loop_expectations(const Scenario& scenario, const LoopResults& results);

// The report section: each fault, when it hit, each iteration's outcome and its cost in time, and
// the flight-recorder verdict; `quiet`: only the expectations.
std::string format_loop_report(const Scenario& scenario, const LoopResults& results,
                               const std::vector<LoopExpectationOutcome>& outcomes, bool quiet = false);
// results.csv: a header and one row per iteration that ran (docs/scenarios.md).
std::string loop_results_csv(const LoopResults& results);
std::string loop_results_json(const Scenario& scenario, const LoopResults& results,
                              const std::vector<LoopExpectationOutcome>& outcomes);

}  // namespace tandem::app
