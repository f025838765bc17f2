// Runs the built `tandem` binary (TANDEM_BINARY) and checks what a user sees: stdout, stderr and
// the exit code.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/algorithms.h"
#include "tests/support/cli_runner.h"

namespace {

using tandem::testing::contains;
using tandem::testing::expect_usage_error;
using tandem::testing::fields_of;
using tandem::testing::lines_of;
using tandem::testing::Outcome;
using tandem::testing::run_tandem;
using tandem::testing::temp_path;

// A usage error: nothing on stdout, exactly one line on stderr, exit code 2.
// The data rows of a bench table: lines not starting with '#'.
std::vector<std::vector<std::string>> table_rows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : lines_of(out)) {
    if (!line.empty() && line[0] != '#') rows.push_back(fields_of(line));
  }
  return rows;
}

TEST(Cli, VersionAndHelp) {
  Outcome version = run_tandem("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("tandem ", 0), 0u) << version.out;

  Outcome help = run_tandem("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(contains(help.out, "schedule"));
  EXPECT_TRUE(contains(help.out, "bench"));

  Outcome bench_help = run_tandem("bench --help");
  EXPECT_EQ(bench_help.exit_code, 0);
  for (const char* flag :
       {"--minbytes", "--maxbytes", "--stepfactor", "--stepbytes", "--ngpus", "--iters", "--warmup_iters", "--check",
        "--datatype", "--op", "--root", "--algo", "--backend", "--ranks-per-node", "--channels"}) {
    EXPECT_TRUE(contains(bench_help.out, flag)) << flag;
  }
  Outcome schedule_help = run_tandem("schedule --help");
  EXPECT_EQ(schedule_help.exit_code, 0);
  for (const char* flag : {"--collective", "--algo", "--nranks", "--root", "--channels", "--pipeline-chunks",
                           "--ranks-per-node", "--json", "--check"}) {
    EXPECT_TRUE(contains(schedule_help.out, flag)) << flag;
  }
}

TEST(Cli, NoSubcommandIsAUsageError) { expect_usage_error(run_tandem(""), "subcommand"); }

TEST(Cli, BenchPrintsTheNcclTestsTable) {
  Outcome outcome = run_tandem("bench all_reduce --backend host -b 256K -e 1M -f 2 -g 4 -n 3 -w 1");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_TRUE(contains(outcome.out,
                       "# nThread 1 nGpus 4 minBytes 262144 maxBytes 1048576 step: 2(factor) warmup iters: 1 "
                       "iters: 3 agg iters: 1 validation: 1 graph: 0"))
      << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "# Using devices"));
  EXPECT_TRUE(contains(outcome.out, "#  Rank  3 Group  0"));
  EXPECT_TRUE(contains(outcome.out, "out-of-place"));
  EXPECT_TRUE(contains(outcome.out, "#wrong"));
  EXPECT_TRUE(contains(outcome.out, "# Out of bounds values : 0 OK"));

  auto rows = table_rows(outcome.out);
  ASSERT_EQ(rows.size(), 3u) << outcome.out;
  const std::vector<std::string> sizes{"262144", "524288", "1048576"};
  double busbw_sum = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    ASSERT_EQ(row.size(), 13u) << outcome.out;
    EXPECT_EQ(row[0], sizes[i]);
    EXPECT_EQ(std::stoll(row[1]), std::stoll(sizes[i]) / 4);  // float elements
    EXPECT_EQ(row[2], "float");
    EXPECT_EQ(row[3], "sum");
    EXPECT_EQ(row[4], "-1");
    for (size_t half : {size_t{5}, size_t{9}}) {
      double time_us = std::stod(row[half]), algbw = std::stod(row[half + 1]), busbw = std::stod(row[half + 2]);
      EXPECT_GT(time_us, 0);
      // algbw = S / t (printed with 2 decimals): recompute from the printed time.
      double expected_algbw = std::stod(sizes[i]) / (time_us * 1e-6) / 1e9;
      EXPECT_NEAR(algbw, expected_algbw, 0.006 + expected_algbw * 0.01) << fmt::format("{}", fmt::join(row, " "));
      // busbw = algbw * 2(n-1)/n, up to the rounding of both printed values.
      EXPECT_NEAR(busbw, algbw * 1.5, 0.006 * 1.5 + 0.006);
      EXPECT_EQ(row[half + 3], "0");
      busbw_sum += busbw;
    }
  }
  // Footer: mean busbw over all six results.
  for (const std::string& line : lines_of(outcome.out)) {
    if (line.rfind("# Avg bus bandwidth    : ", 0) == 0) {
      EXPECT_NEAR(std::stod(line.substr(25)), busbw_sum / 6, 0.01);
    }
  }
  EXPECT_TRUE(contains(outcome.out, "# Avg bus bandwidth    : "));
}

