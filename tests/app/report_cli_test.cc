// `tandem report`: the page of a collective loop, a sweep and a training run written by
// `tandem run --out`, of a `tandem replay --out` folder (an incident), a sim run compared with a
// host run, escaping of text from the files, and the errors. tests/app/browser_report_check.py renders the rank-hang
// page in Chromium.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "app/report/report_page.h"
#include "tests/support/cli_runner.h"

namespace {

namespace fs = std::filesystem;
using tandem::testing::contains;
using tandem::testing::expect_usage_error;
using tandem::testing::read_text;
using tandem::testing::run_tandem;
using tandem::testing::temp_path;

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

std::string run_and_report(const std::string& scenario, const std::string& name, const std::string& flags = "") {
  const std::string dir = temp_path("report_" + name);
  fs::remove_all(dir);
  const auto run = run_tandem(fmt::format("run {} --out {} {}", scenario, dir, flags));
  EXPECT_TRUE(run.exit_code == 0) << run.out << run.err;
  const auto report = run_tandem(fmt::format("report {}", dir));
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_TRUE(contains(report.out, dir + "/report.html")) << report.out;
  return read_text(dir + "/report.html");
}

void expect_self_contained(const std::string& html) {
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("url("), std::string::npos);
}

TEST(ReportCli, CollectiveLoopPageHasTheTimelineAndTheCulprit) {
  const std::string html = run_and_report("scenarios/faults/rank-hang-64xh100.yaml", "hang");
  expect_self_contained(html);
  EXPECT_EQ(count(html, "class=\"rank-row"), 64u);
  EXPECT_EQ(count(html, "class=\"rank-row culprit\" data-rank=\"5\""), 1u);
  EXPECT_EQ(count(html, "class=\"fault-marker\""), 1u);
  EXPECT_EQ(count(html, "class=\"recovery-marker\" data-outcome=\"aborted\""), 1u);
  EXPECT_EQ(count(html, "<tr class=\"iteration"), 3u);
  EXPECT_TRUE(contains(html, "the loop ABORTED"));
  EXPECT_TRUE(contains(html, "Rank 5 never enters the third all_reduce"));  // the scenario's description
}

TEST(ReportCli, SimAgainstHostIsAPredictionVsMeasurementPlot) {
  const std::string sim = temp_path("report_flap_sim"), host = temp_path("report_flap_host");
  for (const auto& [dir, backend] : {std::pair{sim, "sim"}, std::pair{host, "host"}}) {
    fs::remove_all(dir);
    const auto run =
        run_tandem(fmt::format("run scenarios/faults/host/link-flap-host.yaml --backend {} --out {}", backend, dir));
    ASSERT_EQ(run.exit_code, 0) << run.err;
  }
  const std::string page = temp_path("report_flap.html");
  const auto report = run_tandem(fmt::format("report {} --compare {} -o {}", sim, host, page));
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const std::string html = read_text(page);
  expect_self_contained(html);
  EXPECT_TRUE(contains(html, "<svg id=\"comparison\""));
  EXPECT_TRUE(contains(html, "this run (sim)"));
  EXPECT_TRUE(contains(html, "other run (host)"));
  EXPECT_GE(count(html, "class=\"bar theirs\""), 2u);
}

TEST(ReportCli, SweepAndTrainingPages) {
  const std::string sweep = run_and_report("scenarios/smoke-8xh100.yaml", "smoke");
  expect_self_contained(sweep);
  EXPECT_TRUE(contains(sweep, "<svg id=\"busbw\""));
  EXPECT_GE(count(sweep, "<polyline class=\"series\""), 2u);  // all_reduce and all_gather
  EXPECT_TRUE(contains(sweep, "id=\"verdict\">PASS"));
  const std::string training = run_and_report("scenarios/llama3-8b-8xh100.yaml", "llama");
  expect_self_contained(training);
  EXPECT_TRUE(contains(training, "Step per layout"));
  EXPECT_TRUE(contains(training, "llama3-8b"));
  // DDP does not fit 8B on 8 H100s: the page says why instead of printing zeros.
  EXPECT_TRUE(contains(training, "<tr class=\"does-not-run\"><td>base</td><td>ddp</td>"));
  EXPECT_TRUE(contains(training, "needs 173.3 GB per GPU"));
}

