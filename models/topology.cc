#include "models/topology.h"
#include "models/topology_graph.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/error.h"
#include "core/hash.h"

namespace tandem::models {

std::string_view name(VertexKind kind) {
  switch (kind) {
    case VertexKind::kGpu:
      return "gpu";
    case VertexKind::kNvSwitch:
      return "nvswitch";
    case VertexKind::kNic:
      return "nic";
    case VertexKind::kLeaf:
      return "leaf";
    case VertexKind::kSpine:
      return "spine";
  }
  return "?";
}

std::string_view name(LinkKind kind) {
  switch (kind) {
    case LinkKind::kNvLink:
      return "nvlink";
    case LinkKind::kPcie:
      return "pcie";
    case LinkKind::kNetwork:
      return "network";
  }
  return "?";
}

namespace {

constexpr uint16_t kUnreachable = std::numeric_limits<uint16_t>::max();
constexpr uint32_t kFar = std::numeric_limits<uint32_t>::max();
constexpr uint32_t kNoVertex = std::numeric_limits<uint32_t>::max();

// How many fabric switches of one kind, and how many nodes, to_text() lists before summarising.
constexpr size_t kTextMaxSwitches = 8;

std::string_view plural(VertexKind kind) {
  switch (kind) {
    case VertexKind::kGpu:
      return "GPUs";
    case VertexKind::kNvSwitch:
      return "NVSwitches";
    case VertexKind::kNic:
      return "NICs";
    case VertexKind::kLeaf:
      return "leaves";
    case VertexKind::kSpine:
      return "spines";
  }
  return "?";
}

bool is_fabric(VertexKind kind) { return kind == VertexKind::kLeaf || kind == VertexKind::kSpine; }

// Well-mixed low bits, so `hash % candidates` spreads consecutive ranks over the spines instead of
// striping them.
uint64_t mix(uint64_t x) { return splitmix64(x); }

uint64_t ecmp_hash(int src, int dst, uint32_t vertex) {
  return mix(mix(mix(static_cast<uint64_t>(src)) ^ static_cast<uint64_t>(dst)) ^ vertex);
}

std::string format_bandwidth(double bytes_per_s) { return fmt::format("{:g} GB/s", bytes_per_s / 1e9); }
std::string format_latency(double seconds) { return fmt::format("{:g} us", seconds * 1e6); }

}  // namespace

// Per-thread scratch of route(): distances inside the destination's local region, stamped with a
// generation so that no query clears an array the size of the graph.
struct Topology::RouteScratch {
  std::vector<uint32_t> stamp;
  std::vector<uint32_t> distance;
  std::vector<uint32_t> queue;
  uint32_t generation = 0;

