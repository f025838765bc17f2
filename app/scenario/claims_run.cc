#include "app/scenario/claims_run.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "app/scenario/scenario_report.h"
#include "app/scenario/startup_run.h"
#include "core/error.h"
#include "models/bounds.h"
#include "models/reliability.h"
#include "models/step_memory.h"
#include "sim/startup.h"
#include "sim/sweep.h"

namespace tandem::app {
namespace {

// Two fragmentations this close agree whatever their ratio: a point of an 80 GB GPU is 0.8 GB, the
// size of a few activation tensors, below what a step-to-step difference in batch layout moves.
constexpr double kFragmentationPointsTolerance = 1.0;

// A claimed value the note rounded may sit a hair past a bound it meets exactly.
constexpr double kRoundingSlack = 1e-3;

const ClaimsWorkload& claims_of(const Scenario& scenario) {
  const auto* claims = std::get_if<ClaimsWorkload>(&scenario.workload);
  if (claims == nullptr) fail(ErrorCode::kInvalidArgument, "the scenario's workload is not a claims workload");
  return *claims;
}

const ClusterVariant& variant_named(const Scenario& scenario, std::string_view variant_name) {
  const ClusterVariant* variant = scenario.find_variant(variant_name);
  if (variant == nullptr) fail(ErrorCode::kInvalidArgument, "no variant named '{}'", variant_name);
  return *variant;
}

int gpus_of(const models::ClusterSpec& cluster) { return cluster.nodes * cluster.gpus_per_node; }

// Whether tandem's value agrees with the claimed one for this claim.
bool agrees(const Claim& claim, double tandem, double claimed, bool or_better) {
  const bool higher = claim_higher_is_better(claim.kind);
  if (or_better && (higher ? tandem >= claimed : tandem <= claimed)) return true;
  if (claim.kind == ClaimKind::kMemory && std::abs(tandem - claimed) <= kFragmentationPointsTolerance) return true;
  return std::abs(tandem - claimed) <= claim.tolerance * claimed;
}

// The candidate nearest the claimed "after": the best one for "or better" claims, else the one
// nearest on a log scale.
size_t best_candidate(const Claim& claim, const std::vector<ClaimValue>& after) {
  size_t best = 0;
  for (size_t i = 1; i < after.size(); ++i) {
    const double a = after[i].value, b = after[best].value;
    if (claim.claimed.after_or_better) {
      if (claim_higher_is_better(claim.kind) ? a > b : a < b) best = i;
    } else {
      const auto distance = [&](double v) { return std::abs(std::log(std::max(v, 1e-300) / claim.claimed.after)); };
      if (distance(a) < distance(b)) best = i;
    }
  }
  return best;
}

// Three significant digits, whole numbers from 1,000 ("2976", not "2.98e+03").
std::string number(double value) {
  return std::abs(value) >= 1000 && std::isfinite(value) ? fmt::format("{:.0f}", value) : fmt::format("{:.3g}", value);
}

// A claim's size as a release note writes it: decimal gigabytes when it is a whole number of them
// ("16 GB"), else the binary units of the rest of the report.
std::string claim_size(int64_t bytes) {
  for (const auto& [unit, scale] :
       {std::pair{"GB", int64_t{1000000000}}, {"MB", int64_t{1000000}}, {"KB", int64_t{1000}}}) {
    if (bytes % scale == 0) return fmt::format("{} {}", bytes / scale, unit);
  }
  return format_size(bytes);
}

std::string with_unit(const Claim& claim, double value) {
  const std::string_view unit = claim_unit(claim.kind);
  return unit == "%" ? number(value) + "%" : number(value) + " " + std::string(unit);
}

// ---- collective --------------------------------------------------------------------------------

ClaimValue collective_value(const Scenario& scenario, const Claim& claim, const ClaimSetting& setting, int64_t bytes) {
  const ClusterVariant& variant = variant_named(scenario, setting.variant);
  sim::SweepRequest request;
  request.cluster = variant.cluster;
  request.network = network_model(scenario);  // its calibration: profile applied
  request.points.push_back({.collective = claim.collective, .bytes = bytes, .algorithm = sim::parse_sim_algorithm_or_auto(setting.algorithm)});
  const std::vector<sim::SweepPointResult> results = sim::run_sweep(request);
  const sim::SweepPointResult& r = results.at(0);
  if (!r.ok) {
    fail(ErrorCode::kUnsupported, "claim '{}', setting '{}': {} {} on {} does not run: {}", claim.name, setting.name,
         name(claim.collective), claim_size(bytes), variant.name, r.error);
  }
  return {setting.name, r.seconds * 1e3,
          fmt::format("{} {} {} on {}, {} channels, busbw {:.1f} GB/s", sim::name_or_auto(r.algorithm), models::name(r.protocol),
                      claim_size(bytes), variant.name, r.channels, r.busbw_GBps)};
}

// The physical bound (ms) of the claim's collective at `bytes` on the baseline's cluster: with
// in-network reduction where the collective has it, since a claim may assume SHARP or NVLS.
double collective_limit_ms(const Scenario& scenario, const Claim& claim, int64_t bytes, std::string* detail) {
  const models::ClusterSpec& cluster = variant_named(scenario, claim.before.variant).cluster;
  const models::CollectiveBounds bounds =
      models::collective_bounds(claim.collective, static_cast<uint64_t>(bytes), cluster);
  const models::CollectiveBound& plain = bounds.without_in_network_reduction;
  const models::CollectiveBound& best =
      bounds.with_in_network_reduction ? *bounds.with_in_network_reduction : bounds.without_in_network_reduction;
  if (detail != nullptr) {
    std::string text;
    if (plain.binding >= 0) {
      const models::CutBound& cut = plain.cuts[plain.binding];
      text = fmt::format("{} GB per part across the {} cut at {} GB/s: {} ms", number(cut.bytes / 1e9), cut.cut,
                         number(cut.capacity_Bps / 1e9), number(plain.time_s * 1e3));
    }
    if (bounds.with_in_network_reduction) {
      text += fmt::format("; {} ms with in-network reduction (SHARP / NVLS)", number(best.time_s * 1e3));
    }
    *detail = text;
  }
  return best.time_s * 1e3;
}

// Nccl-tests' size is the per-rank buffer for these; a note may have meant the job's total.
bool size_is_per_rank(Collective collective) {
  return collective == Collective::kAllReduce || collective == Collective::kBroadcast ||
         collective == Collective::kReduce;
}

void evaluate_collective(const Scenario& scenario, const Claim& claim, ClaimResult& result) {
  result.before = collective_value(scenario, claim, claim.before, claim.size_bytes);
  for (const ClaimSetting& s : claim.after)
    result.after.push_back(collective_value(scenario, claim, s, claim.size_bytes));
  result.limit = collective_limit_ms(scenario, claim, claim.size_bytes, &result.limit_detail);
}

// The claim read with its size as the whole job's (size / ranks per rank).
std::string other_reading(const Scenario& scenario, const Claim& claim) {
  const int ranks = gpus_of(variant_named(scenario, claim.before.variant).cluster);
  const int64_t per_rank = claim.size_bytes / ranks;
  if (per_rank <= 0) return {};
  const ClaimValue before = collective_value(scenario, claim, claim.before, per_rank);
  std::vector<ClaimValue> after;
  for (const ClaimSetting& s : claim.after) after.push_back(collective_value(scenario, claim, s, per_rank));
  const size_t best = best_candidate(claim, after);
  const double limit = collective_limit_ms(scenario, claim, per_rank, nullptr);
  const bool possible = claim.claimed.before >= limit && claim.claimed.after >= limit;
  const bool agree = agrees(claim, before.value, claim.claimed.before, false) &&
                     agrees(claim, after[best].value, claim.claimed.after, claim.claimed.after_or_better);
  return fmt::format("read as the job's total ({} over {} GPUs, {} per GPU): tandem {} -> {} ms ({}), bound {} ms; {}",
                     claim_size(claim.size_bytes), ranks, claim_size(per_rank), number(before.value),
                     number(after[best].value), after[best].setting, number(limit),
                     !possible ? "still impossible"
                     : agree   ? "that reading is plausible: the note most likely means it"
                               : "possible, but tandem's times differ from the claim's");
}

// ---- MTBF --------------------------------------------------------------------------------------

std::string policies_text(const models::RecoveryPolicies& p) {
  std::vector<std::string_view> names;
  if (p.retry) names.push_back("retry");
  if (p.reroute) names.push_back("reroute");
  if (p.shrink) names.push_back("shrink");
  return names.empty() ? "no in-place recovery" : fmt::format("{}", fmt::join(names, ", "));
}

void evaluate_mtbf(const Scenario& scenario, const Claim& claim, ClaimResult& result) {
  const models::ClusterSpec& cluster = scenario.variants.front().cluster;
  const models::FailureRates rates = models::failure_rates(claim.rates);
  const int gpus = gpus_of(cluster);
  const double mtbf_h = models::job_mtbf_hours(rates, gpus, cluster.gpus_per_node);
  auto value = [&](const ClaimSetting& s) {
    const double f = models::in_place_fraction(rates, s.recovery, cluster.gpus_per_node);
    return ClaimValue{s.name, f < 1 ? mtbf_h / (1 - f) : std::numeric_limits<double>::infinity(),
                      fmt::format("job MTBF {} h on {} GPUs ('{}' rates), {:.1f}% recovered in place ({})",
                                  number(mtbf_h), gpus, claim.rates, 100 * f, policies_text(s.recovery))};
  };
  result.before = value(claim.before);
  for (const ClaimSetting& s : claim.after) result.after.push_back(value(s));
  const double f_all =
      models::in_place_fraction(rates, {.retry = true, .reroute = true, .shrink = true}, cluster.gpus_per_node);
  result.limit = f_all < 1 ? 1 / (1 - f_all) : std::numeric_limits<double>::infinity();
  result.limit_detail = fmt::format(
      "every in-place policy together recovers {:.1f}% of the '{}' interruptions; the rest (software bugs, host "
      "maintenance, silent data corruption, ...) restart the job whatever the policy: the MTBF between restarts "
      "grows at most {}x",
      100 * f_all, claim.rates, number(*result.limit));
}

// ---- start-up ----------------------------------------------------------------------------------

void evaluate_startup(const Scenario& scenario, const Claim& claim, ClaimResult& result) {
  const models::ClusterSpec& cluster = scenario.variants.front().cluster;
  const int gpus = gpus_of(cluster);
  auto value = [&](const ClaimSetting& s) {
    const sim::StartupJob job{.gpus = gpus, .groups = sim::layout_groups(claim.layout, gpus), .levers = s.levers};
    const sim::StartupResult r = sim::simulate_startup(cluster, job);
    std::vector<std::string> phases;
    for (const sim::StartupPhase& p : r.phases) phases.push_back(fmt::format("{} {:.2f} s", p.name, p.seconds));
    return ClaimValue{s.name, r.total_s, fmt::format("{}: {}", describe_levers(s.levers), fmt::join(phases, ", "))};
  };
  result.before = value(claim.before);
  for (const ClaimSetting& s : claim.after) result.after.push_back(value(s));
}

// ---- memory ------------------------------------------------------------------------------------

// Fragmentation at the peak of reserved memory over two steps (the second is the steady state) of
// the claim's training workload, its first layout, on the scenario's cluster.
void evaluate_memory(const Scenario& scenario, const Claim& claim, ClaimResult& result) {
  const models::ClusterSpec& cluster = scenario.variants.front().cluster;
  const int gpus = gpus_of(cluster);
  const TrainingWorkload& training = *claim.training;
  const models::TrainingConfig config = training.config_for(0, gpus);
  const models::DerivedLayout derived = models::derive(config, gpus, cluster.gpus_per_node);
  auto value = [&](const ClaimSetting& s) {
    const models::StepMemoryResult m =
        models::step_memory(config, derived, cluster.gpu, models::parse_alloc_conf(s.allocator));
    std::string detail = fmt::format(
        "{} on {} GPUs, {}: allocated {:.1f} GB of {:.1f} GB reserved at the peak ({}); {} cudaMalloc + maps",
        training.layouts.front().layout.name, gpus, s.allocator.empty() ? "default allocator" : s.allocator,
        m.allocated_at_peak_reserved_bytes / 1e9, m.peak_reserved_bytes / 1e9, m.peak_phase, m.device_mallocs);
    // Fragmentation at a peak the step never reaches is no figure to weigh a claim with.
    if (m.oom) {
      fail(ErrorCode::kInvalidArgument,
           "{}: claim '{}': the {} step on {} GPUs ({}) runs out of memory at {} ({:.2f} GB asked, {:.0f} GB per "
           "{}): a memory claim is weighed on a step that fits; give the claim's training a layout that does (more "
           "sharding, recompute or a smaller micro-batch)",
           scenario.file, claim.name, training.layouts.front().layout.name, gpus,
           s.allocator.empty() ? "default allocator" : s.allocator, m.oom->phase, m.oom->bytes / 1e9,
           cluster.gpu.memory_bytes / 1e9, cluster.gpu.name);
    }
    return ClaimValue{s.name, 100 * m.fragmentation_at_peak, detail};
  };
  result.before = value(claim.before);
  for (const ClaimSetting& s : claim.after) result.after.push_back(value(s));
}

// ---- verdicts ----------------------------------------------------------------------------------

// Impossible: a claimed value beats the limit (for an MTBF claim, the claimed gain beats the largest one).
void judge_against_limit(const Claim& claim, ClaimResult& result) {
  if (!result.limit) return;
  if (claim.kind == ClaimKind::kMtbf) {
    const double gain = claim.claimed.after / claim.claimed.before;
    if (gain > *result.limit * (1 + kRoundingSlack)) {
      result.verdict = ClaimVerdict::kImpossible;
      result.reasons.push_back(fmt::format("the claimed gain {}x is above the most in-place recovery can give, {}x",
                                           number(gain), number(*result.limit)));
    }
    return;
  }
  for (const auto& [side, claimed] : {std::pair{"before", claim.claimed.before}, {"after", claim.claimed.after}}) {
    if (claimed < *result.limit * (1 - kRoundingSlack)) {
      result.verdict = ClaimVerdict::kImpossible;
      result.reasons.push_back(fmt::format("the claimed {} {} is {}x below the physical bound {}", side,
                                           with_unit(claim, claimed), number(*result.limit / claimed),
                                           with_unit(claim, *result.limit)));
    }
  }
}

// What would make the note's baseline agree with tandem's (`tandem_before`), by the claim's kind.
std::string baseline_needs(const Claim& claim, double tandem_before) {
  switch (claim.kind) {
    case ClaimKind::kMtbf:
      return fmt::format("failure rates {}x those of the '{}' table", number(tandem_before / claim.claimed.before),
                         claim.rates);
    case ClaimKind::kStartup:
      return claim.claimed.before > tandem_before
                 ? fmt::format(
                       "{} s spent outside the phases tandem models (image pull, Python imports, data "
                       "loaders, checkpoint load), or a launch far slower than the assumed {} s",
                       number(claim.claimed.before - tandem_before),
                       number(sim::kProcessLaunch_s + sim::kCudaContext_s))
                 : fmt::format("a launch faster than the assumed {} s",
                               number(sim::kProcessLaunch_s + sim::kCudaContext_s));
    case ClaimKind::kCollective:
      return "another cluster, size or algorithm than the scenario's";
    case ClaimKind::kMemory:
      return "another model, batch or layout than the scenario's";
  }
  return "";
}

void judge(const Scenario& scenario, const Claim& claim, ClaimResult& result) {
  judge_against_limit(claim, result);
  if (result.verdict == ClaimVerdict::kImpossible) {
    if (claim.kind == ClaimKind::kCollective && size_is_per_rank(claim.collective)) {
      const std::string reading = other_reading(scenario, claim);
      if (!reading.empty()) result.other_reading = reading;
    }
    return;
  }
  const ClaimValue& after = result.after[result.best];
  const bool before_ok = agrees(claim, result.before.value, claim.claimed.before, false);
  const bool after_ok = agrees(claim, after.value, claim.claimed.after, claim.claimed.after_or_better);
  if (before_ok && after_ok) {
    result.verdict = ClaimVerdict::kPlausible;
    result.reasons.push_back(fmt::format("tandem predicts {} -> {} ({}), within {:.0f}% of the claim",
                                         with_unit(claim, result.before.value), with_unit(claim, after.value),
                                         after.setting, 100 * claim.tolerance));
    return;
  }
  result.verdict = ClaimVerdict::kNeedsConditions;
  const bool higher = claim_higher_is_better(claim.kind);
  const double tandem_gain = higher ? after.value / result.before.value : result.before.value / after.value;
  const double claimed_gain =
      higher ? claim.claimed.after / claim.claimed.before : claim.claimed.before / claim.claimed.after;
  if (!before_ok) {
    result.reasons.push_back(fmt::format("the baseline: tandem predicts {}, the note says {}; that needs {}",
                                         with_unit(claim, result.before.value), with_unit(claim, claim.claimed.before),
                                         baseline_needs(claim, result.before.value)));
  }
  if (!after_ok) {
    std::string why;
    if (claim.kind == ClaimKind::kMtbf) {
      why = fmt::format("{:.1f}% of interruptions recovered in place (the best candidate recovers {:.1f}%)",
                        100 * models::required_in_place_fraction(claim.claimed.before, claim.claimed.after),
                        100 * (1 - result.before.value / after.value));
    } else {
      why = fmt::format("a change worth {}x where the best candidate gives {}x", number(claimed_gain),
                        number(tandem_gain));
    }
    result.reasons.push_back(
        fmt::format("the change: tandem's nearest candidate ({}) gives {}, the note says {}; "
                    "that needs {}",
                    after.setting, with_unit(claim, after.value), with_unit(claim, claim.claimed.after), why));
  } else {
    result.reasons.push_back(fmt::format("the change agrees: {} gives {}x, the note {}x", after.setting,
                                         number(tandem_gain), number(claimed_gain)));
  }
}

}  // namespace

const ClaimResult* ClaimsResults::find(std::string_view claim_name) const {
  for (const ClaimResult& r : claims) {
    if (r.claim->name == claim_name) return &r;
  }
  return nullptr;
}

ClaimsResults run_claims(const Scenario& scenario, ScenarioBackend backend, const ProgressFn& progress) {
  if (backend != ScenarioBackend::kSim) {
    fail(ErrorCode::kUnsupported,
         "a claims workload runs on tandem's models (--backend sim), not on {}: it weighs a release note's "
         "figures against the simulator, the allocator model and the reliability model",
         name(backend));
  }
  const ClaimsWorkload& workload = claims_of(scenario);
  ClaimsResults results;
  for (size_t i = 0; i < workload.claims.size(); ++i) {
    const Claim& claim = workload.claims[i];
    if (progress)
      progress(fmt::format("claim {}/{}: {} ({})", i + 1, workload.claims.size(), claim.name, name(claim.kind)));
    ClaimResult result;
    result.claim = &claim;
    switch (claim.kind) {
      case ClaimKind::kCollective:
        evaluate_collective(scenario, claim, result);
        break;
      case ClaimKind::kMemory:
        evaluate_memory(scenario, claim, result);
        break;
      case ClaimKind::kMtbf:
        evaluate_mtbf(scenario, claim, result);
        break;
      case ClaimKind::kStartup:
        evaluate_startup(scenario, claim, result);
        break;
    }
    result.best = best_candidate(claim, result.after);
    judge(scenario, claim, result);
    results.claims.push_back(std::move(result));
  }
  return results;
}

std::vector<ClaimExpectationOutcome> evaluate_claim_expectations(const Scenario& scenario,
                                                                 const ClaimsResults& results) {
  std::vector<ClaimExpectationOutcome> outcomes;
  for (const ClaimExpectation& e : scenario.expectations_of<ClaimExpectation>()) {
    ClaimExpectationOutcome outcome;
    outcome.expectation = e;
    const ClaimResult* r = results.find(e.claim);
    if (r == nullptr) fail(ErrorCode::kInvalidArgument, "no result for claim '{}'", e.claim);
    const std::string_view unit = claim_unit(r->claim->kind);
    bool holds = check_bound(e.tandem_before, r->before.value, "tandem's baseline", unit, outcome.detail);
    holds = check_bound(e.tandem_after, r->after[r->best].value, fmt::format("tandem's {}", r->after[r->best].setting),
                        unit, outcome.detail) &&
            holds;
    if (e.verdict) {
      const bool same = *e.verdict == r->verdict;
      if (!outcome.detail.empty()) outcome.detail += "; ";
      outcome.detail += same ? fmt::format("verdict {}", name(r->verdict))
                             : fmt::format("verdict {}, expected {}", name(r->verdict), name(*e.verdict));
      holds = holds && same;
    }
    outcome.verdict = holds ? ExpectationVerdict::kPass : ExpectationVerdict::kFail;
    outcomes.push_back(std::move(outcome));
  }
  return outcomes;
}

std::string format_claims_report(const Scenario& scenario, const ClaimsResults& results,
                                 const std::vector<ClaimExpectationOutcome>& outcomes, bool quiet) {
  std::string out = fmt::format("tandem run {}: {}\n", scenario.name, scenario.description);
  if (!quiet) {
    out += fmt::format("cluster: {}\n", models::describe(scenario.variants.front().cluster));
    if (scenario.calibration) out += fmt::format("calibration: {}\n", profile_summary(*scenario.calibration));
    out += "\n";
    out += fmt::format("{:<20} {:<22} {:<32} {:<16} {}\n", "claim", "claimed", "tandem (nearest candidate)", "bound",
                       "verdict");
    for (const ClaimResult& r : results.claims) {
      const Claim& c = *r.claim;
      const std::string claimed =
          fmt::format("{} -> {}", number(c.claimed.before),
                      c.claimed.after_or_better ? fmt::format("{}+ {}", number(c.claimed.after), claim_unit(c.kind))
                                                : with_unit(c, c.claimed.after));
      const std::string tandem = fmt::format("{} -> {} ({})", number(r.before.value),
                                             with_unit(c, r.after[r.best].value), r.after[r.best].setting);
      std::string bound = "-";
      if (r.limit) {
        bound = c.kind == ClaimKind::kMtbf ? fmt::format("gain <= {}x", number(*r.limit))
                                           : fmt::format(">= {}", with_unit(c, *r.limit));
      }
      out += fmt::format("{:<20} {:<22} {:<32} {:<16} {}\n", c.name, claimed, tandem, bound, name(r.verdict));
    }
    for (const ClaimResult& r : results.claims) {
      const Claim& c = *r.claim;
      out += fmt::format("\n== {} ({}{})\n", c.name, name(c.kind), c.says.empty() ? "" : ": \"" + c.says + "\"");
      out +=
          fmt::format("  before  {:<14} {:>12}  {}\n", r.before.setting, with_unit(c, r.before.value), r.before.detail);
      for (size_t i = 0; i < r.after.size(); ++i) {
        const ClaimValue& a = r.after[i];
        out += fmt::format("  {}  {:<14} {:>12}  {}\n", i == r.best ? "after*" : "after ", a.setting,
                           with_unit(c, a.value), a.detail);
      }
      if (r.limit) out += fmt::format("  bound   {}\n", r.limit_detail);
      out += fmt::format("  verdict {}\n", name(r.verdict));
      for (const std::string& reason : r.reasons) out += fmt::format("    - {}\n", reason);
      if (r.other_reading) out += fmt::format("    - {}\n", *r.other_reading);
    }
  }
  size_t passed = 0, failed = 0;
  if (!outcomes.empty()) out += "\n== expectations\n";
  for (const ClaimExpectationOutcome& o : outcomes) {
    out += fmt::format("  {}  {}: {}\n", name(o.verdict), o.expectation.claim, o.detail);
    passed += o.verdict == ExpectationVerdict::kPass;
    failed += o.verdict == ExpectationVerdict::kFail;
  }
  if (!quiet) out += '\n';
  out += format_verdict_line(failed == 0, passed, failed, 0, "sim");
  return out;
}

std::string claims_results_csv(const ClaimsResults& results) {
  std::string out = "claim,kind,unit,role,setting,value,claimed,verdict\n";
  for (const ClaimResult& r : results.claims) {
    const Claim& c = *r.claim;
    auto row = [&](std::string_view role, const ClaimValue& v, std::optional<double> claimed) {
      out +=
          fmt::format("{},{},{},{},{},{:.6g},{},{}\n", csv_field(c.name), name(c.kind), claim_unit(c.kind), role,
                      csv_field(v.setting), v.value, claimed ? fmt::format("{:.6g}", *claimed) : "", name(r.verdict));
    };
    row("before", r.before, c.claimed.before);
    for (size_t i = 0; i < r.after.size(); ++i) {
      row(i == r.best ? "after-nearest" : "after", r.after[i],
          i == r.best ? std::optional(c.claimed.after) : std::nullopt);
    }
  }
  return out;
}

nlohmann::json claims_results_json(const Scenario& scenario, const ClaimsResults& results,
                                   const std::vector<ClaimExpectationOutcome>& outcomes) {
  auto value_json = [](const ClaimValue& v) {
    return nlohmann::json{{"setting", v.setting}, {"value", v.value}, {"detail", v.detail}};
  };
  nlohmann::json claims = nlohmann::json::array();
  for (const ClaimResult& r : results.claims) {
    const Claim& c = *r.claim;
    nlohmann::json after = nlohmann::json::array();
    for (const ClaimValue& v : r.after) after.push_back(value_json(v));
    nlohmann::json j{
        {"name", c.name},
        {"kind", name(c.kind)},
        {"says", c.says},
        {"unit", claim_unit(c.kind)},
        {"claimed",
         {{"before", c.claimed.before}, {"after", c.claimed.after}, {"after_or_better", c.claimed.after_or_better}}},
        {"tolerance", c.tolerance},
        {"before", value_json(r.before)},
        {"after", after},
        {"nearest", r.after[r.best].setting},
        {"verdict", name(r.verdict)},
        {"reasons", r.reasons}};
    if (r.limit) j["bound"] = {{"value", *r.limit}, {"detail", r.limit_detail}};
    if (r.other_reading) j["other_reading"] = *r.other_reading;
    claims.push_back(std::move(j));
  }
  nlohmann::json expectations = nlohmann::json::array();
  bool pass = true;
  for (const ClaimExpectationOutcome& o : outcomes) {
    expectations.push_back({{"claim", o.expectation.claim}, {"verdict", name(o.verdict)}, {"detail", o.detail}});
    pass = pass && o.verdict != ExpectationVerdict::kFail;
  }
  return {{"tandem_results", kResultsFormatVersion},
          {"scenario", scenario.name},
          {"workload", {{"type", "claims"}}},
          {"cluster", cluster_json(scenario.variants.front().cluster)},
          {"claims", claims},
          {"expectations", expectations},
          {"passed", pass}};
}

}  // namespace tandem::app
