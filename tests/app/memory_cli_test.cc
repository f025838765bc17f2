// `tandem memory` end to end on snapshots written in PyTorch's format at test time
// (tests/support/memory_snapshot_writer.h): the consistency line, the side-by-side table, the JSON,
// the files of --out, and the errors and exit statuses.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"
#include "tests/support/memory_snapshot_writer.h"

namespace {

namespace fs = std::filesystem;
using tandem::testing::MemorySnapshotWriter;
using tandem::testing::Outcome;
using tandem::testing::read_text;
using tandem::testing::run_tandem;
using tandem::testing::sixteens_then_thirty_twos_snapshot;
using tandem::testing::temp_path;

std::string write_snapshot(const std::string& name, const MemorySnapshotWriter& writer) {
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << writer.bytes();
  return path;
}

bool has(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

// The hand-worked snapshot (recorded without expandable segments) against expandable_segments:True:
// 258 MiB against 142 MiB reserved, 13 cudaMalloc against 8 maps.
TEST(MemoryCli, TableComparesTheSnapshotsSettingsWithOthers) {
  const std::string snap = write_snapshot("memory_default.pickle", sixteens_then_thirty_twos_snapshot(false));
  const Outcome o = run_tandem(fmt::format("memory '{}' --alloc-conf expandable_segments:True", snap));
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_TRUE(has(o.out,
                  "consistency: OK: the replay under the snapshot's own settings gives its 13 segment(s) and "
                  "16 block(s) exactly"))
      << o.out;
  EXPECT_TRUE(has(o.out, "snapshot (default)   expandable_segments:True")) << o.out;
  EXPECT_TRUE(has(o.out, "peak reserved                              258 MiB                    142 MiB")) << o.out;
  EXPECT_TRUE(has(o.out, "cudaMalloc + maps                               13                          8")) << o.out;
  EXPECT_TRUE(has(o.out, "fragmentation at peak                        50.4%                       9.9%")) << o.out;
  fs::remove(snap);
}

// docs/memory.md's example runs on tests/fixtures/memory/sixteens_then_thirty_twos.pickle: it must
// stay what the writer writes (regenerate it from sixteens_then_thirty_twos_snapshot(false)).
TEST(MemoryCli, TheDocsFixtureIsTheWritersSnapshot) {
  std::ifstream in("tests/fixtures/memory/sixteens_then_thirty_twos.pickle", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, sixteens_then_thirty_twos_snapshot(false).bytes());
}

TEST(MemoryCli, JsonAndOutFolder) {
  const std::string snap = write_snapshot("memory_es.pickle", sixteens_then_thirty_twos_snapshot(true));
  const std::string out = temp_path("memory_out");
  fs::remove_all(out);
  const Outcome o = run_tandem(fmt::format("memory '{}' --alloc-conf '' --json --out '{}'", snap, out));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out);
  EXPECT_TRUE(j["consistency"]["matches"].get<bool>());
  ASSERT_EQ(j["settings"].size(), 2u);
  EXPECT_EQ(j["settings"][0]["label"], "snapshot (expandable_segments:True)");
  EXPECT_EQ(j["settings"][0]["peak_reserved_bytes"], 142u << 20);
  EXPECT_EQ(j["settings"][1]["label"], "default");
  EXPECT_EQ(j["settings"][1]["peak_reserved_bytes"], 258u << 20);
  EXPECT_TRUE(j["device_memory_bytes"].is_null());
  EXPECT_EQ(nlohmann::json::parse(read_text(out + "/memory.json")), j);
  const std::string csv = read_text(out + "/memory_over_time.csv");
  EXPECT_TRUE(
      csv.starts_with("setting,trace_index,action,allocated_bytes,reserved_bytes\n"
                      "\"snapshot (expandable_segments:True)\",0,segment_map,0,0\n"
                      "\"snapshot (expandable_segments:True)\",1,alloc,1024,2097152\n"))
      << csv.substr(0, 300);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 2 * 41);
  fs::remove_all(out);
  fs::remove(snap);
}

