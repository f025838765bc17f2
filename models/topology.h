// models::Topology: a GPU cluster as a Boost.Graph graph of GPUs, NVSwitches, NICs and switches
// joined by full-duplex links, with static ECMP routing between GPUs and the rank layout the
// algorithms consume (ranks per node, rail-aligned ring order).
//
// Units: bandwidth in bytes per second per direction, latency in seconds, as SimGrid takes them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "core/schedule.h"

namespace tandem::models {

enum class VertexKind : uint8_t { kGpu, kNvSwitch, kNic, kLeaf, kSpine };
std::string_view name(VertexKind kind);

struct Vertex {
  VertexKind kind = VertexKind::kGpu;
  std::string name;  // unique, e.g. "n3-gpu5", "n3-nvswitch", "n3-nic5", "leaf-rail5", "spine2"
  int node = -1;     // node index for GPUs, NVSwitches and NICs; -1 for fabric switches
  int local = -1;    // GPU / NIC index inside the node
  int rail = -1;     // the rail a NIC or leaf serves (rail-optimized fabrics); -1 otherwise
  int rank = -1;     // GPUs: the global rank (node * gpus_per_node + local)
};

enum class LinkKind : uint8_t { kNvLink, kPcie, kNetwork };
std::string_view name(LinkKind kind);

struct Link {
  LinkKind kind = LinkKind::kNetwork;
  std::string name;          // unique
  double bandwidth_Bps = 0;  // per direction
  double latency_s = 0;
  uint32_t id = 0;           // dense index 0..link_count()-1 (SimGrid links and faults use it)
};

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, Vertex, Link>;
using VertexId = Graph::vertex_descriptor;

// One link of a route, in the direction travelled: `forward` is true when going from the link's
// lower-numbered endpoint vertex to the higher-numbered one.
struct Hop {
  uint32_t link = 0;
  bool forward = true;
  bool operator==(const Hop&) const = default;
};

struct Route {
  std::vector<Hop> hops;
  double latency_s = 0;          // sum of the hops' latencies
  double bottleneck_Bps = 0;     // smallest hop bandwidth
};

class Topology {
 public:
  // Takes a graph whose GPU vertices carry ranks 0..gpu_count-1 (each exactly once) and whose links
  // carry dense ids. `gpus_per_node` GPUs share a node index. Throws Error(kInvalidArgument) when
  // the graph breaks those rules or a GPU cannot reach another.
  Topology(Graph graph, int gpus_per_node, std::string description);

  const Graph& graph() const { return graph_; }
  const std::string& description() const { return description_; }
  int gpu_count() const { return static_cast<int>(gpu_vertex_.size()); }
  int gpus_per_node() const { return gpus_per_node_; }
  int node_count() const { return gpu_count() / gpus_per_node_; }
  size_t link_count() const { return links_.size(); }
  const Link& link(uint32_t id) const { return *links_[id]; }
  VertexId gpu_vertex(int rank) const { return gpu_vertex_[static_cast<size_t>(rank)]; }
  // The endpoints of a link, lower vertex first (the direction `Hop::forward` goes).
  std::pair<VertexId, VertexId> endpoints(uint32_t link) const { return endpoints_[link]; }

  // The route from GPU `src` to GPU `dst` (ranks, src != dst): a shortest path in hops; among equal
  // shortest paths the next hop is chosen by a deterministic hash of (src, dst, vertex): static ECMP.
  Route route(int src, int dst) const;

  // The layout the algorithms use: ranks per node and, with `rail_aligned`, a ring order in which
  // consecutive nodes are joined by GPUs of one rail, so every inter-node hop of the ring stays on
  // one rail leaf ("snake": node 0 local 0..m-1, node 1 local m-1..0, ...).
  RankLayout layout(bool rail_aligned = true) const;

  std::string to_dot() const;   // Graphviz
  std::string to_text() const;  // a readable summary: vertices and links by kind, per-node view

 private:
  Graph graph_;
  int gpus_per_node_;
  std::string description_;
  std::vector<VertexId> gpu_vertex_;
  std::vector<const Link*> links_;
  std::vector<std::pair<VertexId, VertexId>> endpoints_;
  // Routing caches (distances to destination vertices), filled lazily.
  mutable std::vector<std::vector<uint32_t>> distance_cache_;
  mutable std::vector<int> distance_index_;
};

}  // namespace tandem::models
