#include "sim/tuner.h"

#include <algorithm>

#include "core/algorithms.h"
#include "core/error.h"

namespace tandem::sim {
namespace {

// Pipelining of chains and trees. Trees follow NCCL (enqueue.cc, computeColl for NCCL_ALGO_TREE):
// each channel's share is cut into chunks of 512 KiB, halved down to 128 KiB while a channel would
// get fewer than depth x 8 of them, so the pipeline's fill (depth hops) stays a small part of the
// time; depth = ranks per node - 1 + log2(nodes). Recursive doubling pipelines whole-message
// pieces of 512 KiB. Capped to keep simulations short (the tree replay costs ops x tiles).
constexpr int64_t kTreeChunkBytes = 512 << 10;
constexpr int64_t kTreeMinChunkBytes = 128 << 10;
constexpr int64_t kTreeChunksPerDepth = 8;
constexpr int64_t kPipelineChunkBytes = 512 << 10;
constexpr uint32_t kMaxTiles = 64;
constexpr uint32_t kMaxTreeTiles = 256;

// The cluster as NCCL sees it when only `gpus_per_node` GPUs of each node take part: each keeps
// its own NIC (rail), so the NICs in use shrink with the GPUs.
models::ClusterSpec participating(models::ClusterSpec cluster, int nodes, int gpus_per_node) {
  cluster.nics_per_node = std::max(1, cluster.nics_per_node * gpus_per_node / cluster.gpus_per_node);
  cluster.nodes = nodes;
  cluster.gpus_per_node = gpus_per_node;
  return cluster;
}

uint32_t tiles_for(SimAlgorithm algorithm, int64_t bytes, int channels, int nodes, int gpus_per_node) {
  if (algorithm == Algorithm::kTree) {
    int64_t depth = gpus_per_node - 1;
    for (int span = 1; span < nodes; span *= 2) ++depth;
    const int64_t per_channel = bytes / std::max(1, channels);
    int64_t chunk = kTreeChunkBytes;
    while (per_channel / chunk < depth * kTreeChunksPerDepth && chunk > kTreeMinChunkBytes) chunk /= 2;
    return static_cast<uint32_t>(std::clamp<int64_t>((per_channel + chunk - 1) / chunk, 1, kMaxTreeTiles));
  }
  if (algorithm != Algorithm::kRecursiveDoubling) return 1;
  return static_cast<uint32_t>(std::clamp<int64_t>(bytes / kPipelineChunkBytes, 1, kMaxTiles));
}

// The channels the simulated schedule runs: NCCL's for the algorithms whose schedules have them;
// tandem's PAT is one lane (core/algorithms/pat.cc), whatever NCCL would spread it over.
int schedule_channels(const models::NcclCostModel& model, models::NcclAlgorithm algorithm,
                      models::NcclProtocol protocol, int64_t bytes) {
  if (algorithm == models::NcclAlgorithm::kPat) return 1;
  return model.runtime_channels(algorithm, protocol, static_cast<uint64_t>(bytes));
}

}  // namespace

Tuner::Tuner(const models::ClusterSpec& cluster, int nodes, int gpus_per_node)
    : model_(participating(cluster, nodes, gpus_per_node)),
      p2p_plan_(nccl_p2p_plan(participating(cluster, nodes, gpus_per_node))),
      nodes_(nodes),
      gpus_per_node_(gpus_per_node) {}

// NCCL's point-to-point transfers: the protocol and channels of one peer's share (all_to_all
// sends bytes / ranks to each rank; send_recv all of it to one).
Choice Tuner::choose_p2p(Collective collective, int64_t bytes) const {
  const int64_t peer_bytes = collective == Collective::kAllToAll ? bytes / std::max(1, p2p_plan_.nranks) : bytes;
  return {SimAlgorithm::Model::kP2p, p2p_plan_.uses_ll(peer_bytes) ? models::NcclProtocol::kLL : models::NcclProtocol::kSimple, 1,
          p2p_plan_.peer_channels(peer_bytes)};
}

Choice Tuner::choose(Collective collective, int64_t bytes) const {
  if (collective == Collective::kAllToAll || collective == Collective::kSendRecv) return choose_p2p(collective, bytes);
  // NCCL's tuner over the algorithms tandem simulates: ring, tree, NVLS inside one node, NVLS Tree
  // across nodes, PAT for all_gather / reduce_scatter with one GPU per node (the cost model gives
  // PAT a time only there, as ncclPatEnable does), CollNet Direct and Chain where the cluster
  // reduces in the network (the cost model offers them only with `sharp` on 2 nodes or more, as
  // NCCL's collNetSupport and COLLNET_NODE_THRESHOLD do).
  std::optional<models::NcclPrediction> best;
  for (models::NcclAlgorithm a :
       {models::NcclAlgorithm::kTree, models::NcclAlgorithm::kRing, models::NcclAlgorithm::kCollNetDirect,
        models::NcclAlgorithm::kCollNetChain, models::NcclAlgorithm::kNvls, models::NcclAlgorithm::kNvlsTree,
        models::NcclAlgorithm::kPat}) {
    // NVLS across nodes is NCCL's CollNet + NVLS (SHARP between the nodes' NVSwitches), which
    // tandem does not simulate: NVLS stays inside one node.
    if (a == models::NcclAlgorithm::kNvls && nodes_ > 1) continue;
    for (models::NcclProtocol p : models::all_nccl_protocols()) {
      const std::optional<double> t = model_.time_us(collective, static_cast<uint64_t>(bytes), a, p);
      if (t && (!best || *t < best->time_us)) best = models::NcclPrediction{a, p, *t};
    }
  }
  if (!best) return {Algorithm::kRing, models::NcclProtocol::kSimple, 1, 1};
  const SimAlgorithm algorithm = sim_algorithm(best->algorithm);
  const int channels = schedule_channels(model_, best->algorithm, best->protocol, bytes);
  return {algorithm, best->protocol, tiles_for(algorithm, bytes, channels, nodes_, gpus_per_node_), channels};
}

Choice Tuner::choose_for(Collective collective, int64_t bytes, SimAlgorithm algorithm,
                         std::optional<models::NcclProtocol> protocol) const {
  if (algorithm == SimAlgorithm::Model::kP2p) {
    if (!applies(algorithm, collective)) {
      fail(ErrorCode::kUnsupported, "p2p runs all_to_all and send_recv (NCCL's point-to-point), not {}",
           name(collective));
    }
    return choose_p2p(collective, bytes);
  }
  const bool collnet =
      algorithm == SimAlgorithm::Model::kCollNetDirect || algorithm == SimAlgorithm::Model::kCollNetChain;
  if (collnet) {
    if (!applies(algorithm, collective)) {
      fail(ErrorCode::kUnsupported, "{} models all_reduce only, not {}", name(algorithm), name(collective));
    }
    const std::string why =
        model_.unsupported_reason(collective, nccl_algorithm(algorithm), models::NcclProtocol::kSimple);
    if (!why.empty()) {
      fail(ErrorCode::kUnsupported, "{}: {}; it needs a cluster with --sharp and 2 nodes or more", name(algorithm),
           why);
    }
  }
  if (!algorithm.is_model() && !implements(algorithm.schedule, collective)) {
    fail(ErrorCode::kUnsupported, "{}", unsupported_message(algorithm.schedule, collective));
  }
  const models::NcclAlgorithm nccl = nccl_algorithm(algorithm);
  // The protocol NCCL would use with this algorithm forced (or the one asked for).
  std::optional<models::NcclProtocol> chosen = protocol;
  if (!chosen) {
    std::optional<double> best;
    for (models::NcclProtocol p : models::all_nccl_protocols()) {
      const std::optional<double> t = model_.time_us(collective, static_cast<uint64_t>(bytes), nccl, p);
      if (t && (!best || *t < *best)) {
        best = t;
        chosen = p;
      }
    }
  }
  const models::NcclProtocol p = chosen.value_or(models::NcclProtocol::kSimple);
  const int channels = nccl_has(algorithm) ? model_.runtime_channels(nccl, p, static_cast<uint64_t>(bytes)) : 1;
  return {algorithm, p, tiles_for(algorithm, bytes, channels, nodes_, gpus_per_node_), channels};
}

std::optional<SimResult> run_simulator_model(Simulator& simulator, const Tuner& tuner, const Choice& choice,
                                             Collective collective, int64_t bytes,
                                             const std::vector<std::vector<int>>& instances, int per_node) {
  using Model = SimAlgorithm::Model;
  const SimAlgorithm a = choice.algorithm;
  if (a == Model::kP2p) return simulator.run_p2p({collective, bytes, instances, tuner.p2p_plan()});
  if (!a.is_model()) return std::nullopt;
  if (collective != Collective::kAllReduce) {
    fail(ErrorCode::kUnsupported, "{} models all_reduce only, not {}", name(a), name(collective));
  }
  const std::vector<int>& gpus = instances.front();
  if (a == Model::kNvls) return simulator.run_nvls_all_reduce(bytes, gpus);
  if (a == Model::kNvlsTree) return simulator.run_nvls_tree_all_reduce(bytes, gpus, per_node);
  return simulator.run_collnet_all_reduce(bytes, gpus, per_node, a == Model::kCollNetChain);
}

}  // namespace tandem::sim