// `tandem report` on the --out folder: the settings table and memory over the trace, one line per
// setting and kind (reserved solid, allocated dashed), peaks kept; a broken CSV names its line.
TEST(MemoryCli, ReportPlotsMemoryOverTheTrace) {
  const std::string snap = write_snapshot("memory_report.pickle", sixteens_then_thirty_twos_snapshot(false));
  const std::string out = temp_path("memory_report_out");
  fs::remove_all(out);
  ASSERT_EQ(
      run_tandem(fmt::format("memory '{}' --alloc-conf expandable_segments:True --out '{}'", snap, out)).exit_code, 0);
  const Outcome report = run_tandem(fmt::format("report '{}'", out));
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const std::string html = read_text(out + "/report.html");
  EXPECT_TRUE(has(html, "<svg id=\"memory\"")) << html.substr(0, 500);
  size_t lines = 0;
  for (size_t at = html.find("<polyline"); at != std::string::npos; at = html.find("<polyline", at + 1)) ++lines;
  EXPECT_EQ(lines, 4u);  // 2 settings x (reserved, allocated)
  EXPECT_TRUE(has(html, "<td>snapshot (default)</td><td class=\"num\">128.0</td><td class=\"num\">258.0</td>")) << html;
  EXPECT_TRUE(has(html, ">258.0 MiB</text>")) << html;  // the axis reaches the peak reserved
  EXPECT_TRUE(has(html, "id=\"verdict\">OK"));
  std::ofstream(out + "/memory_over_time.csv", std::ios::app) << "\"default\",9,alloc,12x,0\n";
  const Outcome broken = run_tandem(fmt::format("report '{}'", out));
  EXPECT_EQ(broken.exit_code, 2);
  EXPECT_TRUE(has(broken.err, "memory_over_time.csv:94: '12x' is not a count")) << broken.err;
  fs::remove_all(out);
  fs::remove(snap);
}

// A snapshot whose segments the trace does not explain: the check says where, exit 1.
TEST(MemoryCli, MismatchExitsOne) {
  MemorySnapshotWriter w = sixteens_then_thirty_twos_snapshot(false);
  w.segment(0x7f3000000000, 0, "large", false, {{20u << 20, "inactive", 0}});
  const std::string snap = write_snapshot("memory_bad.pickle", w);
  const Outcome o = run_tandem(fmt::format("memory '{}'", snap));
  EXPECT_EQ(o.exit_code, 1) << o.err;
  EXPECT_TRUE(has(o.out, "consistency: MISMATCH: the snapshot has 14 segment(s), the replay 13")) << o.out;
  fs::remove(snap);
}

// On a 100 MiB device the snapshot's program runs out. Entries: 0-5 the small prelude, then
// (segment_alloc, alloc) per 16 MiB block, the k-th alloc at entry 7 + 2k. Default: 2 + 7 x 16 =
// 114 MiB > 100 at the 7th block (k = 6, entry 19). Expandable: the 6th block (k = 5, entry 17)
// needs a 5th 20 MiB page: 2 + 100 = 102 MiB > 100.
TEST(MemoryCli, OomsNameTheRequest) {
  const std::string snap = write_snapshot("memory_oom.pickle", sixteens_then_thirty_twos_snapshot(false));
  const Outcome o =
      run_tandem(fmt::format("memory '{}' --device-memory 100M --alloc-conf expandable_segments:True", snap));
  EXPECT_EQ(o.exit_code, 1) << o.err;  // the recorded program did not run out: the replay disagrees
  EXPECT_TRUE(has(o.out, "device memory: 100 MiB (from --device-memory)")) << o.out;
  EXPECT_TRUE(has(o.out, "entry 19: 16 MiB (stream 0)   entry 17: 16 MiB (stream 0)")) << o.out;
  fs::remove(snap);
}

