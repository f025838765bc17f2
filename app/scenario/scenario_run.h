// Running a scenario: the collective sweep on every cluster variant, on the simulator or on the host
// backend, and the expectations checked against what came out. The report, CSV and JSON writers
// (scenario_report.h) only read these results.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "app/scenario/scenario.h"
#include "core/types.h"
#include "sim/sweep.h"

namespace tandem::app {

// The host backend runs real data with one thread per rank; a point whose per-rank input plus
// output exceeds this is not run there ("skipped (host limit)").
inline constexpr int64_t kHostMaxBytesPerRank = int64_t{64} << 20;
// Runs per host point: untimed warm-up, timed (the time is their mean), and data checks.
inline constexpr int kHostWarmupRuns = 1;
inline constexpr int kHostTimedRuns = 3;
inline constexpr int kHostCheckRuns = 1;

enum class PointStatus : uint8_t {
  kOk,             // ran; the numbers are valid
  kNotApplicable,  // the algorithm does not implement the collective here ("n/a")
  kSkipped,        // not run on this backend (above the host limit, nvls on host)
  kWrongData,      // ran on a data backend and produced wrong elements: the run fails
};
std::string_view name(PointStatus status);

// One collective x size x algorithm on one variant.
struct PointResult {
  std::string variant;
  Collective collective = Collective::kAllReduce;
  std::string algorithm;   // as the workload names it ("auto" included)
  int64_t size_bytes = 0;  // nccl-tests' size
  PointStatus status = PointStatus::kOk;
  std::string reason;          // why n/a, skipped or wrong
  std::string algorithm_used;  // what ran (auto resolved)
  std::string protocol;        // sim: LL, LL128 or Simple; empty on host
  int channels = 0;            // sim: NCCL channels it ran on; 0 on host
  double time_us = 0;
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  std::optional<int64_t> wrong_elements;  // host: from the data check
};

struct ScenarioResults {
  ScenarioBackend backend = ScenarioBackend::kSim;
  std::vector<PointResult> points;  // variant by variant, then collective, algorithm, size

  // The point, or nullptr when the sweep has no such point.
  const PointResult* find(std::string_view variant, Collective collective, std::string_view algorithm,
                          int64_t size_bytes) const;
};

// Called before each unit of work: a short description ("variant 2/2 (800G): 256 points").
using ProgressFn = std::function<void(const std::string&)>;

// Ranks in a variant's sweep: nodes x (workload.gpus_per_node, or all GPUs of a node).
int sweep_ranks(const ClusterVariant& variant, const CollectiveSweep& sweep);

// The simulator's request for one variant: every applicable point (n/a pairs are left out).
sim::SweepRequest make_sweep_request(const Scenario& scenario, const ClusterVariant& variant);

// Turns one variant's sim results into PointResults, in the workload's order, with a row for each
// n/a pair. `results` answer make_sweep_request's points in order.
std::vector<PointResult> collect_sim_results(const Scenario& scenario, const ClusterVariant& variant,
                                             const std::vector<sim::SweepPointResult>& results);

// Runs the workload on `backend` (which may differ from the scenario's: --backend), one variant
// after the other (on sim each in its own child process).
ScenarioResults run_scenario(const Scenario& scenario, ScenarioBackend backend, const ProgressFn& progress = {});

enum class ExpectationVerdict : uint8_t {
  kPass,
  kFail,
  kSkip,  // the expectation names another backend than the one that ran
};
std::string_view name(ExpectationVerdict verdict);

struct ExpectationOutcome {
  Expectation expectation;
  ExpectationVerdict verdict = ExpectationVerdict::kPass;
  std::string detail;  // "busbw 45.1 GB/s >= 40", "time 1.2e+06 us > max 1e+06", "the point is n/a: ..."
};

// Checks `value` against `bound` (unset: holds); appends "busbw 45.1 GB/s >= 40" or why not to
// `detail` ("; "-separated) and returns whether it holds.
bool check_bound(const Bound& bound, double value, std::string_view what, std::string_view unit, std::string& detail);

// One outcome per expectation, in order. A point that did not run fails its expectations.
std::vector<ExpectationOutcome> evaluate_expectations(const Scenario& scenario, const ScenarioResults& results);

// Passes when no expectation failed and no point produced wrong data.
bool run_passed(const ScenarioResults& results, const std::vector<ExpectationOutcome>& outcomes);

}  // namespace tandem::app
