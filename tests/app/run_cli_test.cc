// `tandem run`, end to end: runs the built binary (TANDEM_BINARY) on the shipped scenarios and on
// small broken ones, and checks stdout, stderr, the exit code and the files --out writes. The
// shipped scenarios' expectations are checked here, so CI fails when they stop holding.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"

namespace {

using tandem::testing::contains;
using tandem::testing::expect_one_line_error;
using tandem::testing::lines_of;
using tandem::testing::Outcome;
using tandem::testing::read_text;
using tandem::testing::run_tandem;
using tandem::testing::temp_path;

std::string write_scenario(const std::string& name, const std::string& yaml) {
  const std::string path = temp_path(name);
  std::ofstream(path) << yaml;
  return path;
}

TEST(RunCli, Help) {
  const Outcome help = run_tandem("run --help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag : {"--backend", "--out", "--quiet", "scenario"}) EXPECT_TRUE(contains(help.out, flag)) << flag;
  EXPECT_TRUE(contains(run_tandem("--help").out, "run"));
}

TEST(RunCli, SmokeScenarioOnTheSimulator) {
  const std::string dir = temp_path("smoke_out");
  std::filesystem::remove_all(dir);
  const Outcome outcome = run_tandem("run scenarios/smoke-8xh100.yaml --out " + dir);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  EXPECT_EQ(outcome.err, "");  // no progress line: stderr is not a terminal
  EXPECT_EQ(outcome.out.rfind("tandem run: smoke-8xh100 (scenarios/smoke-8xh100.yaml)\n", 0), 0u) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "backend: sim (network model: fluid)"));
  EXPECT_TRUE(contains(outcome.out, "== base: dgx-h100: 1 nodes x 8 H100-SXM") ||
              contains(outcome.out, "== base: dgx-h100: 1 node x 8 H100-SXM"))
      << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "all_reduce (bf16, 8 ranks;"));
  EXPECT_TRUE(contains(outcome.out, "n/a: tree, nvls (not implemented for all_gather)")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "\n== expectations\n  PASS  ")) << outcome.out;
  EXPECT_FALSE(contains(outcome.out, "FAIL"));
  EXPECT_EQ(lines_of(outcome.out).back(), "verdict: PASS (3 of 3 expectations hold)");

  // results.csv: a header and one row per point (2 collectives x 4 algorithms x 5 sizes).
  const std::vector<std::string> csv = lines_of(read_text(dir + "/results.csv"));
  ASSERT_EQ(csv.size(), 1u + 2 * 4 * 5);
  EXPECT_EQ(csv[0],
            "variant,collective,algorithm,algorithm_used,protocol,size_bytes,time_us,algbw_GBps,busbw_GBps,"
            "status");
  EXPECT_EQ(csv[1].rfind("base,all_reduce,ring,ring,", 0), 0u) << csv[1];

  // results.json: the scenario, every point, the expectations.
  const nlohmann::json json = nlohmann::json::parse(read_text(dir + "/results.json"));
  EXPECT_EQ(json.at("tandem_results"), 1);
  EXPECT_EQ(json.at("passed"), true);
  EXPECT_EQ(json.at("scenario").at("name"), "smoke-8xh100");
  EXPECT_EQ(json.at("points").size(), 40u);
  ASSERT_EQ(json.at("expectations").size(), 3u);
  for (const nlohmann::json& expectation : json.at("expectations")) EXPECT_EQ(expectation.at("verdict"), "PASS");
  for (const nlohmann::json& point : json.at("points")) {
    if (point.at("status") == "ok") {
      EXPECT_GT(point.at("time_us").get<double>(), 0) << point.dump();
      EXPECT_GT(point.at("busbw_GBps").get<double>(), 0) << point.dump();
    }
  }
  std::filesystem::remove_all(dir);
}

// `tandem run` takes a scenario's cluster keys as flags: 16 nodes of 800G without editing the file.
TEST(RunCli, ClusterFlagsReplaceTheScenariosCluster) {
  const Outcome outcome = run_tandem("run scenarios/smoke-8xh100.yaml --nodes 2 --nic-gbps 800 --quiet");
  EXPECT_TRUE(contains(outcome.out, "cluster overrides (every variant): --nodes 2 --nic-gbps 800")) << outcome.out;
  const Outcome report = run_tandem("run scenarios/smoke-8xh100.yaml --nodes 2 --nic-gbps 800");
  EXPECT_TRUE(contains(report.out, "2 nodes x 8 H100-SXM (16 GPUs)")) << report.out;
  EXPECT_TRUE(contains(report.out, "8x 800 Gb/s NICs per node")) << report.out;
  // A bad value names its flag and the range, before anything runs.
  expect_one_line_error(run_tandem("run scenarios/smoke-8xh100.yaml --nodes 0"), 2,
                        "--nodes must be an integer from 1 to 16384 (got '0')");
}

