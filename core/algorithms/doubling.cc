// Logarithmic algorithms: recursive doubling (all_reduce, all_gather), binomial trees (broadcast,
// reduce) and recursive halving-doubling, Rabenseifner's algorithm (all_reduce, reduce_scatter).
//
// The butterflies need a power-of-two rank count. For any other n they use the standard fold:
// with p the largest power of two <= n and e = n - p extra ranks, odd rank 2i+1 (i < e) hands its
// data to 2i and sits out; the p remaining ranks run the algorithm as virtual ranks 0..p-1; at the
// end 2i hands the result back to 2i+1. For n = 6 (p = 4, e = 2):
//
//    real rank:      0  1   2  3   4   5
//                    \__/   \__/   |   |
//    virtual rank:    0      1     2   3
//
//    real(v) = v < e ? 2v : v + e        virtual(r) = r < 2e ? r / 2 : r - e
//
// A virtual rank stands for the blocks of its real ranks: virtual v owns blocks
// [first_block(v), first_block(v + 1)) with first_block(v) = real(v) (and first_block(p) = n), so
// a range of virtual ranks owns a contiguous range of blocks.
//
// Every rank's ops are emitted rank by rank in the order that rank runs them, on lane 0. In an
// exchange both partners send before they receive: sends are eager, so neither waits for the other.
#include <cstdint>
#include <string_view>
#include <utility>

#include "core/algorithms/internal.h"
#include "core/error.h"

namespace tandem::algorithms {
namespace {

// The fold of n ranks onto p = 2^k virtual ranks (see the top of this file).
class Fold {
 public:
  explicit Fold(int nranks) {
    while (virtual_count_ * 2 <= nranks) virtual_count_ *= 2;
    extras_ = nranks - virtual_count_;
  }
  int virtual_count() const { return virtual_count_; }
  // Odd ranks below 2e: they hand their data to rank - 1 and wait for the result.
  bool sits_out(int rank) const { return rank < 2 * extras_ && rank % 2 == 1; }
  // Even ranks below 2e: they take over the data of rank + 1.
  bool absorbs(int rank) const { return rank < 2 * extras_ && rank % 2 == 0; }
  int virtual_rank(int rank) const { return rank < 2 * extras_ ? rank / 2 : rank - extras_; }
  int real_rank(int v) const { return v < extras_ ? 2 * v : v + extras_; }
  // First block owned by virtual rank v; first_block(virtual_count()) == nranks.
  int first_block(int v) const { return real_rank(v); }
  int block_count(int v) const { return v < extras_ ? 2 : 1; }

