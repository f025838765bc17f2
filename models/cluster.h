// Cluster presets and fabrics: a ClusterSpec says what hardware and network to build; build_cluster
// turns it into a Topology. Presets carry published figures (see docs/topologies.md).
#pragma once

#include <string>
#include <vector>

#include "models/topology.h"

namespace tandem::models {

enum class Fabric : uint8_t {
  kRailOptimized,  // one leaf per rail (NIC i of every node), leaves joined by spines
  kFatTree,        // leaves shared by all NICs of a group of nodes, spines above
  kSingleSwitch,   // every NIC on one switch
};
std::string_view name(Fabric fabric);
Fabric parse_fabric(std::string_view text);

// The GPU itself: what the simulator needs to time reductions and compute.
struct GpuSpec {
  std::string name;          // "H100-SXM"
  double hbm_Bps = 0;        // memory bandwidth
  double bf16_flops = 0;     // dense bf16 peak
  double memory_bytes = 0;
  bool nvls = false;         // NVSwitch multicast / in-switch reduction (NVLink SHARP)
};

struct ClusterSpec {
  std::string preset;                 // "dgx-h100"
  GpuSpec gpu;
  int nodes = 1;
  int gpus_per_node = 8;
  double nvlink_Bps = 0;              // GPU <-> NVSwitch, per direction
  double nvlink_latency_s = 0;
  double pcie_Bps = 0;                // GPU <-> NIC
  double pcie_latency_s = 0;
  int nics_per_node = 8;              // NIC i serves GPUs i * gpus_per_node / nics_per_node ...
  double nic_Bps = 0;                 // NIC <-> leaf, per direction
  double nic_latency_s = 0;
  Fabric fabric = Fabric::kRailOptimized;
  int spines = 0;                     // 0: derived from the leaf count and oversubscription
  double oversubscription = 1.0;      // leaf downlink : uplink bandwidth ratio (1 = non-blocking)
  double switch_latency_s = 0;        // per switch-to-switch link
  int nodes_per_leaf = 32;            // fat-tree: nodes whose NICs share a leaf
};

// "dgx-h100", "dgx-h200", "hgx-a100". Throws Error(kInvalidArgument) listing the known names.
ClusterSpec cluster_preset(std::string_view name);
std::vector<std::string> cluster_preset_names();

// Builds the graph. Throws Error(kInvalidArgument) for impossible specs (no nodes, zero bandwidth...).
Topology build_cluster(const ClusterSpec& spec);

}  // namespace tandem::models
