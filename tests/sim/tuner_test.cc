// sim::Tuner (sim/tuner.cc): `auto` picks PAT exactly where NCCL's tuner would (all_gather and
// reduce_scatter with one GPU per node, at sizes where its model says PAT is fastest), never with
// several GPUs per node or for all_reduce; a forced "pat" runs Simple on one lane; and a sweep runs
// the picked PAT schedule on the simulated cluster at the alpha-beta time of its log2 n messages.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "models/cluster.h"
#include "models/cost_model.h"
#include "models/topology.h"
#include "sim/sweep.h"
#include "sim/tuner.h"

namespace tandem::sim {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

models::ClusterSpec h100() { return models::cluster_preset("dgx-h100"); }

// The cluster as the tuner's model sees it with `gpus` GPUs of each of `nodes` nodes taking part.
models::ClusterSpec participating(int nodes, int gpus) {
  models::ClusterSpec spec = h100();
  spec.nics_per_node = spec.nics_per_node * gpus / spec.gpus_per_node;
  spec.nodes = nodes;
  spec.gpus_per_node = gpus;
  return spec;
}

TEST(Tuner, AutoPicksPatForAllGatherAndReduceScatterOnOneGpuPerNode) {
  const Tuner tuner(h100(), 16, 1);
  const models::NcclCostModel model(participating(16, 1));
  for (Collective c : {Collective::kAllGather, Collective::kReduceScatter}) {
    SCOPED_TRACE(name(c));
    const Choice choice = tuner.choose(c, kMiB);
    EXPECT_EQ(name(choice.algorithm), "pat");
    EXPECT_EQ(choice.protocol, models::NcclProtocol::kSimple);
    EXPECT_EQ(choice.channels, 1);  // tandem's PAT schedule is one lane
    EXPECT_EQ(choice.tiles, 1u);
    // NCCL's own pick over every algorithm agrees, and PAT beats ring in its model at this size.
    const auto nccl = model.select(c, kMiB);
    ASSERT_TRUE(nccl.has_value());
    EXPECT_EQ(nccl->algorithm, models::NcclAlgorithm::kPat);
    const double pat = *model.time_us(c, kMiB, models::NcclAlgorithm::kPat, models::NcclProtocol::kSimple);
    for (models::NcclProtocol p : models::all_nccl_protocols()) {
      const auto ring = model.time_us(c, kMiB, models::NcclAlgorithm::kRing, p);
      if (ring) {
        EXPECT_LT(pat, *ring) << name(p);
      }
    }
    // At 1 GiB bandwidth decides: PAT's 0.75 bus-bandwidth factor loses to the ring.
    EXPECT_EQ(name(tuner.choose(c, kGiB).algorithm), "ring");
  }
  EXPECT_NE(name(tuner.choose(Collective::kAllReduce, kMiB).algorithm), "pat");
}

TEST(Tuner, NeverPatWithSeveralGpusPerNode) {
  for (int gpus : {2, 8}) {
    for (int nodes : {1, 2, 16}) {
      const Tuner tuner(h100(), nodes, gpus);
      for (Collective c : {Collective::kAllGather, Collective::kReduceScatter, Collective::kAllReduce}) {
        for (int64_t bytes = 8; bytes <= kGiB; bytes *= 8) {
          EXPECT_NE(name(tuner.choose(c, bytes).algorithm), "pat")
              << name(c) << " " << bytes << " B, " << nodes << " x " << gpus;
        }
      }
    }
  }
}

TEST(Tuner, ForcedPatRunsSimple) {
  for (int gpus : {1, 8}) {
    const Choice choice = Tuner(h100(), 4, gpus).choose_for(Collective::kReduceScatter, 64 * kMiB, parse_sim_algorithm("pat"));
    EXPECT_EQ(name(choice.algorithm), "pat");
    EXPECT_EQ(choice.protocol, models::NcclProtocol::kSimple);
    EXPECT_EQ(choice.channels, 1);
  }
  try {
    Tuner(h100(), 4, 1).choose_for(Collective::kAllReduce, kMiB, parse_sim_algorithm("pat"));
    FAIL() << "pat all_reduce accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
}

// 16 nodes x 1 GPU, ideal network (no protocol latencies or efficiencies): the auto-picked PAT
// all_gather of S bytes sends its 4 messages of 1, 2, 4, 8 blocks of S/16 one after the other,
// each one route latency plus its bytes at the NIC's rate, and one lane copies 29 blocks at HBM
// speed (2 bytes of traffic per byte): its own block into Output, then each message of 2, 4, 8
// blocks packed and unpacked.
TEST(Tuner, SweepRunsThePickedPatScheduleAtItsAlphaBetaTime) {
  SweepRequest request;
  request.cluster = h100();
  request.cluster.nodes = 16;
  request.gpus_per_node = 1;
  request.network = NetworkModel::ideal();
  SweepPoint point;
  point.collective = Collective::kAllGather;
  point.bytes = kMiB;
  request.points = {point};
  const std::vector<SweepPointResult> results = run_sweep(request);
  ASSERT_EQ(results.size(), 1u);
  ASSERT_TRUE(results[0].ok) << results[0].error;
  EXPECT_EQ(name_or_auto(results[0].algorithm), "pat");

  const models::Topology topology = models::build_cluster(request.cluster);
  const int per_node = topology.gpus_per_node();
  // Rank r is GPU r * per_node (the first GPU of node r); every pair of nodes routes alike here.
  const models::Route route = topology.route(0, per_node);
  const double block_bytes = static_cast<double>(kMiB) / 16;
  double expected = 0;
  for (int blocks : {1, 2, 4, 8}) expected += route.latency_s + blocks * block_bytes / route.bottleneck_Bps;
  constexpr int kCopiedBlocks = 1 + 2 * (2 + 4 + 8);
  expected += kCopiedBlocks * 2 * block_bytes / request.cluster.gpu.hbm_Bps;
  EXPECT_NEAR(results[0].seconds, expected, expected * 1e-6);
}

}  // namespace
}  // namespace tandem::sim
