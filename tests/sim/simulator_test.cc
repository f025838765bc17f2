// The simulator against closed forms. Every sweep runs in its own child process (SimGrid allows
// one platform per process), so these tests can build many clusters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>

#include "core/algorithms.h"
#include "core/error.h"
#include "models/cluster.h"
#include "sim/isolated.h"
#include "sim/simulator.h"
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
  p.algorithm = parse_sim_algorithm_or_auto(algorithm);
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
    r.channels = 1;
    r.points = {point(Collective::kAllReduce, bytes, "ring")};
    const double compressed = run_sweep(r)[0].seconds;
    r.explicit_schedules = true;
    const SweepPointResult full = run_sweep(r)[0];
    ASSERT_TRUE(full.ok) << full.error;
    EXPECT_NEAR(full.seconds / compressed, 1.0, 0.005) << bytes << " B";
  }
}

TEST(Simulator, CompressedChannelRingsStayCloseToTheFullSimulation) {
  // NCCL's 16 channel rings on 64 GPUs. The compressed rounds take every hop's transfer time with
  // all 16 channels' flows active at once (as NCCL's channels run, each on its own SMs), so 14
  // channels share each GPU's NVLink; op by op, channels drift apart and an NVLink hop often runs
  // with fewer channels beside it. Latency-bound sizes agree to 0.5%; at 256 MiB the op-by-op
  // simulation is up to 10% faster, never slower than the NIC bound.
  for (int64_t bytes : {int64_t{1} << 12, int64_t{1} << 16, int64_t{1} << 28}) {
    SweepRequest r = request(8, NetworkModel{});
    r.points = {point(Collective::kAllReduce, bytes, "ring")};
    const SweepPointResult compressed = run_sweep(r)[0];
    ASSERT_TRUE(compressed.ok) << compressed.error;
    EXPECT_EQ(compressed.channels, bytes >= (int64_t{1} << 28) ? 16 : compressed.channels);
    r.explicit_schedules = true;
    const SweepPointResult full = run_sweep(r)[0];
    ASSERT_TRUE(full.ok) << full.error;
    const double tolerance = bytes < (int64_t{1} << 20) ? 0.005 : 0.10;
    EXPECT_LE(full.seconds / compressed.seconds, 1.0 + 0.005) << bytes << " B";
    EXPECT_GE(full.seconds / compressed.seconds, 1.0 - tolerance) << bytes << " B";
  }
}

TEST(Simulator, EcmpCollisionsSlowANaiveRingByTheirMultiplicity) {
  // 8 nodes x 8 GPUs on a rail-optimized fabric. The rail-aligned ring keeps every inter-node hop
  // on one rail leaf; the node-major ring sends GPU 7 of node v to GPU 0 of node v+1, across the
  // spines, where static ECMP puts several of those flows on one uplink. In the bandwidth-bound
  // regime the ring runs at the pace of its most loaded link: the slowdown is that link's load.
  constexpr int64_t kBytes = int64_t{1} << 32;
  SweepRequest r = request(8);
  r.channels = 1;  // one ring: NCCL's channel 0 against the node-major order
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

// Runs `body` in a child process, which may build its own Simulator (SimGrid allows one platform
// per process), and returns the numbers it produced, exactly (JSON numbers round-trip). A child
// that throws or dies fails the test.
std::vector<double> in_child(const std::function<std::vector<double>()>& body) {
  try {
    return run_isolated(body);
  } catch (const Error& e) {
    ADD_FAILURE() << "the child failed: " << e.what();
    return {};
  }
}

// Simulated durations are differences of SimGrid's clock, which keeps running from one run to the
// next: the same collective started later is rounded at a larger absolute time and differs by a
// few hundred ulps (about 1e-14 relative here), so "the same time" means within 1e-12.
::testing::AssertionResult same_duration(double a, double b) {
  if (std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b))) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << a << " s and " << b << " s differ by " << (a - b) / b << " (relative)";
}

// Two DGX H100 nodes (16 GPUs), ideal network, and a 64 MiB bf16 ring all_reduce on the
// rail-aligned ring 0..7, 15..8: its two inter-node hops are n0-gpu7 -> n1-gpu7 (rail 7) and
// n1-gpu0 -> n0-gpu0 (rail 0), 50 GB/s NIC links, the ring's bottleneck.
struct FaultBench {
  static constexpr int64_t kBytes = int64_t{64} << 20;
  models::ClusterSpec cluster = [] {
    models::ClusterSpec two_nodes = models::cluster_preset("dgx-h100");
    two_nodes.nodes = 2;
    return two_nodes;
  }();
  models::Topology topology = models::build_cluster(cluster);
  CollectiveSpec spec{Collective::kAllReduce, kBytes / 2, DataType::kBF16, ReduceOp::kSum, 0, 16};

