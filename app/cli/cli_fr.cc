// tandem fr analyze DIR: reads a folder of flight-recorder dumps (PyTorch's or tandem's, one file per
// rank) and says which rank diverged: a rank that never joined a collective, or one whose type,
// sizes, dtypes or state differ from the others'. docs/flight-recorder.md has the rules.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "app/common/common.h"
#include "app/cli/commands.h"
#include "core/error.h"
#include "core/flight_recorder.h"
#include "core/fr_analysis.h"

namespace tandem::app {

namespace {

struct FrAnalyzeOptions {
  std::string dir;
  std::string prefix;
  bool json = false;
};

constexpr const char* kAnalyzeExitStatus =
    "Exit status: 0 when every collective matched, 1 when there are findings (a script can test it), 2 when the "
    "dumps could not be analyzed (missing folder, no dumps, a corrupt or truncated file) or the command line is "
    "wrong.";

int run_fr_analyze(const FrAnalyzeOptions& options) {
  const FrAnalysis analysis = analyze(read_dump_dir(options.dir, options.prefix));
  std::cout << (options.json ? format_json(analysis) : format_text(analysis));
  return analysis.findings.empty() ? kExitSuccess : kExitFindings;
}

}  // namespace

void add_fr_command(CLI::App& app, CommandStatus& status) {
  CLI::App* fr =
      app.add_subcommand("fr", "Flight-recorder dumps (PyTorch's NCCL flight recorder format, or tandem's).");
  fr->require_subcommand(1);

  auto options = std::make_shared<FrAnalyzeOptions>();
  CLI::App* analyze_command = fr->add_subcommand(
      "analyze",
      "Match the dumps of all ranks (one file per rank, <prefix><rank>) collective by collective and report the first "
      "divergence per process group: ranks that never joined a collective, or whose collective type, sizes, dtypes "
      "or state differ from the majority, with the culprit ranks.");
  analyze_command->add_option("dir", options->dir, "folder holding the dumps")->required();
  analyze_command->add_option("--prefix", options->prefix,
                              "file-name prefix before the rank, e.g. nccl_trace_rank_ (default: inferred, as "
                              "torchfrtrace does)");
  analyze_command->add_flag("--json", options->json,
                            "print JSON: verdict, culprit_ranks, findings, ranks, groups, entries");
  analyze_command->footer(kAnalyzeExitStatus);
  analyze_command->callback([options, &status] { status.exit_code = run_fr_analyze(*options); });
}

}  // namespace tandem::app
