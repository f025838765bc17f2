// Collective sweeps on a simulated cluster: the unit of work behind `tandem run` (collective-sweep
// workloads) and `tandem bench --backend sim`. run_sweep() builds the topology, the platform and
// the schedules, runs every point, and returns one result per point. Because SimGrid allows one
// platform per process, run_sweep runs in a child process by default (isolated = true: sim/isolated.h),
// so a caller can sweep several clusters (400G vs 800G) from one process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/error.h"
#include "core/sizes.h"
#include "core/types.h"
#include "models/cluster.h"
#include "sim/sim_algorithm.h"
#include "sim/simulator.h"

namespace tandem::sim {

struct SweepPoint {
  Collective collective = Collective::kAllReduce;
  int64_t bytes = 0;                  // nccl-tests' size: all_gather / reduce_scatter count the total
  std::optional<SimAlgorithm> algorithm;         // nullopt: NCCL's tuner picks
  std::optional<models::NcclProtocol> protocol;  // nullopt: NCCL's pick for the algorithm
  DataType dtype = DataType::kBF16;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
};

struct SweepPointResult {
  SweepPoint point;
  bool ok = false;
  std::string error;                  // why the point did not run (unsupported pair, ...)
  std::optional<SimAlgorithm> algorithm;  // the algorithm that ran (auto resolved); none when it did not
  models::NcclProtocol protocol = models::NcclProtocol::kSimple;
  int channels = 0;                   // NCCL channels the collective ran on
  double seconds = 0;
  double algbw_GBps = 0;              // nccl-tests conventions (GB = 1e9 B)
  double busbw_GBps = 0;
  uint64_t simulated_transfers = 0;
};

struct SweepRequest {
  models::ClusterSpec cluster;
  int gpus_per_node = 0;              // GPUs of each node taking part; 0 = all
  bool rail_aligned = true;           // rail-aligned ring order (false: node-major)
  NetworkModel network;
  AlgoParams params;                  // pipelining etc. for the core algorithms
  int channels = 0;                   // 0: NCCL's channel count for the pick (the tuner's); else this many
  bool explicit_schedules = false;    // never use rank-symmetric schedules (simulate every transfer)
  std::vector<SweepPoint> points;
};

std::vector<SweepPointResult> run_sweep(const SweepRequest& request, bool isolated = true);

// A result as JSON (its point included; algorithms and protocols by name): what a sweep's child
// process sends back (sim/isolated.h).
void to_json(nlohmann::json& j, const SweepPointResult& result);
void from_json(const nlohmann::json& j, SweepPointResult& result);

// Ranks 0..n-1 node-major over the GPUs taking part; with rail_aligned, NCCL's channel rings
// (core/schedule.h nccl_rings: each channel meets the next node on a rail of its own).
RankLayout sweep_layout(int nodes, int per_node, bool rail_aligned);

// Elements per rank for nccl-tests' size convention and its bus-bandwidth factor: core/sizes.h.

}  // namespace tandem::sim
