// `tandem replay` end to end: the rank-hang scenario's own dumps (a simulated run's, replayed with
// the run's algorithm, must give back the recorded times), PyTorch-style dumps written by
// tests/fixtures/fr/make_fr_fixtures.py (a missing rank, a hang that spreads through TP and DP
// groups, a desync, p2p, coalesced and split groups), the recovery policies, the outputs (JSON,
// CSV, trace) and the errors.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"

#ifndef FR_FIXTURE_SCRIPT
#error "FR_FIXTURE_SCRIPT must name tests/fixtures/fr/make_fr_fixtures.py"
#endif
#ifndef FR_BENCH_SCRIPT
#error "FR_BENCH_SCRIPT must name bench/make_fr_dumps.py"
#endif

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tandem::testing::contains;
using tandem::testing::expect_one_line_error;
using tandem::testing::expect_usage_error;
using tandem::testing::lines_of;
using tandem::testing::Outcome;
using tandem::testing::read_text;
using tandem::testing::run_tandem;
using tandem::testing::temp_path;

class ReplayCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(temp_path("replay_cli"));
    fs::remove_all(*root_);
    fs::create_directories(*root_);
    generated_ = std::system(fmt::format("python3 '{}' '{}/fx'", FR_FIXTURE_SCRIPT, *root_).c_str()) == 0;
    // The rank-hang scenario on the simulator: its dumps are what `tandem replay` gets from a hang.
    const Outcome run = run_tandem(fmt::format("run scenarios/faults/rank-hang-64xh100.yaml --out '{}/hang'", *root_));
    hang_ok_ = run.exit_code == 0;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
  }
  void SetUp() override {
    if (!generated_) GTEST_SKIP() << "python3 could not run " << FR_FIXTURE_SCRIPT;
    ASSERT_TRUE(hang_ok_) << "tandem run scenarios/faults/rank-hang-64xh100.yaml failed";
  }

  static std::string fixture(const std::string& name) { return *root_ + "/fx/" + name; }
  static std::string hang_dumps() { return *root_ + "/hang/fr"; }
  static json replay_json(const std::string& dir, const std::string& flags, int expected_exit) {
    const Outcome outcome = run_tandem(fmt::format("replay '{}' --json {}", dir, flags));
    EXPECT_EQ(outcome.exit_code, expected_exit) << outcome.out << outcome.err;
    return json::parse(outcome.out);
  }

  static std::string* root_;
  static bool generated_;
  static bool hang_ok_;
};

std::string* ReplayCli::root_ = nullptr;
bool ReplayCli::generated_ = false;
bool ReplayCli::hang_ok_ = false;

const json& op_at(const json& replay, size_t index) { return replay.at("ops").at(index); }

TEST_F(ReplayCli, RankHangScenarioNamesRank5AndShrinkRecovers) {
  const Outcome outcome =
      run_tandem(fmt::format("replay '{}' --algorithm ring --recovery shrink --watchdog 100ms", hang_dumps()));
  EXPECT_EQ(outcome.exit_code, 1) << outcome.err;  // the ranks stop agreeing: exit 1, like fr analyze
  EXPECT_TRUE(contains(outcome.out, "Verdict: ranks 0-4, 6-63 wait in nccl:all_reduce #3 of group 0 (default_pg) "
                                    "for rank 5, which never reached it"))
      << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "recovered_shrink")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "The flight-recorder analysis agrees")) << outcome.out;
  EXPECT_TRUE(outcome.err.empty()) << outcome.err;
}

// With NCCL's own pick (auto: NVLS Tree on 8 full nodes), the shrink's 63 survivors are no longer
// the same number on every node: the replay times them on the ring instead of failing with
// "nvls_tree needs at least 2 GPUs on every node" (exit 2).
TEST_F(ReplayCli, ShrinkSurvivorsOfAnInSwitchPickAreTimedOnTheRing) {
  const Outcome outcome = run_tandem(fmt::format("replay '{}' --recovery shrink --watchdog 100ms", hang_dumps()));
  EXPECT_EQ(outcome.exit_code, 1) << outcome.out << outcome.err;
  EXPECT_TRUE(contains(outcome.out, "nvls_tree")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "(63 ranks go on)")) << outcome.out;
  EXPECT_TRUE(outcome.err.empty()) << outcome.err;
}