// The snapshots PyTorch wrote (../shared/reference/pytorch-files/memory/): memory allocated before
// recording started is rebuilt, the check passes, and the peaks are given with and without it.
// Figures: tests/models/memory_snapshot_test.cc (SnapshotsPyTorchWrote) says where they come from.
TEST(MemoryCli, SnapshotsPyTorchWrote) {
  const fs::path folder = "../shared/reference/pytorch-files/memory";
  if (!fs::exists(folder)) GTEST_SKIP() << folder << " is absent";
  const Outcome w = run_tandem(fmt::format("memory '{}'", (folder / "wedsonlin_medium_128_inference.pickle").string()));
  EXPECT_EQ(w.exit_code, 0) << w.err;
  EXPECT_TRUE(w.err.empty()) << w.err;
  EXPECT_TRUE(has(w.out,
                  "before recording: 98 segment(s) / 1.6 GiB reserved, 223 block(s) / 1.6 GiB allocated (223 "
                  "still active at the end, 0 freed in the trace)"))
      << w.out;
  EXPECT_TRUE(has(w.out,
                  "consistency: OK: the replay under the snapshot's own settings gives its 98 segment(s) and "
                  "230 block(s) exactly"))
      << w.out;
  EXPECT_TRUE(has(w.out, "peak allocated, trace alone                 34 MiB")) << w.out;

  const Outcome b =
      run_tandem(fmt::format("memory '{}' --json", (folder / "bcrafton_memory_snapshot.pickle").string()));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const nlohmann::json j = nlohmann::json::parse(b.out);
  EXPECT_TRUE(j["consistency"]["checked"].get<bool>());
  EXPECT_TRUE(j["consistency"]["matches"].get<bool>()) << j["consistency"]["detail"];
  EXPECT_EQ(j["before_recording"]["live_blocks"], 225);
  EXPECT_EQ(j["before_recording"]["freed_blocks"], 222);
  EXPECT_EQ(j["before_recording"]["reserved_bytes"], 4'238'344'192u);
  EXPECT_EQ(j["settings"][0]["peak_reserved_bytes"], 4'238'344'192u);
  EXPECT_EQ(j["settings"][0]["peak_requested_bytes"], 3'849'232'640u);
  EXPECT_EQ(j["settings"][0]["trace_alone"]["peak_requested_bytes"], 1'999'716'608u);
  EXPECT_TRUE(j["warnings"].empty());
}

// A key a newer PyTorch adds is a warning on stderr, and the snapshot is read.
TEST(MemoryCli, UnknownKeysWarn) {
  tandem::pickle::Value root = sixteens_then_thirty_twos_snapshot(false).value();
  std::get<tandem::pickle::Dict>(root.v).emplace_back("new_top_level_key", 1);
  const std::string snap = temp_path("memory_new_key.pickle");
  std::ofstream(snap, std::ios::binary) << tandem::pickle::dumps(root);
  const Outcome o = run_tandem(fmt::format("memory '{}'", snap));
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_TRUE(has(o.err, "warning: " + snap + ": (top level): unknown key 'new_top_level_key' (1 time): ignored"))
      << o.err;
  EXPECT_TRUE(has(o.out, "consistency: OK")) << o.out;
  fs::remove(snap);
}

TEST(MemoryCli, ErrorsAreOneLineAndExitTwo) {
  const std::string snap = write_snapshot("memory_ok.pickle", sixteens_then_thirty_twos_snapshot(false));
  struct Case {
    std::string args;
    std::string message;
  };
  const std::string missing = temp_path("memory_missing.pickle");
  const std::string not_pickle = temp_path("memory_text.pickle");
  std::ofstream(not_pickle) << "hello";
  MemorySnapshotWriter empty_trace;
  const std::string no_trace = write_snapshot("memory_no_trace.pickle", empty_trace);
  const Case cases[] = {
      {fmt::format("memory '{}' --alloc-conf max_split_size_mb:10", snap),
       "tandem: error: alloc conf 'max_split_size_mb:10': max_split_size_mb must be at least 20 (MiB), got 10"},
      {fmt::format("memory '{}' --alloc-conf expandable_segments:yes", snap),
       "tandem: error: alloc conf 'expandable_segments:yes': expandable_segments must be True or False, got 'yes'"},
      {fmt::format("memory '{}' --device 3", snap),
       "tandem: error: --device 3: the snapshot has traces for 1 device(s)"},
      {fmt::format("memory '{}' --device-memory lots", snap), "--device-memory"},
      {fmt::format("memory '{}'", missing), "cannot read memory snapshot"},
      {fmt::format("memory '{}'", not_pickle), "not a memory snapshot pickle: it starts with byte 0x68"},
      {fmt::format("memory '{}'", no_trace), "the snapshot has no trace entries"},
      {"memory /dev/zero", "is a character device, not a regular file"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const Outcome o = run_tandem(c.args);
    EXPECT_EQ(o.exit_code, 2);
    EXPECT_TRUE(has(o.err, c.message)) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_TRUE(o.out.empty()) << o.out;
  }
  fs::remove(snap);
  fs::remove(not_pickle);
  fs::remove(no_trace);
}

}  // namespace
