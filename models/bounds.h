// Physical lower bounds of a collective on a cluster: no algorithm can finish sooner on this
// hardware. Two terms (docs/cost-model.md derives them):
//
// - bandwidth: split the GPUs into p equal parts along a cut (each GPU; each node's NICs; each leaf
//   group's uplinks); every part must push what the collective needs across its share of the cut,
//   e.g. all_reduce without in-network reduction 2(p-1)/p x S per part per direction. The slowest
//   cut binds.
// - latency: the first byte cannot arrive before the shortest route's latency, and a result that
//   depends on every GPU cannot be ready before the longest route's latency.
//
// Sizes follow NCCL / nccl-tests: `bytes` is the per-rank buffer for all_reduce, broadcast, reduce
// and send_recv, the total for all_gather and reduce_scatter, and the per-rank total sent for
// all_to_all. One rank per GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/types.h"
#include "models/cluster.h"

namespace tandem::models {

struct CutBound {
  std::string cut;          // "GPU links", "node NICs", "leaf-group uplinks"
  int parts = 0;            // p: the cluster cut into p equal parts
  double bytes = 0;         // what must cross one part's share of the cut, per direction
  double capacity_Bps = 0;  // one part's share of the cut, per direction
  double time_s = 0;        // bytes / capacity_Bps
};

struct CollectiveBound {
  std::vector<CutBound> cuts;  // every cut considered (none with one GPU)
  int binding = -1;            // index of the slowest cut; -1 when there is none
  double bandwidth_s = 0;      // the slowest cut's time
  double first_byte_s = 0;     // latency of the shortest route between two GPUs
  double dependency_s = 0;     // latency of the longest route a result depends on
  double time_s = 0;           // max(dependency_s, first_byte_s + bandwidth_s): the bound
  // Algorithms that exchange with one peer per step (trees, doubling) need ceil(log2 n) steps;
  // each costs at least the shortest route, and one of them crosses nodes when there are several.
  int pairwise_steps = 0;
  double pairwise_latency_s = 0;
};

struct CollectiveBounds {
  CollectiveBound without_in_network_reduction;
  // With the reduction done in the switches (NVLS inside a node, SHARP across nodes), whether or
  // not the spec has them: all_reduce data crosses each cut once each way (S instead of
  // 2(p-1)/p x S). Set for all_reduce only: for the other collectives the binding direction carries
  // the same bytes either way.
  std::optional<CollectiveBound> with_in_network_reduction;
};

// Throws Error(kInvalidArgument) for a bad spec (validate()).
CollectiveBounds collective_bounds(Collective collective, uint64_t bytes, const ClusterSpec& spec);

}  // namespace tandem::models