// Every collective, on a prime rank count, with the nccl-tests count arithmetic and a clean check.
TEST(Cli, BenchEveryCollectiveChecksClean) {
  const std::map<std::string, std::string> collectives{
      {"all_reduce", "all_reduce"}, {"reducescatter", "reduce_scatter"},
      {"allgather", "all_gather"},  {"broadcast", "broadcast"},
      {"reduce", "reduce"},         {"alltoall", "all_to_all"},
      {"sendrecv", "send_recv"}};
  for (const auto& [spelling, collective] : collectives) {
    SCOPED_TRACE(spelling);
    Outcome outcome = run_tandem(fmt::format("bench {} -b 1K -e 16K -f 4 -g 3 -n 2 -r 1", spelling));
    ASSERT_EQ(outcome.exit_code, 0) << outcome.err << outcome.out;
    auto rows = table_rows(outcome.out);
    ASSERT_EQ(rows.size(), 3u) << outcome.out;
    const bool total = collective == "all_gather" || collective == "reduce_scatter" || collective == "all_to_all";
    const bool reduction = collective == "all_reduce" || collective == "reduce_scatter" || collective == "reduce";
    const bool rooted = collective == "broadcast" || collective == "reduce";
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& row = rows[i];
      ASSERT_EQ(row.size(), 13u) << outcome.out;
      const long long bytes = 1024LL << (2 * i);
      const long long count = total ? bytes / 4 / 3 : bytes / 4;
      EXPECT_EQ(std::stoll(row[1]), count);
      EXPECT_EQ(std::stoll(row[0]), total ? count * 3 * 4 : bytes);
      EXPECT_EQ(row[3], reduction ? "sum" : "none");
      EXPECT_EQ(row[4], rooted ? "1" : "-1");
      EXPECT_EQ(row[8], "0") << outcome.out;
      EXPECT_TRUE(row[12] == "0" || (row[9] == "N/A" && row[12] == "N/A")) << outcome.out;
    }
    EXPECT_TRUE(contains(outcome.out, "# Out of bounds values : 0 OK"));
  }
}

TEST(Cli, BenchEveryDataTypeAndOpChecksClean) {
  for (const char* dtype : {"float", "half", "bfloat16", "double", "int32", "int64", "bf16", "f16"}) {
    for (const char* op : {"sum", "prod", "min", "max", "avg"}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype, op));
      Outcome outcome = run_tandem(fmt::format("bench all_reduce -b 4K -e 4K -g 5 -n 1 -w 0 -d {} -o {}", dtype, op));
      ASSERT_EQ(outcome.exit_code, 0) << outcome.err << outcome.out;
      auto rows = table_rows(outcome.out);
      ASSERT_EQ(rows.size(), 1u);
      EXPECT_EQ(rows[0][3], op);
      EXPECT_EQ(rows[0][8], "0");
      EXPECT_EQ(rows[0][12], "0");
    }
  }
}

