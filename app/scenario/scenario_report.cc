#include "app/scenario/scenario_report.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "app/common/common.h"
#include "app/common/nccl_tests_table.h"

namespace tandem::app {

namespace {

// Widths of the per-collective tables: size, then per algorithm a time and a busbw column.
constexpr int kSizeWidth = 10;
constexpr int kTimeWidth = 10;
constexpr int kBusbwWidth = 8;
// The variant comparison shows at most this many sizes.
constexpr size_t kComparisonSizes = 5;

const CollectiveSweep& sweep_of(const Scenario& scenario) { return std::get<CollectiveSweep>(scenario.workload); }

std::string busbw_formula(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce:
      return "busbw = algbw x 2(n-1)/n";
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return "busbw = algbw x (n-1)/n";
    default:
      return "busbw = algbw";
  }
}

std::string picked(const PointResult& point) {
  if (point.protocol.empty()) return point.algorithm_used;
  if (point.channels <= 0) return fmt::format("{}/{}", point.algorithm_used, point.protocol);
  return fmt::format("{}/{} {}ch", point.algorithm_used, point.protocol, point.channels);
}

// The two cells of one algorithm for one point.
std::string cells(const PointResult* point) {
  if (point == nullptr) return fmt::format("  {:>{}} {:>{}}", "-", kTimeWidth, "-", kBusbwWidth);
  switch (point->status) {
    case PointStatus::kOk:
      return fmt::format("  {:>{}} {:>{}.2f}", format_time_us(point->time_us), kTimeWidth, point->busbw_GBps,
                         kBusbwWidth);
    case PointStatus::kNotApplicable:
      return fmt::format("  {:>{}} {:>{}}", "n/a", kTimeWidth, "n/a", kBusbwWidth);
    case PointStatus::kSkipped:
      return fmt::format("  {:>{}} {:>{}}", "skipped", kTimeWidth, "", kBusbwWidth);
    case PointStatus::kWrongData:
      return fmt::format("  {:>{}} {:>{}}", format_time_us(point->time_us), kTimeWidth, "WRONG", kBusbwWidth);
  }
  return "";
}

std::string centered(std::string_view text, int width) {
  const int pad = std::max(0, width - static_cast<int>(text.size()));
  return std::string(static_cast<size_t>(pad - pad / 2), ' ') + std::string(text) +
         std::string(static_cast<size_t>(pad / 2), ' ');
}

// Up to kComparisonSizes sizes of the sweep: 1 KiB, 1 MiB, 1 GiB, 1 TiB where swept, and the
// largest; the smallest, middle and largest when fewer than two of those are.
std::vector<int64_t> comparison_sizes(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> chosen;
  for (int64_t round : {int64_t{1} << 10, int64_t{1} << 20, int64_t{1} << 30, int64_t{1} << 40}) {
    if (std::find(sizes.begin(), sizes.end(), round) != sizes.end()) chosen.push_back(round);
  }
  const int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  if (std::find(chosen.begin(), chosen.end(), largest) == chosen.end()) chosen.push_back(largest);
  if (chosen.size() < 2) {
    std::vector<int64_t> sorted = sizes;
    std::sort(sorted.begin(), sorted.end());
    chosen = {sorted.front(), sorted[sorted.size() / 2], sorted.back()};
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  }
  if (chosen.size() > kComparisonSizes) chosen.erase(chosen.begin(), chosen.end() - kComparisonSizes);
  return chosen;
}

std::string describe_expectation(const Expectation& expectation) {
  return fmt::format("{} {} {} {}", expectation.variant, name(expectation.collective), expectation.algorithm,
                     format_size(expectation.size_bytes));
}

nlohmann::json bound_json(const Bound& bound) {
  nlohmann::json out = nlohmann::json::object();
  if (bound.min) out["min"] = *bound.min;
  if (bound.max) out["max"] = *bound.max;
  return out;
}

// A CSV field, quoted when it holds a comma, a quote or a line break.

}  // namespace

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

nlohmann::json cluster_json(const models::ClusterSpec& cluster) {
  return {
      {"preset", cluster.preset},
      {"gpu", cluster.gpu.name},
      {"nvls", cluster.gpu.nvls},
      {"sharp", cluster.sharp},
      {"nodes", cluster.nodes},
      {"gpus_per_node", cluster.gpus_per_node},
      {"fabric", std::string(models::name(cluster.fabric))},
      {"nic_gbps", cluster.nic_Bps * 8 / 1e9},
      {"nics_per_node", cluster.nics_per_node},
      {"spines", cluster.spines},
      {"oversubscription", cluster.oversubscription},
      {"nodes_per_leaf", cluster.nodes_per_leaf},
      {"nvlink_GBps", cluster.nvlink_Bps / 1e9},
      {"pcie_GBps", cluster.pcie_Bps / 1e9},
      {"nvlink_latency_us", cluster.nvlink_latency_s * 1e6},
      {"pcie_latency_us", cluster.pcie_latency_s * 1e6},
      {"nic_latency_us", cluster.nic_latency_s * 1e6},
      {"switch_latency_us", cluster.switch_latency_s * 1e6},
  };
}