TEST_F(ReplayCli, ASimulatedRunReplayedWithItsAlgorithmGivesBackTheRecordedTimes) {
  const json r = replay_json(hang_dumps(), "--algorithm ring --recovery all --watchdog 100ms", 1);
  EXPECT_EQ(r.at("ranks"), 64);
  EXPECT_EQ(r.at("culprit_ranks"), json::array({5}));
  ASSERT_EQ(r.at("ops").size(), 3u);
  for (size_t i = 0; i < 2; ++i) {
    const json& op = op_at(r, i);
    EXPECT_EQ(op.at("state"), "completed");
    EXPECT_EQ(op.at("bytes"), 64 << 20);
    EXPECT_EQ(op.at("algorithm"), "ring");
    const double predicted = op.at("predicted_us"), recorded = op.at("recorded_us");
    EXPECT_GT(recorded, 300);  // 64 MiB over 8 nodes on 16 channel rings: ~0.5 ms, not zero
    // 3%: op by op, the same 16-channel ring simulated again later in a run takes up to ~2% more
    // or less (many flows end within SimGrid's rounding of each other; docs/simulator.md).
    EXPECT_NEAR(predicted / recorded, 1.0, 0.03) << op.dump();
  }
  const json& stuck = op_at(r, 2);
  EXPECT_EQ(stuck.at("state"), "stuck");
  EXPECT_EQ(stuck.at("missing"), json::array({5}));
  EXPECT_EQ(stuck.at("waiting").size(), 63u);
  EXPECT_EQ(r.at("first_divergence"), 2);
  // Each policy: abort gives up after the watchdog, shrink re-runs on 63 ranks, reroute cannot
  // help a rank that never arrived.
  std::map<std::string, json> by_action;
  for (const json& rec : r.at("recoveries")) by_action[rec.at("action")] = rec;
  ASSERT_EQ(by_action.size(), 3u);
  EXPECT_EQ(by_action["abort"].at("outcome"), "aborted");
  EXPECT_EQ(by_action["reroute"].at("outcome"), "aborted");
  EXPECT_EQ(by_action["shrink"].at("outcome"), "recovered_shrink");
  EXPECT_EQ(by_action["shrink"].at("dropped_ranks"), json::array({5}));
  EXPECT_DOUBLE_EQ(by_action["shrink"].at("watchdog_s").get<double>(), 0.1);
  const double stuck_at = stuck.at("start_us");
  EXPECT_NEAR(by_action["abort"].at("end_us").get<double>(), stuck_at + 1e5, 1.0);
  // The survivors' rings: NCCL's channel rings without rank 5, so the channels that left node 0
  // through GPU 5 leave through a neighbour, whose NIC then carries twice its share: slower than
  // the 64-rank time, at most ~2x, never faster (and not a flat ring across spines).
  const double rerun = by_action["shrink"].at("rerun_us");
  const double rerun_ratio = rerun / op_at(r, 0).at("predicted_us").get<double>();
  EXPECT_GE(rerun_ratio, 1.0);
  EXPECT_LE(rerun_ratio, 2.0);
  EXPECT_NEAR(by_action["shrink"].at("end_us").get<double>(), stuck_at + 1e5 + rerun, 1.0);
}

TEST_F(ReplayCli, PyTorchDumpsWithAMissingRank) {
  const json r = replay_json(fixture("missing_rank"), "", 1);
  EXPECT_EQ(r.at("culprit_ranks"), json::array({2}));
  EXPECT_EQ(r.at("version"), "2.10");
  const json& stuck = op_at(r, r.at("first_divergence").get<size_t>());
  EXPECT_EQ(stuck.at("sequence"), 3);
  EXPECT_EQ(stuck.at("waiting"), json::array({0, 1, 3}));
  // The dumps carry PyTorch's default 10 min timeout: the watchdog waits that long without --watchdog.
  for (const json& rec : r.at("recoveries")) EXPECT_DOUBLE_EQ(rec.at("watchdog_s").get<double>(), 600.0);
}

