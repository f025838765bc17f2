#include "app/scenario/startup_run.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/scenario/scenario_report.h"
#include "app/scenario/startup_text.h"
#include "core/error.h"

namespace tandem::app {
namespace {

const StartupWorkload& startup_of(const Scenario& scenario) {
  const auto* startup = std::get_if<StartupWorkload>(&scenario.workload);
  if (startup == nullptr) fail(ErrorCode::kInvalidArgument, "the scenario's workload is not a start-up");
  return *startup;
}

size_t config_index(const StartupWorkload& startup, std::string_view config) {
  for (size_t c = 0; c < startup.configs.size(); ++c) {
    if (startup.configs[c].name == config) return c;
  }
  fail(ErrorCode::kInvalidArgument, "no start-up config named '{}'", config);
}

nlohmann::json levers_json(const sim::StartupLevers& l) {
  return {{"store", sim::name(l.store)},
          {"eager_init", l.eager_init},
          {"ranks_per_root", l.ranks_per_root},
          {"runtime_connect", l.runtime_connect},
          {"oob_net", l.oob_net},
          {"init_barriers", l.init_barriers},
          {"topo_cache", l.topo_cache}};
}

}  // namespace

std::string describe_levers(const sim::StartupLevers& l) {
  const sim::StartupLevers d;
  std::vector<std::string> parts;
  if (l.store != d.store) parts.push_back(fmt::format("{} store", sim::name(l.store)));
  if (l.eager_init != d.eager_init) parts.push_back(l.eager_init ? "eager init + split" : "lazy init");
  if (l.ranks_per_root != d.ranks_per_root) {
    parts.push_back(l.ranks_per_root == 0 ? "one root" : fmt::format("{} ranks per root", l.ranks_per_root));
  }
  if (l.runtime_connect != d.runtime_connect) parts.push_back(l.runtime_connect ? "runtime connect" : "eager connect");
  if (l.oob_net != d.oob_net) parts.push_back(l.oob_net ? "bootstrap over the fabric" : "bootstrap over TCP");
  if (l.init_barriers != d.init_barriers) parts.push_back(l.init_barriers ? "barrier per new_group" : "no barriers");
  if (l.topo_cache != d.topo_cache) parts.push_back(l.topo_cache ? "topology cache" : "topology per communicator");
  return parts.empty() ? "today's defaults" : fmt::format("{}", fmt::join(parts, ", "));
}

const sim::StartupResult* StartupResults::find(const Scenario& scenario, std::string_view variant,
                                               std::string_view config) const {
  const StartupWorkload& startup = startup_of(scenario);
  for (size_t v = 0; v < scenario.variants.size() && v < runs.size(); ++v) {
    if (scenario.variants[v].name != variant) continue;
    const size_t c = config_index(startup, config);
    return c < runs[v].size() ? &runs[v][c] : nullptr;
  }
  return nullptr;
}

int startup_gpus(const StartupWorkload& startup, const ClusterVariant& variant) {
  return startup.gpus > 0 ? startup.gpus : variant.cluster.nodes * variant.cluster.gpus_per_node;
}

StartupResults run_startup(const Scenario& scenario, ScenarioBackend backend, const ProgressFn& progress) {
  if (backend != ScenarioBackend::kSim) {
    fail(ErrorCode::kUnsupported,
         "a start-up workload runs on the simulator (--backend sim), not on {}: it models a whole job's launch",
         name(backend));
  }
  const StartupWorkload& startup = startup_of(scenario);
  StartupResults results;
  for (size_t v = 0; v < scenario.variants.size(); ++v) {
    const ClusterVariant& variant = scenario.variants[v];
    const int gpus = startup_gpus(startup, variant);
    if (progress) {
      progress(fmt::format("variant {}/{} ({}): start-up of {} GPUs under {} lever sets", v + 1,
                           scenario.variants.size(), variant.name, gpus, startup.configs.size()));
    }
    std::vector<sim::StartupResult> row;
    for (const StartupConfig& config : startup.configs) {
      sim::StartupJob job{.gpus = gpus, .groups = sim::layout_groups(startup.layout, gpus), .levers = config.levers};
      row.push_back(sim::simulate_startup(variant.cluster, job));
    }
    results.runs.push_back(std::move(row));
  }
  return results;
}

std::vector<StartupExpectationOutcome> evaluate_startup_expectations(const Scenario& scenario,
                                                                     const StartupResults& results) {
  std::vector<StartupExpectationOutcome> outcomes;
  for (const StartupExpectation& e : scenario.expectations_of<StartupExpectation>()) {
    StartupExpectationOutcome outcome;
    outcome.expectation = e;
    const sim::StartupResult* run = results.find(scenario, e.variant, e.config);
    if (run == nullptr) fail(ErrorCode::kInvalidArgument, "no start-up result for '{}' on '{}'", e.config, e.variant);
    bool holds = check_bound(e.total_s, run->total_s, "start-up", "s", outcome.detail);
    if (e.relative_to) {
      const sim::StartupResult* other = results.find(scenario, e.variant, *e.relative_to);
      if (other == nullptr) fail(ErrorCode::kInvalidArgument, "no start-up result for '{}'", *e.relative_to);
      holds = check_bound(e.speedup, other->total_s / run->total_s, fmt::format("speedup over {}", *e.relative_to), "x",
                          outcome.detail) &&
              holds;
    }
    outcome.verdict = holds ? ExpectationVerdict::kPass : ExpectationVerdict::kFail;
    outcomes.push_back(std::move(outcome));
  }
  return outcomes;
}

std::string format_startup_report(const Scenario& scenario, const StartupResults& results,
                                  const std::vector<StartupExpectationOutcome>& outcomes, bool quiet) {
  const StartupWorkload& startup = startup_of(scenario);
  std::string out = fmt::format("tandem run {}: {}\n", scenario.name, scenario.description);
  if (!quiet) {
    std::vector<std::string> names;
    for (const StartupConfig& config : startup.configs) names.push_back(config.name);
    for (size_t v = 0; v < results.runs.size(); ++v) {
      const ClusterVariant& variant = scenario.variants[v];
      const std::vector<sim::StartupResult>& row = results.runs[v];
      const int gpus = startup_gpus(startup, variant);
      const std::vector<sim::StartupGroup> groups = sim::layout_groups(startup.layout, gpus);
      std::vector<std::string> group_names{fmt::format("world({})", gpus)};
      for (const sim::StartupGroup& g : groups) group_names.push_back(fmt::format("{}({})", g.name, g.size));
      out += fmt::format("\n== start-up on {} ({} GPUs; communicators {}), sim/startup.h\n", variant.name, gpus,
                         fmt::join(group_names, " "));
      out += startup_table(row, names, "config");
      out += "\n";
      for (size_t c = 0; c < row.size(); ++c) {
        out += fmt::format(
            "  {}: {}{}\n", names[c], describe_levers(startup.configs[c].levers),
            c > 0 ? fmt::format("; {:.2f}x faster than {}", row[0].total_s / row[c].total_s, names[0]) : "");
        for (const sim::StartupPhase& p : row[c].phases) {
          out += fmt::format("    {:<18} {:>9.3f} s  {}\n", p.name, p.seconds, p.detail);
        }
      }
    }
  }
  size_t passed = 0, failed = 0;
  if (!outcomes.empty()) out += "\n== expectations\n";
  for (const StartupExpectationOutcome& o : outcomes) {
    const StartupExpectation& e = o.expectation;
    out += fmt::format("  {}  {} on {}: {}\n", name(o.verdict), e.config, e.variant, o.detail);
    passed += o.verdict == ExpectationVerdict::kPass;
    failed += o.verdict == ExpectationVerdict::kFail;
  }
  if (!quiet) out += '\n';
  out += format_verdict_line(failed == 0, passed, failed, 0, "sim");
  return out;
}

std::string startup_results_csv(const Scenario& scenario, const StartupResults& results) {
  const StartupWorkload& startup = startup_of(scenario);
  std::string out =
      "variant,config,gpus,communicators,store_requests,launch_s,store_s,communicators_s,group_barriers_s,"
      "first_collectives_s,total_s\n";
  for (size_t v = 0; v < results.runs.size(); ++v) {
    for (size_t c = 0; c < results.runs[v].size(); ++c) {
      const sim::StartupResult& r = results.runs[v][c];
      out +=
          fmt::format("{},{},{},{},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g}\n",
                      csv_field(scenario.variants[v].name), csv_field(startup.configs[c].name), r.gpus, r.communicators,
                      r.store_requests, r.phase_s("launch"), r.phase_s("store"), r.phase_s("communicators"),
                      r.phase_s("group barriers"), r.phase_s("first collectives"), r.total_s);
    }
  }
  return out;
}

nlohmann::json startup_results_json(const Scenario& scenario, const StartupResults& results,
                                    const std::vector<StartupExpectationOutcome>& outcomes) {
  const StartupWorkload& startup = startup_of(scenario);
  nlohmann::json variants = nlohmann::json::array();
  for (size_t v = 0; v < results.runs.size(); ++v) {
    nlohmann::json configs = nlohmann::json::array();
    for (size_t c = 0; c < results.runs[v].size(); ++c) {
      configs.push_back({{"name", startup.configs[c].name},
                         {"levers", levers_json(startup.configs[c].levers)},
                         {"startup", sim::startup_to_json(results.runs[v][c])}});
    }
    variants.push_back({{"name", scenario.variants[v].name}, {"configs", configs}});
  }
  nlohmann::json expectations = nlohmann::json::array();
  bool pass = true;
  for (const StartupExpectationOutcome& o : outcomes) {
    expectations.push_back({{"variant", o.expectation.variant},
                            {"config", o.expectation.config},
                            {"verdict", name(o.verdict)},
                            {"detail", o.detail}});
    pass = pass && o.verdict != ExpectationVerdict::kFail;
  }
  return {{"tandem_results", kResultsFormatVersion},
          {"scenario", scenario.name},
          {"workload", {{"type", "startup"}}},
          {"variants", variants},
          {"expectations", expectations},
          {"passed", pass}};
}

}  // namespace tandem::app
