// The NCCL plan on CPU: every rank's plan run by the strict NCCL-semantics simulator
// (plan_simulator.h), compared with the sequential reference (collective_check.h) and byte for byte
// with the host executor, for every algorithm x collective x rank counts {1, 2, 3, 5, 8} x counts
// {0, 1, 7, 1000} x tiles {1, 2} x {f32, i32} x {sum, avg, max} (non-reducing collectives: sum only)
// x out of place / in place, explicit and rank-symmetric schedules, plus multi-lane variants (ring
// with 2 channels, tree / hierarchical with 2 pipeline chunks); sanitizer and debug builds run a
// reduced sweep (see full_sweep). Then plans broken on purpose, which the simulator must reject.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "backend/host/host_executor.h"
#include "backend/nccl/nccl_plan.h"
#include "core/algorithms.h"
#include "core/error.h"
#include "tests/backend/host/collective_check.h"
#include "tests/backend/nccl/plan_simulator.h"
#include "tests/support/sweep.h"

namespace tandem {

void PrintTo(Algorithm algorithm, std::ostream* out) { *out << name(algorithm); }
void PrintTo(Collective collective, std::ostream* out) { *out << name(collective); }

namespace nccl {
namespace {

using tandem::testing::full_sweep;

constexpr int kRankCounts[] = {1, 2, 3, 5, 8};
constexpr uint32_t kTiles[] = {1, 2};
constexpr int kMaxReportedFailures = 10;

// Sanitizer and unoptimised builds sweep i32 only, ops {sum, avg}, counts {0, 7, 1000} (a quarter
// of the cases; see tests/support/sweep.h).
std::vector<int64_t> sweep_counts() {
  if (full_sweep()) return {0, 1, 7, 1000};
  return {0, 7, 1000};
}
std::vector<DataType> sweep_types() {
  if (full_sweep()) return {DataType::kF32, DataType::kI32};
  return {DataType::kI32};
}
std::vector<ReduceOp> sweep_ops() {
  if (full_sweep()) return {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};
  return {ReduceOp::kSum, ReduceOp::kAvg};
}

// Flat, except hierarchical, which needs whole nodes (as the host sweep).
RankLayout layout_for(Algorithm algorithm, int n) {
  if (algorithm != Algorithm::kHierarchical) return RankLayout::flat(n);
  const int per_node = n % 4 == 0 ? 4 : (n % 2 == 0 ? 2 : n);
  return RankLayout::nodes(n / per_node, per_node);
}

// The parameter sets an algorithm runs with: the defaults, and one with several lanes or pipeline
// chunks (sends to one peer in one group then come from several lanes / ops).
std::vector<AlgoParams> params_for(Algorithm algorithm) {
  std::vector<AlgoParams> out = {AlgoParams{}};
  if (algorithm == Algorithm::kRing) out.push_back(AlgoParams{.channels = 2});
  if (algorithm == Algorithm::kTree || algorithm == Algorithm::kHierarchical) {
    out.push_back(AlgoParams{.pipeline_chunks = 2});
  }
  return out;
}

using SweepParam = std::tuple<Algorithm, Collective, int>;

std::vector<SweepParam> sweep_params() {
  std::vector<SweepParam> params;
  for (Algorithm algorithm : all_algorithms()) {
    for (Collective collective : all_collectives()) {
      if (!implements(algorithm, collective)) continue;
      for (int n : kRankCounts) params.emplace_back(algorithm, collective, n);
    }
  }
  return params;
}

std::string param_name(const ::testing::TestParamInfo<SweepParam>& info) {
  const auto [algorithm, collective, n] = info.param;
  return fmt::format("{}_{}_{}ranks", name(algorithm), name(collective), n);
}

std::atomic<int> total_cases{0};
std::atomic<int64_t> total_lifted{0};
class CaseCountPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    fmt::print("nccl plan sweep ({}): {} cases; {} sends lifted to their receive's round\n",
               full_sweep() ? "full" : "reduced for a sanitizer or debug build", total_cases.load(),
               total_lifted.load());
  }
};
const auto* const kCaseCountPrinter = ::testing::AddGlobalTestEnvironment(new CaseCountPrinter);

// The bytes of the outputs the collective defines (reduce: the root's only).
std::vector<std::vector<std::byte>> defined_outputs(const tandem::test::CollectiveData& data,
                                                    const CollectiveSpec& spec) {
  const size_t bytes = static_cast<size_t>(buffer_geometry(spec.collective, spec.nranks).output_blocks * spec.count) *
                       size_bytes(spec.dtype);
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(spec.nranks));
  for (int r = 0; r < spec.nranks; ++r) {
    if (spec.collective == Collective::kReduce && r != spec.root) continue;
    out[static_cast<size_t>(r)].assign(data.output(r), data.output(r) + bytes);
  }
  return out;
}

