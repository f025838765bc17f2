// tandem calibrate LOG...: fits the simulator's network model (sim::network_parameters) to a
// cluster's own nccl-tests logs and writes a calibration profile (docs/calibrate.md).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "app/calibrate/calibration.h"
#include "app/calibrate/nccl_tests_log.h"
#include "app/cli/cli_cluster.h"
#include "app/cli/commands.h"
#include "app/common/common.h"
#include "core/error.h"

namespace tandem::app {
namespace {

struct CalibrateOptions {
  std::vector<std::string> logs;
  ClusterOptions cluster;
  std::string output;
  std::string out_dir;
  std::string collective;
  std::vector<std::string> hold_out;
  std::vector<std::string> fit;
  int jobs = 0;
  bool quiet = false;
  int gpus_taking_part = 0;  // -g: GPUs of each node that ran (tandem bench -g); 0: all
};

std::vector<std::string> split_commas(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const std::string& value : values) {
    size_t begin = 0;
    while (begin <= value.size()) {
      const size_t comma = value.find(',', begin);
      const std::string part = value.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
      if (!part.empty()) out.push_back(part);
      if (comma == std::string::npos) break;
      begin = comma + 1;
    }
  }
  return out;
}

void run_calibrate(const CalibrateOptions& options) {
  CalibrationRequest request;
  request.cluster = cluster_spec(options.cluster);
  request.gpus_per_node = request.cluster.gpus_per_node;
  if (options.gpus_taking_part > 0) {
    if (options.gpus_taking_part > request.cluster.gpus_per_node) {
      fail(ErrorCode::kInvalidArgument, "-g {}: a {} node has {} GPUs", options.gpus_taking_part,
           request.cluster.preset, request.cluster.gpus_per_node);
    }
    request.gpus_per_node = options.gpus_taking_part;
  }
  std::optional<Collective> collective;
  if (!options.collective.empty()) collective = parse_collective_name(options.collective);
  for (const std::string& path : options.logs) request.files.push_back(read_measurement_file(path, collective));
  request.hold_out = split_commas(options.hold_out);
  request.only = split_commas(options.fit);
  request.jobs = options.jobs > 0 ? options.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!options.quiet) {
    request.progress = [](const std::string& line) {
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
    };
  }
  CalibrationResult result = calibrate(request);
  if (!options.output.empty()) result.profile.path = options.output;
  fmt::print("{}", calibration_report(result));
  if (!options.output.empty()) {
    write_text_file(options.output, profile_yaml(result.profile));
    fmt::print("wrote {}\n", options.output);
  }
  if (!options.out_dir.empty()) {
    create_output_folder(options.out_dir);
    const std::string path = (std::filesystem::path(options.out_dir) / "results.json").string();
    write_text_file(path, calibration_json(result));
    fmt::print("wrote {}\n", path);
  }
}

}  // namespace

void add_calibrate_command(CLI::App& app, CommandStatus& status) {
  auto options = std::make_shared<CalibrateOptions>();
  CLI::App* command = app.add_subcommand(
      "calibrate",
      "Fit the simulator's network model (link efficiencies, NCCL latency scales, the p2p channel rate) to a "
      "cluster's own nccl-tests logs (or `tandem bench` tables, or the published-rows CSV) by bounded least squares "
      "on log(time), and write a calibration profile for --calibration (docs/calibrate.md).");
  command->add_option("logs", options->logs, "nccl-tests logs (all_reduce_perf ... sendrecv_perf output) or .csv files")
      ->required();
  add_cluster_options(*command, options->cluster);
  command->add_option("-g,--ngpus", options->gpus_taking_part,
                      "GPUs of each node that ran the logs, as `tandem bench -g` (default: all of the node's)");
  command->add_option("-o,--output", options->output, "write the calibration profile (YAML) to this file");
  command->add_option("--out", options->out_dir,
                      "write DIR/results.json (every row: measured, default and calibrated prediction) for "
                      "`tandem report DIR`");
  command->add_option("--collective", options->collective,
                      "the collective of logs that do not name one (all_reduce, all_gather, reduce_scatter, "
                      "all_to_all, send_recv)");
  command->add_option("--hold-out", options->hold_out,
                      "rows kept out of the fit and only predicted: a row label as printed (FILE:LINE, "
                      "FILE.csv#ID), a CSV row id, or a whole file; comma-separated or repeated");
  command->add_option("--fit", options->fit,
                      "fit only these parameters (comma-separated names; default: every parameter the rows inform)");
  command->add_option("-j,--jobs", options->jobs, "simulations at once (default: the CPU count)")
      ->check(CLI::Range(1, kMaxCalibrationJobs));
  command->add_flag("-q,--quiet", options->quiet, "no progress lines on stderr");
  command->callback([options, &status] {
    run_calibrate(*options);
    status.exit_code = kExitSuccess;
  });
}

}  // namespace tandem::app
