// tandem plan SWEEP.yaml: capacity planning over clusters x layouts x algorithms x failure rates
// (app/plan/plan.h). Prints a summary, writes plan.csv and plan.json with --out. Under mpirun every rank
// takes a shard of the jobs and rank 0 gathers the results and writes them.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/common/common.h"
#include "app/cli/cli_paths.h"
#include "app/cli/commands.h"
#include "app/plan/plan.h"
#include "backend/launch/launch.h"
#include "core/error.h"

namespace tandem::app {
namespace {

struct PlanOptions {
  std::string plan;
  std::string out_dir;
  int jobs = 0;  // 0: one per core
  std::string shard;
  bool quiet = false;
  std::string calibration;  // a calibration profile for every simulated cluster
};

// "i/N" -> (i, N).
std::pair<int, int> parse_shard(const std::string& text) {
  const size_t slash = text.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    size_t used = 0;
    const int index = std::stoi(text.substr(0, slash), &used);
    if (used != slash) throw std::invalid_argument("index");
    const std::string count_text = text.substr(slash + 1);
    const int count = std::stoi(count_text, &used);
    if (used != count_text.size() || count < 1 || index < 0 || index >= count) throw std::invalid_argument("range");
    return {index, count};
  } catch (const std::exception&) {
    fail(ErrorCode::kInvalidArgument, "--shard '{}': expected i/N with 0 <= i < N (e.g. 0/4)", text);
  }
}

std::string progress_bar(size_t done, size_t total, double left_s) {
  constexpr int kWidth = 30;
  const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
  return fmt::format("tandem plan: [{}{}] {}/{} clusters simulated, ~{:.0f} s left", std::string(filled, '#'),
                     std::string(kWidth - filled, '.'), done, total, left_s);
}

void run_plan_command(const PlanOptions& options, CommandStatus& status) {
  Plan plan = load_plan(options.plan);
  if (!options.calibration.empty()) {
    if (plan.network == NetworkChoice::kIdeal) {
      fail(ErrorCode::kInvalidArgument, "--calibration does not apply to a plan with network: ideal");
    }
    plan.calibration = read_profile(options.calibration);
  }
  const std::vector<PlanJob> jobs = plan_jobs(plan);
  if (plan.calibration) {
    for (const PlanJob& job : jobs) check_profile_cluster(*plan.calibration, job.cluster);
  }
  PlanRunOptions run;
  run.jobs = options.jobs > 0 ? options.jobs : std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  if (!options.shard.empty()) std::tie(run.shard_index, run.shard_count) = parse_shard(options.shard);

  nccl::Launch& launch = nccl::current_launch();
  const bool mpi = launch.info().size > 1;
  if (mpi) {
    if (!options.shard.empty()) {
      fail(ErrorCode::kInvalidArgument, "--shard and mpirun both split the sweep: use one of them");
    }
    run.shard_index = launch.info().rank;
    run.shard_count = launch.info().size;
  }
  const bool root = launch.info().rank == 0;
  if (!options.out_dir.empty() && root) {
    create_output_folder(options.out_dir);
  }
  Progress progress;
  const auto started = std::chrono::steady_clock::now();
  if (!options.quiet && root) {
    run.progress = [&](size_t done, size_t total, double left) { progress.update(progress_bar(done, total, left)); };
    progress.update(progress_bar(0, shard_jobs(jobs.size(), run.shard_index, run.shard_count).size(), 0));
  }
  std::vector<std::optional<JobOutcome>> outcomes = run_plan_jobs(plan, jobs, run);
  progress.clear();

  if (mpi) {
    // Every rank's outcomes (job index and JSON), gathered on rank 0.
    nlohmann::json mine = nlohmann::json::array();
    for (size_t j = 0; j < outcomes.size(); ++j) {
      if (outcomes[j]) mine.push_back({{"job", j}, {"outcome", *outcomes[j]}});
    }
    const std::string text = mine.dump();
    std::vector<std::byte> bytes(text.size());
    std::memcpy(bytes.data(), text.data(), text.size());
    const std::vector<std::vector<std::byte>> all = launch.gather_to_root(bytes);
    if (!root) {
      status.exit_code = kExitSuccess;
      return;
    }
    for (size_t r = 1; r < all.size(); ++r) {
      const std::string other(reinterpret_cast<const char*>(all[r].data()), all[r].size());
      for (const nlohmann::json& entry : nlohmann::json::parse(other)) {
        outcomes.at(entry.at("job").get<size_t>()) = entry.at("outcome").get<JobOutcome>();
      }
    }
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const std::vector<PlanRow> rows = plan_rows(plan, jobs, outcomes);
  if (!options.out_dir.empty()) {
    const std::filesystem::path dir(options.out_dir);
    if (plan.csv) write_text_file((dir / "plan.csv").string(), plan_csv(rows));
    if (plan.json) write_text_file((dir / "plan.json").string(), plan_json(plan, rows, outcomes, jobs).dump(2) + "\n");
  }
  if (!options.quiet) {
    fmt::print("{}", format_plan_summary(plan, rows, outcomes, jobs));
    fmt::print("\nsimulated in {:.1f} s wall on {} local process{}{}{}\n", wall_s, run.jobs, run.jobs == 1 ? "" : "es",
               mpi ? fmt::format(" x {} MPI ranks", launch.info().size) : "",
               run.shard_count > 1 && !mpi ? fmt::format(" (shard {}/{})", run.shard_index, run.shard_count) : "");
  }
  std::fflush(stdout);
  // A job whose process died is a failure of the run; points that do not fit are results.
  const bool died = std::any_of(outcomes.begin(), outcomes.end(), [](const auto& o) { return o && !o->ok; });
  status.exit_code = died ? kExitInternal : kExitSuccess;
}

}  // namespace

void add_plan_command(CLI::App& app, CommandStatus& status) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* command = app.add_subcommand(
      "plan",
      "Capacity planning (docs/plan.md): sweep clusters (preset, GPUs, NIC speed, oversubscription) x training "
      "layouts x algorithms x failure rates x recovery policies; every step and start-up simulated, goodput and "
      "GPU-hours per 1T tokens per point. Runs its clusters in parallel, in shards (--shard) or across MPI ranks "
      "(mpirun -np K tandem plan ...).");
  command->add_option("sweep", options->plan, "the sweep file (YAML, tandem_plan: 1)")->required();
  command->add_option("--calibration", options->calibration,
                      "apply this calibration profile (from `tandem calibrate`, docs/calibrate.md) to every simulated "
                      "cluster; every preset of the sweep must be the profile's");
  command->add_option("--out", options->out_dir, "write plan.csv and plan.json into this folder")
      ->check(output_folder_path())
      ->type_name("DIR");
  command->add_option("--jobs,-j", options->jobs, "local processes at once (default: one per core)")
      ->check(CLI::Range(1, 1024));
  command->add_option("--shard", options->shard,
                      "run shard i of N (i/N, 0-based): cluster job j belongs to shard j mod N; results of shards "
                      "concatenate (plan.csv's point column orders them)");
  command->add_flag("--quiet", options->quiet, "print nothing (with --out: only the files)");
  command->callback([options, &status] { run_plan_command(*options, status); });
}

}  // namespace tandem::app
