// Command-line options that pick a cluster: a preset and its overrides, shared by `tandem topo` and
// `tandem bound` (and any command that takes a cluster).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/cluster.h"

namespace CLI {
class App;
}

namespace tandem::app {

struct ClusterOptions {
  std::string preset = "dgx-h100";
  int nodes = 1;
  std::optional<int> gpus_per_node;
  std::optional<int> nics_per_node;
  std::optional<double> nic_Gbps;  // line rate in Gb/s: 400, 800
  std::optional<double> pcie_GBps;
  std::optional<std::string> fabric;
  std::optional<int> spines;
  std::optional<double> oversubscription;
  std::optional<int> nodes_per_leaf;
  bool sharp = false;
  std::optional<double> nvlink_latency_us;
  std::optional<double> pcie_latency_us;
  std::optional<double> nic_latency_us;
  std::optional<double> switch_latency_us;
};

// Adds --cluster, --nodes, --gpus-per-node, --nics-per-node, --nic-gbps, --pcie-GBps, --fabric,
// --spines, --oversubscription, --nodes-per-leaf, --sharp and the --*-latency-us options.
void add_cluster_options(CLI::App& command, ClusterOptions& options);

// The preset with the overrides applied, validated. Throws Error(kInvalidArgument) naming the option.
models::ClusterSpec cluster_spec(const ClusterOptions& options);

// Remarks a reader should see next to results on this cluster (e.g. a NIC faster than its PCIe link).
std::vector<std::string> cluster_notes(const models::ClusterSpec& spec);

}  // namespace tandem::app