TEST(RunCli, HostBackend) {
  // Small sizes: the host backend moves real data with a thread per rank.
  const std::string path = write_scenario("host.yaml", R"(tandem_scenario: 1
name: host-check
cluster: {preset: dgx-h100, nodes: 2, gpus_per_node: 2, nics_per_node: 2}
backend: host
workload:
  type: collective-sweep
  collectives: [all_reduce, all_gather]
  sizes: [4K, 1M, 64M]
  algorithms: [ring, tree, nvls, auto]
  dtype: f32
expect:
  - {collective: all_reduce, algorithm: ring, size: 1M, time_us: {min: 0}}
  - {collective: all_reduce, algorithm: ring, size: 64M, time_us: {min: 0}}
  - {collective: all_reduce, algorithm: ring, size: 1M, busbw_GBps: {min: 1e9}, backend: sim}
)");
  const std::string dir = temp_path("host_out");
  std::filesystem::remove_all(dir);
  const Outcome outcome = run_tandem(fmt::format("run '{}' --out '{}'", path, dir));
  ASSERT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  EXPECT_TRUE(contains(outcome.out, "backend: host (real data")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "all_reduce (f32, 4 ranks;")) << outcome.out;
  // 64 MiB all_reduce needs 128 MiB per rank; nvls is simulator-only.
  EXPECT_TRUE(contains(outcome.out, "skipped: host limit: 64 MiB per rank")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "skipped: nvls is an in-switch reduction: simulator only")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "  PASS  base all_reduce ring 1 MiB: time ")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "  SKIP  base all_reduce ring 64 MiB: not run on host: host limit")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "  SKIP  base all_reduce ring 1 MiB: checked on the sim backend only"))
      << outcome.out;
  EXPECT_EQ(lines_of(outcome.out).back(), "verdict: PASS (1 of 3 expectations hold; 2 skipped on host)");

  // Every point that ran was checked and had no wrong element.
  const nlohmann::json json = nlohmann::json::parse(read_text(dir + "/results.json"));
  EXPECT_EQ(json.at("backend"), "host");
  int checked = 0;
  for (const nlohmann::json& point : json.at("points")) {
    if (point.at("status") != "ok") continue;
    EXPECT_EQ(point.at("wrong_elements"), 0) << point.dump();
    EXPECT_EQ(point.at("protocol"), "") << point.dump();
    if (point.at("algorithm") == "auto") {
      EXPECT_NE(point.at("algorithm_used"), "auto") << point.dump();
    }
    ++checked;
  }
  // all_reduce: ring, tree, auto at 4K and 1M; all_gather: ring, auto at 4K and 1M (at 64M each
  // rank needs 16 MiB in + 64 MiB out, above the limit too).
  EXPECT_EQ(checked, 3 * 2 + 2 * 2);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(path);
}

TEST(RunCli, QuietPrintsExpectationsAndVerdict) {
  const Outcome outcome = run_tandem("run scenarios/smoke-8xh100.yaml --quiet");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  const std::vector<std::string> lines = lines_of(outcome.out);
  ASSERT_EQ(lines.size(), 6u) << outcome.out;  // blank, "== expectations", 3 outcomes, verdict
  EXPECT_EQ(lines[1], "== expectations");
  EXPECT_EQ(lines.back(), "verdict: PASS (3 of 3 expectations hold)");
}

// A training scenario none of whose layouts can run answers nothing: that is a failure, not a pass
// with "no expectations".
TEST(RunCli, ATrainingScenarioWhereNoLayoutRunsFails) {
  const std::string path = write_scenario("nothing-runs.yaml", R"(tandem_scenario: 1
name: nothing-runs
cluster: {preset: dgx-h100, nodes: 1}
workload:
  type: training
  model: llama3-70b
  seq_len: 8192
  global_batch: 8
  layouts:
    - {name: ddp, sharding: none}
    - {name: tp3, tp: 3}
)");
  const Outcome outcome = run_tandem(fmt::format("run '{}'", path));
  EXPECT_EQ(outcome.exit_code, 1) << outcome.out << outcome.err;
  EXPECT_TRUE(contains(outcome.out, "no layout ran on any cluster")) << outcome.out;
  EXPECT_EQ(lines_of(outcome.out).back(), "verdict: FAIL (no expectations)");
  std::filesystem::remove(path);
}