TEST(ReportCli, StartupAndClaimsPages) {
  const std::string startup = run_and_report("scenarios/startup-64xh100.yaml", "startup");
  expect_self_contained(startup);
  EXPECT_TRUE(contains(startup, "<table id=\"startup\">"));
  EXPECT_TRUE(contains(startup, "<td>pytorch-2023</td>"));
  // Every lever set's row has a cell under every phase any set has: group barriers (2023 stack
  // only) and first collectives (today's only) both, plus config and total.
  const size_t table = startup.find("<table id=\"startup\">");
  const std::string rows = startup.substr(table, startup.find("</table>", table) - table);
  const size_t columns = count(rows.substr(0, rows.find("</tr>")), "<th");
  EXPECT_EQ(columns, 7u) << rows;  // config, launch, store, communicators, group barriers, first collectives, total
  for (size_t at = rows.find("<tr><td>"); at != std::string::npos; at = rows.find("<tr><td>", at + 1)) {
    EXPECT_EQ(count(rows.substr(at, rows.find("</tr>", at) - at), "<td"), columns) << rows;
  }
  EXPECT_TRUE(contains(startup, "id=\"verdict\">PASS"));
  const std::string claims = run_and_report("scenarios/release-claims-64xh100.yaml", "claims");
  expect_self_contained(claims);
  EXPECT_TRUE(contains(claims, "<table id=\"claims\">"));
  EXPECT_TRUE(contains(claims, "<span class=\"badge fail\">impossible</span>"));
  EXPECT_TRUE(contains(claims, "<span class=\"badge warn\">needs-conditions</span>"));
  // A hand-edited value: one line naming the field.
  const std::string dir = temp_path("report_claims");
  std::string text = read_text(dir + "/results.json");
  const size_t at = text.find("\"value\": ");
  ASSERT_NE(at, std::string::npos);
  const size_t value = at + std::string("\"value\": ").size();
  text.replace(value, text.find_first_of(",\n", value) - value, "\"quick\"");
  std::ofstream(dir + "/results.json") << text;
  expect_usage_error(run_tandem("report " + dir), "expected a number, got string");
}

TEST(ReportPage, TextFromTheFilesIsEscaped) {
  EXPECT_EQ(tandem::app::html_escape("<b>&\"'"), "&lt;b&gt;&amp;&quot;&#39;");
  nlohmann::json results = {{"scenario", "<script>x</script>"},
                            {"description", "a & b"},
                            {"ranks", 1},
                            {"iterations", nlohmann::json::array()},
                            {"slices", nlohmann::json::array()}};
  const std::string html = tandem::app::report_html(results, std::nullopt);
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  EXPECT_TRUE(contains(html, "&lt;script&gt;x&lt;/script&gt;"));
  EXPECT_TRUE(contains(html, "a &amp; b"));
}

TEST(ReportCli, Errors) {
  expect_usage_error(run_tandem("report " + temp_path("report_nowhere")), "does not exist");
  const std::string empty = temp_path("report_empty");
  fs::remove_all(empty);
  fs::create_directories(empty);
  expect_usage_error(run_tandem("report " + empty), "has no results.json");
  std::ofstream(empty + "/results.json") << "{not json";
  expect_usage_error(run_tandem("report " + empty), "not valid JSON");
  // A number past a double's range is nlohmann's out_of_range, not its parse_error: it gave
  // "internal error" (found by fuzz_results_json).
  std::ofstream(empty + "/results.json") << "{\"points\": [], \"time_us\": 3E333}";
  expect_usage_error(run_tandem("report " + empty),
                     "not valid JSON ([json.exception.out_of_range.406] number overflow");
  std::ofstream(empty + "/results.json") << "{\"answer\": 42}";
  expect_usage_error(run_tandem("report " + empty), "of no kind the report knows");
  fs::remove_all(empty);
}

