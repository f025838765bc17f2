#include "app/scenario/loop_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/common/nccl_tests_table.h"
#include "app/scenario/scenario_report.h"
#include "app/run/backends.h"
#include "backend/host/host_attempts.h"
#include "core/error.h"
#include "core/text.h"
#include "core/flight_recorder.h"
#include "core/session.h"
#include "models/cluster.h"
#include "sim/isolated.h"
#include "sim/sim_attempts.h"
#include "sim/simulator.h"

namespace tandem::app {
namespace {

// An iteration within this share of its fault-free time took that time: a fault active in it had
// no effect (timings are sums of the same simulated or measured steps, equal up to rounding).
constexpr double kNoEffectTolerance = 1e-6;

using nlohmann::json;

// What every backend shares: the cluster, the ranks' GPUs, the fault injector.
struct LoopSetup {
  const Scenario& scenario;
  const CollectiveLoop& loop;
  models::Topology topology;
  int per_node = 0;
  int nranks = 0;
  std::vector<int> gpu_of_rank;
  std::map<int, std::vector<uint32_t>> fault_links;  // fault index -> the topology links it kills or slows
  std::unique_ptr<FaultInjector> injector;

  explicit LoopSetup(const Scenario& s)
      : scenario(s),
        loop(std::get<CollectiveLoop>(s.workload)),
        topology(models::build_cluster(s.variants[0].cluster)) {
    const int total_per_node = topology.gpus_per_node();
    per_node = loop.gpus_per_node > 0 ? loop.gpus_per_node : total_per_node;
    for (int v = 0; v < topology.node_count(); ++v) {
      for (int i = 0; i < per_node; ++i) gpu_of_rank.push_back(v * total_per_node + i);
    }
    nranks = static_cast<int>(gpu_of_rank.size());
    for (size_t i = 0; i < s.faults.faults.size(); ++i) {
      const Fault& fault = s.faults.faults[i];
      if (fault.kind == FaultKind::kNicDown) {
        fault_links[static_cast<int>(i)] = topology.nic_links(fault.node, fault.nic);
      } else if (fault.is_link_fault()) {
        fault_links[static_cast<int>(i)] = {topology.find_link(fault.link).value()};
      }
    }
    injector = std::make_unique<FaultInjector>(s.faults, [this](const Fault& fault, int src, int dst) {
      // `fault` lives in the injector's copy of the plan.
      const auto it = fault_links.find(static_cast<int>(&fault - injector->plan().faults.data()));
      if (it == fault_links.end()) return false;
      const models::Route route =
          topology.route(gpu_of_rank[static_cast<size_t>(src)], gpu_of_rank[static_cast<size_t>(dst)]);
      for (uint32_t link : it->second) {
        if (models::Topology::crosses(route, link)) return true;
      }
      return false;
    });
  }