  // One ring, the snake 0..7, 15..8 (not NCCL's channel rings: one inter-node hop per rail
  // keeps the arithmetic of each fault plain).
  Schedule ring(ScheduleForm form) const {
    RankLayout layout = topology.layout();
    layout.rings = {{0, 1, 2, 3, 4, 5, 6, 7, 15, 14, 13, 12, 11, 10, 9, 8}};
    return build_checked_schedule(spec, layout, Algorithm::kRing, {}, form);
  }
  uint32_t link(std::string_view name) const { return topology.find_link(name).value(); }
  // The bandwidth term of the ring: 2(n-1)/n * S / B.
  static double bandwidth_term_s(double bottleneck_Bps) { return 2.0 * 15 / 16 * kBytes / bottleneck_Bps; }
};

// SimRequest::analytic (what `tandem replay` asks for on groups of more than 256 ranks, where op
// by op takes minutes): an explicit ring and a ring broadcast chain, replayed analytically after
// one contention round, take the op-by-op time (one ring, alpha-beta: no drift between channels to
// tell them apart), and only with the flag do they leave the op-by-op simulation.
TEST(Simulator, AnalyticReplayOfExplicitRingsMatchesOpByOp) {
  const std::vector<double> t = in_child([] {
    FaultBench bench;
    Simulator sim(bench.topology, bench.cluster, NetworkModel::ideal());
    std::vector<double> out;
    for (Collective c : {Collective::kAllReduce, Collective::kBroadcast}) {
      CollectiveSpec spec = bench.spec;
      spec.collective = c;
      RankLayout layout = bench.topology.layout();
      layout.rings = {{0, 1, 2, 3, 4, 5, 6, 7, 15, 14, 13, 12, 11, 10, 9, 8}};
      const Schedule ring = build_checked_schedule(spec, layout, Algorithm::kRing, {}, ScheduleForm::kExplicit);
      SimRequest request{&ring, spec, {}, models::NcclProtocol::kSimple, 4};
      const SimResult op_by_op = sim.run(request);
      request.analytic = true;
      const SimResult analytic = sim.run(request);
      out.insert(out.end(), {op_by_op.seconds, analytic.seconds, op_by_op.compressed ? 1.0 : 0.0,
                             analytic.compressed ? 1.0 : 0.0});
    }
    return out;
  });
  ASSERT_EQ(t.size(), 8u);
  for (size_t i = 0; i < t.size(); i += 4) {
    SCOPED_TRACE(i == 0 ? "all_reduce" : "broadcast");
    EXPECT_GT(t[i], 0);
    EXPECT_NEAR(t[i + 1] / t[i], 1.0, 0.01) << "op by op " << t[i] << " s, analytic " << t[i + 1] << " s";
    EXPECT_EQ(t[i + 2], 0.0) << "without the flag an explicit ring runs op by op";
    EXPECT_EQ(t[i + 3], 1.0);
  }
}

TEST(SimulatorFaults, DegradedBottleneckLinkDoublesTheBandwidthTerm) {
  const std::vector<double> t = in_child([] {
    FaultBench bench;
    Simulator sim(bench.topology, bench.cluster, NetworkModel::ideal());
    const Schedule ring = bench.ring(ScheduleForm::kSymmetric);
    const SimRequest request{&ring, bench.spec, {}, models::NcclProtocol::kSimple, 1};
    const uint32_t uplink = bench.link("n0-nic7-uplink");
    std::vector<double> out;
    out.push_back(sim.run(request).seconds);  // 0: fault-free (compressed rounds)
    out.push_back(sim.run(request).seconds);  // 1: again
    sim.set_link_factor(uplink, 0.5);
    const SimResult slow = sim.run(request);
    out.push_back(slow.seconds);              // 2: degraded
    out.push_back(slow.compressed ? 1 : 0);   // 3
    out.push_back(sim.run(request).seconds);  // 4: degraded again
    sim.set_link_factor(uplink, 1.0);
    const SimResult restored = sim.run(request);
    out.push_back(restored.seconds);             // 5: restored
    out.push_back(restored.compressed ? 1 : 0);  // 6
    return out;
  });
  ASSERT_EQ(t.size(), 7u);
  const double bandwidth = FaultBench::bandwidth_term_s(50e9);
  EXPECT_TRUE(same_duration(t[1], t[0])) << "two fault-free runs";
  EXPECT_EQ(t[3], 0.0) << "a degraded link must not take the compressed path";
  EXPECT_TRUE(same_duration(t[4], t[2])) << "two degraded runs";
  EXPECT_EQ(t[6], 1.0);
  EXPECT_TRUE(same_duration(t[5], t[0])) << "restoring the link gives back the fault-free time";
  // Half the bandwidth on the bottleneck: the bandwidth term doubles, the latencies stay.
  EXPECT_NEAR((t[2] - t[0]) / bandwidth, 1.0, 0.02)
      << "fault-free " << t[0] << " s, link at 0.5: " << t[2] << " s, bandwidth term " << bandwidth << " s";
  std::printf("ring all_reduce 64 MiB / 16 GPUs: fault-free %.6f ms, n0-nic7-uplink at 0.5: %.6f ms (x%.3f)\n",
              t[0] * 1e3, t[2] * 1e3, t[2] / t[0]);
}

