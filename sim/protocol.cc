#include "sim/protocol.h"

namespace tandem::sim {
namespace {

// NCCL 2.28 tuning constants (src/graph/tuning.cc; docs/nccl-notes.md §1.3), microseconds,
// indexed [LL, LL128, Simple]. Tree's for the tree, Ring's for every other schedule (each hop of
// a ring, doubling or direct step is one point-to-point step like a ring's).
constexpr double kRingBaseLatencyUs[] = {6.6, 14.0, 8.4};
constexpr double kTreeBaseLatencyUs[] = {6.8, 14.0, 8.4};
constexpr double kRingNvlinkHopUs[] = {0.6, 1.9, 3.4};
constexpr double kTreeNvlinkHopUs[] = {0.6, 1.25, 4.0};
constexpr double kRingNetHopUs[] = {2.7, 4.0, 14.0};
constexpr double kTreeNetHopUs[] = {5.0, 8.5, 14.0};
constexpr double kNvlsNvlinkUs = 25.0;  // NVLS, Simple only, base latency 0

size_t index(Protocol protocol) { return static_cast<size_t>(protocol); }

}  // namespace

double protocol_wire_factor(Protocol protocol) {
  switch (protocol) {
    case Protocol::kLL: return 2.0;              // ncclLLFifoLine: 4 B data + 4 B flag per 8 B
    case Protocol::kLL128: return 128.0 / 120.0;  // 120 B of data per 128 B line
    case Protocol::kSimple: return 1.0;
  }
  return 1.0;
}

double protocol_hop_latency_s(Protocol protocol, Algorithm algorithm, bool network_hop) {
  const bool tree = algorithm == Algorithm::kTree;
  const double* table = network_hop ? (tree ? kTreeNetHopUs : kRingNetHopUs) : (tree ? kTreeNvlinkHopUs : kRingNvlinkHopUs);
  return table[index(protocol)] * 1e-6;
}

double protocol_base_latency_s(Protocol protocol, Algorithm algorithm) {
  return (algorithm == Algorithm::kTree ? kTreeBaseLatencyUs : kRingBaseLatencyUs)[index(protocol)] * 1e-6;
}

double nvls_latency_s() { return kNvlsNvlinkUs * 1e-6; }

}  // namespace tandem::sim
