// Training steps on the simulator: collectives timed on their groups (concurrent instances
// included), the step laid out, and the figures a user reads (step time, breakdown, MFU) checked
// against what the inputs allow.
#include "sim/training.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/workload.h"
#include "sim/protocol.h"
#include "sim/sweep.h"

#include <fmt/format.h>

namespace tandem::sim {
namespace {

models::TrainingConfig llama70b(models::ParallelLayout layout, int global_batch) {
  models::TrainingConfig c;
  c.model = models::transformer_preset("llama3-70b");
  c.layout = std::move(layout);
  c.global_batch = global_batch;
  c.recompute = layout.tp == 1 ? models::Recompute::kFull : models::Recompute::kNone;
  c.mfu = 0.40;  // the override: these tests check the step's accounting against it
  return c;
}

models::ClusterSpec h100s(int nodes, double nic_gbps = 400) {
  models::ClusterSpec spec = models::cluster_preset("dgx-h100");
  spec.nodes = nodes;
  spec.nic_Bps = nic_gbps * 1e9 / 8;
  return spec;
}

const CollectiveTiming& find(const TrainingStepResult& r, const std::string& group, Collective collective) {
  for (const CollectiveTiming& c : r.collectives) {
    if (c.group == group && c.collective == collective) return c;
  }
  throw std::runtime_error("no such collective: " + group);
}

TEST(Training, Llama70bOn64H100FsdpAndTensorPipeline) {
  TrainingRequest request;
  request.cluster = h100s(8);
  models::TrainingConfig fsdp = llama70b({"fsdp", 1, 1, models::Sharding::kFsdp, 0}, 64);
  fsdp.recompute = models::Recompute::kFull;
  models::TrainingConfig tp = llama70b({"tp8-pp4", 8, 4, models::Sharding::kZero1, 0}, 64);
  tp.recompute = models::Recompute::kNone;
  request.configs = {fsdp, tp};
  const std::vector<TrainingStepResult> results = simulate_training(request);
  ASSERT_EQ(results.size(), 2u);
  for (const TrainingStepResult& r : results) {
    SCOPED_TRACE(r.layout);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_NEAR(r.compute_s + r.exposed_comm_s + r.bubble_s, r.step_s, 1e-6 * r.step_s);
    EXPECT_GT(r.achieved_mfu, 0.2);
    EXPECT_LT(r.achieved_mfu, 0.4);  // never above the kernels' own MFU
    EXPECT_NEAR(r.tokens_per_s_per_gpu * r.step_s * 64, 64.0 * 8192, 1e-3);
  }
  // FSDP's per-layer all_gather of 1.71 GB runs over NCCL's 16 channel rings, 2 per NIC: busbw
  // close to 8 NICs x 400G's ~47 GB/s (at most 8 x 50).
  const CollectiveTiming& gather = find(results[0], "fsdp", Collective::kAllGather);
  EXPECT_EQ(gather.ranks, 64);
  EXPECT_GT(gather.busbw_GBps, 320);
  EXPECT_LT(gather.busbw_GBps, 400);
  // TP all_gathers stay on NVLink: far faster than the network.
  const CollectiveTiming& tp_gather = find(results[1], "tp", Collective::kAllGather);
  EXPECT_EQ(tp_gather.ranks, 8);
  EXPECT_GT(tp_gather.busbw_GBps, 200);
  // 1F1B with 4 stages and 32 microbatches: a bubble, and TP collectives exposed.
  EXPECT_GT(results[1].bubble_s, 0);
  EXPECT_GT(results[1].exposed_comm_s, 0);
  ASSERT_FALSE(results[1].top.empty());
  EXPECT_EQ(results[1].top[0].group, "tp");
}

TEST(Training, FasterNicsShortenANetworkBoundStep) {
  // FSDP over 16 nodes with one sequence per GPU on slow NICs: the gathers outgrow the compute, so
  // the NIC speed shows in the step time (with NCCL's channel rings on all 8 NICs, 200G already
  // hides them behind the compute: 8 x 25 GB/s).
  models::TrainingConfig c = llama70b({"fsdp", 1, 1, models::Sharding::kFsdp, 0}, 128);
  c.seq_len = 2048;
  c.recompute = models::Recompute::kFull;
  double step[2] = {0, 0};
  int i = 0;
  for (double gbps : {25.0, 100.0}) {
    TrainingRequest request;
    request.cluster = h100s(16, gbps);
    request.configs = {c};
    const auto results = simulate_training(request);
    ASSERT_TRUE(results[0].ok) << results[0].error;
    step[i++] = results[0].step_s;
    EXPECT_NEAR(results[0].compute_s + results[0].exposed_comm_s + results[0].bubble_s, results[0].step_s,
                1e-6 * results[0].step_s);
  }
  EXPECT_LT(step[1], 0.8 * step[0]);
}

TEST(Training, ConcurrentGroupsShareAnOversubscribedSpine) {
  // TP8 x DP over 4 nodes under one leaf group per 2 nodes: the 8 DP rings (one per rail) cross the
  // spines together. With 4:1 oversubscription they share the uplinks, which one ring alone would
  // not see: the simulated reduce_scatter is slower than on a non-blocking fabric.
  models::TrainingConfig c = llama70b({"tp8-zero1", 8, 1, models::Sharding::kZero1, 0}, 8);
  c.model = models::transformer_preset("llama3-8b");
  double busbw[2] = {0, 0};
  int i = 0;
  for (double oversubscription : {1.0, 4.0}) {
    TrainingRequest request;
    request.cluster = h100s(4);
    request.cluster.nodes_per_leaf = 2;
    request.cluster.oversubscription = oversubscription;
    request.configs = {c};
    const auto results = simulate_training(request);
    ASSERT_TRUE(results[0].ok) << results[0].error;
    const CollectiveTiming& rs = find(results[0], "dp", Collective::kReduceScatter);
    EXPECT_EQ(rs.instances, 8);
    busbw[i++] = rs.busbw_GBps;
  }
  EXPECT_LT(busbw[1], 0.6 * busbw[0]);
}

TEST(Training, AConfigurationThatDoesNotFitIsAResultNotACrash) {
  TrainingRequest request;
  request.cluster = h100s(1);
  request.configs = {llama70b({"fsdp8", 1, 1, models::Sharding::kFsdp, 0}, 8)};
  const auto results = simulate_training(request);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].ok);
  EXPECT_NE(results[0].error.find("GB per GPU"), std::string::npos) << results[0].error;
}

