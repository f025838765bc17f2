#include "app/common/nccl_tests_table.h"

#include <cstdio>

#include <gtest/gtest.h>

#include "core/error.h"

namespace tandem::app {
namespace {

TEST(ParseSizeBytes, AcceptsNcclTestsSpellings) {
  EXPECT_EQ(parse_size_bytes("0", "-b"), 0);
  EXPECT_EQ(parse_size_bytes("8", "-b"), 8);
  EXPECT_EQ(parse_size_bytes("64K", "-b"), 64 * 1024);
  EXPECT_EQ(parse_size_bytes("64k", "-b"), 64 * 1024);
  EXPECT_EQ(parse_size_bytes("64M", "-b"), 64 * 1024 * 1024);
  EXPECT_EQ(parse_size_bytes("1G", "-b"), int64_t{1} << 30);
  EXPECT_EQ(parse_size_bytes("1.5M", "-b"), 3 * 512 * 1024);
  EXPECT_EQ(parse_size_bytes("2.7", "-b"), 2);  // whole bytes, rounded down
}

TEST(ParseSizeBytes, RejectsEverythingElseNamingTheFlag) {
  for (const char* text : {"", "-8", "8X", "M", "1e3", "abc", "8 M", "8MB", " 8", "nan", "inf"}) {
    try {
      parse_size_bytes(text, "-e/--maxbytes");
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(error.what()).find("-e/--maxbytes"), std::string::npos) << error.what();
    }
  }
  EXPECT_THROW(parse_size_bytes("1048577G", "-e"), Error);  // beyond the 1 PiB limit
}

TEST(SweepSizes, FactorSweepFrom8To64M) {
  std::vector<int64_t> sizes = sweep_sizes(8, 64 << 20, 2, 1 << 20);
  ASSERT_EQ(sizes.size(), 24u);  // 2^3 .. 2^26
  EXPECT_EQ(sizes.front(), 8);
  EXPECT_EQ(sizes[1], 16);
  EXPECT_EQ(sizes.back(), 64 << 20);

  std::vector<int64_t> by4 = sweep_sizes(8, 64 << 20, 4, 1 << 20);
  ASSERT_EQ(by4.size(), 12u);  // 8, 32, ..., 2^25; 2^27 is past the end
  EXPECT_EQ(by4.back(), 32 << 20);
}

TEST(SweepSizes, StepSweepAndSingleSize) {
  EXPECT_EQ(sweep_sizes(1 << 20, 4 << 20, 1, 1 << 20), (std::vector<int64_t>{1 << 20, 2 << 20, 3 << 20, 4 << 20}));
  EXPECT_EQ(sweep_sizes(100, 250, 1, 100), (std::vector<int64_t>{100, 200}));
  EXPECT_EQ(sweep_sizes(32 << 20, 32 << 20, 1, 1 << 20), (std::vector<int64_t>{32 << 20}));
  EXPECT_EQ(sweep_sizes(0, 0, 2, 0), (std::vector<int64_t>{0}));
}

TEST(SweepSizes, RejectsBadSweeps) {
  EXPECT_THROW(sweep_sizes(64, 8, 2, 1), Error);                // min > max
  EXPECT_THROW(sweep_sizes(0, 64, 2, 1), Error);                // 0 * factor never grows
  EXPECT_THROW(sweep_sizes(8, 64, 1, 0), Error);                // a step of 0 never grows
  EXPECT_THROW(sweep_sizes(1, int64_t{1} << 30, 1, 1), Error);  // more than kMaxSweepSizes sizes
  EXPECT_NO_THROW(sweep_sizes(1, kMaxSweepSizes, 1, 1));
}

TEST(NcclTestsCounts, OneBufferCollectivesCountElementsOfTheSize) {
  for (Collective c : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce, Collective::kSendRecv}) {
    SizeCounts counts = nccl_tests_counts(c, 64 << 20, DataType::kF32, 8);
    EXPECT_EQ(counts.count, 16 << 20) << name(c);
    EXPECT_EQ(counts.input_elements, 16 << 20);
    EXPECT_EQ(counts.output_elements, 16 << 20);
    EXPECT_EQ(counts.size_bytes, 64 << 20);
  }
  // A size that does not divide into elements is rounded down.
  SizeCounts odd = nccl_tests_counts(Collective::kAllReduce, 10, DataType::kF32, 8);
  EXPECT_EQ(odd.count, 2);
  EXPECT_EQ(odd.size_bytes, 8);
}

TEST(NcclTestsCounts, GatherScatterAndAllToAllTakeTheSizeAsTheTotal) {
  SizeCounts gather = nccl_tests_counts(Collective::kAllGather, 64 << 20, DataType::kF32, 8);
  EXPECT_EQ(gather.count, 2 << 20);
  EXPECT_EQ(gather.input_elements, 2 << 20);
  EXPECT_EQ(gather.output_elements, 16 << 20);
  EXPECT_EQ(gather.size_bytes, 64 << 20);

  SizeCounts scatter = nccl_tests_counts(Collective::kReduceScatter, 64 << 20, DataType::kF32, 8);
  EXPECT_EQ(scatter.count, 2 << 20);
  EXPECT_EQ(scatter.input_elements, 16 << 20);
  EXPECT_EQ(scatter.output_elements, 2 << 20);
  EXPECT_EQ(scatter.size_bytes, 64 << 20);

  // all_to_all: the count is per peer; each rank sends and receives the whole size.
  SizeCounts all_to_all = nccl_tests_counts(Collective::kAllToAll, 64 << 20, DataType::kF32, 8);
  EXPECT_EQ(all_to_all.count, 2 << 20);
  EXPECT_EQ(all_to_all.input_elements, 16 << 20);
  EXPECT_EQ(all_to_all.output_elements, 16 << 20);
  EXPECT_EQ(all_to_all.size_bytes, 64 << 20);

  // 100 B of half over 3 ranks: 50 elements, 16 per rank, 96 B reported.
  SizeCounts uneven = nccl_tests_counts(Collective::kAllGather, 100, DataType::kF16, 3);
  EXPECT_EQ(uneven.count, 16);
  EXPECT_EQ(uneven.output_elements, 48);
  EXPECT_EQ(uneven.size_bytes, 96);
  // Fewer bytes than ranks * element size: an empty collective, as in nccl-tests.
  EXPECT_EQ(nccl_tests_counts(Collective::kAllToAll, 8, DataType::kF64, 8).count, 0);
}

