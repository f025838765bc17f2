// Every algorithm x collective it implements x rank counts x chunking, built, validated and
// symbolically checked (out of place and in place): the postcondition proven without data.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/algorithms.h"
#include "core/error.h"
#include "core/validate.h"
#include "tests/support/rank_counts.h"

namespace tandem {
namespace {

// Every rank's lanes of `a` and `b` hold the same ops (kind, peer, slots), in order.
void expect_same_programs(const Schedule& a, const Schedule& b, const std::string& what) {
  ASSERT_EQ(a.ranks.size(), b.ranks.size()) << what;
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    ASSERT_EQ(a.ranks[r].lanes.size(), b.ranks[r].lanes.size()) << what << " rank " << r;
    for (size_t l = 0; l < a.ranks[r].lanes.size(); ++l) {
      const auto& x = a.ranks[r].lanes[l].ops;
      const auto& y = b.ranks[r].lanes[l].ops;
      ASSERT_EQ(x.size(), y.size()) << what << " rank " << r << " lane " << l;
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_TRUE(x[i].kind == y[i].kind && x[i].peer == y[i].peer && x[i].src == y[i].src && x[i].dst == y[i].dst)
            << what << " rank " << r << " lane " << l << " op " << i;
      }
    }
  }
}

using testing::rank_counts;

// Layouts an algorithm is checked on: flat, and for hierarchical/tree every whole-node split.
std::vector<RankLayout> layouts(Algorithm a, int n) {
  std::vector<RankLayout> result;
  if (a != Algorithm::kHierarchical) result.push_back(RankLayout::flat(n));
  if (a == Algorithm::kHierarchical || a == Algorithm::kTree) {
    for (int per_node : {2, 3, 4, 8}) {
      if (n % per_node == 0) result.push_back(RankLayout::nodes(n / per_node, per_node));
    }
    if (a == Algorithm::kHierarchical) result.push_back(RankLayout::nodes(1, n));
  }
  return result;
}

struct SweepCount {
  int cases = 0;
};

TEST(Algorithms, SymbolicSweep) {
  int cases = 0;
  for (Algorithm a : all_algorithms()) {
    for (Collective c : all_collectives()) {
      if (!implements(a, c)) continue;
      for (int n : rank_counts()) {
        for (const RankLayout& layout : layouts(a, n)) {
          for (int chunking : {1, 2, 3}) {
            AlgoParams params;
            params.channels = chunking;
            params.pipeline_chunks = chunking;
            for (int root : {0, n - 1, n / 2}) {
              if (root != 0 && c != Collective::kBroadcast && c != Collective::kReduce) continue;
              const CollectiveSpec spec{c, 0, DataType::kF32, ReduceOp::kSum, root, n};
              SCOPED_TRACE(fmt::format("{} {} n={} per_node={} chunking={} root={}", name(a), name(c), n,
                                       layout.ranks_per_node, chunking, root));
              EXPECT_NO_THROW(build_checked_schedule(spec, layout, a, params));
              ++cases;
            }
          }
        }
      }
    }
  }
  std::printf("symbolic sweep: %d cases\n", cases);
  EXPECT_GT(cases, 1000);
}

TEST(Algorithms, LargeRingAndTree) {
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree}) {
    const CollectiveSpec spec{Collective::kAllReduce, 0, DataType::kF32, ReduceOp::kSum, 0, 1024};
    const Schedule s = build_checked_schedule(spec, RankLayout::flat(1024), a);
    if (a == Algorithm::kRing) {
      EXPECT_EQ(s.num_rounds, 2u * 1023u);  // one round per ring step
    }
    EXPECT_GT(s.op_count(), 0u);
  }
  // A ring over a rail-aligned order is checked like any other.
  RankLayout layout = RankLayout::nodes(4, 8);
  layout.rings.emplace_back();
  for (int i = 0; i < 32; ++i) layout.rings[0].push_back((i % 4) * 8 + i / 4);
  EXPECT_NO_THROW(build_checked_schedule({Collective::kAllReduce, 0, DataType::kF32, ReduceOp::kSum, 0, 32}, layout,
                                         Algorithm::kRing, {2, 1, Algorithm::kRing}));
}

