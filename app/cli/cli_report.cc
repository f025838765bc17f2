// tandem report RUN_DIR [-o report.html] [--compare OTHER_RUN_DIR]: the report page of a run (or of
// a tandem memory / tandem replay folder), one self-contained HTML file (app/report/report_page.h,
// docs/report.md).
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/cli/cli_paths.h"
#include "app/cli/commands.h"
#include "app/common/common.h"
#include "app/report/report_page.h"
#include "app/scenario/scenario_report.h"
#include "core/error.h"

namespace tandem::app {

namespace {

struct ReportOptions {
  std::string run_dir;
  std::string output;
  std::string compare;
};

nlohmann::json read_results(const std::string& run_dir) {
  const std::filesystem::path path = std::filesystem::path(run_dir) / "results.json";
  std::error_code error;
  if (std::filesystem::exists(run_dir, error) && !std::filesystem::is_directory(run_dir, error)) {
    fail(ErrorCode::kInvalidArgument, "'{}' is a file, not a run folder (write one with tandem run SCENARIO --out DIR)",
         run_dir);
  }
  if (!std::filesystem::is_directory(run_dir, error)) {
    fail(ErrorCode::kInvalidArgument, "run folder '{}' does not exist (write one with tandem run SCENARIO --out DIR)",
         run_dir);
  }
  if (!std::filesystem::exists(path, error)) {
    fail(ErrorCode::kInvalidArgument, "'{}' has no results.json (write it with tandem run SCENARIO --out {})", run_dir,
         run_dir);
  }
  const std::string text = read_text_file(path.string(), "results", kMaxResultsFileBytes);
  nlohmann::json results;
  try {
    results = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    fail(ErrorCode::kFormat, "{}: not valid JSON ({})", path.string(), e.what());
  }
  // Another layout of the file is refused, not misread (a file without the key predates it: layout 1).
  if (results.is_object() && results.contains("tandem_results")) {
    const nlohmann::json& version = results.at("tandem_results");
    if (!version.is_number_integer() || version.get<int64_t>() != kResultsFormatVersion) {
      fail(ErrorCode::kFormat, "{}: results layout version {} (tandem_results); this tandem reads version {}",
           path.string(), version.dump(), kResultsFormatVersion);
    }
  }
  return results;
}

// A folder `tandem memory --out` wrote: memory.json and memory_over_time.csv, no results.json.
bool is_memory_folder(const std::string& dir) {
  std::error_code error;
  const std::filesystem::path path(dir);
  return !std::filesystem::exists(path / "results.json", error) && std::filesystem::exists(path / "memory.json", error);
}

std::string memory_page(const ReportOptions& options) {
  if (!options.compare.empty()) fail(ErrorCode::kInvalidArgument, "--compare is for runs, not a tandem memory folder");
  const std::filesystem::path dir(options.run_dir);
  const std::string json_path = (dir / "memory.json").string(), csv_path = (dir / "memory_over_time.csv").string();
  const std::string text = read_text_file(json_path, "memory", kMaxResultsFileBytes);
  nlohmann::json memory;
  try {
    memory = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kInvalidArgument, "{}: not valid JSON ({})", json_path, e.what());
  }
  const std::string csv = read_text_file(csv_path, "memory over time", kMaxResultsFileBytes);
  try {
    return memory_report_html(memory, csv, csv_path);
  } catch (const Error& error) {
    if (error.code() != ErrorCode::kFormat) throw;
    throw Error(ErrorCode::kInvalidArgument, error.what());
  } catch (const nlohmann::json::exception& error) {
    fail(ErrorCode::kInvalidArgument, "{}: not a memory.json tandem wrote: {}", json_path, error.what());
  }
}

// A folder `tandem replay DUMPS_DIR --out` wrote: replay.json and replay.csv, no results.json.
bool is_replay_folder(const std::string& dir) {
  std::error_code error;
  const std::filesystem::path path(dir);
  return !std::filesystem::exists(path / "results.json", error) && std::filesystem::exists(path / "replay.json", error);
}

std::string replay_page(const ReportOptions& options) {
  if (!options.compare.empty()) fail(ErrorCode::kInvalidArgument, "--compare is for runs, not a tandem replay folder");
  const std::string path = (std::filesystem::path(options.run_dir) / "replay.json").string();
  const std::string text = read_text_file(path, "replay", kMaxResultsFileBytes);
  nlohmann::json replay;
  try {
    replay = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kInvalidArgument, "{}: not valid JSON ({})", path, e.what());
  }
  try {
    return replay_report_html(replay);
  } catch (const Error& error) {
    if (error.code() != ErrorCode::kFormat) throw;
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: {} (not a replay.json this tandem reads; write one with tandem replay DUMPS_DIR "
                            "--out DIR)",
                            path, error.what()));
  }
}

