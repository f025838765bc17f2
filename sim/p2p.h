// NCCL's point-to-point plan (all_to_all, send_recv): how NCCL 2.28 spreads each peer's transfer
// over its p2p channels, one CTA each, and how fast the simulator takes a channel to move bytes.
// NCCL runs all_to_all as grouped sends and receives, not as a collective algorithm: this is the
// structure Simulator::run_p2p times (docs/simulator.md, "What NCCL builds and what tandem models").
//
//   p2p channels      comm->p2pnChannels: the communicator's channels rounded up to a power of two
//                     (graph/paths.cc ncclTopoComputeP2pChannels)
//   channels a peer   at most p2pnChannelsPerPeer (NVLink peers: 2 per NVLink; network peers: 2,
//                     halved while 2 x ranks > 4 x p2p channels; the least over all peers), starting
//                     from nChannelsMin (halved while it times the ranks exceeds the p2p channels)
//                     and doubled while a part exceeds the largest part (enqueue.cc addP2pToPlan)
//   rounds            ncclP2pSchedule (init.cc): round = group delta x group size + local delta,
//                     group deltas in quadratic order; a round's parts go to channels
//                     (base + part) mod p2p channels, base = bit-reversed round (one node) or group
//                     delta (several nodes) (include/channel.h ncclP2pChannelBaseForRound); a channel
//                     runs up to 8 works of one 8-round epoch at once, its epochs one after the other
//   PXN               across nodes the sender hands its data over NVLink to the GPU of its node on
//                     the receiver's rail, whose NIC sends it (graph/search.cc ncclTopoGetNetDev,
//                     NCCL_P2P_PXN_LEVEL=2); the receiver uses its own NIC
#pragma once

#include <cstdint>
#include <vector>

#include "models/cluster.h"

namespace tandem::sim {

// A channel's copy rate on one node: nccl-tests #268 (two H100 joined by NVLink, NCCL's
// sendrecv_perf at 4 GB plateaus at ~180 GB/s each way), where NCCL gives the one peer all 32 p2p
// channels (32 = pow2Up of the 24 channels of an H100 node; 16 MiB largest part): 180 / 32 GB/s
// a channel. DeepEP's intranode kernels reach about the same per SM (~153 GB/s of NVLink with 24
// SMs on H800). Measured on Hopper; used for every GPU (docs/simulator.md).
inline constexpr double kP2pNvlinkChannelBps = 180e9 / 32;

// Simple's step size for p2p (init.cc: NCCL_P2P_NET_CHUNKSIZE across nodes, NCCL_P2P_NVL_CHUNKSIZE
// on an all-NVLink node, NCCL_P2P_PCI_CHUNKSIZE otherwise) and LL's (its 512 KiB buffer over
// NCCL_STEPS = 8); sizes up to kP2pLlThresholdBytes a channel go LL (NCCL_P2P_LL_THRESHOLD).
inline constexpr int64_t kP2pNetChunkBytes = 128 << 10;
inline constexpr int64_t kP2pNvlChunkBytes = 512 << 10;
inline constexpr int64_t kP2pPciChunkBytes = 128 << 10;
inline constexpr int64_t kP2pLlStepBytes = (512 << 10) / 8;
inline constexpr int64_t kP2pLlThresholdBytes = 16384;
inline constexpr int kP2pWorksPerBatch = 8;  // NCCL_MAX_DEV_WORK_P2P_PER_BATCH
inline constexpr int kP2pMaxChannels = 64;   // MAXCHANNELS

struct P2pPlan {
  int nranks = 1;
  int nodes = 1;
  int per_node = 1;                        // ranks on each node
  int channels = 1;                        // comm->p2pnChannels
  int channels_per_peer = 1;               // comm->p2pnChannelsPerPeer (nChannelsMax)
  int min_channels = 1;                    // nChannelsMin of scheduleP2pTasksToPlan
  int group_size = 1;                      // comm->p2pSchedGroupSize
  int64_t step_bytes = kP2pNvlChunkBytes;  // Simple's p2pChunkSize
  // What one channel (one CTA) moves a second. One node: kP2pNvlinkChannelBps. Across nodes: the
  // speed NCCL's own topology search gives a ring channel across nodes (graph bwInter x search
  // channels / runtime channels: 48 x 8 / 16 = 24 GB/s on 8 x 400G H100 nodes), each channel there
  // carrying up to 8 peers' works at once (docs/simulator.md says why the two differ).
  double channel_Bps = kP2pNvlinkChannelBps;
  bool pxn = true;  // across nodes, send through the GPU on the receiver's rail

  // Whether NCCL sends a peer transfer of `bytes` with LL (up to the threshold x channels a peer),
  // else Simple.
  bool uses_ll(int64_t bytes) const;
  // Channels a peer transfer of `bytes` runs on (addP2pToPlan's nChannels; 1 for 0 bytes).
  int peer_channels(int64_t bytes) const;
  // The first channel of round `round` (ncclP2pChannelBaseForRound).
  int channel_base(int round) const;
  // The group deltas of ncclP2pSchedule in round order (one per group of group_size rounds).
  std::vector<int> group_deltas() const;
  // The peer rank `rank` sends to in round `round` (node-major ranks), given group_deltas().
  int send_peer(int rank, int round, const std::vector<int>& deltas) const;
};

// The plan NCCL 2.28 makes for every GPU of `cluster` (cluster.nodes x cluster.gpus_per_node
// ranks, as the tuner narrows it to the GPUs taking part), from the cost model's picture of NCCL's
// topology search.
P2pPlan nccl_p2p_plan(const models::ClusterSpec& cluster);

}  // namespace tandem::sim