TEST(BusBandwidthFactor, MatchesNcclTestsTable) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kAllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::kAllReduce, 3), 4.0 / 3.0);
  for (Collective c : {Collective::kAllGather, Collective::kReduceScatter, Collective::kAllToAll}) {
    EXPECT_DOUBLE_EQ(bus_bandwidth_factor(c, 8), 0.875) << name(c);
  }
  for (Collective c : {Collective::kBroadcast, Collective::kReduce, Collective::kSendRecv}) {
    EXPECT_DOUBLE_EQ(bus_bandwidth_factor(c, 8), 1.0) << name(c);
  }
}

TEST(MakeResult, AlgbwIsSizeOverTimeInDecimalGigabytes) {
  SizeCounts counts = nccl_tests_counts(Collective::kAllReduce, 1'000'000'000, DataType::kI32, 8);
  BenchResult result = make_result(0.5, counts, Collective::kAllReduce, 8, int64_t{0});
  EXPECT_DOUBLE_EQ(result.time_us, 500000.0);
  EXPECT_DOUBLE_EQ(result.algbw_GBps, 2.0);
  EXPECT_DOUBLE_EQ(result.busbw_GBps, 3.5);
  EXPECT_EQ(result.wrong, 0);
  EXPECT_DOUBLE_EQ(make_result(0.0, counts, Collective::kAllReduce, 8, {}).algbw_GBps, 0.0);
}

TEST(FormatTimeUs, FollowsNcclTestsPrecisionSteps) {
  EXPECT_EQ(format_time_us(12345.6), "  12346");
  EXPECT_EQ(format_time_us(123.45), "  123.5");  // 123.45 is 123.4500000000000028 in binary
  EXPECT_EQ(format_time_us(1.234), "   1.23");
}

TEST(FormatRow, IsNcclTestsPrintfLayout) {
  BenchRow row;
  row.counts = nccl_tests_counts(Collective::kAllReduce, 64 << 20, DataType::kF32, 8);
  row.type_name = "float";
  row.redop = "sum";
  row.root = -1;
  row.out_of_place = {1234.5, 54.36, 95.13, int64_t{0}};
  row.in_place = BenchResult{1200.0, 55.92, 97.86, int64_t{3}};
  char expected[512];
  std::snprintf(expected, sizeof(expected),
                "%12li  %12li  %8s  %6s  %6i  %7s  %6.2f  %6.2f  %5li  %7s  %6.2f  %6.2f  %5li\n", 64L << 20, 16L << 20,
                "float", "sum", -1, " 1234.5", 54.36, 95.13, 0L, " 1200.0", 55.92, 97.86, 3L);
  EXPECT_EQ(format_row(row), expected);

  row.in_place.reset();
  row.out_of_place.wrong.reset();
  std::snprintf(expected, sizeof(expected), "%12li  %12li  %8s  %6s  %6i  %7s  %6.2f  %6.2f  %5s  %7s  %6s  %6s  %5s\n",
                64L << 20, 16L << 20, "float", "sum", -1, " 1234.5", 54.36, 95.13, "N/A", "N/A", "N/A", "N/A", "N/A");
  EXPECT_EQ(format_row(row), expected);
}

TEST(FormatColumnHeader, HasNcclTestsColumns) {
  std::string header = format_column_header();
  EXPECT_NE(header.find("out-of-place"), std::string::npos);
  EXPECT_NE(header.find("in-place"), std::string::npos);
  char names[512];
  std::snprintf(names, sizeof(names), "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size",
                "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
                "#wrong");
  EXPECT_NE(header.find(names), std::string::npos) << header;
}

TEST(FormatFooter, AveragesEveryMeasuredResultAndCountsFailures) {
  std::vector<BenchRow> rows(2);
  rows[0].out_of_place.busbw_GBps = 1.0;
  rows[0].in_place = BenchResult{0, 0, 3.0, int64_t{0}};
  rows[1].out_of_place.busbw_GBps = 5.0;
  rows[1].out_of_place.wrong = 0;  // rows[1] has no in-place result: not averaged
  EXPECT_DOUBLE_EQ(average_bus_bandwidth(rows), 3.0);
  EXPECT_EQ(format_footer(rows), "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 3\n#\n");

  rows[1].out_of_place.wrong = 7;
  EXPECT_EQ(failed_results(rows), 1);
  EXPECT_NE(format_footer(rows).find("# Out of bounds values : 1 FAILED"), std::string::npos);
}

TEST(NcclTestsTypeName, UsesNcclTestsSpellings) {
  EXPECT_EQ(nccl_tests_type_name(DataType::kF32), "float");
  EXPECT_EQ(nccl_tests_type_name(DataType::kF16), "half");
  EXPECT_EQ(nccl_tests_type_name(DataType::kBF16), "bfloat16");
  EXPECT_EQ(nccl_tests_type_name(DataType::kF64), "double");
  EXPECT_EQ(nccl_tests_type_name(DataType::kI32), "int32");
  EXPECT_EQ(nccl_tests_type_name(DataType::kI64), "int64");
}

}  // namespace
}  // namespace tandem::app
