// The runner's pieces that need no simulator (the sweep request, sim results to points, the
// expectations) and the writers (report, CSV, JSON), on synthetic results.
#include "app/scenario/scenario_report.h"

#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "app/scenario/scenario.h"
#include "app/scenario/scenario_run.h"
#include "core/error.h"

namespace tandem::app {
namespace {

// Two variants, two collectives, three algorithms (tree is n/a for all_gather), two sizes.
constexpr const char* kScenario = R"(tandem_scenario: 1
name: report-test
description: a test
cluster: {preset: dgx-h100, nodes: 2}
variants:
  - {name: fast, cluster: {nic_gbps: 800}}
workload:
  type: collective-sweep
  collectives: [all_reduce, all_gather]
  sizes: [1K, 1G]
  algorithms: [ring, tree, auto]
expect:
  - {collective: all_reduce, algorithm: ring, size: 1G, busbw_GBps: {min: 40, max: 50}}
  - {variant: fast, collective: all_reduce, algorithm: ring, size: 1G, busbw_GBps: {min: 90}}
  - {collective: all_reduce, algorithm: auto, size: 1K, time_us: {max: 10}, backend: host}
  - {collective: all_gather, algorithm: auto, size: 1G, time_us: {max: 1e6}}
)";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// busbw per point: 45 GB/s on base, 2x on "fast" for sizes of 1 GiB; all_gather auto at 1 GiB did
// not run on "base" (a simulator error).
ScenarioResults synthetic_results(const Scenario& scenario) {
  ScenarioResults results;
  results.backend = ScenarioBackend::kSim;
  for (const ClusterVariant& variant : scenario.variants) {
    std::vector<sim::SweepPointResult> sim_results;
    const sim::SweepRequest request = make_sweep_request(scenario, variant);
    for (const sim::SweepPoint& point : request.points) {
      sim::SweepPointResult result;
      result.point = point;
      result.ok = true;
      result.algorithm = point.algorithm.value_or(Algorithm::kRing);
      result.protocol = models::NcclProtocol::kSimple;
      const double factor = variant.name == "fast" && point.bytes > (1 << 20) ? 2.0 : 1.0;
      result.busbw_GBps = 45 * factor;
      result.algbw_GBps = 30 * factor;
      result.seconds = double(point.bytes) / (result.algbw_GBps * 1e9);
      if (variant.name == "base" && point.collective == Collective::kAllGather && !point.algorithm &&
          point.bytes == (int64_t{1} << 30)) {
        result = {};
        result.point = point;
        result.error = "no route";
      }
      sim_results.push_back(result);
    }
    std::vector<PointResult> points = collect_sim_results(scenario, variant, sim_results);
    results.points.insert(results.points.end(), points.begin(), points.end());
  }
  return results;
}

TEST(ScenarioRun, SweepRequestLeavesOutNotApplicablePairs) {
  const Scenario scenario = parse_scenario(kScenario, "r.yaml");
  const sim::SweepRequest request = make_sweep_request(scenario, scenario.variants[1]);
  EXPECT_DOUBLE_EQ(request.cluster.nic_Bps, 100e9);
  EXPECT_EQ(request.gpus_per_node, 0);
  // all_reduce: ring, tree, auto x 2 sizes; all_gather: ring, auto x 2 sizes (tree is n/a).
  ASSERT_EQ(request.points.size(), 10u);
  for (const sim::SweepPoint& point : request.points) {
    EXPECT_FALSE(point.collective == Collective::kAllGather && point.algorithm == Algorithm::kTree);
    EXPECT_EQ(point.dtype, DataType::kBF16);
    EXPECT_EQ(point.op, ReduceOp::kSum);
  }
  EXPECT_EQ(request.points.front().collective, Collective::kAllReduce);
  EXPECT_EQ(request.points.front().algorithm, Algorithm::kRing);
  EXPECT_EQ(request.points.front().bytes, 1024);
  EXPECT_EQ(sweep_ranks(scenario.variants[0], std::get<CollectiveSweep>(scenario.workload)), 16);
}

TEST(ScenarioRun, SimResultsBecomePoints) {
  const Scenario scenario = parse_scenario(kScenario, "r.yaml");
  const ScenarioResults results = synthetic_results(scenario);
  ASSERT_EQ(results.points.size(), 2u * 2 * 3 * 2);  // variants x collectives x algorithms x sizes

  const PointResult* tree = results.find("base", Collective::kAllGather, "tree", 1024);
  ASSERT_NE(tree, nullptr);
  EXPECT_EQ(tree->status, PointStatus::kNotApplicable);
  EXPECT_EQ(tree->reason, "tree does not implement all_gather");

  const PointResult* failed = results.find("base", Collective::kAllGather, "auto", int64_t{1} << 30);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->status, PointStatus::kNotApplicable);
  EXPECT_EQ(failed->reason, "no route");

