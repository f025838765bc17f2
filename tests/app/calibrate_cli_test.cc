// `tandem calibrate` and `--calibration`, end to end through the built binary (TANDEM_BINARY): the
// round trip bench -> log -> calibrate -> profile -> bench, the report of a calibration folder, the
// shipped calibrated scenario, and the errors a user can make.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"

namespace {

using tandem::testing::contains;
using tandem::testing::expect_one_line_error;
using tandem::testing::Outcome;
using tandem::testing::read_text;
using tandem::testing::run_tandem;
using tandem::testing::temp_path;

constexpr const char* kChanged = "scenarios/calibration/round-trip-changed.yaml";
constexpr const char* kCluster = "--cluster dgx-h100 --nodes 2 -g 4";

// A log of `collective` written by the simulator under the hand-written profile.
std::string changed_log(const std::string& collective) {
  const std::string path = temp_path(collective + "_perf.log");
  const Outcome bench = run_tandem(
      fmt::format("bench {} --backend sim {} -b 1K -e 64M -f 2 --calibration {}", collective, kCluster, kChanged));
  EXPECT_EQ(bench.exit_code, 0) << bench.err;
  std::ofstream(path) << bench.out;
  return path;
}

// The out-of-place time (us) of the table row of `bytes`; 0 when there is none.
double time_of_row(const std::string& table, int64_t bytes) {
  for (const std::string& line : tandem::testing::lines_of(table)) {
    const std::vector<std::string> fields = tandem::testing::fields_of(line);
    if (fields.size() == 13 && fields[0] == std::to_string(bytes)) return std::stod(fields[5]);
  }
  return 0;
}

double parameter(const nlohmann::json& results, const std::string& name) {
  for (const nlohmann::json& p : results.at("parameters")) {
    if (p.at("name") == name) return p.at("value").get<double>();
  }
  ADD_FAILURE() << "no parameter " << name;
  return 0;
}

TEST(CalibrateCli, RoundTripRecoversTheChangedProfile) {
  const std::string ar = changed_log("all_reduce");
  const std::string ag = changed_log("all_gather");
  EXPECT_TRUE(contains(read_text(ar), "# Calibration: scenarios/calibration/round-trip-changed.yaml (hand-written"));
  const std::string profile = temp_path("fitted.yaml");
  const std::string dir = temp_path("fit");
  std::filesystem::remove_all(dir);
  const Outcome fit =
      run_tandem(fmt::format("calibrate '{}' '{}' {} -o '{}' --out '{}'", ar, ag, kCluster, profile, dir));
  ASSERT_EQ(fit.exit_code, 0) << fit.err;
  EXPECT_TRUE(contains(fit.out, "not informed by these logs")) << fit.out;
  EXPECT_TRUE(contains(fit.err, "calibrate: iteration 1")) << fit.err;  // progress on stderr
  const nlohmann::json results = nlohmann::json::parse(read_text(dir + "/results.json"));
  EXPECT_NEAR(parameter(results, "network_efficiency"), 0.80, 0.008);
  EXPECT_NEAR(parameter(results, "nvlink_efficiency"), 0.70, 0.007);
  EXPECT_NEAR(parameter(results, "base_latency_scale"), 2.0, 0.02);
  EXPECT_EQ(results.at("rows").size(), 34u);

  // The fitted profile predicts the logs' times again.
  const Outcome again =
      run_tandem(fmt::format("bench all_reduce --backend sim {} -b 64M -e 64M --calibration '{}'", kCluster, profile));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(contains(again.out, fmt::format("# Calibration: {} (fitted ", profile))) << again.out;
  // The 64 MiB row: within 0.5% of the log's (the fit is to 0.01%; the table prints 4 digits).
  const double logged = time_of_row(read_text(ar), 67108864);
  const double predicted = time_of_row(again.out, 67108864);
  EXPECT_GT(logged, 0);
  EXPECT_NEAR(predicted / logged, 1.0, 0.005) << again.out;

  const Outcome report = run_tandem(fmt::format("report '{}'", dir));
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const std::string html = read_text(dir + "/report.html");
  EXPECT_TRUE(contains(html, "<svg id=\"calibration\"")) << html.substr(0, 400);
  EXPECT_TRUE(contains(html, "all_reduce_perf.log:28"));
}

TEST(CalibrateCli, RefusesALogOfAnotherGpuCount) {
  const std::string ar = changed_log("all_reduce");
  expect_one_line_error(run_tandem(fmt::format("calibrate '{}' --cluster dgx-h100 --nodes 2 -q", ar)), 2,
                        "the log ran on 8 GPUs and the cluster given has 16");
}

TEST(CalibrateCli, AMalformedLogIsOneLineWithFileAndLine) {
  const std::string path = temp_path("broken_all_reduce_perf.log");
  std::ofstream(path) << "# nThread 1 nGpus 8 minBytes 8 maxBytes 8\n"
                         "           8             2     float     sum      -1    10.00    0.00\n";
  expect_one_line_error(run_tandem(fmt::format("calibrate '{}' -q", path)), 2,
                        fmt::format("{}:2: a table row needs 13 columns", path));
}

TEST(CalibrateCli, ProfilesAreCheckedWhereTheyAreApplied) {
  expect_one_line_error(
      run_tandem(fmt::format("bench all_reduce --backend sim --cluster hgx-a100 --calibration {}", kChanged)), 2,
      "fitted on dgx-h100 and this cluster is hgx-a100");
  expect_one_line_error(run_tandem(fmt::format("bench all_reduce --calibration {}", kChanged)), 2,
                        "--calibration applies to --backend sim only");
  const std::string bad = temp_path("bad_profile.yaml");
  std::ofstream(bad) << "tandem-calibration: 1\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 8}\n"
                        "parameters: {network_efficiency: 1.2}\n";
  expect_one_line_error(run_tandem(fmt::format("bench all_reduce --backend sim --calibration '{}'", bad)), 2,
                        fmt::format("{}:3:34: parameters.network_efficiency", bad));
}

TEST(CalibrateCli, TheShippedCalibratedScenarioRunsAndNamesItsProfile) {
  const Outcome run = run_tandem("run scenarios/what-if-64xh100-calibrated.yaml");
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_TRUE(contains(run.out, "calibration: scenarios/calibration/dgx-h100-published.yaml (fitted ")) << run.out;
  // A scenario whose variant is another preset than the profile's is refused at load.
  const std::string dir = temp_path("scenario_dir");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kChanged, dir + "/profile.yaml", std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir + "/a100.yaml") << "tandem_scenario: 1\nname: a100\ncluster: {preset: hgx-a100}\n"
                                       "calibration: profile.yaml\n"
                                       "workload: {type: collective-sweep, collectives: [all_reduce], "
                                       "sizes: {min: 1M, max: 1M}, algorithms: [ring]}\n";
  expect_one_line_error(run_tandem(fmt::format("run '{}/a100.yaml'", dir)), 2, "fitted on dgx-h100");
}