TEST(RunCli, FailedExpectationExitsOne) {
  const std::string path = write_scenario("impossible.yaml", R"(tandem_scenario: 1
name: impossible
cluster: {preset: dgx-h100, nodes: 1}
workload: {type: collective-sweep, collectives: [all_reduce], sizes: [1M], algorithms: [ring]}
outputs: {json: true, csv: false}
expect:
  - {collective: all_reduce, algorithm: ring, size: 1M, busbw_GBps: {min: 100000}}
)");
  const std::string dir = temp_path("impossible_out");
  std::filesystem::remove_all(dir);
  const Outcome outcome = run_tandem(fmt::format("run '{}' --out '{}'", path, dir));
  EXPECT_EQ(outcome.exit_code, 1) << outcome.out << outcome.err;
  EXPECT_TRUE(contains(outcome.out, "  FAIL  base all_reduce ring 1 MiB: busbw ")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "is below the minimum 100000")) << outcome.out;
  EXPECT_EQ(lines_of(outcome.out).back(), "verdict: FAIL (1 of 1 expectations failed)");
  // outputs: csv false writes only results.json.
  EXPECT_TRUE(std::filesystem::exists(dir + "/results.json"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/results.csv"));
  EXPECT_EQ(nlohmann::json::parse(read_text(dir + "/results.json")).at("passed"), false);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(path);
}

TEST(RunCli, BadScenarioIsOneLineWithFileLineColumn) {
  const std::string path = write_scenario("typo.yaml", R"(tandem_scenario: 1
name: typo
cluster: {preset: dgx-h100}
workload:
  type: collective-sweep
  colectives: [all_reduce]
)");
  expect_one_line_error(run_tandem(fmt::format("run '{}'", path)), 2,
                        path +
                            ":6:3: unknown key 'colectives' in workload (did you mean 'collectives'?) (expected: type, collectives, sizes, "
                            "algorithms, dtype, op, gpus_per_node)");
  std::filesystem::remove(path);
}

// A 64-GPU Llama-3 70B hang rehearsed in a training step: dumps per TP, PP and DP group, in
// PyTorch's format, and both fr analyze and replay name the rank that stopped.
TEST(RunCli, TheLlama70bHangIsRehearsedAndItsCulpritFound) {
  const std::string out = temp_path("run_cli_hang70b");
  std::filesystem::remove_all(out);
  const Outcome run = run_tandem(fmt::format("run scenarios/faults/llama3-70b-hang-64xh100.yaml --out '{}'", out));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_TRUE(contains(run.out, "rehearsal, tp8-pp4: rank_hang rank 13 at its tp collective 40")) << run.out;
  EXPECT_TRUE(contains(run.out, "ranks 0-12, 14-63 wait in collectives that cannot complete")) << run.out;
  EXPECT_TRUE(contains(run.out, "culprit: rank 13")) << run.out;
  const nlohmann::json results = nlohmann::json::parse(read_text(out + "/results.json"));
  const nlohmann::json& rehearsal = results.at("variants")[0].at("layouts")[0].at("rehearsal");
  EXPECT_EQ(rehearsal.at("culprit_ranks"), nlohmann::json::array({13}));
  EXPECT_EQ(rehearsal.at("dumps"), 64);

  const Outcome analyze = run_tandem(fmt::format("fr analyze '{}/fr' --json", out));
  EXPECT_EQ(analyze.exit_code, 1) << analyze.err;
  const nlohmann::json fr = nlohmann::json::parse(analyze.out);
  EXPECT_EQ(fr.at("culprit_ranks"), nlohmann::json::array({13}));
  EXPECT_EQ(fr.at("ranks"), 64);
  std::set<std::string> kinds;
  for (const nlohmann::json& f : fr.at("findings")) {
    kinds.insert(f.at("group_desc").get<std::string>());
    EXPECT_EQ(f.at("culprit_ranks"), nlohmann::json::array({13})) << f.dump();
  }
  EXPECT_TRUE(kinds.count("tp") && kinds.count("dp") && kinds.count("pp0-1")) << fr.dump();

  const Outcome replay = run_tandem(fmt::format("replay '{}/fr' --recovery shrink --json", out));
  EXPECT_EQ(replay.exit_code, 1) << replay.err;
  const nlohmann::json r = nlohmann::json::parse(replay.out);
  EXPECT_EQ(r.at("culprit_ranks"), nlohmann::json::array({13}));
  EXPECT_EQ(r.at("recoveries")[0].at("outcome"), "recovered_shrink");
  EXPECT_EQ(r.at("recoveries")[0].at("dropped_ranks").size(), 32u);  // rank 13's TP8 x PP4 replica
  std::filesystem::remove_all(out);
}

TEST(RunCli, UsageErrors) {
  expect_one_line_error(run_tandem("run scenarios/does-not-exist.yaml"), 2,
                        "cannot read scenario 'scenarios/does-not-exist.yaml'");
  expect_one_line_error(run_tandem("run"), 2, "scenario");
  // No GPU here: "backend 'cuda': no CUDA device: ..." (or "not in this build" without CUDA).
  expect_one_line_error(run_tandem("run scenarios/smoke-8xh100.yaml --backend cuda"), 2, "backend 'cuda'");
  expect_one_line_error(run_tandem("run scenarios/faults/host/link-flap-host.yaml --backend cuda"), 2,
                        "backend 'cuda'");
  expect_one_line_error(run_tandem("run scenarios/smoke-8xh100.yaml --backend nccl-native"), 2, "tandem bench");
  // Only collective loops keep a flight recorder: elsewhere --dump-on-exit would silently write nothing.
  expect_one_line_error(run_tandem("run scenarios/smoke-8xh100.yaml --dump-on-exit"), 2,
                        "--dump-on-exit: a collective-sweep workload keeps no flight recorder");
  expect_one_line_error(run_tandem("run scenarios/smoke-8xh100.yaml --backend gpu"), 2,
                        "unknown backend 'gpu' (expected: sim, host, cuda, nccl)");
}

// True in debug and sanitizer builds, where simulating 64 GPUs takes minutes instead of seconds.
bool slow_build() {
#ifdef NDEBUG
  return tandem::testing::kSanitizerBuild;
#else
  return true;
#endif
}

// The shipped what-if scenario, as scripts/main.sh runs it: every expectation must hold. Release
// builds (scripts/test.sh, CI) always run it; slow builds only with TANDEM_FULL_SWEEP=1.
TEST(RunCli, WhatIfScenarioHoldsItsExpectations) {
  const char* forced = std::getenv("TANDEM_FULL_SWEEP");
  if (slow_build() && (forced == nullptr || std::string(forced) != "1")) {
    GTEST_SKIP() << "64 simulated GPUs in a debug or sanitizer build; TANDEM_FULL_SWEEP=1 runs it";
  }
  const Outcome outcome = run_tandem("run scenarios/what-if-64xh100.yaml --quiet");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  EXPECT_FALSE(contains(outcome.out, "FAIL")) << outcome.out;
  EXPECT_EQ(lines_of(outcome.out).back().rfind("verdict: PASS", 0), 0u) << outcome.out;
}

}  // namespace