  void begin(size_t vertices) {
    if (stamp.size() < vertices) {
      stamp.assign(vertices, 0);
      distance.resize(vertices);
      generation = 0;
    }
    if (++generation == 0) {  // wrapped: every old stamp could now look current
      std::fill(stamp.begin(), stamp.end(), 0);
      generation = 1;
    }
  }
};

Topology::Topology(Graph graph, int gpus_per_node, std::string description)
    : Topology([&graph](Graph& g) { g = std::move(graph); }, gpus_per_node, std::move(description)) {}

Topology::Topology(const std::function<void(Graph&)>& build, int gpus_per_node, std::string description)
    : state_(std::make_shared<State>()) {
  state_->graph = std::make_unique<Graph>();
  build(*state_->graph);
  state_->gpus_per_node = gpus_per_node;
  state_->description = std::move(description);
  index();
  check_reachability();
}

void Topology::index() {
  index_vertices();
  index_links();
  index_neighbors();
  std::lock_guard lock(state_->cache_mutex);
  state_->distance_cache.clear();
  state_->distance_index.assign(vertex_count(), -1);
}

// Vertex names, and the GPU of each rank, checking that the ranks fill whole nodes.
void Topology::index_vertices() {
  const size_t vertex_count = boost::num_vertices(*state_->graph);
  if (state_->gpus_per_node < 1)
    fail(ErrorCode::kInvalidArgument, "gpus_per_node must be at least 1 (got {})", state_->gpus_per_node);
  if (vertex_count >= kNoVertex) fail(ErrorCode::kInvalidArgument, "too many vertices ({})", vertex_count);

  state_->vertices.resize(vertex_count);
  for (VertexId v = 0; v < vertex_count; ++v) state_->vertices[v] = &(*state_->graph)[v];
  size_t gpu_count = 0;
  for (VertexId v = 0; v < vertex_count; ++v) gpu_count += vertex(v).kind == VertexKind::kGpu ? 1 : 0;
  if (gpu_count == 0) fail(ErrorCode::kInvalidArgument, "the topology has no GPU");
  if (gpu_count % static_cast<size_t>(state_->gpus_per_node) != 0) {
    fail(ErrorCode::kInvalidArgument, "{} GPUs do not fill nodes of {} GPUs", gpu_count, state_->gpus_per_node);
  }

  state_->vertex_by_name.clear();
  state_->vertex_by_name.reserve(vertex_count);
  state_->gpu_vertex.assign(gpu_count, static_cast<VertexId>(kNoVertex));
  for (VertexId v = 0; v < vertex_count; ++v) {
    const Vertex& vertex = (*state_->graph)[v];
    if (!state_->vertex_by_name.emplace(vertex.name, static_cast<uint32_t>(v)).second) {
      fail(ErrorCode::kInvalidArgument, "two vertices are named '{}'", vertex.name);
    }
    if (vertex.kind != VertexKind::kGpu) continue;
    if (vertex.rank < 0 || static_cast<size_t>(vertex.rank) >= gpu_count) {
      fail(ErrorCode::kInvalidArgument, "GPU '{}' has rank {}, outside 0..{}", vertex.name, vertex.rank, gpu_count - 1);
    }
    VertexId& slot = state_->gpu_vertex[static_cast<size_t>(vertex.rank)];
    if (slot != static_cast<VertexId>(kNoVertex)) {
      fail(ErrorCode::kInvalidArgument, "GPUs '{}' and '{}' both have rank {}", (*state_->graph)[slot].name, vertex.name,
           vertex.rank);
    }
    slot = v;
    if (vertex.node != vertex.rank / state_->gpus_per_node || vertex.local != vertex.rank % state_->gpus_per_node) {
      fail(ErrorCode::kInvalidArgument,
           "GPU '{}' (rank {}) says node {} local {}; with {} GPUs per node it is node {} local {}", vertex.name,
           vertex.rank, vertex.node, vertex.local, state_->gpus_per_node, vertex.rank / state_->gpus_per_node,
           vertex.rank % state_->gpus_per_node);
    }
  }
}

// Links by id and by name, with their endpoints, checking ids, names, bandwidths and latencies.
void Topology::index_links() {
  const size_t edge_count = boost::num_edges(*state_->graph);
  state_->links.assign(edge_count, nullptr);
  state_->endpoints.assign(edge_count, {});
  state_->link_by_name.clear();
  state_->link_by_name.reserve(edge_count);
  for (auto [it, end] = boost::edges(*state_->graph); it != end; ++it) {
    const Link& link = (*state_->graph)[*it];
    const VertexId a = boost::source(*it, *state_->graph);
    const VertexId b = boost::target(*it, *state_->graph);
    if (link.id >= edge_count || state_->links[link.id] != nullptr) {
      fail(ErrorCode::kInvalidArgument, "link '{}' has id {}: ids must be 0..{}, each once", link.name, link.id,
           edge_count - 1);
    }
    if (!(link.bandwidth_Bps > 0) || !std::isfinite(link.bandwidth_Bps)) {
      fail(ErrorCode::kInvalidArgument, "link '{}' has bandwidth {} B/s; it must be positive", link.name,
           link.bandwidth_Bps);
    }
    if (!(link.latency_s >= 0) || !std::isfinite(link.latency_s)) {
      fail(ErrorCode::kInvalidArgument, "link '{}' has latency {} s; it must not be negative", link.name,
           link.latency_s);
    }
    if (a == b) fail(ErrorCode::kInvalidArgument, "link '{}' joins '{}' to itself", link.name, vertex(a).name);
    if (!state_->link_by_name.emplace(link.name, link.id).second) {
      fail(ErrorCode::kInvalidArgument, "two links are named '{}'", link.name);
    }
    state_->links[link.id] = &link;
    state_->endpoints[link.id] = {std::min(a, b), std::max(a, b)};
  }
}

// CSR adjacency in out-edge order, so that ECMP candidates come in the same order every run.
void Topology::index_neighbors() {
  const size_t vertex_count = boost::num_vertices(*state_->graph);
  std::vector<uint32_t> degree(vertex_count + 1, 0);
  for (const auto& [a, b] : state_->endpoints) {
    ++degree[a];
    ++degree[b];
  }
  state_->neighbor_offset.assign(vertex_count + 1, 0);
  for (size_t v = 0; v < vertex_count; ++v) state_->neighbor_offset[v + 1] = state_->neighbor_offset[v] + degree[v];
  state_->neighbors.assign(state_->neighbor_offset[vertex_count], {});
  for (VertexId v = 0; v < vertex_count; ++v) {
    uint32_t next = state_->neighbor_offset[v];
    for (auto [it, end] = boost::out_edges(v, *state_->graph); it != end; ++it) {
      state_->neighbors[next++] = {static_cast<uint32_t>(boost::target(*it, *state_->graph)), (*state_->graph)[*it].id};
    }
  }
}

// Routes may not pass through a GPU, so two GPUs can talk exactly when they share a link or touch a
// common connected component of the graph without its GPUs (the NVSwitch of their node, or the
// fabric with every NIC). The usual case, one component that every GPU touches, is checked in
// O(V + E); only odd hand-made graphs fall back to comparing pairs.
void Topology::check_reachability() const {
  const size_t vertex_count = boost::num_vertices(*state_->graph);
  std::vector<uint32_t> parent(vertex_count);
  for (uint32_t v = 0; v < vertex_count; ++v) parent[v] = v;
  auto find = [&parent](uint32_t v) {
    while (parent[v] != v) v = parent[v] = parent[parent[v]];
    return v;
  };
  for (uint32_t link = 0; link < state_->endpoints.size(); ++link) {
    const auto [a, b] = state_->endpoints[link];
    if (!is_gpu(static_cast<uint32_t>(a)) && !is_gpu(static_cast<uint32_t>(b))) {
      parent[find(static_cast<uint32_t>(a))] = find(static_cast<uint32_t>(b));
    }
  }
  const int n = gpu_count();
  if (n == 1) return;
  // Components touched by each GPU, and GPUs joined directly.
  std::vector<std::vector<uint32_t>> touched(static_cast<size_t>(n));
  std::map<uint32_t, int> touch_count;
  for (int rank = 0; rank < n; ++rank) {
    auto& list = touched[static_cast<size_t>(rank)];
    for (const Neighbor& nb : neighbors(static_cast<uint32_t>(gpu_vertex(rank)))) {
      if (!is_gpu(nb.vertex)) list.push_back(find(nb.vertex));
    }
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    for (uint32_t component : list) ++touch_count[component];
  }
  for (const auto& [component, count] : touch_count) {
    if (count == n) return;
  }
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      const auto& ta = touched[static_cast<size_t>(a)];
      const auto& tb = touched[static_cast<size_t>(b)];
      std::vector<uint32_t> common;
      std::set_intersection(ta.begin(), ta.end(), tb.begin(), tb.end(), std::back_inserter(common));
      if (!common.empty()) continue;
      bool direct = false;
      for (const Neighbor& nb : neighbors(static_cast<uint32_t>(gpu_vertex(a)))) {
        direct = direct || nb.vertex == static_cast<uint32_t>(gpu_vertex(b));
      }
      if (!direct) {
        fail(ErrorCode::kInvalidArgument,
             "GPU '{}' (rank {}) cannot reach GPU '{}' (rank {}) without passing through a GPU",
             vertex(gpu_vertex(a)).name, a, vertex(gpu_vertex(b)).name, b);
      }
    }
  }
}

