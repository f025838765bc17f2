// NCCL 2.28's own performance model (src/graph/tuning.cc ncclTopoTuneModel and ncclTopoGetAlgoTime,
// src/enqueue.cc updateCollCostTable / topoGetAlgoInfo at nccl@v2.28.9-1), as a second predictor
// next to the simulator: for a collective of `bytes`, every (algorithm, protocol) NCCL would
// consider on a ClusterSpec, its predicted time, and the argmin NCCL's tuner picks.
//
//   time_us = latency_us + bytes / (1000 * algbw_GBps)     (one operation, numPipeOps = 1)
//
// The constants (baseLat, hwLat, llMaxBws, perChMax*, treeCorrectionFactor, nvlsEfficiency, net
// overhead) are NCCL's, in named tables in cost_model.cc. What NCCL measures at init (its topology
// search: channels and bandwidth per channel for each algorithm's graph) is derived from the
// ClusterSpec by a small model of that search; docs/cost-model.md states the assumptions.
//
// `bytes` is NCCL's nBytes, i.e. nccl-tests' size column: the per-rank buffer for all_reduce,
// broadcast and reduce, the total (count x nranks x element size) for all_gather and
// reduce_scatter. all_to_all and send_recv are point-to-point in NCCL and outside this model.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/types.h"
#include "models/cluster.h"
#include "models/nccl_protocol.h"

namespace tandem::models {

// NCCL's algorithm ids (nccl_tuner.h): Tree=0, Ring=1, CollNetDirect=2, CollNetChain=3, NVLS=4,
// NVLSTree=5, PAT=6.
enum class NcclAlgorithm : uint8_t { kTree, kRing, kCollNetDirect, kCollNetChain, kNvls, kNvlsTree, kPat };
inline constexpr int kNcclAlgorithmCount = 7;

std::span<const NcclAlgorithm> all_nccl_algorithms();
std::string_view name(NcclAlgorithm algorithm);  // "tree", "ring", "collnet_direct", ..., "nvls_tree", "pat"

// NCCL's latency tables, for models that time hops themselves (the simulator): hwLat, the latency
// of one step of `algorithm` over a link class, and baseLat, the fixed cost of one collective (µs).
enum class NcclLinkClass : uint8_t { kNvLink, kPci, kNet };
double nccl_hop_latency_us(NcclLinkClass link, NcclAlgorithm algorithm, NcclProtocol protocol);
double nccl_base_latency_us(NcclAlgorithm algorithm, NcclProtocol protocol);

// One algorithm's graph as NCCL's topology search would find it on this cluster.
struct NcclGraph {
  int channels = 0;          // 0: no graph, the algorithm is unavailable
  double bw_intra_GBps = 0;  // per channel, inside a node
  double bw_inter_GBps = 0;  // per channel, across nodes
};

struct NcclPrediction {
  NcclAlgorithm algorithm = NcclAlgorithm::kRing;
  NcclProtocol protocol = NcclProtocol::kSimple;
  double time_us = 0;
};

class NcclCostModel {
 public:
  // Runs the model of NCCL's topology search and tuning once (validate(spec) first; throws
  // Error(kInvalidArgument) for a bad spec). One rank per GPU: nranks = nodes x gpus_per_node.
  explicit NcclCostModel(const ClusterSpec& spec);

  int nranks() const { return nranks_; }
  int nodes() const { return nodes_; }
  const NcclGraph& graph(NcclAlgorithm algorithm) const { return graphs_[static_cast<int>(algorithm)]; }
  // comm->nChannels after NCCL doubles the search channels (it matters for the ring plateau rule).
  int comm_channels() const { return comm_channels_; }

  // Why NCCL would not consider this combination ("NVLS Tree needs more than one node", ...);
  // empty when it would.
  std::string unsupported_reason(Collective collective, NcclAlgorithm algorithm, NcclProtocol protocol) const;

  // NCCL's tables: latency (µs) and algorithm bandwidth (GB/s) before the size-dependent corrections.
  // Zero bandwidth where the combination is unsupported.
  double latency_us(Collective collective, NcclAlgorithm algorithm, NcclProtocol protocol) const;
  double bandwidth_GBps(Collective collective, NcclAlgorithm algorithm, NcclProtocol protocol) const;

  // ncclTopoGetAlgoTime for one operation; nullopt where NCCL would skip the combination.
  std::optional<double> time_us(Collective collective, uint64_t bytes, NcclAlgorithm algorithm,
                                NcclProtocol protocol) const;

  // The channels a collective of `bytes` runs on once NCCL has picked (algorithm, protocol)
  // (enqueue.cc topoGetAlgoInfo): comm->nChannels for ring and tree (NVLS_NCHANNELS for the NVLS
  // algorithms, the graph's channels for CollNet and PAT), then, for ring and tree, one channel
  // fewer while bytes < channels x threads x threadThreshold (ring LL: 8 x nranks bytes per thread,
  // LL128 8, Simple 64; 512 threads, 640 with LL128), so small messages use few channels.
  int runtime_channels(NcclAlgorithm algorithm, NcclProtocol protocol, uint64_t bytes) const;

  // What NCCL's tuner picks: the first minimum over algorithms, then protocols, in id order.
  // nullopt for collectives outside the model (all_to_all, send_recv).
  std::optional<NcclPrediction> select(Collective collective, uint64_t bytes) const;

 private:
  int nranks_ = 1;
  int nodes_ = 1;
  int comm_channels_ = 0;
  GpuArch arch_ = GpuArch::kHopper;
  bool nvlink_ = false;  // GPUs of a node joined by NVLink (NCCL: typeIntra == LINK_NVL)
  bool nvls_support_ = false;
  bool collnet_support_ = false;
  bool pat_support_ = false;
  NcclGraph graphs_[kNcclAlgorithmCount];
  // [NCCL function: broadcast, reduce, all_gather, reduce_scatter, all_reduce][algorithm][protocol]
  double latency_us_[5][kNcclAlgorithmCount][kNcclProtocolCount] = {};
  double bandwidth_GBps_[5][kNcclAlgorithmCount][kNcclProtocolCount] = {};
};

// One-shot conveniences over NcclCostModel(spec).
std::optional<double> nccl_time_us(const ClusterSpec& spec, Collective collective, uint64_t bytes,
                                   NcclAlgorithm algorithm, NcclProtocol protocol);
std::optional<NcclPrediction> nccl_select(const ClusterSpec& spec, Collective collective, uint64_t bytes);

}  // namespace tandem::models
