// The executor contract's promise (core/executor.h): the same schedule with the same faults ends
// the same way on every backend: the same outcome class (completed, or the same ErrorCode) and the
// same culprit rank. Each case builds one schedule, one FaultPlan and one FaultInjector (the route
// of a link fault from the sim cluster's topology), asks the injector through RunContext::on_send
// exactly as the scenario runner does, and checks the outcome against what the fault must cause;
// every executor is held to the same expectation, so any two agree.
//
// Executors: host (real threads, real data: results are checked when no fault hits) and sim
// (sim::SimExecutor on 2 DGX H100 nodes: simulated time, no data). The cuda and nccl plans have
// CPU runners (backend/cuda/stream_plan.h run_on_host, tests/backend/nccl/plan_simulator.h) but
// neither takes the fault hook, so they are not here; the device executors run in tests/gpu.
//
// Culprits and faults are the fields of the report every backend's error carries
// (core/fault_report.h), never read back from its words:
//   kFault    kSendFailed: rank R's send to P failed          culprit R (sender), the plan's fault
//   kCorrupt  kCorrupt: rank R's message from S failed its checksum   culprit R (receiver)
//   kTimeout  kLost: rank R waits on S's lost message          culprit S (sender), the plan's fault
//             kAbsent: ranks that never arrived                culprit the first of them
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "backend/host/host_executor.h"
#include "core/algorithms.h"
#include "core/error.h"
#include "core/fault_report.h"
#include "core/faults.h"
#include "models/cluster.h"
#include "sim/sim_executor.h"
#include "tests/backend/host/collective_check.h"