int run_report(const ReportOptions& options) {
  if (is_replay_folder(options.run_dir)) {
    const std::string output =
        options.output.empty() ? (std::filesystem::path(options.run_dir) / "report.html").string() : options.output;
    write_text_file(output, replay_page(options));
    std::cout << "tandem report: wrote " << output << "\n";
    return kExitSuccess;
  }
  if (is_memory_folder(options.run_dir)) {
    const std::string output =
        options.output.empty() ? (std::filesystem::path(options.run_dir) / "report.html").string() : options.output;
    write_text_file(output, memory_page(options));
    std::cout << "tandem report: wrote " << output << "\n";
    return kExitSuccess;
  }
  const nlohmann::json results = read_results(options.run_dir);
  std::optional<nlohmann::json> compare;
  if (!options.compare.empty()) compare = read_results(options.compare);
  std::string html;
  try {
    html = report_html(results, compare);
  } catch (const Error& error) {
    if (error.code() != ErrorCode::kFormat) throw;
    throw Error(ErrorCode::kInvalidArgument, fmt::format("{}/results.json: {}", options.run_dir, error.what()));
  } catch (const nlohmann::json::exception& error) {
    // A value of the wrong type or a missing field: a file edited by hand or written by another
    // program, not tandem's own (whose fields the report page reads as they are written).
    fail(ErrorCode::kInvalidArgument, "{}/results.json{}: not a results.json tandem wrote: {}", options.run_dir,
         compare ? fmt::format(" or {}/results.json", options.compare) : std::string(), error.what());
  }
  const std::string output =
      options.output.empty() ? (std::filesystem::path(options.run_dir) / "report.html").string() : options.output;
  write_text_file(output, html);
  std::cout << "tandem report: wrote " << output << "\n";
  return kExitSuccess;
}

}  // namespace

void add_report_command(CLI::App& app, CommandStatus& status) {
  auto options = std::make_shared<ReportOptions>();
  CLI::App* command = app.add_subcommand(
      "report",
      "Write the report page of a run (the folder tandem run --out wrote): one self-contained HTML file, no scripts, "
      "nothing loaded from the network, to open from disk or attach to an incident. Collective loops: the outcome, a "
      "timeline per rank with faults, recovery actions and the culprit marked, the per-iteration table. Sweeps: "
      "busbw against size. Training: the step per layout. Start-up: phases per lever set. Claims: each claim's "
      "verdict. A calibration (the folder tandem calibrate --out wrote): measured time against size with the default "
      "and the calibrated prediction, every row and parameter. A folder tandem memory --out wrote: the settings side "
      "by side and memory over the trace. A folder tandem replay --out wrote (an incident): the culprit, a timeline "
      "per group on the replayed clock with the stuck op and the waiting ranks marked, the recovery policies side by "
      "side.");
  command
      ->add_option("run_dir", options->run_dir,
                   "the run's folder (holding results.json), a tandem memory --out folder (memory.json) or a tandem "
                   "replay --out folder (replay.json)")
      ->required();
  command->add_option("-o,--output", options->output, "the HTML file to write (default: RUN_DIR/report.html)")
      ->check(output_file_path())
      ->type_name("FILE");
  command->add_option("--compare", options->compare,
                      "a second run of the same scenario (e.g. sim next to host): plotted as the measurement against "
                      "this run's prediction");
  command->callback([options, &status] { status.exit_code = run_report(*options); });
}

}  // namespace tandem::app