// A results.json with a string where a number belongs used to give "internal error:
// [json.exception.type_error.302] ..." with no file: now one line naming the file and the field.
TEST(ReportCli, AWrongTypeInResultsJsonNamesTheFileAndTheField) {
  const std::string dir = temp_path("report_wrong_type");
  fs::remove_all(dir);
  ASSERT_EQ(run_tandem(fmt::format("run scenarios/faults/rank-hang-64xh100.yaml --out {}", dir)).exit_code, 0);
  const std::string original = read_text(dir + "/results.json");
  std::string text = original;
  const size_t at = text.find("\"total_seconds\": ");
  ASSERT_NE(at, std::string::npos) << text.substr(0, 400);
  const size_t value = at + std::string("\"total_seconds\": ").size();
  text.replace(value, text.find_first_of(",\n", value) - value, "\"fast\"");
  std::ofstream(dir + "/results.json") << text;
  const auto outcome = run_tandem("report " + dir);
  expect_usage_error(outcome, dir + "/results.json: total_seconds: expected a number, got string");
  // Inside a list: the element's place.
  std::string nested = original;
  const size_t attempts = nested.find("\"attempts\": ");
  ASSERT_NE(attempts, std::string::npos);
  nested.replace(attempts + std::string("\"attempts\": ").size(), 1, "null");
  std::ofstream(dir + "/results.json") << nested;
  expect_usage_error(run_tandem("report " + dir),
                     dir + "/results.json: iterations[0].attempts: expected an integer, got null");
  fs::remove_all(dir);
}

// ---- a replay folder: an incident's page -----------------------------------------------------------

// `tandem replay DUMPS --out DIR` (exit 1: the ranks stop agreeing), then `tandem report DIR -o
// page`: the page's text.
std::string replay_and_report(const std::string& dumps, const std::string& dir, const std::string& flags,
                              int replay_exit) {
  fs::remove_all(dir);
  const auto replay = run_tandem(fmt::format("replay '{}' --out '{}' {}", dumps, dir, flags));
  EXPECT_EQ(replay.exit_code, replay_exit) << replay.out << replay.err;
  const std::string page = dir + "/incident.html";
  const auto report = run_tandem(fmt::format("report '{}' -o '{}'", dir, page));
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_TRUE(contains(report.out, "wrote " + page)) << report.out;
  return read_text(page);
}

// Nothing on an incident's page says PASS: no verdict badge, no pass badge.
void expect_no_pass_badge(const std::string& html) {
  EXPECT_EQ(html.find("class=\"badge pass\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"verdict\""), std::string::npos);
  EXPECT_EQ(html.find("PASS"), std::string::npos);
}

