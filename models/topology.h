// models::Topology: a GPU cluster as a graph of GPUs, NVSwitches, NICs and switches
// joined by full-duplex links, with static ECMP routing between GPUs and the rank layout the
// algorithms consume (ranks per node, rail-aligned ring order).
//
// Units: bandwidth in bytes per second per direction, latency in seconds, as SimGrid takes them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/schedule.h"

namespace tandem::models {

enum class VertexKind : uint8_t { kGpu, kNvSwitch, kNic, kLeaf, kSpine };
std::string_view name(VertexKind kind);

struct Vertex {
  VertexKind kind = VertexKind::kGpu;
  std::string name;  // unique, e.g. "n3-gpu5", "n3-nvswitch", "n3-nic5", "leaf-rail5", "spine2"
  int node = -1;     // node index for GPUs, NVSwitches and NICs; -1 for fabric switches
  int local = -1;    // GPU / NIC index inside the node
  int rail = -1;     // NICs: their index in the node; GPUs: their NIC's; rail-optimized leaves: the rail
                     // they serve; -1 otherwise
  int rank = -1;     // GPUs: the global rank (node * gpus_per_node + local)
};

enum class LinkKind : uint8_t { kNvLink, kPcie, kNetwork };
std::string_view name(LinkKind kind);

struct Link {
  LinkKind kind = LinkKind::kNetwork;
  std::string name;          // unique
  double bandwidth_Bps = 0;  // per direction
  double latency_s = 0;
  uint32_t id = 0;  // dense index 0..link_count()-1 (SimGrid links and faults use it)
};

// The Boost.Graph graph a Topology is built from (models/topology_graph.h defines it; only the code
// that builds or indexes a graph includes Boost's headers, see docs/architecture.md "Build time").
class Graph;
using VertexId = std::size_t;  // Graph's vertex_descriptor (topology_graph.h checks it)

// One link of a route, in the direction travelled: `forward` is true when going from the link's
// lower-numbered endpoint vertex to the higher-numbered one.
struct Hop {
  uint32_t link = 0;
  bool forward = true;
  bool operator==(const Hop&) const = default;
};

struct Route {
  std::vector<Hop> hops;
  double latency_s = 0;       // sum of the hops' latencies
  double bottleneck_Bps = 0;  // smallest hop bandwidth
};

class Topology {
 public:
  // Takes a graph whose GPU vertices carry ranks 0..gpu_count-1 (each exactly once) and whose links
  // carry dense ids. `gpus_per_node` GPUs share a node index (GPU rank r: node r / gpus_per_node,
  // local r % gpus_per_node). Vertex and link names are unique; bandwidths positive, latencies not
  // negative. GPUs are endpoints, never routers: route() does not pass through a third GPU. Throws
  // Error(kInvalidArgument) when the graph breaks those rules or a GPU cannot reach another.
  // (Boost's adjacency_list has no move constructor, so this copies `graph`; large graphs are
  // better built in place with the constructor below.)
  Topology(Graph graph, int gpus_per_node, std::string description);
  // The same, with the graph built in place by `build`.
  Topology(const std::function<void(Graph&)>& build, int gpus_per_node, std::string description);

  // Copies share the (immutable) graph and the routing cache: copying a Topology is cheap.
  size_t vertex_count() const { return state_->vertices.size(); }
  const Vertex& vertex(VertexId v) const { return *state_->vertices[v]; }
  const std::string& description() const { return state_->description; }
  int gpu_count() const { return static_cast<int>(state_->gpu_vertex.size()); }
  int gpus_per_node() const { return state_->gpus_per_node; }
  int node_count() const { return gpu_count() / gpus_per_node(); }
  size_t link_count() const { return state_->links.size(); }
  const Link& link(uint32_t id) const { return *state_->links[id]; }
  VertexId gpu_vertex(int rank) const { return state_->gpu_vertex[static_cast<size_t>(rank)]; }
  // The endpoints of a link, lower vertex first (the direction `Hop::forward` goes).
  std::pair<VertexId, VertexId> endpoints(uint32_t link) const { return state_->endpoints[link]; }

  // By name; nullopt when there is none.
  std::optional<VertexId> find_vertex(std::string_view name) const;
  std::optional<uint32_t> find_link(std::string_view name) const;

  // The route from GPU `src` to GPU `dst` (ranks, src != dst): a shortest path in hops that does
  // not pass through another GPU. At each vertex the next hops that stay on a shortest path are
  // narrowed to the widest links (so GPU -> NVSwitch -> GPU wins over a PCIe detour of equal
  // length), then one is chosen by a deterministic hash of (src, dst, vertex): static ECMP.
  // About a microsecond per call once the distance map of dst's attachment switch is cached (one
  // BFS per leaf, ever); safe to call from several threads. Throws Error(kInvalidArgument) for bad
  // ranks.
  Route route(int src, int dst) const;

