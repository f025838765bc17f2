// The SimGrid side of sim::Simulator: the engine and its settings, the platform built from a
// models::Topology (fluid: CM02 hosts, split-duplex links and TopologyZone's routes; packet: one
// ns-3 node per topology vertex), and the ns-3 defaults the packet model needs before main().
#include <simgrid/kernel/routing/NetPoint.hpp>
#include <simgrid/kernel/routing/NetZoneImpl.hpp>
#include <simgrid/s4u.hpp>


#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include "core/error.h"
#include "core/host_memory.h"
#include "sim/simulator.h"
#include "sim/simulator_internal.h"

namespace tandem::sim {
namespace {

std::atomic<bool> g_platform_built{false};

// The platform size above which SimGrid's actor stacks are always mmapped (see start_engine).
constexpr int kHeapActorStacksMaxGpus = 1024;
// What a simulated platform holds per GPU for a collective on all of them: its hosts, links and
// routes in SimGrid, the route cache and the replayed tree's state (measured: an all_reduce of 1 MiB
// on 8,192 nodes, 65,536 GPUs, peaked at 2.3 GB; on 16,384 nodes, 131,072 GPUs, at 5.75 GB).
constexpr double kPlatformBytesPerGpu = 48 * 1024;

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


// SimGrid's engine, quiet and with small actor stacks, for a platform of `gpu_count` GPUs.
std::unique_ptr<sg4::Engine> start_engine(int gpu_count) {
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
  auto engine = std::make_unique<sg4::Engine>(&argc, argv.data());
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
  if (gpu_count > kHeapActorStacksMaxGpus) mallopt(M_MMAP_THRESHOLD, kActorStackKiB * 1024 / 2);
  sg4::Engine::set_config("contexts/guard-size:0");
  return engine;
}

}  // namespace

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
  impl_->engine = start_engine(topology.gpu_count());
  if (model.fidelity == Fidelity::kPacket) {
    sg4::Engine::set_config("network/model:ns-3");
    impl_->build_packet_platform();
    return;
  }
  impl_->build_fluid_platform();
}

Simulator::~Simulator() = default;

// The fluid platform: one host per GPU and one per node's NVSwitch (NVLS), one split-duplex link
// per topology link, routes from TopologyZone.
void Simulator::Impl::build_fluid_platform() {
  // The ideal bandwidth + latency model (docs/simgrid-3.32-notes.md §2): LV08's TCP factors and
  // the TCP-gamma cap would make NVLink flows up to 3x slower than the hardware.
  sg4::Engine::set_config("network/model:CM02");
  sg4::Engine::set_config("network/crosstraffic", false);
  sg4::Engine::set_config("network/TCP-gamma", 0.0);

  zone = new TopologyZone("tandem", [this](int a, int b, auto& out, double& latency, bool& network) {
    route(a, b, out, latency, network);
  });
  sg4::NetZone* zone_iface = zone->get_iface();
  const double hbm = hbm_Bps();
  // Hosts compute in "bytes of HBM traffic" per second: a local copy or reduce is memory-bound.
  for (int g = 0; g < topology.gpu_count(); ++g) {
    sg4::Host* host = zone_iface->create_host(topology.vertex(topology.gpu_vertex(g)).name, hbm);
    zone->register_host(host->get_netpoint(), g);
    host_index[host] = g;
    gpu_hosts.push_back(host);
  }
  for (int node = 0; node < topology.node_count(); ++node) {
    sg4::Host* host = zone_iface->create_host(fmt::format("n{}-nvswitch-host", node), hbm);
    zone->register_host(host->get_netpoint(), topology.gpu_count() + node);
    host_index[host] = topology.gpu_count() + node;
    switch_hosts.push_back(host);
  }
  nvlink_of_gpu.assign(static_cast<size_t>(topology.gpu_count()), ~0u);
  for (uint32_t id = 0; id < topology.link_count(); ++id) {
    const models::Link& link = topology.link(id);
    sg4::SplitDuplexLink* sd =
        zone_iface->create_split_duplex_link(link.name, link.bandwidth_Bps * link_efficiency(link.kind));
    sd->set_latency(link.latency_s);
    sd->seal();
    links.push_back(sd);
    if (link.kind == models::LinkKind::kNvLink) {
      const auto [a, b] = topology.endpoints(id);
      for (models::VertexId v : {a, b}) {
        const models::Vertex& vertex = topology.vertex(v);
        if (vertex.kind == models::VertexKind::kGpu) nvlink_of_gpu[static_cast<size_t>(vertex.rank)] = id;
      }
    }
  }
  zone_iface->seal();
}

// Host index: GPUs first (index = GPU), then one NVSwitch host per node.
void Simulator::Impl::route(int a, int b, std::vector<simgrid::kernel::resource::StandardLinkImpl*>& out,
                            double& latency, bool& network) const {
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

// The packet platform: every topology vertex an ns-3 node (GPUs as hosts, switches and NICs as
// routers) and every topology link one point-to-point link, declared as a one-link route (the
// only routes SimGrid hands to ns-3); ns-3's global routing finds the paths (one per pair: no
// ECMP spreading). Small clusters only (kMaxPacketGpus), so Floyd's O(V^3) is nothing.
void Simulator::Impl::build_packet_platform() {
  sg4::NetZone* zone_iface = sg4::create_floyd_zone("tandem-packet");
  std::vector<routing::NetPoint*> point(topology.vertex_count(), nullptr);
  gpu_hosts.assign(static_cast<size_t>(topology.gpu_count()), nullptr);
  for (models::VertexId id = 0; id < topology.vertex_count(); ++id) {
    const models::Vertex& v = topology.vertex(id);
    if (v.kind == models::VertexKind::kGpu) {
      sg4::Host* host = zone_iface->create_host(v.name, hbm_Bps());
      host_index[host] = v.rank;
      gpu_hosts[static_cast<size_t>(v.rank)] = host;
      point[id] = host->get_netpoint();
    } else {
      point[id] = zone_iface->create_router(v.name);
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