std::span<const Topology::Neighbor> Topology::neighbors(uint32_t vertex) const {
  return {state_->neighbors.data() + state_->neighbor_offset[vertex],
          state_->neighbors.data() + state_->neighbor_offset[vertex + 1]};
}

std::optional<VertexId> Topology::find_vertex(std::string_view name) const {
  auto it = state_->vertex_by_name.find(name);
  if (it == state_->vertex_by_name.end()) return std::nullopt;
  return static_cast<VertexId>(it->second);
}

std::optional<uint32_t> Topology::find_link(std::string_view name) const {
  auto it = state_->link_by_name.find(name);
  if (it == state_->link_by_name.end()) return std::nullopt;
  return it->second;
}

// Hop distances from one fabric switch to every vertex, GPUs reached but never expanded (they do
// not forward). Computed once per switch and kept: 2 bytes per vertex per switch.
const uint16_t* Topology::distances_from(uint32_t fabric_vertex) const {
  std::lock_guard lock(state_->cache_mutex);
  const int slot = state_->distance_index[fabric_vertex];
  if (slot >= 0) return state_->distance_cache[static_cast<size_t>(slot)].get();

  const size_t vertex_count = boost::num_vertices(*state_->graph);
  auto distance = std::make_unique<uint16_t[]>(vertex_count);
  std::fill(distance.get(), distance.get() + vertex_count, kUnreachable);
  std::vector<uint32_t> queue;
  queue.reserve(vertex_count);
  distance[fabric_vertex] = 0;
  queue.push_back(fabric_vertex);
  for (size_t head = 0; head < queue.size(); ++head) {
    const uint32_t v = queue[head];
    if (vertex(v).kind == VertexKind::kGpu) continue;
    if (distance[v] + 1 >= kUnreachable) {
      fail(ErrorCode::kUnsupported, "the topology's diameter exceeds {} hops", kUnreachable - 1);
    }
    for (const Neighbor& nb : neighbors(v)) {
      if (distance[nb.vertex] != kUnreachable) continue;
      distance[nb.vertex] = static_cast<uint16_t>(distance[v] + 1);
      queue.push_back(nb.vertex);
    }
  }
  state_->distance_index[fabric_vertex] = static_cast<int>(state_->distance_cache.size());
  state_->distance_cache.push_back(std::move(distance));
  return state_->distance_cache.back().get();
}