class NcclPlanSweep : public ::testing::TestWithParam<SweepParam> {
 protected:
  void run_case(const Schedule& schedule, const CollectiveSpec& spec, uint32_t tiles, bool in_place,
                const std::string& form) {
    ++cases_;
    const std::string what =
        fmt::format("{} tiles={} {}", tandem::test::describe(spec, schedule.algorithm, in_place), tiles, form);
    try {
      const NcclPlan plan = build_nccl_plan(schedule, spec, PlanOptions{.tiles = tiles});
      total_lifted += plan.lifted_sends;
      tandem::test::CollectiveData planned(spec, in_place);
      test::simulate_plan(plan, spec, planned.buffers());
      if (const ::testing::AssertionResult result = planned.check(); !result) {
        return report(what + ": " + result.message());
      }
      tandem::test::CollectiveData hosted(spec, in_place);
      host_.run(schedule, spec, hosted.buffers(), RunContext{.tiles = tiles});
      if (defined_outputs(planned, spec) != defined_outputs(hosted, spec)) {
        return report(what + ": outputs differ from the host executor's");
      }
    } catch (const std::exception& error) {
      report(what + " threw: " + error.what());
    }
  }

  void report(const std::string& failure) {
    if (++failures_ <= kMaxReportedFailures) ADD_FAILURE() << failure;
  }

  HostExecutor host_;
  int failures_ = 0;
  int cases_ = 0;
};