// The shipped fault scenarios: each one's expectations (outcomes, costs, the flight-recorder
// culprit) hold on the simulator at 64 GPUs, and their host twins hold with real data.
class FaultScenarios : public ::testing::TestWithParam<std::string> {};

TEST_P(FaultScenarios, ExpectationsHold) {
  const std::string dir = ::testing::TempDir() + "tandem-fault-" + std::to_string(::getpid());
  const Outcome outcome = run_tandem(fmt::format("run {} --out '{}'", GetParam(), dir));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  EXPECT_TRUE(contains(outcome.out, "Verdict: PASS")) << outcome.out;
  EXPECT_FALSE(contains(outcome.out, "FAIL line")) << outcome.out;
  const nlohmann::json results = nlohmann::json::parse(read_text(dir + "/results.json"));
  EXPECT_FALSE(results.at("iterations").empty());
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Shipped, FaultScenarios,
    ::testing::Values("scenarios/faults/link-flap-64xh100.yaml", "scenarios/faults/rank-hang-64xh100.yaml",
                      "scenarios/faults/straggler-64xh100.yaml", "scenarios/faults/nic-down-reroute-64xh100.yaml",
                      "scenarios/faults/rank-crash-shrink-64xh100.yaml", "scenarios/faults/desync-64xh100.yaml",
                      "scenarios/faults/host/link-flap-host.yaml", "scenarios/faults/host/rank-hang-host.yaml",
                      "scenarios/faults/host/straggler-host.yaml", "scenarios/faults/host/nic-down-reroute-host.yaml",
                      "scenarios/faults/host/rank-crash-shrink-host.yaml", "scenarios/faults/host/desync-host.yaml"),
    [](const auto& test) {
      std::string name = std::filesystem::path(test.param).stem().string();
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// The rank-hang scenario's dumps: Python's own pickle loads every one, with the fields PyTorch's
// analyzer needs, and `tandem fr analyze` names rank 5 from them.
TEST(RunCli, RankHangDumpsLoadInPythonAndNameTheRank) {
  const std::string dir = ::testing::TempDir() + "tandem-hang-" + std::to_string(::getpid());
  ASSERT_EQ(run_tandem(fmt::format("run scenarios/faults/rank-hang-64xh100.yaml --out '{}'", dir)).exit_code, 0);
  const std::string check = fmt::format(
      "python3 -c \"import pickle,glob; files=glob.glob('{}/fr/rank_*'); assert len(files)==64, len(files); "
      "d=[pickle.load(open(f,'rb')) for f in files]; "
      "assert all(x['version']=='2.10' and isinstance(x['pg_config']['0']['ranks'], str) for x in d); "
      "e=[x['entries'][-1] for x in d]; "
      "assert all(isinstance(y['process_group'], tuple) and y['profiling_name']=='nccl:all_reduce' for y in e)\"",
      dir);
  EXPECT_EQ(std::system(check.c_str()), 0) << check;
  const Outcome analysis = run_tandem(fmt::format("fr analyze '{}/fr' --json", dir));
  EXPECT_EQ(analysis.exit_code, 1) << analysis.err;
  const nlohmann::json verdict = nlohmann::json::parse(analysis.out);
  EXPECT_EQ(verdict.at("culprit_ranks"), nlohmann::json::array({5})) << analysis.out;
  std::filesystem::remove_all(dir);
}

namespace {

TEST(RunCli, Llama70bTrainingScenario) {
  const std::string dir = temp_path("llama70b_out");
  std::filesystem::remove_all(dir);
  const Outcome outcome = run_tandem("run scenarios/llama3-70b-64xh100.yaml --out " + dir);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  EXPECT_EQ(outcome.err, "");
  for (const char* part :
       {"workload: training llama3-70b (70.55 B parameters", "== base: dgx-h100: 8 nodes",
        "== 800G: ", "== 800G-gen6: ", "== comparison: step time", "FSDP all_gather (fwd)", "TP all_gather",
        "== es: ", "expandable_segments:True", "verdict: PASS (8 of 8 expectations hold)"}) {
    EXPECT_TRUE(contains(outcome.out, part)) << part << "\n" << outcome.out;
  }
  const std::vector<std::string> csv = lines_of(read_text(dir + "/results.csv"));
  ASSERT_EQ(csv.size(), 9u);  // header + 4 variants x 2 layouts
  EXPECT_EQ(csv[0].rfind("variant,layout,gpus,tp,pp,vp,cp,ep,dp,", 0), 0u) << csv[0];
  const nlohmann::json json = nlohmann::json::parse(read_text(dir + "/results.json"));
  EXPECT_TRUE(json.at("passed").get<bool>());
  ASSERT_EQ(json.at("variants").size(), 4u);
  const nlohmann::json& fsdp = json.at("variants")[0].at("layouts")[0];
  EXPECT_EQ(fsdp.at("layout"), "fsdp");
  const double step = fsdp.at("step_s").get<double>();
  EXPECT_NEAR(
      fsdp.at("compute_s").get<double>() + fsdp.at("exposed_comm_s").get<double>() + fsdp.at("bubble_s").get<double>(),
      step, 1e-6 * step);
  EXPECT_FALSE(fsdp.at("collectives").empty());
}

TEST(RunCli, TrainingRunsOnTheSimulatorOnly) {
  expect_one_line_error(run_tandem("run scenarios/llama3-70b-64xh100.yaml --backend host"), 2,
                        "a training workload runs on the simulator");
}

}  // namespace

namespace {

TEST(RunCli, MoeAndInterleavedScenariosHoldTheirBounds) {
  // Expert parallelism across nodes: its all_to_alls are among the exposed collectives.
  const Outcome moe = run_tandem("run scenarios/mixtral-8x7b-64xh100.yaml");
  ASSERT_EQ(moe.exit_code, 0) << moe.out << moe.err;
  EXPECT_TRUE(contains(moe.out, "EP all_to_all (dispatch)")) << moe.out;
  EXPECT_TRUE(contains(moe.out, "verdict: PASS (5 of 5 expectations hold)")) << moe.out;
  // 405B on 16,384 GPUs, 1F1B against the interleaved schedule.
  const Outcome big = run_tandem("run scenarios/llama3-405b-16kxh100.yaml");
  ASSERT_EQ(big.exit_code, 0) << big.out << big.err;
  EXPECT_TRUE(contains(big.out, "verdict: PASS (4 of 4 expectations hold)")) << big.out;
}

// BLOOM-176B on A100s: the micro-batch BigScience found fastest (2) is tandem's fastest too, for the
// model's reasons: compute falls with the micro-batch (wave quantization, DeepSpeed's per-microbatch
// accumulation) while the bubble grows.
TEST(RunCli, BloomMicroBatchSweepPutsTwoFirst) {
  const std::string dir = temp_path("bloom_out");
  std::filesystem::remove_all(dir);
  const Outcome outcome = run_tandem("run scenarios/bloom-176b-384xa100.yaml --out " + dir);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  EXPECT_TRUE(contains(outcome.out, "verdict: PASS (3 of 3 expectations hold)")) << outcome.out;
  const nlohmann::json json = nlohmann::json::parse(read_text(dir + "/results.json"));
  std::map<std::string, nlohmann::json> by_name;
  for (const nlohmann::json& layout : json.at("variants").at(0).at("layouts")) by_name[layout.at("layout")] = layout;
  ASSERT_EQ(by_name.size(), 4u);
  auto value = [&](const char* layout, const char* key) { return by_name.at(layout).at(key).get<double>(); };
  for (const char* other : {"mbs1", "mbs4", "mbs8"}) EXPECT_LT(value("mbs2", "step_s"), value(other, "step_s")) << other;
  EXPECT_GT(value("mbs1", "compute_s"), value("mbs2", "compute_s"));
  EXPECT_GT(value("mbs2", "compute_s"), value("mbs4", "compute_s"));
  EXPECT_LT(value("mbs1", "bubble_s"), value("mbs2", "bubble_s"));
  EXPECT_EQ(json.at("workload").at("grad_accumulation"), "deepspeed");
}

// The start-up scenario: four lever sets, every phase in the table, the files, and --backend host refused.
TEST(RunCli, StartupScenarioComparesLeverSets) {
  const std::string dir = temp_path("startup_out");
  std::filesystem::remove_all(dir);
  const Outcome outcome = run_tandem("run scenarios/startup-64xh100.yaml --out " + dir);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  for (const char* part : {"communicators world(64) tp(8) dp(4) pp(2)", "group barriers", "first collectives",
                           "pytorch-2023: legacy store, one root, eager connect, barrier per new_group",
                           "57 world barriers", "verdict: PASS (4 of 4 expectations hold)"}) {
    EXPECT_TRUE(contains(outcome.out, part)) << part << "\n" << outcome.out;
  }
  const std::vector<std::string> csv = lines_of(read_text(dir + "/results.csv"));
  ASSERT_EQ(csv.size(), 5u);  // header + 4 lever sets
  EXPECT_EQ(csv[0].rfind("variant,config,gpus,communicators,store_requests,", 0), 0u) << csv[0];
  const nlohmann::json json = nlohmann::json::parse(read_text(dir + "/results.json"));
  EXPECT_TRUE(json.at("passed").get<bool>());
  const nlohmann::json& configs = json.at("variants")[0].at("configs");
  ASSERT_EQ(configs.size(), 4u);
  // The 2023 stack is the slowest; each set's phases add up to its total.
  const double old_total = configs[0].at("startup").at("total_s").get<double>();
  for (const nlohmann::json& config : configs) {
    const nlohmann::json& startup = config.at("startup");
    double sum = 0;
    for (const nlohmann::json& phase : startup.at("phases")) sum += phase.at("seconds").get<double>();
    EXPECT_NEAR(sum, startup.at("total_s").get<double>(), 1e-9);
    EXPECT_LE(startup.at("total_s").get<double>(), old_total) << config.at("name");
  }
  expect_one_line_error(run_tandem("run scenarios/startup-64xh100.yaml --backend host"), 2,
                        "a start-up workload runs on the simulator");
}

// The release-claims scenario: a verdict per claim in the report and the files, its expectations
// held, and --backend host refused.
TEST(RunCli, ReleaseClaimsScenarioGivesAVerdictPerClaim) {
  const std::string dir = temp_path("claims_out");
  std::filesystem::remove_all(dir);
  const Outcome outcome = run_tandem("run scenarios/release-claims-64xh100.yaml --out " + dir);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  for (const char* part : {"== all-reduce-16GB", "verdict impossible", "read as the job's total (16 GB over 64 GPUs",
                           "failure rates 16.5x those of the 'llama3' table", "48 -> 160+ h",
                           "== fragmentation (memory", "expandable_segments:True: allocated"}) {
    EXPECT_TRUE(contains(outcome.out, part)) << part << "\n" << outcome.out;
  }
  const nlohmann::json json = nlohmann::json::parse(read_text(dir + "/results.json"));
  EXPECT_TRUE(json.at("passed").get<bool>());
  for (const nlohmann::json& claim : json.at("claims")) {
    // The nearest candidate is one of the candidates, and every value is a number.
    bool found = false;
    for (const nlohmann::json& after : claim.at("after")) {
      found = found || after.at("setting") == claim.at("nearest");
      EXPECT_TRUE(std::isfinite(after.at("value").get<double>())) << claim.at("name");
    }
    EXPECT_TRUE(found) << claim.dump();
    EXPECT_FALSE(claim.at("reasons").empty()) << claim.at("name");
  }
  const std::vector<std::string> csv = lines_of(read_text(dir + "/results.csv"));
  EXPECT_EQ(csv.at(0), "claim,kind,unit,role,setting,value,claimed,verdict");
  expect_one_line_error(run_tandem("run scenarios/release-claims-64xh100.yaml --backend host"), 2,
                        "a claims workload runs on tandem's models");
}

TEST(RunCli, Llama8bOnOneNodeShowsWhatFits) {
  const Outcome outcome = run_tandem("run scenarios/llama3-8b-8xh100.yaml");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  // DDP is refused before its timeline runs (the analytic sum is over 80 GB): no memory columns.
  EXPECT_TRUE(contains(outcome.out, "ddp              1   1   1   1   1      8       4x1      none          -          -"
                                    "      -          - does not run (below)"))
      << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "needs 173.3 GB per GPU")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "but the H100-SXM has 80 GB")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "verdict: PASS (4 of 4 expectations hold)")) << outcome.out;
  EXPECT_FALSE(contains(outcome.out, "activations tensor by tensor")) << outcome.out;
}