TEST(Cli, BenchWithoutCheckShowsNotApplicable) {
  Outcome outcome = run_tandem("bench all_gather -b 1K -e 1K -g 2 -n 1 -c 0");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  auto rows = table_rows(outcome.out);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0][8], "N/A");
  EXPECT_TRUE(contains(outcome.out, "validation: 0"));
}

TEST(Cli, BenchUsageErrorsAreOneLine) {
  expect_usage_error(run_tandem("bench all_reduce --bogus"), "--bogus");
  expect_usage_error(run_tandem("bench"), "collective");
  expect_usage_error(run_tandem("bench allreduc -b 8 -e 8"), "allreduc");
  expect_usage_error(run_tandem("bench all_reduce --algo rign -b 8 -e 8"), "rign");
  expect_usage_error(run_tandem("bench all_reduce -d float8 -b 8 -e 8"), "float8");
  expect_usage_error(run_tandem("bench all_reduce -o mean -b 8 -e 8"), "mean");
  expect_usage_error(run_tandem("bench all_reduce -b 8X"), "8X");
  expect_usage_error(run_tandem("bench all_reduce -b 64M -e 8"), "-b");
  expect_usage_error(run_tandem("bench all_reduce -g 0"), "--ngpus");
  expect_usage_error(run_tandem("bench all_reduce -n abc"), "--iters");
  expect_usage_error(run_tandem("bench broadcast -g 4 -r 4 -b 8 -e 8"), "root");
  expect_usage_error(run_tandem("bench all_to_all --algo ring -g 4 -b 8 -e 8"), "all_to_all");
  // Without a GPU ("no CUDA device") or without CUDA in the build, the cuda backend is one clear line.
  expect_usage_error(run_tandem("bench all_reduce --backend cuda -b 8 -e 8"), "backend 'cuda'");

  expect_usage_error(run_tandem("bench all_reduce --backend quantum -b 8 -e 8"), "quantum");
}

TEST(Cli, ScheduleTextShowsRoundsAndOps) {
  Outcome outcome = run_tandem("schedule --collective all_reduce --algo ring --nranks 4");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(outcome.out.rfind("all_reduce ring: 4 ranks, ", 0), 0u) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, " rounds, "));
  EXPECT_TRUE(contains(outcome.out, "round 0\n"));
  EXPECT_TRUE(contains(outcome.out, "  r0 L0 send In["));
  EXPECT_TRUE(contains(outcome.out, "recv-reduce "));
}

TEST(Cli, ScheduleJsonRoundTripsThroughCheck) {
  struct Case {
    const char* args;
    const char* summary;
  };
  for (const Case& c :
       {Case{"--collective all_reduce --algo ring --nranks 8", "all_reduce ring: 8 ranks"},
        Case{"--collective broadcast --algo ring --nranks 5 --root 2", "broadcast ring: 5 ranks"},
        Case{"--collective all_reduce --algo tree --nranks 6 --pipeline-chunks 3", "all_reduce tree: 6 ranks"},
        Case{"--collective reduce_scatter --algo halving_doubling --nranks 7",
             "reduce_scatter halving_doubling: 7 ranks"},
        Case{"--collective all_reduce --algo hierarchical --nranks 8 --ranks-per-node 4",
             "all_reduce hierarchical: 8 ranks"},
        Case{"--collective alltoall --algo direct --nranks 3", "all_to_all direct: 3 ranks"},
        Case{"--collective all_reduce --algo ring --nranks 16 --symmetric", "all_reduce ring: 16 ranks"}}) {
    SCOPED_TRACE(c.args);
    Outcome json = run_tandem(fmt::format("schedule {} --json", c.args));
    ASSERT_EQ(json.exit_code, 0) << json.err;
    EXPECT_TRUE(contains(json.out, "schema_version"));
    const std::string path = temp_path("schedule.json");
    std::ofstream(path) << json.out;

    Outcome check = run_tandem(fmt::format("schedule --check '{}'", path));
    ASSERT_EQ(check.exit_code, 0) << check.err;
    EXPECT_EQ(check.out.rfind("ok: ", 0), 0u) << check.out;
    EXPECT_TRUE(contains(check.out, c.summary)) << check.out;
  }
}

