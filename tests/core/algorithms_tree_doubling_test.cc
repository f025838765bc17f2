// Tree, recursive doubling and halving-doubling: every supported collective over awkward rank
// counts builds, validates and passes the symbolic check (out of place and in place); the trees
// are NCCL's; round counts match the textbook step counts; bad requests fail with the right code.
#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/algorithms.h"
#include "core/builder.h"
#include "core/error.h"
#include "core/validate.h"
#include "tests/support/rank_counts.h"

namespace tandem {
namespace {

using testing::rank_counts;

constexpr int kPipelineChunks[] = {1, 2, 3};

CollectiveSpec spec_for(Collective collective, int nranks, int root = 0) {
  CollectiveSpec spec;
  spec.collective = collective;
  spec.count = 1024;
  spec.nranks = nranks;
  spec.root = root;
  return spec;
}

AlgoParams pipelined(int chunks) {
  AlgoParams params;
  params.pipeline_chunks = chunks;
  return params;
}

// Builds, validates and symbolically checks; reports which case failed.
Schedule check(Algorithm algorithm, const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params) {
  SCOPED_TRACE(fmt::format("{} {} nranks={} root={} ranks_per_node={} pipeline_chunks={}", name(algorithm),
                           name(spec.collective), spec.nranks, spec.root, layout.ranks_per_node,
                           params.pipeline_chunks));
  Schedule schedule;
  try {
    schedule = build_checked_schedule(spec, layout, algorithm, params);
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
  return schedule;
}

// The peer of the first Send on `lane` of `rank` (-1 when the lane sends nothing).
int first_send_peer(const Schedule& schedule, int rank, uint32_t lane) {
  const auto& lanes = schedule.ranks[static_cast<size_t>(rank)].lanes;
  if (lane >= lanes.size()) return -1;
  for (const Op& op : lanes[lane].ops) {
    if (op.kind == OpKind::kSend) return op.peer;
  }
  return -1;
}

// Parent of every rank in tree `tree`, read from the up lane (2 * tree) of the schedule.
std::vector<int> tree_parents(const Schedule& schedule, int tree) {
  std::vector<int> parents;
  for (int r = 0; r < schedule.nranks; ++r)
    parents.push_back(first_send_peer(schedule, r, 2u * static_cast<uint32_t>(tree)));
  return parents;
}

int log2_floor(int n) {
  int log = 0;
  while ((2 << log) <= n) ++log;
  return log;
}

bool is_power_of_two(int n) { return (n & (n - 1)) == 0; }

TEST(TreeTest, AllReduceFlatSweep) {
  std::vector<int> counts = rank_counts();
  counts.push_back(1024);
  for (int n : counts) {
    for (int chunks : kPipelineChunks) {
      check(Algorithm::kTree, spec_for(Collective::kAllReduce, n), RankLayout::flat(n), pipelined(chunks));
    }
  }
}

TEST(TreeTest, AllReduceNodesSweep) {
  for (int nodes : {1, 2, 3, 4, 5, 7, 8, 16}) {
    for (int chunks : kPipelineChunks) {
      check(Algorithm::kTree, spec_for(Collective::kAllReduce, nodes * 8), RankLayout::nodes(nodes, 8),
            pipelined(chunks));
    }
  }
  // A last node that is only partly filled.
  for (int n : {5, 11, 13}) {
    RankLayout layout = RankLayout::flat(n);
    layout.ranks_per_node = 4;
    check(Algorithm::kTree, spec_for(Collective::kAllReduce, n), layout, pipelined(2));
  }
}

TEST(TreeTest, EightRanksAreNcclsMirroredTrees) {
  const Schedule schedule = check(Algorithm::kTree, spec_for(Collective::kAllReduce, 8), RankLayout::flat(8), {});
  ASSERT_EQ(schedule.nranks, 8);
  EXPECT_EQ(tree_parents(schedule, 0), (std::vector<int>{-1, 2, 4, 2, 0, 6, 4, 6}));
  EXPECT_EQ(tree_parents(schedule, 1), (std::vector<int>{1, 3, 1, 7, 5, 3, 5, -1}));
  // Up: an inner rank adds its two children one after the other (2 rounds per level below the
  // root's single child: 2 + 2 + 1); down: 3 rounds.
  EXPECT_EQ(schedule.num_rounds, 8u);
  EXPECT_EQ(schedule.chunks_per_block, 2u);
}

TEST(TreeTest, OddRankCountShiftsTheSecondTree) {
  const Schedule schedule = check(Algorithm::kTree, spec_for(Collective::kAllReduce, 5), RankLayout::flat(5), {});
  ASSERT_EQ(schedule.nranks, 5);
  EXPECT_EQ(tree_parents(schedule, 0), (std::vector<int>{-1, 2, 4, 2, 0}));
  EXPECT_EQ(tree_parents(schedule, 1), (std::vector<int>{1, -1, 3, 0, 3}));
}

TEST(TreeTest, NodesChainBelowTheNodeTree) {
  // 2 nodes of 4: tree 0 over nodes is 0 -> 1, tree 1 is 1 -> 0; heads are ranks 0 and 4.
  const Schedule schedule =
      check(Algorithm::kTree, spec_for(Collective::kAllReduce, 8), RankLayout::nodes(2, 4), pipelined(2));
  ASSERT_EQ(schedule.nranks, 8);
  EXPECT_EQ(tree_parents(schedule, 0), (std::vector<int>{-1, 0, 1, 2, 0, 4, 5, 6}));
  EXPECT_EQ(tree_parents(schedule, 1), (std::vector<int>{4, 0, 1, 2, -1, 4, 5, 6}));
  EXPECT_EQ(schedule.chunks_per_block, 4u);
}

TEST(TreeTest, OneRankCopies) {
  const Schedule schedule = check(Algorithm::kTree, spec_for(Collective::kAllReduce, 1), RankLayout::flat(1), {});
  ASSERT_EQ(schedule.nranks, 1);
  EXPECT_EQ(schedule.op_count(), 1u);
}

TEST(TreeTest, RejectsOtherCollectivesAndBadParameters) {
  for (Collective c : {Collective::kReduceScatter, Collective::kAllGather, Collective::kBroadcast, Collective::kReduce,
                       Collective::kAllToAll}) {
    try {
      build_schedule(spec_for(c, 4), RankLayout::flat(4), Algorithm::kTree, {});
      ADD_FAILURE() << "tree built " << name(c);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    }
  }
  for (int chunks : {0, -1, 1 << 20}) {
    try {
      build_schedule(spec_for(Collective::kAllReduce, 4), RankLayout::flat(4), Algorithm::kTree, pipelined(chunks));
      ADD_FAILURE() << "tree accepted pipeline_chunks " << chunks;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  }
  try {
    build_schedule(spec_for(Collective::kAllReduce, 4), RankLayout::flat(3), Algorithm::kTree, {});
    ADD_FAILURE() << "tree accepted a layout of the wrong size";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
}

TEST(RecursiveDoublingTest, Sweep) {
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kBroadcast, Collective::kReduce}) {
    for (int n : rank_counts()) {
      for (int chunks : kPipelineChunks) {
        check(Algorithm::kRecursiveDoubling, spec_for(c, n), RankLayout::flat(n), pipelined(chunks));
      }
    }
  }
}

TEST(RecursiveDoublingTest, RootedCollectivesFromEveryRoot) {
  for (Collective c : {Collective::kBroadcast, Collective::kReduce}) {
    for (int n : {2, 3, 5, 6, 7, 8, 12, 13}) {
      for (int root = 0; root < n; ++root) {
        check(Algorithm::kRecursiveDoubling, spec_for(c, n, root), RankLayout::flat(n), pipelined(2));
      }
    }
  }
}

TEST(RecursiveDoublingTest, RoundsAreLogarithmic) {
  for (int n : rank_counts()) {
    if (n == 1) continue;
    SCOPED_TRACE(n);
    // The fold costs one round in and one round out.
    const uint32_t fold_rounds = is_power_of_two(n) ? 0 : 2;
    const uint32_t steps = static_cast<uint32_t>(log2_floor(n));
    // With n = 2 the single step cannot both send Input and write the sum into Output (the same
    // slot, in place) in one round.
    EXPECT_EQ(
        check(Algorithm::kRecursiveDoubling, spec_for(Collective::kAllReduce, n), RankLayout::flat(n), {}).num_rounds,
        steps + fold_rounds + (n == 2 ? 1 : 0));
    EXPECT_EQ(
        check(Algorithm::kHalvingDoubling, spec_for(Collective::kAllReduce, n), RankLayout::flat(n), {}).num_rounds,
        2 * steps + fold_rounds);
    // Binomial trees: eager sends let the broadcast root reach all its children at once, so the
    // depth is the tree's height (the most set bits of any v < n); the root's own copy follows
    // its sends (in place it overwrites what they read), which only shows for n = 2. A reduce
    // root adds its children one after the other: ceil(log2 n) rounds.
    int height = 0;
    for (int v = 0; v < n; ++v) height = std::max(height, __builtin_popcount(static_cast<unsigned>(v)));
    EXPECT_EQ(
        check(Algorithm::kRecursiveDoubling, spec_for(Collective::kBroadcast, n), RankLayout::flat(n), {}).num_rounds,
        std::max(static_cast<uint32_t>(height), 2u));
    const uint32_t ceil_log = static_cast<uint32_t>(log2_floor(n) + (is_power_of_two(n) ? 0 : 1));
    EXPECT_EQ(
        check(Algorithm::kRecursiveDoubling, spec_for(Collective::kReduce, n), RankLayout::flat(n), {}).num_rounds,
        ceil_log);
  }
}

TEST(RecursiveDoublingTest, RejectsOtherCollectives) {
  for (Collective c : {Collective::kReduceScatter, Collective::kAllToAll, Collective::kSendRecv}) {
    try {
      build_schedule(spec_for(c, 4), RankLayout::flat(4), Algorithm::kRecursiveDoubling, {});
      ADD_FAILURE() << "recursive doubling built " << name(c);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    }
  }
  try {
    build_schedule(spec_for(Collective::kBroadcast, 4, 4), RankLayout::flat(4), Algorithm::kRecursiveDoubling, {});
    ADD_FAILURE() << "recursive doubling accepted root 4 of 4 ranks";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
}

TEST(HalvingDoublingTest, Sweep) {
  for (Collective c : {Collective::kAllReduce, Collective::kReduceScatter}) {
    for (int n : rank_counts()) {
      for (int chunks : kPipelineChunks) {
        check(Algorithm::kHalvingDoubling, spec_for(c, n), RankLayout::flat(n), pipelined(chunks));
      }
    }
  }
}

TEST(HalvingDoublingTest, AllReduceCutsTheBlockIntoOneChunkPerVirtualRank) {
  for (int n : {1, 2, 3, 6, 8, 13, 16}) {
    const Schedule schedule =
        check(Algorithm::kHalvingDoubling, spec_for(Collective::kAllReduce, n), RankLayout::flat(n), {});
    EXPECT_EQ(schedule.chunks_per_block, static_cast<uint32_t>(1 << log2_floor(n))) << n;
  }
}

TEST(HalvingDoublingTest, ReduceScatterSendsLessThanAllReduce) {
  // Halving moves n/2 + n/4 + ... blocks per rank, not log2(n) full vectors.
  const Schedule schedule =
      check(Algorithm::kHalvingDoubling, spec_for(Collective::kReduceScatter, 16), RankLayout::flat(16), {});
  ASSERT_EQ(schedule.nranks, 16);
  for (int r = 0; r < 16; ++r) {
    uint32_t sent = 0;
    for (const Lane& lane : schedule.ranks[static_cast<size_t>(r)].lanes) {
      for (const Op& op : lane.ops) sent += op.kind == OpKind::kSend ? op.src.count : 0;
    }
    EXPECT_EQ(sent, 15u) << "rank " << r;
  }
}

TEST(HalvingDoublingTest, RejectsOtherCollectives) {
  for (Collective c : {Collective::kAllGather, Collective::kBroadcast, Collective::kReduce, Collective::kAllToAll}) {
    try {
      build_schedule(spec_for(c, 4), RankLayout::flat(4), Algorithm::kHalvingDoubling, {});
      ADD_FAILURE() << "halving doubling built " << name(c);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    }
  }
}

// The checks above would pass vacuously if the checker accepted anything: a schedule with one
// transfer dropped (send and receive both removed, so it stays structurally valid) must fail.
TEST(HalvingDoublingTest, CheckerCatchesADroppedTransfer) {
  Schedule schedule =
      build_schedule(spec_for(Collective::kAllReduce, 4), RankLayout::flat(4), Algorithm::kHalvingDoubling, {});
  ScheduleBuilder builder(Collective::kAllReduce, Algorithm::kHalvingDoubling, 4, 0, schedule.chunks_per_block);
  // Rebuild rank by rank, skipping the last exchange between ranks 0 and 2 (the doubling's mask 2).
  for (int r = 0; r < 4; ++r) {
    const auto& ops = schedule.ranks[static_cast<size_t>(r)].lanes.at(0).ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const bool last_exchange = i + 2 >= ops.size() && (r == 0 || r == 2);
      if (last_exchange) continue;
      switch (op.kind) {
        case OpKind::kSend:
          builder.send(r, 0, op.peer, op.src);
          break;
        case OpKind::kRecv:
          builder.recv(r, 0, op.peer, op.dst);
          break;
        case OpKind::kRecvReduce:
          builder.recv_reduce(r, 0, op.peer, op.src, op.dst);
          break;
        case OpKind::kCopy:
          builder.copy(r, 0, op.src, op.dst);
          break;
        case OpKind::kReduce:
          builder.reduce(r, 0, op.src, op.dst);
          break;
      }
    }
  }
  Schedule broken = std::move(builder).finish();
  validate(broken);
  try {
    symbolic_check(broken);
    ADD_FAILURE() << "symbolic_check accepted an all_reduce with a transfer missing";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCheckFailed) << e.what();
  }
}

}  // namespace
}  // namespace tandem