namespace tandem {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kTimeout{200};   // RunContext::timeout: short, so that host hangs end quickly
constexpr double kStragglerFactor = 50;  // every slowed send >= 49 x 20 us: clear of the host's noise
constexpr double kDegradeFactor = 0.02;  // the same slowdown through a link's bandwidth

models::ClusterSpec sim_cluster() {
  models::ClusterSpec cluster = models::cluster_preset("dgx-h100");
  cluster.nodes = 2;
  return cluster;
}

// ---- executors ----------------------------------------------------------------------------------

struct ExecutorFactory {
  std::string name;
  bool moves_data = false;
  // The executor, ready for `nranks` ranks, `ranks_per_node` on each node in rank order.
  std::function<Executor&(int nranks, int ranks_per_node)> get;
};

std::vector<ExecutorFactory> factories() {
  return {
      {"host", true,
       [](int, int) -> Executor& {
         static HostExecutor executor;
         return executor;
       }},
      {"sim", false,
       [](int nranks, int ranks_per_node) -> Executor& {
         // One platform per process (SimGrid): one executor for every case of this binary.
         static sim::SimExecutor executor(sim_cluster());
         executor.set_placement(sim::SimExecutor::node_major_placement(executor.topology(), nranks, ranks_per_node));
         return executor;
       }},
  };
}

void PrintTo(const ExecutorFactory& factory, std::ostream* out) { *out << factory.name; }

// ---- schedules ----------------------------------------------------------------------------------

struct ScheduleCase {
  std::string name;
  CollectiveSpec spec;
  RankLayout layout;
  Algorithm algorithm = Algorithm::kRing;
  AlgoParams params;
};

CollectiveSpec spec_of(Collective collective, int nranks, int64_t count) {
  return CollectiveSpec{collective, count, DataType::kF32, ReduceOp::kSum, 0, nranks};
}

std::vector<ScheduleCase> schedules() {
  AlgoParams two_channels;
  two_channels.channels = 2;
  RankLayout ring_layout = RankLayout::flat(8);
  ring_layout.ranks_per_node = 8;
  RankLayout one_node_of_4 = RankLayout::flat(4);
  one_node_of_4.ranks_per_node = 4;
  RankLayout one_node_of_5 = RankLayout::flat(5);
  one_node_of_5.ranks_per_node = 5;
  return {
      {"ring_all_reduce_8x2ch", spec_of(Collective::kAllReduce, 8, 4096), ring_layout, Algorithm::kRing, two_channels},
      {"tree_all_reduce_2x4", spec_of(Collective::kAllReduce, 8, 4096), RankLayout::nodes(2, 4), Algorithm::kTree, {}},
      {"direct_all_to_all_4", spec_of(Collective::kAllToAll, 4, 1024), one_node_of_4, Algorithm::kDirect, {}},
      {"recursive_doubling_broadcast_5", spec_of(Collective::kBroadcast, 5, 4096), one_node_of_5,
       Algorithm::kRecursiveDoubling, {}},
  };
}

void PrintTo(const ScheduleCase& schedule, std::ostream* out) { *out << schedule.name; }

// ---- faults -------------------------------------------------------------------------------------

enum class FaultCase { kNone, kTransient, kRankHang, kLinkDown, kCorrupt, kStraggler, kLinkDegrade };

std::string_view name(FaultCase fault) {
  switch (fault) {
    case FaultCase::kNone: return "none";
    case FaultCase::kTransient: return "transient";
    case FaultCase::kRankHang: return "rank_hang";
    case FaultCase::kLinkDown: return "link_down";
    case FaultCase::kCorrupt: return "corrupt";
    case FaultCase::kStraggler: return "straggler";
    case FaultCase::kLinkDegrade: return "link_degrade";
  }
  return "?";
}

void PrintTo(FaultCase fault, std::ostream* out) { *out << name(fault); }

// The first send of the lowest rank above 0 that sends (its op index over the program, lanes in
// order, tile 0): the op the one-op faults hit, and the pair whose route the link faults cut.
struct FirstSend {
  int rank = -1;
  int peer = -1;
  int64_t op_index = -1;
};

FirstSend first_send(const Schedule& schedule) {
  for (int r = 1; r < schedule.nranks; ++r) {
    int64_t offset = 0;
    for (const Lane& lane : schedule.ranks[static_cast<size_t>(r)].lanes) {
      for (size_t i = 0; i < lane.ops.size(); ++i) {
        if (lane.ops[i].kind == OpKind::kSend) return {r, lane.ops[i].peer, offset + static_cast<int64_t>(i)};
      }
      offset += static_cast<int64_t>(lane.ops.size());
    }
  }
  return {};
}

struct Expected {
  std::optional<ErrorCode> code;  // nullopt: completes
  int culprit = -1;               // -1: not compared (a dead link stalls several senders)
  bool slower = false;            // completes slower than fault-free
};

// The fault plan of `fault` for `schedule`, and what it must do.
struct Scenario {
  FaultPlan plan;
  Expected expected;
  bool checksums = false;
};

Scenario scenario(FaultCase fault, const FirstSend& send, const std::string& link) {
  Scenario s;
  Fault f;
  switch (fault) {
    case FaultCase::kNone: return s;
    case FaultCase::kTransient:
      f.kind = FaultKind::kTransient;
      f.rank = send.rank;
      f.trigger.op = send.op_index;
      s.expected = {ErrorCode::kFault, send.rank};
      break;
    case FaultCase::kRankHang:
      f.kind = FaultKind::kRankHang;
      f.rank = send.rank;
      s.expected = {ErrorCode::kTimeout, send.rank};
      break;
    case FaultCase::kLinkDown:
      f.kind = FaultKind::kLinkDown;
      f.link = link;
      s.expected = {ErrorCode::kTimeout, -1};
      break;
    case FaultCase::kCorrupt:
      f.kind = FaultKind::kCorrupt;
      f.rank = send.peer;  // the receiver of that send
      f.trigger.op = send.op_index;
      s.checksums = true;
      s.expected = {ErrorCode::kCorrupt, send.peer};
      break;
    case FaultCase::kStraggler:
      f.kind = FaultKind::kStraggler;
      f.rank = send.rank;
      f.factor = kStragglerFactor;
      s.expected.slower = true;
      break;
    case FaultCase::kLinkDegrade:
      f.kind = FaultKind::kLinkDegrade;
      f.link = link;
      f.factor = kDegradeFactor;
      s.expected.slower = true;
      break;
  }
  s.plan.faults.push_back(f);
  return s;
}

// ---- the suite ----------------------------------------------------------------------------------

std::map<std::string, int>& cases_run() {
  static std::map<std::string, int> counts;
  return counts;
}

// Prints how many cases each executor ran, once every test is done.
class CountCases : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [executor, count] : cases_run()) {
      fmt::print("executor conformance: {} ran {} cases\n", executor, count);
    }
  }
};
const auto* const kCountCases = ::testing::AddGlobalTestEnvironment(new CountCases);

using Param = std::tuple<ExecutorFactory, ScheduleCase, FaultCase>;

class ExecutorConformance : public ::testing::TestWithParam<Param> {};

