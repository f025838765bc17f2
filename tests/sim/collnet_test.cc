// CollNet (InfiniBand SHARP) all_reduce as the simulator models it (Simulator::run_collnet_all_reduce):
// the tuner offers it only on SHARP clusters of 2 nodes or more, a forced CollNet without SHARP is
// one clear error, and its time never beats the physical bound with in-network reduction.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "core/error.h"
#include "models/bounds.h"
#include "models/cluster.h"
#include "sim/sweep.h"
#include "sim/tuner.h"

namespace tandem::sim {
namespace {

models::ClusterSpec h100(int nodes, bool sharp) {
  models::ClusterSpec cluster = models::cluster_preset("dgx-h100");
  cluster.nodes = nodes;
  cluster.sharp = sharp;
  return cluster;
}

bool collnet(SimAlgorithm algorithm) { return name(algorithm).starts_with("collnet"); }

// NCCL's collNetSupport and COLLNET_NODE_THRESHOLD: CollNet needs SHARP and 2 nodes or more.
TEST(CollNet, PickedOnlyWithSharpAcrossNodes) {
  for (int64_t bytes : {int64_t{8}, int64_t{1} << 20, int64_t{1} << 30, int64_t{4} << 30}) {
    for (int nodes : {1, 2, 16}) {
      EXPECT_FALSE(collnet(Tuner(h100(nodes, false), nodes, 8).choose(Collective::kAllReduce, bytes).algorithm))
          << nodes << " nodes without SHARP, " << bytes << " B";
    }
    EXPECT_FALSE(collnet(Tuner(h100(1, true), 1, 8).choose(Collective::kAllReduce, bytes).algorithm)) << bytes;
  }
  // With SHARP on 16 nodes NCCL's model prefers CollNet for a large all_reduce (its bandwidth is
  // the NICs', not half of it), and never offers it for all_gather.
  EXPECT_TRUE(collnet(Tuner(h100(16, true), 16, 8).choose(Collective::kAllReduce, int64_t{4} << 30).algorithm));
  EXPECT_FALSE(collnet(Tuner(h100(16, true), 16, 8).choose(Collective::kAllGather, int64_t{4} << 30).algorithm));
}

TEST(CollNet, ForcedWithoutSharpIsOneClearError) {
  const Tuner tuner(h100(16, false), 16, 8);
  for (const char* algorithm : {"collnet_direct", "collnet_chain"}) {
    try {
      tuner.choose_for(Collective::kAllReduce, int64_t{1} << 30, parse_sim_algorithm(algorithm));
      ADD_FAILURE() << algorithm << " accepted without SHARP";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      const std::string what = e.what();
      EXPECT_NE(what.find("SHARP"), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  EXPECT_THROW(Tuner(h100(16, true), 16, 8).choose_for(Collective::kAllGather, 1 << 20, parse_sim_algorithm("collnet_direct")), Error);
  EXPECT_NO_THROW(Tuner(h100(16, true), 16, 8).choose_for(Collective::kAllReduce, 1 << 20, parse_sim_algorithm("collnet_chain")));
}

// Above the bound with in-network reduction, below the ring's time at 4 GiB on 16 nodes (the ring
// moves 2 (n-1)/n of the buffer through the NICs, CollNet each slice once).
TEST(CollNet, TimeIsAboveTheBoundAndBeatsTheRing) {
  const int64_t bytes = int64_t{4} << 30;
  SweepRequest request;
  request.cluster = h100(16, true);
  for (const char* algorithm : {"collnet_direct", "collnet_chain", "ring"}) {
    SweepPoint point;
    point.collective = Collective::kAllReduce;
    point.bytes = bytes;
    point.algorithm = parse_sim_algorithm(algorithm);
    point.dtype = DataType::kF32;
    request.points.push_back(point);
  }
  const std::vector<SweepPointResult> results = run_sweep(request);
  ASSERT_EQ(results.size(), 3u);
  const models::CollectiveBounds bounds =
      models::collective_bounds(Collective::kAllReduce, static_cast<uint64_t>(bytes), request.cluster);
  ASSERT_TRUE(bounds.with_in_network_reduction.has_value());
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(results[i].ok) << results[i].error;
    EXPECT_EQ(results[i].algorithm, request.points[i].algorithm);
    EXPECT_GE(results[i].seconds, bounds.with_in_network_reduction->time_s);
    EXPECT_LT(results[i].seconds, results[2].seconds) << name_or_auto(results[i].algorithm);
    std::printf("%s 4 GiB on 16 x 8 H100 + SHARP: %.0f us (bound %.0f us, ring %.0f us)\n",
                std::string(name_or_auto(results[i].algorithm)).c_str(), results[i].seconds * 1e6, bounds.with_in_network_reduction->time_s * 1e6,
                results[2].seconds * 1e6);
  }
}

}  // namespace
}  // namespace tandem::sim