// The walk that route() and route_avoiding() end with, from src's GPU to dst's in `hops` hops: at
// each vertex, `hops_left` hops from the target, the neighbours that `closer(vertex, hops_left,
// neighbor)` accepts (those one step closer), narrowed to the widest links, one of them chosen by
// the ECMP hash of (src, dst, vertex). `caller` names the function in the error for a vertex where
// no neighbour is accepted, which consistent distances rule out: never loop forever.
template <typename Closer>
Route Topology::walk(int src, int dst, uint32_t hops, std::string_view caller, Closer closer) const {
  const uint32_t target = static_cast<uint32_t>(gpu_vertex(dst));
  Route route;
  route.bottleneck_Bps = std::numeric_limits<double>::infinity();
  route.hops.reserve(hops);
  std::vector<Neighbor> candidates;
  uint32_t v = static_cast<uint32_t>(gpu_vertex(src));
  for (uint32_t hops_left = hops; v != target; --hops_left) {
    candidates.clear();
    double widest = 0;
    for (const Neighbor& nb : neighbors(v)) {
      if (!closer(v, hops_left, nb)) continue;
      const double bandwidth = state_->links[nb.link]->bandwidth_Bps;
      if (bandwidth > widest) {
        candidates.clear();
        widest = bandwidth;
      }
      if (bandwidth == widest) candidates.push_back(nb);
    }
    if (candidates.empty()) {
      fail(ErrorCode::kUnsupported, "{} {} -> {}: lost the path at '{}'", caller, src, dst, vertex(v).name);
    }
    const Neighbor& chosen = candidates[ecmp_hash(src, dst, v) % candidates.size()];
    const Link& link = *state_->links[chosen.link];
    route.hops.push_back({chosen.link, state_->endpoints[chosen.link].first == v});
    route.latency_s += link.latency_s;
    route.bottleneck_Bps = std::min(route.bottleneck_Bps, link.bandwidth_Bps);
    v = chosen.vertex;
  }
  return route;
}

