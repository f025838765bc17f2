// sim::SimExecutor: the simulator behind the executor contract. One SimExecutor serves every test
// of this binary (SimGrid allows one platform per process): 2 DGX H100 nodes.
#include "sim/sim_executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <tuple>

#include "backend/host/host_executor.h"
#include "core/algorithms.h"
#include "core/error.h"
#include "models/cluster.h"
#include "tests/support/expect_error.h"

namespace tandem::sim {
namespace {

using tandem::testing::expect_error;

SimExecutor& executor() {
  static SimExecutor* const instance = [] {
    models::ClusterSpec cluster = models::cluster_preset("dgx-h100");
    cluster.nodes = 2;
    return new SimExecutor(cluster);
  }();
  instance->set_placement({});
  return *instance;
}

CollectiveSpec all_reduce(int nranks, int64_t count) {
  return CollectiveSpec{Collective::kAllReduce, count, DataType::kF32, ReduceOp::kSum, 0, nranks};
}

Schedule ring(const CollectiveSpec& spec, int channels, ScheduleForm form = ScheduleForm::kExplicit) {
  AlgoParams params;
  params.channels = channels;
  return build_checked_schedule(spec, RankLayout::flat(spec.nranks), Algorithm::kRing, params, form);
}

double run(const Schedule& schedule, const CollectiveSpec& spec, RunContext context = {}) {
  return executor().run(schedule, spec, {}, context).seconds;
}

TEST(SimExecutor, WithoutHookItIsTheSimulatorsTime) {
  const CollectiveSpec spec = all_reduce(8, 1 << 22);
  for (ScheduleForm form : {ScheduleForm::kExplicit, ScheduleForm::kSymmetric}) {
    const Schedule schedule = ring(spec, 2, form);
    SimRequest request{&schedule, spec, {0, 1, 2, 3, 4, 5, 6, 7}, models::NcclProtocol::kSimple, 1};
    const double direct = executor().simulator().run(request).seconds;
    EXPECT_NEAR(run(schedule, spec), direct, direct * 1e-9);
    EXPECT_GT(direct, 50e-6);  // 16 MiB over NVLink: tens of microseconds, not nothing
  }
}

TEST(SimExecutor, NeutralHookGivesTheFaultFreeTime) {
  const CollectiveSpec spec = all_reduce(8, 1 << 20);
  const Schedule schedule = ring(spec, 1);
  RunContext context;
  context.on_send = [](int, int, int64_t) { return TransferEffect{}; };
  const double clean = run(schedule, spec);
  EXPECT_NEAR(run(schedule, spec, context), clean, clean * 1e-6);
}

// The hook is asked once per send with the host backend's numbering (over all tiles, lanes in
// order): the same (src, dst, op_index) triples on both, for a 2-channel ring in 3 tiles.
TEST(SimExecutor, HookNumbersSendsAsTheHostDoes) {
  const CollectiveSpec spec = all_reduce(8, 3000);
  const Schedule schedule = ring(spec, 2);
  using Call = std::tuple<int, int, int64_t>;
  auto calls_of = [&](Executor& backend, std::span<const RankBuffers> buffers) {
    std::mutex mutex;
    std::multiset<Call> calls;
    RunContext context;
    context.tiles = 3;
    context.on_send = [&](int src, int dst, int64_t op) {
      std::lock_guard lock(mutex);
      calls.emplace(src, dst, op);
      return TransferEffect{};
    };
    backend.run(schedule, spec, buffers, context);
    return calls;
  };
  std::vector<std::vector<float>> memory(16, std::vector<float>(3000, 1.0f));
  std::vector<RankBuffers> buffers;
  for (int r = 0; r < 8; ++r) buffers.push_back({memory[2 * r].data(), memory[2 * r + 1].data()});
  HostExecutor host;
  const std::multiset<Call> on_host = calls_of(host, buffers);
  const std::multiset<Call> on_sim = calls_of(executor(), {});
  EXPECT_EQ(on_sim, on_host);
  EXPECT_EQ(on_sim.size(), 8u * 2 * 2 * 7 * 3);  // ranks x channels x (2 (n - 1) sends) x tiles
}

TEST(SimExecutor, FailedSendThrowsFaultNamingRankPeerAndFault) {
  const CollectiveSpec spec = all_reduce(8, 1 << 16);
  const Schedule schedule = ring(spec, 1);
  RunContext context;
  context.on_send = [](int src, int, int64_t op) {
    TransferEffect effect;
    if (src == 5 && op == 4) effect = {.fail = true, .fault_index = 2};
    return effect;
  };
  expect_error([&] { run(schedule, spec, context); }, ErrorCode::kFault,
               {"sim rank 5 lane 0 op 4: send to 6 failed (injected fault #2)"});
}

TEST(SimExecutor, StalledSendsTimeOutNamingTheSender) {
  const CollectiveSpec spec = all_reduce(8, 1 << 16);
  const Schedule schedule = ring(spec, 1);
  RunContext context;
  context.timeout = std::chrono::milliseconds(200);
  context.on_send = [](int src, int, int64_t) {
    TransferEffect effect;
    if (src == 3) effect = {.stall = true, .fault_index = 0};
    return effect;
  };
  expect_error([&] { run(schedule, spec, context); }, ErrorCode::kTimeout,
               {"timed out after 200 ms", "rank 4 waits on", "its message from rank 3 was lost (injected fault #0)"});
}

// A fail that a stall keeps from ever being reached does not happen: the run times out.
TEST(SimExecutor, FailBehindAStallIsNeverReached) {
  const CollectiveSpec spec = all_reduce(2, 1 << 10);
  const Schedule schedule = ring(spec, 1);
  RunContext context;
  context.on_send = [](int src, int, int64_t op) {
    TransferEffect effect;
    if (src == 0) effect.stall = true;           // rank 1 never gets its first message ...
    if (src == 1 && op == 2) effect.fail = true;  // ... so never reaches its second send
    return effect;
  };
  expect_error([&] { run(schedule, spec, context); }, ErrorCode::kTimeout, {"its message from rank 0 was lost"});
}

TEST(SimExecutor, CorruptMessageFailsItsChecksumOnlyWithChecksums) {
  const CollectiveSpec spec = all_reduce(8, 1 << 16);
  const Schedule schedule = ring(spec, 1);
  RunContext context;
  context.on_send = [](int, int dst, int64_t op) {
    TransferEffect effect;
    if (dst == 2 && op == 2) effect = {.corrupt = true, .fault_index = 1};
    return effect;
  };
  const double clean = run(schedule, spec);
  EXPECT_NEAR(run(schedule, spec, context), clean, clean * 1e-6);  // no data, nothing to check
  context.checksums = true;
  expect_error([&] { run(schedule, spec, context); }, ErrorCode::kCorrupt,
               {"sim rank 2 lane 0 op", "the message from 1 failed its checksum"});
}

// Every send f times as long: the whole (bandwidth-bound) collective about f times as long.
TEST(SimExecutor, SlowedSendsTakeFactorTimesAsLong) {
  const CollectiveSpec spec = all_reduce(2, int64_t{1} << 24);
  const Schedule schedule = ring(spec, 1);
  const double clean = run(schedule, spec);
  for (const auto& [delay, bandwidth] : {std::pair{2.0, 1.0}, std::pair{1.0, 0.5}, std::pair{3.0, 0.5}}) {
    RunContext context;
    context.on_send = [delay, bandwidth](int, int, int64_t) {
      return TransferEffect{.bandwidth_factor = bandwidth, .delay_factor = delay};
    };
    const double factor = delay / bandwidth;
    // Latencies are not slowed: a little under f.
    const double ratio = run(schedule, spec, context) / clean;
    EXPECT_GT(ratio, 0.9 * factor) << delay << " / " << bandwidth;
    EXPECT_LE(ratio, factor) << delay << " / " << bandwidth;
  }
}

// A small message is slowed by at least (f - 1) x kMinSlowedTransfer_s per send, as on the host.
TEST(SimExecutor, SlowedSmallSendsCountTheMinimumTransferTime) {
  const CollectiveSpec spec = all_reduce(2, 2);
  const Schedule schedule = ring(spec, 1);
  const double clean = run(schedule, spec);
  RunContext context;
  context.on_send = [](int src, int, int64_t) { return TransferEffect{.delay_factor = src == 0 ? 3.0 : 1.0}; };
  // Rank 0 sends twice, each held 2 x 20 us longer (less what overlaps rank 1's latencies).
  EXPECT_NEAR(run(schedule, spec, context) - clean, 2 * 2 * kMinSlowedTransfer_s, 5e-6);
}

TEST(SimExecutor, PlacementPutsRanksOnTheirGpus) {
  const models::Topology& topology = executor().topology();
  EXPECT_EQ(SimExecutor::node_major_placement(topology, 8, 4), (std::vector<int>{0, 1, 2, 3, 8, 9, 10, 11}));
  const CollectiveSpec spec = all_reduce(8, 1 << 24);
  const Schedule schedule = ring(spec, 1);
  const double one_node = run(schedule, spec);
  SimExecutor& sim = executor();
  sim.set_placement(SimExecutor::node_major_placement(topology, 8, 4));
  const double two_nodes = sim.run(schedule, spec, {}, {}).seconds;
  EXPECT_GT(two_nodes, 2 * one_node);  // two ring hops cross a 400G NIC instead of NVLink
  expect_error([&] { executor().set_placement({0, 16}); }, ErrorCode::kInvalidArgument, {"GPU 16 out of range"});
  expect_error([&] { executor().set_placement({3, 3}); }, ErrorCode::kInvalidArgument, {"GPU 3 placed twice"});
}

TEST(SimExecutor, RejectsBadArguments) {
  const CollectiveSpec spec = all_reduce(8, 64);
  const Schedule schedule = ring(spec, 1);
  expect_error([&] { run(schedule, all_reduce(4, 64)); }, ErrorCode::kInvalidArgument, {"does not match"});
  RunContext context;
  context.tiles = 0;
  expect_error([&] { run(schedule, spec, context); }, ErrorCode::kInvalidArgument, {"tiles"});
  const CollectiveSpec big = all_reduce(17, 64);
  expect_error([&] { run(build_checked_schedule(big, RankLayout::flat(17), Algorithm::kRing), big); },
               ErrorCode::kInvalidArgument, {"17 ranks on a cluster of 16 GPUs"});
  executor();
  expect_error([] { SimExecutor second(models::cluster_preset("dgx-h100")); }, ErrorCode::kBackend,
               {"one simulated platform per process"});
}

}  // namespace
}  // namespace tandem::sim
