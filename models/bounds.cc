#include "models/bounds.h"

#include <algorithm>
#include <cmath>

namespace tandem::models {

namespace {

// What one of p equal parts (of `part_ranks` ranks each) must send or receive across its cut, per
// direction, for a collective of S = `bytes` (NCCL's sizes). Without in-network reduction:
//   all_reduce       2(p-1)/p S   (reduce-scatter + all-gather counting; Patarasuk & Yuan 2009)
//   reduce_scatter   (p-1)/p S    (what the part holds for the others must leave it)
//   all_gather       (p-1)/p S    (what the others hold must enter it)
//   broadcast/reduce S            (a part without the root receives / sends the whole buffer)
//   all_to_all       part_ranks (p-1)/p S
//   send_recv        S            (rank r's buffer crosses to r+1 at the part boundary)
// With in-network reduction an all_reduce part sends its S once and receives the result once.
double part_bytes(Collective collective, double bytes, int parts, int part_ranks, bool in_network_reduction) {
  if (parts < 2) return 0;
  const double others = static_cast<double>(parts - 1) / parts;
  switch (collective) {
    case Collective::kAllReduce:
      return in_network_reduction ? bytes : 2 * others * bytes;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
      return others * bytes;
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv:
      return bytes;
    case Collective::kAllToAll:
      return part_ranks * others * bytes;
  }
  return 0;
}

// Route latencies of build_cluster graphs (checked against Topology::route in the tests).
struct RouteLatencies {
  double intra = 0;      // GPU -> NVSwitch -> GPU
  double same_leaf = 0;  // GPU -> NIC -> leaf -> NIC -> GPU
  double via_spine = 0;  // ... leaf -> spine -> leaf ...
  bool spines = false;
};

CollectiveBound bound(Collective collective, uint64_t bytes, const ClusterSpec& spec, bool in_network_reduction) {
  CollectiveBound result;
  const int g = spec.gpus_per_node;
  const int nodes = spec.nodes;
  const int n = g * nodes;
  if (n < 2) return result;
  const double s = static_cast<double>(bytes);
  const FabricShape shape = fabric_shape(spec);

  // Cut 1: around each GPU. Its NVLink, and across nodes its share of the node's NIC bandwidth
  // (through its PCIe link); inside a node routes never use the NIC.
  const double node_nic_Bps = std::min(spec.nics_per_node * spec.nic_Bps, g * spec.pcie_Bps);
  double gpu_Bps = g > 1 ? spec.nvlink_Bps : 0;
  if (nodes > 1) gpu_Bps += std::min(spec.pcie_Bps, spec.nics_per_node * spec.nic_Bps / g);
  result.cuts.push_back({"GPU links", n, part_bytes(collective, s, n, 1, in_network_reduction), gpu_Bps, 0});
  // Cut 2: around each node, its NICs.
  if (nodes > 1) {
    result.cuts.push_back(
        {"node NICs", nodes, part_bytes(collective, s, nodes, g, in_network_reduction), node_nic_Bps, 0});
  }
  // Cut 3: around each leaf group, its leaves' uplinks to the spines (equal groups only).
  if (shape.spines > 0 && shape.leaf_groups > 1 && nodes % shape.nodes_per_leaf == 0) {
    const int leaves_per_group = spec.fabric == Fabric::kRailOptimized ? spec.nics_per_node : 1;
    result.cuts.push_back({"leaf-group uplinks", shape.leaf_groups,
                           part_bytes(collective, s, shape.leaf_groups, g * shape.nodes_per_leaf, in_network_reduction),
                           leaves_per_group * shape.leaf_uplink_Bps, 0});
  }
  for (size_t i = 0; i < result.cuts.size(); ++i) {
    CutBound& cut = result.cuts[i];
    cut.time_s = cut.bytes / cut.capacity_Bps;
    if (result.binding < 0 || cut.time_s > result.bandwidth_s) {
      result.binding = static_cast<int>(i);
      result.bandwidth_s = cut.time_s;
    }
  }

  // Latencies of the routes build_cluster's graphs give.
  RouteLatencies route;
  route.intra = 2 * spec.nvlink_latency_s;
  route.same_leaf = 2 * spec.pcie_latency_s + 2 * spec.nic_latency_s;
  route.via_spine = route.same_leaf + 2 * spec.switch_latency_s;
  route.spines = shape.spines > 0;
  // Two nodes share a leaf for some rail unless every leaf group holds a single node.
  const bool shared_leaf = shape.nodes_per_leaf > 1 || spec.fabric == Fabric::kSingleSwitch;
  const double inter_min = shared_leaf || !route.spines ? route.same_leaf : route.via_spine;
  // The farthest pair: across rails (rail-optimized with 2+ NICs), or across leaf groups.
  const bool far_needs_spine =
      route.spines && (shape.leaf_groups > 1 || (spec.fabric == Fabric::kRailOptimized && spec.nics_per_node > 1));
  const double inter_max = far_needs_spine ? route.via_spine : route.same_leaf;
  const double shortest = g > 1 ? route.intra : inter_min;
  double longest = 0;
  if (g > 1) longest = route.intra;
  if (nodes > 1) longest = std::max(longest, inter_max);
  if (collective == Collective::kSendRecv && nodes > 1) {
    // Rank r -> r + 1 crosses nodes from local g-1 to local 0: another rail when there are 2+ NICs.
    const bool cross_rail = spec.fabric == Fabric::kRailOptimized && spec.nics_per_node > 1;
    longest = std::max(g > 1 ? route.intra : 0.0, cross_rail || shape.leaf_groups > 1 ? inter_max : inter_min);
  }
  result.first_byte_s = shortest;
  result.dependency_s = longest;
  result.time_s = std::max(result.dependency_s, result.first_byte_s + result.bandwidth_s);

  result.pairwise_steps = static_cast<int>(std::ceil(std::log2(static_cast<double>(n)) - 1e-12));
  result.pairwise_latency_s =
      nodes > 1 ? (result.pairwise_steps - 1) * shortest + inter_min : result.pairwise_steps * shortest;
  return result;
}

}  // namespace

CollectiveBounds collective_bounds(Collective collective, uint64_t bytes, const ClusterSpec& spec) {
  validate(spec);
  CollectiveBounds bounds;
  bounds.without_in_network_reduction = bound(collective, bytes, spec, false);
  if (collective == Collective::kAllReduce) bounds.with_in_network_reduction = bound(collective, bytes, spec, true);
  return bounds;
}

}  // namespace tandem::models
