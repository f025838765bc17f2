// Physical lower bounds against hand-computed cases, and their route latencies against
// Topology::route.
#include <gtest/gtest.h>

#include <algorithm>

#include "models/bounds.h"
#include "models/cluster.h"

namespace tandem::models {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr double kS = static_cast<double>(kGiB);

ClusterSpec dgx_h100(int nodes) {
  ClusterSpec spec = cluster_preset("dgx-h100");
  spec.nodes = nodes;
  return spec;
}

TEST(Bounds, OneDgxH100AllReduce) {
  const CollectiveBounds b = collective_bounds(Collective::kAllReduce, kGiB, dgx_h100(1));
  const CollectiveBound& plain = b.without_in_network_reduction;
  ASSERT_EQ(plain.cuts.size(), 1u);
  EXPECT_EQ(plain.cuts[0].cut, "GPU links");
  EXPECT_EQ(plain.cuts[0].parts, 8);
  EXPECT_DOUBLE_EQ(plain.cuts[0].bytes, 2 * 7.0 / 8 * kS);  // 1,879,048,192 B
  EXPECT_DOUBLE_EQ(plain.cuts[0].capacity_Bps, 450e9);      // NVLink only: routes inside a node never use the NIC
  EXPECT_NEAR(plain.bandwidth_s, 4.17566264888889e-3, 1e-15);
  EXPECT_DOUBLE_EQ(plain.first_byte_s, 0.5e-6);
  EXPECT_DOUBLE_EQ(plain.dependency_s, 0.5e-6);
  EXPECT_NEAR(plain.time_s, 0.5e-6 + 4.17566264888889e-3, 1e-15);
  EXPECT_EQ(plain.pairwise_steps, 3);
  EXPECT_NEAR(plain.pairwise_latency_s, 1.5e-6, 1e-18);
  ASSERT_TRUE(b.with_in_network_reduction.has_value());
  EXPECT_NEAR(b.with_in_network_reduction->bandwidth_s, kS / 450e9, 1e-15);  // 2.386 ms: S once each way
}

TEST(Bounds, EightDgxH100AllReduceIsBoundByTheNics) {
  const CollectiveBounds b = collective_bounds(Collective::kAllReduce, kGiB, dgx_h100(8));
  const CollectiveBound& plain = b.without_in_network_reduction;
  ASSERT_EQ(plain.cuts.size(), 2u);  // one leaf group: no group cut
  // GPU: 2 x 63/64 S over 450 (NVLink) + 50 (its NIC share) GB/s.
  EXPECT_DOUBLE_EQ(plain.cuts[0].capacity_Bps, 500e9);
  EXPECT_NEAR(plain.cuts[0].time_s, 2 * 63.0 / 64 * kS / 500e9, 1e-15);  // 4.228 ms
  // Node: 2 x 7/8 S over 8 x 50 GB/s.
  EXPECT_EQ(plain.cuts[1].cut, "node NICs");
  EXPECT_EQ(plain.cuts[1].parts, 8);
  EXPECT_DOUBLE_EQ(plain.cuts[1].capacity_Bps, 400e9);
  EXPECT_NEAR(plain.cuts[1].time_s, 4.69762048e-3, 1e-15);
  EXPECT_EQ(plain.binding, 1);
  EXPECT_NEAR(plain.bandwidth_s, 4.69762048e-3, 1e-15);
  EXPECT_DOUBLE_EQ(plain.first_byte_s, 0.5e-6);
  EXPECT_NEAR(plain.dependency_s, 2.6e-6, 1e-18);  // across rails, through a spine
  EXPECT_NEAR(plain.time_s, 0.5e-6 + 4.69762048e-3, 1e-15);
  EXPECT_EQ(plain.pairwise_steps, 6);
  EXPECT_NEAR(plain.pairwise_latency_s, 5 * 0.5e-6 + 1.6e-6, 1e-18);
  // In-network reduction: S per node over 400 GB/s = 2.684 ms.
  EXPECT_NEAR(b.with_in_network_reduction->bandwidth_s, kS / 400e9, 1e-15);
}

TEST(Bounds, OversubscribedUplinksBindAllToAll) {
  // 64 nodes = 2 SUs of 32; 16:1 leaves: each of a group's 8 leaves has 32 x 50 / 16 = 100 GB/s up.
  ClusterSpec spec = dgx_h100(64);
  spec.oversubscription = 16;
  const uint64_t mib = uint64_t{1} << 20;
  const CollectiveBound a2a = collective_bounds(Collective::kAllToAll, mib, spec).without_in_network_reduction;
  ASSERT_EQ(a2a.cuts.size(), 3u);
  const CutBound& group = a2a.cuts[2];
  EXPECT_EQ(group.cut, "leaf-group uplinks");
  EXPECT_EQ(group.parts, 2);
  EXPECT_DOUBLE_EQ(group.capacity_Bps, 800e9);
  EXPECT_DOUBLE_EQ(group.bytes, 256 * 0.5 * mib);  // half of 256 GPUs' data leaves the group
  EXPECT_NEAR(group.time_s, 1.6777216e-4, 1e-15);
  EXPECT_NEAR(a2a.cuts[1].time_s, 8 * 63.0 / 64 * mib / 400e9, 1e-15);  // node NICs: 2.06e-5 s
  EXPECT_EQ(a2a.binding, 2);
  EXPECT_FALSE(collective_bounds(Collective::kAllToAll, mib, spec).with_in_network_reduction.has_value());
  // The same all_reduce is bound by the node NICs: a group pre-reduces before its uplinks.
  EXPECT_EQ(collective_bounds(Collective::kAllReduce, mib, spec).without_in_network_reduction.binding, 1);
}

TEST(Bounds, OtherCollectives) {
  const ClusterSpec spec = dgx_h100(2);
  const CollectiveBound ag = collective_bounds(Collective::kAllGather, kGiB, spec).without_in_network_reduction;
  EXPECT_NEAR(ag.cuts[1].time_s, 0.5 * kS / 400e9, 1e-15);     // node NICs: (2-1)/2 of the total
  EXPECT_NEAR(ag.bandwidth_s, 15.0 / 16 * kS / 500e9, 1e-15);  // the GPU must receive 15/16 of it
  const CollectiveBound bc = collective_bounds(Collective::kBroadcast, kGiB, spec).without_in_network_reduction;
  EXPECT_NEAR(bc.bandwidth_s, kS / 400e9, 1e-15);
  const CollectiveBound one = collective_bounds(Collective::kAllReduce, kGiB,
                                                [] {
                                                  ClusterSpec s = cluster_preset("dgx-h100");
                                                  s.gpus_per_node = 1;
                                                  s.nics_per_node = 1;
                                                  return s;
                                                }())
                                  .without_in_network_reduction;
  EXPECT_TRUE(one.cuts.empty());
  EXPECT_EQ(one.time_s, 0);
}

// The latencies the bounds assume are those of the routes.
TEST(Bounds, LatenciesAreThoseOfTheRoutes) {
  std::vector<ClusterSpec> specs = {dgx_h100(4), dgx_h100(1), cluster_preset("hgx-a100")};
  specs[2].nodes = 8;
  specs[2].fabric = Fabric::kFatTree;
  specs.push_back(dgx_h100(3));
  specs.back().fabric = Fabric::kSingleSwitch;
  specs.push_back(dgx_h100(4));
  specs.back().nodes_per_leaf = 1;  // every inter-node route climbs to a spine
  specs.push_back(dgx_h100(4));
  specs.back().nics_per_node = 1;  // one leaf for everyone: no spine at all
  for (const ClusterSpec& spec : specs) {
    const Topology topo = build_cluster(spec);
    double shortest = 1e300, longest = 0;
    for (int src = 0; src < topo.gpu_count(); ++src) {
      for (int dst = 0; dst < topo.gpu_count(); ++dst) {
        if (src == dst) continue;
        const double latency = topo.route(src, dst).latency_s;
        shortest = std::min(shortest, latency);
        longest = std::max(longest, latency);
      }
    }
    const CollectiveBound b = collective_bounds(Collective::kAllReduce, 1, spec).without_in_network_reduction;
    EXPECT_NEAR(b.first_byte_s, shortest, 1e-15) << topo.description();
    EXPECT_NEAR(b.dependency_s, longest, 1e-15) << topo.description();
  }
}

}  // namespace
}  // namespace tandem::models