TEST(Algorithms, SymmetricRingMatchesTheExplicitRing) {
  for (int n : {2, 3, 5, 8, 13, 64}) {
    for (int channels : {1, 2}) {
      RankLayout layout = RankLayout::flat(n);
      // A non-identity ring order: stride 5 where it is a permutation, else reversed.
      layout.rings.emplace_back();
      for (int i = 0; i < n; ++i) layout.rings[0].push_back(std::gcd(5, n) == 1 ? i * 5 % n : n - 1 - i);
      const CollectiveSpec spec{Collective::kAllReduce, 0, DataType::kF32, ReduceOp::kSum, 0, n};
      const AlgoParams params{channels, 1, Algorithm::kRing};
      const Schedule symmetric =
          build_checked_schedule(spec, layout, Algorithm::kRing, params, ScheduleForm::kSymmetric);
      ASSERT_TRUE(symmetric.symmetric());
      Schedule expanded = expand(symmetric);
      validate(expanded);
      symbolic_check(expanded);
      Schedule explicit_form = build_checked_schedule(spec, layout, Algorithm::kRing, params);
      EXPECT_EQ(expanded.num_rounds, symmetric.num_rounds);
      EXPECT_EQ(expanded.op_count(), symmetric.op_count());
      // The same programs, op for op.
      expect_same_programs(explicit_form, expanded, "n=" + std::to_string(n));
    }
  }
}

TEST(Algorithms, SymmetricCheckCatchesABrokenTemplate) {
  Schedule s = build_schedule({Collective::kAllReduce, 0, DataType::kF32, ReduceOp::kSum, 0, 6}, RankLayout::flat(6),
                              Algorithm::kRing, {}, ScheduleForm::kSymmetric);
  // Turn the first reduce-scatter receive into a plain receive: contributions go missing.
  Op& op = s.ranks[0].lanes[0].ops[1];
  ASSERT_EQ(op.kind, OpKind::kRecvReduce);
  op.kind = OpKind::kRecv;
  op.src = {};
  validate(s);
  try {
    symbolic_check(s);
    FAIL() << "broken template accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCheckFailed);
    EXPECT_NE(std::string(e.what()).find("ring position 0"), std::string::npos) << e.what();
  }
  // A peer offset that breaks matching is a validation error.
  Schedule t = build_schedule({Collective::kAllReduce, 0, DataType::kF32, ReduceOp::kSum, 0, 6}, RankLayout::flat(6),
                              Algorithm::kRing, {}, ScheduleForm::kSymmetric);
  t.ranks[0].lanes[0].ops[0].peer = 2;
  EXPECT_THROW(validate(t), Error);
}

TEST(Algorithms, RingRoundsAndOpCounts) {
  // n ranks, C channels: each channel has 2(n-1) steps, every rank sends once per step.
  const Schedule s = build_checked_schedule({Collective::kAllReduce, 0, DataType::kF32, ReduceOp::kSum, 0, 8},
                                            RankLayout::flat(8), Algorithm::kRing, {2, 1, Algorithm::kRing});
  EXPECT_EQ(s.chunks_per_block, 16u);
  EXPECT_EQ(s.num_rounds, 14u);
  size_t sends = 0;
  for (const RankProgram& rank : s.ranks) {
    ASSERT_EQ(rank.lanes.size(), 2u);
    for (const Lane& lane : rank.lanes) {
      for (const Op& op : lane.ops) sends += op.kind == OpKind::kSend;
    }
  }
  EXPECT_EQ(sends, 8u * 2u * 14u);
}

TEST(Algorithms, UnsupportedPairsAreClearErrors) {
  const CollectiveSpec spec{Collective::kAllToAll, 0, DataType::kF32, ReduceOp::kSum, 0, 4};
  try {
    build_schedule(spec, RankLayout::flat(4), Algorithm::kRing);
    FAIL() << "ring all_to_all accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_STREQ(e.what(), "algorithm 'ring' does not implement all_to_all; algorithms for all_to_all: direct");
  }
  EXPECT_THROW(build_schedule({Collective::kAllReduce, 0, DataType::kF32, ReduceOp::kSum, 0, 6},
                              RankLayout::nodes(1, 4), Algorithm::kHierarchical),
               Error);
  EXPECT_THROW(build_schedule({Collective::kBroadcast, 0, DataType::kF32, ReduceOp::kSum, 4, 4}, RankLayout::flat(4),
                              Algorithm::kRing),
               Error);
}

