// Cluster presets and fabrics: a ClusterSpec says what hardware and network to build; build_cluster
// turns it into a Topology. Presets carry published figures (see docs/topologies.md).
#pragma once

#include <string>
#include <vector>

#include "models/topology.h"

namespace tandem::models {

enum class Fabric : uint8_t {
  kRailOptimized,  // one leaf per rail (NIC i of every node) per scalable unit, leaves joined by spines
  kFatTree,        // leaves shared by all NICs of a group of nodes, spines above
  kSingleSwitch,   // every NIC on one switch
};
std::string_view name(Fabric fabric);
Fabric parse_fabric(std::string_view text);  // "rail-optimized", "fat-tree", "single-switch" ('_' for '-')

// The GPU generation: it selects NCCL's per-architecture tables (models/cost_model.h).
enum class GpuArch : uint8_t { kVolta, kAmpere, kHopper, kBlackwell };
std::string_view name(GpuArch arch);

// The host CPU vendor: NCCL's network overhead and multi-node LL bandwidth cap depend on it.
enum class CpuVendor : uint8_t { kIntel, kAmd };
std::string_view name(CpuVendor vendor);

// The GPU itself: what the simulator needs to time reductions and compute.
struct GpuSpec {
  std::string name;  // "H100-SXM"
  GpuArch arch = GpuArch::kHopper;
  double hbm_Bps = 0;     // memory bandwidth
  double bf16_flops = 0;  // dense bf16 peak
  double memory_bytes = 0;
  int nvlinks = 0;    // NVLink links per GPU (NCCL models NVLink as links x a per-link rate)
  bool nvls = false;  // NVSwitch multicast / in-switch reduction (NVLink SHARP)
  double fp8_flops = 0;  // dense fp8 peak; 0: no fp8 tensor cores
  double tdp_w = 0;      // board power the peak clocks are specified at
  double power_limit_w = 0;  // a lower cap set by the operator (0: the TDP); slows the tensor cores (models/kernels.h)
};

struct ClusterSpec {
  std::string preset;  // "dgx-h100"
  GpuSpec gpu;
  CpuVendor cpu = CpuVendor::kIntel;
  int nodes = 1;
  int gpus_per_node = 8;
  double nvlink_Bps = 0;  // GPU <-> NVSwitch, per direction
  double nvlink_latency_s = 0;
  double pcie_Bps = 0;  // GPU <-> NIC, per direction
  double pcie_latency_s = 0;
  int nics_per_node = 8;  // NIC i serves GPUs i * gpus_per_node / nics_per_node ...; must divide gpus_per_node
  double nic_Bps = 0;     // NIC <-> leaf, per direction
  double nic_latency_s = 0;
  Fabric fabric = Fabric::kRailOptimized;
  int spines = 0;                 // 0: derived from the leaf ports and oversubscription
  double oversubscription = 1.0;  // leaf downlink : uplink bandwidth ratio (1 = non-blocking)
  double switch_latency_s = 0;    // per switch-to-switch link
  // Nodes under one leaf group: rail-optimized, the nodes of a scalable unit (one leaf per rail each);
  // fat-tree, the nodes whose NICs share a leaf. 0: derived so that a leaf has kLeafDownlinkPorts.
  int nodes_per_leaf = 0;
  bool sharp = false;  // switches reduce in the network (InfiniBand SHARP): NCCL's CollNet algorithms
};

// A leaf switch's ports toward the NICs when nodes_per_leaf is derived: half of a 64-port
// Quantum-2 (NDR) switch, the other half going up, as in NVIDIA's DGX SuperPOD (32 nodes per SU).
inline constexpr int kLeafDownlinkPorts = 32;

// Limits checked by validate(): beyond them a spec is a typo, not a cluster.
inline constexpr int kMaxNodes = 16384;
inline constexpr int kMaxGpusPerNode = 256;
inline constexpr int kMaxSpines = 4096;

// Physical ranges of a cluster's numbers, one set for the command line and the scenario loader:
// wider than any machine built or planned, narrow enough that the arithmetic keeps its meaning
// (a 1e-300 Gb/s NIC or a 1e300 us latency gave 300-digit times).
inline constexpr double kMinLinkGbps = 0.01;       // 10 Mb/s, any one link
inline constexpr double kMaxLinkGbps = 100000;     // 100 Tb/s, any one link
inline constexpr double kMaxLatencyUs = 1e6;       // 1 s, any one link or switch
inline constexpr double kMinOversubscription = 1;  // leaf downlink : uplink
inline constexpr double kMaxOversubscription = 64;

// "dgx-h100", "dgx-h200", "hgx-a100". Throws Error(kInvalidArgument) listing the known names.
ClusterSpec cluster_preset(std::string_view name);
std::vector<std::string> cluster_preset_names();

// Throws Error(kInvalidArgument) naming the field for an impossible spec (no nodes, zero bandwidth,
// NICs that do not divide the GPUs, spines on a single switch...).
void validate(const ClusterSpec& spec);

// What build_cluster derives from a spec: the leaf groups and spines. (Also used by the bounds.)
struct FabricShape {
  int nodes_per_leaf = 0;      // nodes under one leaf group
  int leaf_groups = 0;         // ceil(nodes / nodes_per_leaf); 1 for a single switch
  int leaves = 0;              // rail-optimized: leaf_groups x nics_per_node; fat-tree: leaf_groups
  int leaf_downlinks = 0;      // NIC ports on a (full) leaf
  int spines = 0;              // 0 when there is a single leaf
  double uplink_Bps = 0;       // one leaf <-> spine link, per direction
  double leaf_uplink_Bps = 0;  // all of a leaf's uplinks together: downlinks x nic_Bps / oversubscription
};
FabricShape fabric_shape(const ClusterSpec& spec);

// One line: "dgx-h100: 8 nodes x 8 H100-SXM (64 GPUs), NVLink 450 GB/s, 8x 400 Gb/s NICs, rail-optimized ...".
std::string describe(const ClusterSpec& spec);

// Builds the graph (validate() first). Vertices per node: GPUs, one NVSwitch vertex (the node's
// NVSwitch chips as one; none with one GPU), NICs; then leaves, then spines.
Topology build_cluster(const ClusterSpec& spec);

}  // namespace tandem::models