TEST_F(ReplayCli, AHangThatSpreadsThroughGroupsIsTracedToItsRoot) {
  // Rank 13 never enters its DP reduce_scatter; rank 5 waits there for it, rank 5's TP peers wait
  // for rank 5 in the next TP all_reduce. Both the analyzer and the replay follow the waits to
  // rank 13 (the analyzer once named rank 5, the first finding of the lowest group: a victim).
  const json r = replay_json(fixture("training_hang"), "--recovery shrink --watchdog 30s", 1);
  EXPECT_EQ(r.at("ranks"), 16);
  EXPECT_EQ(r.at("culprit_ranks"), json::array({13}));
  EXPECT_EQ(r.at("analysis").at("culprit_ranks"), json::array({13}));
  EXPECT_EQ(r.at("analysis").at("root_ranks"), json::array({13}));
  const json& first = op_at(r, r.at("first_divergence").get<size_t>());
  EXPECT_EQ(first.at("label"), "2[5, 13]");
  EXPECT_EQ(first.at("profiling_name"), "nccl:_reduce_scatter_base");
  EXPECT_EQ(first.at("bytes"), 64 << 20);  // 32 Mi BFloat16 elements in
  EXPECT_EQ(first.at("dtype"), "BFloat16");
  int stuck = 0, completed = 0;
  for (const json& op : r.at("ops")) {
    stuck += op.at("state") == "stuck" ? 1 : 0;
    completed += op.at("state") == "completed" ? 1 : 0;
  }
  EXPECT_EQ(stuck, 3);  // the DP pair {5, 13} and both TP groups
  // Steps 1-2: 2 TP ops x 2 groups + 8 DP pairs, each; step 3: 2 TP all_gathers + 7 DP pairs.
  EXPECT_EQ(completed, 2 * (4 + 8) + 2 + 7);
  // The recorded durations came from the fixture (60 / 800 / 55 us); the simulator's NVLink and
  // 400G predictions are within 25% of them.
  for (const json& op : r.at("ops")) {
    if (op.at("state") != "completed") continue;
    const double ratio = op.at("predicted_us").get<double>() / op.at("recorded_us").get<double>();
    EXPECT_GT(ratio, 0.75) << op.dump();
    EXPECT_LT(ratio, 1.25) << op.dump();
  }
  const Outcome text = run_tandem(fmt::format("replay '{}' --recovery none", fixture("training_hang")));
  EXPECT_TRUE(contains(text.out, "the missing ranks are stuck themselves, behind rank 13")) << text.out;
  EXPECT_TRUE(contains(text.out, "The flight-recorder analysis agrees")) << text.out;
}

// A crashed rank writes no dump: it is absent, the culprit, and the rank shrink drops.
TEST_F(ReplayCli, ACrashedRankLeavesNoDumpAndShrinkDropsIt) {
  const std::string out = *root_ + "/crash";
  const Outcome run = run_tandem(fmt::format("run scenarios/faults/rank-crash-shrink-64xh100.yaml --out '{}'", out));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const json r = replay_json(out + "/fr", "--recovery shrink --watchdog 100ms", 1);
  EXPECT_EQ(r.at("culprit_ranks"), json::array({3}));
  EXPECT_EQ(r.at("analysis").at("culprit_ranks"), json::array({3}));
  ASSERT_EQ(r.at("recoveries").size(), 1u);
  EXPECT_EQ(r.at("recoveries")[0].at("outcome"), "recovered_shrink");
  EXPECT_EQ(r.at("recoveries")[0].at("dropped_ranks"), json::array({3}));
}