// The registry says what each builder builds: every listed collective builds, and every collective
// it does not list is refused up front with the algorithms that do implement it.
TEST(AlgorithmRegistry, ListsExactlyWhatEachBuilderBuilds) {
  ASSERT_EQ(algorithm_registry().size(), all_algorithms().size());
  for (size_t i = 0; i < all_algorithms().size(); ++i) {
    EXPECT_EQ(algorithm_registry()[i].algorithm, all_algorithms()[i]);
  }
  for (const AlgorithmInfo& info : algorithm_registry()) {
    EXPECT_FALSE(info.summary.empty()) << name(info.algorithm);
    EXPECT_EQ(&algorithm_info(info.algorithm), &info);
    for (Collective c : all_collectives()) {
      const CollectiveSpec spec{c, 64, DataType::kF32, ReduceOp::kSum, 0, 4};
      const RankLayout layout = RankLayout::nodes(2, 2);
      if (info.implements(c)) {
        EXPECT_NO_THROW(build_checked_schedule(spec, layout, info.algorithm)) << name(info.algorithm) << " " << name(c);
        continue;
      }
      try {
        build_schedule(spec, layout, info.algorithm);
        ADD_FAILURE() << name(info.algorithm) << " built " << name(c) << ", which the registry does not list";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
        EXPECT_NE(std::string(e.what()).find("algorithms for"), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_THROW(algorithm_info(Algorithm::kAuto), Error);
  EXPECT_TRUE(implements(Algorithm::kAuto, Collective::kAllToAll));
}

// The limits every builder shares are checked once, by the registry, for every algorithm.
TEST(AlgorithmRegistry, SharedLimitsAreCheckedForEveryAlgorithm) {
  auto expect_invalid = [](const CollectiveSpec& spec, const RankLayout& layout, Algorithm a, const AlgoParams& params,
                           const std::string& what) {
    try {
      build_schedule(spec, layout, a, params);
      ADD_FAILURE() << name(a) << " accepted " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << name(a) << " " << what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(name(a)), std::string::npos) << e.what();
    }
  };
  for (const AlgorithmInfo& info : algorithm_registry()) {
    const Algorithm a = info.algorithm;
    const Collective c = info.collectives.front();
    const CollectiveSpec spec{c, 64, DataType::kF32, ReduceOp::kSum, 0, 4};
    const RankLayout layout = RankLayout::nodes(2, 2);
    expect_invalid({c, 64, DataType::kF32, ReduceOp::kSum, 0, 0}, RankLayout::flat(0), a, {}, "0 ranks");
    expect_invalid(spec, RankLayout::flat(3), a, {}, "a layout of 3 ranks");
    expect_invalid({c, 64, DataType::kF32, ReduceOp::kSum, 4, 4}, layout, a, {}, "root 4 of 4");
    expect_invalid({c, 64, DataType::kF32, ReduceOp::kSum, -1, 4}, layout, a, {}, "root -1");
    for (int bad : {0, -1, kMaxAlgorithmChannels + 1}) {
      AlgoParams params;
      params.channels = bad;
      if (info.uses_channels) {
        expect_invalid(spec, layout, a, params, fmt::format("{} channels", bad));
      } else {
        EXPECT_NO_THROW(build_schedule(spec, layout, a, params)) << name(a) << " ignores channels";
      }
    }
    for (int bad : {0, kMaxPipelineChunks + 1}) {
      AlgoParams params;
      params.pipeline_chunks = bad;
      if (info.uses_pipeline_chunks) {
        expect_invalid(spec, layout, a, params, fmt::format("{} pipeline chunks", bad));
      } else {
        EXPECT_NO_THROW(build_schedule(spec, layout, a, params)) << name(a) << " ignores pipeline chunks";
      }
    }
    const CollectiveSpec six{c, 64, DataType::kF32, ReduceOp::kSum, 0, 6};
    if (info.needs_whole_nodes) {
      RankLayout partial;  // 1.5 nodes of 4
      partial.nranks = 6;
      partial.ranks_per_node = 4;
      expect_invalid(six, partial, a, {}, "6 ranks on nodes of 4");
    }
  }
}

TEST(Algorithms, DefaultAlgorithmIsSupported) {
  for (Collective c : all_collectives()) {
    for (int64_t count : {int64_t{1}, int64_t{1} << 24}) {
      for (const RankLayout& layout : {RankLayout::flat(8), RankLayout::nodes(2, 4)}) {
        const CollectiveSpec spec{c, count, DataType::kF32, ReduceOp::kSum, 0, layout.nranks};
        EXPECT_TRUE(implements(default_algorithm(spec, layout), c)) << name(c);
      }
    }
  }
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// NCCL's rings on 2 nodes x 8 GPUs, as its log prints them (nccl-tests #319, search channels 0-3):
// each channel leaves node 0 on the GPU it enters node 1 on.
TEST(NcclRings, MatchNcclsLogOnTwoNodes) {
  const std::vector<std::vector<int>> rings = nccl_rings(2, 8);
  ASSERT_EQ(rings.size(), 8u);
  EXPECT_EQ(rings[0], (std::vector<int>{0, 7, 6, 5, 4, 3, 2, 1, 9, 10, 11, 12, 13, 14, 15, 8}));
  EXPECT_EQ(rings[1], (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 0, 8, 15, 14, 13, 12, 11, 10, 9}));
  EXPECT_EQ(rings[2], (std::vector<int>{2, 1, 0, 7, 6, 5, 4, 3, 11, 12, 13, 14, 15, 8, 9, 10}));
  EXPECT_EQ(rings[3], (std::vector<int>{3, 4, 5, 6, 7, 0, 1, 2, 10, 9, 8, 15, 14, 13, 12, 11}));
}

// On any even node count every hop between nodes stays on one local index (one rail), and over the
// 8 search channels each GPU of a node sends the network hop exactly once: every NIC carries
// traffic. With an odd node count only the hop back to node 0 changes rails.
TEST(NcclRings, EveryNicCarriesTrafficAndHopsStayOnTheirRail) {
  for (int nodes : {2, 3, 4, 5, 16}) {
    for (int m : {2, 4, 8}) {
      const auto rings = nccl_rings(nodes, m);
      std::vector<int> exits(static_cast<size_t>(m), 0);
      for (const auto& ring : rings) {
        const auto n = static_cast<int>(ring.size());
        ASSERT_EQ(n, nodes * m);
        std::vector<int> sorted = ring;
        std::sort(sorted.begin(), sorted.end());
        for (int i = 0; i < n; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
        for (int i = 0; i < n; ++i) {
          const int a = ring[static_cast<size_t>(i)];
          const int b = ring[static_cast<size_t>((i + 1) % n)];
          if (a / m == b / m) continue;
          if (a / m == 0 || nodes == 1) ++exits[static_cast<size_t>(a % m)];
          const bool closing = b / m == 0;
          if (!closing || nodes % 2 == 0) {
            EXPECT_EQ(a % m, b % m) << nodes << "x" << m << ": " << a << " -> " << b;
          }
        }
      }
      if (nodes > 1) {
        for (int g = 0; g < m; ++g) EXPECT_EQ(exits[static_cast<size_t>(g)], 1) << nodes << "x" << m << " GPU " << g;
      }
    }
  }
}

// Channel rings of their own per lane: the symmetric form (one template, an order per lane) equals
// the explicit form op for op, and both pass the checks; the lane-order checks refuse a template
// whose lanes share chunks.
TEST(NcclRings, SymmetricChannelRingsMatchTheExplicitRing) {
  for (auto [nodes, m] : {std::pair{2, 8}, std::pair{3, 4}, std::pair{4, 2}}) {
    const RankLayout layout = RankLayout::nccl(nodes, m);
    const int n = nodes * m;
    const CollectiveSpec spec{Collective::kAllReduce, 0, DataType::kF32, ReduceOp::kSum, 0, n};
    const AlgoParams params{2 * m, 1, Algorithm::kRing};
    const Schedule symmetric = build_checked_schedule(spec, layout, Algorithm::kRing, params, ScheduleForm::kSymmetric);
    ASSERT_EQ(symmetric.symmetry.lane_orders.size(), static_cast<size_t>(2 * m));
    Schedule expanded = expand(symmetric);
    validate(expanded);
    symbolic_check(expanded);
    const Schedule explicit_form = build_checked_schedule(spec, layout, Algorithm::kRing, params);
    expect_same_programs(explicit_form, expanded, std::to_string(nodes) + "x" + std::to_string(m));
    // Lane 1 made to use lane 0's chunks: refused.
    Schedule bad = symmetric;
    for (Op& op : bad.ranks[0].lanes[1].ops) {
      if (op.src.count > 0) op.src.first %= static_cast<uint32_t>(n);
      if (op.dst.count > 0) op.dst.first %= static_cast<uint32_t>(n);
    }
    EXPECT_THROW(validate(bad), Error);
  }
}

// NCCL's trees over nodes with 16 channels: channel c's chain starts on local GPU c mod 8, so
// tree traffic leaves each node on every GPU (and NIC); every (channels, layout) passes the checks.
TEST(NcclTrees, ChannelsSpreadTheHeadsOverTheNode) {
  const CollectiveSpec spec{Collective::kAllReduce, 0, DataType::kF32, ReduceOp::kSum, 0, 32};
  const Schedule tree =
      build_checked_schedule(spec, RankLayout::nodes(4, 8), Algorithm::kTree, {16, 1, Algorithm::kRing});
  std::set<int> senders;  // local GPUs that send to another node
  for (int r = 0; r < 32; ++r) {
    for (const Lane& lane : tree.ranks[static_cast<size_t>(r)].lanes) {
      for (const Op& op : lane.ops) {
        if (op.kind == OpKind::kSend && op.peer / 8 != r / 8) senders.insert(r % 8);
      }
    }
  }
  EXPECT_EQ(senders.size(), 8u);
  for (int channels : {1, 2, 3, 8, 16}) {
    for (auto [nodes, m] : {std::pair{1, 8}, std::pair{3, 4}, std::pair{5, 2}, std::pair{2, 8}}) {
      const CollectiveSpec s{Collective::kAllReduce, 0, DataType::kF32, ReduceOp::kSum, 0, nodes * m};
      EXPECT_NO_THROW(
          build_checked_schedule(s, RankLayout::nodes(nodes, m), Algorithm::kTree, {channels, 2, Algorithm::kRing}))
          << channels << " channels, " << nodes << "x" << m;
    }
  }
}

}  // namespace
}  // namespace tandem