TEST(Training, ResultsSurviveTheirJson) {
  TrainingRequest request;
  request.cluster = h100s(1);
  models::TrainingConfig c = llama70b({"fsdp8", 1, 1, models::Sharding::kFsdp, 0}, 8);
  c.model = models::transformer_preset("llama3-8b");
  request.configs = {c};
  const auto results = simulate_training(request, /*isolated=*/true);
  ASSERT_TRUE(results[0].ok) << results[0].error;
  const auto again = nlohmann::json(results).get<std::vector<TrainingStepResult>>();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_DOUBLE_EQ(again[0].step_s, results[0].step_s);
  EXPECT_DOUBLE_EQ(again[0].memory.total_bytes(), results[0].memory.total_bytes());
  // The memory timeline ran (the result crossed a child process as JSON already) and survives too.
  ASSERT_TRUE(results[0].has_step_memory);
  EXPECT_GT(results[0].step_memory.peak_reserved_bytes, results[0].step_memory.peak_allocated_bytes / 2);
  EXPECT_EQ(again[0].step_memory.peak_reserved_bytes, results[0].step_memory.peak_reserved_bytes);
  EXPECT_EQ(again[0].step_memory.peak_allocated_bytes, results[0].step_memory.peak_allocated_bytes);
  EXPECT_EQ(again[0].step_memory.peak_phase, results[0].step_memory.peak_phase);
  EXPECT_DOUBLE_EQ(again[0].step_memory.fragmentation_at_peak, results[0].step_memory.fragmentation_at_peak);
  EXPECT_DOUBLE_EQ(memory_needed_bytes(again[0]), memory_needed_bytes(results[0]));
  EXPECT_EQ(again[0].collectives.size(), results[0].collectives.size());
  EXPECT_EQ(again[0].top.size(), results[0].top.size());
}

}  // namespace
}  // namespace tandem::sim

namespace tandem::sim {
namespace {

// The training step times a ring all_gather / reduce_scatter as half of a ring all_reduce of the
// same size (sim/training.cc): check that against the explicit schedules, simulated op by op.
TEST(Training, HalfRingAllReduceMatchesExplicitAllGatherAndReduceScatter) {
  int compared = 0;
  for (int nodes : {2, 8}) {
    for (int64_t bytes : {int64_t{4} << 20, int64_t{256} << 20}) {
      SCOPED_TRACE(fmt::format("{} nodes, {} bytes", nodes, bytes));
      SweepRequest request;
      request.cluster = h100s(nodes);
      request.explicit_schedules = true;
      for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter}) {
        request.points.push_back({c, bytes, Algorithm::kRing});
      }
      const std::vector<SweepPointResult> r = run_sweep(request);
      ASSERT_TRUE(r[0].ok && r[1].ok && r[2].ok) << r[0].error << r[1].error << r[2].error;
      for (size_t i : {1u, 2u}) {
        if (r[i].protocol != r[0].protocol) continue;  // the halves are compared at one protocol
        const double base = protocol_base_latency_s(r[0].protocol, Algorithm::kRing);
        const double half = base + (r[0].seconds - base) / 2;
        EXPECT_NEAR(half / r[i].seconds, 1.0, 0.03) << name(r[i].point.collective);
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 6);
}

}  // namespace
}  // namespace tandem::sim
