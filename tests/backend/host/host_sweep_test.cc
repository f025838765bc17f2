// The host backend against a sequential reference, with real data: every algorithm x every
// collective it supports x rank counts {1, 2, 3, 4, 5, 7, 8, 13, 16}, and for each
//   dtypes {f32, f16, bf16, f64, i32, i64} x ops {sum, prod, min, max, avg} (reducing collectives;
//   the others run one op) x counts {0, 1, n - 1, n, 1001} x out of place and in place (where the
//   collective has an in-place form), with the explicit schedule and, where the algorithm has one,
//   the rank-symmetric schedule.
// Count 1 Mi (1 << 20) runs on a subset to keep the binary within a few minutes on two cores:
// ranks {3, 8}, dtypes {f32, bf16, i32}, ops {sum, max} (the others: one op), out of place and in
// place, and only where all ranks' buffers together stay within kLargeCaseBytes (so at 8 ranks
// only the collectives with one block per buffer: all_reduce, broadcast, reduce, send_recv).
// Sanitizer and unoptimised builds (debug-asan, debug-tsan) run a reduced sweep: no 1 Mi counts
// and dtypes {f16, f64, i32} only (2-, 8- and 4-byte elements, float and integer), because under
// ThreadSanitizer the full sweep takes most of an hour. TANDEM_FULL_SWEEP=1 runs it in full anyway.
// Outputs are poisoned before each run; broadcast and reduce use root n / 2 (not 0 when n > 1);
// reduce checks the root's output only. The tolerance is documented in collective_check.h.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "backend/host/host_executor.h"
#include "core/algorithms.h"
#include "core/error.h"
#include "tests/backend/host/collective_check.h"
#include "tests/support/sweep.h"

namespace tandem {

// Readable parameters in gtest's failure lines.
void PrintTo(Algorithm algorithm, std::ostream* out) { *out << name(algorithm); }
void PrintTo(Collective collective, std::ostream* out) { *out << name(collective); }

namespace {

using tandem::testing::full_sweep;
using tandem::testing::sweep_layouts;

std::vector<DataType> sweep_types() {
  if (full_sweep()) return {all_data_types().begin(), all_data_types().end()};
  return {DataType::kF16, DataType::kF64, DataType::kI32};
}

constexpr int kRankCounts[] = {1, 2, 3, 4, 5, 7, 8, 13, 16};
constexpr int64_t kOddCount = 1001;
constexpr int64_t kLargeCount = int64_t{1} << 20;
constexpr int kLargeCaseRanks[] = {3, 8};
constexpr DataType kLargeCaseTypes[] = {DataType::kF32, DataType::kBF16, DataType::kI32};
constexpr ReduceOp kLargeCaseOps[] = {ReduceOp::kSum, ReduceOp::kMax};
constexpr int64_t kLargeCaseBytes = int64_t{64} << 20;
constexpr int kMaxReportedFailures = 10;

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

// Cases run by the whole binary, printed at the end.
std::atomic<int> total_cases{0};
class CaseCountPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    fmt::print("host sweep ({}): {} cases\n", full_sweep() ? "full" : "reduced for a sanitizer or debug build",
               total_cases.load());
  }
};
const auto* const kCaseCountPrinter = ::testing::AddGlobalTestEnvironment(new CaseCountPrinter);

class HostSweep : public ::testing::TestWithParam<SweepParam> {
 protected:
  // Runs one case and checks it; returns false (after reporting) when it failed.
  bool run_case(const Schedule& schedule, const CollectiveSpec& spec, bool in_place, const std::string& layout_name) {
    const std::string what = test::describe(spec, schedule.algorithm, in_place) + " " + layout_name;
    try {
      test::CollectiveData data(spec, in_place);
      executor_.run(schedule, spec, data.buffers(), RunContext{});
      const ::testing::AssertionResult result = data.check();
      if (result) return true;
      report(what + ": " + result.message());
    } catch (const std::exception& error) {
      report(what + " threw: " + error.what());
    }
    return false;
  }

  void report(const std::string& failure) {
    if (++failures_ <= kMaxReportedFailures) ADD_FAILURE() << failure;
  }

  HostExecutor executor_;
  int failures_ = 0;
  int cases_ = 0;
};

