// Running a claims workload (`workload: {type: claims}`): each claim of a release note set against
// what tandem's models predict for its baseline and for every candidate change, a verdict per claim
// (plausible / needs conditions / physically impossible) with the numbers and conditions behind it,
// the expectations checked, and what `tandem run` prints and writes (docs/claims.md).
//
// Verdicts, in this order:
//   impossible        a claimed value beats a bound no configuration of the claim's cluster can
//                     beat: a collective faster than its physical bound (models/bounds.h, with
//                     in-network reduction); an MTBF gain above 1 / (1 - f) where f is the share of
//                     interruptions every in-place policy together recovers (models/reliability.h).
//   plausible         tandem's value for the baseline is within the claim's tolerance of the claimed
//                     "before", and some candidate's within it of the claimed "after" (at least as
//                     good, for "160+ h").
//   needs-conditions  otherwise; the report names what would have to hold (failure rates k times the
//                     table's, seconds of start-up outside what tandem models, another reading of
//                     the size, ...).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "app/scenario/scenario.h"
#include "app/scenario/scenario_run.h"

namespace tandem::app {

// tandem's value for one setting of a claim, in the claim's unit.
struct ClaimValue {
  std::string setting;  // the setting's name
  double value = 0;
  std::string detail;  // what it is made of: "ring LL128, 16 channels", "reserved 71.2 GB", ...
};

struct ClaimResult {
  const Claim* claim = nullptr;
  ClaimValue before;
  std::vector<ClaimValue> after;  // one per candidate, in the scenario's order
  size_t best = 0;                // the candidate nearest the claimed "after"
  std::optional<double> limit;    // the bound no configuration beats (ms; MTBF: the largest gain, x)
  std::string limit_detail;
  ClaimVerdict verdict = ClaimVerdict::kPlausible;
  std::vector<std::string> reasons;  // why, one sentence each
  // Collective claims judged impossible as stated: the same claim read with the size as the job's
  // total (size / ranks per rank), if that reading is possible.
  std::optional<std::string> other_reading;
};

struct ClaimsResults {
  std::vector<ClaimResult> claims;  // in the scenario's order
  const ClaimResult* find(std::string_view claim_name) const;
};

// Evaluates every claim on the scenario's own cluster (its variants where a collective setting
// names one). Claims run on the simulator's models only: another backend is Error(kUnsupported).
ClaimsResults run_claims(const Scenario& scenario, ScenarioBackend backend, const ProgressFn& progress = {});

struct ClaimExpectationOutcome {
  ClaimExpectation expectation;
  ExpectationVerdict verdict = ExpectationVerdict::kPass;
  std::string detail;
};
std::vector<ClaimExpectationOutcome> evaluate_claim_expectations(const Scenario& scenario,
                                                                 const ClaimsResults& results);

std::string format_claims_report(const Scenario& scenario, const ClaimsResults& results,
                                 const std::vector<ClaimExpectationOutcome>& outcomes, bool quiet);
std::string claims_results_csv(const ClaimsResults& results);
nlohmann::json claims_results_json(const Scenario& scenario, const ClaimsResults& results,
                                   const std::vector<ClaimExpectationOutcome>& outcomes);

}  // namespace tandem::app