  // The route from GPU `src` to GPU `dst` that avoids the links `dead_links` (link ids, any
  // order): route(src, dst) itself when it crosses none of them (so unaffected pairs keep their
  // ECMP choice, and with no dead links this equals route()); otherwise the shortest path around
  // them in hops, then latency, then the widest bottleneck, with the same hash among ties.
  // Unlike route(), a third GPU may relay when nothing else connects: NCCL's PXN, where a GPU
  // whose NIC is dead hands its data over NVLink to a GPU of its node whose NIC works, which
  // forwards it on its own rail. Relays are used only when no path without them exists. One
  // Dijkstra over the graph per call when the normal route is hit (meant for fault handling, not
  // for every pair of a large ring). Throws Error(kInvalidArgument) for bad ranks or link ids, and
  // Error(kUnsupported) "no route from X to Y around the failed links" when they disconnect the
  // pair.
  Route route_avoiding(int src, int dst, const std::vector<uint32_t>& dead_links) const;

  // Whether `route` travels over link `link` (either direction).
  static bool crosses(const Route& route, uint32_t link);

  // The links of NIC `nic` of node `node` (its index in the node, = its rail): its PCIe link(s) to
  // its GPU(s) and its network link(s) to the fabric, in id order: what a dead NIC takes down.
  // Throws Error(kInvalidArgument) when there is no such NIC.
  std::vector<uint32_t> nic_links(int node, int nic) const;

  // The layout the algorithms use: ranks per node and, with `rail_aligned`, NCCL's channel rings
  // (nccl_rings in core/schedule.h): channel c enters and leaves each node on a GPU pair of its own,
  // so every hop between consecutive nodes stays on one rail and the channels together use every
  // NIC of a node (with an odd node count the hop back to node 0 changes rails, as in NCCL).
  RankLayout layout(bool rail_aligned = true) const;

  std::string to_dot() const;   // Graphviz: one subgraph per node, fabric switches outside
  std::string to_text() const;  // a readable summary: vertices and links by kind, per-node view

 private:
  struct Neighbor {
    uint32_t vertex;
    uint32_t link;
  };
  // The graph and what is derived from it, immutable once built and shared by copies, plus the
  // routing cache: hop distances from fabric switches (leaf, spine) to every vertex, filled lazily
  // under cache_mutex (topology.cc says why per switch and not per destination GPU).
  struct State {
    std::unique_ptr<Graph> graph;  // complete in topology.cc only
    std::vector<const Vertex*> vertices;  // into graph's vertex properties
    int gpus_per_node = 1;
    std::string description;
    std::vector<VertexId> gpu_vertex;
    std::vector<const Link*> links;  // into graph's edge properties
    std::vector<std::pair<VertexId, VertexId>> endpoints;
    std::vector<uint32_t> neighbor_offset;  // CSR adjacency: neighbors[offset[v] .. offset[v + 1])
    std::vector<Neighbor> neighbors;
    std::unordered_map<std::string_view, uint32_t> vertex_by_name;  // views into graph
    std::unordered_map<std::string_view, uint32_t> link_by_name;
    std::mutex cache_mutex;
    std::vector<std::unique_ptr<uint16_t[]>> distance_cache;
    std::vector<int> distance_index;  // vertex -> slot in distance_cache, -1 if not computed
  };
  struct RouteScratch;  // route()'s per-thread distances near the destination (topology.cc)
  struct DetourLabel;   // route_avoiding()'s (hops, latency) of a vertex to the destination
  void index();         // fills state_ from state_->graph and checks the rules
  void index_vertices();
  void index_links();
  void index_neighbors();
  void check_reachability() const;
  std::span<const Neighbor> neighbors(uint32_t vertex) const;
  bool is_gpu(uint32_t vertex) const { return state_->vertices[vertex]->kind == VertexKind::kGpu; }
  const uint16_t* distances_from(uint32_t fabric_vertex) const;
  std::vector<std::pair<uint32_t, uint32_t>> local_region(uint32_t target, RouteScratch& scratch) const;
  bool label_detours(uint32_t source, uint32_t target, const std::vector<char>& dead, bool relays,
                     std::vector<DetourLabel>& label) const;
  template <typename Closer>
  Route walk(int src, int dst, uint32_t hops, std::string_view caller, Closer closer) const;

  std::shared_ptr<State> state_;
};

}  // namespace tandem::models
