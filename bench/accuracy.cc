// Prediction accuracy: simulates every row of the published H100-class measurements
// (bench/data/h100_calibration.csv, copied from the project's reference data; sources in
// docs/simulator.md) with the default network model and prints prediction, measured range and
// error per row. Error is 0 inside the measured range, else the distance to the nearer end relative
// to it. Exits 1 when a row is off by more than 5%.
//
//   build/release/bench/tandem_accuracy [CSV]
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "models/cluster.h"
#include "sim/sweep.h"

namespace tandem {
namespace {

constexpr double kMaxError = 0.05;

struct Row {
  std::string id, system, collective, algorithm, metric, source;
  int gpus = 0, nodes = 0;
  int64_t bytes = 0;
  double low = 0, high = 0;
};

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream stream(line);
  for (std::string field; std::getline(stream, field, ',');) fields.push_back(field);
  return fields;
}

std::vector<Row> read_rows(const std::string& path) {
  std::ifstream file(path);
  if (!file) fail(ErrorCode::kIo, "cannot read {}", path);
  std::vector<Row> rows;
  bool header = true;
  for (std::string line; std::getline(file, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (header) {
      header = false;
      continue;
    }
    const std::vector<std::string> f = split(line);
    if (f.size() != 11) fail(ErrorCode::kFormat, "{}: expected 11 fields: {}", path, line);
    rows.push_back({f[0], f[1], f[4], f[5], f[7], f[10], std::stoi(f[2]), std::stoi(f[3]), std::stoll(f[6]),
                    std::stod(f[8]), std::stod(f[9])});
  }
  return rows;
}

// The cluster a row was measured on: 8x H100 / H200 SXM nodes (gpus of a node taking part), or a
// pair of nodes each with one GPU and its ConnectX-7 (per-NIC rows).
sim::SweepRequest request_for(const Row& row) {
  sim::SweepRequest request;
  const bool h200 = row.system.find("H200") != std::string::npos;
  request.cluster = models::cluster_preset(h200 ? "dgx-h200" : "dgx-h100");
  request.cluster.nodes = row.nodes;
  request.gpus_per_node = row.gpus / row.nodes;
  sim::SweepPoint point;
  point.collective = parse_collective(row.collective);
  point.bytes = row.bytes;
  point.algorithm = row.algorithm;
  point.dtype = DataType::kF32;  // nccl-tests' default
  request.points = {point};
  return request;
}

int run(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "bench/data/h100_calibration.csv";
  const std::vector<Row> rows = read_rows(path);
  fmt::print("{:<4} {:<14} {:>4} {:>5} {:<11} {:<6} {:>8} {:<19} {:>9} {:>15} {:>7}\n", "id", "system", "gpus",
             "nodes", "collective", "algo", "size", "metric", "predicted", "measured", "error");
  int failures = 0;
  double worst = 0;
  for (const Row& row : rows) {
    const sim::SweepPointResult result = sim::run_sweep(request_for(row))[0];
    if (!result.ok) fail(ErrorCode::kBackend, "row {}: {}", row.id, result.error);
    // busbw_per_nic: each of the rows' nodes drives its GPUs' traffic through one NIC per GPU.
    const double predicted = result.busbw_GBps;
    const double error = predicted < row.low    ? (row.low - predicted) / row.low
                         : predicted > row.high ? (predicted - row.high) / row.high
                                                : 0.0;
    worst = std::max(worst, error);
    if (error > kMaxError) ++failures;
    fmt::print("{:<4} {:<14} {:>4} {:>5} {:<11} {:<6} {:>8} {:<19} {:>9.1f} {:>7.1f}-{:<7.1f} {:>6.1f}%{}  ({}{})\n",
               row.id, row.system, row.gpus, row.nodes, row.collective, row.algorithm,
               fmt::format("{:.0f}MB", static_cast<double>(row.bytes) / 1e6), row.metric, predicted, row.low, row.high,
               100 * error, error > kMaxError ? " !" : "", result.algorithm,
               row.algorithm == "auto" ? fmt::format(" {}", name(result.protocol)) : "");
  }
  fmt::print("{} rows, worst error {:.1f}%, {} over {:.0f}%\n", rows.size(), 100 * worst, failures, 100 * kMaxError);
  return failures == 0 ? 0 : 1;
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
