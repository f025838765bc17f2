// sim::Simulator: runs schedules on a SimGrid model of a models::Topology and reports simulated
// time. SimGrid keeps global state, so a process holds at most one Simulator (one platform);
// run_isolated() (sim/isolated.h) runs a batch on a fresh platform in a child process, for sweeps
// over clusters.
//
// Network model ("fluid", the default): SimGrid's CM02 max-min sharing with cross-traffic and the
// TCP-gamma cap off, so a lone transfer takes latency + bytes / bandwidth exactly and contention
// comes only from flows sharing a link. Real-hardware efficiencies are explicit, named factors
// (NetworkModel), applied to link bandwidths per link kind; NCCL's protocols add per-hop latency
// and a payload efficiency. "packet" runs the same schedules on SimGrid's ns-3 binding (every
// packet of every message through ns-3's TCP/IP stack and point-to-point links), for clusters of up
// to kMaxPacketGpus GPUs, as a cross-check of the fluid model (docs/simulator.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/schedule.h"
#include "models/cluster.h"
#include "models/nccl_protocol.h"
#include "models/topology.h"
#include "sim/p2p.h"
#include "sim/protocol.h"

namespace tandem::sim {

enum class Fidelity : uint8_t { kFluid, kPacket };
inline constexpr int kMaxPacketGpus = 32;  // the packet model's cluster size limit
std::string_view name(Fidelity fidelity);
Fidelity parse_fidelity(std::string_view text);

// The packet model needs ns-3 defaults (TCP buffers, initial window, queue depths) that ns-3 3.37
// only takes from NS_ATTRIBUTE_DEFAULT as its libraries load, before main(). A program that may run
// the packet model calls packet_model_reexec(argv) first in main(): when the variable does not
// start with them yet, it prepends them (a user's own settings stay, after ours, and win) and
// re-executes the program, so that they are in place from the start; otherwise it returns. Without
// them the packet model still runs, window-bound (docs/simulator.md).
bool packet_model_defaults_active();
void packet_model_reexec(char** argv);

struct NetworkModel {
  Fidelity fidelity = Fidelity::kFluid;
  // Share of a link's line rate that NCCL's kernels reach, per link kind (documented in
  // docs/simulator.md with the measurements they come from). 1.0 everywhere = the ideal model.
  double nvlink_efficiency = 0.824;   // 370.8 / 450 GB/s: NCCL's own NVLink model, ring busbw 365-370
  double pcie_efficiency = 1.0;
  double network_efficiency = 0.94;   // ConnectX-7: 46-48 GB/s of 50
  double nvls_efficiency = 0.686;     // NVLink SHARP all_reduce: ~309 GB/s per GPU downlink (fit, 4-8 GPUs)
  // NCCL's tree kernel moves a link's bytes slower than a ring does: NCCL 2.28 tuning.cc scales
  // tree all_reduce bandwidth by 0.92, and by 0.85 more for the TREE pattern (all of a channel's
  // NIC traffic through one GPU), which is what its search finds on H100 nodes. Applied to every
  // tree message (not fit to a measurement: the 4-NIC tree row M4 checks it).
  double tree_efficiency = 0.92 * 0.85;
  // Multipliers on NCCL's compiled-in latency tables (models/cost_model.h), 1 = NCCL's numbers:
  // baseLat (the launch cost of a collective), hwLat of a hop inside a node (NVLink, NVLS) and of a
  // hop across nodes (NET). `tandem calibrate` fits them to a cluster's own logs (docs/calibrate.md).
  double base_latency_scale = 1.0;
  double nvlink_hop_latency_scale = 1.0;
  double net_hop_latency_scale = 1.0;
  // Multiplier on what one channel (one CTA) of NCCL's point-to-point path moves a second
  // (sim/p2p.h P2pPlan::channel_Bps): all_to_all and send_recv.
  double p2p_channel_scale = 1.0;
  bool protocol_effects = true;  // NCCL's per-hop / base latencies and payload efficiency (false: alpha-beta)

  static NetworkModel ideal();  // efficiencies 1, no protocol latencies: alpha-beta exact

