// PAT, NCCL's "Parallel Aggregated Trees" (NCCL 2.23+: PatAGAlgorithm / PatRSAlgorithm in
// src/include/collectives.h, runPat in src/device/all_gather.h and reduce_scatter.h): all_gather
// and reduce_scatter in ceil(log2 n) steps for any n. NCCL's tuner considers it only when every
// rank is on a node of its own (ncclPatEnable); the schedule itself runs on any layout.
//
// Trees. Rank r has a peer at distance 2^d in each dimension d with 2^d < n (mod n). In all_gather
// the block of rank q spreads down a binomial tree rooted at q, farthest hop first: the rank at
// offset s below q (rank q - s) gets it from offset s minus the lowest set bit of s. n = 8:
//
//                     q
//         ____________|____________        step  dim  hop   ranks that hold block q after it
//        /            |            \        0     2    -4   q, q-4
//      q-4           q-2           q-1      1     1    -2   + q-2, q-6
//     /   \           |                     2     0    -1   + q-1, q-3, q-5, q-7
//   q-6   q-5        q-3
//    |
//   q-7
//
// Aggregation. The n trees (one per block, each the same tree shifted) all take their hops along
// dimension d in the same step, so a rank sends one message per step, to r - 2^d, holding every
// block the trees forward along d. With offset t naming Output block (r + t) mod n, rank r:
//
//   step  dim  sends to  offsets sent   receives from  offsets received   holds after
//    0     2    r-4      0              r+4            4                  0 4
//    1     1    r-2      0 4            r+2            2 6                0 2 4 6
//    2     0    r-1      0 2 4 6        r+1            1 3 5 7            0 .. 7
//
// Step d sends the offsets t = 0, 2^(d+1), 2*2^(d+1), ... with t + 2^d < n, and receives the same
// list shifted by 2^d. That is 1, 2, 4, ... blocks: n - 1 blocks per rank in all, as in a ring, but
// in log2 n messages, the smallest over the farthest distance. For other n the rule is the same
// and offsets >= n are absent (NCCL skips them). n = 5: step 0 sends 0 to r-4, step 1 sends 0 to
// r-2, step 2 sends 0 2 to r-1 (4 + 1 = 5 is absent).
//
// reduce_scatter runs the same trees backwards, nearest hop first: step d sends the partial sums
// of the offsets above, shifted by 2^d, to r + 2^d, which adds them into its partials of the
// unshifted offsets. After the last step the partial of offset 0 is the rank's reduced block.
//
//   step  dim  sends to  partials sent  receives from  adds into
//    0     0    r+1      1 3 5 7        r-1            0 2 4 6
//    1     1    r+2      2 6            r-2            0 4
//    2     2    r+4      4              r-4            0
//
// Packing. A step's blocks lie 2^(d+1) apart in the buffers, so a message of m > 1 blocks is packed
// into Scratch with Copy ops, sent as one range, and unpacked (all_gather) or reduced into packed
// copies of the receiver's own partials (reduce_scatter); NCCL likewise copies blocks between its
// connection buffers and the user buffers. A one-block step sends and receives in place.
//
//   Scratch: [0, M)        the outgoing message, M = the largest step's block count (d = 0)
//            [M, 2M)       all_gather: the incoming message
//            [M, ...)      reduce_scatter: each step's new partials, m_d slots in sent order,
//                          kept until a later step forwards them
//
// Against NCCL: for small messages these are NCCL's messages, one per dimension in the same
// order with the same blocks (its host-side step generator, run for 8 ranks, sends 0 | 0 4 |
// 0 2 4 6 along dims 2, 1, 0), except that NCCL caps its aggregation below n/2 trees, so for
// n = 2^k + 1 it sends dimension 0 as two messages. For larger messages NCCL aggregates fewer trees
// per message to stay within its connection buffers, splits the data over channels, loops over
// chunks, and overlaps a receive with the forward of the same data; tandem's schedule is
// size-independent: the fully aggregated form on one lane. Its reduce_scatter packs offsets in
// ascending order where NCCL uses a bit-reversed order; the set per message is the same.
//
// Emission. Every step is a cyclic shift (each rank sends to r -/+ 2^d and receives from the other
// side), so the builder's transfer(), which emits a send and its receive together, would put some
// rank's receive ahead of its own send on its lane and make that rank wait before sending. A step
// therefore emits every rank's send first, then every rank's receive; sends are eager.
#include <cstdint>
#include <vector>

#include "core/algorithms/internal.h"
#include "core/error.h"

