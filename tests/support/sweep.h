// What the executor sweeps share (host, the cuda stream plan, the NCCL plan): whether to run in
// full, and the layouts each algorithm runs on.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "core/types.h"

namespace tandem::testing {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
inline constexpr bool kSlowBuild = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
inline constexpr bool kSlowBuild = true;
#else
inline constexpr bool kSlowBuild = false;
#endif
#else
inline constexpr bool kSlowBuild = false;
#endif

// Sanitizer and unoptimised builds run a reduced sweep (each suite says which part), where the
// ranks' threads dominate; TANDEM_FULL_SWEEP=1 runs it in full anyway.
inline bool full_sweep() {
  static const bool full = [] {
    const char* forced = std::getenv("TANDEM_FULL_SWEEP");
    return !kSlowBuild || (forced != nullptr && std::string(forced) == "1");
  }();
  return full;
}

// The layouts an algorithm runs on: flat, except hierarchical, which needs whole nodes (4 ranks
// per node where n allows, else 2, else one node holding every rank); tree also runs on nodes of
// 4 (its trees are built over nodes).
inline std::vector<RankLayout> sweep_layouts(Algorithm algorithm, int n) {
  if (algorithm == Algorithm::kHierarchical) {
    const int per_node = n % 4 == 0 ? 4 : (n % 2 == 0 ? 2 : n);
    return {RankLayout::nodes(n / per_node, per_node)};
  }
  std::vector<RankLayout> result = {RankLayout::flat(n)};
  if (algorithm == Algorithm::kTree && n % 4 == 0 && n > 4) result.push_back(RankLayout::nodes(n / 4, 4));
  return result;
}

// NCCL's multi-node structure for the executor sweeps: whole nodes with NCCL's channel rings
// (RankLayout::nccl: each channel its own ring, leaving a node on a GPU of its own) and 2 channels
// per rank of a node (NCCL's doubled search channels), 2..4 nodes x 2..8 ranks. Ring and tree run
// with them; the other algorithms have no channels.
struct NodeCase {
  RankLayout layout;
  AlgoParams params;
  std::string name;
};
inline std::vector<NodeCase> nccl_node_cases() {
  std::vector<NodeCase> cases;
  for (int nodes : {2, 3, 4}) {
    for (int per_node : {2, 4, 8}) {
      AlgoParams params;
      params.channels = 2 * per_node;
      cases.push_back({RankLayout::nccl(nodes, per_node), params,
                       std::to_string(nodes) + "x" + std::to_string(per_node) + " nodes, " +
                           std::to_string(params.channels) + " channels"});
    }
  }
  return cases;
}

}  // namespace tandem::testing