 private:
  int virtual_count_ = 1;
  int extras_ = 0;
};

// The half-open range of virtual ranks [first, first + size).
struct VirtualRange {
  int first = 0;
  int size = 0;
};

// The aligned group of `size` (a power of two) virtual ranks that contains v.
VirtualRange group_of(int v, int size) { return {v & ~(size - 1), size}; }

uint32_t u32(int value) { return static_cast<uint32_t>(value); }

// The slots of `buffer` that hold the blocks of virtual ranks `range`.
SlotRange blocks_of(const Fold& fold, VirtualRange range, BufferKind buffer, uint32_t chunks_per_block) {
  const int first = fold.first_block(range.first);
  const int last = fold.first_block(range.first + range.size);
  return slots(buffer, u32(first) * chunks_per_block, u32(last - first) * chunks_per_block);
}

SlotRange block(int index, BufferKind buffer, uint32_t chunks_per_block) {
  return slots(buffer, u32(index) * chunks_per_block, chunks_per_block);
}

// all_reduce: every step exchanges the whole vector with partner v ^ mask and adds it.
//
//    mask:    1          2          4
//    v = 0:   <-> 1      <-> 2      <-> 4
//    v = 5:   <-> 4      <-> 7      <-> 1
//
// An eager send still reads its slot in the round it is issued, so a step that overwrote the
// slot it sends would cost two rounds. The partial sum therefore alternates between Output and
// a scratch copy, chosen backwards from the last of the L = log2(p) steps, which writes Output:
//
//    step:      0        ...   L-3      L-2       L-1
//    writes:    Output   ...   Output   Scratch0  Output
//
// In place, Output is Input, which step 0 also sends; a rank that starts from Input then writes
// step 0 into Scratch1 instead (L >= 2; with L = 1 there is no other way into Output). A rank
// that absorbs a folded-out rank starts from whichever of Output / Scratch0 step 0 does not write.
Schedule all_reduce_doubling(const CollectiveSpec& spec, const AlgoParams& params) {
  const int n = spec.nranks;
  const Fold fold(n);
  ScheduleBuilder builder(spec.collective, Algorithm::kRecursiveDoubling, n, spec.root, 1, params);
  const SlotRange input = slots(BufferKind::kInput, 0);
  const SlotRange output = slots(BufferKind::kOutput, 0);
  const SlotRange scratch[2] = {slots(BufferKind::kScratch, 0), slots(BufferKind::kScratch, 1)};
  int steps = 0;
  while ((1 << steps) < fold.virtual_count()) ++steps;
  const auto written_by = [&](int step) { return (steps - 1 - step) % 2 == 0 ? output : scratch[0]; };
  for (int r = 0; r < n; ++r) {
    if (n == 1) {
      builder.copy(r, kLane, input, output);
      continue;
    }
    if (fold.sits_out(r)) {
      builder.send(r, kLane, r - 1, input);
      builder.recv(r, kLane, r - 1, output);
      continue;
    }
    SlotRange partial = input;
    if (fold.absorbs(r)) {
      partial = written_by(0) == output ? scratch[0] : output;
      builder.recv_reduce(r, kLane, r + 1, input, partial);
    }
    const int v = fold.virtual_rank(r);
    for (int step = 0; step < steps; ++step) {
      const int peer = fold.real_rank(v ^ (1 << step));
      SlotRange sum = written_by(step);
      if (step == 0 && steps >= 2 && partial == input && sum == output) sum = scratch[1];
      builder.send(r, kLane, peer, partial);
      builder.recv_reduce(r, kLane, peer, partial, sum);
      partial = sum;
    }
    if (fold.absorbs(r)) builder.send(r, kLane, r + 1, output);
  }
  return std::move(builder).finish();
}

// all_gather: each rank copies its block into Output, then at step `mask` swaps the blocks of its
// group of `mask` virtual ranks with the partner group's. For p = 4 (no fold), Output of v = 1:
//
//    start:      [ . | 1 | . | . ]
//    mask = 1:   [ 0 | 1 | . | . ]    sent block 1 to v = 0, received block 0
//    mask = 2:   [ 0 | 1 | 2 | 3 ]    sent blocks 0..1 to v = 3, received blocks 2..3
//
// A folded-out rank 2i+1 sends its block to 2i and gets every other block back at the end.
Schedule all_gather_doubling(const CollectiveSpec& spec, const AlgoParams& params) {
  const int n = spec.nranks;
  const Fold fold(n);
  constexpr uint32_t kChunks = 1;
  ScheduleBuilder builder(spec.collective, Algorithm::kRecursiveDoubling, n, spec.root, kChunks, params);
  const SlotRange input = slots(BufferKind::kInput, 0, kChunks);
  // Output blocks [first, last) as one slot range (empty when first == last).
  const auto output_blocks = [&](int first, int last) {
    return slots(BufferKind::kOutput, u32(first) * kChunks, u32(last - first) * kChunks);
  };
  for (int r = 0; r < n; ++r) {
    builder.copy(r, kLane, input, block(r, BufferKind::kOutput, kChunks));
    if (fold.sits_out(r)) {
      builder.send(r, kLane, r - 1, input);
      builder.recv(r, kLane, r - 1, output_blocks(0, r));
      if (r + 1 < n) builder.recv(r, kLane, r - 1, output_blocks(r + 1, n));
      continue;
    }
    if (fold.absorbs(r)) builder.recv(r, kLane, r + 1, block(r + 1, BufferKind::kOutput, kChunks));
    const int v = fold.virtual_rank(r);
    for (int mask = 1; mask < fold.virtual_count(); mask <<= 1) {
      const int partner = v ^ mask;
      const int peer = fold.real_rank(partner);
      builder.send(r, kLane, peer, blocks_of(fold, group_of(v, mask), BufferKind::kOutput, kChunks));
      builder.recv(r, kLane, peer, blocks_of(fold, group_of(partner, mask), BufferKind::kOutput, kChunks));
    }
    if (fold.absorbs(r)) {
      // Everything but the folded-out rank's own block, which it already has.
      builder.send(r, kLane, r + 1, output_blocks(0, r + 1));
      if (r + 2 < n) builder.send(r, kLane, r + 1, output_blocks(r + 2, n));
    }
  }
  return std::move(builder).finish();
}

// Binomial trees over v = (r - root) mod n, which need no fold. Parent of v: v minus its lowest
// set bit; children: v + m for every power of two m below that bit (below n for the root).
// For n = 8:
//
//                 0           v:       0  1  2  3  4  5  6  7
//             /   |   \       parent:  -  0  0  2  0  4  4  6
//            4    2    1
//           / \   |
//          6   5  3
//          |
//          7
//
// Broadcast sends to the largest subtree
// first; reduce receives from the smallest first. Both cut the block into P = pipeline_chunks
// chunks and move them one at a time, so a subtree forwards chunk c while chunk c+1 arrives.
int lowest_bit_or(int v, int otherwise) { return v == 0 ? otherwise : v & -v; }

int subtree_span(int n) {
  int span = 1;
  while (span < n) span <<= 1;
  return span;
}

Schedule broadcast_binomial(const CollectiveSpec& spec, const AlgoParams& params) {
  const int n = spec.nranks;
  const uint32_t chunks = u32(params.pipeline_chunks);
  ScheduleBuilder builder(spec.collective, Algorithm::kRecursiveDoubling, n, spec.root, chunks, params);
  const auto real = [&](int v) { return (v + spec.root) % n; };
  for (int r = 0; r < n; ++r) {
    const int v = (r - spec.root + n) % n;
    const int low_bit = lowest_bit_or(v, subtree_span(n));
    const BufferKind source = v == 0 ? BufferKind::kInput : BufferKind::kOutput;
    for (uint32_t c = 0; c < chunks; ++c) {
      if (v != 0) builder.recv(r, kLane, real(v - low_bit), slots(BufferKind::kOutput, c));
      for (int m = low_bit >> 1; m >= 1; m >>= 1) {
        if (v + m < n) builder.send(r, kLane, real(v + m), slots(source, c));
      }
    }
    if (v == 0) builder.copy(r, kLane, slots(BufferKind::kInput, 0, chunks), slots(BufferKind::kOutput, 0, chunks));
  }
  return std::move(builder).finish();
}

// reduce: partial sums collect in Scratch (slot c for chunk c) on inner ranks, and in Output only
// at the root, so no other rank's Output (in place: its Input) is touched.
Schedule reduce_binomial(const CollectiveSpec& spec, const AlgoParams& params) {
  const int n = spec.nranks;
  const uint32_t chunks = u32(params.pipeline_chunks);
  ScheduleBuilder builder(spec.collective, Algorithm::kRecursiveDoubling, n, spec.root, chunks, params);
  const auto real = [&](int v) { return (v + spec.root) % n; };
  for (int r = 0; r < n; ++r) {
    const int v = (r - spec.root + n) % n;
    const int low_bit = lowest_bit_or(v, subtree_span(n));
    const BufferKind sum = v == 0 ? BufferKind::kOutput : BufferKind::kScratch;
    if (n == 1) {
      builder.copy(r, kLane, slots(BufferKind::kInput, 0, chunks), slots(BufferKind::kOutput, 0, chunks));
      continue;
    }
    for (uint32_t c = 0; c < chunks; ++c) {
      SlotRange partial = slots(BufferKind::kInput, c);
      for (int m = 1; m < low_bit && v + m < n; m <<= 1) {
        builder.recv_reduce(r, kLane, real(v + m), partial, slots(sum, c));
        partial = slots(sum, c);
      }
      if (v != 0) builder.send(r, kLane, real(v - low_bit), partial);
    }
  }
  return std::move(builder).finish();
}

// Rabenseifner all_reduce, with chunks_per_block = p so that every halving splits chunks exactly.
// Recursive halving (mask p/2 down to 1) leaves virtual rank v with the full sum of chunk v;
// recursive doubling (mask 1 up to p/2) then gathers all chunks. For p = 4, v = 1:
//
//    halving mask 2:  keep chunks [0, 2), send [2, 4) to v = 3    (bit 2 of v is 0: lower half)
//    halving mask 1:  keep chunk  [1, 2), send [0, 1) to v = 0    (bit 1 of v is 1: upper half)
//    doubling mask 1: send [1, 2) to v = 0, receive [0, 1)
//    doubling mask 2: send [0, 2) to v = 3, receive [2, 4)
Schedule all_reduce_halving_doubling(const CollectiveSpec& spec, const AlgoParams& params) {
  const int n = spec.nranks;
  const Fold fold(n);
  const int p = fold.virtual_count();
  ScheduleBuilder builder(spec.collective, Algorithm::kHalvingDoubling, n, spec.root, u32(p), params);
  const auto range = [](BufferKind buffer, int first, int count) { return slots(buffer, u32(first), u32(count)); };
  const SlotRange input = range(BufferKind::kInput, 0, p);
  const SlotRange output = range(BufferKind::kOutput, 0, p);
  for (int r = 0; r < n; ++r) {
    if (n == 1) {
      builder.copy(r, kLane, input, output);
      continue;
    }
    if (fold.sits_out(r)) {
      builder.send(r, kLane, r - 1, input);
      builder.recv(r, kLane, r - 1, output);
      continue;
    }
    BufferKind partial = BufferKind::kInput;
    if (fold.absorbs(r)) {
      builder.recv_reduce(r, kLane, r + 1, input, output);
      partial = BufferKind::kOutput;
    }
    const int v = fold.virtual_rank(r);
    int first = 0;  // this rank's chunks: [first, first + size)
    for (int size = p; size > 1; size >>= 1) {
      const int half = size / 2;
      const int peer = fold.real_rank(v ^ half);
      const bool keep_upper = (v & half) != 0;
      const int keep = keep_upper ? first + half : first;
      const int give = keep_upper ? first : first + half;
      builder.send(r, kLane, peer, range(partial, give, half));
      builder.recv_reduce(r, kLane, peer, range(partial, keep, half), range(BufferKind::kOutput, keep, half));
      partial = BufferKind::kOutput;
      first = keep;
    }
    for (int mask = 1; mask < p; mask <<= 1) {
      const int peer = fold.real_rank(v ^ mask);
      const VirtualRange mine = group_of(v, mask);
      const VirtualRange theirs = group_of(v ^ mask, mask);
      builder.send(r, kLane, peer, range(BufferKind::kOutput, mine.first, mine.size));
      builder.recv(r, kLane, peer, range(BufferKind::kOutput, theirs.first, theirs.size));
    }
    if (fold.absorbs(r)) builder.send(r, kLane, r + 1, output);
  }
  return std::move(builder).finish();
}

// reduce_scatter by recursive halving over blocks: Input holds n blocks, Output the rank's own
// reduced block. Virtual rank v keeps, at each step, the half of its virtual range that contains
// v, so after log2(p) steps it holds the sums of its own blocks. Partial sums live in Scratch laid
// out like Input (block b in scratch slots [b*k, (b+1)*k), k = chunks_per_block, which keeps
// sub-chunk alignment). The last step writes the own block straight into Output; an absorbing
// rank 2i also receives its folded-out partner's block into Scratch and forwards it. n = 6
// (virtual 0 = {0,1}, 1 = {2,3}, 2 = {4}, 3 = {5}), real rank 4 (v = 2):
//
//    fold:       (4 takes part as is; 1 -> 0 and 3 -> 2 fold)
//    mask 2:     keep virtual [2, 4) = blocks [4, 6) in Scratch, send blocks [0, 4) to real(0) = 0
//    mask 1:     keep virtual [2, 3) = block 4 into Output,      send block 5 to real(3) = 5
Schedule reduce_scatter_halving(const CollectiveSpec& spec, const AlgoParams& params) {
  const int n = spec.nranks;
  const Fold fold(n);
  constexpr uint32_t kChunks = 1;
  ScheduleBuilder builder(spec.collective, Algorithm::kHalvingDoubling, n, spec.root, kChunks, params);
  const SlotRange all_input = slots(BufferKind::kInput, 0, u32(n) * kChunks);
  const SlotRange output = slots(BufferKind::kOutput, 0, kChunks);
  for (int r = 0; r < n; ++r) {
    if (n == 1) {
      builder.copy(r, kLane, all_input, output);
      continue;
    }
    if (fold.sits_out(r)) {
      builder.send(r, kLane, r - 1, all_input);
      builder.recv(r, kLane, r - 1, output);
      continue;
    }
    BufferKind partial = BufferKind::kInput;
    if (fold.absorbs(r)) {
      builder.recv_reduce(r, kLane, r + 1, all_input, slots(BufferKind::kScratch, 0, u32(n) * kChunks));
      partial = BufferKind::kScratch;
    }
    const int v = fold.virtual_rank(r);
    VirtualRange mine{0, fold.virtual_count()};
    while (mine.size > 2) {
      const int half = mine.size / 2;
      const VirtualRange keep = group_of(v, half);
      const VirtualRange give = group_of(v ^ half, half);
      const int peer = fold.real_rank(v ^ half);
      builder.send(r, kLane, peer, blocks_of(fold, give, partial, kChunks));
      builder.recv_reduce(r, kLane, peer, blocks_of(fold, keep, partial, kChunks),
                          blocks_of(fold, keep, BufferKind::kScratch, kChunks));
      partial = BufferKind::kScratch;
      mine = keep;
    }
    // Last step: one block (or two, for an absorbing rank) per side, one op per block so that
    // the own block lands in Output and the partner's own block in its Output.
    const int partner = v ^ 1;
    const int peer = fold.real_rank(partner);
    for (int b = fold.first_block(partner); b < fold.first_block(partner) + fold.block_count(partner); ++b) {
      builder.send(r, kLane, peer, block(b, partial, kChunks));
    }
    builder.recv_reduce(r, kLane, peer, block(r, partial, kChunks), output);
    if (fold.absorbs(r)) {
      const SlotRange folded = block(r + 1, BufferKind::kScratch, kChunks);
      builder.recv_reduce(r, kLane, peer, block(r + 1, partial, kChunks), folded);
      builder.send(r, kLane, r + 1, folded);
    }
  }
  return std::move(builder).finish();
}

}  // namespace

Schedule build_recursive_doubling(const CollectiveSpec& spec, const RankLayout& /*layout*/, const AlgoParams& params) {
  switch (spec.collective) {
    case Collective::kAllReduce:
      return all_reduce_doubling(spec, params);
    case Collective::kAllGather:
      return all_gather_doubling(spec, params);
    case Collective::kBroadcast:
      return broadcast_binomial(spec, params);
    case Collective::kReduce:
      return reduce_binomial(spec, params);
    default:
      fail(ErrorCode::kUnsupported, "recursive_doubling does not implement {}", name(spec.collective));
  }
}

Schedule build_halving_doubling(const CollectiveSpec& spec, const RankLayout& /*layout*/, const AlgoParams& params) {
  switch (spec.collective) {
    case Collective::kAllReduce:
      return all_reduce_halving_doubling(spec, params);
    case Collective::kReduceScatter:
      return reduce_scatter_halving(spec, params);
    default:
      fail(ErrorCode::kUnsupported, "halving_doubling does not implement {}", name(spec.collective));
  }
}

}  // namespace tandem::algorithms