// --explain: each layout's activations tensor by tensor, the refused DDP layout included (why it
// does not fit is what a user asks); the shares add up to the activations of the analytic sum.
TEST(RunCli, ExplainBreaksTheActivationsDownTensorByTensor) {
  const Outcome outcome = run_tandem("run scenarios/llama3-8b-8xh100.yaml --explain");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  EXPECT_TRUE(contains(outcome.out, "  ddp: 36.51 GB of activations on stage 0 (none, tp 1)")) << outcome.out;
  // Llama-3 8B, fused stack: SwiGLU's input is fc1's output, 2 x 14,336 wide; under TP8 an eighth.
  EXPECT_TRUE(contains(outcome.out, "SwiGLU input (fc1 output)                      57344 B a token")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "SwiGLU input (fc1 output)                       7168 B a token")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "15.03 GB")) << outcome.out;
  expect_one_line_error(run_tandem("run scenarios/what-if-64xh100.yaml --explain"), 2,
                        "--explain breaks down a training step's memory; scenarios/what-if-64xh100.yaml is a "
                        "collective-sweep scenario");
}

// Every rank crashes: no survivor can dump, and the run still reports the aborted iteration and
// writes its results (it used to stop at "dump directory .../fr does not exist" with nothing written).
TEST(RunCli, EveryRankCrashedStillReportsAndWritesResults) {
  const std::string path = write_scenario("all_crash.yaml", R"(tandem_scenario: 1
name: all-crash
cluster: {preset: dgx-h100, nodes: 1}
workload: {type: collective-loop, collective: all_reduce, size: 1M, algorithm: ring, iterations: 3, gpus_per_node: 2}
faults:
  - {kind: rank_crash, rank: 0, at_collective: 1}
  - {kind: rank_crash, rank: 1, at_collective: 1}
recovery: {watchdog_ms: 50, action: shrink}
outputs: {dumps: true}
expect:
  - {iteration: 1, outcome: aborted}
)");
  for (const std::string backend : {"sim", "host"}) {
    const std::string dir = temp_path("all_crash_out_" + backend);
    std::filesystem::remove_all(dir);
    const Outcome outcome = run_tandem(fmt::format("run '{}' --backend {} --out '{}'", path, backend, dir));
    EXPECT_EQ(outcome.exit_code, 0) << backend << outcome.out << outcome.err;
    EXPECT_TRUE(contains(outcome.out, "aborted")) << outcome.out;
    EXPECT_TRUE(contains(outcome.out, "Flight-recorder dumps: none written: every rank had crashed")) << outcome.out;
    const nlohmann::json results = nlohmann::json::parse(read_text(dir + "/results.json"));
    EXPECT_EQ(results.at("aborted"), true);
    EXPECT_EQ(results.at("iterations").at(1).at("outcome"), "aborted");
    EXPECT_EQ(results.at("dump_prefix"), "");
    EXPECT_TRUE(std::filesystem::exists(dir + "/results.csv"));
    EXPECT_FALSE(std::filesystem::exists(dir + "/fr"));
    std::filesystem::remove_all(dir);
  }
  std::filesystem::remove(path);
}

