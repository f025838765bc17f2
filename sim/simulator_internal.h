// The pieces of sim::Simulator that its files share: Simulator::Impl (the SimGrid platform and the
// fault controls), the netzone whose routes come from the topology, and what a schedule's ops
// weigh. The files: simulator.cc (NetworkModel, run()'s choice of how to time a schedule, the fault
// controls), simulator_platform.cc (SimGrid's engine, hosts, links and routes, fluid and packet),
// simulator_replay.cc (the compressed rings and the analytic replay), simulator_op_by_op.cc (one
// SimGrid actor per rank and lane), simulator_in_network.cc (NVLS, NVLS Tree, CollNet) and
// simulator_p2p.cc (NCCL's point-to-point path). Not a public header: only those files include it.
#pragma once

#include <simgrid/kernel/routing/NetPoint.hpp>
#include <simgrid/kernel/routing/NetZoneImpl.hpp>
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/schedule.h"
#include "models/cluster.h"
#include "models/topology.h"
#include "sim/simulator.h"

namespace tandem::sim {
namespace sg4 = simgrid::s4u;
namespace routing = simgrid::kernel::routing;

// SimGrid actor stacks (KiB): the platform's setting, and the size the op-by-op simulation's
// mmapped stacks are fixed to.
inline constexpr int kActorStackKiB = 256;

// A netzone whose routes come from a models::Topology (static ECMP), computed the first time a
// pair talks and cached: memory grows with the pairs a schedule uses, not with n^2 as SimGrid's
// full zone does (2 GB of route table at 16,384 hosts).
class TopologyZone : public routing::NetZoneImpl {
 public:
  using RouteFn = std::function<void(int src_host, int dst_host, std::vector<simgrid::kernel::resource::StandardLinkImpl*>&,
                                     double& latency_s, bool& network)>;
  TopologyZone(const std::string& name, RouteFn route) : routing::NetZoneImpl(name), route_(std::move(route)) {}

  void register_host(const routing::NetPoint* point, int host_index) {
    if (host_of_point_.size() <= point->id()) host_of_point_.resize(point->id() + 1, -1);
    host_of_point_[point->id()] = host_index;
  }

  void get_local_route(const routing::NetPoint* src, const routing::NetPoint* dst, routing::Route* into,
                       double* latency) override {
    const Cached& route = cached(host_of_point_.at(src->id()), host_of_point_.at(dst->id()));
    into->link_list_.insert(into->link_list_.end(), route.links.begin(), route.links.end());
    if (latency != nullptr && !latency_off) *latency += message_latency(route);
  }

  // The latency of the route from host a to host b as messages see it (route + protocol).
  double message_latency(int a, int b) { return message_latency(cached(a, b)); }

  // Forgets every route: the next message of each pair asks the topology again (rerouting).
  void clear_routes() { cache_.clear(); }

  // While set, routes report no latency: the op-by-op executor applies latency as a delay line.
  bool latency_off = false;

  // NCCL's per-hop protocol latency (per hop class) until changed. It is the whole cost of one
  // step of its protocol on that hardware, wire included, so a message pays it or its route's
  // latency, whichever is larger (a long route across spines), not both.
  double extra_nvlink_s = 0;
  double extra_network_s = 0;

 private:
  struct Cached {
    std::vector<simgrid::kernel::resource::StandardLinkImpl*> links;
    double latency_s = 0;
    bool network = false;  // crosses a network link (NCCL's NET hop latency applies)
  };

  const Cached& cached(int a, int b) {
    const uint64_t key = (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      Cached route;
      route_(a, b, route.links, route.latency_s, route.network);
      it = cache_.emplace(key, std::move(route)).first;
    }
    return it->second;
  }
  double message_latency(const Cached& route) const {
    return std::max(route.latency_s, route.network ? extra_network_s : extra_nvlink_s);
  }
  RouteFn route_;
  std::vector<int> host_of_point_;
  std::unordered_map<uint64_t, Cached> cache_;
};

// The bytes of each op of a schedule for one tile: chunk sizes from the balanced partition.
struct Sizer {
  ChunkMap map;
  int64_t element_bytes;
  uint32_t k;
  int64_t bytes(const SlotRange& range, uint32_t tile) const {
    int64_t total = 0;
    for (uint32_t c = range.first; c < range.first + range.count; ++c) total += map.range(tile, c % k).count;
    return total * element_bytes;
  }
};

// What the op-by-op actors share (simulator_op_by_op.cc).
struct OpByOpRun;

struct Simulator::Impl {
  const models::Topology& topology;
  models::ClusterSpec cluster;
  NetworkModel model;
  std::unique_ptr<sg4::Engine> engine;
  TopologyZone* zone = nullptr;
  std::vector<sg4::Host*> gpu_hosts;                     // by GPU index
  std::vector<sg4::Host*> switch_hosts;                  // by node: the NVSwitch (NVLS)
  std::vector<sg4::SplitDuplexLink*> links;              // by topology link id
  std::vector<uint32_t> nvlink_of_gpu;                   // the GPU's link to its NVSwitch
  int token = 0;                                         // the payload every comm carries
  std::unordered_map<const sg4::Host*, int> host_index;  // host -> GPU index (or gpus + node)
  // Fault controls (Simulator::set_link_factor etc.): neutral values = no fault.
  std::vector<double> link_factor;   // by topology link id
  std::vector<uint32_t> dead_links;  // sorted, unique
  std::vector<double> gpu_slowdown;  // by GPU index