std::string format_variant_tables(const Scenario& scenario, const ScenarioResults& results,
                                  const ClusterVariant& variant) {
  const CollectiveSweep& sweep = sweep_of(scenario);
  const int nranks = sweep_ranks(variant, sweep);
  std::string out = fmt::format("== {}: {}\n", variant.name, models::describe(variant.cluster));
  if (sweep.gpus_per_node > 0 && sweep.gpus_per_node != variant.cluster.gpus_per_node) {
    out += fmt::format("   the workload uses {} GPUs per node: {} ranks\n", sweep.gpus_per_node, nranks);
  }
  for (Collective collective : sweep.collectives) {
    std::vector<std::string> shown, not_applicable;
    for (const std::string& algorithm : sweep.algorithms) {
      (algorithm_applies(algorithm, collective) ? shown : not_applicable).push_back(algorithm);
    }
    out += fmt::format("\n{} ({}, {} ranks; time in us, busbw in GB/s, {})\n", name(collective), name(sweep.dtype),
                       nranks, busbw_formula(collective));
    const bool has_auto = std::find(shown.begin(), shown.end(), "auto") != shown.end();
    std::string groups = fmt::format("{:>{}}", "", kSizeWidth);
    std::string columns = fmt::format("{:>{}}", "size", kSizeWidth);
    for (const std::string& algorithm : shown) {
      groups += "  " + centered(algorithm, kTimeWidth + 1 + kBusbwWidth);
      columns += fmt::format("  {:>{}} {:>{}}", "time", kTimeWidth, "busbw", kBusbwWidth);
    }
    if (has_auto) columns += "  auto picked";
    while (!groups.empty() && groups.back() == ' ') groups.pop_back();
    out += groups + "\n" + columns + "\n";

    std::map<std::string, std::set<std::string>> notes;  // status -> reasons
    for (int64_t bytes : sweep.sizes_bytes) {
      std::string row = fmt::format("{:>{}}", format_size(bytes), kSizeWidth);
      std::string auto_choice;
      for (const std::string& algorithm : shown) {
        const PointResult* point = results.find(variant.name, collective, algorithm, bytes);
        row += cells(point);
        if (point == nullptr) continue;
        if (point->status != PointStatus::kOk) notes[std::string(name(point->status))].insert(point->reason);
        if (algorithm == "auto" && point->status == PointStatus::kOk) auto_choice = picked(*point);
      }
      if (has_auto && !auto_choice.empty()) row += "  " + auto_choice;
      out += row + "\n";
    }
    if (!not_applicable.empty()) {
      out += fmt::format("  n/a: {} (not implemented for {})\n", fmt::join(not_applicable, ", "), name(collective));
    }
    for (const auto& [status, reasons] : notes) {
      for (const std::string& reason : reasons) out += fmt::format("  {}: {}\n", status, reason);
    }
  }
  return out;
}

std::string format_variant_comparison(const Scenario& scenario, const ScenarioResults& results) {
  if (scenario.variants.size() < 2) return "";
  const CollectiveSweep& sweep = sweep_of(scenario);
  const std::vector<int64_t> sizes = comparison_sizes(sweep.sizes_bytes);
  const ClusterVariant& base = scenario.variants.front();
  std::string out = fmt::format("\n== variant comparison: busbw of each variant / busbw of {}\n", base.name);
  for (size_t v = 1; v < scenario.variants.size(); ++v) {
    const ClusterVariant& variant = scenario.variants[v];
    out += fmt::format("\n{} vs {}\n", variant.name, base.name);
    std::string header = fmt::format("  {:<16}{:<20}", "collective", "algorithm");
    for (int64_t bytes : sizes) header += fmt::format("{:>10}", format_size(bytes));
    out += header + "\n";
    for (Collective collective : sweep.collectives) {
      for (const std::string& algorithm : sweep.algorithms) {
        if (!algorithm_applies(algorithm, collective)) continue;
        std::string row = fmt::format("  {:<16}{:<20}", name(collective), algorithm);
        for (int64_t bytes : sizes) {
          const PointResult* ours = results.find(variant.name, collective, algorithm, bytes);
          const PointResult* theirs = results.find(base.name, collective, algorithm, bytes);
          if (ours == nullptr || theirs == nullptr || ours->status != PointStatus::kOk ||
              theirs->status != PointStatus::kOk || theirs->busbw_GBps <= 0) {
            row += fmt::format("{:>10}", "n/a");
          } else {
            row += fmt::format("{:>9.2f}x", ours->busbw_GBps / theirs->busbw_GBps);
          }
        }
        out += row + "\n";
      }
    }
  }
  return out;
}

