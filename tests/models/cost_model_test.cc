// NCCL's cost model against values derived by hand from NCCL 2.28's constants
// (shared/docs/nccl-notes.md section 1.3): tiny all_reduce latencies on one and sixteen DGX H100s,
// the graphs the search model finds, bandwidths, corrections, skips and the tuner's choice.
#include <gtest/gtest.h>

#include "core/error.h"
#include "models/cost_model.h"

namespace tandem::models {
namespace {

constexpr double kTolerance_us = 0.1;
constexpr uint64_t kTiny = 8;  // bytes: the bandwidth term is ~1e-4 µs
constexpr uint64_t kGiB = uint64_t{1} << 30;

ClusterSpec dgx_h100(int nodes) {
  ClusterSpec spec = cluster_preset("dgx-h100");
  spec.nodes = nodes;
  return spec;
}

double time_us(const NcclCostModel& model, Collective c, uint64_t bytes, NcclAlgorithm a, NcclProtocol p) {
  const std::optional<double> t = model.time_us(c, bytes, a, p);
  EXPECT_TRUE(t.has_value()) << name(a) << "/" << name(p) << ": " << model.unsupported_reason(c, a, p);
  return t.value_or(-1);
}

TEST(NcclCostModel, SingleNodeTinyAllReduceMatchesTheDerivedLatencies) {
  const NcclCostModel model(dgx_h100(1));
  const Collective ar = Collective::kAllReduce;
  EXPECT_NEAR(time_us(model, ar, kTiny, NcclAlgorithm::kRing, NcclProtocol::kLL), 15.0, kTolerance_us);
  EXPECT_NEAR(time_us(model, ar, kTiny, NcclAlgorithm::kTree, NcclProtocol::kLL), 15.2, kTolerance_us);
  EXPECT_NEAR(time_us(model, ar, kTiny, NcclAlgorithm::kRing, NcclProtocol::kLL128), 40.6, kTolerance_us);
  EXPECT_NEAR(time_us(model, ar, kTiny, NcclAlgorithm::kRing, NcclProtocol::kSimple), 56.0, kTolerance_us);
  EXPECT_NEAR(time_us(model, ar, kTiny, NcclAlgorithm::kNvls, NcclProtocol::kSimple), 25.0, kTolerance_us);
  // The latency tables themselves, exactly.
  EXPECT_DOUBLE_EQ(model.latency_us(ar, NcclAlgorithm::kRing, NcclProtocol::kLL), 6.6 + 14 * 0.6);
  EXPECT_DOUBLE_EQ(model.latency_us(ar, NcclAlgorithm::kTree, NcclProtocol::kLL128), 14.0 + 2 * 7 * 1.25);
  EXPECT_DOUBLE_EQ(model.latency_us(ar, NcclAlgorithm::kTree, NcclProtocol::kSimple), 8.4 + 2 * 7 * 4.0);
  // Ring/LL wins the tiny message, as NCCL picks it.
  const std::optional<NcclPrediction> pick = model.select(ar, kTiny);
  ASSERT_TRUE(pick.has_value());
  EXPECT_EQ(pick->algorithm, NcclAlgorithm::kRing);
  EXPECT_EQ(pick->protocol, NcclProtocol::kLL);
  EXPECT_NEAR(pick->time_us, 15.0, kTolerance_us);
}

TEST(NcclCostModel, SixteenNodesTinyAllReduceMatchesTheDerivedLatencies) {
  const NcclCostModel model(dgx_h100(16));
  const Collective ar = Collective::kAllReduce;
  EXPECT_NEAR(time_us(model, ar, kTiny, NcclAlgorithm::kRing, NcclProtocol::kLL), 311.6, kTolerance_us);
  EXPECT_NEAR(time_us(model, ar, kTiny, NcclAlgorithm::kTree, NcclProtocol::kLL), 55.2, kTolerance_us);
  const std::optional<NcclPrediction> pick = model.select(ar, kTiny);
  ASSERT_TRUE(pick.has_value());
  EXPECT_EQ(pick->algorithm, NcclAlgorithm::kTree);
  EXPECT_EQ(pick->protocol, NcclProtocol::kLL);
  // NVLS Tree: 25 + 2 log2(16) 20.9 (the 2.28 NET NVLSTree latency).
  EXPECT_DOUBLE_EQ(model.latency_us(ar, NcclAlgorithm::kNvlsTree, NcclProtocol::kSimple), 25 + 2 * 4 * 20.9);
  // AMD hosts pay 2 µs of network overhead per intra-node ring step instead of 1.
  ClusterSpec amd = dgx_h100(16);
  amd.cpu = CpuVendor::kAmd;
  EXPECT_NEAR(NcclCostModel(amd).latency_us(ar, NcclAlgorithm::kRing, NcclProtocol::kLL), 6.6 + 224 * 2.0 + 30 * 2.7,
              1e-9);
}

TEST(NcclCostModel, SearchModelGraphs) {
  {  // One DGX H100: 6 x 60 GB/s fits 370.8 GB/s of NVLink, duplicated to 12 x 30.
    const NcclCostModel model(dgx_h100(1));
    const NcclGraph& ring = model.graph(NcclAlgorithm::kRing);
    EXPECT_EQ(ring.channels, 12);
    EXPECT_DOUBLE_EQ(ring.bw_intra_GBps, 30);
    EXPECT_EQ(model.comm_channels(), 24);
    // NVLS: 8 heads; 9 x 40 <= 370.8 < 9 x 42; the inter speed climbs to 60.
    const NcclGraph& nvls = model.graph(NcclAlgorithm::kNvls);
    EXPECT_EQ(nvls.channels, 8);
    EXPECT_DOUBLE_EQ(nvls.bw_intra_GBps, 40);
    EXPECT_DOUBLE_EQ(nvls.bw_inter_GBps, 60);
  }
  {  // Several DGX H100: one channel per NIC at 48 GB/s (PCIe Gen5 in NCCL's model), no duplication.
    const NcclCostModel model(dgx_h100(16));
    const NcclGraph& ring = model.graph(NcclAlgorithm::kRing);
    EXPECT_EQ(ring.channels, 8);
    EXPECT_DOUBLE_EQ(ring.bw_inter_GBps, 48);
    EXPECT_EQ(model.comm_channels(), 16);
    EXPECT_DOUBLE_EQ(model.graph(NcclAlgorithm::kNvlsTree).bw_intra_GBps, 40);
    EXPECT_DOUBLE_EQ(model.graph(NcclAlgorithm::kNvlsTree).bw_inter_GBps, 48);
  }
  {  // HGX A100: 12 NVLinks x 20 = 240 GB/s -> 6 x 40, duplicated to 12 x 20; across nodes 8 x 24.
    ClusterSpec spec = cluster_preset("hgx-a100");
    const NcclGraph one = NcclCostModel(spec).graph(NcclAlgorithm::kRing);
    EXPECT_EQ(one.channels, 12);
    EXPECT_DOUBLE_EQ(one.bw_intra_GBps, 20);
    spec.nodes = 4;
    const NcclGraph four = NcclCostModel(spec).graph(NcclAlgorithm::kRing);
    EXPECT_EQ(four.channels, 8);
    EXPECT_DOUBLE_EQ(four.bw_inter_GBps, 24);
    EXPECT_EQ(NcclCostModel(spec).graph(NcclAlgorithm::kNvls).channels, 0);
  }
}

TEST(NcclCostModel, BandwidthsAndLargeMessages) {
  const NcclCostModel one(dgx_h100(1));
  const Collective ar = Collective::kAllReduce;
  // Ring: 12 x 30 = 360 GB/s bus bandwidth, x n / (2(n-1)) = 8/14 for the algorithm bandwidth.
  EXPECT_NEAR(one.bandwidth_GBps(ar, NcclAlgorithm::kRing, NcclProtocol::kSimple), 360.0 * 8 / 14, 1e-9);
  EXPECT_NEAR(one.bandwidth_GBps(ar, NcclAlgorithm::kRing, NcclProtocol::kLL), 141.0 * 8 / 14, 1e-9);
  EXPECT_NEAR(one.bandwidth_GBps(ar, NcclAlgorithm::kRing, NcclProtocol::kLL128), 360.0 * 0.92 * 8 / 14, 1e-9);
  // NVLS: 8 x (40 x 0.85 x 7/8 x 2) = 476 GB/s bus bandwidth (measured ~480), algbw 272.
  EXPECT_NEAR(one.bandwidth_GBps(ar, NcclAlgorithm::kNvls, NcclProtocol::kSimple), 272.0, 1e-9);
  // Tree: min(0.92 x 360, 12 x 38.7) x 0.5.
  EXPECT_NEAR(one.bandwidth_GBps(ar, NcclAlgorithm::kTree, NcclProtocol::kSimple), 0.92 * 360 * 0.5, 1e-9);
  const double bytes = static_cast<double>(kGiB);
  EXPECT_NEAR(time_us(one, ar, kGiB, NcclAlgorithm::kRing, NcclProtocol::kSimple),
              56.0 + bytes / (1000 * 360.0 * 8 / 14), 1e-6);
  const std::optional<NcclPrediction> big = one.select(ar, kGiB);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->algorithm, NcclAlgorithm::kNvls);
  EXPECT_NEAR(big->time_us, 25.0 + bytes / 272000.0, 1e-6);

