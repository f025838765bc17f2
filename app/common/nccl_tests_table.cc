#include "app/common/nccl_tests_table.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tandem::app {


std::vector<int64_t> sweep_sizes(int64_t min_bytes, int64_t max_bytes, int64_t step_factor, int64_t step_bytes) {
  if (min_bytes < 0 || max_bytes < 0) fail(ErrorCode::kInvalidArgument, "sizes must not be negative");
  if (min_bytes > max_bytes) {
    fail(ErrorCode::kInvalidArgument, "invalid sizes: minimum {} bytes (-b) is larger than maximum {} bytes (-e)",
         min_bytes, max_bytes);
  }
  if (step_factor < 1)
    fail(ErrorCode::kInvalidArgument, "the step factor (-f) must be at least 1 (got {})", step_factor);
  bool multiply = step_factor > 1;
  if (multiply && min_bytes == 0 && max_bytes > 0) {
    fail(ErrorCode::kInvalidArgument, "a sweep by factor (-f {}) cannot start at 0 bytes (-b 0)", step_factor);
  }
  if (!multiply && step_bytes < 1 && min_bytes < max_bytes) {
    fail(ErrorCode::kInvalidArgument, "the step (-i) must be at least 1 byte (got {})", step_bytes);
  }
  std::vector<int64_t> sizes;
  for (int64_t size = min_bytes;;) {
    if (sizes.size() == kMaxSweepSizes) {
      fail(ErrorCode::kInvalidArgument, "the sweep from {} to {} bytes has more than {} sizes; use a larger step",
           min_bytes, max_bytes, kMaxSweepSizes);
    }
    sizes.push_back(size);
    // Stop before overflowing: the next size must be <= max_bytes.
    if (multiply) {
      if (size == 0 || size > max_bytes / step_factor) break;
      size *= step_factor;
    } else {
      if (step_bytes < 1 || size > max_bytes - step_bytes) break;
      size += step_bytes;
    }
  }
  return sizes;
}

std::string_view nccl_tests_type_name(DataType dtype) {
  switch (dtype) {
    case DataType::kF32:
      return "float";
    case DataType::kF16:
      return "half";
    case DataType::kBF16:
      return "bfloat16";
    case DataType::kF64:
      return "double";
    case DataType::kI32:
      return "int32";
    case DataType::kI64:
      return "int64";
  }
  return "?";
}

BenchResult make_result(double seconds, const SizeCounts& counts, Collective collective, int nranks,
                        std::optional<int64_t> wrong) {
  BenchResult result;
  result.time_us = seconds * 1e6;
  result.algbw_GBps = seconds > 0 ? static_cast<double>(counts.size_bytes) / seconds / 1e9 : 0.0;
  result.busbw_GBps = result.algbw_GBps * bus_bandwidth_factor(collective, nranks);
  result.wrong = wrong;
  return result;
}

std::string format_time_us(double time_us) {
  if (time_us >= 10000.0) return fmt::format("{:7.0f}", time_us);
  if (time_us >= 100.0) return fmt::format("{:7.1f}", time_us);
  return fmt::format("{:7.2f}", time_us);
}

std::string format_column_header() {
  std::string out;
  out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place\n",
                     "", "", "", "", "");
  out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:>7}  {:>6}  {:>6} {:>6}\n",
                     "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                     "busbw", "#wrong");
  // nccl-tests pads the units line to full width; the trailing blanks carry nothing.
  std::string units =
      fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}  {:>7}  {:>6}  {:>6}  {:>5}",
                  "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  units.erase(units.find_last_not_of(' ') + 1);
  out += units + "\n";
  return out;
}

namespace {

std::string format_result(const std::optional<BenchResult>& result) {
  if (!result) return fmt::format("  {:>7}  {:>6}  {:>6}  {:>5}", "N/A", "N/A", "N/A", "N/A");
  std::string wrong = result->wrong ? fmt::format("{}", *result->wrong) : std::string("N/A");
  return fmt::format("  {}  {:6.2f}  {:6.2f}  {:>5}", format_time_us(result->time_us), result->algbw_GBps,
                     result->busbw_GBps, wrong);
}

}  // namespace

std::string format_row(const BenchRow& row) {
  return fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{}{}\n", row.counts.size_bytes, row.counts.count,
                     row.type_name, row.redop, row.root, format_result(row.out_of_place), format_result(row.in_place));
}

int64_t failed_results(const std::vector<BenchRow>& rows) {
  int64_t failed = 0;
  for (const BenchRow& row : rows) {
    if (row.out_of_place.wrong.value_or(0) > 0) ++failed;
    if (row.in_place && row.in_place->wrong.value_or(0) > 0) ++failed;
  }
  return failed;
}

double average_bus_bandwidth(const std::vector<BenchRow>& rows) {
  double sum = 0;
  int64_t results = 0;
  for (const BenchRow& row : rows) {
    sum += row.out_of_place.busbw_GBps;
    ++results;
    if (row.in_place) {
      sum += row.in_place->busbw_GBps;
      ++results;
    }
  }
  return results > 0 ? sum / static_cast<double>(results) : 0.0;
}

std::string format_footer(const std::vector<BenchRow>& rows) {
  int64_t failed = failed_results(rows);
  std::string out;
  out += fmt::format("# Out of bounds values : {} {}\n", failed, failed > 0 ? "FAILED" : "OK");
  out += fmt::format("# Avg bus bandwidth    : {:g}\n", average_bus_bandwidth(rows));
  out += "#\n";
  return out;
}

}  // namespace tandem::app