// Shortest paths without a distance map per destination GPU (16,384 maps of 35,000 vertices would
// be gigabytes). Split the graph at its fabric switches (leaves, spines): the destination d sits in
// a small local region R (d's NVSwitch and NIC, the GPUs they reach; GPUs do not forward), and a
// path from outside R enters it for the last time from a fabric switch a adjacent to R, its
// "attachment" (for a DGX GPU: its rail leaf). So, exactly,
//
//   dist(w, d) = min( dist_R(w, d) if w in R,  min over a of dist(w, a) + dist_R(a, d) )
//
// where dist_R stays inside R (a BFS over a dozen vertices per query) and dist(w, a) comes from
// the cached full-graph map of a. A 16k-GPU ring thus needs one map per leaf (a few hundred),
// not one per GPU. The route then walks from src, at each vertex keeping the neighbours one hop
// closer to d, the widest of them, and picking one by hash.
Route Topology::route(int src, int dst) const {
  const int n = gpu_count();
  if (src < 0 || src >= n || dst < 0 || dst >= n) {
    fail(ErrorCode::kInvalidArgument, "route {} -> {}: ranks must be in 0..{}", src, dst, n - 1);
  }
  if (src == dst)
    fail(ErrorCode::kInvalidArgument, "route {} -> {}: source and destination are the same GPU", src, dst);
  const uint32_t source = static_cast<uint32_t>(gpu_vertex(src));
  const uint32_t target = static_cast<uint32_t>(gpu_vertex(dst));

  thread_local RouteScratch scratch;
  scratch.begin(vertex_count());
  const uint32_t generation = scratch.generation;
  const std::vector<std::pair<uint32_t, uint32_t>> attachments = local_region(target, scratch);
  std::vector<std::pair<const uint16_t*, uint32_t>> maps;
  maps.reserve(attachments.size());
  for (const auto& [vertex, offset] : attachments) maps.emplace_back(distances_from(vertex), offset);

  auto distance_to_target = [&](uint32_t w) {
    uint32_t best = scratch.stamp[w] == generation ? scratch.distance[w] : kFar;
    for (const auto& [map, offset] : maps) {
      if (map[w] != kUnreachable) best = std::min(best, map[w] + offset);
    }
    return best;
  };

  const uint32_t hops = distance_to_target(source);
  if (hops == kFar) fail(ErrorCode::kInvalidArgument, "no route from rank {} to rank {}", src, dst);
  return walk(src, dst, hops, "route", [&](uint32_t, uint32_t hops_left, const Neighbor& nb) {
    if (nb.vertex != target && is_gpu(nb.vertex)) return false;
    return distance_to_target(nb.vertex) == hops_left - 1;
  });
}

// route()'s local region around the destination `target`: hop distances inside it in `scratch`
// (stamped with its current generation), and its attachments, the fabric switches adjacent to it,
// each with its hops to `target`.
std::vector<std::pair<uint32_t, uint32_t>> Topology::local_region(uint32_t target, RouteScratch& scratch) const {
  const uint32_t generation = scratch.generation;
  std::vector<std::pair<uint32_t, uint32_t>> attachments;  // (fabric switch, hops from it to target)
  scratch.queue.clear();
  scratch.queue.push_back(target);
  scratch.stamp[target] = generation;
  scratch.distance[target] = 0;
  for (size_t head = 0; head < scratch.queue.size(); ++head) {
    const uint32_t v = scratch.queue[head];
    if (v != target && is_gpu(v)) continue;
    const uint32_t next = scratch.distance[v] + 1;
    for (const Neighbor& nb : neighbors(v)) {
      if (is_fabric(vertex(nb.vertex).kind)) {
        auto it = std::find_if(attachments.begin(), attachments.end(),
                               [&nb](const auto& entry) { return entry.first == nb.vertex; });
        if (it == attachments.end()) {
          attachments.emplace_back(nb.vertex, next);
        } else {
          it->second = std::min(it->second, next);
        }
        continue;
      }
      if (scratch.stamp[nb.vertex] == generation) continue;
      scratch.stamp[nb.vertex] = generation;
      scratch.distance[nb.vertex] = next;
      scratch.queue.push_back(nb.vertex);
    }
  }
  return attachments;
}