  // Tree correction: 1 MiB is log2(2^20 / 64) = 14, LL factor 0.5, Simple 0.5.
  const uint64_t mib = uint64_t{1} << 20;
  EXPECT_NEAR(time_us(one, ar, mib, NcclAlgorithm::kTree, NcclProtocol::kSimple),
              64.4 + static_cast<double>(mib) / (1000 * 0.92 * 360 * 0.5 * 0.5), 1e-6);

  // Multi-node ring Simple plateau: latency x 1.4 once bytes / (16 channels x 128 ranks) >= 64.
  const NcclCostModel sixteen(dgx_h100(16));
  const double ring_simple_latency = 8.4 + 224 * 3.4 + 30 * 14.0;
  EXPECT_NEAR(sixteen.latency_us(ar, NcclAlgorithm::kRing, NcclProtocol::kSimple), ring_simple_latency, 1e-9);
  const double bw = 384.0 * 128 / 254;
  EXPECT_NEAR(time_us(sixteen, ar, 131071, NcclAlgorithm::kRing, NcclProtocol::kSimple),
              ring_simple_latency + 131071 / (1000 * bw), 1e-6);
  EXPECT_NEAR(time_us(sixteen, ar, 131072, NcclAlgorithm::kRing, NcclProtocol::kSimple),
              ring_simple_latency * 1.4 + 131072 / (1000 * bw), 1e-6);
  // NVLS Tree across >2 nodes is capped by perChMaxNVLSTreeBw (45.5 on Hopper).
  EXPECT_NEAR(sixteen.bandwidth_GBps(ar, NcclAlgorithm::kNvlsTree, NcclProtocol::kSimple), 8 * 45.5 * 128 / 254, 1e-9);
}

TEST(NcclCostModel, SkipsWhatNcclSkips) {
  const NcclCostModel one(dgx_h100(1));
  const NcclCostModel sixteen(dgx_h100(16));
  const Collective ar = Collective::kAllReduce;
  auto reason = [](const NcclCostModel& m, Collective c, NcclAlgorithm a, NcclProtocol p) {
    return m.unsupported_reason(c, a, p);
  };
  EXPECT_EQ(reason(one, ar, NcclAlgorithm::kNvlsTree, NcclProtocol::kSimple), "NVLS Tree needs more than one node");
  EXPECT_FALSE(one.time_us(ar, kTiny, NcclAlgorithm::kNvlsTree, NcclProtocol::kSimple).has_value());
  EXPECT_EQ(reason(one, ar, NcclAlgorithm::kNvls, NcclProtocol::kLL), "nvls runs the Simple protocol only");
  EXPECT_EQ(reason(sixteen, ar, NcclAlgorithm::kNvls, NcclProtocol::kSimple),
            "NVLS across nodes needs CollNet (SHARP)");
  EXPECT_EQ(reason(sixteen, ar, NcclAlgorithm::kCollNetDirect, NcclProtocol::kSimple),
            "CollNet needs in-network reduction (SHARP)");
  EXPECT_EQ(reason(one, Collective::kBroadcast, NcclAlgorithm::kTree, NcclProtocol::kLL),
            "NCCL runs broadcast as a ring only");
  EXPECT_EQ(reason(one, Collective::kAllGather, NcclAlgorithm::kTree, NcclProtocol::kSimple),
            "NCCL has no tree all_gather");
  EXPECT_EQ(reason(one, ar, NcclAlgorithm::kPat, NcclProtocol::kSimple),
            "PAT covers all_gather and reduce_scatter only");
  EXPECT_EQ(reason(one, Collective::kAllGather, NcclAlgorithm::kPat, NcclProtocol::kSimple),
            "PAT needs one GPU per node");
  EXPECT_EQ(reason(sixteen, Collective::kAllGather, NcclAlgorithm::kNvls, NcclProtocol::kSimple),
            "NVLS across nodes needs CollNet (SHARP)");
  EXPECT_EQ(reason(one, ar, NcclAlgorithm::kRing, NcclProtocol::kLL128), "");
  EXPECT_FALSE(one.select(Collective::kAllToAll, kGiB).has_value());
  EXPECT_NE(reason(one, Collective::kSendRecv, NcclAlgorithm::kRing, NcclProtocol::kSimple).find("point-to-point"),
            std::string::npos);
  // A100 has no NVLS.
  EXPECT_NE(reason(NcclCostModel(cluster_preset("hgx-a100")), ar, NcclAlgorithm::kNvls, NcclProtocol::kSimple)
                .find("NVSwitch multicast"),
            std::string::npos);
  // Broadcast, reduce: ring only, one step's latency on top of the base.
  EXPECT_DOUBLE_EQ(one.latency_us(Collective::kBroadcast, NcclAlgorithm::kRing, NcclProtocol::kSimple), 8.4 + 3.4);
  // all_gather on one node: ring and NVLS ((n-1)/n of the NVLS intra bandwidth).
  EXPECT_DOUBLE_EQ(one.latency_us(Collective::kAllGather, NcclAlgorithm::kRing, NcclProtocol::kLL), 6.6 + 7 * 0.6);
  // (NCCL does not convert a non-ring all_gather's bus bandwidth to algorithm bandwidth.)
  EXPECT_NEAR(one.bandwidth_GBps(Collective::kAllGather, NcclAlgorithm::kNvls, NcclProtocol::kSimple),
              8 * 40 * 0.85 * 7 / 8 * 7 / 8, 1e-9);
}

TEST(NcclCostModel, WithSharpCollNetAndMultiNodeNvlsAppear) {
  ClusterSpec spec = dgx_h100(16);
  spec.sharp = true;
  const NcclCostModel model(spec);
  const Collective ar = Collective::kAllReduce;
  EXPECT_EQ(model.unsupported_reason(ar, NcclAlgorithm::kNvls, NcclProtocol::kSimple), "");
  EXPECT_DOUBLE_EQ(model.latency_us(ar, NcclAlgorithm::kNvls, NcclProtocol::kSimple), 25 + 18);
  // CollNet Direct: 2 (3.7 + 7 x 0.4) + 31; 8 x 48 x 0.85 x 0.5 GB/s.
  EXPECT_NEAR(model.latency_us(ar, NcclAlgorithm::kCollNetDirect, NcclProtocol::kSimple), 2 * (3.7 + 2.8) + 31, 1e-9);
  EXPECT_NEAR(model.bandwidth_GBps(ar, NcclAlgorithm::kCollNetDirect, NcclProtocol::kSimple), 8 * 48 * 0.85 * 0.5,
              1e-9);
  EXPECT_EQ(model.unsupported_reason(ar, NcclAlgorithm::kCollNetChain, NcclProtocol::kLL),
            "collnet_chain runs the Simple protocol only");
}

TEST(NcclCostModel, OneGpuPerNodeEnablesPat) {
  ClusterSpec spec = dgx_h100(4);
  spec.gpus_per_node = 1;
  spec.nics_per_node = 1;
  const NcclCostModel model(spec);
  const Collective ag = Collective::kAllGather;
  // Ring graph: one channel at 48 GB/s, duplicated to 2 x 24.
  EXPECT_EQ(model.graph(NcclAlgorithm::kRing).channels, 2);
  // PAT: 8 + log2(4) x 14/3.5 + 4 x 2.8 (the tree's NET latency with one GPU per node).
  EXPECT_NEAR(model.latency_us(ag, NcclAlgorithm::kPat, NcclProtocol::kSimple), 8 + 2 * 4.0 + 4 * 2.8, 1e-9);
  EXPECT_NEAR(model.bandwidth_GBps(ag, NcclAlgorithm::kPat, NcclProtocol::kSimple), 2 * 24 * 0.75, 1e-9);
  // Ring LL: 3 network steps at the tree's NET LL latency, 5 µs.
  EXPECT_NEAR(model.latency_us(ag, NcclAlgorithm::kRing, NcclProtocol::kLL), 6.6 + 3 * 5.0, 1e-9);
}

TEST(NcclCostModel, OneRankIsFree) {
  ClusterSpec spec = dgx_h100(1);
  spec.gpus_per_node = 1;
  spec.nics_per_node = 1;
  const NcclCostModel model(spec);
  EXPECT_EQ(model.time_us(Collective::kAllReduce, kGiB, NcclAlgorithm::kRing, NcclProtocol::kSimple), 0.0);
  EXPECT_FALSE(model.time_us(Collective::kAllReduce, kGiB, NcclAlgorithm::kTree, NcclProtocol::kLL).has_value());
  const std::optional<NcclPrediction> pick = nccl_select(spec, Collective::kAllReduce, kGiB);
  ASSERT_TRUE(pick.has_value());
  EXPECT_EQ(pick->algorithm, NcclAlgorithm::kRing);
  EXPECT_EQ(pick->time_us, 0.0);
}

TEST(NcclCostModel, Names) {
  EXPECT_EQ(all_nccl_algorithms().size(), 7u);
  EXPECT_EQ(name(NcclAlgorithm::kCollNetDirect), "collnet_direct");
  EXPECT_EQ(name(NcclAlgorithm::kNvlsTree), "nvls_tree");
  EXPECT_EQ(name(NcclProtocol::kLL128), "LL128");
  EXPECT_EQ(nccl_time_us(dgx_h100(1), Collective::kAllReduce, kTiny, NcclAlgorithm::kNvlsTree, NcclProtocol::kSimple),
            std::nullopt);
}

}  // namespace
}  // namespace tandem::models
