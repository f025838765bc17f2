// The cluster's overrides, one table for every command and file: a scenario's or a plan's
// `cluster:` mapping (nic_gbps: 800) and the command-line flags (--nic-gbps 800) of `tandem run`,
// `bench`, `bound`, `topo`, `reliability`, `calibrate` and `replay` take the same keys, with the same
// ranges and the same rules; docs/scenarios.md and docs/cli.md list them.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/cluster.h"

namespace tandem::app {

struct ClusterKey {
  enum class Kind { kText, kInteger, kNumber, kBoolean };
  std::string_view key;   // in files: "nic_gbps"
  std::string_view flag;  // on the command line: "--nic-gbps"
  std::string_view help;
  Kind kind = Kind::kNumber;
  double min = 0;
  double max = 0;  // gpu_power_w: the GPU's TDP where the preset knows it
  void (*set)(models::ClusterSpec&, double) = nullptr;  // the value, parsed and checked; null: the fabric (text)
};

// Every key but the preset (a file's `preset:`, the command line's --cluster), in the order the
// docs list them.
std::span<const ClusterKey> cluster_keys();
// The key called `key` (a file's spelling); nullptr when there is none.
const ClusterKey* find_cluster_key(std::string_view key);

// One value given for a key: its text as typed, and how messages name it ("cluster.nodes",
// "--nodes").
struct ClusterValueText {
  const ClusterKey* key = nullptr;
  std::string text;
  std::string what;
};

// Sets `value` on `spec`: parsed and checked against the key's range. Throws
// Error(kInvalidArgument) "WHAT must be an integer from 1 to 16384 (got '0')" and the like.
void set_cluster_value(models::ClusterSpec& spec, const ClusterValueText& value);

// What only the whole spec can tell, once every value is set: a GPU count given without a NIC
// count keeps one NIC per GPU where the preset has one (8 GPUs, 8 NICs -> 4 GPUs, 4 NICs); the
// switch-fabric keys (spines, oversubscription, nodes_per_leaf) do not apply to a single switch;
// models::validate's rules. `given` names the keys set; throws Error(kInvalidArgument).
void finish_cluster_spec(models::ClusterSpec& spec, const std::vector<ClusterValueText>& given);

// Overrides from the command line: a preset (empty: the file's or the command's default) and
// values, set after a file's own.
struct ClusterOverrides {
  std::string preset;
  std::vector<ClusterValueText> values;
};

// The preset `preset` with `values` set in order, finished.
models::ClusterSpec resolve_cluster_spec(const std::string& preset, const std::vector<ClusterValueText>& values);

}  // namespace tandem::app