// A vertex's (hops, latency) to the target of route_avoiding(), ordered hops first.
struct Topology::DetourLabel {
  uint32_t hops = kFar;
  double latency_s = 0;
  bool operator<(const DetourLabel& other) const {
    return hops != other.hops ? hops < other.hops : latency_s < other.latency_s;
  }
};

// Around dead links. The normal route is kept whenever it avoids them: it is a shortest path of
// the graph, so also of the graph without them, and flows that no fault touches keep their ECMP
// choice. Otherwise a Dijkstra from the destination over the live links labels every vertex with
// its (hops, latency) to it, GPUs other than the destination not expanded (they do not forward);
// only when that leaves the source unreached is it run again with GPUs expanded, i.e. relays
// allowed (PXN). The walk from the source is route()'s: at each vertex the live neighbours one
// label step closer, the widest of them, one picked by the ECMP hash.
Route Topology::route_avoiding(int src, int dst, const std::vector<uint32_t>& dead_links) const {
  for (uint32_t link : dead_links) {
    if (link >= link_count()) {
      fail(ErrorCode::kInvalidArgument, "dead link {}: link ids are 0..{}", link, link_count() - 1);
    }
  }
  Route normal = route(src, dst);
  if (std::none_of(dead_links.begin(), dead_links.end(), [&normal](uint32_t link) { return crosses(normal, link); })) {
    return normal;
  }
  std::vector<char> dead(link_count(), 0);
  for (uint32_t link : dead_links) dead[link] = 1;

  const uint32_t source = static_cast<uint32_t>(gpu_vertex(src));
  const uint32_t target = static_cast<uint32_t>(gpu_vertex(dst));
  std::vector<DetourLabel> label(vertex_count());
  const bool relays = !label_detours(source, target, dead, /*relays=*/false, label);
  if (relays && !label_detours(source, target, dead, /*relays=*/true, label)) {
    fail(ErrorCode::kUnsupported, "no route from {} (rank {}) to {} (rank {}) around the failed links",
         vertex(source).name, src, vertex(target).name, dst);
  }

  // Latencies are sums in different orders: equal within rounding counts as equal.
  auto one_step_closer = [](const DetourLabel& from, const DetourLabel& to, double link_latency_s) {
    return to.hops + 1 == from.hops &&
           std::abs(to.latency_s + link_latency_s - from.latency_s) <= 1e-9 * std::max(from.latency_s, 1e-12);
  };
  return walk(src, dst, label[source].hops, "route_avoiding", [&](uint32_t from, uint32_t, const Neighbor& nb) {
    if (dead[nb.link] != 0 || label[nb.vertex].hops == kFar) return false;
    if (nb.vertex != target && is_gpu(nb.vertex) && (!relays || nb.vertex == source)) return false;
    return one_step_closer(label[from], label[nb.vertex], state_->links[nb.link]->latency_s);
  });
}

// route_avoiding()'s Dijkstra from `target` over the links not `dead`: every vertex's label, GPUs
// other than the target expanded only with `relays`. Stops once `source` is settled; returns
// whether it was reached.
bool Topology::label_detours(uint32_t source, uint32_t target, const std::vector<char>& dead, bool relays,
                             std::vector<DetourLabel>& label) const {
  std::fill(label.begin(), label.end(), DetourLabel{});
  using Entry = std::pair<DetourLabel, uint32_t>;
  auto later = [](const Entry& a, const Entry& b) { return b.first < a.first; };
  std::priority_queue<Entry, std::vector<Entry>, decltype(later)> queue(later);
  label[target] = {0, 0.0};
  queue.push({label[target], target});
  while (!queue.empty()) {
    const auto [at, v] = queue.top();
    queue.pop();
    if (label[v] < at) continue;  // a stale entry
    if (v == source) return true;
    if (v != target && is_gpu(v) && !relays) continue;
    for (const Neighbor& nb : neighbors(v)) {
      if (dead[nb.link] != 0) continue;
      const DetourLabel next{at.hops + 1, at.latency_s + state_->links[nb.link]->latency_s};
      if (next < label[nb.vertex]) {
        label[nb.vertex] = next;
        queue.push({next, nb.vertex});
      }
    }
  }
  return false;
}

