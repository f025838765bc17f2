// tandem calibrate's pieces: the bounded least squares, the nccl-tests log reader, calibration
// profiles, and the fit end to end on logs the simulator wrote under known parameters.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "app/calibrate/calibration.h"
#include "app/calibrate/least_squares.h"
#include "app/calibrate/nccl_tests_log.h"
#include "app/common/nccl_tests_table.h"
#include "app/scenario/scenario.h"
#include "core/error.h"
#include "core/sizes.h"
#include "core/text.h"
#include "sim/sweep.h"

namespace tandem::app {
namespace {

// The message of the Error that `run` throws (empty when it throws none).
template <typename Run>
std::string error_of(Run&& run) {
  try {
    run();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// ---- Least squares ----

TEST(BoundedLeastSquares, FitsAnExponentialExactly) {
  // y = a exp(b t) at t = 0..5 with a = 2, b = -0.5.
  const BatchResiduals residuals = [](const std::vector<std::vector<double>>& points) {
    std::vector<std::vector<double>> out;
    for (const std::vector<double>& x : points) {
      std::vector<double> r;
      for (int t = 0; t <= 5; ++t) r.push_back(x[0] * std::exp(x[1] * t) - 2 * std::exp(-0.5 * t));
      out.push_back(r);
    }
    return out;
  };
  const LeastSquaresResult fit = bounded_least_squares(residuals, {1, 0}, {0, -2}, {10, 2});
  EXPECT_TRUE(fit.converged);
  EXPECT_NEAR(fit.x[0], 2, 1e-5);
  EXPECT_NEAR(fit.x[1], -0.5, 1e-5);
}

TEST(BoundedLeastSquares, StopsAtTheBoundWhenTheMinimumIsOutside) {
  // Minimum of (x0 - 5)^2 + (x1 + 1)^2 is (5, -1); the box is [0, 3] x [0, 3]: answer (3, 0).
  const BatchResiduals residuals = [](const std::vector<std::vector<double>>& points) {
    std::vector<std::vector<double>> out;
    for (const std::vector<double>& x : points) out.push_back({x[0] - 5, x[1] + 1});
    return out;
  };
  const LeastSquaresResult fit = bounded_least_squares(residuals, {1, 1}, {0, 0}, {3, 3});
  EXPECT_NEAR(fit.x[0], 3, 1e-9);
  EXPECT_NEAR(fit.x[1], 0, 1e-9);
}

TEST(BoundedLeastSquares, RefusesAStartOutsideTheBox) {
  const BatchResiduals residuals = [](const std::vector<std::vector<double>>& points) {
    return std::vector<std::vector<double>>(points.size(), std::vector<double>{0.0});
  };
  EXPECT_NE(error_of([&] { bounded_least_squares(residuals, {4}, {0}, {3}); }).find("outside"), std::string::npos);
}

TEST(SolveLinear, SolvesAndReportsSingular) {
  const std::vector<double> x = solve_linear({{2, 1}, {1, 3}}, {3, 5});
  ASSERT_EQ(x.size(), 2u);
  EXPECT_NEAR(x[0], 0.8, 1e-12);
  EXPECT_NEAR(x[1], 1.4, 1e-12);
  EXPECT_TRUE(solve_linear({{1, 2}, {2, 4}}, {1, 2}).empty());
}

// ---- The log reader ----

// An nccl-tests 2.x all_reduce_perf log as NVIDIA/nccl-tests prints it (two hosts, NCCL_DEBUG=INFO).
constexpr const char* kNcclTestsLog = R"(# nccl-tests version 2.13.9 nccl-headers=21903 nccl-library=21903
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41 on     node-a device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  42 on     node-a device  1 [0x2a] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  43 on     node-b device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  44 on     node-b device  1 [0x2a] NVIDIA H100 80GB HBM3
node-a:41:41 [0] NCCL INFO NCCL_ALGO set by environment to Ring
node-a:41:41 [0] NCCL INFO NCCL_PROTO set by environment to Simple
NCCL version 2.19.3+cuda12.3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    45.12   23.24   34.86      0    44.98   23.31   34.97      0
     4194304       1048576     float     sum      -1    98.70   42.50   63.74      0    98.10   42.76   64.13      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 49.42
#
)";

TEST(NcclTestsLog, ReadsAnNcclTestsLog) {
  const MeasurementFile file = parse_nccl_tests_log(kNcclTestsLog, "ar.log");
  EXPECT_EQ(file.nranks, 4);
  EXPECT_EQ(file.nodes, 2);
  EXPECT_EQ(file.nccl_version, "2.19.3+cuda12.3");
  ASSERT_EQ(file.rows.size(), 2u);
  EXPECT_EQ(file.rows[0].label, "ar.log:17");
  EXPECT_EQ(file.rows[0].collective, Collective::kAllReduce);
  EXPECT_EQ(file.rows[0].bytes, 1048576);
  EXPECT_EQ(file.rows[0].dtype, DataType::kF32);
  EXPECT_EQ(file.rows[0].algorithm, "ring");
  EXPECT_EQ(file.rows[0].protocol, "Simple");
  EXPECT_DOUBLE_EQ(file.rows[0].time_us, 45.12);
  EXPECT_DOUBLE_EQ(file.rows[1].time_us, 98.70);
}

TEST(NcclTestsLog, ReadsLinesTaggedByTheLauncher) {
  std::string tagged;
  size_t begin = 0;
  const std::string text = kNcclTestsLog;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    tagged += "[1,0]<stdout>:" + text.substr(begin, end - begin) + "\n";
    begin = end + 1;
  }
  const MeasurementFile file = parse_nccl_tests_log(tagged, "ar.log");
  EXPECT_EQ(file.nranks, 4);
  ASSERT_EQ(file.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(file.rows[1].time_us, 98.70);
  EXPECT_EQ(parse_nccl_tests_log("0: # nThread 1 nGpus 2\n0:            8             2     float     sum      -1    "
                                 "10.00    0.00    0.00      0    10.00    0.00    0.00      0\n",
                                 "x.log", Collective::kAllReduce)
                .rows.size(),
            1u);
}

TEST(NcclTestsLog, ReadsTheTableTandemBenchPrints) {
  // tandem bench's own table: the rows through format_row, the header as run_sim_bench prints it.
  std::string log =
      "# tandem 0.1.0 bench all_gather: nccl-tests-style table from simulation\n"
      "# nThread 1 nGpus 8 minBytes 1024 maxBytes 1024 step: 1048576(bytes) warmup iters: 0 iters: 1 agg iters: 1 "
      "validation: 0 graph: 0\n#\n# Backend: sim (fluid network), 8 GPUs per node\n#\n";
  log += format_column_header();
  BenchRow row;
  row.counts = nccl_tests_counts(Collective::kAllGather, 1024, DataType::kBF16, 8);
  row.type_name = nccl_tests_type_name(DataType::kBF16);
  row.redop = "none";
  row.out_of_place = make_result(12.5e-6, row.counts, Collective::kAllGather, 8, std::nullopt);
  row.in_place = row.out_of_place;
  log += format_row(row);
  log += format_footer({row});
  const MeasurementFile file = parse_nccl_tests_log(log, "ag.log");
  EXPECT_EQ(file.nranks, 8);
  ASSERT_EQ(file.rows.size(), 1u);
  EXPECT_EQ(file.rows[0].collective, Collective::kAllGather);
  EXPECT_EQ(file.rows[0].dtype, DataType::kBF16);
  EXPECT_DOUBLE_EQ(file.rows[0].time_us, 12.5);
}

TEST(NcclTestsLog, TheCollectiveComesFromTheFileNameOrTheCaller) {
  const std::string table =
      "# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n"
      "           8             2     float     sum      -1    10.00    0.00    0.00      0    10.00    0.00    0.00   "
      "   0\n";
  EXPECT_EQ(parse_nccl_tests_log(table, "logs/sendrecv_perf.txt").rows[0].collective, Collective::kSendRecv);
  // An alltoall row's count is one peer's share: 8 B on 2 ranks is 1 float each.
  const std::string alltoall_table =
      "# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n"
      "           8             1     float     none     -1    10.00    0.00    0.00      0    10.00    0.00    0.00   "
      "   0\n";
  EXPECT_EQ(parse_nccl_tests_log(alltoall_table, "x.log", Collective::kAllToAll).rows[0].collective,
            Collective::kAllToAll);
  EXPECT_NE(
      error_of([&] { parse_nccl_tests_log(table, "x.log"); }).find("x.log: the log does not say which collective"),
      std::string::npos);
}

TEST(NcclTestsLog, AMalformedLineIsOneErrorWithFileAndLine) {
  const std::string header =
      "# Collective test starting: all_reduce_perf\n"
      "# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n";
  const std::string good =
      "           8             2     float     sum      -1    10.00    0.00    0.00      0    10.00    0.00    0.00   "
      "   0\n";
  struct Case {
    std::string line;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"           8             2     float     sum      -1    10.00    0.00    0.00      0\n", "this one has 9"},
      {"           8             2     flaot     sum      -1    10.00    0.00    0.00      0    10.00    0.00    0.00  "
       "    0\n",
       "type 'flaot'"},
      {"           8             2     float     sum      -1    ten    0.00    0.00      0    10.00    0.00    0.00    "
       "  0\n",
       "time 'ten'"},
      {"           8             2     float     sum      -1    10.00    0.00    0.00      3    10.00    0.00    0.00  "
       "    0\n",
       "3 wrong elements"},
      {"Segmentation fault (core dumped)\n", "not a line of nccl-tests output"},
      {"# nThread x nGpus 2\n", "must be positive integers"},
  };
  for (const Case& c : cases) {
    const std::string message = error_of([&] { parse_nccl_tests_log(header + good + c.line, "bad.log"); });
    EXPECT_EQ(message.rfind("bad.log:4: ", 0), 0u) << message;
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_NE(error_of([&] { parse_nccl_tests_log(header, "empty.log"); }).find("empty.log: no table rows"),
            std::string::npos);
}

TEST(NcclTestsLog, ReadsThePublishedRowsCsv) {
  const std::string csv =
      "# comment\n"
      "id,system,gpus,nodes,collective,algorithm,size_bytes,metric,value_low,value_high,source\n"
      "1,8xH100-SXM,8,1,all_reduce,ring,2000000000,busbw_GBps,365,375,x\n"
      "S1,DGX H100,8,1,all_reduce,auto,8,time_us,13,14,y\n";
  const MeasurementFile file = parse_reference_csv(csv, "bench/data/rows.csv");
  ASSERT_EQ(file.rows.size(), 2u);
  EXPECT_EQ(file.rows[0].label, "rows.csv#1");
  EXPECT_EQ(file.rows[0].algorithm, "ring");
  // busbw 370 GB/s on 8 GPUs: algbw = 370 / (2 x 7 / 8); time = 2e9 B / algbw.
  EXPECT_NEAR(file.rows[0].time_us, 2e9 / (370e9 / 1.75) * 1e6, 1e-6);
  EXPECT_DOUBLE_EQ(file.rows[1].time_us, 13.5);
  EXPECT_NE(error_of([&] { parse_reference_csv("id,system\n", "r.csv"); }).find("r.csv:1: expected the header"),
            std::string::npos);
}

TEST(NcclTestsLog, ReadsTheMultiNodeRowsCsv) {
  const std::string csv =
      "id,system,gpus,nodes,gpus_per_node,nics_per_node,nic_gbps,fabric,collective,algorithm,protocol,size_bytes,"
      "metric,value_low,value_high,source,notes\n"
      "M3,8xH100 4x400G RoCE,40,5,8,4,400,RoCE,all_reduce,ring,auto,1073741824,busbw_GBps,190,190,x,a note, with a "
      "comma\n"
      "S1,DGX H100,8,1,8,-,-,NVLink4,all_reduce,auto,LL,8,time_us,13,14,y,\n";
  const MeasurementFile file = parse_reference_csv(csv, "multi.csv");
  ASSERT_EQ(file.rows.size(), 2u);
  EXPECT_EQ(file.rows[0].nodes, 5);
  EXPECT_EQ(file.rows[0].nics_per_node, 4.0);
  EXPECT_EQ(file.rows[0].nic_gbps, 400.0);
  EXPECT_EQ(file.rows[1].protocol, "LL");
  EXPECT_FALSE(file.rows[1].nics_per_node.has_value());
  EXPECT_DOUBLE_EQ(file.rows[1].time_us, 13.5);
}

// ---- The reader's hardening (issue 32) ----

// A tandem bench table of `collective` on `gpus` GPUs (one row of 1 MiB per entry of `sizes`).
std::string bench_table(Collective collective, int gpus, const std::string& backend_line,
                        const std::vector<int64_t>& sizes = {1 << 20}) {
  std::string log = fmt::format(
      "# tandem 0.1.0 bench {}: nccl-tests-style table from simulation\n"
      "# nThread 1 nGpus {} minBytes 1024 maxBytes 1048576 step: 2(factor) warmup iters: 0 iters: 1 agg iters: 1 "
      "validation: 0 graph: 0\n#\n{}#\n",
      name(collective), gpus, backend_line);
  log += format_column_header();
  for (int64_t bytes : sizes) {
    BenchRow row;
    row.counts = nccl_tests_counts(collective, bytes, DataType::kF32, gpus);
    row.type_name = "float";
    row.redop = is_reduction(collective) ? "sum" : "none";
    row.out_of_place = make_result(50e-6, row.counts, collective, gpus, std::nullopt);
    row.in_place = row.out_of_place;
    log += format_row(row);
  }
  log += format_footer({});
  return log;
}

constexpr const char* kSimBackendLine =
    "# Backend: sim (fluid network), 4 GPUs per node, node-major ring order, algorithm: auto\n";

TEST(NcclTestsLog, EachRunOfALogKeepsItsOwnCollective) {
  const std::string log = bench_table(Collective::kAllReduce, 8, kSimBackendLine) +
                          bench_table(Collective::kAllGather, 8, kSimBackendLine, {1 << 20, 2 << 20});
  const MeasurementFile file = parse_nccl_tests_log(log, "all_gather_perf.log");
  EXPECT_EQ(file.runs, 2);
  EXPECT_EQ(file.nranks, 8);
  ASSERT_EQ(file.rows.size(), 3u);
  EXPECT_EQ(file.rows[0].collective, Collective::kAllReduce);
  EXPECT_EQ(file.rows[1].collective, Collective::kAllGather);
  EXPECT_EQ(file.rows[2].collective, Collective::kAllGather);
  // Two runs that do not name their collective: the file name names one, not two.
  const std::string unnamed =
      "# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor)\n"
      "           8             2     float     sum      -1    10.00    0.00    0.00      0    10.00    0.00    0.00   "
      "   0\n";
  const std::string message = error_of([&] { parse_nccl_tests_log(unnamed + unnamed, "all_gather_perf.log"); });
  EXPECT_EQ(message.rfind("all_gather_perf.log:1: this run (one of 2 in the file) does not say which collective", 0),
            0u)
      << message;
  // --collective says it for every run.
  EXPECT_EQ(parse_nccl_tests_log(unnamed + unnamed, "x.log", Collective::kAllReduce).rows.size(), 2u);
}

TEST(NcclTestsLog, ConcatenatedRunsOnOtherGpusAreRefused) {
  // Two nccl-tests runs, 2 ranks on host a then 2 on host b: not one run on 4 GPUs.
  auto run = [](const std::string& host) {
    return "# Collective test starting: all_reduce_perf\n# nThread 1 nGpus 1 minBytes 8 maxBytes 8\n# Using devices\n"
           "#  Rank  0 Group  0 Pid  41 on " +
           host +
           " device  0 [0x18] NVIDIA H100 80GB HBM3\n"
           "#  Rank  1 Group  0 Pid  42 on " +
           host +
           " device  1 [0x2a] NVIDIA H100 80GB HBM3\n"
           "           8             2     float     sum      -1    10.00    0.00    0.00      0    10.00    0.00    "
           "0.00      0\n";
  };
  const MeasurementFile same = parse_nccl_tests_log(run("a") + run("a"), "ar.log");
  EXPECT_EQ(same.nranks, 2);
  EXPECT_EQ(same.nodes, 1);
  EXPECT_EQ(same.rows.size(), 2u);
  std::string message = error_of([&] { parse_nccl_tests_log(run("a") + run("b"), "ar.log"); });
  EXPECT_EQ(message.rfind(
                "ar.log:7: this run ran on host b and the run at line 1 on host a: a log holds runs of one cluster", 0),
            0u)
      << message;
  message = error_of([&] {
    parse_nccl_tests_log(bench_table(Collective::kAllReduce, 8, kSimBackendLine) +
                             bench_table(Collective::kAllReduce, 16, kSimBackendLine),
                         "ar.log");
  });
  EXPECT_NE(message.find("ar.log:13: this run ran on 16 GPUs and the run at line 1 on 8"), std::string::npos)
      << message;
}

TEST(NcclTestsLog, TandemBenchsAlgorithmLineIsRead) {
  const std::string ring = "# Backend: sim (fluid network), 4 GPUs per node, node-major ring order, algorithm: ring\n";
  EXPECT_EQ(parse_nccl_tests_log(bench_table(Collective::kAllReduce, 8, ring), "ar.log").rows[0].algorithm, "ring");
  const std::string nccl = "# Backend: nccl, algorithm: tree, ranks per node: 8, channels: 2\n";
  EXPECT_EQ(parse_nccl_tests_log(bench_table(Collective::kAllReduce, 8, nccl), "ar.log").rows[0].algorithm, "tree");
  EXPECT_EQ(parse_nccl_tests_log(bench_table(Collective::kAllReduce, 8, kSimBackendLine), "ar.log").rows[0].algorithm,
            "auto");
  // NCCL_ALGO=Ring,Tree leaves NCCL a choice: not the ring.
  EXPECT_EQ(parse_nccl_tests_log("# NCCL_ALGO=Ring,Tree\n" + bench_table(Collective::kAllReduce, 8, kSimBackendLine),
                                 "ar.log")
                .rows[0]
                .algorithm,
            "auto");
}

TEST(NcclTestsLog, CountsAreRangeCheckedNotWrapped) {
  const std::string row =
      "           8             2     float     sum      -1    10.00    0.00    0.00      0    10.00    0.00    0.00   "
      "   0\n";
  struct Case {
    std::string header;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"# nThread 1 nGpus 4294967297 minBytes 8\n", "bad.log:1: nThread 1 x nGpus 4294967297 is more than"},
      {"# nThread 4294967297 nGpus 1 minBytes 8\n", "bad.log:1: nThread 4294967297 x nGpus 1 is more than"},
      {"# nThread 65536 nGpus 65536 minBytes 8\n", "bad.log:1: nThread 65536 x nGpus 65536 is more than"},
      {"#  Rank 4294967296 Group  0 Pid  41 on a device  0 [0x18] H100\n", "bad.log:1: rank '4294967296' is not"},
  };
  for (const Case& c : cases) {
    const std::string message =
        error_of([&] { parse_nccl_tests_log(c.header + row, "bad.log", Collective::kAllReduce); });
    EXPECT_EQ(message.rfind(c.message, 0), 0u) << message;
  }
  const std::string header =
      "id,system,gpus,nodes,collective,algorithm,size_bytes,metric,value_low,value_high,source\n";
  for (const auto& [fields, message] : std::vector<std::pair<std::string, std::string>>{
           {"1,8xH100-SXM,4294967304,1", "r.csv:2: gpus '4294967304' is not an integer from 1 to"},
           {"1,8xH100-SXM,8,4294967297", "r.csv:2: nodes '4294967297' is not an integer from 1 to"},
           {"1,8xH100-SXM,-8,1", "r.csv:2: gpus '-8' is not an integer"}}) {
    const std::string got =
        error_of([&] { parse_reference_csv(header + fields + ",all_reduce,ring,8,time_us,1,2,x\n", "r.csv"); });
    EXPECT_EQ(got.rfind(message, 0), 0u) << got;
  }
  const std::string multi =
      "id,system,gpus,nodes,gpus_per_node,nics_per_node,nic_gbps,fabric,collective,algorithm,protocol,size_bytes,"
      "metric,value_low,value_high,source,notes\n";
  const std::string got = error_of([&] {
    parse_reference_csv(multi + "M,x,16,2,4294967304,4,400,IB,all_reduce,ring,auto,8,time_us,1,2,x,\n", "m.csv");
  });
  EXPECT_EQ(got.rfind("m.csv:2: gpus_per_node '4294967304' is not an integer", 0), 0u) << got;
}

TEST(NcclTestsLog, ARowsSizeAndCountMustAgree) {
  const std::string header = "# nThread 1 nGpus 4 minBytes 8\n";
  auto row = [](const std::string& size, const std::string& count) {
    return fmt::format(
        "{:>12}  {:>12}     float     sum      -1    10.00    0.00    0.00      0    10.00    0.00    "
        "0.00      0\n",
        size, count);
  };
  struct Case {
    Collective collective;
    std::string row;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Collective::kAllReduce, row("8", "3"), "bad.log:2: size 8 B and count 3 disagree for all_reduce of float"},
      {Collective::kAllReduce, row("8", "-2"), "bad.log:2: count '-2' is not a number of elements"},
      {Collective::kAllReduce, row("6", "1"), "bad.log:2: size 6 B and count 1 disagree"},
      {Collective::kAllGather, row("1024", "256"),
       "bad.log:2: size 1024 B and count 256 disagree for all_gather of "
       "float (4 B each, on 4 ranks): expected count 64"},
  };
  for (const Case& c : cases) {
    const std::string message = error_of([&] { parse_nccl_tests_log(header + c.row, "bad.log", c.collective); });
    EXPECT_EQ(message.rfind(c.message, 0), 0u) << message;
  }
  EXPECT_EQ(parse_nccl_tests_log(header + row("1024", "64"), "ok.log", Collective::kAllGather).rows.size(), 1u);
  // With no GPU count stated, an all_gather row says it: size / (count x 4 B).
  EXPECT_EQ(parse_nccl_tests_log(row("1024", "64"), "ok.log", Collective::kAllGather).nranks, 4);
}

TEST(NcclTestsLog, AByteOrderMarkIsReadAndControlBytesAreShownEscaped) {
  const MeasurementFile file = parse_nccl_tests_log(std::string("\xEF\xBB\xBF") + kNcclTestsLog, "ar.log");
  EXPECT_EQ(file.rows.size(), 2u);
  const std::string csv =
      "\xEF\xBB\xBFid,system,gpus,nodes,collective,algorithm,size_bytes,metric,value_low,value_high,source\n"
      "1,8xH100-SXM,8,1,all_reduce,ring,2000000000,busbw_GBps,365,375,x\n";
  EXPECT_EQ(parse_reference_csv(csv, "r.csv").rows.size(), 1u);
  for (const std::string& message :
       {error_of([] { parse_nccl_tests_log("# nThread 1 nGpus 2\n\x1b[2J\x1b]0;pwned\x07\n", "bad\x1b.log"); }),
        error_of([] {
          parse_nccl_tests_log("# nThread 1 nGpus 2\n8 2 fl\x1b[31moat sum -1 1 0 0 0 1 0 0 0\n", "x.log",
                               Collective::kAllReduce);
        }),
        error_of([] {
          parse_reference_csv(
              "id,system,gpus,nodes,collective,algorithm,size_bytes,metric,value_low,value_high,source\n"
              "1,x,8,1,all\x1b[2J,ring,8,time_us,1,2,x\n",
              "r.csv");
        })}) {
    EXPECT_NE(message.find("\\x1b"), std::string::npos) << message;
    EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
    EXPECT_EQ(message.find('\x07'), std::string::npos) << message;
  }
}

// The logs as their authors posted them (../shared/reference/nccl-tests-logs, README there).
std::optional<std::string> reference_log(const std::string& name) {
  const std::string path = "../shared/reference/nccl-tests-logs/" + name;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(NcclTestsLog, ReadsThePostedLogs) {
  const auto aws = reference_log("aws_p5_eks_2node_all_reduce_excerpt.txt");
  const auto coreweave = reference_log("coreweave_gb200_nvl72_all_reduce.txt");
  const auto dstack = reference_log("dstack_p6_b200_2node_small_msgs_truncated.txt");
  if (!aws || !coreweave || !dstack) GTEST_SKIP() << "../shared/reference/nccl-tests-logs is not here";
  // Launcher tags, "..." where rows were cut, no header: the rows there, the cut listed, no GPU count.
  const MeasurementFile a = parse_nccl_tests_log(*aws, "aws.txt", Collective::kAllReduce);
  ASSERT_EQ(a.rows.size(), 7u);
  EXPECT_EQ(a.rows[0].bytes, 0);
  EXPECT_EQ(a.rows[6].bytes, int64_t{2147483648});
  EXPECT_DOUBLE_EQ(a.rows[6].time_us, 9197.5);
  ASSERT_EQ(a.skipped.size(), 1u);
  EXPECT_EQ(a.skipped[0].rfind("aws.txt:5: '...'", 0), 0u) << a.skipped[0];
  EXPECT_EQ(a.nranks, 0);
  // One Rank line, of rank 71: at least 72 GPUs, the count and the hosts unknown.
  const MeasurementFile c = parse_nccl_tests_log(*coreweave, "coreweave.txt", Collective::kAllReduce);
  EXPECT_EQ(c.rows.size(), 5u);
  EXPECT_EQ(c.nranks, 0);
  EXPECT_EQ(c.least_ranks, 72);
  EXPECT_EQ(c.nodes, 0);
  EXPECT_EQ(c.rows[4].bytes, int64_t{8589934592});
  const MeasurementFile d = parse_nccl_tests_log(*dstack, "dstack.txt", Collective::kAllReduce);
  EXPECT_EQ(d.rows.size(), 6u);
  EXPECT_DOUBLE_EQ(d.rows[0].time_us, 50.58);
}

// ---- Profiles ----

TEST(CalibrationProfile, WritesAndReadsBack) {
  CalibrationProfile profile;
  profile.preset = "dgx-h100";
  profile.nodes = 2;
  profile.gpus_per_node = 4;
  profile.description = "two nodes";
  profile.parameters = {{"nvlink_efficiency", 0.824, 0.7123456789012345, true},
                        {"pcie_efficiency", 1.0, 1.0, false},
                        {"base_latency_scale", 1.0, 2.5, true}};
  profile.sources = {{"a.log", 9}, {"b.log", 3}};
  profile.date = "2026-12-04";
  profile.rows_fitted = 10;
  profile.rows_held_out = 2;
  profile.rms_log_error_before = 0.25;
  profile.rms_log_error_after = 0.001;
  const CalibrationProfile back = parse_profile(profile_yaml(profile), "p.yaml");
  EXPECT_EQ(back.preset, "dgx-h100");
  EXPECT_EQ(back.nodes, 2);
  EXPECT_EQ(back.gpus_per_node, 4);
  EXPECT_EQ(back.description, "two nodes");
  ASSERT_EQ(back.parameters.size(), 3u);
  EXPECT_EQ(back.parameters[0].value, 0.7123456789012345);  // exactly: the written number round-trips
  EXPECT_FALSE(back.parameters[1].informed);
  EXPECT_EQ(back.sources.size(), 2u);
  EXPECT_EQ(back.rows_held_out, 2);
  EXPECT_EQ(profile_summary(back), "p.yaml (fitted 2026-12-04 from 2 logs, dgx-h100)");
  const sim::NetworkModel model = apply_profile(back, sim::NetworkModel{});
  EXPECT_EQ(model.nvlink_efficiency, 0.7123456789012345);
  EXPECT_EQ(model.base_latency_scale, 2.5);
  EXPECT_EQ(model.network_efficiency, sim::NetworkModel{}.network_efficiency);
}

TEST(CalibrationProfile, IsStrict) {
  const std::string cluster = "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 8}\n";
  struct Case {
    std::string yaml;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"tandem-calibration: 2\n" + cluster + "parameters: {}\n", "p.yaml:1:21: tandem-calibration '2'"},
      {"tandem-calibration: 1\n" + cluster + "parameters: {}\nextra: 1\n", "p.yaml:4:1: unknown key 'extra'"},
      {"tandem-calibration: 1\n" + cluster + "parameters: {nvlink_eff: 0.5}\n", "unknown parameter 'nvlink_eff'"},
      {"tandem-calibration: 1\n" + cluster + "parameters: {nvlink_efficiency: 1.5}\n", "parameters.nvlink_efficiency"},
      {"tandem-calibration: 1\n" + cluster + "parameters: {base_latency_scale: {value: 2, unit: x}}\n",
       "unknown key 'unit'"},
      {"tandem-calibration: 1\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 8, gpu: h100}\nparameters: {}\n",
       "unknown key 'gpu'"},
      {"tandem-calibration: 1\n" + cluster, "missing required key 'parameters'"},
      {"tandem-calibration: 1\ncluster: {preset: dgx-x, nodes: 1, gpus_per_node: 8}\nparameters: {}\n", "dgx-x"},
  };
  for (const Case& c : cases) {
    const std::string message = error_of([&] { parse_profile(c.yaml, "p.yaml"); });
    EXPECT_EQ(message.rfind("p.yaml", 0), 0u) << message;
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
  }
}

TEST(CalibrationProfile, AnotherPresetIsAnError) {
  const CalibrationProfile profile = parse_profile(
      "tandem-calibration: 1\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 8}\nparameters: {}\n", "p.yaml");
  EXPECT_EQ(error_of([&] { check_profile_cluster(profile, models::cluster_preset("dgx-h100")); }), "");
  EXPECT_NE(error_of([&] {
              check_profile_cluster(profile, models::cluster_preset("hgx-a100"));
            }).find("fitted on dgx-h100 and this cluster is hgx-a100"),
            std::string::npos);
}

TEST(CalibrationProfile, EveryFileNameItWritesReadsBack) {
  CalibrationProfile profile;
  profile.preset = "dgx-h100";
  profile.gpus_per_node = 8;
  profile.description = "a \"quoted\" description: with a back\\slash # and more";
  profile.parameters = {{"nvlink_efficiency", 0.824, 0.8, true}};
  profile.date = "2026-12-04";
  const std::vector<std::string> names = {"a\"b.log",
                                          "c:\\logs\\d.log",
                                          "odd\"dir\\x/a\\\"b.log",
                                          "x: y #z.log",
                                          "- {e}, [f].log",
                                          "'single'.log",
                                          "caf\xC3\xA9.log",
                                          "*anchor &x !tag %p @q `r`.log",
                                          " lead and trail ",
                                          "null",
                                          "true",
                                          "123",
                                          "two\nlines.log",
                                          "tab\there.log",
                                          "esc\x1b[31m.log"};
  for (const std::string& file : names) profile.sources.push_back({file, 1});
  const CalibrationProfile back = parse_profile(profile_yaml(profile), "p.yaml");
  EXPECT_EQ(back.description, profile.description);
  ASSERT_EQ(back.sources.size(), names.size());
  // Control bytes are written as the text \xNN (the reader refuses them in names); the rest exactly.
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(back.sources[i].file, printable(names[i])) << names[i];
  EXPECT_EQ(back.sources[0].file, "a\"b.log");
  EXPECT_EQ(back.sources[12].file, "two\\x0alines.log");
}

// ---- The fit, end to end ----

// The cluster the logs ran on: `nodes` DGX-H100 nodes, `per_node` GPUs of each taking part.
struct LogCluster {
  int nodes = 2;
  int per_node = 4;
  models::ClusterSpec cluster() const {
    models::ClusterSpec spec = models::cluster_preset("dgx-h100");
    spec.nodes = nodes;
    return spec;
  }
};

// An nccl-tests log of `collective` on `logs_on`, simulated under `network`, each time multiplied by
// noise(row index).
std::string simulated_log(const LogCluster& logs_on, Collective collective, const sim::NetworkModel& network,
                          const std::function<double(int)>& noise) {
  sim::SweepRequest request;
  request.cluster = logs_on.cluster();
  request.gpus_per_node = logs_on.per_node;
  request.network = network;
  const int n = logs_on.nodes * logs_on.per_node;
  for (int64_t bytes = 1024; bytes <= (int64_t{64} << 20); bytes *= 2) {
    sim::SweepPoint point;
    point.collective = collective;
    point.bytes = bytes;
    point.dtype = DataType::kF32;
    request.points.push_back(point);
  }
  std::string log = fmt::format("# Collective test starting: {}_perf\n",
                                collective == Collective::kAllReduce ? "all_reduce" : "all_gather");
  log += fmt::format("# nThread 1 nGpus {} minBytes 1024 maxBytes 67108864 step: 2(factor)\n", n);
  log += format_column_header();
  int index = 0;
  for (const sim::SweepPointResult& r : sim::run_sweep(request)) {
    EXPECT_TRUE(r.ok) << r.error;
    BenchRow row;
    row.counts = nccl_tests_counts(collective, r.point.bytes, DataType::kF32, n);
    row.type_name = "float";
    row.redop = collective == Collective::kAllReduce ? "sum" : "none";
    row.out_of_place = make_result(r.seconds * noise(index++), row.counts, collective, n, 0);
    row.in_place = row.out_of_place;
    log += format_row(row);
  }
  return log;
}

sim::NetworkModel changed_model() {
  sim::NetworkModel model;
  model.network_efficiency = 0.80;
  model.nvlink_efficiency = 0.70;
  model.base_latency_scale = 2.0;
  return model;
}

// +-3%, deterministic: a pattern over the rows that no parameter can follow.
double noise_3_percent(int row) { return 1.0 + 0.03 * ((row * 7 % 5) - 2) / 2.0; }
double no_noise(int) { return 1.0; }

CalibrationRequest request_for(const LogCluster& logs_on, double (*noise)(int)) {
  CalibrationRequest request;
  request.cluster = logs_on.cluster();
  request.gpus_per_node = logs_on.per_node;
  for (Collective collective : {Collective::kAllReduce, Collective::kAllGather}) {
    const std::string name = collective == Collective::kAllReduce ? "all_reduce.log" : "all_gather.log";
    request.files.push_back(parse_nccl_tests_log(simulated_log(logs_on, collective, changed_model(), noise), name));
  }
  return request;
}

double fitted(const CalibrationResult& result, std::string_view name) {
  for (const CalibrationProfile::Parameter& p : result.profile.parameters) {
    if (p.name == name) return p.value;
  }
  ADD_FAILURE() << "no parameter " << name;
  return 0;
}

bool informed(const CalibrationResult& result, std::string_view name) {
  for (const CalibrationProfile::Parameter& p : result.profile.parameters) {
    if (p.name == name) return p.informed;
  }
  return false;
}

TEST(Calibrate, RecoversKnownParametersFromSimulatedLogs) {
  // Two nodes of 4 GPUs: NVLink, the network and the latencies all shape some rows.
  const CalibrationResult result = calibrate(request_for(LogCluster{2, 4}, no_noise));
  EXPECT_NEAR(fitted(result, "network_efficiency"), 0.80, 0.80 * 0.01);
  EXPECT_NEAR(fitted(result, "nvlink_efficiency"), 0.70, 0.70 * 0.01);
  EXPECT_NEAR(fitted(result, "base_latency_scale"), 2.0, 2.0 * 0.01);
  // No NVLS-only or p2p row and no PCIe-bound one: those stay at their defaults, not informed.
  for (const char* name : {"nvls_efficiency", "p2p_channel_scale", "pcie_efficiency"}) {
    EXPECT_FALSE(informed(result, name)) << name;
    EXPECT_EQ(fitted(result, name), sim::NetworkModel{}.*(sim::find_network_parameter(name)->field)) << name;
  }
  EXPECT_LT(result.profile.rms_log_error_after, 1e-3);
  for (const CalibratedRow& row : result.rows) EXPECT_NEAR(row.after_us / row.row.time_us, 1.0, 0.01) << row.row.label;
}

// With noise, a parameter is only recovered where the rows depend on it enough: NVLink on one node
// (8 GPUs, NVLink-bound rings), the network on two nodes of one GPU each (every hop a network one).
// On two nodes of 4 GPUs the NICs bind every large ring and NVLink's efficiency moves a row by
// under 1%: the fit reports it with a wide uncertainty (UncertaintyIsReported).
TEST(Calibrate, RecoversNvlinkWithin5PercentFromNoisyOneNodeLogs) {
  const CalibrationResult result = calibrate(request_for(LogCluster{1, 8}, noise_3_percent));
  EXPECT_NEAR(fitted(result, "nvlink_efficiency"), 0.70, 0.70 * 0.05);
  EXPECT_NEAR(fitted(result, "base_latency_scale"), 2.0, 2.0 * 0.05);
  EXPECT_FALSE(informed(result, "network_efficiency"));
}

TEST(Calibrate, RecoversTheNetworkWithin5PercentFromNoisyTwoNodeLogs) {
  const CalibrationResult result = calibrate(request_for(LogCluster{2, 1}, noise_3_percent));
  EXPECT_NEAR(fitted(result, "network_efficiency"), 0.80, 0.80 * 0.05);
  EXPECT_NEAR(fitted(result, "base_latency_scale"), 2.0, 2.0 * 0.05);
}

TEST(Calibrate, RefusesALogFromAnotherGpuCount) {
  CalibrationRequest request = request_for(LogCluster{2, 4}, no_noise);
  request.cluster.nodes = 4;  // the logs ran on 2 nodes
  const std::string message = error_of([&] { calibrate(request); });
  EXPECT_NE(message.find("all_reduce.log: the log ran on 8 GPUs and the cluster given has 16"), std::string::npos)
      << message;
}

TEST(Calibrate, HeldOutRowsArePredictedNotFitted) {
  CalibrationRequest request = request_for(LogCluster{2, 4}, no_noise);
  request.hold_out = {"all_gather.log"};
  const CalibrationResult result = calibrate(request);
  EXPECT_EQ(result.profile.rows_held_out, 17);  // 1 KiB .. 64 MiB by 2
  for (const CalibratedRow& row : result.rows) EXPECT_EQ(row.held_out, row.row.label.starts_with("all_gather.log"));
  request.hold_out = {"nothing.log"};
  EXPECT_NE(error_of([&] { calibrate(request); }).find("--hold-out nothing.log"), std::string::npos);
}

TEST(Calibrate, RepeatedRowsAreMergedIntoTheirMeanAndGuessesAreNamed) {
  CalibrationRequest request = request_for(LogCluster{2, 4}, no_noise);
  // The all_reduce log's sweep run twice, the second 10% slower.
  MeasurementFile& all_reduce = request.files[0];
  const size_t sizes = all_reduce.rows.size();
  const double first_time = all_reduce.rows[0].time_us;
  for (size_t i = 0; i < sizes; ++i) {
    MeasuredRow again = all_reduce.rows[i];
    again.label += "+";
    again.time_us *= 1.1;
    all_reduce.rows.push_back(again);
  }
  const CalibrationResult result = calibrate(request);
  EXPECT_EQ(result.rows_merged, 17);
  ASSERT_EQ(result.rows.size(), 34u);
  EXPECT_EQ(result.rows[0].samples, 2);
  EXPECT_EQ(result.rows[0].row.label, "all_reduce.log:6");
  EXPECT_DOUBLE_EQ(result.rows[0].row.time_us, first_time * 1.05);
  EXPECT_EQ(result.rows[17].samples, 1);
  const std::string report = calibration_report(result);
  EXPECT_NE(report.find("# merged 17 rows that repeat a measurement"), std::string::npos) << report;
  EXPECT_NE(report.find("(mean of 2)"), std::string::npos);
  // The simulated logs name no algorithm: the report says what NCCL's tuner was taken to pick.
  EXPECT_NE(report.find("warning: all_reduce.log names no algorithm for 17 rows (no NCCL_ALGO, no tandem bench "
                        "header): guessed NCCL's tuner's pick: all_reduce "),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("warning: all_gather.log names no algorithm for 17 rows"), std::string::npos);
}

TEST(Calibrate, ALogWithoutAGpuCountTakesTheClustersAndSaysSo) {
  CalibrationRequest request = request_for(LogCluster{2, 4}, no_noise);
  request.files.resize(1);
  request.files[0].nranks = 0;
  for (MeasuredRow& row : request.files[0].rows) row.gpus = 0;
  const CalibrationResult result = calibrate(request);
  ASSERT_EQ(result.warnings.size(), 2u);
  EXPECT_EQ(result.warnings[0],
            "warning: all_reduce.log does not say how many GPUs ran it (no '# nThread' header, no full list of '#  "
            "Rank' lines): taken as the cluster given's 8 (2 nodes x 4 GPUs)");
  request.files[0].least_ranks = 72;
  EXPECT_NE(
      error_of([&] { calibrate(request); }).find("all_reduce.log: the log names rank 71 and the cluster given has 8"),
      std::string::npos);
}

// ---- A scenario's calibration: key ----

TEST(ScenarioCalibration, ThePathIsRelativeToTheScenarioAndTheProfileApplies) {
  const std::string dir = ::testing::TempDir() + "calibration_scenario";
  std::filesystem::create_directories(dir + "/profiles");
  std::ofstream(dir + "/profiles/p.yaml")
      << "tandem-calibration: 1\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 8}\n"
         "parameters: {network_efficiency: 0.5, pcie_efficiency: {default: 1, value: 0.9, informed: false}}\n";
  // The scenario with `extra` (top-level keys) before its workload.
  auto body = [](const std::string& extra) {
    return "tandem_scenario: 1\nname: s\ncluster: {preset: dgx-h100, nodes: 2}\n" + extra +
           "workload: {type: collective-sweep, collectives: [all_reduce], sizes: {min: 1M, max: 1M}, algorithms: "
           "[ring]}\n";
  };
  const Scenario scenario = parse_scenario(body("calibration: profiles/p.yaml\n"), dir + "/s.yaml");
  ASSERT_TRUE(scenario.calibration.has_value());
  const sim::NetworkModel model = network_model(scenario);
  EXPECT_EQ(model.network_efficiency, 0.5);
  EXPECT_EQ(model.pcie_efficiency, sim::NetworkModel{}.pcie_efficiency);  // informed: false is not applied
  EXPECT_EQ(network_model(parse_scenario(body(""), dir + "/s.yaml")).network_efficiency,
            sim::NetworkModel{}.network_efficiency);

  EXPECT_NE(error_of([&] {
              parse_scenario(body("network: ideal\ncalibration: profiles/p.yaml\n"), dir + "/s.yaml");
            }).find("s.yaml:5:14: calibration does not apply to network: ideal"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_scenario(body("calibration: profiles/missing.yaml\n"), dir + "/s.yaml");
            }).find("missing.yaml"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::app
