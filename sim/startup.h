// A PyTorch + NCCL job's start-up, phase by phase: what happens between the launch and the first
// training step, on a cluster of a given size, with the levers that change it. Part of what every
// job restart costs (models/reliability.h), and the answer to "what cuts start-up from 45 s to 13 s?"
//
// The phases, in the order a rank goes through them (each on the critical path; the job starts
// when its slowest rank does):
//
//   launch              process spawn, the Python interpreter, `import torch`, the CUDA context
//   store               the TCPStore: every rank connects to rank 0's server (legacy: one
//                       thread polling every socket; libuv: an event loop, PyTorch >= 2.4)
//   communicators       one per process group: the world, then every parallel dimension of the
//                       layout (TP, CP, PP, DP, EP). Each either by ncclCommInitRank[Scalable]
//                       with its unique ids exchanged through the store, or, with eager init
//                       (`init_process_group(device_id=...)`), by ncclCommSplit of the world. Per
//                       communicator, NCCL's init phases as NCCL's "Init timings" line names them:
//                       kernels (once per process), bootstrap (fan-in to the root, with NCCL's
//                       staggering above 256 ranks per root), allgathers (three ring all-gathers
//                       over the bootstrap sockets: addresses, peer info, graph info), topo,
//                       graphs, connections, rest
//   group barriers      with TORCH_DIST_INIT_BARRIER=1: a store barrier over the world after
//                       every new_group (every rank calls new_group for every group)
//   first collectives   with NCCL_RUNTIME_CONNECT (NCCL >= 2.22's default) the ring and tree
//                       connections are set up at the first collective of each communicator
//
// The store is one server: its requests are served one after the other, so store phases grow with
// the requests of all ranks. The bootstrap ring's network time is simulated on the cluster's
// SimGrid platform (the N - 1 steps of a ring all-gather, the ideal alpha-beta network model);
// every other cost is a named constant below with its source. Figures measured on one node by
// NCCL itself (NVIDIA/nccl#534, NCCL 2.22.3 on 8 H100s) give the per-communicator local phases;
// the store's costs come from PyTorch's libuv TCPStore tutorial; the rest are assumptions, marked.
// docs/startup.md compares the model with every published figure of ../reference/startup.csv.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/cluster.h"
#include "models/workload.h"