TEST(ReportCli, ReplayOfTheRankHangIsAnIncidentPage) {
  const std::string run = temp_path("report_replay_run");
  fs::remove_all(run);
  ASSERT_EQ(run_tandem(fmt::format("run scenarios/faults/rank-hang-64xh100.yaml --out '{}'", run)).exit_code, 0);
  // The dumps' own watchdog timeout: a wait of minutes after collectives of microseconds.
  const std::string html = replay_and_report(run + "/fr", temp_path("report_replay"), "", 1);
  expect_self_contained(html);
  expect_no_pass_badge(html);
  EXPECT_TRUE(contains(html, "<span class=\"badge incident\" id=\"incident\">incident: stuck</span>"));
  // The culprit, the replay's verdict and the flight-recorder analysis' own.
  EXPECT_TRUE(contains(html, "<dd id=\"culprits\"><strong>5</strong></dd>"));
  EXPECT_TRUE(contains(html,
                       "<dd id=\"replay-verdict\"><strong>ranks 0-4, 6-63 wait in nccl:all_reduce #3 of "
                       "group 0 (default_pg)"));
  EXPECT_TRUE(contains(html, "<dd id=\"analysis\">rank 5 never joined"));
  EXPECT_TRUE(contains(html, "5 (agrees with the replay)"));
  // The timeline: one group row, a row per rank, the stuck op, the waiting ranks and rank 5 missing.
  EXPECT_TRUE(contains(html, "<svg id=\"replay-timeline\""));
  EXPECT_EQ(count(html, "class=\"group-row"), 1u);
  EXPECT_EQ(count(html, "class=\"group-row blocked\" data-group=\"0\""), 1u);
  EXPECT_EQ(count(html, "class=\"op completed\""), 2u);  // all_reduces #1 and #2
  EXPECT_EQ(count(html, "class=\"op blocked\" data-state=\"stuck\""), 1u);
  EXPECT_EQ(count(html, "class=\"rank-row"), 64u);
  EXPECT_EQ(count(html, "class=\"rank-row culprit missing\" data-rank=\"5\""), 1u);
  EXPECT_EQ(count(html, " waiting\" data-rank="), 63u);
  EXPECT_EQ(count(html, "class=\"slice waiting\""), 63u);
  EXPECT_EQ(count(html, "class=\"absent\""), 1u);
  EXPECT_EQ(count(html, "class=\"divergence-marker\""), 1u);
  // The scenario's 100 ms watchdog against 1 ms of collectives: the axis breaks.
  EXPECT_EQ(count(html, "class=\"axis-break\""), 1u);
  EXPECT_TRUE(contains(html, "The time axis is broken between 1.01 ms and "));
  // The policies side by side, on the timeline and in the table.
  EXPECT_TRUE(contains(html, "<table id=\"recoveries\">"));
  EXPECT_EQ(count(html, "<tr class=\"policy "), 3u);
  EXPECT_EQ(count(html, "class=\"recovery-marker\""), 3u);
  EXPECT_TRUE(contains(html, "data-action=\"shrink\" data-outcome=\"recovered_shrink\""));
  EXPECT_TRUE(contains(html, "data-action=\"abort\" data-outcome=\"aborted\""));
  EXPECT_TRUE(contains(html, "<table id=\"blocked\">"));
  EXPECT_TRUE(contains(html, "Written by tandem report from replay.json"));
}

class ReportReplayFixtures : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(temp_path("report_replay_fixtures"));
    fs::remove_all(*root_);
    generated_ =
        std::system(
            fmt::format("python3 '{}' '{}' training_hang missing_rank matched", FR_FIXTURE_SCRIPT, *root_).c_str()) ==
        0;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
  }
  void SetUp() override {
    if (!generated_) GTEST_SKIP() << "python3 could not run " << FR_FIXTURE_SCRIPT;
  }
  static std::string* root_;
  static bool generated_;
};
std::string* ReportReplayFixtures::root_ = nullptr;
bool ReportReplayFixtures::generated_ = false;

TEST_F(ReportReplayFixtures, AHangThroughGroupsShowsEachGroupAndBothCulprits) {
  // Rank 13 never enters its DP reduce_scatter; rank 5 waits there, and the TP peers of both wait
  // for them. The replay follows the waits to rank 13; fr analyze names rank 5.
  const std::string html =
      replay_and_report(*root_ + "/training_hang", *root_ + "/replay", "--recovery shrink --watchdog 30s", 1);
  expect_self_contained(html);
  expect_no_pass_badge(html);
  EXPECT_TRUE(contains(html, "<dd id=\"culprits\"><strong>13</strong></dd>"));
  EXPECT_TRUE(contains(html, "<dd id=\"analysis\">rank 13 never joined"));
  EXPECT_TRUE(contains(html, "13 (agrees with the replay)"));
  EXPECT_EQ(count(html, "class=\"op blocked\" data-state=\"stuck\""), 3u);  // the DP pair {5, 13}, both TP groups
  EXPECT_EQ(count(html, "class=\"group-row blocked\""), 3u);
  EXPECT_GE(count(html, "class=\"group-row\""), 7u);  // the DP pairs that completed
  EXPECT_EQ(count(html, "class=\"rank-row"), 16u);
  EXPECT_EQ(count(html, "class=\"rank-row culprit"), 1u);
  EXPECT_TRUE(contains(html, "data-group=\"2[5, 13]\""));
  EXPECT_EQ(count(html, "<tr class=\"policy "), 1u);
  EXPECT_EQ(count(html, "class=\"axis-break\""), 1u);  // 30 s against microseconds
}

