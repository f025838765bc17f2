// nccl-tests conventions for `tandem bench`: message sizes, the element counts a size means for each
// collective, bus-bandwidth factors, and the text layout of NVIDIA/nccl-tests (src/common.cu), so a
// tandem table reads, diffs and parses like an nccl-tests log.
//
// Size -> count: core/sizes.h (nccl_tests_counts). algbw = S / t in GB/s (1 GB = 1e9 B);
// busbw = algbw * bus_bandwidth_factor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/sizes.h"
#include "core/types.h"

namespace tandem::app {

// A sweep longer than this is a typo (e.g. -i 1 up to -e 1G), not a benchmark.
inline constexpr size_t kMaxSweepSizes = 4096;

// parse_size_bytes ("64K", "1G"): core/sizes.h.

// The sizes a -b/-e/-f/-i sweep visits: min_bytes, then *step_factor when step_factor > 1,
// otherwise +step_bytes, while <= max_bytes. Throws Error(kInvalidArgument) for min > max, a step
// that makes no progress, or more than kMaxSweepSizes sizes.
std::vector<int64_t> sweep_sizes(int64_t min_bytes, int64_t max_bytes, int64_t step_factor, int64_t step_bytes);


// bus_bandwidth_factor (busbw / algbw): core/sizes.h.

// nccl-tests' type names: float, half, bfloat16, double, int32, int64.
std::string_view nccl_tests_type_name(DataType dtype);

// One measured half of a row (out-of-place or in-place).
struct BenchResult {
  double time_us = 0;
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  std::optional<int64_t> wrong;  // wrong elements; empty when data checks are off (-c 0)
};
BenchResult make_result(double seconds, const SizeCounts& counts, Collective collective, int nranks,
                        std::optional<int64_t> wrong);

struct BenchRow {
  SizeCounts counts;
  std::string_view type_name;
  std::string_view redop;  // "none" for collectives without a reduction
  int root = -1;           // -1 for collectives without a root
  BenchResult out_of_place;
  std::optional<BenchResult> in_place;  // empty where the collective has no in-place form: N/A
};

// nccl-tests' time column: %7.0f from 10 ms, %7.1f from 100 us, %7.2f below.
std::string format_time_us(double time_us);

// The three column-header lines (group titles, names, units), each ending in '\n'.
std::string format_column_header();
// One row, ending in '\n'.
std::string format_row(const BenchRow& row);
// "# Out of bounds values : N OK|FAILED" and "# Avg bus bandwidth    : X" (mean busbw over every
// measured result, out-of-place and in-place), then "#".
std::string format_footer(const std::vector<BenchRow>& rows);

// Number of results (out-of-place or in-place) with wrong elements: nccl-tests' "out of bounds".
int64_t failed_results(const std::vector<BenchRow>& rows);
double average_bus_bandwidth(const std::vector<BenchRow>& rows);

}  // namespace tandem::app