namespace tandem::sim {

// ---- the launch (per process; every process starts at once) --------------------------------------
// torchrun / srun spawn, the interpreter, `import torch` and its CUDA libraries from a node's local
// disk. Assumed: no published timing was found (../docs/allocator-startup-notes.md B1).
inline constexpr double kProcessLaunch_s = 4.0;
// The CUDA context with lazy module loading (CUDA_MODULE_LOADING=LAZY, PyTorch's default). Assumed:
// the notes found no timing source, only its memory (about 300 MB).
inline constexpr double kCudaContext_s = 0.5;

// ---- the TCPStore (rank 0's server) ------------------------------------------------------------------
// One client's connection to the libuv server: PyTorch's libuv TCPStore tutorial has 98,304 ranks
// construct their store in about 100 s: 100 s / 98,304.
inline constexpr double kLibuvStoreConnect_s = 100.0 / 98304;
// One request (set, get, add, check) at the server, libuv. Assumed: a small message's round trip
// through the event loop.
inline constexpr double kStoreRequest_s = 50e-6;
// The legacy server polls every open socket for each event it serves: its cost per request grows
// with the clients. Per socket and request: the tutorial's legacy store timed out (over 30 min) at
// 98,304 ranks: 1,800 s / 98,304^2 = 0.19 us, a lower bound, taken as the cost.
inline constexpr double kLegacyStorePerSocket_s = 1800.0 / (98304.0 * 98304.0);

// ---- NCCL's init, per communicator (NCCL's "Init timings" phases) ------------------------------------
// NVIDIA/nccl#534, NCCL 2.22.3, 8 H100 of one node: "Init timings: total 2.46 (kernels 0.18,
// bootstrap 1.60, allgathers 0.00, topo 0.52, graphs 0.01, connections 0.12, rest 0.02)".
inline constexpr double kNcclKernels_s = 0.18;        // kernels: loaded once per process
inline constexpr double kNcclTopo_s = 0.52;           // topo: system detection, per communicator
inline constexpr double kNcclGraphs_s = 0.01;         // graphs: the ring / tree / NVLS searches
inline constexpr double kNcclConnectAtInit_s = 0.12;  // connections done at init with runtime connect
inline constexpr double kNcclRest_s = 0.02;           // rest
// NCCL 2.22 removed redundant topology queries: "up to 90%" faster init for applications creating
// many communicators (the 2.22 release notes and NVIDIA's blog). A process's later communicators
// pay this share of the first one's topo phase when the cache is on (StartupLevers::topo_cache).
inline constexpr double kCachedTopoShare = 0.1;
// Software cost of one bootstrap message on the critical path: a send and a receive on TCP sockets
// (system calls, a wake-up, NCCL's framing). Assumed.
inline constexpr double kBootstrapMessageSoftware_s = 20e-6;
// With NCCL_OOB_NET_ENABLE=1 the bootstrap all-gathers go over ncclNet (the RDMA fabric): a
// message's software cost is a post and a completion. Assumed.
inline constexpr double kOobNetMessageSoftware_s = 5e-6;
// The bootstrap root's work per rank: accept its connection and read its address, later connect to
// it and send it its ring successor's address, one rank after the other. Assumed.
inline constexpr double kBootstrapRootPerRank_s = 30e-6;
// NCCL's staggering of the check-in (bootstrap.cc): above NCCL_UID_STAGGER_THRESHOLD ranks per root,
// rank i waits i / NCCL_UID_STAGGER_RATE seconds before it connects.
inline constexpr int kStaggerThreshold = 256;
inline constexpr double kStaggerRate_per_s = 7000;
// PyTorch's TORCH_NCCL_RANKS_PER_ROOT default: a group larger than this is created by
// ncclCommInitRankScalable with ceil(size / 128) roots.
inline constexpr int kDefaultRanksPerRoot = 128;
// Ring all-gathers over the bootstrap sockets in one init: the address ring, peer info, graph info.
inline constexpr int kInitRingAllgathers = 3;
// ncclCommSplit: one all-gather of (color, key) over the parent's bootstrap ring.
inline constexpr int kSplitRingAllgathers = 1;
// Record sizes: NCCL's unique id (NCCL_UNIQUE_ID_BYTES), the bootstrap address record, peer info,
// topology/graph info. Assumed sizes of NCCL's structs.
inline constexpr int kUniqueIdBytes = 128;
inline constexpr int kBootstrapAddressBytes = 256;
inline constexpr int kPeerInfoBytes = 128;
inline constexpr int kGraphInfoBytes = 4096;
// One connection's transport setup: across nodes an InfiniBand RC queue pair (create, exchange, move
// to RTR/RTS) and its buffers' registration; inside a node CUDA IPC handles. Assumed.
inline constexpr double kNetworkConnectionSetup_s = 1e-3;
inline constexpr double kIntraNodeConnectionSetup_s = 100e-6;
// Connections a rank sets up per channel: a ring has a send and a receive peer; a tree (across
// nodes) a parent and up to two children, each in both directions.
inline constexpr int kRingConnectionsPerChannel = 2;
inline constexpr int kTreeConnectionsPerChannel = 6;
// Largest platform simulated: beyond it the ring is simulated on this many GPUs of the same cluster
// and scaled by (N - 1) / (n - 1) steps (a ring step's time does not depend on N once the ring
// crosses spines).
inline constexpr int kMaxSimulatedStartupGpus = 1024;

enum class StoreBackend { kLegacy, kLibuv };
std::string_view name(StoreBackend store);
StoreBackend parse_store_backend(std::string_view text);  // "legacy" | "libuv"

// The levers, as PyTorch and NCCL name them; the defaults are today's (PyTorch 2.6+, NCCL 2.23+).
struct StartupLevers {
  StoreBackend store = StoreBackend::kLibuv;  // TCPStore(use_libuv=...)
  bool eager_init = false;  // init_process_group(device_id=...): world at init, subgroups split from it
  int ranks_per_root = kDefaultRanksPerRoot;  // TORCH_NCCL_RANKS_PER_ROOT; 0: one root per communicator
  bool runtime_connect = true;                // NCCL_RUNTIME_CONNECT: connections at first use
  bool oob_net = false;                       // NCCL_OOB_NET_ENABLE: bootstrap all-gathers over the fabric
  bool init_barriers = false;                 // TORCH_DIST_INIT_BARRIER: a world barrier after every new_group
  bool topo_cache = true;                     // NCCL >= 2.22: later communicators reuse the process's topology queries
  bool operator==(const StartupLevers&) const = default;
};

// One parallel dimension: gpus / size groups of `size` ranks, each its own communicator.
struct StartupGroup {
  std::string name;  // "tp", "dp", ...
  int size = 0;
  int stride = 1;  // rank distance between a group's members (tp innermost: 1); with size, whether it spans nodes
};

// The process groups of a training layout on `gpus` GPUs: tp, cp, pp, ep and dp (what is left),
// those of more than one rank and fewer than all.
std::vector<StartupGroup> layout_groups(const models::ParallelLayout& layout, int gpus);
// Throws Error(kInvalidArgument) when a group does not fit `gpus` GPUs (its size does not divide
// them, or size x stride is more): "start-up: a tp group of 3 ranks (stride 1) does not fit 64 GPUs".
void check_groups(const std::vector<StartupGroup>& groups, int gpus);

struct StartupJob {
  int gpus = 0;
  std::vector<StartupGroup> groups;  // besides the world
  StartupLevers levers;
};

struct StartupPhase {
  std::string name;  // launch, store, communicators, group barriers, first collectives
  double seconds = 0;
  std::string detail;  // what it is made of, for the report
};

struct StartupResult {
  int gpus = 0;
  int simulated_gpus = 0;  // the platform the bootstrap ring ran on (<= gpus)
  int ring_channels = 0;   // NCCL's channels (models/cost_model.h) the connections are per
  int tree_channels = 0;
  int communicators = 0;             // per rank: the world and one per group
  int64_t store_requests = 0;        // served by the store's one server, all ranks together
  double bootstrap_message_s = 0;    // one bootstrap message between ring neighbours (simulated + software)
  double nccl_init_s = 0;            // NCCL's own init of every communicator of a rank (part of "communicators")
  std::vector<StartupPhase> phases;  // in order; their sum is total_s
  double total_s = 0;
  double phase_s(std::string_view name) const;  // 0 when absent
};

// The start-up of `job` on `cluster` (its nodes ignored: the job's nodes are ceil(gpus / gpus_per_node),
// and gpus must fill them unless it is under one node). The bootstrap ring runs in a child process
// (sim/isolated.h), so this may be called any number of times. Throws Error(kInvalidArgument)
// for gpus < 1, a partial node, more nodes than the limit, or a group that does not divide gpus.
StartupResult simulate_startup(const models::ClusterSpec& cluster, const StartupJob& job);
// The world communicator alone, with today's defaults.
StartupResult simulate_startup(const models::ClusterSpec& cluster, int gpus);

// results.json / the plan's child-process form, and back.
nlohmann::json startup_to_json(const StartupResult& result);
StartupResult startup_from_json(const nlohmann::json& j);

}  // namespace tandem::sim
