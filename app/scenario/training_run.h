// Running a training workload (`workload: {type: training}`): every layout's step simulated on
// every cluster variant (sim/training.h), the expectations checked, and what `tandem run` prints
// and writes for it: per variant a table of layouts (step time and its breakdown into compute,
// exposed communication and pipeline bubble, achieved MFU, throughput, memory), the collectives
// with the most exposed time, a variant comparison, expectations and a verdict; results.json and
// results.csv (docs/scenarios.md, "Training").
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "app/scenario/scenario.h"
#include "app/scenario/scenario_run.h"
#include "app/scenario/training_rehearsal.h"
#include "sim/training.h"

namespace tandem::app {

struct TrainingResults {
  // [variant][layout], in the scenario's order; each layout's config as it ran (global batch
  // resolved for the variant's GPU count).
  std::vector<std::vector<sim::TrainingStepResult>> steps;
  std::vector<std::vector<models::TrainingConfig>> configs;
  // [variant][layout], where the scenario has faults: the step with its faults rehearsed
  // (app/scenario/training_rehearsal.h); `not_rehearsed` says why a layout has none.
  struct Rehearsed {
    std::optional<StepRehearsal> rehearsal;
    std::string not_rehearsed;
    std::string dumps_dir;  // where its dumps went ("" without --out)
  };
  std::vector<std::vector<Rehearsed>> rehearsals;

  const sim::TrainingStepResult* find(const Scenario& scenario, std::string_view variant,
                                      std::string_view layout) const;
};

// Simulates every variant (each in its own child process). Training runs on the simulator only:
// another backend is Error(kUnsupported).
// `keep_timeline`: every task of each step is kept (sim::TrainingStepResult::timeline), for --trace.
TrainingResults run_training(const Scenario& scenario, ScenarioBackend backend, const ProgressFn& progress = {},
                             bool keep_timeline = false);

// Rehearses the scenario's faults on every layout that ran (TrainingResults::rehearsals) and, with
// `out_dir`, writes each rehearsal's dumps under out_dir/fr/ (one variant and layout), else
// out_dir/fr/<variant>/<layout>/. Drops the steps' timelines unless `keep_timeline` (--trace).
void rehearse_training(const Scenario& scenario, TrainingResults& results, const std::string& out_dir,
                       bool keep_timeline);

struct TrainingExpectationOutcome {
  TrainingExpectation expectation;
  ExpectationVerdict verdict = ExpectationVerdict::kPass;
  std::string detail;
};
std::vector<TrainingExpectationOutcome> evaluate_training_expectations(const Scenario& scenario,
                                                                       const TrainingResults& results);
// Passes when every expectation holds (skipped ones aside).
// Fails too when no layout ran on any variant and nothing was expected (an empty answer).
bool training_passed(const TrainingResults& results, const std::vector<TrainingExpectationOutcome>& outcomes);

std::string format_training_report(const Scenario& scenario, const TrainingResults& results,
                                   const std::vector<TrainingExpectationOutcome>& outcomes, bool quiet,
                                   bool explain = false);
// One row per variant and layout.
std::vector<std::string> training_csv_columns();
std::string training_results_csv(const Scenario& scenario, const TrainingResults& results);
nlohmann::json training_results_json(const Scenario& scenario, const TrainingResults& results,
                                     const std::vector<TrainingExpectationOutcome>& outcomes);

// Shared with `tandem plan`: "26.84", "1.71 GB", "30.1%".
std::string format_seconds(double seconds);
std::string format_gigabytes(double bytes);
std::string format_percent(double fraction);

}  // namespace tandem::app
