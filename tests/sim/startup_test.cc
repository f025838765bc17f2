// The simulated communicator start-up (sim/startup.h): positive, finite, and growing with the GPU
// count; each call runs its own SimGrid platform in a child process.
#include "sim/startup.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "models/cluster.h"

namespace tandem::sim {
namespace {

TEST(Startup, GrowsWithGpuCount) {
  const models::ClusterSpec cluster = models::cluster_preset("dgx-h100");
  std::vector<StartupResult> results;
  for (int gpus : {8, 64, 1024, 16384}) results.push_back(simulate_startup(cluster, gpus));
  for (const StartupResult& r : results) {
    SCOPED_TRACE(r.gpus);
    for (double t : {r.bootstrap_s, r.peer_info_allgather_s, r.connection_setup_s, r.total_s}) {
      EXPECT_GT(t, 0);
      EXPECT_TRUE(std::isfinite(t));
    }
    EXPECT_DOUBLE_EQ(r.total_s, r.bootstrap_s + r.peer_info_allgather_s + r.connection_setup_s);
    EXPECT_GT(r.ring_channels, 0);
    EXPECT_LE(r.simulated_gpus, kMaxSimulatedStartupGpus);
  }
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_GT(results[i].bootstrap_s, results[i - 1].bootstrap_s) << results[i].gpus;
    EXPECT_GT(results[i].peer_info_allgather_s, results[i - 1].peer_info_allgather_s) << results[i].gpus;
    EXPECT_GT(results[i].total_s, results[i - 1].total_s) << results[i].gpus;
  }
  // 16,384 GPUs are simulated on 1,024 and scaled.
  EXPECT_EQ(results[2].simulated_gpus, 1024);
  EXPECT_EQ(results[3].simulated_gpus, 1024);
  // The bootstrap ring's all-gather pays at least one software cost per step: N - 1 of them, and
  // the root one check-in per rank.
  EXPECT_GT(results[3].bootstrap_s, 16383 * kBootstrapMessageSoftware_s + 16384 * kBootstrapRootPerRank_s);
  // Ring steps of tiny records cost about one message each: the 1,024-GPU peer-info all-gathers
  // come to two rings of 1,023 messages.
  const StartupResult& r1024 = results[2];
  EXPECT_NEAR(r1024.peer_info_allgather_s / (2 * 1023 * r1024.bootstrap_message_s), 1, 0.05);
  // Across nodes every connection is an InfiniBand one (>= 1 ms each); inside one node they are cheaper.
  EXPECT_GT(r1024.connection_setup_s, (2 * r1024.ring_channels + 6 * r1024.tree_channels) * kNetworkConnectionSetup_s);
  EXPECT_LT(results[0].connection_setup_s, r1024.connection_setup_s);
}

TEST(Startup, EdgesAndErrors) {
  const models::ClusterSpec cluster = models::cluster_preset("dgx-h100");
  const StartupResult one = simulate_startup(cluster, 1);
  EXPECT_GT(one.total_s, 0);
  EXPECT_EQ(one.connection_setup_s, 0);
  const StartupResult three = simulate_startup(cluster, 3);  // part of a node, a prime
  EXPECT_GT(three.total_s, one.total_s);
  EXPECT_THROW(simulate_startup(cluster, 0), Error);
  EXPECT_THROW(simulate_startup(cluster, 12), Error);  // 1.5 nodes
  EXPECT_THROW(simulate_startup(cluster, 8 * (models::kMaxNodes + 1)), Error);
}

}  // namespace
}  // namespace tandem::sim
