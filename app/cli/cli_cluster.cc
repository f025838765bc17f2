#include "app/cli/cli_cluster.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "app/cli/cli_paths.h"
#include "core/error.h"

namespace tandem::app {

void add_cluster_options(CLI::App& command, ClusterOptions& options) {
  std::string presets;
  for (const std::string& name : models::cluster_preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  command.add_option("--cluster", options.preset, "cluster preset: " + presets)->capture_default_str();
  command.add_option("--nodes", options.nodes, "number of nodes")
      ->capture_default_str()
      ->check(CLI::Range(1, models::kMaxNodes));
  command.add_option("--gpus-per-node", options.gpus_per_node, "GPUs per node (default: the preset's)")
      ->check(CLI::Range(1, models::kMaxGpusPerNode));
  command.add_option("--nics-per-node", options.nics_per_node,
                     "NICs per node, dividing the GPUs per node (default: the preset's, one per GPU)");
  command.add_option("--nic-gbps", options.nic_Gbps, "NIC line rate in Gb/s, e.g. 400 or 800 (default: the preset's)")
      ->check(number_range(models::kMinLinkGbps, models::kMaxLinkGbps));
  command.add_option("--pcie-GBps", options.pcie_GBps, "GPU <-> NIC PCIe bandwidth in GB/s per direction")
      ->check(number_range(models::kMinLinkGbps / 8, models::kMaxLinkGbps / 8));
  command.add_option("--fabric", options.fabric, "rail-optimized (default), fat-tree or single-switch");
  command.add_option("--spines", options.spines, "spine switches (default: derived from the leaf ports)")
      ->check(CLI::Range(1, models::kMaxSpines));
  command
      .add_option("--oversubscription", options.oversubscription,
                  "leaf downlink : uplink bandwidth ratio, e.g. 2 for 2:1 (default 1)")
      ->check(number_range(models::kMinOversubscription, models::kMaxOversubscription));
  command
      .add_option("--nodes-per-leaf", options.nodes_per_leaf,
                  "nodes under one leaf group (rail-optimized: a scalable unit; default: 32 leaf ports)")
      ->check(CLI::Range(1, models::kMaxNodes));
  command.add_flag("--sharp", options.sharp, "the switches reduce in the network (InfiniBand SHARP: NCCL CollNet)");
  command.add_option("--nvlink-latency-us", options.nvlink_latency_us, "GPU <-> NVSwitch link latency")
      ->check(number_range(0.0, models::kMaxLatencyUs));
  command.add_option("--pcie-latency-us", options.pcie_latency_us, "GPU <-> NIC link latency")
      ->check(number_range(0.0, models::kMaxLatencyUs));
  command.add_option("--nic-latency-us", options.nic_latency_us, "NIC <-> leaf link latency")
      ->check(number_range(0.0, models::kMaxLatencyUs));
  command.add_option("--switch-latency-us", options.switch_latency_us, "leaf <-> spine link latency")
      ->check(number_range(0.0, models::kMaxLatencyUs));
}

models::ClusterSpec cluster_spec(const ClusterOptions& options) {
  models::ClusterSpec spec = models::cluster_preset(options.preset);
  spec.nodes = options.nodes;
  if (options.gpus_per_node) {
    spec.gpus_per_node = *options.gpus_per_node;
    // Keep one NIC per GPU where the preset has it, unless told otherwise.
    if (!options.nics_per_node) spec.nics_per_node = std::min(spec.nics_per_node, spec.gpus_per_node);
  }
  if (options.nics_per_node) spec.nics_per_node = *options.nics_per_node;
  if (spec.nics_per_node < 1 || spec.gpus_per_node % spec.nics_per_node != 0) {
    fail(ErrorCode::kInvalidArgument, "--nics-per-node {} must divide the {} GPUs per node", spec.nics_per_node,
         spec.gpus_per_node);
  }
  if (options.nic_Gbps) spec.nic_Bps = *options.nic_Gbps * 1e9 / 8;
  if (options.pcie_GBps) spec.pcie_Bps = *options.pcie_GBps * 1e9;
  if (options.fabric) spec.fabric = models::parse_fabric(*options.fabric);
  if (options.spines) spec.spines = *options.spines;
  if (options.oversubscription) spec.oversubscription = *options.oversubscription;
  if (options.nodes_per_leaf) spec.nodes_per_leaf = *options.nodes_per_leaf;
  if (options.sharp) spec.sharp = true;
  if (options.nvlink_latency_us) spec.nvlink_latency_s = *options.nvlink_latency_us * 1e-6;
  if (options.pcie_latency_us) spec.pcie_latency_s = *options.pcie_latency_us * 1e-6;
  if (options.nic_latency_us) spec.nic_latency_s = *options.nic_latency_us * 1e-6;
  if (options.switch_latency_us) spec.switch_latency_s = *options.switch_latency_us * 1e-6;
  if (spec.fabric == models::Fabric::kSingleSwitch) {
    for (auto [given, flag] : {std::pair{options.spines.has_value(), "--spines"},
                               std::pair{options.oversubscription.has_value(), "--oversubscription"},
                               std::pair{options.nodes_per_leaf.has_value(), "--nodes-per-leaf"}}) {
      if (given) fail(ErrorCode::kInvalidArgument, "{} does not apply to a single-switch fabric", flag);
    }
  }
  models::validate(spec);
  return spec;
}

std::vector<std::string> cluster_notes(const models::ClusterSpec& spec) {
  std::vector<std::string> notes;
  const int gpus_per_nic = spec.gpus_per_node / spec.nics_per_node;
  if (spec.nodes > 1 && spec.nic_Bps > gpus_per_nic * spec.pcie_Bps) {
    notes.push_back(
        fmt::format("a {:g} GB/s NIC is fed by {} x {:g} GB/s of PCIe: PCIe is the bottleneck "
                    "(--pcie-GBps raises it)",
                    spec.nic_Bps / 1e9, gpus_per_nic, spec.pcie_Bps / 1e9));
  }
  return notes;
}

}  // namespace tandem::app