  const PointResult* ring = results.find("fast", Collective::kAllReduce, "ring", int64_t{1} << 30);
  ASSERT_NE(ring, nullptr);
  EXPECT_EQ(ring->status, PointStatus::kOk);
  EXPECT_EQ(ring->algorithm_used, "ring");
  EXPECT_EQ(ring->protocol, "Simple");
  EXPECT_DOUBLE_EQ(ring->busbw_GBps, 90);
  EXPECT_NEAR(ring->time_us, double(int64_t{1} << 30) / 60e9 * 1e6, 1e-6);

  EXPECT_EQ(results.find("base", Collective::kAllToAll, "ring", 1024), nullptr);

  // A simulator that answers too few or too many points is an error, not a silent gap.
  std::vector<sim::SweepPointResult> short_answer(3);
  EXPECT_THROW(collect_sim_results(scenario, scenario.variants[0], short_answer), Error);
  std::vector<sim::SweepPointResult> long_answer(11);
  EXPECT_THROW(collect_sim_results(scenario, scenario.variants[0], long_answer), Error);
}

TEST(ScenarioRun, Expectations) {
  const Scenario scenario = parse_scenario(kScenario, "r.yaml");
  ScenarioResults results = synthetic_results(scenario);
  std::vector<ExpectationOutcome> outcomes = evaluate_expectations(scenario, results);
  ASSERT_EQ(outcomes.size(), 4u);
  EXPECT_EQ(outcomes[0].verdict, ExpectationVerdict::kPass);
  EXPECT_EQ(outcomes[0].detail, "busbw 45 GB/s in [40, 50]");
  EXPECT_EQ(outcomes[1].verdict, ExpectationVerdict::kPass);
  EXPECT_EQ(outcomes[1].detail, "busbw 90 GB/s >= 90");
  EXPECT_EQ(outcomes[2].verdict, ExpectationVerdict::kSkip);
  EXPECT_EQ(outcomes[2].detail, "checked on the host backend only");
  EXPECT_EQ(outcomes[3].verdict, ExpectationVerdict::kFail);
  EXPECT_EQ(outcomes[3].detail, "the point is n/a: no route");
  EXPECT_FALSE(run_passed(results, outcomes));
  EXPECT_EQ(format_verdict(results, outcomes), "verdict: FAIL (1 of 4 expectations failed; 1 skipped on sim)\n");

  // Bounds that do not hold, each side.
  Scenario tight = scenario;
  auto expectation = [&](size_t i) -> Expectation& { return std::get<Expectation>(tight.expectations[i]); };
  tight.expectations.resize(2);
  expectation(0).busbw_GBps = {std::nullopt, 44.0};
  expectation(1).busbw_GBps = {100.0, std::nullopt};
  outcomes = evaluate_expectations(tight, results);
  EXPECT_EQ(outcomes[0].verdict, ExpectationVerdict::kFail);
  EXPECT_EQ(outcomes[0].detail, "busbw 45 GB/s is above the maximum 44");
  EXPECT_EQ(outcomes[1].verdict, ExpectationVerdict::kFail);
  EXPECT_EQ(outcomes[1].detail, "busbw 90 GB/s is below the minimum 100");

  // Several bounds on one point: all must hold.
  tight.expectations.resize(1);
  expectation(0).busbw_GBps = {40.0, std::nullopt};
  expectation(0).algbw_GBps = {std::nullopt, 31.0};
  expectation(0).time_us = {std::nullopt, 1.0};
  outcomes = evaluate_expectations(tight, results);
  EXPECT_EQ(outcomes[0].verdict, ExpectationVerdict::kFail);
  EXPECT_TRUE(contains(outcomes[0].detail, "time 3.579e+04 us is above the maximum 1")) << outcomes[0].detail;
  EXPECT_TRUE(contains(outcomes[0].detail, "algbw 30 GB/s <= 31")) << outcomes[0].detail;

  // Only the passing expectations: the run passes.
  Scenario passing = scenario;
  passing.expectations.resize(3);
  outcomes = evaluate_expectations(passing, results);
  EXPECT_TRUE(run_passed(results, outcomes));
  EXPECT_EQ(format_verdict(results, outcomes), "verdict: PASS (2 of 3 expectations hold; 1 skipped on sim)\n");

  // Wrong data fails the run whatever the expectations say.
  results.points[0].status = PointStatus::kWrongData;
  results.points[0].reason = "3 wrong elements";
  EXPECT_FALSE(run_passed(results, outcomes));
  EXPECT_EQ(format_verdict(results, outcomes),
            "verdict: FAIL (2 of 3 expectations hold; 1 skipped on sim; 1 points returned wrong data)\n");

  // Points skipped on a backend skip their expectations instead of failing them.
  ScenarioResults host = synthetic_results(scenario);
  host.backend = ScenarioBackend::kHost;
  for (PointResult& point : host.points) {
    if (point.size_bytes == int64_t{1} << 30) {
      point.status = PointStatus::kSkipped;
      point.reason = "host limit: 64 MiB per rank";
    }
  }
  outcomes = evaluate_expectations(scenario, host);
  EXPECT_EQ(outcomes[0].verdict, ExpectationVerdict::kSkip);
  EXPECT_EQ(outcomes[0].detail, "not run on host: host limit: 64 MiB per rank");
  EXPECT_EQ(outcomes[2].verdict, ExpectationVerdict::kPass);  // the host-only expectation
  EXPECT_TRUE(run_passed(host, outcomes));
  EXPECT_EQ(format_verdict(host, outcomes), "verdict: PASS (1 of 4 expectations hold; 3 skipped on host)\n");
}

