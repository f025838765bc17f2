// The start-up of a job's communicator, simulated: how long NCCL's initialisation takes on a
// cluster of a given size, which is part of what every job restart costs (models/reliability.h).
//
//   bootstrap               the unique id's broadcast (a binomial tree over the launcher), every
//                           rank's check-in with the bootstrap root (one after the other at the
//                           root), then the bootstrap ring's all-gather of every rank's listening
//                           addresses: N - 1 steps over TCP sockets
//   peer-info all-gathers   initialisation's two ring all-gathers over the bootstrap ring: every
//                           rank's peer info (host, device, bus id), then its topology/graph info
//   connection setup        each rank's connections to its ring and tree neighbours, per channel:
//                           the connect-info exchange with the peer, then the transport's setup
//                           (InfiniBand queue pairs across nodes, CUDA IPC handles inside a node)
//
// The network part of the ring all-gathers is simulated on the cluster's SimGrid platform (the
// N - 1 steps of a core ring schedule, the ideal alpha-beta network model); per-message software costs
// are added as the named constants below. They are assumptions, order-of-magnitude figures, not
// measurements (docs/reliability.md). Local work that does not grow with the cluster (topology
// detection, the graph search, buffer allocation) is left out.
#pragma once

#include "models/cluster.h"

namespace tandem::sim {

// Software cost of one bootstrap message on the critical path: a send and a receive on TCP
// sockets (system calls, a wake-up, NCCL's framing). Assumed.
inline constexpr double kBootstrapMessageSoftware_s = 20e-6;
// The bootstrap root's work per rank: accept its connection and read its address, later connect
// to it and send it its ring successor's address, one rank after the other. Assumed.
inline constexpr double kBootstrapRootPerRank_s = 30e-6;
// Bytes per rank: NCCL's unique id (NCCL_UNIQUE_ID_BYTES), the bootstrap ring's address record,
// the peer info and the topology/graph info each rank contributes. Assumed sizes of NCCL's structs.
inline constexpr int kUniqueIdBytes = 128;
inline constexpr int kBootstrapAddressBytes = 256;
inline constexpr int kPeerInfoBytes = 128;
inline constexpr int kGraphInfoBytes = 4096;
// One connection's transport setup: across nodes an InfiniBand RC queue pair (create, exchange,
// move to RTR/RTS) and the registration of its buffers; inside a node CUDA IPC handles of the
// peer's buffers. Assumed.
inline constexpr double kNetworkConnectionSetup_s = 1e-3;
inline constexpr double kIntraNodeConnectionSetup_s = 100e-6;
// Connections a rank sets up per channel: a ring has a send and a receive peer; a tree (across
// nodes) a parent and up to two children, each in both directions.
inline constexpr int kRingConnectionsPerChannel = 2;
inline constexpr int kTreeConnectionsPerChannel = 6;
// Largest platform simulated: beyond it the ring all-gathers are simulated on this many GPUs of
// the same cluster and scaled by (N - 1) / (n - 1) steps (a ring step's time does not depend on N
// once the ring crosses spines), which keeps a 16,384-GPU estimate at a second.
inline constexpr int kMaxSimulatedStartupGpus = 1024;

struct StartupResult {
  int gpus = 0;
  int simulated_gpus = 0;  // the platform the ring all-gathers ran on (<= gpus)
  int ring_channels = 0;   // NCCL's channels (models/cost_model.h) the connections are per
  int tree_channels = 0;
  double bootstrap_message_s = 0;    // one bootstrap message between ring neighbours (simulated + software)
  double bootstrap_s = 0;            // unique id broadcast + root check-in + address all-gather
  double peer_info_allgather_s = 0;  // peer info + topology/graph info all-gathers
  double connection_setup_s = 0;     // ring and tree connections of one rank, one after the other
  double total_s = 0;                // the sum of the three
};

// Simulates the start-up of a communicator over `gpus` GPUs of `cluster` (its nodes ignored: the
// job's nodes are ceil(gpus / gpus_per_node), and gpus must fill them unless it is under one
// node). Runs in a child process (sim::run_isolated), so it may be called any number of times.
// Throws Error(kInvalidArgument) for gpus < 1, a partial node, or more nodes than the limit.
StartupResult simulate_startup(const models::ClusterSpec& cluster, int gpus);

}  // namespace tandem::sim