  // NCCL's base latency / hop latency for a protocol and algorithm with the scales above applied;
  // 0 without protocol_effects. s.
  double base_latency_s(models::NcclProtocol protocol, Algorithm algorithm) const;
  double hop_latency_s(models::NcclProtocol protocol, Algorithm algorithm, bool network_hop) const;
};

// One fittable parameter of NetworkModel: its name (as profiles and `tandem calibrate` print it),
// the member it sets, and the bounds physics allows, with the reason for them.
struct NetworkParameter {
  std::string_view name;
  double NetworkModel::*field;
  double lower;
  double upper;
  std::string_view bounds_reason;
};
// Efficiencies: below 0.3 a link would be a misconfiguration (a PCIe fallback, a down-trained
// link), not an efficiency; above 1.0 a link would move more than its line rate.
inline constexpr double kMinEfficiency = 0.3;
inline constexpr double kMaxEfficiency = 1.0;
// Latency scales: NCCL's tables are measured on real systems; a factor 4 faster than them is below
// one kernel launch, 8 slower is a cluster with something wrong (a proxy thread starved, ...).
inline constexpr double kMinLatencyScale = 0.25;
inline constexpr double kMaxLatencyScale = 8.0;
// The p2p channel rate: half to twice NCCL's per-CTA copy rate (a CTA cannot outrun its SM's copy
// engine bandwidth by more, and below half NCCL would pick more channels).
inline constexpr double kMinChannelScale = 0.5;
inline constexpr double kMaxChannelScale = 2.0;

// Every fittable parameter, in a fixed order (the order profiles list them in).
const std::vector<NetworkParameter>& network_parameters();
// The parameter called `name`; nullptr when there is none.
const NetworkParameter* find_network_parameter(std::string_view name);

// What to run: a checked schedule (explicit or rank-symmetric) for `spec` (count and dtype give
// the bytes), with rank r on GPU gpu_of_rank[r] of the topology.
struct SimRequest {
  const Schedule* schedule = nullptr;
  CollectiveSpec spec;
  std::vector<int> gpu_of_rank;    // empty: rank r on GPU r
  models::NcclProtocol protocol = models::NcclProtocol::kSimple;
  uint32_t tiles = 1;              // pipelining depth (see core/executor.h)
  // Further placements that run the same schedule at the same time, on GPUs of their own (every
  // TP or DP group of a training job at once), so that groups whose routes share a link share it.
  // Each lies on the nodes as gpu_of_rank does (the same GPUs per node): protocol hop latencies
  // are taken from the first. The result's time is the slowest group's.
  std::vector<std::vector<int>> concurrent;
  // Slowed sends (sim::SimExecutor realises the fault hook's delay and bandwidth factors with it):
  // when set, the send that is op `op_index` of rank r's program (numbered as core/executor.h's
  // TransferHook: over all tiles, lanes in order) holds its connection (f - 1) times its transfer
  // time longer, counting at least kMinSlowedTransfer_s (core/faults.h), f = send_slowdown(r,
  // op_index) >= 1: the host backend's realisation. Forces the op-by-op simulation; not with
  // `concurrent` groups.
  std::function<double(int rank, int64_t op_index)> send_slowdown;
  // Where the simulator keeps what it derives from `schedule` alone (the analytic replay's op graph,
  // connections and flattened program) between runs of that schedule at other sizes: a slot
  // CollectivePlans keeps per schedule it built (sim/collective_plan.h); null: derived afresh.
  // The slot must belong to this very schedule, unchanged since.
  std::shared_ptr<void>* replay_cache = nullptr;
  // Replay any explicit schedule analytically after one contention round (as trees always are),
  // rings and chains included, instead of op by op: one SimGrid actor per rank and lane and one
  // per connection costs minutes and gigabytes at a thousand ranks (a 4 MiB ring broadcast on
  // 1,024 GPUs: 36.8 s and 2.8 GB). Ignored while faults are active or with send_slowdown.
  bool analytic = false;
};

struct SimResult {
  double seconds = 0;
  uint64_t transfers = 0;          // point-to-point transfers the schedule moves
  uint64_t simulated_transfers = 0;  // comms SimGrid actually simulated (fewer when compressed)
  bool compressed = false;         // symmetric rounds simulated once each (see Simulator::run)
};

// Point-to-point traffic as NCCL runs it (sim/p2p.h): all_to_all (each rank sends bytes / n to
// every rank) or send_recv (each rank sends bytes to the next), on the channels of `plan`.
struct P2pRequest {
  Collective collective = Collective::kAllToAll;  // kAllToAll or kSendRecv
  int64_t bytes = 0;                              // nccl-tests' size (what a rank sends in all)
  // Each instance's GPUs in rank order, node-major, with plan.per_node ranks on each node; all
  // instances run at once (they share links, not GPUs). The time is the slowest one's.
  std::vector<std::vector<int>> instances;
  P2pPlan plan;
};

class Simulator {
 public:
  // Builds the SimGrid platform. At most one per process (throws Error(kBackend) on a second).
  Simulator(const models::Topology& topology, const models::ClusterSpec& cluster, const NetworkModel& model);
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  // Simulates one collective and returns its simulated duration. A rank-symmetric schedule with
  // identical rounds is simulated one representative round at a time (all n flows of that round
  // at once, so contention is kept) and multiplied out; anything else runs op by op, one SimGrid
  // actor per rank and lane.
  SimResult run(const SimRequest& request);