  // Every group's placement of a request, checked (simulator.cc).
  std::vector<std::vector<int>> placements_of(const SimRequest& request, int n) const;

  // The platform (simulator_platform.cc).
  void build_fluid_platform();
  void build_packet_platform();
  void route(int a, int b, std::vector<simgrid::kernel::resource::StandardLinkImpl*>& out, double& latency,
             bool& network) const;

  // The compressed rings and the analytic replay (simulator_replay.cc).
  double run_compressed(const Schedule& schedule, const std::vector<std::vector<int>>& placements,
                        const std::function<int64_t(const SlotRange&, uint32_t)>& bytes_of, uint32_t tiles, double wire,
                        const std::function<double(int, int)>& hop_latency, SimResult& result);
  double run_replayed(const Schedule& schedule, const std::vector<std::vector<int>>& placements,
                      const std::function<int64_t(const SlotRange&, uint32_t)>& bytes_of, uint32_t tiles, double wire,
                      const std::function<double(int, int)>& hop_latency, double base_latency, SimResult& result,
                      bool contention_by_round, std::shared_ptr<void>* cache);
  // The op-by-op simulation (OpByOpRun) and its phases (simulator_op_by_op.cc).
  double run_op_by_op(const Schedule& schedule, const SimRequest& request,
                      const std::vector<std::vector<int>>& placements, const Sizer& sizer, uint32_t tiles, double wire,
                      double base_latency);
  void add_connections(OpByOpRun& run) const;
  void start_connection_actors(OpByOpRun& run);
  void start_lane_actors(OpByOpRun& run);

  // One direction of topology link `link` as the fluid model runs it: line rate x efficiency x fault factor.
  double link_capacity(uint32_t link) const {
    const models::Link& spec = topology.link(link);
    return spec.bandwidth_Bps * link_efficiency(spec.kind) * link_factor[link];
  }

  double link_efficiency(models::LinkKind kind) const {
    switch (kind) {
      case models::LinkKind::kNvLink: return model.nvlink_efficiency;
      case models::LinkKind::kPcie: return model.pcie_efficiency;
      case models::LinkKind::kNetwork: return model.network_efficiency;
    }
    return 1.0;
  }

  double hbm_Bps() const { return cluster.gpu.hbm_Bps > 0 ? cluster.gpu.hbm_Bps : 1e12; }

  // The latency a message from GPU a to GPU b pays on top of moving its bytes: the route's and the
  // protocol's with the fluid model; with ns-3, which delays packets on its links itself, only the
  // protocol's.
  double message_latency(int a, int b) const {
    if (zone != nullptr) return zone->message_latency(a, b);
    return network_hop(a, b) ? packet_extra_network_s : packet_extra_nvlink_s;
  }
  double packet_extra_nvlink_s = 0;
  double packet_extra_network_s = 0;

  bool network_hop(int a, int b) const {
    return topology.vertex(topology.gpu_vertex(a)).node != topology.vertex(topology.gpu_vertex(b)).node;
  }

  bool faults_active() const {
    return !dead_links.empty() ||
           std::any_of(link_factor.begin(), link_factor.end(), [](double f) { return f != 1.0; }) ||
           std::any_of(gpu_slowdown.begin(), gpu_slowdown.end(), [](double f) { return f != 1.0; });
  }

  void require_fluid(std::string_view what) const {
    if (zone == nullptr) {
      fail(ErrorCode::kUnsupported, "{}: fault controls are a fluid-model feature; the packet (ns-3) model has none",
           what);
    }
  }
};

}  // namespace tandem::sim
