#include "sim/simulator.h"

#include <simgrid/kernel/routing/NetPoint.hpp>
#include <simgrid/kernel/routing/NetZoneImpl.hpp>
#include <simgrid/s4u.hpp>

#include <boost/graph/adjacency_list.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <queue>
#include <unordered_map>

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include "core/algorithms.h"
#include "core/schedule_dag.h"
#include "core/error.h"
#include "core/fifo.h"
#include "core/host_memory.h"
#include "core/faults.h"
#include "sim/protocol.h"
#include "sim/ring_lane.h"

namespace tandem::sim {
namespace sg4 = simgrid::s4u;
namespace routing = simgrid::kernel::routing;

std::string_view name(Fidelity fidelity) { return fidelity == Fidelity::kFluid ? "fluid" : "packet"; }

Fidelity parse_fidelity(std::string_view text) {
  if (text == "fluid") return Fidelity::kFluid;
  if (text == "packet") return Fidelity::kPacket;
  fail(ErrorCode::kInvalidArgument, "unknown network fidelity '{}' (expected fluid or packet)", text);
}

NetworkModel NetworkModel::ideal() {
  NetworkModel model;
  model.nvlink_efficiency = 1.0;
  model.pcie_efficiency = 1.0;
  model.network_efficiency = 1.0;
  model.nvls_efficiency = 1.0;
  model.tree_efficiency = 1.0;
  model.protocol_effects = false;
  return model;
}

double NetworkModel::base_latency_s(models::NcclProtocol protocol, Algorithm algorithm) const {
  return protocol_effects ? protocol_base_latency_s(protocol, algorithm) * base_latency_scale : 0.0;
}

double NetworkModel::hop_latency_s(models::NcclProtocol protocol, Algorithm algorithm, bool network_hop) const {
  if (!protocol_effects) return 0.0;
  return protocol_hop_latency_s(protocol, algorithm, network_hop) *
         (network_hop ? net_hop_latency_scale : nvlink_hop_latency_scale);
}

const std::vector<NetworkParameter>& network_parameters() {
  static const std::vector<NetworkParameter> parameters = {
      {"nvlink_efficiency", &NetworkModel::nvlink_efficiency, kMinEfficiency, kMaxEfficiency,
       "a share of the NVLink line rate"},
      {"pcie_efficiency", &NetworkModel::pcie_efficiency, kMinEfficiency, kMaxEfficiency,
       "a share of the PCIe line rate"},
      {"network_efficiency", &NetworkModel::network_efficiency, kMinEfficiency, kMaxEfficiency,
       "a share of the NIC line rate"},
      {"nvls_efficiency", &NetworkModel::nvls_efficiency, kMinEfficiency, kMaxEfficiency,
       "a share of the NVLink line rate"},
      {"tree_efficiency", &NetworkModel::tree_efficiency, kMinEfficiency, kMaxEfficiency, "a share of a ring's rate"},
      {"base_latency_scale", &NetworkModel::base_latency_scale, kMinLatencyScale, kMaxLatencyScale,
       "a multiple of NCCL's baseLat"},
      {"nvlink_hop_latency_scale", &NetworkModel::nvlink_hop_latency_scale, kMinLatencyScale, kMaxLatencyScale,
       "a multiple of NCCL's NVLink hwLat"},
      {"net_hop_latency_scale", &NetworkModel::net_hop_latency_scale, kMinLatencyScale, kMaxLatencyScale,
       "a multiple of NCCL's NET hwLat"},
      {"p2p_channel_scale", &NetworkModel::p2p_channel_scale, kMinChannelScale, kMaxChannelScale,
       "a multiple of NCCL's per-CTA p2p rate"},
  };
  return parameters;
}

const NetworkParameter* find_network_parameter(std::string_view name) {
  for (const NetworkParameter& parameter : network_parameters()) {
    if (parameter.name == name) return &parameter;
  }
  return nullptr;
}

namespace {

std::atomic<bool> g_platform_built{false};

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

// SimGrid actor stacks (KiB), and the platform size above which they are always mmapped (see
// the Simulator constructor).
constexpr int kActorStackKiB = 256;
constexpr int kHeapActorStacksMaxGpus = 1024;
// The op-by-op simulation has an actor per (rank, lane) and one per connection, all alive at once:
// a direct all_to_all on n GPUs has n^2 of them. Above this many actors in one run their stacks
// are always mmapped too (heap stacks are calloc'ed, and a reused heap chunk is cleared whole:
// 256 KiB resident an actor; 36,864 actors of a 192-GPU all_to_all took 5.2 GB).
constexpr size_t kHeapActorStacksMaxActors = 4096;
// What a simulated platform holds per GPU for a collective on all of them: its hosts, links and
// routes in SimGrid, the route cache and the replayed tree's state (measured: an all_reduce of 1 MiB
// on 8,192 nodes, 65,536 GPUs, peaked at 2.3 GB; on 16,384 nodes, 131,072 GPUs, at 5.75 GB).
constexpr double kPlatformBytesPerGpu = 48 * 1024;
// What an actor of the op-by-op simulation keeps resident with an mmapped stack: the stack pages it
// touches, its SimGrid actor and context, and its connection's semaphores and queues (measured:
// a 128-GPU direct all_to_all, 16,512 actors, 284 MB).
constexpr double kOpByOpActorBytes = 16 * 1024;

// ns-3 models TCP; the fabrics tandem simulates run RDMA over lossless links (no slow start, no
// window limit, PFC instead of drops). SimGrid's binding exposes no TCP settings, so the defaults
// go through ns-3's own NS_ATTRIBUTE_DEFAULT: socket buffers and an initial congestion window
// large enough that a message is never window-bound, and queues deep enough that nothing is
// dropped. What is left are the packet model's own costs: TCP/IP headers and one handshake per
// message (docs/simulator.md). ns-3 3.37 reads the variable once, as its libraries load, before
// main(); packet_model_reexec() is how a program gets it in (measured: with ns-3's own 128 KiB
// socket buffers a 16 MiB NVLink transfer ran window-bound at 102 GB/s, 4.4x the serialization
// time; with these, 258 GB/s). Without the deep queues, bursts drop, and SimGrid 3.32's ns-3 glue
// aborts on the retransmissions ("total_bytes is not sent_bytes").
constexpr std::string_view kPacketModelNs3Defaults =
    "ns3::TcpSocket::SndBufSize=268435456;ns3::TcpSocket::RcvBufSize=268435456;"
    "ns3::TcpSocket::InitialCwnd=1000000;"
    "ns3::DropTailQueue<Packet>::MaxSize=100000000p;ns3::FqCoDelQueueDisc::MaxSize=100000000p";

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

// Op by op: one actor per (rank, lane), and one per connection (rank pair and lane) that carries
// that connection's messages one after the other, as NCCL's per-peer FIFO (and its proxy) does.
// A send only queues its message, so the lane goes on at once (eager); a receive waits until the
// connection has delivered the message. Cross-lane dependencies wait on the rank's completion
// counters. Without the per-connection order, 64 pipelined chunks issued at once would share the
// link and all arrive at the end, and nothing would pipeline.
struct RankState {
  sg4::MutexPtr mutex = sg4::Mutex::create();
  sg4::ConditionVariablePtr changed = sg4::ConditionVariable::create();
  std::vector<uint64_t> done;  // per lane: ops completed (over all tiles)
};
struct Connection {
  int from = 0, to = 0;
  uint64_t messages = 0;              // over all tiles
  Fifo<uint64_t> queue;               // bytes of the messages waiting to go
  Fifo<double> send_slowdowns;        // their SimRequest::send_slowdown (when set)
  Fifo<double> arrivals;              // when moved messages reach the receiver
  double latency_s = 0;               // route + protocol latency of each message
  sg4::SemaphorePtr queued = sg4::Semaphore::create(0);
  sg4::SemaphorePtr moved = sg4::Semaphore::create(0);

  // The receiver's side: waits until the next message has moved, then until it arrives a route's
  // latency later. Messages of a connection move one after the other with the same latency, so
  // they arrive in order whenever the receiver asks. (A second actor per connection that slept
  // until each arrival did the same for twice the actors: 16 KB of memory each, n^2 of them in a
  // direct all_to_all.)
  void receive() {
    moved->acquire();
    const double at = arrivals.pop_front();
    if (at > sg4::Engine::get_clock()) sg4::this_actor::sleep_until(at);
  }
};

// What the op-by-op actors share; it outlives them (Impl::run_op_by_op holds it until the engine
// has run). Ranks are global here (group * n + rank): concurrent groups run side by side.
struct OpByOpRun {
  const Schedule& explicit_form;  // the schedule with every rank's program written out
  int n;                          // ranks of one group
  const SimRequest& request;
  const Sizer& sizer;
  uint32_t tiles;
  double wire;          // wire bytes per payload byte
  double base_latency;  // s, every lane waits it before its first op
  std::vector<int> gpu_of_global;
  std::vector<RankState> states;
  std::map<std::tuple<int, int, uint32_t>, Connection> connections;  // by (from, to, lane)

  const RankProgram& program_of(int global) const { return explicit_form.ranks[static_cast<size_t>(global % n)]; }
  int peer_of(int global, int peer) const { return global - global % n + peer; }
};

}  // namespace

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

  double run_compressed(const Schedule& schedule, const std::vector<std::vector<int>>& placements,
                        const std::function<int64_t(const SlotRange&, uint32_t)>& bytes_of, uint32_t tiles, double wire,
                        const std::function<double(int, int)>& hop_latency, SimResult& result);
  double run_replayed(const Schedule& schedule, const std::vector<std::vector<int>>& placements,
                      const std::function<int64_t(const SlotRange&, uint32_t)>& bytes_of, uint32_t tiles, double wire,
                      const std::function<double(int, int)>& hop_latency, double base_latency, SimResult& result,
                      bool contention_by_round, std::shared_ptr<void>* cache);
  std::vector<std::vector<int>> placements_of(const SimRequest& request, int n) const;
  // The op-by-op simulation (OpByOpRun) and its phases.
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