bool Topology::crosses(const Route& route, uint32_t link) {
  return std::any_of(route.hops.begin(), route.hops.end(), [link](const Hop& hop) { return hop.link == link; });
}

std::vector<uint32_t> Topology::nic_links(int node, int nic) const {
  const size_t vertex_count = boost::num_vertices(*state_->graph);
  for (uint32_t v = 0; v < vertex_count; ++v) {
    const Vertex& vertex = (*state_->graph)[v];
    if (vertex.kind != VertexKind::kNic || vertex.node != node || vertex.local != nic) continue;
    std::vector<uint32_t> links;
    for (const Neighbor& nb : neighbors(v)) links.push_back(nb.link);
    std::sort(links.begin(), links.end());
    return links;
  }
  fail(ErrorCode::kInvalidArgument, "node {} has no NIC {} (nodes 0..{})", node, nic, node_count() - 1);
}

// NCCL's channel rings (core/schedule.h nccl_rings): every channel leaves each node on the GPU,
// and so the NIC and rail, it enters the next node on.
RankLayout Topology::layout(bool rail_aligned) const {
  if (!rail_aligned) return RankLayout::nodes(node_count(), state_->gpus_per_node);
  return RankLayout::nccl(node_count(), state_->gpus_per_node);
}

std::string Topology::to_dot() const {
  const size_t vertex_count = boost::num_vertices(*state_->graph);
  std::string out = "graph tandem {\n";
  out += fmt::format("  label=\"{}\";\n", state_->description);
  out += "  node [fontname=\"Helvetica\"];\n";
  auto vertex_line = [this](VertexId v, std::string_view indent) {
    const Vertex& vertex = (*state_->graph)[v];
    std::string label = vertex.name;
    if (vertex.kind == VertexKind::kGpu) label += fmt::format("\\nrank {}", vertex.rank);
    std::string_view shape = vertex.kind == VertexKind::kGpu   ? "box"
                             : vertex.kind == VertexKind::kNic ? "ellipse"
                                                               : "hexagon";
    return fmt::format("{}\"{}\" [kind={}, shape={}, label=\"{}\"];\n", indent, vertex.name, name(vertex.kind), shape,
                       label);
  };
  // Vertices of one node together in a cluster subgraph; fabric switches (node -1) at the top level.
  std::map<int, std::vector<VertexId>> by_node;
  for (VertexId v = 0; v < vertex_count; ++v) by_node[vertex(v).node].push_back(v);
  for (const auto& [node, vertices] : by_node) {
    if (node < 0) continue;
    out += fmt::format("  subgraph cluster_n{} {{\n    label=\"node {}\";\n", node, node);
    for (VertexId v : vertices) out += vertex_line(v, "    ");
    out += "  }\n";
  }
  if (auto it = by_node.find(-1); it != by_node.end()) {
    for (VertexId v : it->second) out += vertex_line(v, "  ");
  }
  for (uint32_t id = 0; id < state_->links.size(); ++id) {
    const Link& link = *state_->links[id];
    const auto [a, b] = state_->endpoints[id];
    out += fmt::format("  \"{}\" -- \"{}\" [id={}, name=\"{}\", kind={}, label=\"{}\", latency_us={:g}];\n",
                       vertex(a).name, vertex(b).name, id, link.name, name(link.kind),
                       format_bandwidth(link.bandwidth_Bps), link.latency_s * 1e6);
  }
  out += "}\n";
  return out;
}

