#include "sim/protocol.h"

#include <algorithm>

#include "models/cost_model.h"

namespace tandem::sim {
namespace {

// Tree's latencies for the tree, PAT's for PAT (NCCL has them for Simple only, the one protocol it
// runs PAT with); Ring's for every other schedule (each hop of a ring, doubling or direct step is
// one point-to-point step like a ring's).
models::NcclAlgorithm nccl(Algorithm algorithm, models::NcclProtocol protocol) {
  if (algorithm == Algorithm::kTree) return models::NcclAlgorithm::kTree;
  if (algorithm == Algorithm::kPat && protocol == models::NcclProtocol::kSimple) return models::NcclAlgorithm::kPat;
  return models::NcclAlgorithm::kRing;
}

}  // namespace

double protocol_wire_factor(models::NcclProtocol protocol) {
  switch (protocol) {
    case models::NcclProtocol::kLL: return 2.0;               // ncclLLFifoLine: 4 B data + 4 B flag per 8 B
    case models::NcclProtocol::kLL128: return 128.0 / 120.0;  // 120 B of data per 128 B line
    case models::NcclProtocol::kSimple: return 1.0;
  }
  return 1.0;
}

double protocol_hop_latency_s(models::NcclProtocol protocol, Algorithm algorithm, bool network_hop) {
  const auto link = network_hop ? models::NcclLinkClass::kNet : models::NcclLinkClass::kNvLink;
  return models::nccl_hop_latency_us(link, nccl(algorithm, protocol), protocol) * 1e-6;
}

double protocol_base_latency_s(models::NcclProtocol protocol, Algorithm algorithm) {
  return models::nccl_base_latency_us(nccl(algorithm, protocol), protocol) * 1e-6;
}

double nvls_latency_s() {
  return models::nccl_hop_latency_us(models::NcclLinkClass::kNvLink, models::NcclAlgorithm::kNvls,
                                     models::NcclProtocol::kSimple) *
         1e-6;
}

// CollNet Direct's serialisation per local GPU (tuning.cc: "(ppn-1)*0.4").
constexpr double kCollNetDirectArityLatency_us = 0.4;

double collnet_latency_s(bool chain, int per_node, double nvlink_scale, double net_scale) {
  const auto algorithm = chain ? models::NcclAlgorithm::kCollNetChain : models::NcclAlgorithm::kCollNetDirect;
  const double intra =
      models::nccl_hop_latency_us(models::NcclLinkClass::kNvLink, algorithm, models::NcclProtocol::kSimple) *
      nvlink_scale;
  const double inter =
      models::nccl_hop_latency_us(models::NcclLinkClass::kNet, algorithm, models::NcclProtocol::kSimple) * net_scale;
  const double ppn = per_node;
  const double us = chain ? 2 * (ppn - 1) * intra + inter
                          : 2 * (std::min(1.0, ppn - 1) * intra + (ppn - 1) * kCollNetDirectArityLatency_us) + inter;
  return us * 1e-6;
}

double nvls_tree_network_hop_latency_s() {
  return models::nccl_hop_latency_us(models::NcclLinkClass::kNet, models::NcclAlgorithm::kNvlsTree,
                                     models::NcclProtocol::kSimple) *
         1e-6;
}

}  // namespace tandem::sim
