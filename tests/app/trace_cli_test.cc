// `tandem run --trace`, end to end: the same fault scenario on the simulator and on the host
// backend, each trace parsed and checked for the trace-event format's required fields, per-track
// slices in time order without overlap, every rank's slice inside its iteration's slice, the fault
// and the recovery as instant events, and the same structure from both backends.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"

namespace {

using nlohmann::json;
using tandem::testing::contains;
using tandem::testing::expect_one_line_error;
using tandem::testing::read_text;
using tandem::testing::run_tandem;
using tandem::testing::temp_path;

constexpr const char* kScenario = "scenarios/faults/host/link-flap-host.yaml";

json traced_run(const std::string& backend) {
  const std::string path = temp_path("trace_" + backend + ".json");
  std::filesystem::remove(path);
  const auto outcome = run_tandem(fmt::format("run {} --backend {} --trace {}", kScenario, backend, path));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  return json::parse(read_text(path));
}

// The structure of one trace; `shape` gets a summary (event name and track -> count) to compare.
void check_structure(const json& trace, const std::string& backend, std::map<std::string, int>& shape) {
  SCOPED_TRACE(backend);
  EXPECT_EQ(trace.at("otherData").at("tandem_trace"), 1);
  EXPECT_EQ(trace.at("otherData").at("backend"), backend);
  EXPECT_EQ(trace.at("otherData").at("clock"), backend == "sim" ? "simulated" : "wall");
  const int ranks = trace.at("otherData").at("ranks");
  std::map<int, std::vector<std::pair<double, double>>> slices;  // tid -> (ts, end)
  std::map<int, std::pair<double, double>> iteration_window;
  std::set<int> named_tracks;
  for (const json& e : trace.at("traceEvents")) {
    for (const char* key : {"name", "ph", "pid", "tid"}) ASSERT_TRUE(e.contains(key)) << key << " in " << e.dump();
    const std::string ph = e.at("ph");
    const int tid = e.at("tid");
    if (ph == "M") {
      ASSERT_TRUE(e.at("args").contains("name") || e.at("args").contains("sort_index")) << e.dump();
      if (e.at("name") == "thread_name") named_tracks.insert(tid);
      continue;
    }
    ASSERT_TRUE(e.contains("ts")) << e.dump();
    const double ts = e.at("ts");
    EXPECT_GE(ts, 0);
    if (ph == "X") {
      const double dur = e.at("dur");
      EXPECT_GE(dur, 0) << e.dump();
      slices[tid].push_back({ts, ts + dur});
      if (tid == 0) iteration_window[e.at("args").at("iteration")] = {ts, ts + dur};
    } else {
      EXPECT_EQ(ph, "i") << e.dump();
      EXPECT_EQ(e.at("s"), "g");
    }
    ++shape[fmt::format("{} {} on {}", ph, e.at("name").get<std::string>(), tid == 0 ? "iterations" : "a rank")];
  }
  EXPECT_EQ(named_tracks.size(), static_cast<size_t>(ranks + 1));
  for (auto& [tid, list] : slices) {
    // Each track's slices, in time order, do not overlap (a slice ends before the next begins).
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i) EXPECT_LE(list[i - 1].second, list[i].first + 1e-3) << "track " << tid;
  }
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("tid") == 0) continue;
    const auto& [begin, end] = iteration_window.at(e.at("args").at("iteration"));
    const double ts = e.at("ts"), dur = e.at("dur");
    EXPECT_GE(ts, begin - 1e-3) << e.dump();
    EXPECT_LE(ts + dur, end + 1e-3) << e.dump();
  }
}

TEST(TraceCli, SimAndHostTracesOfOneScenarioShareTheirStructure) {
  const json sim = traced_run("sim");
  const json host = traced_run("host");
  std::map<std::string, int> sim_shape, host_shape;
  check_structure(sim, "sim", sim_shape);
  check_structure(host, "host", host_shape);
  EXPECT_EQ(sim_shape, host_shape);
  EXPECT_EQ(sim_shape.at("i fault: link_down on iterations"), 1);
  EXPECT_EQ(sim_shape.at("i recovery: retry on iterations"), 1);
  EXPECT_GT(sim_shape.at("X nccl:all_reduce on a rank"), 8);  // every rank, every attempt
}

// `tandem bench --trace`: the same sweep on sim (8 GPUs of one node) and on host (8 ranks): the
// same tracks and slices, each size's slices back to back on every track, the sizes in order.
json traced_bench(const std::string& backend) {
  const std::string path = temp_path("bench_trace_" + backend + ".json");
  std::filesystem::remove(path);
  const std::string ranks = backend == "sim" ? "" : "-g 8";
  const auto outcome =
      run_tandem(fmt::format("bench all_reduce --backend {} {} -b 64K -e 1M -f 4 -n 2 --trace {}", backend, ranks, path));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  return json::parse(read_text(path));
}

