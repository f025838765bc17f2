// tandem run SCENARIO: the main job. Loads a scenario (app/scenario/scenario.h), runs its workload through
// its kind (app/scenario/workload_kind.h), prints the report, writes results.json / results.csv with --out,
// and exits 0 when every expectation holds, 1 otherwise.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "app/run/backends.h"
#include "app/common/common.h"
#include "app/cli/cli_cluster.h"
#include "app/cli/cli_paths.h"
#include "app/cli/commands.h"
#include "app/scenario/scenario.h"
#include "app/scenario/workload_kind.h"
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
  bool explain = false;
  std::string calibration;  // a profile that replaces the scenario's `calibration:`
  ClusterOptions cluster;   // the flags given replace the scenario's cluster values
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

void run_command(const RunOptions& options, CommandStatus& status) {
  const ClusterOverrides overrides = cluster_overrides(options.cluster);
  Scenario scenario = load_scenario(options.scenario, overrides);
  if (!options.calibration.empty()) {
    // --calibration replaces the scenario's `calibration:` key.
    if (scenario.network == NetworkChoice::kIdeal) {
      fail(ErrorCode::kInvalidArgument, "--calibration does not apply to a scenario with network: ideal");
    }
    scenario.calibration = read_profile(options.calibration);
    for (const ClusterVariant& variant : scenario.variants)
      check_profile_cluster(*scenario.calibration, variant.cluster);
  }
  const ScenarioBackend backend = backend_for(options, scenario);
  check_output_file(options.trace, "--trace", options.out_dir);
  if (options.dump_on_exit && !workload_kind_of(scenario).writes_dumps()) {
    fail(ErrorCode::kInvalidArgument,
         "--dump-on-exit: a {} workload keeps no flight recorder, so there is nothing to dump; only collective-loop "
         "scenarios write dumps",
         workload_kind_of(scenario).type());
  }
  if (options.explain && workload_kind_of(scenario).type() != "training") {
    fail(ErrorCode::kInvalidArgument, "--explain breaks down a training step's memory; {} is a {} scenario",
         scenario.file, workload_kind_of(scenario).type());
  }
  if (!options.out_dir.empty()) {
    // A run owns its output folder's results: an earlier run's are removed, not mixed with these
    // (its dumps in fr/ go when this run's session starts).
    create_output_folder(options.out_dir);
    for (const char* file : {"results.json", "results.csv"}) {
      std::error_code ignored;
      std::filesystem::remove(std::filesystem::path(options.out_dir) / file, ignored);
    }
  }

  Progress progress;
  WorkloadRunOptions run_options;
  run_options.backend = backend;
  run_options.out_dir = options.out_dir;
  run_options.quiet = options.quiet;
  run_options.explain = options.explain;
  run_options.trace = !options.trace.empty();
  run_options.dump_on_exit = options.dump_on_exit;
  run_options.progress = [&](const std::string& text) {
    if (!options.quiet) progress.update(fmt::format("tandem run {}: {}", scenario.name, text));
  };
  const WorkloadOutput output = workload_kind_of(scenario).run(scenario, run_options);
  progress.clear();

  if (!options.out_dir.empty()) {
    const std::filesystem::path dir(options.out_dir);
    if (scenario.outputs.json) write_text_file((dir / "results.json").string(), output.results_json);
    if (scenario.outputs.csv) write_text_file((dir / "results.csv").string(), output.results_csv);
  }
  if (output.trace) write_text_file(options.trace, output.trace->dump() + "\n");
  if (!overrides.preset.empty() || !overrides.values.empty()) {
    std::string flags = overrides.preset.empty() ? "" : "--cluster " + overrides.preset;
    for (const ClusterValueText& value : overrides.values) {
      flags += fmt::format("{}{} {}", flags.empty() ? "" : " ", value.what, value.text);
    }
    fmt::print("cluster overrides (every variant): {}\n", flags);
  }
  fmt::print("{}", output.report);
  std::fflush(stdout);
  status.exit_code = output.pass ? kExitSuccess : kExitFindings;
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
                      "sim (the simulator), host (real data, one thread per rank), cuda (every rank on one GPU; "
                      "TANDEM_CUDA_GRAPH=1: each run as one CUDA graph) or "
                      "nccl (tandem's schedules on NCCL; GPUs needed for both); default: the scenario's");
  command->add_option("--out", options->out_dir, "write results.json and results.csv into this folder")
      ->check(output_folder_path())
      ->type_name("DIR");
  command->add_flag("--quiet", options->quiet, "print only the expectations and the verdict");
  command->add_flag("--explain", options->explain,
                    "training: each layout's activations tensor by tensor (what a layer keeps for backward, per "
                    "token on a rank, and its share on the busiest stage)");
  command->add_option("--trace", options->trace,
                      "write a Chrome / Perfetto trace (JSON) of the run to this file: collective loops a track per "
                      "rank with faults and recovery actions as instant events, sweeps a track per collective and "
                      "algorithm, training steps a track per stream of the step (docs/traces.md)")
      ->type_name("FILE");
  command->add_flag("--dump-on-exit", options->dump_on_exit,
                    "collective-loop: write every rank's flight-recorder dump at the end (also on a clean run)");
  command->add_option("--calibration", options->calibration,
                      "apply this calibration profile (from `tandem calibrate`, docs/calibrate.md) to the simulator, "
                      "in place of the scenario's `calibration:` key");
  // The cluster keys of a scenario's `cluster:` as flags (--nodes 16 --nic-gbps 800): what a user
  // tries without copying the YAML.
  add_cluster_options(*command, options->cluster, ClusterDefaults::kScenario);
  command->footer(
      "Cluster flags (--cluster, --nodes, --nic-gbps, ...) replace the scenario's values in every variant; the "
      "report's first line lists them. Expectations are checked as the scenario writes them.");
  command->callback([options, &status] { run_command(*options, status); });
}

}  // namespace tandem::app
