// What `tandem run` prints and writes: the readable report (per variant the cluster and one table
// per collective, a variant comparison, the expectations and a verdict), results.csv (one row per
// point) and results.json (the scenario, every point, the expectation outcomes). docs/scenarios.md
// describes all three.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "app/scenario/scenario.h"
#include "app/scenario/scenario_run.h"

namespace tandem::app {

// The version of results.json's layout ("tandem_results").
inline constexpr int kResultsFormatVersion = 1;

// The whole report. `quiet` keeps only the expectations and the verdict line.
std::string format_report(const Scenario& scenario, const ScenarioResults& results,
                          const std::vector<ExpectationOutcome>& outcomes, bool quiet);

// The sections, each ending in '\n' (empty when it has nothing to say).
std::string format_variant_tables(const Scenario& scenario, const ScenarioResults& results,
                                  const ClusterVariant& variant);
std::string format_variant_comparison(const Scenario& scenario, const ScenarioResults& results);
std::string format_expectations(const std::vector<ExpectationOutcome>& outcomes);
// The last line: "verdict: PASS (3 of 3 expectations hold)" or "verdict: FAIL (...)".
std::string format_verdict(const ScenarioResults& results, const std::vector<ExpectationOutcome>& outcomes);
// The same line from counts (shared with the training report): "verdict: PASS (7 of 7 expectations
// hold)", with "; N skipped on BACKEND" and "; N points returned wrong data" when there are any.
std::string format_verdict_line(bool pass, size_t passed, size_t failed, size_t skipped, std::string_view backend,
                                size_t wrong_points = 0);

// The columns of results.csv, in order.
std::vector<std::string> results_csv_columns();
// Header and one row per point; numbers are empty for points that did not run.
std::string results_csv(const ScenarioResults& results);

// A CSV field: as it is, or quoted (quotes doubled) when it holds a comma, quote or line break.
std::string csv_field(std::string_view text);

// The cluster's spec as results.json gives it (units in the names).
nlohmann::json cluster_json(const models::ClusterSpec& cluster);
nlohmann::json scenario_json(const Scenario& scenario);
nlohmann::json results_json(const Scenario& scenario, const ScenarioResults& results,
                            const std::vector<ExpectationOutcome>& outcomes);

}  // namespace tandem::app
