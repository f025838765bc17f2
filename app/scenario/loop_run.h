// Running a collective-loop scenario: the collective `iterations` times on the scenario's cluster,
// with its faults injected and its recovery policy applied (core/faults.h, core/recovery.h), one
// flight recorder per rank, dumps when the watchdog or an error triggers them (and at the end when
// asked), and the analyzer's verdict on those dumps. The same driver runs on the simulator
// (simulated time), on the host backend (real threads, real data, wall time) and on the device
// backends (cuda, nccl: device time).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/scenario/scenario.h"
#include "core/executor.h"
#include "core/fr_analysis.h"
#include "core/recovery.h"

namespace tandem::app {

struct IterationResult {
  int iteration = 0;
  double start_s = 0;  // on the run's clock (simulated on sim, wall on host)
  Outcome outcome = Outcome::kCompleted;
  double seconds = 0;             // attempts, backoffs and the watchdog's wait
  double fault_free_seconds = 0;  // the same collective on the same ranks without faults
  int attempts = 0;
  std::vector<int> dropped_ranks;  // shrink
  bool rerouted = false;
  std::vector<int> faults;  // the plan's faults that hit this iteration
  std::string detail;       // what the backend saw
};

// One rank's part in one attempt of an iteration, for the trace (app/report/trace.h): when it entered
// the collective and when the attempt ended for it (completed, failed, or given up on).
struct RankSlice {
  int rank = 0;
  int iteration = 0;
  int attempt = 0;
  double start_s = 0;
  double end_s = 0;  // a stuck attempt: when the watchdog fired
  bool ok = false;   // the attempt completed
};

struct LoopResults {
  ScenarioBackend backend = ScenarioBackend::kSim;
  int ranks = 0;                            // at the start
  std::vector<IterationResult> iterations;  // the ones that ran (an abort stops the loop)
  bool aborted = false;
  std::string dump_prefix;  // where dumps went ("" when none were written)
  std::vector<std::string> dump_reasons;
  std::optional<FrAnalysis> analysis;  // of the dumps, when there are any
  std::vector<RankSlice> slices;       // every rank's attempts (hung and crashed ranks have none)

  double total_seconds() const;
  double fault_free_seconds() const;
};

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