  // Host index: GPUs first (index = GPU), then one NVSwitch host per node.
  void route(int a, int b, std::vector<simgrid::kernel::resource::StandardLinkImpl*>& out, double& latency,
             bool& network) const {
    const int gpus = topology.gpu_count();
    auto hop_impl = [&](const models::Hop& hop) {
      return hop.forward ? links[hop.link]->get_link_up()->get_impl() : links[hop.link]->get_link_down()->get_impl();
    };
    if (a < gpus && b < gpus) {
      if (!dead_links.empty()) {
        // A detour may cross the network between GPUs of one node (or relay over NVLink between
        // nodes): NCCL's NET hop latency applies when it crosses a network link.
        const models::Route r = topology.route_avoiding(a, b, dead_links);
        network = false;
        for (const models::Hop& hop : r.hops) {
          out.push_back(hop_impl(hop));
          network = network || topology.link(hop.link).kind == models::LinkKind::kNetwork;
        }
        latency = r.latency_s;
        return;
      }
      const models::Route r = topology.route(a, b);
      for (const models::Hop& hop : r.hops) out.push_back(hop_impl(hop));
      latency = r.latency_s;
      network = network_hop(a, b);
      return;
    }
    // GPU <-> its NVSwitch: the GPU's NVLink, up or down.
    const int gpu = a < gpus ? a : b;
    const uint32_t link = nvlink_of_gpu.at(static_cast<size_t>(gpu));
    const auto [first, second] = topology.endpoints(link);
    const bool gpu_first = first == topology.gpu_vertex(gpu);
    const bool forward = a < gpus ? gpu_first : !gpu_first;
    out.push_back(hop_impl({link, forward}));
    latency = topology.link(link).latency_s;
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

  // The packet platform: every topology vertex an ns-3 node (GPUs as hosts, switches and NICs as
  // routers) and every topology link one point-to-point link, declared as a one-link route (the
  // only routes SimGrid hands to ns-3); ns-3's global routing finds the paths (one per pair: no
  // ECMP spreading). Small clusters only (kMaxPacketGpus), so Floyd's O(V^3) is nothing.
  void build_packet_platform() {
    sg4::NetZone* zone_iface = sg4::create_floyd_zone("tandem-packet");
    const auto& graph = topology.graph();
    std::vector<routing::NetPoint*> point(boost::num_vertices(graph), nullptr);
    gpu_hosts.assign(static_cast<size_t>(topology.gpu_count()), nullptr);
    for (auto [it, end] = boost::vertices(graph); it != end; ++it) {
      const models::Vertex& v = graph[*it];
      if (v.kind == models::VertexKind::kGpu) {
        sg4::Host* host = zone_iface->create_host(v.name, hbm_Bps());
        host_index[host] = v.rank;
        gpu_hosts[static_cast<size_t>(v.rank)] = host;
        point[*it] = host->get_netpoint();
      } else {
        point[*it] = zone_iface->create_router(v.name);
      }
    }
    for (uint32_t id = 0; id < topology.link_count(); ++id) {
      const models::Link& link = topology.link(id);
      sg4::Link* sg_link = zone_iface->create_link(link.name, link.bandwidth_Bps * link_efficiency(link.kind));
      sg_link->set_latency(link.latency_s);
      sg_link->seal();
      const auto [a, b] = topology.endpoints(id);
      zone_iface->add_route(point[a], point[b], nullptr, nullptr, {sg4::LinkInRoute(sg_link)}, true);
    }
    zone_iface->seal();
    // SimGrid 3.32 builds ns-3's routing tables on on_platform_created, which only its XML loader
    // fires; without it every connection fails and the engine spins (docs/simulator.md).
    engine->seal_platform();
    sg4::Engine::on_platform_created();
  }

  bool network_hop(int a, int b) const {
    return topology.graph()[topology.gpu_vertex(a)].node != topology.graph()[topology.gpu_vertex(b)].node;
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

Simulator::Simulator(const models::Topology& topology, const models::ClusterSpec& cluster, const NetworkModel& model)
    : impl_(std::make_unique<Impl>(Impl{topology, cluster, model})) {
  impl_->link_factor.assign(topology.link_count(), 1.0);
  impl_->gpu_slowdown.assign(static_cast<size_t>(topology.gpu_count()), 1.0);
  if (model.fidelity == Fidelity::kPacket && topology.gpu_count() > kMaxPacketGpus) {
    fail(ErrorCode::kUnsupported,
         "the packet (ns-3) model simulates every packet and is meant for small clusters: {} GPUs, at most {}; "
         "use the fluid model (--network fluid)",
         topology.gpu_count(), kMaxPacketGpus);
  }
  require_host_memory(static_cast<double>(topology.gpu_count()) * kPlatformBytesPerGpu,
                      fmt::format("a simulated platform of {} GPUs", topology.gpu_count()), "; use fewer nodes");
  if (g_platform_built.exchange(true)) {
    fail(ErrorCode::kBackend, "SimGrid allows one simulated platform per process; run further clusters with "
                              "run_sweep (one child process each)");
  }
  Impl& s = *impl_;
  // SimGrid's own logging stays quiet unless TANDEM_SIMGRID_LOG asks for more (a --log value,
  // e.g. "res_ns3.thres:debug"), for debugging the simulator itself.
  const char* log_env = std::getenv("TANDEM_SIMGRID_LOG");
  std::string arg0 = "tandem";
  std::string arg1 = std::string("--log=") + (log_env != nullptr ? log_env : "root.thres:critical");
  std::vector<char*> argv = {arg0.data(), arg1.data()};
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer does not know the stacks of SimGrid's default ("raw") contexts and warns on
  // stderr when an actor is killed on one; OS threads are stacks it knows. The factory is fixed
  // when the engine is constructed, so it must be an argument (tests/sanitizers/README.md).
  std::string factory = "--cfg=contexts/factory:thread";
  argv.push_back(factory.data());
#endif
  int argc = static_cast<int>(argv.size());
  argv.push_back(nullptr);
  // SimGrid's engine sets a SIGINT handler of its own (it calls exit(1) inside the handler, leaving
  // this process's children running); the process keeps the handling it had
  // (core/child_processes.h: children killed, exit 130).
  struct sigaction sigint_before {};
  sigaction(SIGINT, nullptr, &sigint_before);
  s.engine = std::make_unique<sg4::Engine>(&argc, argv.data());
  sigaction(SIGINT, &sigint_before, nullptr);
  // Thousands of short-lived actors: small stacks without guard pages (the default 8 MiB stack
  // each made mmap/munmap the largest cost of a simulation).
  sg4::Engine::set_config("contexts/stack-size:" + std::to_string(kActorStackKiB));
  // SimGrid mallocs those stacks. glibc serves the first ones by mmap and, once one is freed,
  // raises its mmap threshold above their size, so from then on they come from the heap, which
  // keeps their touched pages and fragments. That is cheap for a small sweep that makes and ends
  // actors by the thousand, but at scale it cost more than it saved: a 1 GiB ring on 16,384 GPUs
  // took 11.1 s and 2.5 GB RSS, against 4.95 s and 0.47 GB with stacks always mmapped (4,096 GPUs:
  // 2.56 s and 656 MB against 0.80 s and 141 MB), while a 64-GPU auto sweep went from 1.39 to
  // 1.96 s the other way. Large platforms fix the threshold (which also stops glibc moving it).
  if (topology.gpu_count() > kHeapActorStacksMaxGpus) mallopt(M_MMAP_THRESHOLD, kActorStackKiB * 1024 / 2);
  sg4::Engine::set_config("contexts/guard-size:0");
  if (model.fidelity == Fidelity::kPacket) {
    sg4::Engine::set_config("network/model:ns-3");
    s.build_packet_platform();
    return;
  }
  // The ideal bandwidth + latency model (docs/simgrid-3.32-notes.md §2): LV08's TCP factors and
  // the TCP-gamma cap would make NVLink flows up to 3x slower than the hardware.
  sg4::Engine::set_config("network/model:CM02");
  sg4::Engine::set_config("network/crosstraffic", false);
  sg4::Engine::set_config("network/TCP-gamma", 0.0);

  s.zone = new TopologyZone("tandem", [&s](int a, int b, auto& out, double& latency, bool& network) {
    s.route(a, b, out, latency, network);
  });
  sg4::NetZone* zone = s.zone->get_iface();
  const double hbm = s.hbm_Bps();
  const auto& graph = topology.graph();
  // Hosts compute in "bytes of HBM traffic" per second: a local copy or reduce is memory-bound.
  for (int g = 0; g < topology.gpu_count(); ++g) {
    sg4::Host* host = zone->create_host(graph[topology.gpu_vertex(g)].name, hbm);
    s.zone->register_host(host->get_netpoint(), g);
    s.host_index[host] = g;
    s.gpu_hosts.push_back(host);
  }
  for (int node = 0; node < topology.node_count(); ++node) {
    sg4::Host* host = zone->create_host(fmt::format("n{}-nvswitch-host", node), hbm);
    s.zone->register_host(host->get_netpoint(), topology.gpu_count() + node);
    s.host_index[host] = topology.gpu_count() + node;
    s.switch_hosts.push_back(host);
  }
  s.nvlink_of_gpu.assign(static_cast<size_t>(topology.gpu_count()), ~0u);
  for (uint32_t id = 0; id < topology.link_count(); ++id) {
    const models::Link& link = topology.link(id);
    sg4::SplitDuplexLink* sd =
        zone->create_split_duplex_link(link.name, link.bandwidth_Bps * s.link_efficiency(link.kind));
    sd->set_latency(link.latency_s);
    sd->seal();
    s.links.push_back(sd);
    if (link.kind == models::LinkKind::kNvLink) {
      const auto [a, b] = topology.endpoints(id);
      for (models::VertexId v : {a, b}) {
        if (graph[v].kind == models::VertexKind::kGpu) s.nvlink_of_gpu[static_cast<size_t>(graph[v].rank)] = id;
      }
    }
  }
  zone->seal();
}

Simulator::~Simulator() = default;

namespace {

// A rank-symmetric template whose every lane is (send to +o, receive from -o) repeated: a ring.
bool ring_shaped(const Schedule& schedule) {
  for (const Lane& lane : schedule.ranks[0].lanes) {
    if (lane.ops.size() % 2 != 0) return false;
    for (size_t i = 0; i < lane.ops.size(); i += 2) {
      const Op& send = lane.ops[i];
      const Op& recv = lane.ops[i + 1];
      if (send.kind != OpKind::kSend || !recv.is_recv() || send.peer != lane.ops[0].peer ||
          (send.peer + recv.peer) % schedule.nranks != 0) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

// One round of concurrent flows: every connection of a round (or of a pipeline's steady state)
// sends its message at the same time, so flows that share a link share it. Each flow gets its
// max-min fair rate with all of them active, the allocation SimGrid's CM02 model starts every flow
// at (progressive filling over the topology's links at their efficiency-scaled and fault-scaled
// bandwidth, one direction each), and a flow's transfer time is its bytes over that rate. Flows
// between the same two GPUs are one flow of their summed bytes (max-min gives flows on one path
// equal shares): a 16-channel ring on 16,384 GPUs is about 49,000 flows, not 262,000. Computing
// the allocation directly, instead of running the round through SimGrid's event loop (one re-solve
// per completion, quadratic in the flows of a component), made a 4,096-GPU tree 5x faster.
class Snapshot {
 public:
  void add(int from_gpu, int to_gpu, double bytes) {
    Pair& pair = pairs_[key(from_gpu, to_gpu)];
    pair.bytes += bytes;
    pair.flows += 1;
  }
  size_t pairs() const { return pairs_.size(); }

  // `capacity(link)`: bytes per second of one direction of topology link `link`.
  void run(const models::Topology& topology, const std::function<double(uint32_t)>& capacity) {
    // Flows (one per pair) and the directed links they cross.
    std::vector<Pair*> flows;
    std::vector<std::vector<uint32_t>> links_of;  // directed link index: 2 * link + forward
    std::unordered_map<uint32_t, std::vector<uint32_t>> flows_on;
    for (auto& [k, pair] : pairs_) {
      const models::Route route = topology.route(static_cast<int>(k >> 32), static_cast<int>(k & 0xffffffffu));
      std::vector<uint32_t> links;
      for (const models::Hop& hop : route.hops) links.push_back(2 * hop.link + (hop.forward ? 1 : 0));
      for (uint32_t l : links) flows_on[l].push_back(static_cast<uint32_t>(flows.size()));
      links_of.push_back(std::move(links));
      flows.push_back(&pair);
    }
    // Progressive filling: raise every unfrozen flow's rate together; the link whose fair share
    // is smallest saturates first and freezes its flows at that share. A pair standing for w flows
    // counts w times.
    std::unordered_map<uint32_t, double> remaining;
    std::unordered_map<uint32_t, double> unfrozen;  // weight of the unfrozen flows on the link
    for (const auto& [l, on] : flows_on) {
      remaining[l] = capacity(l / 2);
      double weight = 0;
      for (uint32_t f : on) weight += flows[f]->flows;
      unfrozen[l] = weight;
    }
    std::vector<double> rate(flows.size(), -1);
    using Entry = std::pair<double, uint32_t>;  // (fair share, directed link)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
    for (const auto& [l, weight] : unfrozen) queue.emplace(remaining[l] / weight, l);
    while (!queue.empty()) {
      const auto [share, l] = queue.top();
      queue.pop();
      if (unfrozen[l] <= 0.5 || std::abs(share - remaining[l] / unfrozen[l]) > 1e-12 * share) continue;  // stale
      for (uint32_t f : flows_on[l]) {
        if (rate[f] >= 0) continue;
        const double w = flows[f]->flows;
        rate[f] = share * w;
        for (uint32_t other : links_of[f]) {
          remaining[other] = std::max(0.0, remaining[other] - share * w);
          unfrozen[other] -= w;
          if (unfrozen[other] > 0.5) queue.emplace(remaining[other] / unfrozen[other], other);
        }
      }
    }
    for (size_t f = 0; f < flows.size(); ++f) {
      flows[f]->seconds = rate[f] > 0 ? flows[f]->bytes / rate[f] : 0.0;
    }
  }

  // The time a flow of `bytes` between the two GPUs took in the round.
  double transfer(int from_gpu, int to_gpu, double bytes) const {
    const Pair& pair = pairs_.at(key(from_gpu, to_gpu));
    return pair.bytes > 0 ? pair.seconds * pair.flows * bytes / pair.bytes : 0.0;
  }

 private:
  struct Pair {
    double bytes = 0;
    int flows = 0;
    double seconds = 0;
  };
  static uint64_t key(int a, int b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
  std::unordered_map<uint64_t, Pair> pairs_;
};

// Ring-shaped symmetric schedules at scale: one Snapshot round with every lane's flow from every
// position gives each hop's transfer time under contention; the rounds are then replayed on
// per-position arrays. The receive at position q of step s completes at
//     R[q] = max(R[q-o] + latency(q-o), link_free(q-o)) + transfer(q-o)
// (its sender issued the send once it had received step s-1; the link carries one message after
// the other), so a slow hop slows the positions behind it, not every step of every position.
// Lanes with the same ring order and offset (NCCL's channels c and c + nChannels/2 are copies) are
// replayed once, and a lane's positions once per period of its hops (sim/ring_lane.h).
double Simulator::Impl::run_compressed(const Schedule& schedule, const std::vector<std::vector<int>>& placements,
                                       const std::function<int64_t(const SlotRange&, uint32_t)>& bytes_of,
                                       uint32_t tiles, double wire,
                                       const std::function<double(int, int)>& hop_latency, SimResult& result) {
  const int n = schedule.nranks;
  const auto& lanes = schedule.ranks[0].lanes;
  // One representative round: every lane's flow from every position, largest step size.
  std::vector<int64_t> round_bytes(lanes.size(), 0);
  for (size_t l = 0; l < lanes.size(); ++l) {
    for (size_t i = 0; i < lanes[l].ops.size(); i += 2) {
      round_bytes[l] = std::max(round_bytes[l], bytes_of(lanes[l].ops[i].src, 0));
    }
  }
  Snapshot snapshot;
  for (const std::vector<int>& gpu_of_rank : placements) {
    for (size_t l = 0; l < lanes.size(); ++l) {
      const std::vector<int>& order = schedule.symmetry.order_of(l);
      const int offset = lanes[l].ops[0].peer;
      for (int p = 0; p < n; ++p) {
        const int from = gpu_of_rank[static_cast<size_t>(order[static_cast<size_t>(p)])];
        const int to = gpu_of_rank[static_cast<size_t>(order[static_cast<size_t>((p + offset) % n)])];
        snapshot.add(from, to, static_cast<double>(round_bytes[l]) * wire);
      }
    }
  }
  snapshot.run(topology, [this](uint32_t link) { return link_capacity(link); });
  result.simulated_transfers = snapshot.pairs();

  // Lanes that replay alike: same order, offset and op sizes.
  std::vector<size_t> first_alike(lanes.size());
  for (size_t l = 0; l < lanes.size(); ++l) {
    first_alike[l] = l;
    for (size_t e = 0; e < l; ++e) {
      if (first_alike[e] == e && schedule.symmetry.order_of(e) == schedule.symmetry.order_of(l) &&
          lanes[e].ops.size() == lanes[l].ops.size() && lanes[e].ops[0].peer == lanes[l].ops[0].peer &&
          round_bytes[e] == round_bytes[l]) {
        first_alike[l] = e;
        break;
      }
    }
  }

  double total = 0;
  for (const std::vector<int>& gpu_of_rank : placements) {
    for (size_t l = 0; l < lanes.size(); ++l) {
      if (first_alike[l] != l) continue;
      const std::vector<int>& order = schedule.symmetry.order_of(l);
      RingHops hops;
      hops.offset = static_cast<size_t>(lanes[l].ops[0].peer);
      for (int p = 0; p < n; ++p) {
        const int a = order[static_cast<size_t>(p)];
        const int b = order[(static_cast<size_t>(p) + hops.offset) % static_cast<size_t>(n)];
        const int ga = gpu_of_rank[static_cast<size_t>(a)];
        const int gb = gpu_of_rank[static_cast<size_t>(b)];
        hops.latency_s.push_back(std::max(topology.route(ga, gb).latency_s, hop_latency(a, b)));
        hops.transfer_s.push_back(snapshot.transfer(ga, gb, static_cast<double>(round_bytes[l]) * wire));
      }
      std::vector<double> step_scales;
      for (uint32_t t = 0; t < tiles; ++t) {
        for (size_t i = 0; i < lanes[l].ops.size(); i += 2) {
          step_scales.push_back(round_bytes[l] > 0 ? static_cast<double>(bytes_of(lanes[l].ops[i].src, t)) /
                                                         static_cast<double>(round_bytes[l])
                                                   : 0.0);
        }
      }
      total = std::max(total, ring_lane_seconds(hops, step_scales));
    }
  }
  return total;
}

namespace {

// A replayed schedule's connections: one per (rank, peer, lane) that sends; its sends go one after
// the other. Each with its first message's wire bytes (tile 0) and the Snapshot it contends in.
struct ReplayConnections {
  struct Ends {
    int from = 0, to = 0;
  };
  std::vector<Ends> connections;
  std::vector<size_t> connection_of_send;  // by op id (SIZE_MAX: not a send)
  std::vector<SlotRange> first_src;        // each connection's first message (its bytes: per size)
  std::vector<size_t> group_of;            // the Snapshot each connection contends in
  size_t groups = 0;                       // Snapshots: one, or one per round (contention_by_round)
};

ReplayConnections replay_connections(const Schedule& schedule, const Dag& dag, bool contention_by_round) {
  ReplayConnections out;
  std::map<std::tuple<int, int, uint32_t>, size_t> connection_of;
  out.connection_of_send.assign(dag.index.total, SIZE_MAX);
  std::map<uint32_t, size_t> group_of_round;
  for (uint32_t gid = 0; gid < dag.index.total; ++gid) {
    const OpLoc& at = dag.loc[gid];
    const Lane& lane = schedule.ranks[static_cast<size_t>(at.rank)].lanes[at.lane];
    const Op& op = lane.ops[at.index];
    if (op.kind != OpKind::kSend) continue;
    const auto [it, fresh] = connection_of.emplace(std::make_tuple(at.rank, op.peer, at.lane), out.connections.size());
    if (fresh) {
      out.connections.push_back({at.rank, op.peer});
      out.first_src.push_back(op.src);
      const uint32_t round = contention_by_round && at.index < lane.rounds.size() ? lane.rounds[at.index] : 0;
      out.group_of.push_back(group_of_round.emplace(round, group_of_round.size()).first->second);
    }
    out.connection_of_send[gid] = it->second;
  }
  out.groups = group_of_round.size();
  return out;
}

// The replay's static part, flattened once in topological order: per op its kind, lane, cross-lane
// dependencies, connection or matched send, and chunks.
struct ReplayStep {
  OpKind kind;
  uint32_t lane_slot;
  uint32_t deps_begin, deps_end;  // into ReplayProgram::step_deps
  size_t id;
  size_t link;  // send: its connection; receive: its matched send's op id
  uint32_t chunk_first, chunk_count;
};
struct ReplayProgram {
  std::vector<ReplayStep> steps;
  std::vector<size_t> step_deps;
  std::vector<uint32_t> first_lane;  // lanes numbered like ops: slot = rank's first lane + lane
};

ReplayProgram flatten_replay(const Schedule& schedule, const Dag& dag, const std::vector<size_t>& connection_of_send) {
  ReplayProgram out;
  out.first_lane.assign(static_cast<size_t>(schedule.nranks) + 1, 0);
  for (int r = 0; r < schedule.nranks; ++r) {
    out.first_lane[static_cast<size_t>(r) + 1] =
        out.first_lane[static_cast<size_t>(r)] +
        static_cast<uint32_t>(schedule.ranks[static_cast<size_t>(r)].lanes.size());
  }
  out.steps.reserve(dag.index.total);
  for (const uint32_t id : dag.order) {
    const OpLoc& w = dag.loc[id];
    const Lane& lane = schedule.ranks[static_cast<size_t>(w.rank)].lanes[w.lane];
    const Op& op = lane.ops[w.index];
    ReplayStep step{op.kind,
                    out.first_lane[static_cast<size_t>(w.rank)] + w.lane,
                    static_cast<uint32_t>(out.step_deps.size()),
                    0,
                    id,
                    0,
                    0,
                    0};
    for (size_t d = 0; d < lane.dep_count(w.index); ++d) {
      const OpRef dep = lane.deps_of(w.index)[d];
      if (dep.lane != w.lane) out.step_deps.push_back(dag.index.gid(static_cast<size_t>(w.rank), dep.lane, dep.index));
    }
    step.deps_end = static_cast<uint32_t>(out.step_deps.size());
    const SlotRange& range = op.kind == OpKind::kSend ? op.src : op.dst;
    step.chunk_first = range.first;
    step.chunk_count = range.count;
    if (op.kind == OpKind::kSend) step.link = connection_of_send[id];
    if (op.is_recv()) step.link = dag.matched_send[id];
    out.steps.push_back(step);
  }
  return out;
}

// What the analytic replay derives from a schedule alone, whatever its size: its op graph, its
// connections and its flattened program. Built once per schedule that CollectivePlans keeps
// (SimRequest::replay_cache): at 16,384 ranks a tree's graph is millions of ops, and rebuilding it
// for every size was most of a training step's simulation time (allocating and faulting in its
// pages).
struct ReplayPrep {
  explicit ReplayPrep(Dag graph) : dag(std::move(graph)) {}
  Dag dag;
  ReplayConnections replay;
  ReplayProgram program;
};

std::shared_ptr<const ReplayPrep> replay_prep(const Schedule& schedule, bool contention_by_round,
                                              std::shared_ptr<void>* cache) {
  if (cache != nullptr && *cache) return std::static_pointer_cast<const ReplayPrep>(*cache);
  auto prep = std::make_shared<ReplayPrep>(build_dag(schedule));
  prep->replay = replay_connections(schedule, prep->dag, contention_by_round);
  prep->program = flatten_replay(schedule, prep->dag, prep->replay.connection_of_send);
  if (cache != nullptr) *cache = prep;
  return prep;
}

}  // namespace

// Explicit schedules whose connections all carry traffic at once in steady state (a pipelined
// tree: every edge busy up and down): one Snapshot round with each connection's first message
// gives its transfer time under contention, then the program is replayed analytically, tile by
// tile, in one topological order of its ops, with the op-by-op simulation's semantics: a send
// queues its message on its connection (which moves one message after the other, then delays it by
// the route's and protocol's latency) and the lane goes on; a receive waits for its message; a copy
// or reduce takes its HBM traffic's time. O(ops x tiles) arithmetic after one contention round.
// With `contention_by_round`, connections share a Snapshot only with those whose first send is in
// the same round (validate()'s rounds): PAT's steps, each one shift of every rank, run one after
// the other, so a step's flows contend with each other and not with the other steps'.
double Simulator::Impl::run_replayed(const Schedule& schedule, const std::vector<std::vector<int>>& placements,
                                     const std::function<int64_t(const SlotRange&, uint32_t)>& bytes_of,
                                     uint32_t tiles, double wire, const std::function<double(int, int)>& hop_latency,
                                     double base_latency, SimResult& result, bool contention_by_round,
                                     std::shared_ptr<void>* cache) {
  // Ops numbered, each receive's matching send and one topological order (the graph validate()
  // builds, core/schedule_dag.h), the connections and the flattened program: per schedule.
  const std::shared_ptr<const ReplayPrep> prep = replay_prep(schedule, contention_by_round, cache);
  const size_t total_ops = prep->dag.index.total;
  const ReplayConnections& replay = prep->replay;
  const auto& connections = replay.connections;
  const std::vector<size_t>& group_of = replay.group_of;
  // Wire bytes of each connection's first message (tile 0), at this size.
  std::vector<double> first_bytes(connections.size());
  for (size_t c = 0; c < connections.size(); ++c) {
    first_bytes[c] = static_cast<double>(bytes_of(replay.first_src[c], 0)) * wire;
  }

  double total = 0;
  const double hbm = hbm_Bps();
  // Contention over all placements at once, as the compressed rings take it.
  std::vector<Snapshot> snapshots(std::max<size_t>(1, replay.groups));
  for (const std::vector<int>& gpu_of_rank : placements) {
    for (size_t c = 0; c < connections.size(); ++c) {
      snapshots[group_of[c]].add(gpu_of_rank[static_cast<size_t>(connections[c].from)],
                                 gpu_of_rank[static_cast<size_t>(connections[c].to)], first_bytes[c]);
    }
  }
  result.simulated_transfers = 0;
  for (Snapshot& snapshot : snapshots) {
    snapshot.run(topology, [this](uint32_t link) { return link_capacity(link); });
    result.simulated_transfers += snapshot.pairs();
  }

  const ReplayProgram& program = prep->program;
  const std::vector<uint32_t>& first_lane = program.first_lane;
  // Per tile the bytes of each sub-chunk.
  const uint32_t k = schedule.chunks_per_block;
  std::vector<double> sub_bytes(static_cast<size_t>(tiles) * k);
  for (uint32_t t = 0; t < tiles; ++t) {
    for (uint32_t c = 0; c < k; ++c) {
      sub_bytes[static_cast<size_t>(t) * k + c] = static_cast<double>(bytes_of(SlotRange{BufferKind::kInput, c, 1}, t));
    }
  }

  std::vector<double> done(total_ops, 0), arrival(total_ops, 0), lane_end;
  for (const std::vector<int>& gpu_of_rank : placements) {
    std::vector<double> free(connections.size(), 0), latency(connections.size()), per_byte(connections.size(), 0);
    for (size_t c = 0; c < connections.size(); ++c) {
      const int ga = gpu_of_rank[static_cast<size_t>(connections[c].from)];
      const int gb = gpu_of_rank[static_cast<size_t>(connections[c].to)];
      latency[c] = std::max(topology.route(ga, gb).latency_s, hop_latency(connections[c].from, connections[c].to));
      // Seconds per payload byte under the round's contention (wire bytes over payload included).
      if (first_bytes[c] > 0) {
        per_byte[c] = snapshots[group_of[c]].transfer(ga, gb, first_bytes[c]) / first_bytes[c] * wire;
      }
    }
    lane_end.assign(first_lane.back(), base_latency);
    double finish = 0;
    for (uint32_t t = 0; t < tiles; ++t) {
      const double* tile_bytes = sub_bytes.data() + static_cast<size_t>(t) * k;
      for (const ReplayStep& step : program.steps) {
        double ready = lane_end[step.lane_slot];
        for (uint32_t d = step.deps_begin; d < step.deps_end; ++d) ready = std::max(ready, done[program.step_deps[d]]);
        double bytes = 0;
        for (uint32_t c = step.chunk_first; c < step.chunk_first + step.chunk_count; ++c) bytes += tile_bytes[c % k];
        double end = ready;
        switch (step.kind) {
          case OpKind::kSend:
            free[step.link] = std::max(ready, free[step.link]) + per_byte[step.link] * bytes;
            arrival[step.id] = free[step.link] + latency[step.link];
            break;
          case OpKind::kRecv:
          case OpKind::kRecvReduce: end = std::max(ready, arrival[step.link]); break;
          case OpKind::kCopy: end = ready + 2.0 * bytes / hbm; break;
          case OpKind::kReduce: end = ready + 3.0 * bytes / hbm; break;
        }
        done[step.id] = end;
        lane_end[step.lane_slot] = end;
        finish = std::max(finish, end);
      }
    }
    total = std::max(total, finish);
  }
  return total;
}

// Every group's placement, checked: request.gpu_of_rank (rank r on GPU r when empty), then the
// concurrent groups', each n GPUs of the cluster, no GPU in two groups.
std::vector<std::vector<int>> Simulator::Impl::placements_of(const SimRequest& request, int n) const {
  std::vector<int> gpu_of_rank = request.gpu_of_rank;
  if (gpu_of_rank.empty()) {
    for (int r = 0; r < n; ++r) gpu_of_rank.push_back(r);
  }
  if (gpu_of_rank.size() != static_cast<size_t>(n)) {
    fail(ErrorCode::kInvalidArgument, "simulator: {} ranks but {} GPU placements", n, gpu_of_rank.size());
  }
  // Every group's placement; a global rank is group * n + rank.
  std::vector<std::vector<int>> placements{gpu_of_rank};
  for (const std::vector<int>& more : request.concurrent) placements.push_back(more);
  std::vector<char> used(static_cast<size_t>(topology.gpu_count()), 0);
  for (const std::vector<int>& placement : placements) {
    if (placement.size() != static_cast<size_t>(n)) {
      fail(ErrorCode::kInvalidArgument, "simulator: {} ranks but a concurrent group of {} GPUs", n, placement.size());
    }
    for (int g : placement) {
      if (g < 0 || g >= topology.gpu_count()) {
        fail(ErrorCode::kInvalidArgument, "simulator: GPU {} out of range (the cluster has {})", g,
             topology.gpu_count());
      }
      if (placements.size() > 1 && used[static_cast<size_t>(g)]++) {
        fail(ErrorCode::kInvalidArgument, "simulator: GPU {} is in two concurrent groups", g);
      }
    }
  }
  return placements;
}

namespace {

// The sends of one run: every rank's (a rank-symmetric template's n times), in every tile and group.
uint64_t count_transfers(const Schedule& schedule, uint32_t tiles, int groups) {
  uint64_t transfers = 0;
  for (const RankProgram& rank : schedule.ranks) {
    for (const Lane& lane : rank.lanes) {
      for (const Op& op : lane.ops) transfers += op.kind == OpKind::kSend;
    }
  }
  if (schedule.symmetric()) transfers *= static_cast<uint64_t>(schedule.nranks);
  transfers *= tiles * static_cast<uint64_t>(groups);
  return transfers;
}

}  // namespace

SimResult Simulator::run(const SimRequest& request) {
  Impl& s = *impl_;
  if (request.schedule == nullptr) fail(ErrorCode::kInvalidArgument, "simulator: no schedule");
  const Schedule& schedule = *request.schedule;
  const int n = schedule.nranks;
  const std::vector<std::vector<int>> placements = s.placements_of(request, n);
  const std::vector<int>& gpu_of_rank = placements.front();
  if (request.send_slowdown && !request.concurrent.empty()) {
    fail(ErrorCode::kInvalidArgument, "simulator: slowed sends with concurrent groups");
  }
  const int groups = static_cast<int>(placements.size());
  const uint32_t tiles = std::max<uint32_t>(1, request.tiles);
  const Sizer sizer{ChunkMap(request.spec.count, schedule.chunks_per_block, tiles), static_cast<int64_t>(size_bytes(request.spec.dtype)),
                    schedule.chunks_per_block};
  const double wire = s.model.protocol_effects ? protocol_wire_factor(request.protocol) /
                                                     (schedule.algorithm == Algorithm::kTree ? s.model.tree_efficiency : 1.0)
                                               : 1.0;
  const bool latencies = s.model.protocol_effects;
  auto hop_latency = [&](int a, int b) {
    return latencies ? s.model.hop_latency_s(request.protocol, schedule.algorithm,
                                             s.network_hop(gpu_of_rank[a], gpu_of_rank[b]))
                     : 0.0;
  };
  const double base_latency = latencies ? s.model.base_latency_s(request.protocol, schedule.algorithm) : 0.0;

  SimResult result;
  result.transfers = count_transfers(schedule, tiles, groups);

  // The compressed rounds replay one round per position with the normal routes: faults (a slow
  // link on some positions' routes, detours, a straggler) need the op-by-op simulation.
  if (s.zone != nullptr && schedule.symmetric() && ring_shaped(schedule) && !s.faults_active() &&
      !request.send_slowdown) {
    result.compressed = true;
    result.seconds = base_latency + s.run_compressed(
                                        schedule, placements,
                                        [&](const SlotRange& range, uint32_t tile) { return sizer.bytes(range, tile); },
                                        tiles, wire, hop_latency, result);
    return result;
  }
  // Trees (every edge busy at once in steady state) replay analytically after one contention
  // round, degraded links included (the round runs on SimGrid's links at their set bandwidth);
  // PAT likewise after one contention round per step (its O(n) packing copies per rank would make
  // the op-by-op simulation quadratic in the ranks); detours around dead links and stragglers need
  // the op-by-op simulation.
  const bool stragglers = std::any_of(s.gpu_slowdown.begin(), s.gpu_slowdown.end(), [](double f) { return f != 1.0; });
  const bool replayable =
      schedule.algorithm == Algorithm::kTree || schedule.algorithm == Algorithm::kPat || request.analytic;
  if (s.zone != nullptr && !schedule.symmetric() && replayable && s.dead_links.empty() && !stragglers &&
      !request.send_slowdown) {
    result.compressed = true;
    result.seconds = s.run_replayed(
        schedule, placements, [&](const SlotRange& range, uint32_t tile) { return sizer.bytes(range, tile); }, tiles,
        wire, hop_latency, base_latency, result, schedule.algorithm == Algorithm::kPat, request.replay_cache);
    return result;
  }
  result.seconds = s.run_op_by_op(schedule, request, placements, sizer, tiles, wire, base_latency);
  result.simulated_transfers = result.transfers;
  return result;
}

// Sets up the op-by-op simulation (OpByOpRun's comment), runs SimGrid's engine over it and returns
// the simulated seconds it took.
double Simulator::Impl::run_op_by_op(const Schedule& schedule, const SimRequest& request,
                                     const std::vector<std::vector<int>>& placements, const Sizer& sizer,
                                     uint32_t tiles, double wire, double base_latency) {
  const double start = sg4::Engine::get_clock();
  // NCCL's per-hop protocol latency rides on every message (the larger of it and the route's).
  const bool latencies = model.protocol_effects;
  const double extra_nvlink = latencies ? model.hop_latency_s(request.protocol, schedule.algorithm, false) : 0.0;
  const double extra_network = latencies ? model.hop_latency_s(request.protocol, schedule.algorithm, true) : 0.0;
  if (zone != nullptr) {
    zone->extra_nvlink_s = extra_nvlink;
    zone->extra_network_s = extra_network;
  }
  packet_extra_nvlink_s = extra_nvlink;
  packet_extra_network_s = extra_network;
  struct ResetLatency {
    Impl& s;
    ~ResetLatency() {
      if (s.zone != nullptr) s.zone->extra_nvlink_s = s.zone->extra_network_s = 0;
      s.packet_extra_nvlink_s = s.packet_extra_network_s = 0;
    }
  } reset{*this};
  const Schedule expanded = schedule.symmetric() ? expand(schedule) : Schedule{};
  const Schedule& explicit_form = schedule.symmetric() ? expanded : schedule;

  OpByOpRun run{explicit_form, schedule.nranks, request, sizer, tiles, wire, base_latency, {}, {}, {}};
  for (const std::vector<int>& placement : placements) {
    run.gpu_of_global.insert(run.gpu_of_global.end(), placement.begin(), placement.end());
  }
  run.states.resize(static_cast<size_t>(static_cast<int>(placements.size()) * schedule.nranks));
  add_connections(run);
  size_t actors = run.connections.size();
  for (size_t r = 0; r < run.states.size(); ++r) actors += run.program_of(static_cast<int>(r)).lanes.size();
  require_host_memory(static_cast<double>(actors) * kOpByOpActorBytes,
                      fmt::format("simulating the {} {} on {} ranks op by op ({} actors, one per connection and lane)",
                                  name(schedule.algorithm), name(schedule.collective), run.states.size(), actors),
                      "; use fewer GPUs, or an algorithm the simulator replays (ring, tree, pat: docs/simulator.md)");
  if (actors > kHeapActorStacksMaxActors) {
    mallopt(M_MMAP_THRESHOLD, kActorStackKiB * 1024 / 2);
    mallopt(M_MMAP_MAX, std::numeric_limits<int>::max());
  }
  // A connection moves its messages' bytes one after the other (SimGrid flows with the route's
  // latency switched off); the receiver waits out each message's route latency after it moved:
  // latencies of consecutive messages overlap, as NCCL's FIFO slots let them, while their bytes queue.
  if (zone != nullptr) zone->latency_off = true;
  struct LatencyBack {
    TopologyZone* zone;
    ~LatencyBack() {
      if (zone != nullptr) zone->latency_off = false;
    }
  } latency_back{zone};
  start_connection_actors(run);
  start_lane_actors(run);
  engine->run();
  return sg4::Engine::get_clock() - start;
}

// Every rank's completion counters and every connection that carries a send, with its messages
// over all tiles. The packet model refuses a message over 4 GiB here, before any actor exists.
void Simulator::Impl::add_connections(OpByOpRun& run) const {
  for (int r = 0; r < static_cast<int>(run.states.size()); ++r) {
    const RankProgram& program = run.program_of(r);
    run.states[static_cast<size_t>(r)].done.assign(program.lanes.size(), 0);
    for (uint32_t l = 0; l < program.lanes.size(); ++l) {
      for (const Op& op : program.lanes[l].ops) {
        if (op.kind != OpKind::kSend) continue;
        if (zone == nullptr) {
          for (uint32_t t = 0; t < run.tiles; ++t) {
            const double bytes = static_cast<double>(run.sizer.bytes(op.src, t)) * run.wire;
            if (bytes > static_cast<double>(UINT32_MAX)) {
              fail(ErrorCode::kUnsupported, "the packet (ns-3) model carries messages of at most 4 GiB; this "
                   "schedule sends {:.0f} bytes at once (a smaller size, or --network fluid)", bytes);
            }
          }
        }
        Connection& c = run.connections[{r, run.peer_of(r, op.peer), l}];
        c.from = r;
        c.to = run.peer_of(r, op.peer);
        c.messages += run.tiles;
      }
    }
  }
}

// One actor per connection: it moves its messages' bytes in order (a straggling or slowed sender
// holding the connection longer); the receiver waits out the latency (Connection::receive).
void Simulator::Impl::start_connection_actors(OpByOpRun& run) {
  const bool packet = zone == nullptr;
  // Every connection's route first (this is where a pair with no route left around dead links
  // throws), so that a failure leaves no actor behind to haunt the next run.
  for (auto& [key, connection] : run.connections) {
    connection.latency_s = message_latency(run.gpu_of_global[static_cast<size_t>(connection.from)],
                                           run.gpu_of_global[static_cast<size_t>(connection.to)]);
  }
  for (auto& [key, connection] : run.connections) {
    Connection* c = &connection;
    const int from_gpu = run.gpu_of_global[static_cast<size_t>(c->from)];
    const int to_gpu = run.gpu_of_global[static_cast<size_t>(c->to)];
    sg4::Host* from = gpu_hosts[static_cast<size_t>(from_gpu)];
    sg4::Host* to = gpu_hosts[static_cast<size_t>(to_gpu)];
    const double latency = c->latency_s;
    // A straggling sender holds the connection (slowdown - 1) x the transfer time longer: its
    // kernel pushes the bytes that much slower, while the links are free for other flows.
    const double slowdown = gpu_slowdown[static_cast<size_t>(from_gpu)];
    const bool slowed_sends = static_cast<bool>(run.request.send_slowdown);
    sg4::Actor::create(fmt::format("c{}-{}", c->from, c->to), from,
                       [c, from, to, latency, packet, slowdown, slowed_sends] {
      for (uint64_t m = 0; m < c->messages; ++m) {
        c->queued->acquire();
        const uint64_t bytes = c->queue.pop_front();
        const double began = sg4::Engine::get_clock();
        // ns-3 carries a message as one TCP flow (at most 4 GiB; an empty one never completes).
        if (!packet || bytes > 0) sg4::Comm::sendto(from, to, bytes);
        if (slowdown != 1.0) sg4::this_actor::sleep_for((slowdown - 1.0) * (sg4::Engine::get_clock() - began));
        if (slowed_sends) {
          const double factor = c->send_slowdowns.pop_front();
          const double spent = std::max(sg4::Engine::get_clock() - began, kMinSlowedTransfer_s);
          if (factor > 1.0) sg4::this_actor::sleep_for((factor - 1.0) * spent);
        }
        c->arrivals.push_back(sg4::Engine::get_clock() + latency);
        c->moved->release();
      }
    });
  }
}

// One actor per (rank, lane): it runs the lane's ops tile after tile, waiting for cross-lane
// dependencies on the rank's counters, queueing sends on their connection, waiting for receives.
void Simulator::Impl::start_lane_actors(OpByOpRun& run) {
  for (int r = 0; r < static_cast<int>(run.states.size()); ++r) {
    const RankProgram& program = run.program_of(r);
    sg4::Host* host = gpu_hosts[static_cast<size_t>(run.gpu_of_global[static_cast<size_t>(r)])];
    // A straggler's copies and reduces take `slowdown` times as long (its host's speed is HBM's).
    const double slowdown = gpu_slowdown[static_cast<size_t>(run.gpu_of_global[static_cast<size_t>(r)])];
    for (uint32_t l = 0; l < program.lanes.size(); ++l) {
      sg4::Actor::create(fmt::format("r{}-l{}", r, l), host, [&run, r, l, slowdown] {
        const Lane& lane = run.program_of(r).lanes[l];
        RankState& state = run.states[static_cast<size_t>(r)];
        const uint64_t per_tile = lane.ops.size();
        // SimRequest::send_slowdown's op numbering: over all tiles, lanes in order.
        int64_t lane_offset = 0, ops_per_tile = 0;
        for (uint32_t other = 0; other < run.program_of(r).lanes.size(); ++other) {
          if (other < l) lane_offset += static_cast<int64_t>(run.program_of(r).lanes[other].ops.size());
          ops_per_tile += static_cast<int64_t>(run.program_of(r).lanes[other].ops.size());
        }
        if (run.base_latency > 0) sg4::this_actor::sleep_for(run.base_latency);
        for (uint32_t t = 0; t < run.tiles; ++t) {
          for (uint64_t i = 0; i < per_tile; ++i) {
            const Op& op = lane.ops[i];
            // Cross-lane dependencies (same tile): wait until those lanes completed them.
            const OpRef* deps = lane.deps_of(i);
            for (size_t d = 0; d < lane.dep_count(i); ++d) {
              if (deps[d].lane == l) continue;
              const uint64_t needed = t * run.program_of(r).lanes[deps[d].lane].ops.size() + deps[d].index + 1;
              std::unique_lock lock(*state.mutex);
              state.changed->wait(lock, [&] { return state.done[deps[d].lane] >= needed; });
            }
            switch (op.kind) {
              case OpKind::kSend: {
                Connection& c = run.connections.at({r, run.peer_of(r, op.peer), l});
                c.queue.push_back(static_cast<uint64_t>(static_cast<double>(run.sizer.bytes(op.src, t)) * run.wire));
                if (run.request.send_slowdown) {
                  const int64_t op_index = static_cast<int64_t>(t) * ops_per_tile + lane_offset + static_cast<int64_t>(i);
                  c.send_slowdowns.push_back(run.request.send_slowdown(r, op_index));
                }
                c.queued->release();
                break;
              }
              case OpKind::kRecv:
              case OpKind::kRecvReduce:
                run.connections.at({run.peer_of(r, op.peer), r, l}).receive();
                break;
              case OpKind::kCopy:
                sg4::this_actor::execute(slowdown * 2.0 * static_cast<double>(run.sizer.bytes(op.dst, t)));
                break;
              case OpKind::kReduce:
                sg4::this_actor::execute(slowdown * 3.0 * static_cast<double>(run.sizer.bytes(op.dst, t)));
                break;
            }
            std::unique_lock lock(*state.mutex);
            ++state.done[l];
            state.changed->notify_all();
          }
        }
      });
    }
  }
}

SimResult Simulator::run_nvls_all_reduce(int64_t bytes, const std::vector<int>& gpus) {
  Impl& s = *impl_;
  if (!s.cluster.gpu.nvls) {
    fail(ErrorCode::kUnsupported, "nvls: {} has no NVLink SHARP (NVSwitch multicast)", s.cluster.gpu.name);
  }
  if (gpus.size() < 2) fail(ErrorCode::kUnsupported, "nvls needs at least 2 GPUs");
  if (s.zone == nullptr) fail(ErrorCode::kUnsupported, "nvls is a fluid-model simulation; the packet model has no NVSwitch reduction");
  const int node = s.topology.graph()[s.topology.gpu_vertex(gpus[0])].node;
  for (int g : gpus) {
    if (s.topology.graph()[s.topology.gpu_vertex(g)].node != node) {
      fail(ErrorCode::kUnsupported, "nvls models all_reduce inside one node; these GPUs span nodes");
    }
  }
  const double n = static_cast<double>(gpus.size());
  // The links run at nvlink_efficiency; NVLS reaches nvls_efficiency of the line rate instead.
  const double scale = s.model.nvlink_efficiency / s.model.nvls_efficiency;
  const double latency = s.model.protocol_effects ? nvls_latency_s() * s.model.nvlink_hop_latency_scale : 0.0;
  const double start = sg4::Engine::get_clock();
  sg4::Actor::create("nvls", s.switch_hosts[static_cast<size_t>(node)], [&] {
    std::vector<sg4::CommPtr> comms;
    sg4::Host* nvswitch = s.switch_hosts[static_cast<size_t>(node)];
    for (int g : gpus) {
      sg4::Host* gpu = s.gpu_hosts[static_cast<size_t>(g)];
      // Up: the switch reads the GPU's whole buffer (every slice's multimem load-reduce).
      comms.push_back(sg4::Comm::sendto_async(gpu, nvswitch, static_cast<uint64_t>(static_cast<double>(bytes) * scale)));
      // Down: the multicast store of every reduced slice, plus the GPU's own slice's result.
      comms.push_back(sg4::Comm::sendto_async(
          nvswitch, gpu, static_cast<uint64_t>(static_cast<double>(bytes) * (1.0 + 1.0 / n) * scale)));
    }
    sg4::Comm::wait_all(comms);
    sg4::this_actor::sleep_for(latency);
  });
  s.engine->run();
  SimResult result;
  result.seconds = sg4::Engine::get_clock() - start;
  result.transfers = result.simulated_transfers = 2 * gpus.size();
  return result;
}

// NVLS Tree (NCCL 2.28 device/all_reduce.h runTreeSplit for NVLS_TREE, transport/nvls.cc): inside
// each node NVLink SHARP reduces the buffer into one slice per head GPU (head h = local GPU h, on
// NIC h); head h all-reduces its slice with the h-th heads of the other nodes over a double binary
// tree of nodes on its own rail (tree 0 on even channels, tree 1 on odd ones: half the slice each),
// and the switch multicasts the result back. The three phases run at once on different warps, so
// in steady state every link is busy together: the most loaded link (bytes over its fluid-model
// bandwidth) sets the time, plus NCCL's latencies (the NVLS hop once, the tree's network hop per
// level up and down).
SimResult Simulator::run_nvls_tree_all_reduce(int64_t bytes, const std::vector<int>& gpus, int per_node) {
  Impl& s = *impl_;
  if (!s.cluster.gpu.nvls) {
    fail(ErrorCode::kUnsupported, "nvls_tree: {} has no NVLink SHARP (NVSwitch multicast)", s.cluster.gpu.name);
  }
  if (s.zone == nullptr) fail(ErrorCode::kUnsupported, "nvls_tree is a fluid-model simulation");
  if (per_node < 2 || gpus.size() % static_cast<size_t>(per_node) != 0) {
    fail(ErrorCode::kUnsupported, "nvls_tree needs at least 2 GPUs on every node, the same number on each");
  }
  const int nodes = static_cast<int>(gpus.size()) / per_node;
  if (nodes < 2) fail(ErrorCode::kUnsupported, "nvls_tree runs across nodes; inside one node use nvls");
  const double n = per_node;
  // NVLS runs at nvls_efficiency of the line rate where the links run at nvlink_efficiency.
  const double scale = s.model.nvlink_efficiency / s.model.nvls_efficiency;
  // Bytes per direction of every link: each GPU's NVLink up (its whole buffer read by the switch's
  // multimem load-reduce) and down (every reduced slice multicast, plus its own result), and each
  // tree edge's half slice both ways along its route (PCIe, NIC, leaf, maybe spine).
  std::unordered_map<uint64_t, double> load;  // (link << 1 | forward) -> bytes
  auto add = [&](uint32_t link, bool forward, double amount) { load[(uint64_t{link} << 1) | (forward ? 1 : 0)] += amount; };
  for (int g : gpus) {
    const uint32_t link = s.nvlink_of_gpu.at(static_cast<size_t>(g));
    const bool gpu_first = s.topology.endpoints(link).first == s.topology.gpu_vertex(g);
    add(link, gpu_first, static_cast<double>(bytes) * scale);
    add(link, !gpu_first, static_cast<double>(bytes) * (1.0 + 1.0 / n) * scale);
  }
  const double half_slice = static_cast<double>(bytes) / n / 2.0;
  for (int tree = 0; tree < 2; ++tree) {
    for (int v = 0; v < nodes; ++v) {
      const int parent = nccl_tree_parent(nodes, v, tree);
      if (parent < 0) continue;
      for (int h = 0; h < per_node; ++h) {
        const int child_gpu = gpus[static_cast<size_t>(v * per_node + h)];
        const int parent_gpu = gpus[static_cast<size_t>(parent * per_node + h)];
        for (const models::Hop& hop : s.topology.route(child_gpu, parent_gpu).hops) add(hop.link, hop.forward, half_slice);
        for (const models::Hop& hop : s.topology.route(parent_gpu, child_gpu).hops) add(hop.link, hop.forward, half_slice);
      }
    }
  }
  // The phases run at once and every link stays busy: the most loaded link sets the time.
  double seconds = 0;
  for (const auto& [key, amount] : load) seconds = std::max(seconds, amount / s.link_capacity(static_cast<uint32_t>(key >> 1)));
  int depth = 0;
  for (int span = 1; span < nodes; span *= 2) ++depth;
  SimResult result;
  const double latency = s.model.protocol_effects
                             ? nvls_latency_s() * s.model.nvlink_hop_latency_scale +
                                   2.0 * depth * nvls_tree_network_hop_latency_s() * s.model.net_hop_latency_scale
                             : 0.0;
  result.seconds = seconds + latency;
  result.transfers = result.simulated_transfers = load.size();
  result.compressed = true;
  return result;
}

// CollNet (NCCL 2.28 transport/coll_net.cc, device/all_reduce.h runCollNetDirect / runCollNetChain;
// ../shared/docs/nccl-multinode-notes.md §4). One head per NIC taking part: head h is the first GPU
// of the node on rail h, and slice h (bytes / heads) goes through its NIC. Per node, per direction:
//
//   Direct  GPU g  NVLink up:   its other heads' slices, and (a head) its result to the node's other GPUs
//                  NVLink down: the same, mirrored
//   Chain   GPU g  NVLink up:   the reduce toward the head and the broadcast onward, except at the
//                               chain's ends: 2 (n - 1) / n of the buffer over the rotating heads
//   head h  PCIe + NIC link, up and down: slice h once each way (the switch reduces it over the nodes)
//
// The switch's aggregation tree sends one slice per rail up and down each switch-to-switch link,
// never more than a NIC link carries, so the model stops at the NIC's link to its leaf.
SimResult Simulator::run_collnet_all_reduce(int64_t bytes, const std::vector<int>& gpus, int per_node, bool chain) {
  Impl& s = *impl_;
  const char* label = chain ? "collnet_chain" : "collnet_direct";
  if (!s.cluster.sharp) {
    fail(ErrorCode::kUnsupported, "{}: the cluster has no in-network reduction (SHARP): add --sharp", label);
  }
  if (s.zone == nullptr) fail(ErrorCode::kUnsupported, "{} is a fluid-model simulation", label);
  if (per_node < 1 || gpus.empty() || gpus.size() % static_cast<size_t>(per_node) != 0) {
    fail(ErrorCode::kUnsupported, "{} needs the same number of GPUs on every node", label);
  }
  const int nodes = static_cast<int>(gpus.size()) / per_node;
  if (nodes < 2) fail(ErrorCode::kUnsupported, "{} runs across nodes (NCCL: COLLNET_NODE_THRESHOLD = 2)", label);
  const auto& graph = s.topology.graph();
  std::unordered_map<uint64_t, double> load;  // (link << 1 | forward) -> bytes
  auto add = [&](uint32_t link, bool forward, double amount) {
    if (amount > 0) load[(uint64_t{link} << 1) | (forward ? 1 : 0)] += amount;
  };
  auto nvlink = [&](int gpu, double up, double down) {
    const uint32_t link = s.nvlink_of_gpu.at(static_cast<size_t>(gpu));
    const bool gpu_first = s.topology.endpoints(link).first == s.topology.gpu_vertex(gpu);
    add(link, gpu_first, up);
    add(link, !gpu_first, down);
  };
  const auto total = static_cast<double>(bytes);
  for (int v = 0; v < nodes; ++v) {
    // Heads: the first GPU of the node on each rail.
    std::vector<int> heads;
    std::vector<int> rails;
    for (int i = 0; i < per_node; ++i) {
      const int g = gpus[static_cast<size_t>(v * per_node + i)];
      const int rail = graph[s.topology.gpu_vertex(g)].rail;
      if (std::find(rails.begin(), rails.end(), rail) == rails.end()) {
        rails.push_back(rail);
        heads.push_back(g);
      }
    }
    const double h = static_cast<double>(heads.size());
    const double slice = total / h;
    for (int i = 0; i < per_node; ++i) {
      const int g = gpus[static_cast<size_t>(v * per_node + i)];
      const bool head = std::find(heads.begin(), heads.end(), g) != heads.end();
      if (per_node == 1) break;
      if (chain) {
        const double n = per_node;
        nvlink(g, 2 * total * (n - 1) / n, 2 * total * (n - 1) / n);
      } else {
        const double traffic = (h - (head ? 1 : 0)) * slice + (head ? (per_node - 1) * slice : 0.0);
        nvlink(g, traffic, traffic);
      }
    }
    // Each head's slice up its PCIe and NIC link to the leaf, and the result back down.
    const int other_node = (v + 1) % nodes;
    for (size_t k = 0; k < heads.size(); ++k) {
      const int head = heads[k];
      int peer = gpus[static_cast<size_t>(other_node * per_node)];
      for (int i = 0; i < per_node; ++i) {
        const int g = gpus[static_cast<size_t>(other_node * per_node + i)];
        if (graph[s.topology.gpu_vertex(g)].rail == rails[k]) {
          peer = g;
          break;
        }
      }
      const std::vector<uint32_t> nic = s.topology.nic_links(graph[s.topology.gpu_vertex(head)].node, rails[k]);
      auto on_nic = [&](uint32_t link) { return std::find(nic.begin(), nic.end(), link) != nic.end(); };
      for (const models::Hop& hop : s.topology.route(head, peer).hops) {
        if (on_nic(hop.link)) add(hop.link, hop.forward, slice);
      }
      for (const models::Hop& hop : s.topology.route(peer, head).hops) {
        if (on_nic(hop.link)) add(hop.link, hop.forward, slice);
      }
    }
  }
  double seconds = 0;
  for (const auto& [key, amount] : load) {
    seconds = std::max(seconds, amount / s.link_capacity(static_cast<uint32_t>(key >> 1)));
  }
  SimResult result;
  result.seconds =
      seconds + (s.model.protocol_effects ? collnet_latency_s(chain, per_node, s.model.nvlink_hop_latency_scale,
                                                              s.model.net_hop_latency_scale)
                                          : 0.0);
  result.transfers = result.simulated_transfers = load.size();
  result.compressed = true;
  return result;
}

// NCCL's point-to-point transfers (sim/p2p.h). Every rank's sends are split into parts on the
// plan's channels (round k of rank r: send to peer(r, k), parts on channels base(k), base(k) + 1,
// ... mod p2p channels); a channel is one CTA per GPU that copies its parts one after the other
// and at most channel_Bps, for the sending and for the receiving side. The bytes take their route:
//
//     one node         a --NVLink--> NVSwitch --NVLink--> b
//     across nodes     a --NVLink--> relay (a's node, b's local index) --PCIe--> NIC --rail--> ... --> b
//                      (PXN; the relay is a itself when a already sits on b's rail)
//
// In steady state every channel and link is busy at once (all_to_all keeps them all loaded alike),
// so the most loaded one sets the time: links at their fluid-model capacity, channels at their
// rate (divided by a straggler's slowdown). Flows are summed per route leg, not per pair: 512 GPUs
// are 261,632 pairs but 36,000 legs. NCCL's latencies add on: the base latency once, then one
// step per epoch a channel runs (8 rounds share an epoch; epochs on a channel go in turn).
SimResult Simulator::run_p2p(const P2pRequest& request) {
  Impl& s = *impl_;
  if (s.zone == nullptr) fail(ErrorCode::kUnsupported, "p2p is a fluid-model simulation; the packet model runs direct");
  if (request.collective != Collective::kAllToAll && request.collective != Collective::kSendRecv) {
    fail(ErrorCode::kInvalidArgument, "p2p runs all_to_all and send_recv, not {}", name(request.collective));
  }
  const P2pPlan& plan = request.plan;
  if (request.instances.empty() || plan.nranks < 1 || plan.group_size < 1 || plan.nranks % plan.group_size != 0 ||
      plan.channels < 1) {
    fail(ErrorCode::kInvalidArgument, "p2p: no instances, or a plan of {} ranks in groups of {}", plan.nranks,
         plan.group_size);
  }
  const int n = plan.nranks;
  const int topology_per_node = s.topology.gpus_per_node();
  const int gpu_count = s.topology.gpu_count();
  for (const std::vector<int>& gpus : request.instances) {
    if (gpus.size() != static_cast<size_t>(n)) {
      fail(ErrorCode::kInvalidArgument, "p2p: the plan has {} ranks but an instance {} GPUs", n, gpus.size());
    }
    for (int g : gpus) {
      if (g < 0 || g >= gpu_count)
        fail(ErrorCode::kInvalidArgument, "p2p: GPU {} out of range ({} GPUs)", g, gpu_count);
    }
  }
  SimResult result;
  result.compressed = true;
  if (n == 1 || request.bytes <= 0) return result;

  const bool all_to_all = request.collective == Collective::kAllToAll;
  const int64_t peer_bytes = all_to_all ? request.bytes / n : request.bytes;
  const bool ll = plan.uses_ll(peer_bytes);
  const double wire = s.model.protocol_effects && ll ? protocol_wire_factor(models::NcclProtocol::kLL) : 1.0;
  const int parts = plan.peer_channels(peer_bytes);
  const double part_bytes = static_cast<double>(peer_bytes) * wire / parts;
  const std::vector<int> deltas = plan.group_deltas();

  // Per GPU and channel, seconds of copying for the sending and the receiving side.
  const auto channels = static_cast<size_t>(plan.channels);
  std::vector<double> channel_seconds(static_cast<size_t>(gpu_count) * channels * 2, 0.0);
  auto rate_of = [&](int gpu) {
    return plan.channel_Bps * s.model.p2p_channel_scale / s.gpu_slowdown[static_cast<size_t>(gpu)];
  };
  // Bytes per route leg, (from GPU, to GPU) -> bytes.
  std::unordered_map<uint64_t, double> leg_bytes;
  auto leg = [&](int from, int to, double bytes) {
    leg_bytes[(static_cast<uint64_t>(from) << 32) | static_cast<uint32_t>(to)] += bytes;
  };
  std::vector<char> member(static_cast<size_t>(gpu_count), 0);
  // Epochs (8 rounds each) per channel: the same for every rank, as the channels depend on the round only.
  std::vector<std::vector<int>> epochs_of_channel(channels);
  uint64_t transfers = 0;
  for (const std::vector<int>& gpus : request.instances) {
    std::fill(member.begin(), member.end(), 0);
    for (int g : gpus) member[static_cast<size_t>(g)] = 1;
    for (int r = 0; r < n; ++r) {
      for (int round = 1; round < n; ++round) {
        const int peer = plan.send_peer(r, round, deltas);
        if (peer == r || (!all_to_all && peer != (r + 1) % n)) continue;
        const int a = gpus[static_cast<size_t>(r)];
        const int b = gpus[static_cast<size_t>(peer)];
        ++transfers;
        const int base = plan.channel_base(round);
        for (int part = 0; part < parts; ++part) {
          const auto channel = static_cast<size_t>((base + part) % plan.channels);
          channel_seconds[(static_cast<size_t>(a) * channels + channel) * 2] += part_bytes / rate_of(a);
          channel_seconds[(static_cast<size_t>(b) * channels + channel) * 2 + 1] += part_bytes / rate_of(b);
          if (r == 0 && &gpus == &request.instances.front()) {
            std::vector<int>& epochs = epochs_of_channel[channel];
            if (std::find(epochs.begin(), epochs.end(), round / kP2pWorksPerBatch) == epochs.end()) {
              epochs.push_back(round / kP2pWorksPerBatch);
            }
          }
        }
        const double bytes = static_cast<double>(peer_bytes) * wire;
        const int node_a = a / topology_per_node;
        const int relay = node_a * topology_per_node + b % topology_per_node;
        if (plan.pxn && node_a != b / topology_per_node && relay != a && member[static_cast<size_t>(relay)]) {
          leg(a, relay, bytes);
          leg(relay, b, bytes);
        } else {
          leg(a, b, bytes);
        }
      }
    }
  }
  // Link loads, one direction each, over every leg's route (around dead links when there are any).
  std::vector<double> link_bytes(s.topology.link_count() * 2, 0.0);
  for (const auto& [key, bytes] : leg_bytes) {
    const int from = static_cast<int>(key >> 32);
    const int to = static_cast<int>(key & 0xffffffffu);
    const models::Route route =
        s.dead_links.empty() ? s.topology.route(from, to) : s.topology.route_avoiding(from, to, s.dead_links);
    for (const models::Hop& hop : route.hops) link_bytes[2 * hop.link + (hop.forward ? 1 : 0)] += bytes;
  }
  double seconds = *std::max_element(channel_seconds.begin(), channel_seconds.end());
  for (size_t l = 0; l < link_bytes.size(); ++l) {
    if (link_bytes[l] > 0) seconds = std::max(seconds, link_bytes[l] / s.link_capacity(static_cast<uint32_t>(l / 2)));
  }
  size_t epochs = 1;
  for (const std::vector<int>& e : epochs_of_channel) epochs = std::max(epochs, e.size());
  double latency = 0;
  if (s.model.protocol_effects) {
    const models::NcclProtocol protocol = ll ? models::NcclProtocol::kLL : models::NcclProtocol::kSimple;
    latency = s.model.base_latency_s(protocol, Algorithm::kDirect) +
              static_cast<double>(epochs) * s.model.hop_latency_s(protocol, Algorithm::kDirect, plan.nodes > 1);
  }
  result.seconds = seconds + latency;
  result.transfers = transfers;
  result.simulated_transfers = leg_bytes.size();
  return result;
}

void Simulator::set_link_factor(uint32_t link, double factor) {
  Impl& s = *impl_;
  s.require_fluid("set_link_factor");
  if (link >= s.topology.link_count()) {
    fail(ErrorCode::kInvalidArgument, "set_link_factor: link {} out of range (the topology has {})", link,
         s.topology.link_count());
  }
  if (!(factor > 0) || !std::isfinite(factor)) {
    fail(ErrorCode::kInvalidArgument,
         "set_link_factor: factor {} for link '{}' must be positive (a dead link is set_dead_links')", factor,
         s.topology.link(link).name);
  }
  // The same product as at construction times the factor: factor 1 gives back the exact bandwidth.
  const models::Link& spec = s.topology.link(link);
  const double bandwidth = spec.bandwidth_Bps * s.link_efficiency(spec.kind) * factor;
  s.links[link]->get_link_up()->set_bandwidth(bandwidth);
  s.links[link]->get_link_down()->set_bandwidth(bandwidth);
  s.link_factor[link] = factor;
}

void Simulator::set_dead_links(std::vector<uint32_t> links) {
  Impl& s = *impl_;
  s.require_fluid("set_dead_links");
  for (uint32_t link : links) {
    if (link >= s.topology.link_count()) {
      fail(ErrorCode::kInvalidArgument, "set_dead_links: link {} out of range (the topology has {})", link,
           s.topology.link_count());
    }
  }
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
  s.dead_links = std::move(links);
  s.zone->clear_routes();
}

void Simulator::set_gpu_slowdown(int gpu, double factor) {
  Impl& s = *impl_;
  s.require_fluid("set_gpu_slowdown");
  if (gpu < 0 || gpu >= s.topology.gpu_count()) {
    fail(ErrorCode::kInvalidArgument, "set_gpu_slowdown: GPU {} out of range (the cluster has {})", gpu,
         s.topology.gpu_count());
  }
  if (!(factor >= 1) || !std::isfinite(factor)) {
    fail(ErrorCode::kInvalidArgument, "set_gpu_slowdown: factor {} for GPU {} must be at least 1", factor, gpu);
  }
  s.gpu_slowdown[static_cast<size_t>(gpu)] = factor;
}

bool Simulator::crosses(int gpu_a, int gpu_b, uint32_t link) const {
  const Impl& s = *impl_;
  const models::Route route =
      s.dead_links.empty() ? s.topology.route(gpu_a, gpu_b) : s.topology.route_avoiding(gpu_a, gpu_b, s.dead_links);
  return models::Topology::crosses(route, link);
}

std::vector<uint32_t> Simulator::links_of_nic(int node, int nic) const { return impl_->topology.nic_links(node, nic); }

bool Simulator::faults_active() const { return impl_->faults_active(); }

bool packet_model_defaults_active() {
  const char* value = std::getenv("NS_ATTRIBUTE_DEFAULT");
  return value != nullptr && std::string_view(value).starts_with(kPacketModelNs3Defaults);
}

void packet_model_reexec(char** argv) {
  if (packet_model_defaults_active()) return;
  std::string defaults(kPacketModelNs3Defaults);
  if (const char* user = std::getenv("NS_ATTRIBUTE_DEFAULT"); user != nullptr && *user != '\0') {
    defaults += ';';
    defaults += user;  // after ours, so the user's wins
  }
  ::setenv("NS_ATTRIBUTE_DEFAULT", defaults.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  // Only reached when exec failed: run on, window-bound.
  std::fprintf(stderr, "tandem: warning: could not restart with ns-3's packet-model defaults (%s); the packet "
               "model will run with ns-3's own TCP buffers\n", std::strerror(errno));
}

}  // namespace tandem::sim