  // Where the ranks sit, for the simulator.
  sim::SimPlacement placement() const {
    return {&topology, scenario.variants[0].cluster, network_model(scenario), per_node, gpu_of_rank,
            fault_links};
  }
};

// The session's settings from the scenario: the collective, the policy, where dumps go.
SessionConfig session_config(const LoopSetup& setup, const LoopOptions& options, ScenarioBackend which,
                             int64_t epoch_ns) {
  const Scenario& scenario = setup.scenario;
  SessionConfig config;
  config.nranks = setup.nranks;
  config.iterations = setup.loop.iterations;
  config.work = {setup.loop.collective, setup.loop.size_bytes, setup.loop.dtype, setup.loop.op, setup.loop.algorithm};
  config.recovery = scenario.recovery;
  config.recorder = FrConfig::from_env();
  if (scenario.outputs.fr_buffer_size) config.recorder.capacity = *scenario.outputs.fr_buffer_size;
  if (scenario.outputs.dump_format) config.recorder.format = *scenario.outputs.dump_format;
  if (config.recorder.prefix.empty()) {
    const std::filesystem::path dir =
        options.out_dir.empty() ? std::filesystem::temp_directory_path() / fmt::format("tandem-fr-{}", getpid())
                                : std::filesystem::path(options.out_dir) / "fr";
    config.recorder.prefix = (dir / "rank_").string();
  }
  config.comm_lib = fmt::format("tandem-{} {}", TANDEM_VERSION, name(which));
  config.epoch_ns = epoch_ns;
  return config;
}

// Runs the loop: a session over the backend's attempts, every iteration, then the dump at exit
// when asked for.
LoopResults drive(const LoopSetup& setup, const LoopOptions& options, ScenarioBackend which, int64_t epoch_ns,
                  const std::function<std::unique_ptr<AttemptRunner>(const Session&)>& make_runner) {
  Session session(session_config(setup, options, which, epoch_ns), *setup.injector);
  const std::unique_ptr<AttemptRunner> runner = make_runner(session);
  while (session.run_next(*runner)) {
  }
  if (options.dump_on_exit || setup.scenario.outputs.dumps) session.dump("end of the run");
  LoopResults results;
  results.backend = which;
  results.ranks = setup.nranks;
  results.iterations = session.iterations();
  results.aborted = session.aborted();
  results.dump_prefix = session.dump_prefix();
  results.dump_reasons = session.dump_reasons();
  results.dump_note = session.dump_note();
  results.slices = session.slices();
  return results;
}

int severity(Outcome outcome) {
  switch (outcome) {
    case Outcome::kCompleted:
      return 0;
    case Outcome::kCompletedAfterRetry:
      return 1;
    case Outcome::kRecoveredReroute:
      return 2;
    case Outcome::kRecoveredShrink:
      return 3;
    case Outcome::kAborted:
      return 4;
  }
  return 4;
}

std::string ranks_text(const std::vector<int>& ranks) { return fmt::format("[{}]", fmt::join(ranks, ", ")); }

// Microseconds for the report: rounding noise (1e-11 s) is not a "-0.0" cost.
double report_us(double seconds) {
  const double us = seconds * 1e6;
  return std::abs(us) < 0.05 ? 0.0 : us;
}

}  // namespace

void to_json(json& j, const LoopResults& r) {
  json iterations = json::array();
  for (const IterationResult& it : r.iterations) {
    iterations.push_back({{"iteration", it.iteration},
                          {"outcome", name(it.outcome)},
                          {"seconds", it.seconds},
                          {"fault_free_seconds", it.fault_free_seconds},
                          {"attempts", it.attempts},
                          {"dropped_ranks", it.dropped_ranks},
                          {"rerouted", it.rerouted},
                          {"faults", it.faults},
                          {"detail", it.detail},
                          {"start_s", it.start_s}});
  }
  json slices = json::array();
  for (const RankSlice& x : r.slices) slices.push_back({x.rank, x.iteration, x.attempt, x.start_s, x.end_s, x.ok});
  j = {{"backend", name(r.backend)},
       {"ranks", r.ranks},
       {"aborted", r.aborted},
       {"iterations", iterations},
       {"dump_prefix", r.dump_prefix},
       {"dump_reasons", r.dump_reasons},
       {"dump_note", r.dump_note},
       {"slices", slices}};
}

void from_json(const json& j, LoopResults& r) {
  r = LoopResults{};
  r.backend = parse_backend(j.at("backend").get<std::string>());
  r.ranks = j.at("ranks");
  r.aborted = j.at("aborted");
  r.dump_prefix = j.at("dump_prefix");
  r.dump_reasons = j.at("dump_reasons").get<std::vector<std::string>>();
  r.dump_note = j.value("dump_note", "");
  for (const json& row : j.at("iterations")) {
    IterationResult it;
    it.iteration = row.at("iteration");
    it.outcome = parse_outcome(row.at("outcome").get<std::string>());
    it.seconds = row.at("seconds");
    it.fault_free_seconds = row.at("fault_free_seconds");
    it.attempts = row.at("attempts");
    it.dropped_ranks = row.at("dropped_ranks").get<std::vector<int>>();
    it.rerouted = row.at("rerouted");
    it.faults = row.at("faults").get<std::vector<int>>();
    it.detail = row.at("detail");
    it.start_s = row.at("start_s");
    r.iterations.push_back(std::move(it));
  }
  for (const json& x : j.at("slices")) {
    r.slices.push_back({x.at(0).get<int>(), x.at(1).get<int>(), x.at(2).get<int>(), x.at(3).get<double>(),
                        x.at(4).get<double>(), x.at(5).get<bool>()});
  }
}

double LoopResults::total_seconds() const {
  double total = 0;
  for (const IterationResult& it : iterations) total += it.seconds;
  return total;
}

double LoopResults::fault_free_seconds() const {
  double total = 0;
  for (const IterationResult& it : iterations) total += it.fault_free_seconds;
  return total;
}

LoopResults run_loop(const Scenario& scenario, ScenarioBackend backend, const LoopOptions& options) {
  if (!std::holds_alternative<CollectiveLoop>(scenario.workload)) {
    fail(ErrorCode::kInvalidArgument, "run_loop: the workload is not a collective-loop");
  }
  LoopResults results;
  const int64_t epoch =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (backend == ScenarioBackend::kHost && !options.executor) {
    const LoopSetup setup(scenario);
    results = drive(setup, options, backend, epoch,
                    [](const Session& session) { return std::make_unique<HostAttempts>(session); });
  } else if (backend != ScenarioBackend::kSim) {
    const LoopSetup setup(scenario);
    const std::unique_ptr<Executor> executor = options.executor ? options.executor() : make_executor(name(backend));
    results = drive(setup, options, backend, epoch,
                    [&](const Session& session) { return std::make_unique<ExecutorAttempts>(session, *executor); });
  } else {
    // SimGrid allows one platform per process: the loop runs in a child; dumps are files anyway.
    results = sim::run_isolated([&] {
      const LoopSetup setup(scenario);
      return drive(setup, options, backend, 0, [&](const Session& session) {
        return std::make_unique<sim::SimAttempts>(session, setup.placement());
      });
    });
  }
  if (!results.dump_prefix.empty()) {
    const std::filesystem::path prefix(results.dump_prefix);
    results.analysis = analyze(read_dump_dir(prefix.parent_path(), prefix.filename().string()));
    // Without --out (or TORCH_FR_DUMP_TEMP_FILE) nobody asked to keep the dumps: they served the
    // analysis in a folder of the temporary directory, which goes with the run.
    if (options.out_dir.empty() && FrConfig::from_env().prefix.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(prefix.parent_path(), ignored);
      results.dumps_removed = true;
    }
  }
  return results;
}

std::vector<LoopExpectationOutcome> evaluate_loop_expectations(const Scenario& scenario, const LoopResults& results) {
  std::vector<LoopExpectationOutcome> out;
  for (const LoopExpectation& e : scenario.expectations_of<LoopExpectation>()) {
    if (e.backend && *e.backend != results.backend) continue;
    LoopExpectationOutcome o;
    o.pass = true;
    std::vector<std::string> parts;
    const IterationResult* it = nullptr;
    if (e.iteration) {
      for (const IterationResult& r : results.iterations) {
        if (r.iteration == *e.iteration) it = &r;
      }
    }
    const std::string where = e.iteration ? fmt::format("iteration {}", *e.iteration) : "the loop";
    if (e.iteration && it == nullptr) {
      o.pass = false;
      parts.push_back(fmt::format("{} never ran (the loop aborted before it)", where));
    }
    if (e.outcome && (it != nullptr || !e.iteration)) {
      Outcome got = Outcome::kCompleted;
      if (it != nullptr) {
        got = it->outcome;
      } else {
        for (const IterationResult& r : results.iterations) {
          if (severity(r.outcome) > severity(got)) got = r.outcome;
        }
      }
      const bool ok = got == *e.outcome;
      o.pass = o.pass && ok;
      parts.push_back(fmt::format("{} outcome {} (expected {})", where, name(got), name(*e.outcome)));
    }
    if (e.culprit_ranks) {
      std::vector<int> got = results.analysis ? results.analysis->culprit_ranks : std::vector<int>{};
      std::sort(got.begin(), got.end());
      std::vector<int> want = *e.culprit_ranks;
      std::sort(want.begin(), want.end());
      o.pass = o.pass && got == want;
      parts.push_back(fmt::format("flight-recorder culprit {} (expected {})", ranks_text(got), ranks_text(want)));
    }
    auto check = [&](const Bound& bound, double value, std::string_view what) {
      if (!bound.set()) return;
      const bool ok = (!bound.min || value >= *bound.min) && (!bound.max || value <= *bound.max);
      o.pass = o.pass && ok;
      parts.push_back(fmt::format("{} {} {:.1f} us (expected {}{})", where, what, value,
                                  bound.min ? fmt::format(">= {:g}", *bound.min) : "",
                                  bound.max ? fmt::format("{}<= {:g}", bound.min ? ", " : "", *bound.max) : ""));
    };
    const double time_s = it != nullptr ? it->seconds : results.total_seconds();
    const double free_s = it != nullptr ? it->fault_free_seconds : results.fault_free_seconds();
    check(e.time_us, time_s * 1e6, "time");
    check(e.cost_us, (time_s - free_s) * 1e6, "cost");
    o.line = fmt::format("{} line {}: {}", o.pass ? "PASS" : "FAIL", e.mark.line, fmt::join(parts, "; "));
    out.push_back(std::move(o));
  }
  return out;
}

std::string format_loop_report(const Scenario& scenario, const LoopResults& results,
                               const std::vector<LoopExpectationOutcome>& outcomes, bool quiet) {
  const CollectiveLoop& loop = std::get<CollectiveLoop>(scenario.workload);
  std::string text;
  if (quiet) {
    text += "Expectations:\n";
    for (const LoopExpectationOutcome& o : outcomes) text += "  " + o.line + "\n";
    if (outcomes.empty()) text += fmt::format("  none (the loop {})\n", results.aborted ? "ABORTED" : "completed");
    return text;
  }
  text += fmt::format("Workload: {} x {} {} {} on {} ranks ({} backend)\n", loop.iterations, name(loop.collective),
                      format_size(loop.size_bytes), name(loop.algorithm), results.ranks, name(results.backend));
  text +=
      fmt::format("Recovery: retry {} (backoff {:g} us), watchdog {:g} ms, then {}{}\n", scenario.recovery.retry_max,
                  scenario.recovery.backoff_s * 1e6, scenario.recovery.watchdog_s * 1e3, name(scenario.recovery.action),
                  scenario.recovery.verify ? ", checksums on" : "");
  if (scenario.faults.empty()) {
    text += "Faults: none\n";
  } else {
    text += "Faults:\n";
    for (size_t i = 0; i < scenario.faults.faults.size(); ++i) {
      std::vector<int> hit;
      bool effect = false;  // some iteration it was active in went otherwise than without faults
      for (const IterationResult& it : results.iterations) {
        if (std::find(it.faults.begin(), it.faults.end(), static_cast<int>(i)) == it.faults.end()) continue;
        hit.push_back(it.iteration);
        effect = effect || it.outcome != Outcome::kCompleted || it.attempts > 1 || it.rerouted ||
                 it.seconds > it.fault_free_seconds * (1 + kNoEffectTolerance);
      }
      std::string seen = "never hit";
      if (!hit.empty()) {
        seen = fmt::format("{} iteration(s) {}", effect ? "hit" : "active in", fmt::join(hit, ", "));
        // A link no transfer crosses, or a slow-down off the critical path: say it changed nothing.
        if (!effect) seen += ", with no effect (each completed at once in its fault-free time)";
      }
      text += fmt::format("  #{} {}: {}\n", i, scenario.faults.faults[i].describe(), seen);
    }
  }
  text += "\n iter  outcome                 attempts    time (us)  fault-free (us)    cost (us)  note\n";
  for (const IterationResult& it : results.iterations) {
    std::string note;
    if (!it.dropped_ranks.empty()) note += fmt::format("dropped rank(s) {} ", fmt::join(it.dropped_ranks, ", "));
    if (it.rerouted) note += "rerouted ";
    if (it.outcome != Outcome::kCompleted) note += it.detail;
    text += fmt::format(" {:>4}  {:<22} {:>9} {:>12.1f} {:>16.1f} {:>12.1f}  {}\n", it.iteration, name(it.outcome),
                        it.attempts, report_us(it.seconds), report_us(it.fault_free_seconds),
                        report_us(it.seconds - it.fault_free_seconds), note);
  }
  // An aborted loop stops early: it can take less time than the fault-free one, which is no gain.
  const double cost_s = std::max(0.0, results.total_seconds() - results.fault_free_seconds());
  text += fmt::format("Total: {}, fault-free {}, faults cost {}{}\n", duration_text(results.total_seconds()),
                      duration_text(results.fault_free_seconds()),
                      results.aborted ? "(not comparable: the loop stopped early)" : duration_text(cost_s),
                      results.aborted ? "; the loop ABORTED" : "");
  if (!results.dump_prefix.empty() && results.dumps_removed) {
    text += fmt::format("Flight-recorder dumps: written for {}, analyzed, then removed (--out DIR keeps them)\n",
                        fmt::join(results.dump_reasons, "; "));
  } else if (!results.dump_prefix.empty()) {
    text += fmt::format("Flight-recorder dumps: {}<rank> ({})\n", results.dump_prefix,
                        fmt::join(results.dump_reasons, "; "));
  }
  if (!results.dump_note.empty()) text += fmt::format("Flight-recorder dumps: {}\n", results.dump_note);
  if (results.analysis) text += fmt::format("Flight-recorder analysis: {}\n", results.analysis->verdict);
  if (!outcomes.empty()) {
    text += "\nExpectations:\n";
    for (const LoopExpectationOutcome& o : outcomes) text += "  " + o.line + "\n";
  }
  return text;
}

std::string loop_results_csv(const LoopResults& results) {
  std::string csv = "iteration,outcome,attempts,time_us,fault_free_us,cost_us,dropped_ranks,rerouted,faults,detail\n";
  for (const IterationResult& it : results.iterations) {
    csv += fmt::format("{},{},{},{:.3f},{:.3f},{:.3f},{},{},{},{}\n", it.iteration, name(it.outcome), it.attempts,
                       report_us(it.seconds), report_us(it.fault_free_seconds),
                       report_us(it.seconds - it.fault_free_seconds),
                       csv_field(fmt::format("{}", fmt::join(it.dropped_ranks, " "))), it.rerouted ? "true" : "false",
                       csv_field(fmt::format("{}", fmt::join(it.faults, " "))), csv_field(it.detail));
  }
  return csv;
}

std::string loop_results_json(const Scenario& scenario, const LoopResults& results,
                              const std::vector<LoopExpectationOutcome>& outcomes) {
  json j = results;
  j["tandem_results"] = kResultsFormatVersion;
  j["scenario"] = scenario.name;
  j["description"] = scenario.description;
  const CollectiveLoop& loop = std::get<CollectiveLoop>(scenario.workload);
  j["workload"] = fmt::format("{} x {} {} {} on {} ranks", loop.iterations, name(loop.collective),
                              format_size(loop.size_bytes), name(loop.algorithm), results.ranks);
  j["recovery"] = fmt::format("retry {}, watchdog {:g} ms, then {}", scenario.recovery.retry_max,
                              scenario.recovery.watchdog_s * 1e3, name(scenario.recovery.action));
  j["total_seconds"] = results.total_seconds();
  j["fault_free_seconds"] = results.fault_free_seconds();
  json faults = json::array();
  for (const Fault& f : scenario.faults.faults) faults.push_back(f.describe());
  j["faults"] = faults;
  if (results.analysis) {
    j["analysis"] = json::parse(format_json(*results.analysis));
  }
  json expectations = json::array();
  for (const LoopExpectationOutcome& o : outcomes) expectations.push_back({{"pass", o.pass}, {"line", o.line}});
  j["expectations"] = expectations;
  return j.dump(2);
}

}  // namespace tandem::app
