// Prediction accuracy: simulates every row of the published nccl-tests measurements in
//
//   ../shared/reference/h100_calibration.csv        one H100 / H200 node, and a pair of one-GPU nodes per NIC
//   ../shared/reference/multinode_calibration.csv   several nodes (RoCE, InfiniBand), and a few single-node points
//
// (copied from the project's reference data; sources in docs/simulator.md and in the files) with the
// default network model, on the cluster preset a row's system names, its NIC count and speed
// applied, with the algorithm and protocol the measurement forced. Prints per row the prediction,
// the measured range, the error and what the simulator ran (algorithm, protocol, channels); rows a
// preset cannot express are printed as skipped, with the reason. Error is 0 inside the measured
// range, else the distance to the nearer end relative to it.
//
// Aims: every large-size bandwidth row (busbw_GBps, busbw_per_nic_GBps) within 10%, every
// small-size latency row (time_us) within 25%. Exits 0 when every simulated row meets its aim, 1
// when one misses it, 2 on an error (a file that does not read, a row the simulator refuses).
//
//   build/release/bench/tandem_accuracy [--csv OUT] [CSV...]   (run from the repository root; no CSV:
//   both files; --csv also writes every simulated row to OUT)
//
// A CSV argument may be in either format; the header says which.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/csv_table.h"
#include "core/error.h"
#include "core/sizes.h"
#include "core/file_read.h"
#include "models/cluster.h"
#include "sim/sweep.h"

