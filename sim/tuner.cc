#include "sim/tuner.h"

#include <algorithm>

#include "core/algorithms.h"
#include "core/error.h"

namespace tandem::sim {
namespace {

// Pipelining of chains and trees: NCCL moves a tree's data in chunks of about this size, so a big
// message becomes a pipeline whose fill is a small part of the time; capped to keep simulations short.
constexpr int64_t kPipelineChunkBytes = 512 << 10;
constexpr uint32_t kMaxTiles = 64;

Protocol to_protocol(models::NcclProtocol p) {
  switch (p) {
    case models::NcclProtocol::kLL: return Protocol::kLL;
    case models::NcclProtocol::kLL128: return Protocol::kLL128;
    case models::NcclProtocol::kSimple: return Protocol::kSimple;
  }
  return Protocol::kSimple;
}

// The cluster as NCCL sees it when only `gpus_per_node` GPUs of each node take part: each keeps
// its own NIC (rail), so the NICs in use shrink with the GPUs.
models::ClusterSpec participating(models::ClusterSpec cluster, int nodes, int gpus_per_node) {
  cluster.nics_per_node = std::max(1, cluster.nics_per_node * gpus_per_node / cluster.gpus_per_node);
  cluster.nodes = nodes;
  cluster.gpus_per_node = gpus_per_node;
  return cluster;
}

uint32_t tiles_for(const std::string& algorithm, int64_t bytes) {
  if (algorithm != "tree" && algorithm != "recursive_doubling") return 1;
  return static_cast<uint32_t>(std::clamp<int64_t>(bytes / kPipelineChunkBytes, 1, kMaxTiles));
}

}  // namespace

Tuner::Tuner(const models::ClusterSpec& cluster, int nodes, int gpus_per_node)
    : model_(participating(cluster, nodes, gpus_per_node)), nodes_(nodes) {}

Choice Tuner::choose(Collective collective, int64_t bytes) const {
  if (collective == Collective::kAllToAll || collective == Collective::kSendRecv) {
    return {"direct", Protocol::kSimple, 1};
  }
  // NCCL's tuner over the algorithms tandem simulates: nvls only inside one node (NVLS across
  // nodes needs NVLSTree / CollNet, which tandem does not model).
  std::optional<models::NcclPrediction> best;
  for (models::NcclAlgorithm a : {models::NcclAlgorithm::kTree, models::NcclAlgorithm::kRing, models::NcclAlgorithm::kNvls}) {
    if (a == models::NcclAlgorithm::kNvls && nodes_ > 1) continue;
    for (models::NcclProtocol p : models::all_nccl_protocols()) {
      const std::optional<double> t = model_.time_us(collective, static_cast<uint64_t>(bytes), a, p);
      if (t && (!best || *t < best->time_us)) best = models::NcclPrediction{a, p, *t};
    }
  }
  if (!best) return {"ring", Protocol::kSimple, 1};
  const std::string algorithm = best->algorithm == models::NcclAlgorithm::kTree   ? "tree"
                                : best->algorithm == models::NcclAlgorithm::kNvls ? "nvls"
                                                                                   : "ring";
  return {algorithm, to_protocol(best->protocol), tiles_for(algorithm, bytes)};
}

Choice Tuner::choose_for(Collective collective, int64_t bytes, const std::string& algorithm) const {
  if (algorithm == "nvls") return {algorithm, Protocol::kSimple, 1};  // NVLS is Simple-only
  const Algorithm core = parse_algorithm(algorithm);
  if (!supports(core, collective)) fail(ErrorCode::kUnsupported, "{}", unsupported_message(core, collective));
  // The protocol NCCL would use with this algorithm forced; algorithms NCCL does not have take the
  // ring's choice (their steps are point-to-point like a ring's).
  const models::NcclAlgorithm nccl = core == Algorithm::kTree ? models::NcclAlgorithm::kTree : models::NcclAlgorithm::kRing;
  Protocol protocol = Protocol::kSimple;
  std::optional<double> best;
  for (models::NcclProtocol p : models::all_nccl_protocols()) {
    const std::optional<double> t = model_.time_us(collective, static_cast<uint64_t>(bytes), nccl, p);
    if (t && (!best || *t < *best)) {
      best = t;
      protocol = to_protocol(p);
    }
  }
  return {algorithm, protocol, tiles_for(algorithm, bytes)};
}

}  // namespace tandem::sim