TEST_P(ExecutorConformance, SameFaultSameOutcomeSameCulprit) {
  const auto& [factory, schedule_case, fault] = GetParam();
  const CollectiveSpec& spec = schedule_case.spec;
  const Schedule schedule =
      build_checked_schedule(spec, schedule_case.layout, schedule_case.algorithm, schedule_case.params);
  const int per_node = schedule_case.layout.ranks_per_node;
  Executor& executor = factory.get(spec.nranks, per_node);

  // Ranks on the sim cluster's GPUs, node-major, for the routes of link faults (every executor
  // gets the same injector: the same transfers are hit).
  const models::Topology topology = models::build_cluster(sim_cluster());
  const std::vector<int> gpus = sim::SimExecutor::node_major_placement(topology, spec.nranks, per_node);
  const FirstSend send = first_send(schedule);
  ASSERT_GE(send.rank, 1) << "no rank above 0 sends";
  const models::Route route =
      topology.route(gpus[static_cast<size_t>(send.rank)], gpus[static_cast<size_t>(send.peer)]);
  ASSERT_FALSE(route.hops.empty());
  const std::string link = topology.link(route.hops.front().link).name;  // the sender's own first hop

  const Scenario s = scenario(fault, send, link);
  const FaultInjector injector(s.plan, [&](const Fault& f, int src, int dst) {
    const std::optional<uint32_t> id = topology.find_link(f.link);
    return id && models::Topology::crosses(
                     topology.route(gpus[static_cast<size_t>(src)], gpus[static_cast<size_t>(dst)]), *id);
  });
  const std::vector<int> active = injector.active(0, 0, 0.0, 0.0, false);

  RunContext context;
  context.timeout = kTimeout;
  context.checksums = s.checksums;
  // As the scenario runner's device path does: a rank that hangs never sends (its sends stall).
  const auto with_faults = [&](int src, int dst, int64_t op) {
    TransferEffect effect = injector.transfer(active, src, dst, op);
    if (injector.rank_action(active, src) == RankAction::kHang) {
      effect.stall = true;
      for (int i : active) {
        if (s.plan.faults[static_cast<size_t>(i)].rank == src && effect.fault_index < 0) effect.fault_index = i;
      }
    }
    return effect;
  };
  if (!s.plan.empty()) context.on_send = with_faults;

  test::CollectiveData data(spec, false);
  std::span<const RankBuffers> buffers = factory.moves_data ? data.buffers() : std::span<const RankBuffers>{};
  ++cases_run()[factory.name];

  std::optional<Error> error;
  double seconds = 0;
  try {
    seconds = executor.run(schedule, spec, buffers, context).seconds;
  } catch (const Error& e) {
    error = e;
  }

  const Expected& expected = s.expected;
  if (expected.code) {
    ASSERT_TRUE(error.has_value()) << "completed; expected " << error_code_name(*expected.code);
    EXPECT_EQ(error->code(), *expected.code) << error->what();
    const FaultReport* report = error->report();
    ASSERT_NE(report, nullptr) << "no fault report: " << error->what();
    EXPECT_EQ(report->code(), error->code());
    EXPECT_EQ(report->text(), error->what());
    EXPECT_EQ(report->backend, factory.name);
    if (expected.culprit >= 0) {
      EXPECT_EQ(report->culprit(), expected.culprit) << error->what();
    }
    // The sender's side names the fault; a checksum mismatch is found by a receiver, which cannot.
    if (*expected.code != ErrorCode::kCorrupt) {
      EXPECT_EQ(report->fault, 0) << error->what();
    }
    return;
  }
  ASSERT_FALSE(error.has_value()) << error->what();
  if (factory.moves_data) {
    EXPECT_TRUE(data.check());
  }
  if (!expected.slower) return;
  // Slower than the fault-free run: the fastest of a few, on the real backends (noise, warm-up).
  double clean = 1e300;
  for (int i = 0; i < 3; ++i) {
    RunContext fault_free;
    fault_free.timeout = kTimeout;
    clean = std::min(clean, executor.run(schedule, spec, buffers, fault_free).seconds);
  }
  EXPECT_GT(seconds / clean, 1.5) << seconds << " s with the fault, " << clean << " s without";
  fmt::print("{} {} {}: {:.3g} s with the fault, {:.3g} s without ({:.1f}x)\n", factory.name, schedule_case.name,
             name(fault), seconds, clean, seconds / clean);
  if (factory.moves_data) {
    EXPECT_TRUE(data.check());
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [factory, schedule_case, fault] = info.param;
  return fmt::format("{}_{}_{}", factory.name, schedule_case.name, name(fault));
}

INSTANTIATE_TEST_SUITE_P(Executors, ExecutorConformance,
                         ::testing::Combine(::testing::ValuesIn(factories()), ::testing::ValuesIn(schedules()),
                                            ::testing::Values(FaultCase::kNone, FaultCase::kTransient,
                                                              FaultCase::kRankHang, FaultCase::kLinkDown,
                                                              FaultCase::kCorrupt, FaultCase::kStraggler,
                                                              FaultCase::kLinkDegrade)),
                         param_name);

}  // namespace
}  // namespace tandem