// PyTorch's own dumps of two 16-rank Megatron MoE hangs (nvidia-resiliency-ext): the replay names
// the injected ranks NVIDIA's analyzer names; shrink drops the culprit's whole model-parallel
// replica, or says why it cannot.
TEST_F(ReplayCli, PyTorchsOwnDumpsOfMegatronHangs) {
  const fs::path sets = "../shared/reference/pytorch-files/fr";
  if (!fs::exists(sets)) GTEST_SKIP() << sets << " is absent";
  const json gpu_error = replay_json((sets / "gpu_error_1st").string(), "--recovery shrink", 1);
  EXPECT_EQ(gpu_error.at("culprit_ranks"), json::array({12}));
  const json& first = op_at(gpu_error, gpu_error.at("first_divergence").get<size_t>());
  EXPECT_EQ(first.at("group"), "74");
  EXPECT_EQ(first.at("profiling_name"), "nccl:all_to_all");
  const std::string shrink = gpu_error.at("recoveries")[0].at("detail");
  EXPECT_TRUE(contains(shrink, "rank 12's model-parallel replica (ranks 0-1, 4-5, 8-9, 12-13)")) << shrink;
  EXPECT_TRUE(contains(shrink, "8 of 16 ranks go on")) << shrink;

  const json lock_gil = replay_json((sets / "lock_gil_1st").string(), "--recovery shrink", 1);
  EXPECT_EQ(lock_gil.at("culprit_ranks"), json::array({9, 14}));
  EXPECT_EQ(lock_gil.at("recoveries")[0].at("outcome"), "aborted");
  const std::string cannot = lock_gil.at("recoveries")[0].at("detail");
  EXPECT_TRUE(contains(cannot, "shrink cannot help, ranks 9, 14 sit in every model-parallel replica")) << cannot;
}

// A straggler slows every rank's collectives alike: the replay says how much, and that the dumps
// cannot say which rank.
TEST_F(ReplayCli, AStragglersSlowdownIsNamed) {
  const std::string out = *root_ + "/straggler";
  const Outcome run =
      run_tandem(fmt::format("run scenarios/faults/straggler-64xh100.yaml --out '{}' --dump-on-exit", out));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const json r = replay_json(out + "/fr", "--algorithm ring", 0);
  const std::string verdict = r.at("verdict");
  // The straggler makes the ring ~3x slower (the scenario's own expectation: a cost of ~2x a 1.5 ms op).
  EXPECT_TRUE(contains(verdict, "3 of 4 ops (from #2 on) took 3.0x the predicted time on every rank alike") ||
              contains(verdict, "3 of 4 ops (from #2 on) took 2.9x the predicted time on every rank alike"))
      << verdict;
  EXPECT_TRUE(contains(verdict, "the dumps cannot name the rank")) << verdict;
}

// A straggler in a training step (TP2 x FSDP4 on 8 GPUs, rank 3 twice as slow from its first TP
// collective): the rehearsal's dumps show it reaching its ops after its peers, in its own groups
// only, and the replay names it with its slowdown.
TEST_F(ReplayCli, AStragglerInATrainingStepIsNamedWithItsSlowdown) {
  const std::string dir = *root_ + "/training_straggler";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/straggler.yaml") << R"(tandem_scenario: 1
name: llama3-8b-straggler-8xh100
cluster: {preset: dgx-h100, nodes: 1}
workload:
  type: training
  model: llama3-8b
  seq_len: 8192
  global_batch: 8
  micro_batch: 1
  layouts:
    - {name: tp2-fsdp, tp: 2, sharding: fsdp}
faults:
  - {kind: straggler, rank: 3, group: tp, at_collective: 0, factor: 2}
)";
  const Outcome run = run_tandem(fmt::format("run '{0}/straggler.yaml' --out '{0}/out'", dir));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_TRUE(contains(run.out, "straggler rank 3 2x slower at its tp collective 0")) << run.out;
  EXPECT_TRUE(contains(run.out, "every collective of the step completed, ")) << run.out;
  const json r = replay_json(dir + "/out/fr", "", 0);
  const std::string verdict = r.at("verdict");
  EXPECT_TRUE(contains(verdict, "rank 3 is a straggler: it reached ")) << verdict;
  EXPECT_TRUE(contains(verdict, "(its time between ops is 2.0x the others' median)")) << verdict;
}