namespace tandem::algorithms {
namespace {

constexpr uint32_t kChunks = 1;  // one chunk per block: PAT moves whole blocks

uint32_t u32(int64_t value) { return static_cast<uint32_t>(value); }

// The dimensions: d = 0 .. D-1 with 2^d < n.
int dimension_count(int n) {
  int dims = 0;
  while ((int64_t{1} << dims) < n) ++dims;
  return dims;
}

// The offsets a rank sends along dimension d in all_gather, ascending: t = 0, 2^(d+1), ... with
// t + 2^d < n (reduce_scatter: the offsets it adds into at that step).
std::vector<int> step_offsets(int n, int d) {
  std::vector<int> offsets;
  for (int64_t t = 0; t + (int64_t{1} << d) < n; t += int64_t{2} << d) offsets.push_back(static_cast<int>(t));
  return offsets;
}

// The largest step: dimension 0, every even offset below n - 1.
uint32_t largest_step(int n) { return u32(n / 2); }

int shifted(int rank, int64_t distance, int n) { return static_cast<int>(((rank + distance) % n + n) % n); }

Schedule all_gather_pat(const CollectiveSpec& spec, const AlgoParams& params) {
  const int n = spec.nranks;
  ScheduleBuilder b(spec.collective, Algorithm::kPat, n, spec.root, kChunks, params);
  const uint32_t stage = 0;
  const uint32_t incoming = largest_step(n);
  // Offset t of rank r: Output block (r + t) mod n; its own block (t = 0) is read from Input.
  const auto block = [&](int r, int t) { return slots(BufferKind::kOutput, u32(shifted(r, t, n))); };
  const auto source = [&](int r, int t) { return t == 0 ? slots(BufferKind::kInput, 0) : block(r, t); };
  for (int r = 0; r < n; ++r) b.copy(r, kLane, slots(BufferKind::kInput, 0), block(r, 0));
  for (int d = dimension_count(n) - 1; d >= 0; --d) {
    const int64_t distance = int64_t{1} << d;
    const std::vector<int> offsets = step_offsets(n, d);
    const auto m = u32(static_cast<int64_t>(offsets.size()));
    for (int r = 0; r < n; ++r) {
      const int to = shifted(r, -distance, n);
      if (m == 1) {
        b.send(r, kLane, to, source(r, offsets[0]));
        continue;
      }
      for (uint32_t i = 0; i < m; ++i) b.copy(r, kLane, source(r, offsets[i]), slots(BufferKind::kScratch, stage + i));
      b.send(r, kLane, to, slots(BufferKind::kScratch, stage, m));
    }
    for (int r = 0; r < n; ++r) {
      const int from = shifted(r, distance, n);
      if (m == 1) {
        b.recv(r, kLane, from, block(r, static_cast<int>(offsets[0] + distance)));
        continue;
      }
      b.recv(r, kLane, from, slots(BufferKind::kScratch, incoming, m));
      for (uint32_t i = 0; i < m; ++i) {
        b.copy(r, kLane, slots(BufferKind::kScratch, incoming + i), block(r, static_cast<int>(offsets[i] + distance)));
      }
    }
  }
  return std::move(b).finish();
}

Schedule reduce_scatter_pat(const CollectiveSpec& spec, const AlgoParams& params) {
  const int n = spec.nranks;
  ScheduleBuilder b(spec.collective, Algorithm::kPat, n, spec.root, kChunks, params);
  const SlotRange output = slots(BufferKind::kOutput, 0);
  if (n == 1) {
    b.copy(0, kLane, slots(BufferKind::kInput, 0), output);
    return std::move(b).finish();
  }
  const uint32_t stage = 0;
  uint32_t next_free = largest_step(n);
  // Where the partial sum of offset t (block (r + t) mod n) lives, the same slot on every rank:
  // -1 while it is still the rank's own Input block.
  std::vector<int64_t> scratch_of(static_cast<size_t>(n), -1);
  const auto partial = [&](int r, int t) {
    const int64_t slot = scratch_of[static_cast<size_t>(t)];
    return slot < 0 ? slots(BufferKind::kInput, u32(shifted(r, t, n))) : slots(BufferKind::kScratch, u32(slot));
  };
  const int dims = dimension_count(n);
  for (int d = 0; d < dims; ++d) {
    const int64_t distance = int64_t{1} << d;
    const std::vector<int> into = step_offsets(n, d);  // the partials sent are these + distance
    const auto m = u32(static_cast<int64_t>(into.size()));
    const bool last = d + 1 == dims;  // then into = {0} and the sum lands in Output
    for (int r = 0; r < n; ++r) {
      const int to = shifted(r, distance, n);
      if (m == 1) {
        b.send(r, kLane, to, partial(r, static_cast<int>(into[0] + distance)));
        continue;
      }
      for (uint32_t i = 0; i < m; ++i) {
        b.copy(r, kLane, partial(r, static_cast<int>(into[i] + distance)), slots(BufferKind::kScratch, stage + i));
      }
      b.send(r, kLane, to, slots(BufferKind::kScratch, stage, m));
    }
    const SlotRange result = last ? output : slots(BufferKind::kScratch, next_free, m);
    for (int r = 0; r < n; ++r) {
      const int from = shifted(r, -distance, n);
      if (m == 1) {
        b.recv_reduce(r, kLane, from, partial(r, into[0]), result);
        continue;
      }
      for (uint32_t i = 0; i < m; ++i)
        b.copy(r, kLane, partial(r, into[i]), slots(BufferKind::kScratch, next_free + i));
      b.recv_reduce(r, kLane, from, result, result);
    }
    if (!last) {
      for (uint32_t i = 0; i < m; ++i) scratch_of[static_cast<size_t>(into[i])] = next_free + i;
      next_free += m;
    }
  }
  return std::move(b).finish();
}

}  // namespace

Schedule build_pat(const CollectiveSpec& spec, const RankLayout& /*layout*/, const AlgoParams& params) {
  switch (spec.collective) {
    case Collective::kAllGather:
      return all_gather_pat(spec, params);
    case Collective::kReduceScatter:
      return reduce_scatter_pat(spec, params);
    default:
      fail(ErrorCode::kUnsupported, "pat does not implement {}; it implements all_gather, reduce_scatter",
           name(spec.collective));
  }
}

}  // namespace tandem::algorithms