TEST(CalibrateCli, TheJobCountMustBePositive) {
  const std::string ar = changed_log("all_reduce");
  for (const char* jobs : {"-3", "0"}) {
    const Outcome outcome = run_tandem(fmt::format("calibrate '{}' {} -q -j {}", ar, kCluster, jobs));
    tandem::testing::expect_usage_error(outcome, "--jobs");
  }
}

// tandem bench's own table says the algorithm it ran ("# Backend: sim ..., algorithm: ring"): the
// defaults that wrote it predict it again, row by row (to the table's 4 digits).
TEST(CalibrateCli, TandemBenchsAlgorithmIsTheOneRefitted) {
  const std::string path = temp_path("ring_all_reduce_perf.log");
  const Outcome bench =
      run_tandem("bench all_reduce --backend sim --cluster dgx-h100 --nodes 2 --algo ring -b 1K -e 64M -f 2");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  std::ofstream(path) << bench.out;
  const std::string dir = temp_path("ring_fit");
  std::filesystem::remove_all(dir);
  const Outcome fit = run_tandem(fmt::format("calibrate '{}' --cluster dgx-h100 --nodes 2 -q --out '{}'", path, dir));
  ASSERT_EQ(fit.exit_code, 0) << fit.err;
  const nlohmann::json results = nlohmann::json::parse(read_text(dir + "/results.json"));
  EXPECT_LT(results.at("rms_log_error_before").get<double>(), 0.005) << fit.out;
  for (const nlohmann::json& row : results.at("rows")) {
    EXPECT_EQ(row.at("ran").get<std::string>().rfind("ring/", 0), 0u) << row;
  }
  EXPECT_FALSE(contains(fit.out, "names no algorithm")) << fit.out;
}

// Everything tandem writes, tandem reads: a profile fitted from a log whose path holds quotes and
// backslashes applies.
TEST(CalibrateCli, AProfileOfALogWithAnOddPathReadsBack) {
  const std::string dir = temp_path("odd\"dir\\x");
  std::filesystem::create_directories(dir);
  const std::string log = dir + "/a\\\"b: #c.log";
  std::filesystem::copy_file(changed_log("all_reduce"), log, std::filesystem::copy_options::overwrite_existing);
  const std::string profile = temp_path("odd_profile.yaml");
  // The shell sees the path in single quotes: every character but ' as it is.
  const Outcome fit =
      run_tandem(fmt::format("calibrate '{}' {} -q -o '{}' --collective all_reduce", log, kCluster, profile));
  ASSERT_EQ(fit.exit_code, 0) << fit.err;
  const Outcome again =
      run_tandem(fmt::format("bench all_reduce --backend sim {} -b 1M -e 1M --calibration '{}'", kCluster, profile));
  EXPECT_EQ(again.exit_code, 0) << again.err << read_text(profile);
}

// The logs operators posted (../shared/reference/nccl-tests-logs): read as they are, what was cut
// listed, what was assumed said.
TEST(CalibrateCli, ReadsAPostedLog) {
  const std::string aws = "../shared/reference/nccl-tests-logs/aws_p5_eks_2node_all_reduce_excerpt.txt";
  if (!std::filesystem::exists(aws)) GTEST_SKIP() << aws << " is not here";
  const Outcome fit =
      run_tandem(fmt::format("calibrate {} --cluster dgx-h100 --nodes 2 --collective all_reduce -q", aws));
  ASSERT_EQ(fit.exit_code, 0) << fit.err;
  EXPECT_TRUE(contains(fit.out, "# skipped " + aws + ":5: '...' (rows cut from the log where it was posted)"))
      << fit.out;
  EXPECT_TRUE(contains(fit.out, "# skipped " + aws + ":4: 0 B moves nothing")) << fit.out;
  EXPECT_TRUE(contains(fit.out, "does not say how many GPUs ran it")) << fit.out;
  EXPECT_TRUE(contains(fit.out, "on 6 rows (6 fitted, 0 held out)")) << fit.out;
  const std::string coreweave = "../shared/reference/nccl-tests-logs/coreweave_gb200_nvl72_all_reduce.txt";
  expect_one_line_error(
      run_tandem(fmt::format("calibrate {} --cluster dgx-h100 --nodes 2 --collective all_reduce -q", coreweave)), 2,
      "names rank 71 and the cluster given has 16 GPUs");
}

}  // namespace
