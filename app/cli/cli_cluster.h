// Command-line options that pick a cluster: a preset and its overrides, the same keys and ranges as
// a scenario's `cluster:` (app/common/cluster_keys.h); shared by every command that takes a cluster.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "app/common/cluster_keys.h"
#include "models/cluster.h"

namespace CLI {
class App;
}

namespace tandem::app {

struct ClusterOptions {
  std::string preset = "dgx-h100";
  bool preset_given = false;  // --cluster on the command line
  // One per key of app/common/cluster_keys.h, in its order, as typed; empty: not given.
  std::vector<std::optional<std::string>> values = std::vector<std::optional<std::string>>(cluster_keys().size());

  // The value of the key `key` (a file's spelling: "nodes").
  std::optional<std::string>& value(std::string_view key);
  const std::optional<std::string>& value(std::string_view key) const;
};

// Where the values not given come from: the command's own defaults (the dgx-h100 preset, one
// node) or a scenario's cluster (`tandem run`).
enum class ClusterDefaults { kCommand, kScenario };

// Adds --cluster and one flag per key of app/common/cluster_keys.h (--nodes, --gpus-per-node,
// --nic-gbps, ..., --gpu-memory-GB): the keys a scenario's `cluster:` takes, with the same ranges.
void add_cluster_options(CLI::App& command, ClusterOptions& options,
                         ClusterDefaults defaults = ClusterDefaults::kCommand);

// The preset with the values given, validated (--nodes: 1 unless given). Throws
// Error(kInvalidArgument) naming the option.
models::ClusterSpec cluster_spec(const ClusterOptions& options);

// What was typed, for a scenario (`tandem run`): only the flags given replace the file's values.
// Each is checked against the key's range here, so that a bad value names its flag.
ClusterOverrides cluster_overrides(const ClusterOptions& options);

// Remarks a reader should see next to results on this cluster (e.g. a NIC faster than its PCIe link).
std::vector<std::string> cluster_notes(const models::ClusterSpec& spec);

}  // namespace tandem::app