TEST(Cli, ScheduleCheckReportsBadFilesInOneLine) {
  Outcome missing = run_tandem("schedule --check /nonexistent/schedule.json");
  EXPECT_EQ(missing.exit_code, 2);
  ASSERT_EQ(lines_of(missing.err).size(), 1u) << missing.err;
  EXPECT_TRUE(contains(missing.err, "tandem: error: cannot read schedule '/nonexistent/schedule.json': No such file or directory"));

  // A schema version from the future is a format error naming the file.
  Outcome json = run_tandem("schedule --collective all_reduce --algo ring --nranks 2 --json");
  ASSERT_EQ(json.exit_code, 0);
  std::string text = json.out;
  size_t at = text.find("\"schema_version\"");
  ASSERT_NE(at, std::string::npos);
  size_t digit = text.find_first_of("0123456789", at);
  ASSERT_NE(digit, std::string::npos);
  text[digit] = '9';
  const std::string path = temp_path("future.json");
  std::ofstream(path) << text;
  Outcome future = run_tandem(fmt::format("schedule --check '{}'", path));
  EXPECT_EQ(future.exit_code, 2);
  ASSERT_EQ(lines_of(future.err).size(), 1u) << future.err;
  EXPECT_TRUE(contains(future.err, "tandem: error: " + path + ": ")) << future.err;
}

TEST(Cli, ScheduleUsageErrors) {
  expect_usage_error(run_tandem("schedule --algo ring"), "--nranks");
  expect_usage_error(run_tandem("schedule --collective all_to_all --algo ring --nranks 4"), "all_to_all");
  expect_usage_error(run_tandem("schedule --collective broadcast --nranks 4 --root 7"), "--root");
  expect_usage_error(run_tandem("schedule --check x.json --nranks 4"), "--check");
  expect_usage_error(run_tandem("schedule --collective all_reduce --nranks 4 --channels 65"), "--channels");
}

// schedule --list prints the registry: every algorithm with the collectives it builds.
TEST(Cli, ScheduleListsTheRegistry) {
  Outcome list = run_tandem("schedule --list");
  ASSERT_EQ(list.exit_code, 0) << list.err;
  for (const tandem::AlgorithmInfo& info : tandem::algorithm_registry()) {
    bool found = false;
    for (const std::string& line : lines_of(list.out)) {
      if (line.rfind(std::string(tandem::name(info.algorithm)) + " ", 0) != 0) continue;
      found = true;
      // The collectives column: names separated by ", ", up to the run of spaces before parameters.
      std::string column = line.substr(line.find_first_not_of(' ', tandem::name(info.algorithm).size()));
      column = column.substr(0, column.find("  "));
      std::vector<std::string> listed;
      for (size_t start = 0; start < column.size();) {
        const size_t end = std::min(column.find(", ", start), column.size());
        listed.push_back(column.substr(start, end - start));
        start = end + 2;
      }
      std::vector<std::string> expected;
      for (tandem::Collective c : info.collectives) expected.emplace_back(tandem::name(c));
      EXPECT_EQ(listed, expected) << line;
    }
    EXPECT_TRUE(found) << tandem::name(info.algorithm) << "\n" << list.out;
  }
}

// Every simulator model the --algo help lists runs when named (nvls_tree was refused before).
TEST(Cli, BenchSimRunsEveryNamedSimulatorModel) {
  for (const char* args : {"all_reduce --nodes 1 --algo nvls", "all_reduce --nodes 2 --algo nvls_tree",
                           "all_reduce --nodes 2 --sharp --algo collnet_direct",
                           "all_reduce --nodes 2 --sharp --algo collnet_chain", "all_to_all --nodes 2 --algo p2p"}) {
    const std::string algo = std::string(args).substr(std::string(args).rfind(' ') + 1);
    Outcome o = run_tandem(fmt::format("bench {} --backend sim --cluster dgx-h100 -b 64M -e 64M", args));
    EXPECT_EQ(o.exit_code, 0) << args << "\n" << o.err;
    EXPECT_TRUE(contains(o.out, "# Simulated with: " + algo + "/")) << args << "\n" << o.out;
  }
}

