// The start-up model (sim/startup.h) against published start-up figures (bench/data/startup.csv,
// from ../shared/reference/startup.csv): one row per figure with the model's phases, the measured
// and predicted seconds and the error. Not a test: the figures are checks, not targets (the model's
// constants have their own sources; only U1's per-phase figures set constants).
//
// Usage: tandem_startup_accuracy [CSV] [--out FILE]   (default: bench/data/startup.csv, from the repository root)
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "bench/csv_table.h"
#include "core/error.h"
#include "models/cluster.h"
#include "sim/startup.h"

namespace {

using namespace tandem;

bool flag(const std::string& text) { return text == "true"; }

int run(int argc, char** argv) {
  std::string path = "bench/data/startup.csv";  // run from the repository root
  std::string out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else {
      path = arg;
    }
  }
  std::ifstream in(path);
  if (!in) fail(ErrorCode::kIo, "cannot read {}", path);
  const models::ClusterSpec cluster = models::cluster_preset("dgx-h100");
  std::string csv =
      "id,gpus,quantity,measured_s,predicted_s,error,launch_s,store_s,communicators_s,group_barriers_s,"
      "first_collectives_s,nccl_init_s\n";
  fmt::print("{:<4} {:>6} {:<10} {:>10} {:>10} {:>8}   {}\n", "id", "GPUs", "quantity", "measured", "predicted",
             "error", "phases (launch / store / communicators / barriers / first collectives)");
  double sum_abs = 0;
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line.rfind("id,", 0) == 0) continue;
    const std::vector<std::string> f = bench::split_csv_line(line);
    if (f.size() < 12) fail(ErrorCode::kFormat, "{}: a row needs 12 fields: {}", path, line);
    sim::StartupJob job;
    job.gpus = std::stoi(f[1]);
    models::ParallelLayout layout;
    layout.tp = std::stoi(f[2]);
    layout.pp = std::stoi(f[3]);
    job.groups = sim::layout_groups(layout, job.gpus);
    job.levers.store = sim::parse_store_backend(f[4]);
    job.levers.eager_init = flag(f[5]);
    job.levers.ranks_per_root = std::stoi(f[6]);
    job.levers.runtime_connect = flag(f[7]);
    job.levers.init_barriers = flag(f[8]);
    job.levers.topo_cache = flag(f[9]);
    const std::string& quantity = f[10];
    const double measured = std::stod(f[11]);
    if (quantity == "nccl_init") job.groups.clear();  // NCCL's figures time one communicator
    const sim::StartupResult r = sim::simulate_startup(cluster, job);
    const double predicted = quantity == "nccl_init" ? r.nccl_init_s : r.total_s;
    const double error = predicted / measured - 1;
    sum_abs += std::abs(error);
    ++rows;
    fmt::print("{:<4} {:>6} {:<10} {:>9.2f}s {:>9.2f}s {:>+7.1f}%   {:.2f} / {:.2f} / {:.2f} / {:.2f} / {:.2f} s\n",
               f[0], job.gpus, quantity, measured, predicted, 100 * error, r.phase_s("launch"), r.phase_s("store"),
               r.phase_s("communicators"), r.phase_s("group barriers"), r.phase_s("first collectives"));
    csv +=
        fmt::format("{},{},{},{},{:.6g},{:.4f},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g}\n", f[0], job.gpus, quantity,
                    measured, predicted, error, r.phase_s("launch"), r.phase_s("store"), r.phase_s("communicators"),
                    r.phase_s("group barriers"), r.phase_s("first collectives"), r.nccl_init_s);
  }
  if (rows > 0) fmt::print("mean |error| {:.1f}% over {} rows\n", 100 * sum_abs / rows, rows);
  if (!out_path.empty()) bench::write_csv(out_path, csv);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem_startup_accuracy: %s\n", e.what());
    return 1;
  }
}
