// tandem topo: build a cluster's topology graph and print it for a person (a summary with a per-node
// view and example routes) or as Graphviz DOT.
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "app/cli/cli_cluster.h"
#include "app/common/common.h"
#include "app/cli/commands.h"
#include "core/error.h"
#include "models/cluster.h"

namespace tandem::app {

namespace {

struct TopoOptions {
  ClusterOptions cluster;
  std::string format = "text";
};

void print_topology(const TopoOptions& options) {
  if (options.format != "text" && options.format != "dot") {
    fail(ErrorCode::kInvalidArgument, "unknown --format '{}' (expected text or dot)", options.format);
  }
  const models::ClusterSpec spec = cluster_spec(options.cluster);
  const models::Topology topology = models::build_cluster(spec);
  if (options.format == "dot") {
    std::cout << topology.to_dot();
    return;
  }
  std::cout << topology.to_text();
  for (const std::string& note : cluster_notes(spec)) std::cout << "note: " << note << "\n";
}

}  // namespace

void add_topo_command(CLI::App& app, CommandStatus& status) {
  auto options = std::make_shared<TopoOptions>();
  CLI::App* command = app.add_subcommand(
      "topo",
      "Build a cluster's topology (GPUs, NVSwitch, NICs, leaf and spine switches, links) and print a summary "
      "with routes, or Graphviz DOT with --format dot.");
  add_cluster_options(*command, options->cluster);
  command->add_option("--format", options->format, "text or dot")->capture_default_str();
  command->callback([options, &status] {
    print_topology(*options);
    status.exit_code = kExitSuccess;
  });
}

}  // namespace tandem::app