// A run owns its output folder: a second run into it replaces the first run's dumps and results
// instead of mixing them (the 64-rank run's 56 extra dumps used to stay, and the 8-rank run's
// analysis then blamed ranks 0-7 of a 64-rank group).
TEST(RunCli, AReusedOutputFolderHoldsOnlyTheLastRun) {
  const std::string dir = temp_path("reused_out");
  std::filesystem::remove_all(dir);
  const Outcome first = run_tandem("run scenarios/faults/rank-hang-64xh100.yaml --out " + dir);
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const Outcome second = run_tandem("run scenarios/faults/host/rank-hang-host.yaml --out " + dir);
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  int dumps = 0;
  for (const auto& file : std::filesystem::directory_iterator(dir + "/fr")) {
    dumps += file.path().filename().string().starts_with("rank_") ? 1 : 0;
  }
  EXPECT_EQ(dumps, 8);
  const Outcome analysis = run_tandem(fmt::format("fr analyze '{}/fr'", dir));
  EXPECT_EQ(analysis.exit_code, 1) << analysis.err;  // 1: a finding (the hung rank)
  EXPECT_TRUE(contains(analysis.out, "rank 5 never joined")) << analysis.out;
  EXPECT_FALSE(contains(analysis.out, "0-63")) << analysis.out;
  std::filesystem::remove_all(dir);
}