// bench --backend sim prints the same table from simulation: busbw = algbw x 2(n-1)/n, #wrong N/A,
// and a ring all_reduce on one DGX-H100 reaches NVLink's effective 370.8 GB/s at large sizes.
TEST(Cli, BenchSimPrintsTheTableFromSimulation) {
  const Outcome outcome =
      run_tandem("bench all_reduce --backend sim --cluster dgx-h100 --nodes 1 -b 1M -e 1G -f 32 --algo ring");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  int rows = 0;
  double last_busbw = 0;
  for (const std::string& line : lines_of(outcome.out)) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> f = fields_of(line);
    ASSERT_EQ(f.size(), 13u) << line;
    const double algbw = std::stod(f[6]);
    last_busbw = std::stod(f[7]);
    EXPECT_NEAR(last_busbw, algbw * 2 * 7 / 8, 0.02 * last_busbw + 0.01) << line;
    EXPECT_EQ(f[8], "N/A") << line;
    ++rows;
  }
  EXPECT_EQ(rows, 3);
  EXPECT_NEAR(last_busbw, 370.8, 5.0);
}

// The packet model needs ns-3 defaults that ns-3 only reads as it loads (sim/simulator.h): tandem
// re-executes itself to put them in place. With them, one 16 MiB NVLink transfer costs the fluid
// time plus headers and a handshake (about 1.13x); with ns-3's own 128 KiB TCP buffers it ran
// window-bound at 2.9x. Core's direct schedule on both (NCCL's p2p channels are a fluid-model
// feature).
TEST(Cli, PacketModelRunsWithItsNs3Defaults) {
  std::map<std::string, double> time_us;
  for (const char* network : {"fluid", "packet"}) {
    const Outcome outcome = run_tandem(fmt::format(
        "bench send_recv --backend sim --cluster dgx-h100 --nodes 1 -g 2 -b 16M -e 16M --algo direct --network {}",
        network));
    ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
    EXPECT_EQ(outcome.err, "");
    for (const std::string& line : lines_of(outcome.out)) {
      if (line.empty() || line[0] == '#') continue;
      time_us[network] = std::stod(fields_of(line).at(5));
    }
  }
  ASSERT_EQ(time_us.size(), 2u);
  EXPECT_GT(time_us["packet"], time_us["fluid"]);
  EXPECT_LT(time_us["packet"], 1.3 * time_us["fluid"]) << "window-bound: ns-3's TCP defaults are in place";
}

// Every output is checked, standard output included: a command whose output could not be written
// (a full disk: /dev/full) fails with one line, instead of exiting 0 having written nothing.
TEST(Cli, AFailedWriteOfStandardOutputIsAnError) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  const std::string err = temp_path("full_stderr");
  for (const std::string args : {"schedule --collective all_reduce --nranks 64 --json", "topo --cluster dgx-h100",
                                 "bound all_reduce 1G", "reliability --gpus 1024",
                                 "bench all_reduce --backend sim --nodes 2 -b 1M -e 1M", "--help"}) {
    const int status = std::system(fmt::format("'{}' {} >/dev/full 2>'{}'", TANDEM_BINARY, args, err).c_str());
    ASSERT_TRUE(WIFEXITED(status)) << args;
    EXPECT_EQ(WEXITSTATUS(status), 3) << args;  // internal: the output could not be written
    const std::vector<std::string> lines = lines_of(tandem::testing::read_text(err));
    ASSERT_EQ(lines.size(), 1u) << args;
    EXPECT_TRUE(contains(lines[0], "tandem: error: could not write the standard output")) << lines[0];
  }
  std::filesystem::remove(err);
}