TEST(TraceCli, BenchTracesFromSimAndHostShareTheirStructure) {
  std::map<std::string, std::vector<std::pair<std::string, int64_t>>> per_backend;  // track -> (placement, bytes)
  for (const std::string backend : {"sim", "host"}) {
    SCOPED_TRACE(backend);
    const json t = traced_bench(backend);
    EXPECT_EQ(t.at("otherData").at("backend"), backend);
    EXPECT_EQ(t.at("otherData").at("ranks"), 8);
    std::map<int, std::vector<std::pair<double, double>>> tracks;
    std::vector<std::pair<std::string, int64_t>> sizes;
    for (const json& e : t.at("traceEvents")) {
      for (const char* key : {"name", "ph", "pid", "tid"}) ASSERT_TRUE(e.contains(key)) << key << " in " << e.dump();
      if (e.at("ph") == "M") continue;
      ASSERT_EQ(e.at("ph"), "X") << e.dump();
      EXPECT_EQ(e.at("name"), "nccl:all_reduce");
      EXPECT_GT(e.at("dur").get<double>(), 0) << e.dump();
      EXPECT_GT(e.at("args").at("busbw_GBps").get<double>(), 0);
      tracks[e.at("tid")].push_back({e.at("ts"), e.at("ts").get<double>() + e.at("dur").get<double>()});
      if (e.at("tid") == 0) sizes.push_back({e.at("args").at("placement"), e.at("args").at("bytes")});
    }
    EXPECT_EQ(tracks.size(), 9u);  // sizes + 8 ranks
    for (auto& [tid, list] : tracks) {
      ASSERT_EQ(list.size(), 6u) << "track " << tid;  // 3 sizes x out-of-place, in-place
      for (size_t i = 1; i < list.size(); ++i) EXPECT_NEAR(list[i - 1].second, list[i].first, 1e-3) << "track " << tid;
    }
    per_backend[backend] = sizes;
  }
  EXPECT_EQ(per_backend["sim"], per_backend["host"]);
  EXPECT_EQ(per_backend["sim"].front(), (std::pair<std::string, int64_t>{"out-of-place", 65536}));
  EXPECT_EQ(per_backend["sim"].back(), (std::pair<std::string, int64_t>{"in-place", 1048576}));
}

TEST(TraceCli, SweepTracesHaveATrackPerCollectiveAndAlgorithm) {
  const std::string path = temp_path("sweep_trace.json");
  std::filesystem::remove(path);
  const auto outcome = run_tandem("run scenarios/smoke-8xh100.yaml --quiet --trace " + path);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  const json t = json::parse(read_text(path));
  EXPECT_EQ(t.at("otherData").at("clock"), "simulated");
  std::map<int, std::string> names;
  std::map<int, std::vector<std::pair<double, double>>> tracks;
  for (const json& e : t.at("traceEvents")) {
    for (const char* key : {"name", "ph", "pid", "tid"}) ASSERT_TRUE(e.contains(key)) << key << " in " << e.dump();
    if (e.at("name") == "thread_name") names[e.at("tid")] = e.at("args").at("name");
    if (e.at("ph") != "X") continue;
    EXPECT_GT(e.at("dur").get<double>(), 0);
    EXPECT_GT(e.at("args").at("bytes").get<int64_t>(), 0);
    tracks[e.at("tid")].push_back({e.at("ts"), e.at("ts").get<double>() + e.at("dur").get<double>()});
  }
  EXPECT_EQ(names.size(), 8u);  // {all_reduce, all_gather} x {ring, tree, nvls, auto}
  EXPECT_EQ(names.at(0), "all_reduce ring");
  for (auto& [tid, list] : tracks) {
    for (size_t i = 1; i < list.size(); ++i) EXPECT_NEAR(list[i - 1].second, list[i].first, 1e-3) << names[tid];
  }
  EXPECT_EQ(tracks.at(0).size(), 5u);  // 1 KiB .. 1 GiB, factor 32
}

TEST(TraceCli, TrainingTracesHaveATrackPerStreamOfEachLayout) {
  const std::string path = temp_path("training_trace.json");
  std::filesystem::remove(path);
  const auto outcome = run_tandem("run scenarios/llama3-8b-8xh100.yaml --quiet --trace " + path);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  const json t = json::parse(read_text(path));
  std::set<std::string> processes;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  std::map<std::pair<int, int>, std::string> names;
  int collectives = 0;
  for (const json& e : t.at("traceEvents")) {
    for (const char* key : {"name", "ph", "pid", "tid"}) ASSERT_TRUE(e.contains(key)) << key << " in " << e.dump();
    if (e.at("name") == "process_name") processes.insert(e.at("args").at("name"));
    if (e.at("name") == "thread_name") names[{e.at("pid"), e.at("tid")}] = e.at("args").at("name");
    if (e.at("ph") != "X") continue;
    EXPECT_GE(e.at("dur").get<double>(), 0);
    collectives += e.at("args").at("kind") == "collective" ? 1 : 0;
    tracks[{e.at("pid"), e.at("tid")}].push_back({e.at("ts"), e.at("ts").get<double>() + e.at("dur").get<double>()});
  }
  EXPECT_TRUE(processes.count("base / fsdp") == 1) << processes.size();
  EXPECT_TRUE(processes.count("base / ddp (does not run)") == 1);
  EXPECT_GT(collectives, 0);
  for (auto& [track, list] : tracks) {
    // A stream runs its tasks in order, one at a time.
    for (size_t i = 1; i < list.size(); ++i) EXPECT_LE(list[i - 1].second, list[i].first + 1e-3) << names[track];
  }
  const std::pair<int, int> fsdp_compute{2, 0};  // process 2 is the second layout, fsdp
  ASSERT_EQ(names.count(fsdp_compute), 1u);
  EXPECT_EQ(names[fsdp_compute], "s0/compute");
}

}  // namespace
