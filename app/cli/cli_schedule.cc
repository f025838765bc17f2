// tandem schedule: build a schedule and print it for a person (default) or as JSON (--json), or
// load a JSON schedule and check it (--check FILE).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "app/common/common.h"
#include "app/cli/commands.h"
#include "app/report/schedule_text.h"
#include "core/algorithms.h"
#include "core/error.h"
#include "core/schedule_json.h"
#include "core/validate.h"

namespace tandem::app {

namespace {

struct ScheduleOptions {
  std::string collective;
  std::string algorithm = "ring";
  int nranks = 0;
  int root = 0;
  int channels = 1;
  int pipeline_chunks = 1;
  int ranks_per_node = 0;
  std::string inter_node = "ring";
  bool json = false;
  bool symmetric = false;
  bool list = false;
  std::string check_file;
};

// The registry as a table: each algorithm, the collectives it builds, its parameters, what it is.
void print_algorithms() {
  fmt::print("{:<20} {:<62} {}\n", "algorithm", "collectives", "parameters");
  for (const AlgorithmInfo& info : algorithm_registry()) {
    std::string collectives;
    for (Collective c : info.collectives) collectives += (collectives.empty() ? "" : ", ") + std::string(name(c));
    std::vector<std::string> parameters;
    if (info.uses_channels) parameters.push_back(fmt::format("--channels 1..{}", kMaxAlgorithmChannels));
    if (info.uses_pipeline_chunks) parameters.push_back(fmt::format("--pipeline-chunks 1..{}", kMaxPipelineChunks));
    if (info.needs_whole_nodes) parameters.push_back("whole nodes");
    if (info.has_symmetric_form) parameters.push_back("--symmetric");
    std::string row = fmt::format("{:<20} {:<62} {}", name(info.algorithm), collectives, fmt::join(parameters, " "));
    row.erase(row.find_last_not_of(' ') + 1);
    fmt::print("{}\n{:<20} {}\n", row, "", info.summary);
  }
}

void check_file(const std::string& path) {
  std::string text = read_text_file(path, "schedule", kMaxScheduleFileBytes);
  Schedule schedule;
  try {
    schedule = schedule_from_json(text);
    validate(schedule);
    symbolic_check(schedule);
  } catch (const Error& error) {
    throw Error(error.code(), fmt::format("{}: {}", path, error.what()));
  }
  fmt::print("ok: {}: {}; valid, postcondition holds\n", path, schedule_summary(schedule));
}

void build_and_print(const ScheduleOptions& options) {
  if (options.collective.empty() || options.nranks == 0) {
    fail(ErrorCode::kInvalidArgument, "schedule needs --collective and --nranks (or --check FILE)");
  }
  CollectiveSpec spec;
  spec.collective = parse_collective_name(options.collective);
  spec.nranks = options.nranks;
  spec.count = 1;  // schedules are size-independent
  RankLayout layout = make_layout(options.nranks, options.ranks_per_node);
  if (options.root < 0 || options.root >= options.nranks) {
    fail(ErrorCode::kInvalidArgument, "--root {} is out of range for {} ranks", options.root, options.nranks);
  }
  spec.root = options.root;

  Algorithm algorithm = parse_algorithm_name(options.algorithm);
  if (algorithm == Algorithm::kAuto) algorithm = default_algorithm(spec, layout);
  AlgoParams params;
  params.channels = options.channels;
  params.pipeline_chunks = options.pipeline_chunks;
  params.inter_node = parse_algorithm_name(options.inter_node);
  if (params.inter_node == Algorithm::kAuto) {
    fail(ErrorCode::kInvalidArgument, "--inter-node needs a named algorithm, not auto");
  }
  if (!implements(algorithm, spec.collective)) {
    fail(ErrorCode::kUnsupported, "{}", unsupported_message(algorithm, spec.collective));
  }

  Schedule schedule = build_checked_schedule(spec, layout, algorithm, params,
                                             options.symmetric ? ScheduleForm::kSymmetric : ScheduleForm::kExplicit);
  if (options.json) {
    std::cout << schedule_to_json(schedule) << "\n";
  } else {
    std::cout << format_schedule_text(schedule);
  }
}

}  // namespace

void add_schedule_command(CLI::App& app, CommandStatus& status) {
  auto options = std::make_shared<ScheduleOptions>();
  CLI::App* command = app.add_subcommand(
      "schedule",
      "Build a collective's schedule and print what each rank does round by round (or its JSON with --json); "
      "or check a JSON schedule with --check FILE.");
  command->add_option("--collective", options->collective,
                      "all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all or send_recv "
                      "(nccl-tests names such as allreduce also work)");
  command->add_option("--algo", options->algorithm, algorithm_names() + ", or auto (--list: what each implements)")
      ->capture_default_str();
  command->add_option("--nranks", options->nranks, "number of ranks")->check(CLI::Range(1, 1 << 20));
  command->add_option("--root", options->root, "root rank of broadcast / reduce")->capture_default_str();
  command->add_option("--channels", options->channels, "parallel rings, each on its own lane")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxAlgorithmChannels));
  command
      ->add_option("--pipeline-chunks", options->pipeline_chunks,
                   "chunks a message is cut into so tree / chain hops overlap")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxPipelineChunks));
  command->add_option("--ranks-per-node", options->ranks_per_node,
                      "ranks per node (hierarchical algorithms); default: 1, a flat layout")
      ->check(CLI::Range(1, 1 << 20));
  command->add_option("--inter-node", options->inter_node, "hierarchical: the algorithm between nodes")
      ->capture_default_str();
  command->add_flag("--symmetric", options->symmetric,
                    "build the rank-symmetric form where the algorithm has one (ring all_reduce): one program "
                    "for every rank; --json then writes that form");
  command->add_flag("--json", options->json, "print the schedule as JSON (schedule_to_json) instead of text");
  command->add_flag("--list", options->list,
                    "list the algorithms: the collectives each builds, its parameters and what it is");
  command->add_option("--check", options->check_file,
                      "load a JSON schedule, validate and symbolically check it; prints 'ok: ...' or the error");
  command->callback([options, command, &status] {
    if (options->list) {
      print_algorithms();
      status.exit_code = kExitSuccess;
      return;
    }
    if (!options->check_file.empty()) {
      for (const char* name : {"--collective", "--algo", "--nranks", "--root", "--channels", "--pipeline-chunks",
                               "--ranks-per-node", "--inter-node", "--symmetric", "--json"}) {
        if (command->count(name) > 0)
          fail(ErrorCode::kInvalidArgument, "--check FILE cannot be combined with {}", name);
      }
      check_file(options->check_file);
    } else {
      build_and_print(*options);
    }
    status.exit_code = kExitSuccess;
  });
}

}  // namespace tandem::app