TEST_P(NcclPlanSweep, SimulatedPlanMatchesHost) {
  const auto [algorithm, collective, n] = GetParam();
  const bool reduces = is_reduction(collective);
  const bool has_in_place = buffer_geometry(collective, n).in_place_supported;
  const RankLayout layout = layout_for(algorithm, n);
  for (const AlgoParams& params : params_for(algorithm)) {
    CollectiveSpec spec{.collective = collective, .root = n / 2, .nranks = n};
    std::vector<Schedule> forms;
    forms.push_back(build_checked_schedule(spec, layout, algorithm, params));
    Schedule symmetric = build_checked_schedule(spec, layout, algorithm, params, ScheduleForm::kSymmetric);
    if (symmetric.symmetric()) forms.push_back(std::move(symmetric));
    for (const Schedule& schedule : forms) {
      const std::string form =
          fmt::format("{} channels={} pipeline={}", schedule.symmetric() ? "symmetric" : "explicit", params.channels,
                      params.pipeline_chunks);
      for (DataType dtype : sweep_types()) {
        for (ReduceOp op : sweep_ops()) {
          if (!reduces && op != ReduceOp::kSum) continue;
          for (int64_t count : sweep_counts()) {
            for (uint32_t tiles : kTiles) {
              for (bool in_place : {false, true}) {
                if (in_place && !has_in_place) continue;
                spec.dtype = dtype;
                spec.op = op;
                spec.count = count;
                run_case(schedule, spec, tiles, in_place, form);
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(failures_, 0) << failures_ << " of " << cases_ << " cases failed";
  total_cases += cases_;
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, NcclPlanSweep, ::testing::ValuesIn(sweep_params()), param_name);

// The plan lowers NCCL's multi-node structure like any schedule: channel rings (a ring order per
// channel, symmetric form included) and channel trees on 2..4 nodes x 2..8 ranks, each rank's
// simulated plan against the host executor.
class NcclPlanNodeSweep : public NcclPlanSweep {};

TEST_F(NcclPlanNodeSweep, ChannelRingsAndTreesMatchHost) {
  for (const tandem::testing::NodeCase& node_case : tandem::testing::nccl_node_cases()) {
    const int n = node_case.layout.nranks;
    for (const auto& [algorithm, collective] :
         {std::pair{Algorithm::kRing, Collective::kAllReduce}, std::pair{Algorithm::kRing, Collective::kAllGather},
          std::pair{Algorithm::kRing, Collective::kReduceScatter}, std::pair{Algorithm::kTree, Collective::kAllReduce}}) {
      AlgoParams params = node_case.params;
      if (algorithm == Algorithm::kTree) params.pipeline_chunks = 2;
      CollectiveSpec spec{.collective = collective, .root = n / 2, .nranks = n};
      std::vector<Schedule> forms;
      forms.push_back(build_checked_schedule(spec, node_case.layout, algorithm, params));
      Schedule symmetric = build_checked_schedule(spec, node_case.layout, algorithm, params, ScheduleForm::kSymmetric);
      if (symmetric.symmetric()) forms.push_back(std::move(symmetric));
      for (const Schedule& schedule : forms) {
        const std::string form = node_case.name + (schedule.symmetric() ? " symmetric" : " explicit");
        for (int64_t count : {int64_t{7}, int64_t{1000}}) {
          for (bool in_place : {false, true}) {
            if (in_place && !buffer_geometry(collective, n).in_place_supported) continue;
            spec.dtype = DataType::kI32;
            spec.op = ReduceOp::kSum;
            spec.count = count;
            run_case(schedule, spec, 2, in_place, form);
          }
        }
      }
    }
  }
  EXPECT_EQ(failures_, 0) << failures_ << " of " << cases_ << " cases failed";
  total_cases += cases_;
}

// ---------------------------------------------------------------------------------------------
// Structure: a ring all_reduce of n ranks is 2(n - 1) groups of one send and one receive per rank.

TEST(NcclPlan, RingAllReduceIsOneGroupPerRound) {
  constexpr int n = 5;
  const CollectiveSpec spec{.collective = Collective::kAllReduce, .count = 1000, .nranks = n};
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(n), Algorithm::kRing);
  const NcclPlan plan = build_nccl_plan(schedule, spec, PlanOptions{});
  EXPECT_EQ(plan.levels, schedule.num_rounds);
  EXPECT_EQ(plan.lifted_sends, 0);
  ASSERT_EQ(plan.ranks.size(), size_t{n});
  for (const RankPlan& rank : plan.ranks) {
    ASSERT_EQ(rank.groups.size(), size_t{2 * (n - 1)}) << "rank " << rank.rank;
    for (const PlanGroup& group : rank.groups) {
      ASSERT_EQ(group.transfers.size(), 2u);
      EXPECT_EQ(group.transfers[0].kind, TransferKind::kSend);
      EXPECT_EQ(group.transfers[0].peer, (rank.rank + 1) % n);
      EXPECT_EQ(group.transfers[1].kind, TransferKind::kRecv);
      EXPECT_EQ(group.transfers[1].peer, (rank.rank + n - 1) % n);
    }
    // The reduce-scatter half receives into staging and reduces after the group.
    EXPECT_EQ(rank.groups[0].transfers[1].range.buffer, PlanBuffer::kStaging);
    ASSERT_EQ(rank.groups[0].local.size(), 1u);
    EXPECT_EQ(rank.groups[0].local[0].kind, LocalKind::kReduce);
    EXPECT_EQ(rank.staging_elements, 200);
    EXPECT_FALSE(rank.finish.has_value());
  }
}

TEST(NcclPlan, TwoChannelsKeepLaneOrderToOnePeer) {
  constexpr int n = 3;
  const CollectiveSpec spec{.collective = Collective::kAllGather, .count = 100, .nranks = n};
  const Schedule schedule =
      build_checked_schedule(spec, RankLayout::flat(n), Algorithm::kRing, AlgoParams{.channels = 2});
  const NcclPlan plan = build_nccl_plan(schedule, spec, PlanOptions{});
  for (const RankPlan& rank : plan.ranks) {
    for (const PlanGroup& group : rank.groups) {
      if (group.transfers.empty()) continue;  // the local copy of the rank's own block
      std::vector<uint32_t> send_lanes;
      for (const Transfer& t : group.transfers) {
        if (t.kind == TransferKind::kSend) send_lanes.push_back(t.lane);
      }
      EXPECT_TRUE(std::is_sorted(send_lanes.begin(), send_lanes.end()));
      EXPECT_EQ(send_lanes.size(), 2u) << "both channels send in every round";
    }
  }
}

TEST(NcclPlan, AverageDividesTheReducedOutputOnce) {
  const CollectiveSpec spec{
      .collective = Collective::kReduce, .count = 10, .op = ReduceOp::kAvg, .root = 1, .nranks = 3};
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(3), Algorithm::kRing);
  const NcclPlan plan = build_nccl_plan(schedule, spec, PlanOptions{});
  for (const RankPlan& rank : plan.ranks) {
    EXPECT_EQ(rank.finish.has_value(), rank.rank == 1) << "rank " << rank.rank;
  }
  const RankPlan& root = plan.ranks[1];
  ASSERT_TRUE(root.finish);
  EXPECT_EQ(root.finish->kind, LocalKind::kDivide);
  EXPECT_EQ(root.finish->segments.at(0).dst, (PlanRange{PlanBuffer::kOutput, 0, 10}));
}

TEST(NcclPlan, SubsetOfRanksAndFaultOpIndices) {
  const CollectiveSpec spec{.collective = Collective::kAllReduce, .count = 64, .nranks = 4};
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(4), Algorithm::kRing);
  const int ranks[] = {2};
  const NcclPlan plan = build_nccl_plan(schedule, spec, PlanOptions{.tiles = 2}, ranks);
  ASSERT_EQ(plan.ranks.size(), 1u);
  EXPECT_EQ(plan.ranks[0].rank, 2);
  // Op indices count the program's ops over all tiles, lanes in order, as the host backend's hook.
  const int64_t ops_per_tile = static_cast<int64_t>(schedule.ranks[2].lanes[0].ops.size());
  std::vector<int64_t> indices;
  for (const PlanGroup& group : plan.ranks[0].groups) {
    for (const Transfer& t : group.transfers) {
      if (t.kind == TransferKind::kSend) indices.push_back(t.op_index);
    }
  }
  ASSERT_FALSE(indices.empty());
  EXPECT_EQ(indices.front(), 0);
  EXPECT_GE(indices.back(), ops_per_tile);
  EXPECT_LT(indices.back(), 2 * ops_per_tile);
  EXPECT_TRUE(std::is_sorted(indices.begin(), indices.end()));
}

TEST(NcclPlan, RejectsBadArguments) {
  const CollectiveSpec spec{.collective = Collective::kAllReduce, .count = 8, .nranks = 2};
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(2), Algorithm::kRing);
  CollectiveSpec other = spec;
  other.nranks = 3;
  EXPECT_THROW(build_nccl_plan(schedule, other, PlanOptions{}), Error);
  EXPECT_THROW(build_nccl_plan(schedule, spec, PlanOptions{.tiles = 0}), Error);
  const int bad_rank[] = {2};
  EXPECT_THROW(build_nccl_plan(schedule, spec, PlanOptions{}, bad_rank), Error);
  // An unmatched send is a malformed schedule.
  Schedule broken = schedule;
  broken.ranks[1].lanes[0].ops.pop_back();
  broken.ranks[1].lanes[0].dep_begin.pop_back();
  broken.ranks[1].lanes[0].deps.resize(broken.ranks[1].lanes[0].dep_begin.back());
  try {
    build_nccl_plan(broken, spec, PlanOptions{});
    ADD_FAILURE() << "an unmatched send was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidSchedule) << error.what();
  }
}

// ---------------------------------------------------------------------------------------------
// Broken plans: the simulator must catch each, so the sweep above proves something.

class BrokenPlan : public ::testing::Test {
 protected:
  static constexpr int kRanks = 4;
  BrokenPlan()
      : spec_{.collective = Collective::kAllReduce, .count = 100, .nranks = kRanks},
        schedule_(build_checked_schedule(spec_, RankLayout::flat(kRanks), Algorithm::kRing)),
        plan_(build_nccl_plan(schedule_, spec_, PlanOptions{})) {}

  // Simulates `plan` and returns the simulator's complaint ("" when it ran and the data is right,
  // "wrong data" when it ran and the result is wrong).
  std::string outcome(const NcclPlan& plan) const {
    tandem::test::CollectiveData data(spec_, false);
    try {
      test::simulate_plan(plan, spec_, data.buffers());
    } catch (const test::PlanFault& fault) {
      return fault.what();
    }
    return data.check() ? "" : "wrong data";
  }

  CollectiveSpec spec_;
  Schedule schedule_;
  NcclPlan plan_;
};

TEST_F(BrokenPlan, IntactPlanPasses) { EXPECT_EQ(outcome(plan_), ""); }

TEST_F(BrokenPlan, SendMovedToALaterGroup) {
  NcclPlan plan = plan_;
  std::vector<PlanGroup>& groups = plan.ranks[1].groups;
  const Transfer send = groups[0].transfers[0];
  ASSERT_EQ(send.kind, TransferKind::kSend);
  groups[0].transfers.erase(groups[0].transfers.begin());
  groups[1].transfers.insert(groups[1].transfers.begin(), send);
  EXPECT_NE(outcome(plan).find("mismatch"), std::string::npos) << outcome(plan);
}

TEST_F(BrokenPlan, ReceiveDropped) {
  NcclPlan plan = plan_;
  std::vector<Transfer>& transfers = plan.ranks[2].groups[3].transfers;
  transfers.erase(transfers.begin() + 1);
  EXPECT_NE(outcome(plan).find("mismatch"), std::string::npos) << outcome(plan);
}

TEST_F(BrokenPlan, MessageSizeChanged) {
  NcclPlan plan = plan_;
  plan.ranks[0].groups[2].transfers[0].range.count -= 1;
  EXPECT_NE(outcome(plan).find("message 0 mismatch"), std::string::npos) << outcome(plan);
}

TEST_F(BrokenPlan, GroupsOfOneRankSwapped) {
  // Rank 0 runs its first two groups in the other order: the same peers and sizes, so only the
  // (tile, level) correspondence shows it.
  NcclPlan plan = plan_;
  std::swap(plan.ranks[0].groups[0], plan.ranks[0].groups[1]);
  const std::string result = outcome(plan);
  EXPECT_NE(result.find("group mismatch"), std::string::npos) << result;
}

TEST_F(BrokenPlan, DeadlockReported) {
  // Every rank waits for its predecessor's send, which sits one group later: a cycle of waits.
  NcclPlan plan = plan_;
  for (RankPlan& rank : plan.ranks) {
    std::vector<Transfer>& first = rank.groups[0].transfers;
    const Transfer send = first[0];
    first.erase(first.begin());
    rank.groups.insert(rank.groups.begin() + 1, PlanGroup{.tile = 0, .level = 0, .transfers = {send}, .local = {}});
  }
  const std::string result = outcome(plan);
  EXPECT_NE(result.find("deadlock"), std::string::npos) << result;
}

TEST_F(BrokenPlan, WrongOffsetIsCaughtByTheData) {
  NcclPlan plan = plan_;
  plan.ranks[1].groups[0].transfers[0].range.offset += 1;  // same size, wrong elements
  EXPECT_EQ(outcome(plan), "wrong data");
}

TEST_F(BrokenPlan, MissingReductionIsCaughtByTheData) {
  NcclPlan plan = plan_;
  plan.ranks[3].groups[1].local.clear();
  EXPECT_EQ(outcome(plan), "wrong data");
}

}  // namespace
}  // namespace nccl
}  // namespace tandem