std::string Topology::to_text() const {
  const size_t vertex_count = boost::num_vertices(*state_->graph);
  std::string out = state_->description + "\n";

  std::map<VertexKind, size_t> vertices_by_kind;
  for (VertexId v = 0; v < vertex_count; ++v) ++vertices_by_kind[vertex(v).kind];
  std::string kinds;
  for (const auto& [kind, count] : vertices_by_kind)
    kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", count, name(kind));
  out += fmt::format("vertices: {} ({})\n", vertex_count, kinds);

  // Links grouped by kind, bandwidth and latency, then how many of each.
  std::map<std::tuple<LinkKind, double, double>, size_t> link_groups;
  for (const Link* link : state_->links) ++link_groups[{link->kind, link->bandwidth_Bps, link->latency_s}];
  out += fmt::format("links: {} (full duplex; bandwidth per direction)\n", state_->links.size());
  for (const auto& [key, count] : link_groups) {
    const auto& [kind, bandwidth, latency] = key;
    out += fmt::format("  {:<8} {:>7} x {:>10}  {:>8}\n", name(kind), count, format_bandwidth(bandwidth),
                       format_latency(latency));
  }

  auto describe_links = [this](uint32_t v) {
    std::string text;
    for (const Neighbor& nb : neighbors(v)) {
      const Link& link = *state_->links[nb.link];
      text += fmt::format("{}{} {} to {} [{}]", text.empty() ? "" : "; ", name(link.kind),
                          format_bandwidth(link.bandwidth_Bps), vertex(nb.vertex).name, link.name);
    }
    return text;
  };
  out += fmt::format("node 0 of {}:\n", node_count());
  for (VertexId v = 0; v < vertex_count; ++v) {
    if (vertex(v).node != 0 || vertex(v).kind == VertexKind::kNvSwitch) continue;
    out += fmt::format("  {:<12} {}\n", vertex(v).name, describe_links(static_cast<uint32_t>(v)));
  }

  // Fabric switches: how many links of each (neighbour kind, bandwidth).
  for (VertexKind kind : {VertexKind::kLeaf, VertexKind::kSpine}) {
    size_t shown = 0;
    size_t total = vertices_by_kind.count(kind) ? vertices_by_kind[kind] : 0;
    if (total == 0) continue;
    out += fmt::format("{}:\n", kind == VertexKind::kLeaf ? "leaves" : "spines");
    for (VertexId v = 0; v < vertex_count && shown < kTextMaxSwitches; ++v) {
      if (vertex(v).kind != kind) continue;
      ++shown;
      std::map<std::pair<VertexKind, double>, size_t> ports;
      for (const Neighbor& nb : neighbors(static_cast<uint32_t>(v))) {
        ++ports[{vertex(nb.vertex).kind, state_->links[nb.link]->bandwidth_Bps}];
      }
      std::string text;
      for (const auto& [key, count] : ports) {
        text += fmt::format("{}{} x {} to {}", text.empty() ? "" : ", ", count, format_bandwidth(key.second),
                            plural(key.first));
      }
      out += fmt::format("  {:<16} {}\n", vertex(v).name, text);
    }
    if (total > shown) out += fmt::format("  ... and {} more\n", total - shown);
  }

  // A few routes: within a node, to the next node on the same rail, across rails, to the last GPU.
  const int n = gpu_count();
  std::vector<int> examples;
  for (int dst : {1, state_->gpus_per_node, state_->gpus_per_node + 1, n - 1}) {
    if (dst > 0 && dst < n && std::find(examples.begin(), examples.end(), dst) == examples.end()) {
      examples.push_back(dst);
    }
  }
  if (!examples.empty()) out += "routes:\n";
  for (int dst : examples) {
    const Route r = route(0, dst);
    std::string path = vertex(gpu_vertex(0)).name;
    for (const Hop& hop : r.hops) {
      const auto [a, b] = state_->endpoints[hop.link];
      path += " > " + vertex(hop.forward ? b : a).name;
    }
    out += fmt::format("  0 -> {}: {}  ({} hops, {}, {})\n", dst, path, r.hops.size(), format_latency(r.latency_s),
                       format_bandwidth(r.bottleneck_Bps));
  }
  return out;
}

}  // namespace tandem::models
