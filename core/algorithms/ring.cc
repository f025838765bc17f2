// Ring algorithms. With C channels, each channel is an independent ring on its own lane over its
// own share of every block: chunks_per_block = C * g for all_reduce (channel c owns chunks
// [c*g, (c+1)*g), one per member), C for reduce_scatter / all_gather (one chunk per block and
// channel), and C * pipeline_chunks for the broadcast / reduce chains.
#include <algorithm>
#include <numeric>
#include <vector>

#include "core/algorithms/internal.h"
#include "core/algorithms/ring_primitives.h"
#include "core/error.h"

namespace tandem::algorithms {
namespace {

// Channel c's ring order: the layout's order for that channel, or 0..n-1.
std::vector<int> ring_members(const RankLayout& layout, int nranks, int channel) {
  const std::vector<int>* ring = layout.ring(channel);
  if (ring == nullptr) {
    std::vector<int> order(static_cast<size_t>(nranks));
    std::iota(order.begin(), order.end(), 0);
    return order;
  }
  if (ring->size() != static_cast<size_t>(nranks)) {
    fail(ErrorCode::kInvalidArgument, "ring order of channel {} has {} ranks, expected {}", channel, ring->size(),
         nranks);
  }
  std::vector<bool> seen(static_cast<size_t>(nranks), false);
  for (int r : *ring) {
    if (r < 0 || r >= nranks || seen[static_cast<size_t>(r)]) {
      fail(ErrorCode::kInvalidArgument, "ring order of channel {} is not a permutation of 0..{} (rank {})", channel,
           nranks - 1, r);
    }
    seen[static_cast<size_t>(r)] = true;
  }
  return *ring;
}

// The members rotated so that `first` leads.
std::vector<int> rotated(std::vector<int> members, int first) {
  const auto it = std::find(members.begin(), members.end(), first);
  std::rotate(members.begin(), it, members.end());
  return members;
}

// Channel rings: rings[c] is channel c's member order.
using Rings = std::vector<std::vector<int>>;

Schedule build_all_reduce(const CollectiveSpec& spec, const Rings& rings, const AlgoParams& params,
                          ScheduleForm form) {
  const int n = spec.nranks;
  const auto g = static_cast<uint32_t>(n);
  const auto C = static_cast<uint32_t>(params.channels);
  if (form == ScheduleForm::kSymmetric && n > 1) {
    // Position 0's program; position p runs it with chunks rotated by p inside each channel's
    // window of g chunks, and the ring neighbours at offsets +1 and -1 (= g-1).
    ScheduleBuilder b = ScheduleBuilder::symmetric(spec.collective, Algorithm::kRing, rings, g, C * g, params);
    for (uint32_t c = 0; c < C; ++c) {
      const uint32_t base = c * g;
      auto in = [&](uint32_t j) { return slots(kIn, base + j); };
      auto out = [&](uint32_t j) { return slots(kOut, base + j); };
      ring_reduce_scatter_symmetric(b, static_cast<int>(c), g, in, out, out);
      ring_all_gather_symmetric(b, static_cast<int>(c), g, out);
    }
    return std::move(b).finish();
  }
  ScheduleBuilder b(spec.collective, Algorithm::kRing, n, spec.root, C * g, params);
  for (uint32_t c = 0; c < C; ++c) {
    const uint32_t base = c * g;
    auto in = [&](uint32_t j) { return slots(kIn, base + j); };
    auto out = [&](uint32_t j) { return slots(kOut, base + j); };
    ring_reduce_scatter(b, static_cast<int>(c), rings[c], in, out, out);
    ring_all_gather(b, static_cast<int>(c), rings[c], out);
  }
  return std::move(b).finish();
}

Schedule build_reduce_scatter(const CollectiveSpec& spec, const Rings& rings, const AlgoParams& params) {
  const auto C = static_cast<uint32_t>(params.channels);
  // Segment j is block members[j]... of rank j: the block the owner keeps is its own rank's.
  ScheduleBuilder b(spec.collective, Algorithm::kRing, spec.nranks, spec.root, C, params);
  for (uint32_t c = 0; c < C; ++c) {
    const std::vector<int>& members = rings[c];
    auto own = [&](uint32_t j) { return slots(kIn, static_cast<uint32_t>(members[j]) * C + c); };
    auto partial = [&](uint32_t) { return slots(BufferKind::kScratch, c); };
    auto final = [&](uint32_t) { return slots(kOut, c); };
    ring_reduce_scatter(b, static_cast<int>(c), members, own, partial, final);
  }
  return std::move(b).finish();
}

Schedule build_all_gather(const CollectiveSpec& spec, const Rings& rings, const AlgoParams& params) {
  const auto g = static_cast<uint32_t>(spec.nranks);
  const auto C = static_cast<uint32_t>(params.channels);
  ScheduleBuilder b(spec.collective, Algorithm::kRing, spec.nranks, spec.root, C, params);
  for (uint32_t c = 0; c < C; ++c) {
    const std::vector<int>& members = rings[c];
    auto data = [&](uint32_t j) { return slots(kOut, static_cast<uint32_t>(members[j]) * C + c); };
    auto first = [&](uint32_t) { return slots(kIn, c); };
    for (uint32_t p = 0; p < g; ++p) b.copy(members[p], static_cast<int>(c), slots(kIn, c), data(p));
    ring_all_gather(b, static_cast<int>(c), members, data, first);
  }
  return std::move(b).finish();
}

// A chain from the root along the ring, pipelined over chunks:
//   root --c0,c1,..--> m1 --c0,c1,..--> m2 ... (every member forwards chunk i once it has it)
Schedule build_broadcast(const CollectiveSpec& spec, const Rings& rings, const AlgoParams& params) {
  const auto g = static_cast<uint32_t>(spec.nranks);
  const auto C = static_cast<uint32_t>(params.channels);
  const uint32_t k = C * static_cast<uint32_t>(params.pipeline_chunks);
  ScheduleBuilder b(spec.collective, Algorithm::kRing, spec.nranks, spec.root, k, params);
  for (uint32_t i = 0; i < k; ++i) {
    const int lane = static_cast<int>(i % C);
    const std::vector<int> chain = rotated(rings[i % C], spec.root);
    b.copy(chain[0], lane, slots(kIn, i), slots(kOut, i));
    for (uint32_t p = 0; p + 1 < g; ++p) {
      b.transfer(lane, chain[p], p == 0 ? slots(kIn, i) : slots(kOut, i), chain[p + 1], slots(kOut, i));
    }
  }
  return std::move(b).finish();
}

// A chain that ends at the root: root+1 -> root+2 -> ... -> root, partial sums in scratch.
Schedule build_reduce(const CollectiveSpec& spec, const Rings& rings, const AlgoParams& params) {
  const auto g = static_cast<uint32_t>(spec.nranks);
  const auto C = static_cast<uint32_t>(params.channels);
  const uint32_t k = C * static_cast<uint32_t>(params.pipeline_chunks);
  ScheduleBuilder b(spec.collective, Algorithm::kRing, spec.nranks, spec.root, k, params);
  for (uint32_t i = 0; i < k; ++i) {
    const int lane = static_cast<int>(i % C);
    std::vector<int> chain = rotated(rings[i % C], spec.root);
    std::rotate(chain.begin(), chain.begin() + 1, chain.end());  // the root is last
    if (g == 1) b.copy(chain[0], lane, slots(kIn, i), slots(kOut, i));
    for (uint32_t p = 0; p + 1 < g; ++p) {
      const SlotRange sent = p == 0 ? slots(kIn, i) : slots(BufferKind::kScratch, i);
      const SlotRange result = p + 2 == g ? slots(kOut, i) : slots(BufferKind::kScratch, i);
      b.transfer_reduce(lane, chain[p], sent, chain[p + 1], slots(kIn, i), result);
    }
  }
  return std::move(b).finish();
}

}  // namespace

Schedule build_ring(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params, ScheduleForm form) {
  Rings rings;
  for (int c = 0; c < params.channels; ++c) rings.push_back(ring_members(layout, spec.nranks, c));
  switch (spec.collective) {
    case Collective::kAllReduce: return build_all_reduce(spec, rings, params, form);
    case Collective::kReduceScatter: return build_reduce_scatter(spec, rings, params);
    case Collective::kAllGather: return build_all_gather(spec, rings, params);
    case Collective::kBroadcast: return build_broadcast(spec, rings, params);
    case Collective::kReduce: return build_reduce(spec, rings, params);
    default: break;
  }
  fail(ErrorCode::kUnsupported, "ring does not implement {}", name(spec.collective));
}

}  // namespace tandem::algorithms
