// tandem run SCENARIO: the main job. Loads a scenario (app/scenario.h), runs its workload on every
// cluster variant (app/scenario_run.h), prints the report, writes results.json / results.csv with
// --out, and exits 0 when every expectation holds, 1 otherwise.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "app/backends.h"
#include "app/cli_common.h"
#include "app/commands.h"
#include "app/loop_run.h"
#include "app/scenario.h"
#include "app/scenario_report.h"
#include "app/scenario_run.h"
#include "app/trace.h"
#include "app/training_run.h"
#include "core/error.h"

namespace tandem::app {

namespace {

struct RunOptions {
  std::string scenario;
  std::string backend;  // empty: the scenario's
  std::string out_dir;  // empty: write nothing
  std::string trace;    // empty: no trace
  bool quiet = false;
  bool dump_on_exit = false;
};

ScenarioBackend backend_for(const RunOptions& options, const Scenario& scenario) {
  if (options.backend.empty()) return scenario.backend;
  if (options.backend == "nccl-native") {
    fail(ErrorCode::kUnsupported,
         "tandem run takes --backend nccl (tandem's schedules on NCCL); nccl-native is for "
         "tandem bench");
  }
  return parse_backend(options.backend);
}

// A collective-loop: faults, recovery, flight recorder (app/loop_run.h).
void run_loop_command(const RunOptions& options, const Scenario& scenario, ScenarioBackend backend,
                      CommandStatus& status) {
  const LoopResults results = run_loop(scenario, backend, LoopOptions{options.out_dir, options.dump_on_exit});
  const std::vector<LoopExpectationOutcome> outcomes = evaluate_loop_expectations(scenario, results);
  if (!options.out_dir.empty() && scenario.outputs.json) {
    write_text_file((std::filesystem::path(options.out_dir) / "results.json").string(),
                    loop_results_json(scenario, results, outcomes) + "\n");
  }
  if (!options.trace.empty()) write_text_file(options.trace, loop_trace(scenario, results).dump() + "\n");
  fmt::print("tandem run {}: {}\n", scenario.name, scenario.description);
  fmt::print("{}", format_loop_report(scenario, results, outcomes));
  const bool pass = std::all_of(outcomes.begin(), outcomes.end(), [](const auto& o) { return o.pass; });
  // Without expectations an aborted loop fails the run; with them, they decide.
  const bool ok = outcomes.empty() ? !results.aborted : pass;
  fmt::print("\nVerdict: {}\n", ok ? "PASS" : "FAIL");
  std::fflush(stdout);
  status.exit_code = ok ? kExitSuccess : kExitFailure;
}

void run_command(const RunOptions& options, CommandStatus& status) {
  const Scenario scenario = load_scenario(options.scenario);
  const ScenarioBackend backend = backend_for(options, scenario);
  if (!options.out_dir.empty()) {
    create_output_folder(options.out_dir);
  }

  if (std::holds_alternative<CollectiveLoop>(scenario.workload)) {
    run_loop_command(options, scenario, backend, status);
    return;
  }
  Progress progress;
  if (std::holds_alternative<TrainingWorkload>(scenario.workload)) {
    const TrainingResults results = run_training(
        scenario, backend,
        [&](const std::string& text) {
          if (!options.quiet) progress.update(fmt::format("tandem run {}: {}", scenario.name, text));
        },
        /*keep_timeline=*/!options.trace.empty());
    progress.clear();
    const std::vector<TrainingExpectationOutcome> outcomes = evaluate_training_expectations(scenario, results);
    if (!options.out_dir.empty()) {
      const std::filesystem::path dir(options.out_dir);
      if (scenario.outputs.json) {
        write_text_file((dir / "results.json").string(),
                        training_results_json(scenario, results, outcomes).dump(2) + "\n");
      }
      if (scenario.outputs.csv)
        write_text_file((dir / "results.csv").string(), training_results_csv(scenario, results));
    }
    if (!options.trace.empty()) write_text_file(options.trace, training_trace(scenario, results).dump() + "\n");
    fmt::print("{}", format_training_report(scenario, results, outcomes, options.quiet));
    std::fflush(stdout);
    status.exit_code = training_passed(outcomes) ? kExitSuccess : kExitFailure;
    return;
  }
  ScenarioResults results = run_scenario(scenario, backend, [&](const std::string& text) {
    if (!options.quiet) progress.update(fmt::format("tandem run {}: {}", scenario.name, text));
  });
  progress.clear();
  const std::vector<ExpectationOutcome> outcomes = evaluate_expectations(scenario, results);

  if (!options.out_dir.empty()) {
    const std::filesystem::path dir(options.out_dir);
    if (scenario.outputs.json)
      write_text_file((dir / "results.json").string(), results_json(scenario, results, outcomes).dump(2) + "\n");
    if (scenario.outputs.csv) write_text_file((dir / "results.csv").string(), results_csv(results));
  }
  if (!options.trace.empty()) write_text_file(options.trace, sweep_trace(scenario, results).dump() + "\n");
  fmt::print("{}", format_report(scenario, results, outcomes, options.quiet));
  std::fflush(stdout);
  status.exit_code = run_passed(results, outcomes) ? kExitSuccess : kExitFailure;
}

}  // namespace

void add_run_command(CLI::App& app, CommandStatus& status) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* command = app.add_subcommand(
      "run",
      "Run a scenario (YAML, see docs/scenarios.md): its workload on every cluster variant, a report with one "
      "table per collective, a variant comparison and the expectations. Exit 0 when every expectation holds, "
      "1 otherwise.");
  command->add_option("scenario", options->scenario, "the scenario file")->required();
  command->add_option("--backend", options->backend,
                      "sim (the simulator), host (real data, one thread per rank), cuda (every rank on one GPU) or "
                      "nccl (tandem's schedules on NCCL; GPUs needed for both); default: the scenario's");
  command->add_option("--out", options->out_dir, "write results.json and results.csv into this folder");
  command->add_flag("--quiet", options->quiet, "print only the expectations and the verdict");
  command->add_option("--trace", options->trace,
                      "write a Chrome / Perfetto trace (JSON) of the run to this file: collective loops a track per "
                      "rank with faults and recovery actions as instant events, sweeps a track per collective and "
                      "algorithm, training steps a track per stream of the step (docs/traces.md)");
  command->add_flag("--dump-on-exit", options->dump_on_exit,
                    "collective-loop: write every rank's flight-recorder dump at the end (also on a clean run)");
  command->callback([options, &status] { run_command(*options, status); });
}

}  // namespace tandem::app
