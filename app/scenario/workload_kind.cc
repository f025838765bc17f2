#include "app/scenario/workload_kind.h"

#include <algorithm>
#include <variant>

#include <fmt/format.h>

#include "app/scenario/scenario_report.h"
#include "app/scenario/trace.h"
#include "app/scenario/claims_run.h"
#include "app/scenario/loop_run.h"
#include "app/scenario/startup_run.h"
#include "app/scenario/training_run.h"

namespace tandem::app {
namespace {

// workload: {type: collective-sweep}: every collective x size x algorithm on every variant.
class SweepKind : public WorkloadKind {
 public:
  std::string_view type() const override { return "collective-sweep"; }
  WorkloadOutput run(const Scenario& scenario, const WorkloadRunOptions& options) const override {
    const ScenarioResults results = run_scenario(scenario, options.backend, options.progress);
    const std::vector<ExpectationOutcome> outcomes = evaluate_expectations(scenario, results);
    WorkloadOutput out;
    out.report = format_report(scenario, results, outcomes, options.quiet);
    out.results_json = results_json(scenario, results, outcomes).dump(2) + "\n";
    out.results_csv = results_csv(results);
    if (options.trace) out.trace = sweep_trace(scenario, results);
    out.pass = run_passed(results, outcomes);
    return out;
  }
};

// workload: {type: collective-loop}: faults, recovery and the flight recorder (app/scenario/loop_run.h).
class LoopKind : public WorkloadKind {
 public:
  std::string_view type() const override { return "collective-loop"; }
  bool writes_dumps() const override { return true; }
  WorkloadOutput run(const Scenario& scenario, const WorkloadRunOptions& options) const override {
    const LoopResults results = run_loop(scenario, options.backend, LoopOptions{options.out_dir, options.dump_on_exit});
    const std::vector<LoopExpectationOutcome> outcomes = evaluate_loop_expectations(scenario, results);
    const bool pass = std::all_of(outcomes.begin(), outcomes.end(), [](const auto& o) { return o.pass; });
    WorkloadOutput out;
    // Without expectations an aborted loop fails the run; with them, they decide.
    out.pass = outcomes.empty() ? !results.aborted : pass;
    out.report =
        fmt::format("tandem run {}: {}\n{}\nVerdict: {}\n", scenario.name, scenario.description,
                    format_loop_report(scenario, results, outcomes, options.quiet), out.pass ? "PASS" : "FAIL");
    out.results_json = loop_results_json(scenario, results, outcomes) + "\n";
    out.results_csv = loop_results_csv(results);
    if (options.trace) out.trace = loop_trace(scenario, results);
    return out;
  }
};

// workload: {type: training}: one training step per layout on every variant (app/scenario/training_run.h).
class TrainingKind : public WorkloadKind {
 public:
  std::string_view type() const override { return "training"; }
  WorkloadOutput run(const Scenario& scenario, const WorkloadRunOptions& options) const override {
    TrainingResults results = run_training(scenario, options.backend, options.progress,
                                           /*keep_timeline=*/options.trace);
    rehearse_training(scenario, results, options.out_dir, /*keep_timeline=*/options.trace);
    const std::vector<TrainingExpectationOutcome> outcomes = evaluate_training_expectations(scenario, results);
    WorkloadOutput out;
    out.report = format_training_report(scenario, results, outcomes, options.quiet, options.explain);
    out.results_json = training_results_json(scenario, results, outcomes).dump(2) + "\n";
    out.results_csv = training_results_csv(scenario, results);
    if (options.trace) out.trace = training_trace(scenario, results);
    out.pass = training_passed(results, outcomes);
    return out;
  }
};

// workload: {type: startup}: the job's start-up under each lever set on every variant (app/scenario/startup_run.h).
class StartupKind : public WorkloadKind {
 public:
  std::string_view type() const override { return "startup"; }
  WorkloadOutput run(const Scenario& scenario, const WorkloadRunOptions& options) const override {
    const StartupResults results = run_startup(scenario, options.backend, options.progress);
    const std::vector<StartupExpectationOutcome> outcomes = evaluate_startup_expectations(scenario, results);
    WorkloadOutput out;
    out.report = format_startup_report(scenario, results, outcomes, options.quiet);
    const nlohmann::json json = startup_results_json(scenario, results, outcomes);
    out.results_json = json.dump(2) + "\n";
    out.results_csv = startup_results_csv(scenario, results);
    out.pass = json.at("passed").get<bool>();
    return out;
  }
};

// workload: {type: claims}: a release note's claims against tandem's models (app/scenario/claims_run.h).
class ClaimsKind : public WorkloadKind {
 public:
  std::string_view type() const override { return "claims"; }
  WorkloadOutput run(const Scenario& scenario, const WorkloadRunOptions& options) const override {
    const ClaimsResults results = run_claims(scenario, options.backend, options.progress);
    const std::vector<ClaimExpectationOutcome> outcomes = evaluate_claim_expectations(scenario, results);
    WorkloadOutput out;
    out.report = format_claims_report(scenario, results, outcomes, options.quiet);
    const nlohmann::json json = claims_results_json(scenario, results, outcomes);
    out.results_json = json.dump(2) + "\n";
    out.results_csv = claims_results_csv(results);
    out.pass = json.at("passed").get<bool>();
    return out;
  }
};

}  // namespace

const WorkloadKind& workload_kind_of(const Scenario& scenario) {
  static const SweepKind kSweep;
  static const LoopKind kLoop;
  static const TrainingKind kTraining;
  static const StartupKind kStartup;
  static const ClaimsKind kClaims;
  struct Pick {
    const WorkloadKind& operator()(const CollectiveSweep&) const { return kSweep; }
    const WorkloadKind& operator()(const CollectiveLoop&) const { return kLoop; }
    const WorkloadKind& operator()(const TrainingWorkload&) const { return kTraining; }
    const WorkloadKind& operator()(const StartupWorkload&) const { return kStartup; }
    const WorkloadKind& operator()(const ClaimsWorkload&) const { return kClaims; }
  };
  return std::visit(Pick{}, scenario.workload);
}

}  // namespace tandem::app
