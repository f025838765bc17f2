// The simulator's attempts for a run session (core/session.h): each attempt timed on the SimGrid
// network model of the cluster, in simulated time, with the session's faults applied to the
// platform: a degraded link runs at its factor, a straggler's GPU is slowed, a dead link or NIC
// the schedule crosses stalls the attempt until the watchdog (a flap fails it instead), and a
// rerouted attempt is simulated with the dead links removed. No data: a transient fault or a
// corrupt message (with checksums) shows at the end of the attempt.
//
// Shrunk rank sets keep the full ring's rail-aligned order minus the dropped ranks, as a
// topology-aware rebuild would. Ring and tree use the channels NCCL's tuner gives them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "core/session.h"
#include "models/cluster.h"
#include "models/topology.h"
#include "sim/collective_plan.h"
#include "sim/simulator.h"
#include "sim/tuner.h"

namespace tandem::sim {

// Where the session's ranks sit on the simulated cluster.
struct SimPlacement {
  const models::Topology* topology = nullptr;
  models::ClusterSpec cluster;
  NetworkModel network;
  int per_node = 0;              // ranks per node (the first per_node GPUs of every node)
  std::vector<int> gpu_of_rank;  // rank -> topology GPU
  // Fault index -> the topology links it kills or slows (link faults and NIC faults only).
  std::map<int, std::vector<uint32_t>> fault_links;
};

class SimAttempts : public AttemptRunner {
 public:
  SimAttempts(const Session& session, SimPlacement placement);
  AttemptResult attempt(const AttemptPlan& plan, const std::vector<int>& active) override;
  double fault_free_seconds(const std::vector<int>& ranks) override;

 private:
  struct Prepared {
    CollectiveSpec spec;
    std::vector<int> gpus;
    CollectivePlan plan;  // its schedule lives in plans_
    std::set<std::pair<int, int>> pairs;  // GPU pairs that exchange messages
  };

  const Prepared& prepare(const std::vector<int>& ranks);
  bool crosses(const Prepared& p, const std::vector<uint32_t>& links) const;
  double simulate(const Prepared& p);
  // Every link a dead-link fault of the plan names: what a reroute goes around.
  std::vector<uint32_t> dead_links() const;
  void set_slowdowns(const std::vector<int>& active, bool on);

  const Session& session_;
  SimPlacement placement_;
  Simulator sim_;
  CollectivePlans plans_;
  std::map<std::vector<int>, Prepared> prepared_;
  std::map<std::vector<int>, double> fault_free_;
};

}  // namespace tandem::sim