namespace tandem {
namespace {

// The aims of the accuracy issue: large-size bandwidth rows within 10%, small-size latency rows
// within 25% (a few µs of fixed cost weigh more there).
constexpr double kBandwidthAim = 0.10;
constexpr double kLatencyAim = 0.25;

constexpr const char* kDefaultFiles[] = {"../shared/reference/h100_calibration.csv", "../shared/reference/multinode_calibration.csv"};

// The two headers: the single-node file (11 columns) and the multi-node file (17 columns).
constexpr std::string_view kSingleNodeHeader =
    "id,system,gpus,nodes,collective,algorithm,size_bytes,metric,value_low,value_high,source";
constexpr std::string_view kMultinodeHeader =
    "id,system,gpus,nodes,gpus_per_node,nics_per_node,nic_gbps,fabric,collective,algorithm,protocol,size_bytes,"
    "metric,value_low,value_high,source,notes";
constexpr size_t kSingleNodeFields = 11;
constexpr size_t kMultinodeFields = 17;
// A measurement table: the shipped ones are under 2 KiB, a row per measured point.
constexpr uint64_t kMaxTableFileBytes = uint64_t{16} << 20;  // 16 MiB

struct Row {
  std::string where;  // "file:line"
  std::string id, system, collective, algorithm, protocol, metric;
  int gpus = 0, nodes = 0, gpus_per_node = 0;
  std::optional<int> nics_per_node;  // unset: not applicable (one node) or not in the file
  std::optional<double> nic_gbps;
  std::string fabric;          // empty in the single-node file
  std::string default_preset;  // the preset of a system that names no GPU (the single-node file: H100)
  int64_t bytes = 0;
  double low = 0, high = 0;
};

template <typename Number>
Number parse_number(const std::string& text, std::string_view field, const std::string& where) {
  Number value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    fail(ErrorCode::kFormat, "{}: {} '{}' is not a number", where, field, text);
  }
  return value;
}

// nics_per_node / nic_gbps: "-" is not applicable (one node), "~8" the usual configuration of the
// system (not stated in the source), read as 8.
template <typename Number>
std::optional<Number> parse_optional(const std::string& text, std::string_view field, const std::string& where) {
  if (text == "-") return std::nullopt;
  return parse_number<Number>(text.starts_with('~') ? text.substr(1) : text, field, where);
}

void check_row(const Row& row) {
  try {
    parse_collective(row.collective);
  } catch (const Error& e) {
    fail(ErrorCode::kFormat, "{}: {}", row.where, e.what());
  }
  if (row.metric != "busbw_GBps" && row.metric != "busbw_per_nic_GBps" && row.metric != "time_us") {
    fail(ErrorCode::kFormat, "{}: unknown metric '{}' (expected busbw_GBps, busbw_per_nic_GBps or time_us)", row.where,
         row.metric);
  }
  if (row.protocol != "auto" && row.protocol != "LL" && row.protocol != "LL128" && row.protocol != "Simple") {
    fail(ErrorCode::kFormat, "{}: unknown protocol '{}' (expected auto, LL, LL128 or Simple)", row.where, row.protocol);
  }
  if (row.nodes < 1 || row.gpus_per_node < 1 || row.gpus != row.nodes * row.gpus_per_node) {
    fail(ErrorCode::kFormat, "{}: {} GPUs is not {} nodes x {} GPUs", row.where, row.gpus, row.nodes,
         row.gpus_per_node);
  }
  if (row.bytes <= 0 || row.low <= 0 || row.high < row.low) {
    fail(ErrorCode::kFormat, "{}: size and measured range must be positive, low <= high", row.where);
  }
}

// The columns both formats start with: id, system, gpus, nodes.
Row row_start(const std::vector<std::string>& f, const std::string& where) {
  Row row;
  row.where = where;
  row.id = f[0];
  row.system = f[1];
  row.gpus = parse_number<int>(f[2], "gpus", where);
  row.nodes = parse_number<int>(f[3], "nodes", where);
  return row;
}

Row single_node_row(const std::vector<std::string>& f, const std::string& where) {
  Row row = row_start(f, where);
  row.gpus_per_node = row.nodes > 0 ? row.gpus / row.nodes : 0;
  row.collective = f[4];
  row.algorithm = f[5];
  row.protocol = "auto";
  row.bytes = parse_number<int64_t>(f[6], "size_bytes", where);
  row.metric = f[7];
  row.low = parse_number<double>(f[8], "value_low", where);
  row.high = parse_number<double>(f[9], "value_high", where);
  row.default_preset = "dgx-h100";  // H100-class measurements; the per-NIC row names its ConnectX-7
  return row;
}

Row multinode_row(const std::vector<std::string>& f, const std::string& where) {
  Row row = row_start(f, where);
  row.gpus_per_node = parse_number<int>(f[4], "gpus_per_node", where);
  row.nics_per_node = parse_optional<int>(f[5], "nics_per_node", where);
  row.nic_gbps = parse_optional<double>(f[6], "nic_gbps", where);
  row.fabric = f[7];
  row.collective = f[8];
  row.algorithm = f[9];
  row.protocol = f[10];
  row.bytes = parse_number<int64_t>(f[11], "size_bytes", where);
  row.metric = f[12];
  row.low = parse_number<double>(f[13], "value_low", where);
  row.high = parse_number<double>(f[14], "value_high", where);
  if (row.nodes > 1 && (!row.nics_per_node || !row.nic_gbps)) {
    fail(ErrorCode::kFormat, "{}: a row of {} nodes needs nics_per_node and nic_gbps", where, row.nodes);
  }
  return row;
}

// Either format, told apart by the header (the first line that is not a comment).
std::vector<Row> read_rows(const std::string& path) {
  std::istringstream file(read_file_bounded(path, kMaxTableFileBytes, "measurement table"));
  std::vector<Row> rows;
  size_t expected_fields = 0;
  int line_number = 0;
  for (std::string line; std::getline(file, line);) {
    ++line_number;
    if (line.empty() || line[0] == '#') continue;
    const std::string where = fmt::format("{}:{}", path, line_number);
    if (expected_fields == 0) {
      if (line == kSingleNodeHeader) {
        expected_fields = kSingleNodeFields;
      } else if (line == kMultinodeHeader) {
        expected_fields = kMultinodeFields;
      } else {
        fail(ErrorCode::kFormat, "{}: unknown header (expected '{}' or '{}')", where, kSingleNodeHeader,
             kMultinodeHeader);
      }
      continue;
    }
    const std::vector<std::string> fields = bench::split_csv_line(line);
    if (fields.size() != expected_fields) {
      fail(ErrorCode::kFormat, "{}: expected {} fields, found {}", where, expected_fields, fields.size());
    }
    rows.push_back(expected_fields == kSingleNodeFields ? single_node_row(fields, where)
                                                        : multinode_row(fields, where));
    check_row(rows.back());
  }
  if (expected_fields == 0) fail(ErrorCode::kFormat, "{}: no header", path);
  return rows;
}

// The preset of the GPU a row's system names; empty when it names none the presets have.
std::string preset_for(const Row& row) {
  if (row.system.find("A100") != std::string::npos) return "hgx-a100";
  if (row.system.find("H200") != std::string::npos) return "dgx-h200";
  if (row.system.find("H100") != std::string::npos) return "dgx-h100";
  return row.default_preset;
}

// The simulation of a row, or why the presets cannot express it.
struct RowRequest {
  sim::SweepRequest request;
  std::string skipped;  // empty: the request stands
};

RowRequest request_for(const Row& row) {
  RowRequest out;
  const std::string preset = preset_for(row);
  if (preset.empty()) {
    out.skipped = fmt::format("no preset for the GPUs of '{}' (presets: dgx-h100, dgx-h200, hgx-a100)", row.system);
    return out;
  }
  sim::SweepRequest& request = out.request;
  request.cluster = models::cluster_preset(preset);
  request.cluster.nodes = row.nodes;
  if (row.gpus_per_node > request.cluster.gpus_per_node) {
    out.skipped =
        fmt::format("{} GPUs per node, {} nodes have {}", row.gpus_per_node, preset, request.cluster.gpus_per_node);
    return out;
  }
  request.gpus_per_node = row.gpus_per_node;
  // RoCE and InfiniBand clusters are built as NVIDIA's reference rail-optimized fabric, the presets'
  // default; a single node has no fabric (the file says NVLink4).
  if (row.nodes > 1 && !row.fabric.empty() && !row.fabric.starts_with("RoCE") &&
      !row.fabric.starts_with("InfiniBand")) {
    out.skipped = fmt::format("fabric '{}' has no preset equivalent", row.fabric);
    return out;
  }
  if (row.nics_per_node) request.cluster.nics_per_node = *row.nics_per_node;
  if (row.nic_gbps) request.cluster.nic_Bps = *row.nic_gbps * 1e9 / 8;  // ClusterSpec: bytes per second
  try {
    models::validate(request.cluster);
  } catch (const Error& e) {
    out.skipped = e.what();
    return out;
  }

  sim::SweepPoint point;
  point.collective = parse_collective(row.collective);
  point.bytes = row.bytes;
  // NCCL runs all_to_all as grouped sends and receives: NCCL_ALGO does not apply to it, so the
  // algorithm column records the environment, not what ran. The simulator picks its point-to-point
  // schedule.
  const bool point_to_point = point.collective == Collective::kAllToAll || point.collective == Collective::kSendRecv;
  if (!point_to_point) point.algorithm = sim::parse_sim_algorithm_or_auto(row.algorithm);
  point.protocol = sim::parse_protocol_or_auto(row.protocol);
  point.dtype = DataType::kF32;  // nccl-tests' default
  request.points = {point};
  return out;
}

double aim_for(const Row& row) { return row.metric == "time_us" ? kLatencyAim : kBandwidthAim; }

double predicted_for(const Row& row, const sim::SweepPointResult& result) {
  if (row.metric == "time_us") return result.seconds * 1e6;
  // busbw_per_nic_GBps: the per-NIC rows run one GPU per node on its own NIC, so the busbw of a
  // rank is that of its NIC.
  return result.busbw_GBps;
}

double error_for(double predicted, const Row& row) {
  if (predicted < row.low) return (row.low - predicted) / row.low;
  if (predicted > row.high) return (predicted - row.high) / row.high;
  return 0.0;
}

std::string range_text(const Row& row) {
  return row.low == row.high ? fmt::format("{}", row.low) : fmt::format("{}-{}", row.low, row.high);
}

std::string asked_text(const Row& row) {
  return row.protocol == "auto" ? row.algorithm : fmt::format("{}/{}", row.algorithm, row.protocol);
}

int run(int argc, char** argv) {
  std::vector<std::string> paths;
  std::string csv_path;  // --csv FILE: every simulated row as CSV too (the accuracy notebook reads it)
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--csv") {
      if (i + 1 >= argc) fail(ErrorCode::kInvalidArgument, "--csv needs a file name");
      csv_path = argv[++i];
    } else {
      paths.push_back(arg);
    }
  }
  if (paths.empty()) paths.assign(std::begin(kDefaultFiles), std::end(kDefaultFiles));
  std::string csv = "id,system,gpus,nodes,collective,asked,size_bytes,metric,predicted,value_low,value_high,error,"
                    "algorithm,protocol,channels\n";
  std::vector<Row> rows;
  for (const std::string& path : paths) {
    std::vector<Row> more = read_rows(path);
    rows.insert(rows.end(), more.begin(), more.end());
  }

  fmt::print("{:<4} {:<27} {:>5} {:>5} {:<14} {:<11} {:>8} {:<18} {:>10} {:>15} {:>7}  {}\n", "id", "system", "gpus",
             "nodes", "collective", "asked", "size", "metric", "predicted", "measured", "error", "ran");
  int simulated = 0, skipped = 0, errors = 0, misses = 0;
  double worst = -1, error_sum = 0;
  std::string worst_id;
  for (const Row& row : rows) {
    fmt::print("{:<4} {:<27} {:>5} {:>5} {:<14} {:<11} {:>8} {:<18} ", row.id, row.system, row.gpus, row.nodes,
               row.collective, asked_text(row), compact_size_text(row.bytes), row.metric);
    const RowRequest plan = request_for(row);
    if (!plan.skipped.empty()) {
      ++skipped;
      fmt::print("skipped: {}\n", plan.skipped);
      continue;
    }
    const sim::SweepPointResult result = sim::run_sweep(plan.request)[0];
    if (!result.ok) {
      ++errors;
      fmt::print("error: {}\n", result.error);
      continue;
    }
    ++simulated;
    const double predicted = predicted_for(row, result);
    const double error = error_for(predicted, row);
    const bool miss = error > aim_for(row);
    misses += miss ? 1 : 0;
    error_sum += error;
    if (error > worst) {
      worst = error;
      worst_id = row.id;
    }
    fmt::print("{:>10.2f} {:>15} {:>6.1f}%{} {} {} {}ch\n", predicted, range_text(row), 100 * error, miss ? "!" : " ",
               sim::name_or_auto(result.algorithm), name(result.protocol), result.channels);
    csv += fmt::format("{},\"{}\",{},{},{},{},{},{},{:.6g},{},{},{:.6g},{},{},{}\n", row.id, row.system, row.gpus,
                       row.nodes, row.collective, asked_text(row), row.bytes, row.metric, predicted, row.low, row.high,
                       error, sim::name_or_auto(result.algorithm), name(result.protocol), result.channels);
  }

  fmt::print("\n{} rows: {} simulated, {} skipped, {} failed to simulate\n", rows.size(), simulated, skipped, errors);
  if (simulated > 0) {
    fmt::print("worst row {} ({:.1f}%), mean |error| {:.1f}%\n", worst_id, 100 * worst, 100 * error_sum / simulated);
  }
  fmt::print("{} rows miss their aim (bandwidth rows {:.0f}%, latency rows {:.0f}%; marked !)\n", misses,
             100 * kBandwidthAim, 100 * kLatencyAim);
  if (!csv_path.empty()) bench::write_csv(csv_path, csv);
  if (errors > 0) return 2;
  return misses == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  try {
    return tandem::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem_accuracy: error: %s\n", e.what());
    return 2;
  }
}