TEST(ScenarioReport, Tables) {
  const Scenario scenario = parse_scenario(kScenario, "r.yaml");
  const ScenarioResults results = synthetic_results(scenario);
  const std::string base = format_variant_tables(scenario, results, scenario.variants[0]);
  EXPECT_TRUE(contains(base, "== base: dgx-h100: 2 nodes x 8 H100-SXM (16 GPUs)")) << base;
  EXPECT_TRUE(contains(base, "all_reduce (bf16, 16 ranks; time in us, busbw in GB/s, busbw = algbw x 2(n-1)/n)"))
      << base;
  EXPECT_TRUE(contains(base, "all_gather (bf16, 16 ranks; time in us, busbw in GB/s, busbw = algbw x (n-1)/n)"))
      << base;
  EXPECT_TRUE(contains(base, "  n/a: tree (not implemented for all_gather)")) << base;
  EXPECT_TRUE(contains(base, "  n/a: no route")) << base;
  EXPECT_TRUE(contains(base, "auto picked")) << base;

  // The all_gather table: header lines, then one row per size; the 1 GiB row has auto n/a.
  const std::vector<std::string> lines = lines_of(base);
  size_t title = 0;
  while (title < lines.size() && lines[title].rfind("all_gather", 0) != 0) ++title;
  ASSERT_LT(title + 4, lines.size()) << base;
  EXPECT_EQ(lines[title + 1], "                    ring                 auto");
  EXPECT_EQ(lines[title + 2], "      size        time    busbw        time    busbw  auto picked");
  EXPECT_EQ(lines[title + 3], "     1 KiB        0.03    45.00        0.03    45.00  ring/Simple");
  EXPECT_EQ(lines[title + 4], "     1 GiB       35791    45.00         n/a      n/a");
}

