// Timing one collective of a communicator group on a simulated cluster: the algorithm NCCL's tuner
// would pick (or a named one), the schedule built once per shape, every instance of the group
// simulated at once so that instances whose routes share a link share it, and each distinct
// (collective, size, algorithm, placement) simulated once. Shared by training steps
// (sim/training.h) and the replay of flight-recorder dumps (app/replay/replay.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/schedule.h"
#include "core/types.h"
#include "models/cluster.h"
#include "models/topology.h"
#include "models/workload.h"
#include "sim/collective_plan.h"
#include "sim/simulator.h"

namespace tandem::sim {

// The largest group whose explicit schedules (CollectiveTimer's explicit_schedules) still run op
// by op. Beyond it, op by op takes minutes and gigabytes per distinct collective (measured, 16
// channels, 4 MiB: a ring broadcast on 256 GPUs 3.8 s, on 1,024 GPUs 36.8 s and 2.8 GB; a
// replay of 1,024 ranks' all_gathers did not finish in 10 min at 11 GB), so regular rings take
// their rank-symmetric rounds and other schedules (broadcast chains, a shrink's survivors) the
// analytic replay after one contention round, as `tandem bench` and training steps time them.
// Those (and every path of a larger group) are arithmetic after one contention round, with no
// SimGrid clock: a time does not depend on what the timer ran before it. Op by op, a run starts at
// the clock earlier runs left, whose rounding can show in the last bits.
inline constexpr int kMaxOpByOpRanks = 256;

// One distinct collective, as the simulator timed it.
struct CollectiveTiming {
  Collective collective = Collective::kAllGather;
  int64_t bytes = 0;      // nccl-tests' size
  std::string group;      // "tp", "fsdp", ...
  int ranks = 0;          // in one instance of the group
  int instances = 0;      // instances of the group simulated at once
  SimAlgorithm algorithm;  // what ran (auto resolved)
  models::NcclProtocol protocol = models::NcclProtocol::kSimple;
  double seconds = 0;
  double busbw_GBps = 0;
};
// A timing as JSON (algorithm and protocol by name): in a training step's result, and what a
// replay's child process sends back (sim/isolated.h).
void to_json(nlohmann::json& j, const CollectiveTiming& timing);
void from_json(const nlohmann::json& j, CollectiveTiming& timing);

class CollectiveTimer {
 public:
  // Builds the topology and the SimGrid platform: at most one timer (or Simulator) per process.
  // With `explicit_schedules`, every collective runs its explicit schedule (rings op by op), as
  // `tandem run`'s collective loops do: a replay of such a run gives back its times, on groups of
  // up to 256 ranks (beyond, op by op costs minutes per collective: regular rings then run their
  // rank-symmetric rounds, other schedules the simulator's analytic replay). Without,
  // rings on regular placements run their rank-symmetric rounds (cheap at any scale; with NCCL's
  // 16 channels up to ~27% slower than op by op at mid sizes, docs/simulator.md).
  CollectiveTimer(const models::ClusterSpec& cluster, const NetworkModel& network, bool explicit_schedules = false);

  // `bytes` (nccl-tests' size) of `collective` on `group`, whose instances list the GPUs of each
  // instance in the group's rank order. `algorithm`: nullopt (NCCL's tuner) or the one to run; a
  // named algorithm that does not implement the collective gives way to the tuner.
  // A group whose first instance spans whole blocks of equal size on its nodes (node-major) is
  // simulated in rank-symmetric form (rings round by round, cheap at any scale); any other (the
  // survivors of a shrink) op by op with an explicit schedule in its rank order.
  CollectiveTiming time(Collective collective, int64_t bytes, const models::CommGroup& group,
                        std::optional<SimAlgorithm> algorithm);

 private:
  // A group that is not node-major whole blocks (a shrink's survivors): op by op, its ring orders
  // kept (collective_timer.cc).
  SimResult run_irregular(CollectiveQuery query, int gpus_per_node);

  models::ClusterSpec cluster_;
  NetworkModel network_;
  bool explicit_schedules_ = false;
  models::Topology topology_;
  Simulator simulator_;
  CollectivePlans plans_;  // the schedules, built once per shape
  std::map<std::tuple<Collective, int64_t, std::optional<SimAlgorithm>, std::vector<std::vector<int>>>,
           CollectiveTiming>
      cache_;
};

}  // namespace tandem::sim