TEST_P(HostSweep, MatchesSequentialReference) {
  const auto [algorithm, collective, n] = GetParam();
  const bool reduces = is_reduction(collective);
  const bool has_in_place = buffer_geometry(collective, n).in_place_supported;
  const int root = n / 2;

  for (const RankLayout& layout : sweep_layouts(algorithm, n)) {
    const std::string layout_name = fmt::format("({} per node)", layout.ranks_per_node);
    CollectiveSpec spec{
        .collective = collective, .count = 0, .dtype = DataType::kF32, .op = ReduceOp::kSum, .root = root, .nranks = n};
    // Schedules do not depend on count, dtype or op: build once per layout, in explicit form and,
    // where the algorithm has one, in rank-symmetric form (the executor expands it).
    const Schedule schedule = build_checked_schedule(spec, layout, algorithm);
    std::vector<const Schedule*> forms = {&schedule};
    const Schedule symmetric = build_checked_schedule(spec, layout, algorithm, AlgoParams{}, ScheduleForm::kSymmetric);
    if (symmetric.symmetric()) forms.push_back(&symmetric);

    std::vector<int64_t> counts = {0, 1, n - 1, n, kOddCount};
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    for (DataType dtype : sweep_types()) {
      for (ReduceOp op : all_reduce_ops()) {
        if (!reduces && op != ReduceOp::kSum) continue;
        for (int64_t count : counts) {
          for (bool in_place : {false, true}) {
            if (in_place && !has_in_place) continue;
            spec.dtype = dtype;
            spec.op = op;
            spec.count = count;
            for (const Schedule* form : forms) {
              run_case(*form, spec, in_place, layout_name + (form->symmetric() ? " symmetric" : ""));
              ++cases_;
            }
          }
        }
      }
    }

    // The 1 Mi subset.
    if (!full_sweep()) continue;
    if (std::find(std::begin(kLargeCaseRanks), std::end(kLargeCaseRanks), n) == std::end(kLargeCaseRanks)) continue;
    const BufferGeometry geometry = buffer_geometry(collective, n);
    for (DataType dtype : kLargeCaseTypes) {
      const int64_t bytes = int64_t{n} * (geometry.input_blocks + geometry.output_blocks) * kLargeCount *
                            static_cast<int64_t>(size_bytes(dtype));
      if (bytes > kLargeCaseBytes) continue;
      for (ReduceOp op : kLargeCaseOps) {
        if (!reduces && op != ReduceOp::kSum) continue;
        for (bool in_place : {false, true}) {
          if (in_place && !has_in_place) continue;
          spec.dtype = dtype;
          spec.op = op;
          spec.count = kLargeCount;
          run_case(schedule, spec, in_place, layout_name);
          ++cases_;
        }
      }
    }
  }
  EXPECT_EQ(failures_, 0) << failures_ << " of " << cases_ << " cases failed";
  RecordProperty("cases", cases_);
  total_cases += cases_;
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, HostSweep, ::testing::ValuesIn(sweep_params()), param_name);

// NCCL's multi-node structure with real data: channel rings (every collective ring implements, in
// explicit and, for all_reduce, rank-symmetric form with a ring order per lane) and channel trees
// (a chain per channel from its own head GPU, tree 0 on half the channels, tree 1 on the other,
// pipelined), on 2..4 nodes x 2..8 ranks, against the sequential reference.
class HostNodeSweep : public HostSweep {};

TEST_F(HostNodeSweep, ChannelRingsAndTreesMatchTheReference) {
  const std::vector<std::pair<Algorithm, Collective>> runs = {
      {Algorithm::kRing, Collective::kAllReduce}, {Algorithm::kRing, Collective::kAllGather},
      {Algorithm::kRing, Collective::kReduceScatter}, {Algorithm::kRing, Collective::kBroadcast},
      {Algorithm::kRing, Collective::kReduce}, {Algorithm::kTree, Collective::kAllReduce}};
  const DataType types[] = {DataType::kF32, DataType::kBF16, DataType::kI32};
  for (const tandem::testing::NodeCase& node_case : tandem::testing::nccl_node_cases()) {
    const int n = node_case.layout.nranks;
    for (const auto& [algorithm, collective] : runs) {
      AlgoParams params = node_case.params;
      if (algorithm == Algorithm::kTree) params.pipeline_chunks = 2;
      CollectiveSpec spec{.collective = collective, .count = 0, .dtype = DataType::kF32, .op = ReduceOp::kSum,
                          .root = n / 2, .nranks = n};
      const Schedule schedule = build_checked_schedule(spec, node_case.layout, algorithm, params);
      std::vector<const Schedule*> forms = {&schedule};
      const Schedule symmetric =
          build_checked_schedule(spec, node_case.layout, algorithm, params, ScheduleForm::kSymmetric);
      if (symmetric.symmetric()) forms.push_back(&symmetric);
      const bool reduces = is_reduction(collective);
      for (DataType dtype : types) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          if (!reduces && op != ReduceOp::kSum) continue;
          for (int64_t count : {int64_t{1}, int64_t{n} + 1, kOddCount}) {
            for (bool in_place : {false, true}) {
              if (in_place && !buffer_geometry(collective, n).in_place_supported) continue;
              spec.dtype = dtype;
              spec.op = op;
              spec.count = count;
              for (const Schedule* form : forms) {
                run_case(*form, spec, in_place, node_case.name + (form->symmetric() ? " symmetric" : ""));
                ++cases_;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(failures_, 0) << failures_ << " of " << cases_ << " cases failed";
  RecordProperty("cases", cases_);
  total_cases += cases_;
}

}  // namespace
}  // namespace tandem