TEST_F(ReportReplayFixtures, PyTorchsTenMinuteWatchdogBreaksTheAxis) {
  // The dumps carry PyTorch's default timeout: 600 s of waiting after 1 ms of all_reduces.
  const std::string html = replay_and_report(*root_ + "/missing_rank", *root_ + "/replay_600s", "", 1);
  expect_no_pass_badge(html);
  EXPECT_TRUE(contains(html, "<dd id=\"culprits\"><strong>2</strong></dd>"));
  EXPECT_EQ(count(html, "class=\"axis-break\""), 1u);
  EXPECT_TRUE(contains(html, "The time axis is broken between 1.02 ms and 599."));
  EXPECT_TRUE(contains(html, "<title>the watchdog fires at 600.00 s</title>"));
  EXPECT_EQ(count(html, "class=\"rank-row culprit missing\" data-rank=\"2\""), 1u);
  EXPECT_EQ(count(html, "class=\"slice waiting\""), 3u);
  EXPECT_TRUE(contains(html, "<td class=\"num\">600.0</td>"));  // the policies' watchdog (s)
}

TEST_F(ReportReplayFixtures, CleanDumpsGetNoIncidentAndNoPass) {
  const std::string html = replay_and_report(*root_ + "/matched", *root_ + "/replay_clean", "", 0);
  expect_self_contained(html);
  expect_no_pass_badge(html);
  EXPECT_TRUE(contains(html, "<span class=\"badge neutral\" id=\"incident\">no divergence</span>"));
  EXPECT_EQ(html.find("class=\"axis-break\""), std::string::npos);
  EXPECT_EQ(html.find("<table id=\"recoveries\">"), std::string::npos);
  EXPECT_EQ(count(html, "class=\"op completed\""), 6u);  // 5 all_reduces and a broadcast
}

TEST_F(ReportReplayFixtures, AMalformedReplayJsonIsRefusedNamingTheFileAndTheField) {
  const std::string dir = *root_ + "/replay_bad";
  fs::remove_all(dir);
  ASSERT_EQ(run_tandem(fmt::format("replay '{}/training_hang' --out '{}'", *root_, dir)).exit_code, 1);
  const std::string file = dir + "/replay.json";
  const std::string original = read_text(file);
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string text = original;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    std::ofstream(file) << text;
  };
  edited("\"kind\": \"replay\"", "\"kind\": \"results\"");
  expect_usage_error(run_tandem("report " + dir), file + ": kind: expected \"replay\", got \"results\"");
  edited("\"format_version\": 1", "\"format_version\": 2");
  expect_usage_error(run_tandem("report " + dir), file + ": format_version 2 is not supported");
  edited("\"culprit_ranks\": [\n    13\n  ]", "\"culprit_ranks\": \"13\"");
  expect_usage_error(run_tandem("report " + dir), file + ": culprit_ranks: expected a list of integers, got string");
  edited("\"start_us\": ", "\"begin_us\": ");
  expect_usage_error(run_tandem("report " + dir), file + ": ops[0].start_us: missing");
  edited("\"kind\": \"replay\"", "\"kind\": \"replay\", \"extra\": 1");
  expect_usage_error(run_tandem("report " + dir), file + ": (top level): unknown field 'extra'");
  std::ofstream(file) << "{\"ops\": [";
  expect_usage_error(run_tandem("report " + dir), file + ": not valid JSON");
  std::ofstream(file) << original;
  expect_usage_error(run_tandem(fmt::format("report '{}' --compare '{}'", dir, dir)), "--compare is for runs");
  ASSERT_EQ(run_tandem("report " + dir).exit_code, 0);
}

}  // namespace
