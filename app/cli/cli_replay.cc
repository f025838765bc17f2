// tandem replay DIR: replays a job's flight-recorder dumps (PyTorch's or tandem's) on a simulated
// cluster: the predicted time of every collective against the recorded one, where the ranks stop
// agreeing, which ranks the others wait for, and what a recovery policy would have done there.
// docs/replay.md has the rules.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/calibrate/calibration.h"
#include "app/cli/cli_cluster.h"
#include "app/cli/cli_paths.h"
#include "app/cli/commands.h"
#include "app/common/common.h"
#include "app/replay/replay.h"
#include "app/replay/replay_trace.h"
#include "core/error.h"
#include "core/flight_recorder.h"
#include "sim/tuner.h"

namespace tandem::app {

namespace {

struct ReplayCliOptions {
  std::string dir;
  std::string prefix;
  ClusterOptions cluster;
  std::string recovery = "all";
  std::string watchdog;
  std::string gaps = "recorded";
  std::string algorithm = "auto";
  size_t ops = 20;
  bool json = false;
  std::string out_dir;
  std::string trace;
  int jobs = 0;             // 0: one per core
  std::string calibration;  // a calibration profile for the simulator; empty: the defaults
};

constexpr const char* kReplayFooter =
    "Rank r runs on GPU r (node-major); without --nodes the cluster has just enough nodes for the ranks.\n"
    "Exit status: 0 when every recorded op ran to the end, 1 when the ranks stop agreeing somewhere (a hang, a "
    "desync, a stalled collective: a script can test it), 2 when the dumps cannot be replayed (missing folder, no "
    "dumps, a corrupt file, dumps that disagree on version or group membership, a cluster too small) or the "
    "command line is wrong.";

// The highest rank any dump names (its own, or in a group it declares).
int highest_rank(const std::vector<FrDump>& dumps) {
  int top = 0;
  for (const FrDump& d : dumps) {
    top = std::max(top, d.rank);
    for (const FrGroup& g : d.groups) {
      for (int r : g.ranks) top = std::max(top, r);
    }
  }
  return top;
}

std::vector<RecoveryAction> recoveries(const std::string& text) {
  if (text == "all") return {RecoveryAction::kAbort, RecoveryAction::kShrink, RecoveryAction::kReroute};
  if (text == "none") return {};
  try {
    return {parse_recovery_action(text)};
  } catch (const Error&) {
    fail(ErrorCode::kInvalidArgument, "--recovery '{}': expected abort, shrink, reroute, all or none", text);
  }
}

int run_replay(const ReplayCliOptions& options) {
  // A line on stderr (a terminal only) naming the phase and how far it is: at 16,384 ranks a replay
  // reads 2 GB of dumps and runs for tens of seconds.
  Progress progress;
  progress.update(fmt::format("replay: reading the dumps in {}", options.dir));
  std::vector<FrDump> dumps;
  // Every kReadProgressEvery dumps a redraw: one per dump would cost more than the line is worth.
  constexpr size_t kReadProgressEvery = 256;
  std::function<void(size_t, size_t)> read_progress;
  if (progress.enabled()) {
    read_progress = [&progress, &options, shown = size_t{0}](size_t done, size_t total) mutable {
      if (done >= shown + kReadProgressEvery || done == total) {
        shown = done;
        progress.update(fmt::format("replay: reading the dumps in {} {}/{}", options.dir, done, total));
      }
    };
  }
  dumps = read_dump_dir(options.dir, options.prefix, read_progress);
  ReplayOptions replay_options;
  ClusterOptions cluster = options.cluster;
  replay_options.cluster = cluster_spec(cluster);
  if (!cluster.value("nodes")) {
    const int ranks = highest_rank(dumps) + 1;
    cluster.value("nodes") =
        std::to_string((ranks + replay_options.cluster.gpus_per_node - 1) / replay_options.cluster.gpus_per_node);
    replay_options.cluster = cluster_spec(cluster);
  }
  std::optional<CalibrationProfile> profile;
  if (!options.calibration.empty()) {
    profile = read_profile(options.calibration);
    check_profile_cluster(*profile, replay_options.cluster);
    replay_options.network = apply_profile(*profile, replay_options.network);
  }
  replay_options.recoveries = recoveries(options.recovery);
  if (!options.watchdog.empty()) replay_options.watchdog_s = parse_duration_s(options.watchdog, "--watchdog");
  if (options.gaps != "recorded" && options.gaps != "none") {
    fail(ErrorCode::kInvalidArgument, "--gaps '{}': expected recorded or none", options.gaps);
  }
  replay_options.recorded_gaps = options.gaps == "recorded";
  // The algorithm's own spelling ("Ring" is ring); unknown names are refused, listing the known ones.
  replay_options.algorithm = options.algorithm == "auto" || sim::find_sim_algorithm(options.algorithm)
                                 ? options.algorithm
                                 : std::string(name(parse_algorithm_name(options.algorithm)));
  replay_options.jobs = options.jobs > 0 ? options.jobs : std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  if (progress.enabled()) {
    replay_options.progress = [&progress](std::string_view phase, size_t done, size_t total) {
      progress.update(fmt::format("replay: {} {}/{}", phase, done, total));
    };
  }
  check_output_file(options.trace, "--trace", options.out_dir);
  const ReplayResult result = replay(dumps, replay_options);
  progress.update("replay: writing the report");
  std::string report = options.json ? to_json(result).dump(2) + "\n" : format_text(result, options.ops);
  if (profile && !options.json) report = fmt::format("# Calibration: {}\n", profile_summary(*profile)) + report;
  progress.clear();
  std::cout << report;
  if (!options.out_dir.empty()) {
    create_output_folder(options.out_dir);
    const std::filesystem::path dir(options.out_dir);
    write_text_file((dir / "replay.json").string(), to_json(result).dump(2) + "\n");
    write_text_file((dir / "replay.csv").string(), ops_csv(result));
  }
  if (!options.trace.empty()) {
    write_text_file(options.trace, replay_trace(result, options.dir).dump() + "\n");
  }
  return result.first_divergence ? kExitFindings : kExitSuccess;
}

}  // namespace

void add_replay_command(CLI::App& app, CommandStatus& status) {
  auto options = std::make_shared<ReplayCliOptions>();
  CLI::App* command = app.add_subcommand(
      "replay",
      "Replay a job's flight-recorder dumps (one file per rank, PyTorch's or tandem's) on a simulated cluster: the "
      "predicted time of every collective and p2p op against the recorded one, where the ranks stop agreeing, which "
      "ranks the others wait for, and what a recovery policy would have done there.");
  command->add_option("dir", options->dir, "folder holding the dumps")->required();
  command->add_option("--prefix", options->prefix,
                      "file-name prefix before the rank, e.g. nccl_trace_rank_ (default: inferred, as torchfrtrace "
                      "does)");
  add_cluster_options(*command, options->cluster);
  command
      ->add_option("--recovery", options->recovery,
                   "the policy to try where the ranks stop agreeing: abort, shrink (drop the ranks the others wait "
                   "for), reroute (rebuild around a failed link), all (compare the three) or none")
      ->capture_default_str();
  command->add_option("--watchdog", options->watchdog,
                      "how long a stuck collective waits before the watchdog fires, e.g. 30s, 100ms (default: the "
                      "timeout the dumps recorded, PyTorch's 10 min unless the job set one)");
  command
      ->add_option("--algorithm", options->algorithm,
                   "auto (NCCL's tuner per op), or the algorithm the job forced (NCCL_ALGO): ring, tree, nvls, ... "
                   "where it implements the op")
      ->capture_default_str();
  command
      ->add_option("--gaps", options->gaps,
                   "recorded: keep each rank's recorded time between its ops (its compute); none: ops back to back")
      ->capture_default_str();
  command->add_option("--ops", options->ops, "ops listed before the first divergence (all in --json / --out)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  command
      ->add_option("--jobs", options->jobs,
                   "child processes simulating the collectives at once, each a family of them (all_reduce with "
                   "all_gather and reduce_scatter, broadcast, ...); 0: one per core")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  command->add_flag("--json", options->json, "print the whole replay as JSON instead of the report");
  command->add_option("--calibration", options->calibration,
                      "apply this calibration profile (from `tandem calibrate`, docs/calibrate.md) to the simulator's "
                      "network model");
  command->add_option("--out", options->out_dir, "write replay.json and replay.csv (one row per op) into this folder")
      ->check(output_folder_path())
      ->type_name("DIR");
  command->add_option("--trace", options->trace,
                      "write a Chrome / Perfetto trace (JSON) of the replay: a track per rank, a slice per op, the "
                      "divergence and recovery as instant events (docs/traces.md)")
      ->type_name("FILE");
  command->footer(kReplayFooter);
  command->callback([options, command, &status] {
    status.exit_code = run_replay(*options);
  });
}

}  // namespace tandem::app