TEST(SimulatorFaults, DeadNicIsRoutedAroundThroughANeighbour) {
  const std::vector<double> t = in_child([] {
    FaultBench bench;
    Simulator sim(bench.topology, bench.cluster, NetworkModel::ideal());
    // Op by op on both sides, so that only the fault differs.
    const Schedule ring = bench.ring(ScheduleForm::kExplicit);
    const SimRequest request{&ring, bench.spec, {}, models::NcclProtocol::kSimple, 1};
    // Hierarchical all_reduce: the inter-node phase runs 8 rings at once, one per rail, so every
    // NIC is busy and the rerouted GPU shares its relay's NIC.
    const Schedule hierarchical = build_checked_schedule(bench.spec, RankLayout::nodes(2, 8), Algorithm::kHierarchical);
    const SimRequest hierarchical_request{&hierarchical, bench.spec, {}, models::NcclProtocol::kSimple, 1};
    const uint32_t uplink = bench.link("n0-nic7-uplink");
    std::vector<double> out;
    out.push_back(sim.run(request).seconds);               // 0: ring, fault-free
    out.push_back(sim.run(hierarchical_request).seconds);  // 1: hierarchical, fault-free
    out.push_back(sim.crosses(7, 15, uplink) ? 1 : 0);     // 2
    const std::vector<uint32_t> nic = sim.links_of_nic(0, 7);
    out.push_back(static_cast<double>(nic.size()));  // 3
    sim.set_dead_links(nic);
    out.push_back(sim.crosses(7, 15, uplink) ? 1 : 0);     // 4
    out.push_back(sim.crosses(15, 7, uplink) ? 1 : 0);     // 5
    out.push_back(sim.run(request).seconds);               // 6: ring, NIC dead
    out.push_back(sim.run(request).seconds);               // 7: again
    out.push_back(sim.run(hierarchical_request).seconds);  // 8: hierarchical, NIC dead
    sim.set_dead_links({});
    out.push_back(sim.crosses(7, 15, uplink) ? 1 : 0);     // 9
    out.push_back(sim.run(request).seconds);               // 10: ring, restored
    out.push_back(sim.run(hierarchical_request).seconds);  // 11: hierarchical, restored
    // Every NIC of node 0 dead: no route between the nodes. The run refuses before it starts
    // anything, and the next one is unharmed.
    std::vector<uint32_t> all_nics;
    for (int i = 0; i < 8; ++i) {
      for (uint32_t link : sim.links_of_nic(0, i)) all_nics.push_back(link);
    }
    sim.set_dead_links(all_nics);
    double refused = 0;
    try {
      sim.run(request);
    } catch (const Error& e) {
      const bool named = std::string(e.what()).find("around the failed links") != std::string::npos;
      refused = e.code() == ErrorCode::kUnsupported && named ? 1.0 : 0.0;
    }
    out.push_back(refused);  // 12
    sim.set_dead_links({});
    out.push_back(sim.run(request).seconds);  // 13: ring, restored after the refusal
    return out;
  });
  ASSERT_EQ(t.size(), 14u);
  EXPECT_EQ(t[12], 1.0) << "a cut-off node must be refused with Error(kUnsupported)";
  EXPECT_TRUE(same_duration(t[13], t[0])) << "restored after a refused run";
  EXPECT_EQ(t[2], 1.0) << "the ring's hop 7 -> 15 uses n0-nic7 before the fault";
  EXPECT_EQ(t[3], 2.0) << "a DGX NIC has a PCIe link and an uplink";
  EXPECT_EQ(t[4], 0.0) << "after the reroute it does not";
  EXPECT_EQ(t[5], 0.0);
  EXPECT_EQ(t[9], 1.0) << "normal routing is back";
  EXPECT_TRUE(same_duration(t[7], t[6])) << "two runs with the NIC dead";
  EXPECT_TRUE(same_duration(t[10], t[0])) << "restored ring";
  EXPECT_TRUE(same_duration(t[11], t[1])) << "restored hierarchical";
  // The ring's rerouted hop still has a 50 GB/s bottleneck (its relay's NIC is otherwise idle in
  // that direction): only the detour's extra hops' latency shows.
  EXPECT_GT(t[6], t[0]);
  EXPECT_LT(t[6], 1.02 * t[0]);
  // The hierarchical inter-node phase moves S/8 per rail at 50 GB/s; with rail 7 of node 0 sharing
  // another rail's NIC that rail takes twice as long: about S/8 / 50 GB/s more.
  const double inter_node_s = static_cast<double>(FaultBench::kBytes) / 8 / 50e9;
  EXPECT_NEAR((t[8] - t[1]) / inter_node_s, 1.0, 0.1)
      << "hierarchical fault-free " << t[1] << " s, NIC dead " << t[8] << " s, inter-node phase " << inter_node_s;
  std::printf("n0-nic7 dead: ring %.6f -> %.6f ms (x%.4f), hierarchical %.6f -> %.6f ms (x%.3f)\n", t[0] * 1e3,
              t[6] * 1e3, t[6] / t[0], t[1] * 1e3, t[8] * 1e3, t[8] / t[1]);
}

