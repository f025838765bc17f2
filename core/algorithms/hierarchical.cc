// Hierarchical 2-D algorithms, composed from 1-D rings over rank strides. With m ranks per node
// and N nodes, rank r = node * m + local. Inside a node the ring runs over ranks at stride 1 (the
// NVLink domain, lane 0); between nodes over ranks at stride m that share a local index (one rail
// each, lane 1).
//
// all_reduce, chunks_per_block = m * N * C, segment l of the intra-node ring = chunks
// [l*N*C, (l+1)*N*C):
//   1. intra-node reduce-scatter: local rank l ends with its node's sum of segment l;
//   2. inter-node all_reduce of segment l over the N ranks with local index l (a ring with C
//      channels, each chunk of the segment a ring segment);
//   3. intra-node all-gather of the segments.
// all_gather: inter-node ring all-gather among equal local indices (rank node*m+l collects block
// n'*m+l of every node n'), then per node block set an intra-node ring all-gather.
#include <vector>

#include "core/algorithms/internal.h"
#include "core/algorithms/ring_primitives.h"
#include "core/error.h"

namespace tandem::algorithms {

Schedule build_hierarchical(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params) {
  const int n = spec.nranks;
  const int m = layout.ranks_per_node;
  if (params.inter_node != Algorithm::kRing) {
    fail(ErrorCode::kUnsupported, "hierarchical composes rings between nodes; inter-node '{}' is not implemented",
         name(params.inter_node));
  }
  const int nodes = n / m;
  const auto um = static_cast<uint32_t>(m);
  const auto un = static_cast<uint32_t>(nodes);
  const auto C = static_cast<uint32_t>(params.channels);
  constexpr int kIntraLane = 0;
  constexpr int kInterLane = 1;

  auto node_members = [&](int node) {
    std::vector<int> members(static_cast<size_t>(m));
    for (int l = 0; l < m; ++l) members[static_cast<size_t>(l)] = node * m + l;
    return members;
  };
  auto rail_members = [&](int local) {
    std::vector<int> members(static_cast<size_t>(nodes));
    for (int v = 0; v < nodes; ++v) members[static_cast<size_t>(v)] = v * m + local;
    return members;
  };

  switch (spec.collective) {
    case Collective::kAllReduce: {
      const uint32_t width = un * C;  // chunks per intra-node segment
      ScheduleBuilder b(spec.collective, Algorithm::kHierarchical, n, spec.root, um * width, params);
      auto segment = [&](BufferKind buffer) { return [=](uint32_t l) { return SlotRange{buffer, l * width, width}; }; };
      for (int v = 0; v < nodes; ++v) {
        ring_reduce_scatter(b, kIntraLane, node_members(v), segment(kIn), segment(kOut), segment(kOut));
      }
      for (int l = 0; l < m; ++l) {
        const std::vector<int> rail = rail_members(l);
        for (uint32_t c = 0; c < C; ++c) {
          // Channel c of the rail ring works on chunks l*width + c*N + j, j = 0..N-1.
          const uint32_t base = static_cast<uint32_t>(l) * width + c * un;
          auto out = [=](uint32_t j) { return slots(kOut, base + j); };
          ring_reduce_scatter(b, kInterLane, rail, out, out, out);
          ring_all_gather(b, kInterLane, rail, out);
        }
      }
      for (int v = 0; v < nodes; ++v) ring_all_gather(b, kIntraLane, node_members(v), segment(kOut));
      return std::move(b).finish();
    }
    case Collective::kAllGather: {
      ScheduleBuilder b(spec.collective, Algorithm::kHierarchical, n, spec.root, C, params);
      auto block = [&](int rank) { return SlotRange{kOut, static_cast<uint32_t>(rank) * C, C}; };
      for (int r = 0; r < n; ++r) b.copy(r, kInterLane, SlotRange{kIn, 0, C}, block(r));
      for (int l = 0; l < m; ++l) {
        const std::vector<int> rail = rail_members(l);
        ring_all_gather(
            b, kInterLane, rail, [&](uint32_t j) { return block(rail[j]); },
            [&](uint32_t) {
              return SlotRange{kIn, 0, C};
            });
      }
      for (int v = 0; v < nodes; ++v) {
        const std::vector<int> members = node_members(v);
        for (int src_node = 0; src_node < nodes; ++src_node) {
          // Member l holds block src_node*m + l; gather that node's blocks inside node v.
          ring_all_gather(b, kIntraLane, members,
                          [&](uint32_t l) { return block(src_node * m + static_cast<int>(l)); });
        }
      }
      return std::move(b).finish();
    }
    default:
      break;
  }
  fail(ErrorCode::kUnsupported, "hierarchical does not implement {}", name(spec.collective));
}

}  // namespace tandem::algorithms
