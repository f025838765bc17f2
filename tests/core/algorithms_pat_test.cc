// PAT (core/algorithms/pat.cc): all_gather and reduce_scatter over 1..17 ranks and larger counts
// build, validate and pass the symbolic check (out of place and in place) on flat and one-rank-per-
// node layouts; each rank sends one message per step to r -/+ 2^d, farthest first for all_gather,
// with the block counts of NCCL's aggregated steps; other collectives are refused.
#include <cstdint>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/algorithms.h"
#include "core/error.h"
#include "core/validate.h"
#include "tests/support/expect_error.h"
#include "tests/support/rank_counts.h"

namespace tandem {
namespace {

using testing::rank_counts;

constexpr Collective kPatCollectives[] = {Collective::kAllGather, Collective::kReduceScatter};
// Schedules are size-independent; counts still travel in the spec, 0 and non-multiples included.
constexpr int64_t kCounts[] = {0, 1, 7, 1000};

int ceil_log2(int n) {
  int steps = 0;
  while ((1 << steps) < n) ++steps;
  return steps;
}

// A rank's sends in issue order: (peer, chunks).
std::vector<std::pair<int, uint32_t>> sends_of(const Schedule& schedule, int rank) {
  std::vector<std::pair<int, uint32_t>> sends;
  for (const Lane& lane : schedule.ranks[static_cast<size_t>(rank)].lanes) {
    for (const Op& op : lane.ops) {
      if (op.kind == OpKind::kSend) sends.emplace_back(op.peer, op.chunks());
    }
  }
  return sends;
}

TEST(Pat, SupportsAllGatherAndReduceScatterOnly) {
  for (Collective c : all_collectives()) {
    EXPECT_EQ(implements(Algorithm::kPat, c), c == Collective::kAllGather || c == Collective::kReduceScatter) << name(c);
  }
  EXPECT_EQ(name(Algorithm::kPat), "pat");
  EXPECT_EQ(parse_algorithm("pat"), Algorithm::kPat);
  testing::expect_error(
      [] {
        build_schedule({Collective::kAllReduce, 0, DataType::kF32, ReduceOp::kSum, 0, 4}, RankLayout::flat(4),
                       Algorithm::kPat);
      },
      ErrorCode::kUnsupported, {"'pat' does not implement all_reduce"});
}

TEST(Pat, SymbolicSweep) {
  int cases = 0;
  for (Collective c : kPatCollectives) {
    for (int n : rank_counts()) {
      for (int64_t count : kCounts) {
        // Flat, one rank per node (where NCCL uses PAT) and, where n allows, nodes of 2.
        std::vector<RankLayout> layouts = {RankLayout::flat(n), RankLayout::nodes(n, 1)};
        if (n % 2 == 0) layouts.push_back(RankLayout::nodes(n / 2, 2));
        for (const RankLayout& layout : layouts) {
          SCOPED_TRACE(fmt::format("{} n={} count={} per_node={}", name(c), n, count, layout.ranks_per_node));
          const CollectiveSpec spec{c, count, DataType::kF32, ReduceOp::kSum, 0, n};
          Schedule schedule;
          ASSERT_NO_THROW(schedule = build_checked_schedule(spec, layout, Algorithm::kPat));
          EXPECT_EQ(schedule.algorithm, Algorithm::kPat);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 2 * 4 * (2 * 21 + 12));  // 21 rank counts, 12 of them even
}

// Rank r's messages: one per dimension, to r - 2^d (all_gather, d = D-1 .. 0) or r + 2^d
// (reduce_scatter, d = 0 .. D-1), carrying the m_d = #{t = 0, 2^(d+1), ... : t + 2^d < n} blocks
// of that step; n - 1 blocks in all, as in a ring.
TEST(Pat, OneMessagePerStepToPowerOfTwoPeers) {
  for (Collective c : kPatCollectives) {
    for (int n : rank_counts()) {
      SCOPED_TRACE(fmt::format("{} n={}", name(c), n));
      const Schedule s = build_checked_schedule({c, 0, DataType::kF32, ReduceOp::kSum, 0, n}, RankLayout::nodes(n, 1),
                                                Algorithm::kPat);
      const int steps = ceil_log2(n);
      for (int r = 0; r < n; ++r) {
        const auto sends = sends_of(s, r);
        ASSERT_EQ(sends.size(), static_cast<size_t>(steps)) << "rank " << r;
        uint32_t blocks = 0;
        for (int i = 0; i < steps; ++i) {
          const int d = c == Collective::kAllGather ? steps - 1 - i : i;
          const int distance = 1 << d;
          const int peer = c == Collective::kAllGather ? (r - distance + n) % n : (r + distance) % n;
          const auto expected_blocks = static_cast<uint32_t>((n - distance + 2 * distance - 1) / (2 * distance));
          EXPECT_EQ(sends[static_cast<size_t>(i)].first, peer) << "rank " << r << " step " << i;
          EXPECT_EQ(sends[static_cast<size_t>(i)].second, expected_blocks) << "rank " << r << " step " << i;
          blocks += sends[static_cast<size_t>(i)].second;
        }
        EXPECT_EQ(blocks, static_cast<uint32_t>(n - 1)) << "rank " << r;
      }
    }
  }
}

// The 8-rank map at the top of pat.cc: all_gather rank 0 sends its own block to 4, then offsets
// {0, 4} (Output blocks 0, 4) to 6, then {0, 2, 4, 6} to 7, and receives blocks 4 | 2 6 | 1 3 5 7.
TEST(Pat, EightRankAllGatherMatchesTheDrawing) {
  const Schedule s = build_checked_schedule({Collective::kAllGather, 0, DataType::kF32, ReduceOp::kSum, 0, 8},
                                            RankLayout::nodes(8, 1), Algorithm::kPat);
  EXPECT_EQ(sends_of(s, 0), (std::vector<std::pair<int, uint32_t>>{{4, 1}, {6, 2}, {7, 4}}));
  std::vector<uint32_t> sent_blocks, received_blocks;
  std::vector<int> received_from;
  for (const Op& op : s.ranks[0].lanes[0].ops) {
    // Packing copies read Input (own block) or Output blocks into Scratch; unpacking writes Output.
    if (op.kind == OpKind::kCopy && op.dst.buffer == BufferKind::kScratch) {
      sent_blocks.push_back(op.src.buffer == BufferKind::kInput ? 0 : op.src.first);
    }
    if (op.kind == OpKind::kCopy && op.src.buffer == BufferKind::kScratch) received_blocks.push_back(op.dst.first);
    if (op.kind == OpKind::kRecv) {
      received_from.push_back(op.peer);
      if (op.dst.buffer == BufferKind::kOutput) received_blocks.push_back(op.dst.first);
    }
  }
  EXPECT_EQ(sent_blocks, (std::vector<uint32_t>{0, 4, 0, 2, 4, 6}));
  EXPECT_EQ(received_blocks, (std::vector<uint32_t>{4, 2, 6, 1, 3, 5, 7}));
  EXPECT_EQ(received_from, (std::vector<int>{4, 2, 1}));
  // Scratch: 4 slots staging the outgoing message, 4 the incoming one.
  EXPECT_EQ(s.ranks[0].scratch_chunks, 8u);
}

// reduce_scatter, 8 ranks: rank 0 sends the partials of offsets 1 3 5 7 to rank 1, 2 6 to rank 2,
// 4 to rank 4; the last receive lands in Output.
TEST(Pat, EightRankReduceScatterMatchesTheDrawing) {
  const Schedule s = build_checked_schedule({Collective::kReduceScatter, 0, DataType::kF32, ReduceOp::kSum, 0, 8},
                                            RankLayout::nodes(8, 1), Algorithm::kPat);
  EXPECT_EQ(sends_of(s, 0), (std::vector<std::pair<int, uint32_t>>{{1, 4}, {2, 2}, {4, 1}}));
  const auto& ops = s.ranks[0].lanes[0].ops;
  std::vector<uint32_t> first_step;  // Input blocks packed for the first message
  for (const Op& op : ops) {
    if (op.kind == OpKind::kSend) break;
    if (op.kind == OpKind::kCopy) first_step.push_back(op.src.first);
  }
  EXPECT_EQ(first_step, (std::vector<uint32_t>{1, 3, 5, 7}));
  ASSERT_FALSE(ops.empty());
  EXPECT_EQ(ops.back().kind, OpKind::kRecvReduce);
  EXPECT_EQ(ops.back().peer, 4);
  EXPECT_EQ(ops.back().dst, (SlotRange{BufferKind::kOutput, 0, 1}));
}

TEST(Pat, OneRankCopies) {
  for (Collective c : kPatCollectives) {
    const Schedule s =
        build_checked_schedule({c, 5, DataType::kF32, ReduceOp::kSum, 0, 1}, RankLayout::flat(1), Algorithm::kPat);
    ASSERT_EQ(s.ranks.size(), 1u);
    ASSERT_EQ(s.ranks[0].lanes.size(), 1u);
    ASSERT_EQ(s.ranks[0].lanes[0].ops.size(), 1u);
    EXPECT_EQ(s.ranks[0].lanes[0].ops[0].kind, OpKind::kCopy);
  }
}

TEST(Pat, LargeRankCounts) {
  for (int n : {100, 1024}) {
    for (Collective c : kPatCollectives) {
      SCOPED_TRACE(fmt::format("{} n={}", name(c), n));
      const Schedule s = build_checked_schedule({c, 0, DataType::kF32, ReduceOp::kSum, 0, n}, RankLayout::nodes(n, 1),
                                                Algorithm::kPat);
      EXPECT_EQ(sends_of(s, n - 1).size(), static_cast<size_t>(ceil_log2(n)));
    }
  }
}

}  // namespace
}  // namespace tandem