TEST(SimulatorFaults, StragglerSlowsTheRingByItsShareOfTheBottleneck) {
  const std::vector<double> t = in_child([] {
    FaultBench bench;
    Simulator sim(bench.topology, bench.cluster, NetworkModel::ideal());
    const Schedule ring = bench.ring(ScheduleForm::kExplicit);
    const SimRequest request{&ring, bench.spec, {}, models::NcclProtocol::kSimple, 1};
    std::vector<double> out;
    out.push_back(sim.run(request).seconds);  // 0: fault-free
    sim.set_gpu_slowdown(7, 3.0);             // sends the ring's network hop 7 -> 15
    out.push_back(sim.run(request).seconds);  // 1
    out.push_back(sim.run(request).seconds);  // 2: again
    sim.set_gpu_slowdown(7, 1.0);
    sim.set_gpu_slowdown(3, 3.0);             // sends an NVLink hop (3 -> 4), 9x the network's rate
    out.push_back(sim.run(request).seconds);  // 3
    sim.set_gpu_slowdown(3, 1.0);
    out.push_back(sim.faults_active() ? 1 : 0);  // 4
    out.push_back(sim.run(request).seconds);     // 5: restored
    // Bad arguments are refused.
    auto refused = [](const std::function<void()>& call) {
      try {
        call();
      } catch (const Error& e) {
        return e.code() == ErrorCode::kInvalidArgument ? 1.0 : 0.0;
      }
      return 0.0;
    };
    out.push_back(refused([&] { sim.set_gpu_slowdown(3, 0.5); }));                          // 6
    out.push_back(refused([&] { sim.set_gpu_slowdown(16, 2.0); }));                         // 7
    out.push_back(refused([&] { sim.set_link_factor(0, 0.0); }));                           // 8
    out.push_back(refused([&] { sim.set_dead_links({static_cast<uint32_t>(1) << 20}); }));  // 9
    out.push_back(sim.faults_active() ? 1 : 0);                                             // 10
    return out;
  });
  ASSERT_EQ(t.size(), 11u);
  EXPECT_TRUE(same_duration(t[2], t[1])) << "two runs with the straggler";
  EXPECT_EQ(t[4], 0.0);
  EXPECT_TRUE(same_duration(t[5], t[0])) << "restored";
  // GPU 7 holds the ring's slowest hop 3x as long: nearly the whole collective is that hop's
  // bandwidth term, so close to 3x.
  EXPECT_GT(t[1] / t[0], 2.5);
  EXPECT_LT(t[1] / t[0], 3.05);
  // GPU 3's NVLink sends, even 3x slower, stay faster than the network hops that pace the ring.
  EXPECT_GE(t[3], t[0]);
  EXPECT_LT(t[3] / t[0], 1.05);
  for (size_t i = 6; i <= 9; ++i) EXPECT_EQ(t[i], 1.0) << "bad argument " << i << " accepted";
  EXPECT_EQ(t[10], 0.0) << "a refused setting must not stick";
  std::printf(
      "3x straggler: fault-free %.6f ms, GPU 7 (network hop) %.6f ms (x%.3f), GPU 3 (NVLink hop) %.6f ms (x%.4f)\n",
      t[0] * 1e3, t[1] * 1e3, t[1] / t[0], t[3] * 1e3, t[3] / t[0]);
}

TEST(SimulatorFaults, PacketModelRefusesFaultControls) {
  const std::vector<double> t = in_child([] {
    models::ClusterSpec cluster = models::cluster_preset("dgx-h100");
    cluster.nodes = 1;
    const models::Topology topology = models::build_cluster(cluster);
    NetworkModel network = NetworkModel::ideal();
    network.fidelity = Fidelity::kPacket;
    Simulator sim(topology, cluster, network);
    try {
      sim.set_link_factor(0, 0.5);
    } catch (const Error& e) {
      return std::vector<double>{e.code() == ErrorCode::kUnsupported ? 1.0 : 0.0};
    }
    return std::vector<double>{0.0};
  });
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0], 1.0);
}

}  // namespace
}  // namespace tandem::sim
