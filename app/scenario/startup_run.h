// Running a start-up workload (`workload: {type: startup}`): the job's start-up (sim/startup.h) under
// every lever set on every cluster variant, the expectations checked, and what `tandem run` prints
// and writes for it: per variant a table of phases per lever set with the speedup over the first
// (the baseline), each set's phases in words, expectations and a verdict; results.json and
// results.csv (docs/scenarios.md, "Start-up").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "app/scenario/scenario.h"
#include "app/scenario/scenario_run.h"
#include "sim/startup.h"

namespace tandem::app {

struct StartupResults {
  std::vector<std::vector<sim::StartupResult>> runs;  // [variant][config], in the scenario's order
  const sim::StartupResult* find(const Scenario& scenario, std::string_view variant, std::string_view config) const;
};

// What a lever set changes from today's defaults, in the names users set them by ("legacy store,
// barrier per new_group"; "today's defaults").
std::string describe_levers(const sim::StartupLevers& levers);

// The job's GPUs on `variant`: the workload's gpus, else every GPU of the variant's cluster.
int startup_gpus(const StartupWorkload& startup, const ClusterVariant& variant);

// Simulates every variant x lever set. Start-up runs on the simulator only: another backend is
// Error(kUnsupported).
StartupResults run_startup(const Scenario& scenario, ScenarioBackend backend, const ProgressFn& progress = {});

struct StartupExpectationOutcome {
  StartupExpectation expectation;
  ExpectationVerdict verdict = ExpectationVerdict::kPass;
  std::string detail;
};
std::vector<StartupExpectationOutcome> evaluate_startup_expectations(const Scenario& scenario,
                                                                     const StartupResults& results);

std::string format_startup_report(const Scenario& scenario, const StartupResults& results,
                                  const std::vector<StartupExpectationOutcome>& outcomes, bool quiet);
std::string startup_results_csv(const Scenario& scenario, const StartupResults& results);
nlohmann::json startup_results_json(const Scenario& scenario, const StartupResults& results,
                                    const std::vector<StartupExpectationOutcome>& outcomes);

}  // namespace tandem::app
