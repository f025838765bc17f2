#include "app/calibrate/nccl_tests_log.h"

// The published-rows CSV (../shared/reference/h100_calibration.csv, multinode_calibration.csv) read into
// measured rows; the nccl-tests logs are nccl_tests_log.cc.

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "app/calibrate/measured_fields.h"
#include "core/error.h"
#include "core/sizes.h"
#include "core/text.h"

namespace tandem::app {

namespace {

// The two published-rows formats: ../shared/reference/h100_calibration.csv and multinode_calibration.csv.
constexpr std::string_view kSingleNodeHeader =
    "id,system,gpus,nodes,collective,algorithm,size_bytes,metric,value_low,value_high,source";
constexpr std::string_view kMultiNodeHeader =
    "id,system,gpus,nodes,gpus_per_node,nics_per_node,nic_gbps,fabric,collective,algorithm,protocol,size_bytes,"
    "metric,value_low,value_high,source,notes";

std::vector<std::string_view> split_commas(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t begin = 0;
  while (true) {
    const size_t comma = line.find(',', begin);
    fields.push_back(line.substr(begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin));
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return fields;
}

// "~8" (the usual configuration, not stated) reads as 8; "-" (none) as nullopt.
std::optional<double> configuration_number(std::string_view field) {
  if (!field.empty() && field.front() == '~') field.remove_prefix(1);
  return parse_number(field);
}

// One row of either format, its measured value turned into a time.
MeasuredRow read_row(const std::vector<std::string_view>& fields, bool multi_node, const std::string& base,
                     const std::string& where) {
  // The single-node columns, wherever they are in this format.
  const size_t collective_at = multi_node ? 8 : 4;
  const size_t size_at = multi_node ? 11 : 6;
  MeasuredRow row;
  row.label = fmt::format("{}#{}", base, fields[0]);
  row.system = std::string(fields[1]);
  row.gpus = static_cast<int>(bounded_integer(fields[2], 1, kMaxMeasuredRanks, "gpus", where));
  row.nodes = static_cast<int>(bounded_integer(fields[3], 1, models::kMaxNodes, "nodes", where));
  if (multi_node) {
    const int64_t per_node = bounded_integer(fields[4], 1, models::kMaxGpusPerNode, "gpus_per_node", where);
    if (per_node * row.nodes != row.gpus) {
      fail(ErrorCode::kFormat, "{}: {} nodes of {} GPUs are not {} GPUs", where, row.nodes, per_node, row.gpus);
    }
    row.nics_per_node = configuration_number(fields[5]);
    row.nic_gbps = configuration_number(fields[6]);
    for (const auto& [value, field] : {std::pair{row.nics_per_node, fields[5]}, std::pair{row.nic_gbps, fields[6]}}) {
      if (value ? !(*value > 0 && *value <= 1e6) : field != "-") {
        fail(ErrorCode::kFormat, "{}: nics_per_node / nic_gbps '{}' is neither a positive number nor -", where,
             printable(field));
      }
    }
  }
  const auto collective = collective_of(fields[collective_at]);
  if (!collective) {
    fail(ErrorCode::kFormat, "{}: collective '{}' is not one tandem calibrates on", where,
         printable(fields[collective_at]));
  }
  row.collective = *collective;
  const std::string_view algorithm = fields[collective_at + 1];
  row.algorithm = algorithm == "auto" ? std::string("auto") : algorithm_of(algorithm, where);
  if (multi_node && fields[10] != "auto") row.protocol = protocol_of(fields[10], where);
  const auto bytes = parse_integer(fields[size_at]);
  if (!bytes || *bytes <= 0)
    fail(ErrorCode::kFormat, "{}: size_bytes '{}' is not a byte count", where, printable(fields[size_at]));
  row.bytes = *bytes;
  const auto low = parse_number(fields[size_at + 2]);
  const auto high = parse_number(fields[size_at + 3]);
  if (!low || !high || *low <= 0 || *high < *low) {
    fail(ErrorCode::kFormat, "{}: value_low '{}' and value_high '{}' must be positive with low <= high", where,
         printable(fields[size_at + 2]), printable(fields[size_at + 3]));
  }
  const double value = *low + (*high - *low) / 2;  // the middle, without overflowing low + high
  const std::string_view metric = fields[size_at + 1];
  if (metric == "time_us") {
    row.time_us = value;
  } else if (metric == "algbw_GBps" || metric == "busbw_GBps" || metric == "busbw_per_nic_GBps") {
    const double factor = bus_bandwidth_factor(row.collective, row.gpus);
    if (metric != "algbw_GBps" && factor == 0) {
      fail(ErrorCode::kFormat, "{}: {} of {} on {} GPU has no bus bandwidth (give time_us or algbw_GBps)", where,
           metric, name(row.collective), row.gpus);
    }
    const double algbw = metric == "algbw_GBps" ? value : value / factor;
    row.time_us = static_cast<double>(row.bytes) / (algbw * 1e9) * 1e6;
  } else {
    fail(ErrorCode::kFormat, "{}: metric '{}' is none of time_us, algbw_GBps, busbw_GBps, busbw_per_nic_GBps", where,
         printable(metric));
  }
  if (!std::isfinite(row.time_us) || row.time_us <= 0) {
    fail(ErrorCode::kFormat, "{}: {} {}..{} gives a time of {} us for {} B: out of range", where, metric,
         printable(fields[size_at + 2]), printable(fields[size_at + 3]), row.time_us, row.bytes);
  }
  return row;
}

}  // namespace

MeasurementFile parse_reference_csv(std::string_view text, const std::string& path) {
  if (text.starts_with(kUtf8ByteOrderMark)) text.remove_prefix(kUtf8ByteOrderMark.size());
  MeasurementFile file;
  file.path = path;
  file.published = true;
  const std::string shown_path = printable(path);
  bool header_seen = false;
  bool multi_node = false;
  int line_number = 0;
  size_t begin = 0;
  const std::string base = std::filesystem::path(path).filename().string();
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = trim(text.substr(begin, end - begin));
    begin = end + 1;
    ++line_number;
    const std::string where = fmt::format("{}:{}", shown_path, line_number);
    if (line.empty() || line.front() == '#') continue;
    if (!header_seen) {
      if (line != kSingleNodeHeader && line != kMultiNodeHeader) {
        fail(ErrorCode::kFormat, "{}: expected the header '{}' or '{}'", where, kSingleNodeHeader, kMultiNodeHeader);
      }
      multi_node = line == kMultiNodeHeader;
      header_seen = true;
      continue;
    }
    std::vector<std::string_view> fields = split_commas(line);
    const size_t expected = multi_node ? 17 : 11;
    // The multi-node file's last column (notes) may hold commas of its own.
    if (multi_node && fields.size() > expected) fields.resize(expected);
    if (fields.size() != expected) {
      fail(ErrorCode::kFormat, "{}: {} fields, the header has {}", where, fields.size(), expected);
    }
    file.rows.push_back(read_row(fields, multi_node, base, where));
  }
  if (!header_seen) fail(ErrorCode::kFormat, "{}: no header line '{}'", shown_path, kSingleNodeHeader);
  if (file.rows.empty()) fail(ErrorCode::kFormat, "{}: no rows", shown_path);
  return file;
}

}  // namespace tandem::app