std::string format_expectations(const std::vector<ExpectationOutcome>& outcomes) {
  if (outcomes.empty()) return "";
  std::string out = "\n== expectations\n";
  for (const ExpectationOutcome& outcome : outcomes) {
    out +=
        fmt::format("  {}  {}: {}\n", name(outcome.verdict), describe_expectation(outcome.expectation), outcome.detail);
  }
  return out;
}

std::string format_verdict_line(bool pass, size_t passed, size_t failed, size_t skipped, std::string_view backend,
                                size_t wrong_points) {
  std::vector<std::string> parts;
  if (passed + failed + skipped == 0) {
    parts.push_back("no expectations");
  } else if (failed == 0) {
    parts.push_back(fmt::format("{} of {} expectations hold", passed, passed + skipped));
  } else {
    parts.push_back(fmt::format("{} of {} expectations failed", failed, passed + failed + skipped));
  }
  if (skipped > 0) parts.push_back(fmt::format("{} skipped on {}", skipped, backend));
  if (wrong_points > 0) parts.push_back(fmt::format("{} points returned wrong data", wrong_points));
  return fmt::format("verdict: {} ({})\n", pass ? "PASS" : "FAIL", fmt::join(parts, "; "));
}

std::string format_verdict(const ScenarioResults& results, const std::vector<ExpectationOutcome>& outcomes) {
  size_t passed = 0, failed = 0, skipped = 0;
  for (const ExpectationOutcome& outcome : outcomes) {
    passed += outcome.verdict == ExpectationVerdict::kPass;
    failed += outcome.verdict == ExpectationVerdict::kFail;
    skipped += outcome.verdict == ExpectationVerdict::kSkip;
  }
  const size_t wrong =
      static_cast<size_t>(std::count_if(results.points.begin(), results.points.end(),
                                        [](const PointResult& p) { return p.status == PointStatus::kWrongData; }));
  return format_verdict_line(run_passed(results, outcomes), passed, failed, skipped, name(results.backend), wrong);
}

std::string format_report(const Scenario& scenario, const ScenarioResults& results,
                          const std::vector<ExpectationOutcome>& outcomes, bool quiet) {
  std::string out;
  if (!quiet) {
    const CollectiveSweep& sweep = sweep_of(scenario);
    out += fmt::format("tandem run: {} ({})\n", scenario.name, scenario.file);
    if (!scenario.description.empty()) {
      std::string description = scenario.description;
      while (!description.empty() && description.back() == '\n') description.pop_back();
      out += description + "\n";
    }
    out += fmt::format("backend: {}", name(results.backend));
    if (results.backend == ScenarioBackend::kSim) {
      out += fmt::format(" (network model: {})", name(scenario.network));
      if (scenario.calibration) out += fmt::format("\ncalibration: {}", profile_summary(*scenario.calibration));
    } else {
      out += " (real data on CPU threads, one per rank: times are this machine's, not the cluster's)";
    }
    out += fmt::format("\nworkload: collective sweep, {} {}, {} sizes from {} to {}, algorithms: {}\n",
                       name(sweep.dtype), name(sweep.op), sweep.sizes_bytes.size(),
                       format_size(*std::min_element(sweep.sizes_bytes.begin(), sweep.sizes_bytes.end())),
                       format_size(*std::max_element(sweep.sizes_bytes.begin(), sweep.sizes_bytes.end())),
                       fmt::join(sweep.algorithms, ", "));
    for (const ClusterVariant& variant : scenario.variants) {
      out += '\n';
      out += format_variant_tables(scenario, results, variant);
    }
    out += format_variant_comparison(scenario, results);
  }
  out += format_expectations(outcomes);
  if (!quiet) out += '\n';
  out += format_verdict(results, outcomes);
  return out;
}

std::vector<std::string> results_csv_columns() {
  return {"variant",    "collective", "algorithm",  "algorithm_used", "protocol",
          "size_bytes", "time_us",    "algbw_GBps", "busbw_GBps",     "status"};
}

