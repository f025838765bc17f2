// The start-up model (sim/startup.h): its phases add up, grow with the job, and each lever moves
// the phase it acts on by what its mechanism says; each call runs its own SimGrid platform in a
// child process.
#include "sim/startup.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "models/cluster.h"

namespace tandem::sim {
namespace {

const models::ClusterSpec& dgx() {
  static const models::ClusterSpec cluster = models::cluster_preset("dgx-h100");
  return cluster;
}

double sum_of_phases(const StartupResult& r) {
  double sum = 0;
  for (const StartupPhase& p : r.phases) sum += p.seconds;
  return sum;
}

TEST(Startup, PhasesAddUpAndGrowWithTheJob) {
  std::vector<StartupResult> results;
  for (int gpus : {8, 64, 1024, 16384}) results.push_back(simulate_startup(dgx(), gpus));
  for (const StartupResult& r : results) {
    SCOPED_TRACE(r.gpus);
    EXPECT_TRUE(std::isfinite(r.total_s));
    EXPECT_NEAR(r.total_s, sum_of_phases(r), 1e-12);
    EXPECT_DOUBLE_EQ(r.phase_s("launch"), kProcessLaunch_s + kCudaContext_s);
    EXPECT_DOUBLE_EQ(r.phase_s("store"), r.gpus * kLibuvStoreConnect_s);
    EXPECT_GT(r.phase_s("first collectives"), 0);  // runtime connect defers the connections
    EXPECT_EQ(r.communicators, 1);
    EXPECT_LE(r.simulated_gpus, kMaxSimulatedStartupGpus);
  }
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_GT(results[i].phase_s("communicators"), results[i - 1].phase_s("communicators")) << results[i].gpus;
    EXPECT_GT(results[i].total_s, results[i - 1].total_s) << results[i].gpus;
  }
  EXPECT_EQ(results[3].simulated_gpus, 1024);
  // 16,384 GPUs, 128 ranks per root: no staggering; the three init rings pay N - 1 software costs each.
  EXPECT_GT(results[3].nccl_init_s, 3 * 16383 * kBootstrapMessageSoftware_s);
}

// One node, 8 ranks: NCCL's local phases are the ones NCCL measured (NVIDIA/nccl#534) and the
// bootstrap over 8 ranks adds well under a millisecond.
TEST(Startup, OneNodeInitIsNcclsMeasuredLocalPhases) {
  const StartupResult r = simulate_startup(dgx(), 8);
  const double local = kNcclKernels_s + kNcclTopo_s + kNcclGraphs_s + kNcclConnectAtInit_s + kNcclRest_s;
  EXPECT_GT(r.nccl_init_s, local);
  EXPECT_LT(r.nccl_init_s, local + 1e-3);
}

TEST(Startup, LeversActOnTheirPhases) {
  StartupJob job{.gpus = 16384, .groups = {{"tp", 8, 1}, {"dp", 512, 8}, {"pp", 4, 4096}}};
  const StartupResult base = simulate_startup(dgx(), job);
  EXPECT_EQ(base.communicators, 4);

  // The legacy store: every request pays a poll over all 16,384 sockets.
  StartupJob legacy = job;
  legacy.levers.store = StoreBackend::kLegacy;
  const StartupResult old_store = simulate_startup(dgx(), legacy);
  const double per_request = kStoreRequest_s + 16384 * kLegacyStorePerSocket_s;
  EXPECT_NEAR(old_store.phase_s("store"), 16384 * per_request, 1e-9);
  EXPECT_GT(old_store.phase_s("communicators"), base.phase_s("communicators"));

  // One root per communicator: the world's 16,384 ranks are staggered at 7,000 per second.
  StartupJob one_root = job;
  one_root.levers.ranks_per_root = 0;
  const StartupResult single = simulate_startup(dgx(), one_root);
  EXPECT_GT(single.nccl_init_s - base.nccl_init_s, 16384 / kStaggerRate_per_s);

  // Eager init: the groups are split from the world, with no unique ids through the store.
  StartupJob eager = job;
  eager.levers.eager_init = true;
  const StartupResult split = simulate_startup(dgx(), eager);
  EXPECT_LT(split.store_requests, base.store_requests);
  EXPECT_EQ(split.store_requests,
            16384 + 16384 + 128);  // connects, then the world's ids: 128 roots set, every rank gets

  // Barriers after every new_group: (1 + 2048 + 32 + 4096) world barriers of two requests per rank.
  StartupJob barriers = job;
  barriers.levers.init_barriers = true;
  const StartupResult barred = simulate_startup(dgx(), barriers);
  const double requests = (1.0 + 2048 + 32 + 4096) * 2 * 16384;
  EXPECT_NEAR(barred.phase_s("group barriers"), requests * kStoreRequest_s, 1e-6);

  // Eager connections: nothing is left for the first collectives, init pays it instead.
  StartupJob eager_connect = job;
  eager_connect.levers.runtime_connect = false;
  const StartupResult connected = simulate_startup(dgx(), eager_connect);
  EXPECT_EQ(connected.phase_s("first collectives"), 0);
  EXPECT_GT(connected.nccl_init_s, base.nccl_init_s);

  // The bootstrap over the fabric: cheaper messages.
  StartupJob oob = job;
  oob.levers.oob_net = true;
  EXPECT_LT(simulate_startup(dgx(), oob).nccl_init_s, base.nccl_init_s);
}

TEST(Startup, LayoutGroupsInMegatronOrder) {
  models::ParallelLayout layout;
  layout.tp = 8;
  layout.pp = 4;
  const std::vector<StartupGroup> groups = layout_groups(layout, 1024);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].name, "tp");
  EXPECT_EQ(groups[0].stride, 1);
  EXPECT_EQ(groups[1].name, "dp");
  EXPECT_EQ(groups[1].size, 32);
  EXPECT_EQ(groups[1].stride, 8);
  EXPECT_EQ(groups[2].name, "pp");
  EXPECT_EQ(groups[2].stride, 256);
}

TEST(Startup, JsonRoundTrip) {
  const StartupResult r = simulate_startup(dgx(), StartupJob{.gpus = 64, .groups = {{"tp", 8, 1}, {"dp", 8, 8}}});
  const StartupResult back = startup_from_json(startup_to_json(r));
  EXPECT_EQ(back.phases.size(), r.phases.size());
  EXPECT_DOUBLE_EQ(back.total_s, r.total_s);
  EXPECT_EQ(back.store_requests, r.store_requests);
}

TEST(Startup, EdgesAndErrors) {
  const StartupResult one = simulate_startup(dgx(), 1);
  EXPECT_GT(one.total_s, 0);
  EXPECT_EQ(one.phase_s("first collectives"), 0);
  const StartupResult three = simulate_startup(dgx(), 3);  // part of a node, a prime
  EXPECT_GT(three.total_s, one.total_s);
  EXPECT_THROW(simulate_startup(dgx(), 0), Error);
  EXPECT_THROW(simulate_startup(dgx(), 12), Error);  // 1.5 nodes
  EXPECT_THROW(simulate_startup(dgx(), 8 * (models::kMaxNodes + 1)), Error);
  EXPECT_THROW(simulate_startup(dgx(), StartupJob{.gpus = 64, .groups = {{"tp", 3, 1}}}), Error);
  EXPECT_THROW(simulate_startup(dgx(), StartupJob{.gpus = 64, .groups = {{"pp", 4, 32}}}), Error);
  EXPECT_THROW(parse_store_backend("redis"), Error);
}

}  // namespace
}  // namespace tandem::sim