TEST_F(ReplayCli, CleanDumpsReplayToTheEnd) {
  for (const std::string name : {"matched", "coalesced", "p2p", "split_groups"}) {
    SCOPED_TRACE(name);
    const json r = replay_json(fixture(name), "", 0);
    EXPECT_TRUE(r.at("first_divergence").is_null());
    EXPECT_TRUE(r.at("culprit_ranks").empty());
    EXPECT_TRUE(r.at("recoveries").empty());
    for (const json& op : r.at("ops")) {
      EXPECT_EQ(op.at("state"), "completed") << op.dump();
      EXPECT_GT(op.at("predicted_us").get<double>(), 0) << op.dump();
    }
  }
  // The split groups keep their own sizes (64 and 128 Float elements) under one name.
  const json split = replay_json(fixture("split_groups"), "", 0);
  std::map<std::string, int64_t> bytes;
  for (const json& op : split.at("ops")) bytes[op.at("label")] = op.at("bytes");
  EXPECT_EQ(bytes["1[0-1]"], 256);
  EXPECT_EQ(bytes["1[2-3]"], 512);
  // A send and its recv are one op of the pair.
  const json p2p = replay_json(fixture("p2p"), "", 0);
  ASSERT_EQ(p2p.at("ops").size(), 3u);
  EXPECT_TRUE(op_at(p2p, 1).at("p2p").get<bool>());
  EXPECT_EQ(op_at(p2p, 1).at("ranks"), json::array({0, 1}));
}

TEST_F(ReplayCli, DesyncsNameTheMinorityAndNoPolicyRecoversThem) {
  const std::map<std::string, int> minority{{"size_mismatch", 1}, {"dtype_mismatch", 3}, {"type_mismatch", 2},
                                            {"coalesced_mismatch", 2}};
  for (const auto& [name, rank] : minority) {
    SCOPED_TRACE(name);
    const json r = replay_json(fixture(name), "--watchdog 1s", 1);
    EXPECT_EQ(r.at("culprit_ranks"), json::array({rank}));
    EXPECT_EQ(op_at(r, r.at("first_divergence").get<size_t>()).at("state"), "desync");
    for (const json& rec : r.at("recoveries")) EXPECT_EQ(rec.at("outcome"), "aborted") << rec.dump();
  }
}

TEST_F(ReplayCli, WritesJsonCsvAndATraceWithItsStructure) {
  const std::string out = *root_ + "/replay_out", trace = *root_ + "/replay_trace.json";
  const Outcome outcome = run_tandem(
      fmt::format("replay '{}' --recovery all --watchdog 30s --out '{}' --trace '{}'", fixture("training_hang"), out, trace));
  EXPECT_EQ(outcome.exit_code, 1) << outcome.err;
  const json r = json::parse(read_text(out + "/replay.json"));
  const std::vector<std::string> rows = lines_of(read_text(out + "/replay.csv"));
  EXPECT_EQ(rows.size(), r.at("ops").size() + 1);
  EXPECT_TRUE(rows.front().starts_with("group,sequence,p2p,op,"));

  const json t = json::parse(read_text(trace));
  EXPECT_EQ(t.at("otherData").at("tandem_trace"), 1);
  EXPECT_EQ(t.at("otherData").at("clock"), "simulated");
  std::map<int, std::vector<std::pair<double, double>>> tracks;
  std::map<std::string, int> instants;
  for (const json& e : t.at("traceEvents")) {
    for (const char* key : {"name", "ph", "pid", "tid"}) ASSERT_TRUE(e.contains(key)) << key << " in " << e.dump();
    if (e.at("ph") == "M") continue;
    ASSERT_TRUE(e.contains("ts")) << e.dump();
    if (e.at("ph") == "X") {
      ASSERT_TRUE(e.contains("dur")) << e.dump();
      EXPECT_GE(e.at("dur").get<double>(), 0);
      EXPECT_GT(e.at("tid").get<int>(), 0);  // op slices are on rank tracks
      for (const char* key : {"group", "sequence", "bytes", "algorithm", "state"}) EXPECT_TRUE(e.at("args").contains(key));
      tracks[e.at("tid")].push_back({e.at("ts"), e.at("ts").get<double>() + e.at("dur").get<double>()});
    } else {
      EXPECT_EQ(e.at("ph"), "i");
      EXPECT_EQ(e.at("s"), "g");
      ++instants[e.at("name")];
    }
  }
  EXPECT_EQ(tracks.size(), 16u);
  for (auto& [tid, list] : tracks) {
    for (size_t i = 1; i < list.size(); ++i) EXPECT_LE(list[i - 1].second, list[i].first + 1e-3) << "track " << tid;
  }
  EXPECT_EQ(instants["divergence: stuck"], 1);
  EXPECT_EQ(instants["recovery: abort"], 1);
  EXPECT_EQ(instants["recovery: shrink"], 1);
  EXPECT_EQ(instants["recovery: reroute"], 1);
}