// Output paths are checked before any work: a --trace into a missing folder used to fail after the
// whole run, having computed it for nothing.
TEST(Cli, OutputPathsAreCheckedBeforeTheRun) {
  const Outcome trace = run_tandem("bench all_reduce --backend sim --nodes 2 -b 1M -e 1M --trace /nonexistent/t.json");
  EXPECT_EQ(trace.exit_code, 2) << trace.err;
  EXPECT_TRUE(contains(trace.err, "--trace: the folder '/nonexistent' of '/nonexistent/t.json' does not exist"))
      << trace.err;
  EXPECT_TRUE(trace.out.empty()) << trace.out;  // nothing ran
  const Outcome folder = run_tandem("run scenarios/smoke-8xh100.yaml --trace /tmp");
  EXPECT_EQ(folder.exit_code, 2);
  EXPECT_TRUE(contains(folder.err, "'/tmp' is a folder, not a file to write")) << folder.err;
  const Outcome file = run_tandem("run scenarios/smoke-8xh100.yaml --out README.md");
  EXPECT_EQ(file.exit_code, 2);
  EXPECT_TRUE(contains(file.err, "'README.md' is a file, not a folder to write into")) << file.err;
  const Outcome report = run_tandem("report /nonexistent -o /nonexistent/r.html");
  EXPECT_EQ(report.exit_code, 2);
  EXPECT_TRUE(contains(report.err, "--output: the folder '/nonexistent'")) << report.err;
}

// Values a careless or hostile user gives, each refused with one line (they used to run: 300-digit
// times, infinite rates, a contradictory policy list, simulator options on a real backend).
TEST(Cli, PhysicalRangesAndContradictionsAreRefused) {
  expect_usage_error(run_tandem("bound all_reduce 1G --nvlink-latency-us 1e300"), "--nvlink-latency-us");
  expect_usage_error(run_tandem("bound all_reduce 1G --oversubscription 1e300"), "--oversubscription");
  // Bounds said in the shortest form (CLI11's Range printed "0.010000 to 100000.000000"), in the
  // words a scenario's cluster key gets (app/common/cluster_keys.h: one table for both).
  expect_usage_error(run_tandem("bound all_reduce 1G --nic-gbps 1e-300"),
                     "--nic-gbps must be a number >= 0.01 and at most 100000 (got '1e-300')");
  expect_usage_error(run_tandem("bound all_reduce 1G --nic-gbps fast"), "--nic-gbps");
  expect_usage_error(run_tandem("reliability --gpus 16 --rate-scale 1e308"), "--rate-scale: 1e308 is outside 0 to 1e+06");
  expect_usage_error(run_tandem("reliability --gpus 16 --cause-rate faulty_gpu=1e300"), "--cause-rate");
  expect_usage_error(run_tandem("reliability --gpus 16 --recovery none,retry"), "'none' cannot be combined");
  expect_usage_error(run_tandem("bench all_reduce --backend host --network packet -b 8 -e 8"),
                     "--network applies to --backend sim only");
  expect_usage_error(run_tandem("bench all_reduce --ranks-per-node 0 -b 8 -e 8"), "--ranks-per-node");
  expect_usage_error(run_tandem("schedule --collective all_reduce --nranks 8 --ranks-per-node 0"), "--ranks-per-node");
  expect_usage_error(run_tandem("replay . --ops -1"), "--ops");
  expect_usage_error(run_tandem("frobnicate"), "unknown command 'frobnicate' (the commands: schedule, bench");
  // The same ranges hold in scenario files (models/cluster.h).
  const Outcome ok = run_tandem("bound all_reduce 1G --nic-gbps 800 --oversubscription 2 --nvlink-latency-us 1");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

}  // namespace