TEST(ScenarioReport, VariantComparisonAndWholeReport) {
  const Scenario scenario = parse_scenario(kScenario, "r.yaml");
  const ScenarioResults results = synthetic_results(scenario);
  const std::string comparison = format_variant_comparison(scenario, results);
  EXPECT_TRUE(contains(comparison, "== variant comparison: busbw of each variant / busbw of base")) << comparison;
  EXPECT_TRUE(contains(comparison, "fast vs base")) << comparison;
  EXPECT_TRUE(contains(comparison, "  collective      algorithm                1 KiB     1 GiB\n")) << comparison;
  EXPECT_TRUE(contains(comparison, "  all_reduce      ring                     1.00x     2.00x\n")) << comparison;
  EXPECT_TRUE(contains(comparison, "  all_gather      auto                     1.00x       n/a\n")) << comparison;
  EXPECT_FALSE(contains(comparison, "all_gather      tree")) << comparison;

  const std::vector<ExpectationOutcome> outcomes = evaluate_expectations(scenario, results);
  const std::string report = format_report(scenario, results, outcomes, false);
  EXPECT_EQ(report.rfind("tandem run: report-test (r.yaml)\na test\nbackend: sim (network model: fluid)\n", 0), 0u)
      << report;
  EXPECT_TRUE(contains(report,
                       "workload: collective sweep, bf16 sum, 2 sizes from 1 KiB to 1 GiB, algorithms: ring, "
                       "tree, auto\n"));
  EXPECT_TRUE(contains(report, "== base: "));
  EXPECT_TRUE(contains(report, "== fast: "));
  EXPECT_TRUE(contains(report, "\n== expectations\n  PASS  base all_reduce ring 1 GiB: busbw 45 GB/s in [40, 50]\n"))
      << report;
  EXPECT_TRUE(contains(report, "  SKIP  base all_reduce auto 1 KiB: checked on the host backend only\n"));
  EXPECT_TRUE(contains(report, "  FAIL  base all_gather auto 1 GiB: the point is n/a: no route\n"));
  EXPECT_EQ(lines_of(report).back(), "verdict: FAIL (1 of 4 expectations failed; 1 skipped on sim)");

  const std::string quiet = format_report(scenario, results, outcomes, true);
  EXPECT_EQ(quiet.rfind("\n== expectations\n", 0), 0u) << quiet;
  EXPECT_FALSE(contains(quiet, "== base"));
  EXPECT_EQ(lines_of(quiet).back(), "verdict: FAIL (1 of 4 expectations failed; 1 skipped on sim)");

  // One variant: no comparison section.
  Scenario single = scenario;
  single.variants.resize(1);
  EXPECT_EQ(format_variant_comparison(single, results), "");
}

TEST(ScenarioReport, Csv) {
  const Scenario scenario = parse_scenario(kScenario, "r.yaml");
  const ScenarioResults results = synthetic_results(scenario);
  const std::vector<std::string> lines = lines_of(results_csv(results));
  ASSERT_EQ(lines.size(), 1 + results.points.size());
  EXPECT_EQ(lines[0],
            "variant,collective,algorithm,algorithm_used,protocol,size_bytes,time_us,algbw_GBps,busbw_GBps,"
            "status");
  EXPECT_EQ(lines[1], "base,all_reduce,ring,ring,Simple,1024,0.0341333333,30,45,ok");
  // all_gather tree is n/a: no numbers.
  bool found = false;
  for (const std::string& line : lines) {
    if (line == "base,all_gather,tree,,,1024,,,,n/a") found = true;
  }
  EXPECT_TRUE(found);
  for (const std::string& line : lines) EXPECT_EQ(std::count(line.begin(), line.end(), ','), 9) << line;
}

