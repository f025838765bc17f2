// The simulator against closed forms. Every sweep runs in its own child process (SimGrid allows
// one platform per process), so these tests can build many clusters.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "models/cluster.h"
#include "sim/sweep.h"

namespace tandem::sim {
namespace {

SweepRequest request(int nodes, NetworkModel network = NetworkModel::ideal()) {
  SweepRequest r;
  r.cluster = models::cluster_preset("dgx-h100");
  r.cluster.nodes = nodes;
  r.network = network;
  return r;
}

SweepPoint point(Collective c, int64_t bytes, const std::string& algorithm) {
  SweepPoint p;
  p.collective = c;
  p.bytes = bytes;
  p.algorithm = algorithm;
  p.dtype = DataType::kBF16;
  return p;
}

// The alpha-beta time of a ring all_reduce over GPUs `ring` (every hop with the same bottleneck
// bandwidth beta): 2(n-1) steps of (S/n) / beta, plus the latencies alpha_i of the 2(n-1)
// consecutive hops of the ring a step's data depends on. Where all hops are alike this is the
// textbook 2(n-1)/n * S/beta + 2(n-1) * alpha; on a large fabric a few ring hops cross a spine and
// have a larger alpha, which only the positions behind them pay.
double ring_alpha_beta_s(const models::Topology& topology, const std::vector<int>& ring, int64_t bytes) {
  const auto n = static_cast<int>(ring.size());
  std::vector<double> alpha;
  double beta = 0;
  for (int p = 0; p < n; ++p) {
    const models::Route route = topology.route(ring[static_cast<size_t>(p)], ring[static_cast<size_t>((p + 1) % n)]);
    alpha.push_back(route.latency_s);
    beta = beta == 0 ? route.bottleneck_Bps : std::min(beta, route.bottleneck_Bps);
  }
  const int steps = 2 * (n - 1);
  double latency = 0;
  for (int end = 0; end < n; ++end) {
    double sum = 0;
    for (int j = 0; j < steps; ++j) sum += alpha[static_cast<size_t>(((end - j) % n + n) % n)];
    latency = std::max(latency, sum);
  }
  return latency + steps * (static_cast<double>(bytes) / n / beta);
}

TEST(Simulator, RingAllReduceMatchesAlphaBeta) {
  // 8 GPUs of one node (every hop NVLink), and 64 and 1,024 nodes with one GPU each (every hop
  // GPU -> NIC -> rail leaf -> NIC -> GPU). Ideal network model: CM02, no efficiencies.
  constexpr int64_t kBytes = int64_t{1} << 30;
  struct Case {
    int nodes, gpus_per_node;
  };
  for (const Case c : {Case{1, 8}, Case{64, 1}, Case{1024, 1}}) {
    SweepRequest r = request(c.nodes);
    r.gpus_per_node = c.gpus_per_node;
    r.points = {point(Collective::kAllReduce, kBytes, "ring"), point(Collective::kAllReduce, 1 << 20, "ring")};
    const std::vector<SweepPointResult> results = run_sweep(r);
    const models::Topology topology = models::build_cluster(r.cluster);
    const int n = c.nodes * c.gpus_per_node;
    std::vector<int> ring;  // GPU 0 of every node, or the 8 GPUs of node 0
    for (int i = 0; i < n; ++i) ring.push_back(c.gpus_per_node == 1 ? i * 8 : i);
    for (const SweepPointResult& result : results) {
      ASSERT_TRUE(result.ok) << result.error;
      const double expected = ring_alpha_beta_s(topology, ring, result.point.bytes);
      EXPECT_NEAR(result.seconds / expected, 1.0, 0.01)
          << n << " GPUs, " << result.point.bytes << " B: simulated " << result.seconds << " s, alpha-beta " << expected;
    }
  }
}

TEST(Simulator, CompressedRoundsMatchTheFullSimulation) {
  // The same ring all_reduce, rank-symmetric (one round simulated, then replayed per position) and
  // explicit (every transfer simulated), with NCCL's protocol effects on: a 64-GPU ring has fast
  // NVLink hops and slow network hops, so this also checks the per-position replay.
  for (int64_t bytes : {int64_t{1} << 12, int64_t{1} << 16, int64_t{1} << 28}) {
    SweepRequest r = request(8, NetworkModel{});
    r.points = {point(Collective::kAllReduce, bytes, "ring")};
    const double compressed = run_sweep(r)[0].seconds;
    r.explicit_schedules = true;
    const SweepPointResult full = run_sweep(r)[0];
    ASSERT_TRUE(full.ok) << full.error;
    EXPECT_NEAR(full.seconds / compressed, 1.0, 0.005) << bytes << " B";

  }
}

TEST(Simulator, EcmpCollisionsSlowANaiveRingByTheirMultiplicity) {
  // 8 nodes x 8 GPUs on a rail-optimized fabric. The rail-aligned ring keeps every inter-node hop
  // on one rail leaf; the node-major ring sends GPU 7 of node v to GPU 0 of node v+1, across the
  // spines, where static ECMP puts several of those flows on one uplink. In the bandwidth-bound
  // regime the ring runs at the pace of its most loaded link: the slowdown is that link's load.
  constexpr int64_t kBytes = int64_t{1} << 32;
  SweepRequest r = request(8);
  r.points = {point(Collective::kAllReduce, kBytes, "ring")};
  const double aligned = run_sweep(r)[0].seconds;
  r.rail_aligned = false;
  const double naive = run_sweep(r)[0].seconds;

  const models::Topology topology = models::build_cluster(r.cluster);
  std::map<std::pair<uint32_t, bool>, int> load;  // (link, direction) -> ring flows on it
  const int n = topology.gpu_count();
  for (int a = 0; a < n; ++a) {
    for (const models::Hop& hop : topology.route(a, (a + 1) % n).hops) ++load[{hop.link, hop.forward}];
  }
  int worst = 0;
  for (const auto& [link, flows] : load) worst = std::max(worst, flows);
  ASSERT_GT(worst, 1) << "this fabric shows no ECMP collision; the test needs one";
  EXPECT_NEAR(naive / aligned, worst, 0.05 * worst) << "naive " << naive << " s, rail-aligned " << aligned << " s";
}

// The packet model (SimGrid's ns-3 binding) runs the same schedule on the same links, packet by
// packet through TCP/IP: it can only add time (headers, one handshake per message), never remove it.
TEST(Simulator, PacketModelRunsASmallRingAndIsNoFasterThanFluid) {
  std::map<Fidelity, double> seconds;
  for (Fidelity fidelity : {Fidelity::kFluid, Fidelity::kPacket}) {
    NetworkModel network = NetworkModel::ideal();
    network.fidelity = fidelity;
    SweepRequest r = request(1, network);
    r.points = {point(Collective::kAllReduce, 64 << 10, "ring")};
    const std::vector<SweepPointResult> results = run_sweep(r, /*isolated=*/true);
    ASSERT_EQ(results.size(), 1u);
    ASSERT_TRUE(results[0].ok) << results[0].error;
    seconds[fidelity] = results[0].seconds;
  }
  EXPECT_GT(seconds[Fidelity::kPacket], 0.99 * seconds[Fidelity::kFluid]);
  EXPECT_LT(seconds[Fidelity::kPacket], 20 * seconds[Fidelity::kFluid]);
}

TEST(Simulator, PacketModelRefusesLargeClusters) {
  NetworkModel network;
  network.fidelity = Fidelity::kPacket;
  SweepRequest r = request(8, network);
  r.points = {point(Collective::kAllReduce, 1 << 20, "ring")};
  try {
    run_sweep(r, /*isolated=*/true);
    FAIL() << "64 GPUs on the packet model should be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("small clusters"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::sim