  // NVLink SHARP all_reduce of `bytes` over the GPUs of one node (in-switch reduction): every GPU
  // link carries bytes * (1 + 1/n) at nvls_efficiency of the line rate. Throws Error(kUnsupported)
  // when the GPU has no NVLS or the GPUs span nodes.
  SimResult run_nvls_all_reduce(int64_t bytes, const std::vector<int>& gpus);

  // NVLS Tree all_reduce of `bytes` over `gpus` (node-major, `per_node` on each of at least 2
  // nodes): NVLink SHARP inside each node, a double binary tree per rail across nodes, in one
  // pipelined round (simulator_in_network.cc says how). Throws Error(kUnsupported) without NVLS or
  // on one node.
  SimResult run_nvls_tree_all_reduce(int64_t bytes, const std::vector<int>& gpus, int per_node);

  // CollNet all_reduce of `bytes` over `gpus` (node-major, `per_node` on each of at least 2 nodes)
  // with in-network reduction (InfiniBand SHARP): each node's buffer is cut into one slice per head
  // (one head GPU per NIC taking part); the heads send their slice through their NIC to the switch,
  // which reduces it over the nodes and sends the result back. Direct: every GPU scatters its
  // slices to the heads over NVLink and gathers the results back. Chain (`chain`): each channel
  // reduces along the node's GPUs into its head and broadcasts back down. A model in one pipelined
  // round, as run_nvls_tree_all_reduce: the most loaded link sets the time, plus NCCL's CollNet
  // latencies (the reduction in the switch has no point-to-point schedule). Throws
  // Error(kUnsupported) without `sharp` in the cluster, on one node, or with the packet model.
  SimResult run_collnet_all_reduce(int64_t bytes, const std::vector<int>& gpus, int per_node, bool chain);

  // NCCL's point-to-point transfers, in one pipelined round (simulator_p2p.cc says how): every pair's
  // bytes on its route (across nodes through PXN: NVLink to the GPU on the receiver's rail, then
  // that rail's NIC), split into parts on the plan's channels, each channel one CTA moving at most
  // plan.channel_Bps; the most loaded link or channel sets the time, plus NCCL's latencies. Degraded
  // links, dead links (routes around them) and stragglers (slower channels) apply. Fluid model
  // only: Error(kUnsupported) with the packet model; Error(kInvalidArgument) for a bad request.
  SimResult run_p2p(const P2pRequest& request);

  // Fault controls (docs/simulator.md, "Faults"). Each holds from the next run() on until changed,
  // across runs; with every control at its neutral value (factor 1, no dead links, slowdown 1) a
  // run takes exactly the fault-free time again. While any is active, run() simulates op by op
  // (never the compressed rounds, which assume every position alike). Fluid model only: with
  // the packet model they throw Error(kUnsupported). Bad link ids, GPUs or factors throw
  // Error(kInvalidArgument).

  // Topology link `link` runs at `factor` (> 0; 1 restores) of its bandwidth (the efficiency-scaled
  // one), both directions: a degraded link. A dead link is set_dead_links' business.
  void set_link_factor(uint32_t link, double factor);

  // Routes go around these topology links (models::Topology::route_avoiding: the normal route
  // where it avoids them, else a detour, through a relay GPU of the same node if need be, as
  // NCCL's PXN); empty restores normal routing. Throws Error(kUnsupported) when a pair of GPUs
  // that talks in a later run has no route left (raised by that run).
  void set_dead_links(std::vector<uint32_t> links);

  // A straggler: GPU `gpu`'s kernels run `factor` (>= 1; 1 restores) times slower, so its local
  // copies and reduces take factor x as long and each message it sends occupies its connection
  // factor x as long as the transfer itself took.
  void set_gpu_slowdown(int gpu, double factor);

  // Whether the route from GPU a to GPU b (with the current dead links) crosses topology link `link`.
  bool crosses(int gpu_a, int gpu_b, uint32_t link) const;
  // The topology links of NIC `nic` of node `node` (PCIe and network): what a dead NIC takes down.
  std::vector<uint32_t> links_of_nic(int node, int nic) const;
  // Whether any fault control is away from its neutral value.
  bool faults_active() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::sim