// Without --out the dumps serve the analysis and go; a dump folder that is not there is refused
// before the run, as PyTorch would fail to write into it.
TEST(RunCli, DumpsWithoutAnOutputFolderAreRemovedAndAMissingDumpFolderIsRefused) {
  const Outcome outcome = run_tandem("run scenarios/faults/rank-hang-64xh100.yaml");
  EXPECT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_TRUE(contains(outcome.out, "analyzed, then removed (--out DIR keeps them)")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "flight-recorder culprit [5] (expected [5])")) << outcome.out;
  const Outcome missing =
      run_tandem("run scenarios/faults/rank-hang-64xh100.yaml", "TORCH_FR_DUMP_TEMP_FILE=/nonexistent/fr/rank_");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(contains(missing.err, "the folder /nonexistent/fr does not exist")) << missing.err;
}

}  // namespace

// A fault on a link no transfer crosses changes nothing; the report says so instead of "hit" (a
// fault that did slow the ring is still "hit": the link-flap scenario's expectations above).
TEST(RunCli, AFaultWithNoEffectIsReportedAsSuch) {
  const std::string scenario = write_scenario("unused_link.yaml", R"(tandem_scenario: 1
name: unused-link
cluster: {preset: dgx-h100, nodes: 2}
workload: {type: collective-loop, collective: all_reduce, size: 1M, algorithm: ring, iterations: 2, gpus_per_node: 1}
faults:
  - {kind: link_degrade, link: n0-nic5-uplink, factor: 0.1, at_collective: 0}
recovery: {watchdog_ms: 100, action: abort}
)");
  const Outcome unused = run_tandem("run " + scenario);
  ASSERT_EQ(unused.exit_code, 0) << unused.err;
  EXPECT_TRUE(contains(unused.out,
                       "at collective 0: active in iteration(s) 0, 1, with no effect (each completed at "
                       "once in its fault-free time)"))
      << unused.out;
  const std::string on_path = R"(tandem_scenario: 1
name: used-link
cluster: {preset: dgx-h100, nodes: 2}
workload: {type: collective-loop, collective: all_reduce, size: 1M, algorithm: ring, iterations: 2, gpus_per_node: 1}
faults:
  - {kind: link_degrade, link: n0-nic0-uplink, factor: 0.1, at_collective: 0}
recovery: {watchdog_ms: 100, action: abort}
)";
  const Outcome slowed = run_tandem("run " + write_scenario("used_link.yaml", on_path));
  ASSERT_EQ(slowed.exit_code, 0) << slowed.err;
  EXPECT_TRUE(contains(slowed.out, "at collective 0: hit iteration(s) 0, 1\n")) << slowed.out;
}