// bench/make_fr_dumps.py's layout (one group over every rank, four collectives at seven sizes, the
// last one never joined by the last rank), at `ranks` x `entries`, in `dir`.
bool make_bench_dumps(const std::string& dir, int ranks, int entries) {
  fs::create_directories(dir);
  return std::system(
             fmt::format("python3 '{}' '{}' {} {} > /dev/null", FR_BENCH_SCRIPT, dir, ranks, entries).c_str()) == 0;
}

TEST_F(ReplayCli, TimingFamiliesInParallelChildrenGiveTheOneChildReplay) {
  // 264 ranks (33 nodes): every group is over sim::kMaxOpByOpRanks, so --jobs 3 times all_reduce /
  // all_gather / reduce_scatter, broadcast in children of their own; --jobs 1 times every op in one
  // child, in order. 16 ranks run op by op: one child whatever --jobs says. The same replay,
  // byte for byte, and the planted hang found on the last rank.
  for (const int ranks : {16, 264}) {
    const std::string dir = fmt::format("{}/bench{}", *root_, ranks);
    ASSERT_TRUE(make_bench_dumps(dir, ranks, 30)) << FR_BENCH_SCRIPT;
    const Outcome one = run_tandem(fmt::format("replay '{}' --json --jobs 1", dir));
    const Outcome three = run_tandem(fmt::format("replay '{}' --json --jobs 3", dir));
    ASSERT_EQ(one.exit_code, 1) << one.err;
    ASSERT_EQ(three.exit_code, 1) << three.err;
    EXPECT_EQ(one.out, three.out) << ranks << " ranks";
    const json r = json::parse(three.out);
    EXPECT_EQ(r.at("culprit_ranks"), json::array({ranks - 1}));
    const json& stuck = op_at(r, r.at("first_divergence").get<size_t>());
    EXPECT_EQ(stuck.at("state"), "stuck");
    EXPECT_EQ(stuck.at("sequence"), 30);
    EXPECT_EQ(stuck.at("missing"), json::array({ranks - 1}));
    EXPECT_EQ(stuck.at("waiting").size(), static_cast<size_t>(ranks - 1));
    size_t completed = 0;
    for (const json& op : r.at("ops")) {
      if (op.at("state") != "completed") continue;
      ++completed;
      EXPECT_GT(op.at("predicted_us").get<double>(), 0.0) << op.dump();
    }
    EXPECT_EQ(completed, 29u);
  }
}

TEST_F(ReplayCli, DumpsThatCannotBeReplayedAreOneLineErrors) {
  expect_one_line_error(run_tandem(fmt::format("replay '{}'", fixture("version_mismatch"))), 2,
                        "disagree on the flight-recorder version (ranks 0-2 wrote version 2.10, rank 3 wrote version 2.8)");
  expect_one_line_error(run_tandem(fmt::format("replay '{}'", fixture("membership_mismatch"))), 2,
                        "disagree on the membership of group 0 (default_pg): rank 0 has it as ranks 0-3, rank 2 as "
                        "ranks 0-2");
  expect_one_line_error(run_tandem(fmt::format("replay '{}'", fixture("corrupt"))), 2, "nccl_trace_rank_1");
  expect_one_line_error(run_tandem(fmt::format("replay '{}/nowhere'", *root_)), 2, "nowhere");
  expect_one_line_error(run_tandem(fmt::format("replay '{}' --nodes 1", fixture("training_hang"))), 2,
                        "the cluster has 8 GPUs");
  expect_usage_error(run_tandem(fmt::format("replay '{}' --watchdog soon", fixture("matched"))), "--watchdog 'soon'");
  expect_usage_error(run_tandem(fmt::format("replay '{}' --recovery retry", fixture("matched"))), "--recovery 'retry'");
  expect_usage_error(run_tandem(fmt::format("replay '{}' --algorithm fastest", fixture("matched"))), "fastest");
}

}  // namespace