std::string results_csv(const ScenarioResults& results) {
  std::string out = fmt::format("{}\n", fmt::join(results_csv_columns(), ","));
  for (const PointResult& point : results.points) {
    const bool measured = point.status == PointStatus::kOk || point.status == PointStatus::kWrongData;
    out +=
        fmt::format("{},{},{},{},{},{},", csv_field(point.variant), name(point.collective), csv_field(point.algorithm),
                    csv_field(point.algorithm_used), csv_field(point.protocol), point.size_bytes);
    if (measured) {
      out += fmt::format("{:.9g},{:.9g},{:.9g},", point.time_us, point.algbw_GBps, point.busbw_GBps);
    } else {
      out += ",,,";
    }
    out += fmt::format("{}\n", name(point.status));
  }
  return out;
}

nlohmann::json scenario_json(const Scenario& scenario) {
  const CollectiveSweep& sweep = sweep_of(scenario);
  nlohmann::json variants = nlohmann::json::array();
  for (const ClusterVariant& variant : scenario.variants) {
    variants.push_back({{"name", variant.name}, {"cluster", cluster_json(variant.cluster)}});
  }
  nlohmann::json collectives = nlohmann::json::array();
  for (Collective collective : sweep.collectives) collectives.push_back(std::string(name(collective)));
  nlohmann::json expectations = nlohmann::json::array();
  for (const Expectation& expectation : scenario.expectations_of<Expectation>()) {
    nlohmann::json entry = {
        {"variant", expectation.variant},
        {"collective", std::string(name(expectation.collective))},
        {"algorithm", expectation.algorithm},
        {"size_bytes", expectation.size_bytes},
    };
    if (expectation.backend) entry["backend"] = std::string(name(*expectation.backend));
    if (expectation.time_us.set()) entry["time_us"] = bound_json(expectation.time_us);
    if (expectation.algbw_GBps.set()) entry["algbw_GBps"] = bound_json(expectation.algbw_GBps);
    if (expectation.busbw_GBps.set()) entry["busbw_GBps"] = bound_json(expectation.busbw_GBps);
    expectations.push_back(entry);
  }
  return {
      {"file", scenario.file},
      {"name", scenario.name},
      {"description", scenario.description},
      {"backend", std::string(name(scenario.backend))},
      {"network", std::string(name(scenario.network))},
      {"calibration", scenario.calibration ? profile_summary(*scenario.calibration) : std::string()},
      {"variants", variants},
      {"workload",
       {{"type", "collective-sweep"},
        {"collectives", collectives},
        {"sizes_bytes", sweep.sizes_bytes},
        {"algorithms", sweep.algorithms},
        {"dtype", std::string(name(sweep.dtype))},
        {"op", std::string(name(sweep.op))},
        {"gpus_per_node", sweep.gpus_per_node}}},
      {"outputs", {{"json", scenario.outputs.json}, {"csv", scenario.outputs.csv}}},
      {"expect", expectations},
  };
}

nlohmann::json results_json(const Scenario& scenario, const ScenarioResults& results,
                            const std::vector<ExpectationOutcome>& outcomes) {
  nlohmann::json points = nlohmann::json::array();
  for (const PointResult& point : results.points) {
    nlohmann::json entry = {
        {"variant", point.variant},
        {"collective", std::string(name(point.collective))},
        {"algorithm", point.algorithm},
        {"size_bytes", point.size_bytes},
        {"status", std::string(name(point.status))},
    };
    if (!point.reason.empty()) entry["reason"] = point.reason;
    if (point.status == PointStatus::kOk || point.status == PointStatus::kWrongData) {
      entry["algorithm_used"] = point.algorithm_used;
      entry["protocol"] = point.protocol;
      if (point.channels > 0) entry["channels"] = point.channels;
      entry["time_us"] = point.time_us;
      entry["algbw_GBps"] = point.algbw_GBps;
      entry["busbw_GBps"] = point.busbw_GBps;
    }
    if (point.wrong_elements) entry["wrong_elements"] = *point.wrong_elements;
    points.push_back(entry);
  }
  nlohmann::json expectations = nlohmann::json::array();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Expectation& expectation = outcomes[i].expectation;
    expectations.push_back({
        {"index", i},
        {"variant", expectation.variant},
        {"collective", std::string(name(expectation.collective))},
        {"algorithm", expectation.algorithm},
        {"size_bytes", expectation.size_bytes},
        {"verdict", std::string(name(outcomes[i].verdict))},
        {"detail", outcomes[i].detail},
    });
  }
  return {
      {"tandem_results", kResultsFormatVersion},
      {"tandem_version", version_string()},
      {"backend", std::string(name(results.backend))},
      {"scenario", scenario_json(scenario)},
      {"points", points},
      {"expectations", expectations},
      {"passed", run_passed(results, outcomes)},
  };
}

}  // namespace tandem::app
