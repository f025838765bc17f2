// The fault matrix: every fault kind x {ring, double binary tree, halving-doubling} x {host, sim,
// and the device backends' executor path run on the host executor},
// each with the outcome its recovery policy must reach, through the same scenario loader and loop
// runner `tandem run` uses. Host runs move real data and verify it against the reference (a wrong
// result would end `corrupt`, then `aborted`, never in the expected outcome); every case is bounded
// in time by its watchdog and checked against a wall-clock ceiling.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "app/scenario/loop_run.h"
#include "app/scenario/scenario.h"
#include "backend/host/host_executor.h"
#include "core/error.h"

namespace tandem::app {
namespace {

struct Case {
  std::string kind;
  std::string fault;     // the fault's YAML mapping (flow style, without braces)
  std::string recovery;  // the recovery mapping
  Outcome outcome;       // of the faulty iteration (1)
  std::vector<int> culprits;  // the analyzer's, when the run dumps (empty: not checked)
};

// 8 ranks: 2 DGX-H100 nodes, 4 GPUs of each. Rank 4 is n1-gpu0, whose NIC every algorithm's
// cross-node traffic of rank 4 uses.
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"link_down", "kind: link_down, link: n1-nic0-uplink, at_collective: 1, recover_after_us: 300",
       "retry_max: 3, backoff_us: 1000, watchdog_ms: 150", Outcome::kCompletedAfterRetry, {}},
      {"link_degrade", "kind: link_degrade, link: n1-nic0-uplink, factor: 0.25, at_collective: 1",
       "watchdog_ms: 150", Outcome::kCompleted, {}},
      {"nic_down", "kind: nic_down, node: 1, nic: 0, at_collective: 1", "watchdog_ms: 150, action: reroute",
       Outcome::kRecoveredReroute, {}},
      {"rank_crash", "kind: rank_crash, rank: 2, at_collective: 1", "watchdog_ms: 150, action: shrink",
       Outcome::kRecoveredShrink, {2}},
      {"rank_hang", "kind: rank_hang, rank: 5, at_collective: 1", "watchdog_ms: 150, action: abort", Outcome::kAborted,
       {5}},
      {"straggler", "kind: straggler, rank: 3, factor: 4, at_collective: 1", "watchdog_ms: 1000", Outcome::kCompleted,
       {}},
      {"transient", "kind: transient, rank: 1, at_collective: 1, at_op: 0", "retry_max: 2, backoff_us: 100, watchdog_ms: 150",
       Outcome::kCompletedAfterRetry, {}},
      {"desync", "kind: desync, rank: 6, at_collective: 1, issue: {dtype: f16}", "watchdog_ms: 150", Outcome::kAborted,
       {6}},
      {"corrupt", "kind: corrupt, rank: 2, at_collective: 1", "retry_max: 1, watchdog_ms: 150, verify: true",
       Outcome::kCompletedAfterRetry, {}},
  };
  return all;
}

struct Param {
  size_t index;
  std::string algorithm;
  ScenarioBackend backend;
  // The device backends' path (one Executor::run per attempt, rank faults as stalled transfers),
  // run on the CPU with the host executor: what --backend cuda / nccl do on a GPU.
  bool executor_path = false;
};

std::string param_name(const Param& p) {
  return p.executor_path ? "executor" : std::string(name(p.backend));
}

std::string scenario_text(const Case& c, const std::string& algorithm) {
  return fmt::format(
      "tandem_scenario: 1\n"
      "name: matrix-{}-{}\n"
      "cluster: {{preset: dgx-h100, nodes: 2}}\n"
      "workload: {{type: collective-loop, collective: all_reduce, size: 256K, algorithm: {}, iterations: 3, "
      "gpus_per_node: 4}}\n"
      "faults:\n  - {{{}}}\n"
      "recovery: {{{}}}\n",
      c.kind, algorithm, algorithm, c.fault, c.recovery);
}

class FaultMatrix : public ::testing::TestWithParam<Param> {};

TEST_P(FaultMatrix, EndsInTheExpectedOutcome) {
  const Param& p = GetParam();
  const Case& c = cases()[p.index];
  const Scenario scenario = parse_scenario(scenario_text(c, p.algorithm), "matrix.yaml");
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() /
      fmt::format("tandem-matrix-{}-{}-{}-{}", c.kind, p.algorithm, param_name(p), ::getpid());
  std::filesystem::remove_all(out);
  const auto start = std::chrono::steady_clock::now();
  LoopOptions options{out.string(), false};
  if (p.executor_path) options.executor = [] { return std::make_unique<HostExecutor>(); };
  const LoopResults results = run_loop(scenario, p.backend, options);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(wall, 60.0) << "each case is bounded by its watchdog";

  ASSERT_GE(results.iterations.size(), 2u);
  EXPECT_EQ(results.iterations[0].outcome, Outcome::kCompleted) << results.iterations[0].detail;
  const IterationResult& hit = results.iterations[1];
  EXPECT_EQ(name(hit.outcome), name(c.outcome)) << hit.detail;
  EXPECT_EQ(results.aborted, c.outcome == Outcome::kAborted);
  if (c.outcome != Outcome::kAborted) {
    ASSERT_EQ(results.iterations.size(), 3u);
    EXPECT_EQ(results.iterations[2].outcome, Outcome::kCompleted) << results.iterations[2].detail;
  }
  if (c.outcome == Outcome::kCompletedAfterRetry) {
    EXPECT_GE(hit.attempts, 2);
  }
  if (c.outcome == Outcome::kRecoveredShrink) {
    EXPECT_EQ(hit.dropped_ranks, std::vector<int>{2});
  }
  if (!c.culprits.empty()) {
    ASSERT_TRUE(results.analysis.has_value()) << "the watchdog or the error must have made every rank dump";
    EXPECT_EQ(results.analysis->culprit_ranks, c.culprits) << results.analysis->verdict;
  }
  // In simulation the slow or broken iteration costs time the report can show.
  if (p.backend == ScenarioBackend::kSim && c.kind != "desync" && c.kind != "straggler") {
    EXPECT_GT(hit.seconds, hit.fault_free_seconds) << c.kind;
  }
  std::filesystem::remove_all(out);
}

std::vector<Param> params() {
  std::vector<Param> all;
  for (size_t i = 0; i < cases().size(); ++i) {
    for (const char* algorithm : {"ring", "tree", "halving_doubling"}) {
      for (ScenarioBackend backend : {ScenarioBackend::kHost, ScenarioBackend::kSim}) all.push_back({i, algorithm, backend});
      all.push_back({i, algorithm, ScenarioBackend::kHost, true});
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(AllKinds, FaultMatrix, ::testing::ValuesIn(params()), [](const auto& test) {
  return fmt::format("{}_{}_{}", cases()[test.param.index].kind, test.param.algorithm, param_name(test.param));
});

}  // namespace
}  // namespace tandem::app