TEST(ScenarioReport, JsonReadsBack) {
  const Scenario scenario = parse_scenario(kScenario, "r.yaml");
  const ScenarioResults results = synthetic_results(scenario);
  const std::vector<ExpectationOutcome> outcomes = evaluate_expectations(scenario, results);
  const nlohmann::json json = nlohmann::json::parse(results_json(scenario, results, outcomes).dump(2));

  EXPECT_EQ(json.at("tandem_results"), kResultsFormatVersion);
  EXPECT_EQ(json.at("backend"), "sim");
  EXPECT_EQ(json.at("passed"), false);

  const nlohmann::json& sc = json.at("scenario");
  EXPECT_EQ(sc.at("name"), "report-test");
  EXPECT_EQ(sc.at("file"), "r.yaml");
  EXPECT_EQ(sc.at("network"), "fluid");
  ASSERT_EQ(sc.at("variants").size(), 2u);
  EXPECT_EQ(sc.at("variants")[1].at("name"), "fast");
  EXPECT_EQ(sc.at("variants")[1].at("cluster").at("nic_gbps"), 800.0);
  EXPECT_EQ(sc.at("variants")[0].at("cluster").at("nodes"), 2);
  EXPECT_EQ(sc.at("workload").at("type"), "collective-sweep");
  EXPECT_EQ(sc.at("workload").at("sizes_bytes"), (std::vector<int64_t>{1024, int64_t{1} << 30}));
  EXPECT_EQ(sc.at("workload").at("algorithms"), (std::vector<std::string>{"ring", "tree", "auto"}));
  ASSERT_EQ(sc.at("expect").size(), 4u);
  EXPECT_EQ(sc.at("expect")[0].at("busbw_GBps").at("min"), 40.0);
  EXPECT_EQ(sc.at("expect")[2].at("backend"), "host");

  const nlohmann::json& points = json.at("points");
  ASSERT_EQ(points.size(), results.points.size());
  EXPECT_EQ(points[0].at("variant"), "base");
  EXPECT_EQ(points[0].at("collective"), "all_reduce");
  EXPECT_EQ(points[0].at("algorithm"), "ring");
  EXPECT_EQ(points[0].at("algorithm_used"), "ring");
  EXPECT_EQ(points[0].at("protocol"), "Simple");
  EXPECT_EQ(points[0].at("size_bytes"), 1024);
  EXPECT_EQ(points[0].at("status"), "ok");
  EXPECT_DOUBLE_EQ(points[0].at("busbw_GBps").get<double>(), 45.0);
  EXPECT_DOUBLE_EQ(points[0].at("time_us").get<double>(), results.points[0].time_us);
  for (const nlohmann::json& point : points) {
    if (point.at("status") != "ok") {
      EXPECT_TRUE(point.contains("reason"));
      EXPECT_FALSE(point.contains("busbw_GBps"));
    }
  }

  const nlohmann::json& expectations = json.at("expectations");
  ASSERT_EQ(expectations.size(), 4u);
  EXPECT_EQ(expectations[0].at("verdict"), "PASS");
  EXPECT_EQ(expectations[0].at("size_bytes"), int64_t{1} << 30);
  EXPECT_EQ(expectations[2].at("verdict"), "SKIP");
  EXPECT_EQ(expectations[3].at("verdict"), "FAIL");
  EXPECT_EQ(expectations[3].at("detail"), "the point is n/a: no route");
}

}  // namespace
}  // namespace tandem::app
