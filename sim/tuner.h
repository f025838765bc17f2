// Which algorithm and protocol a simulated collective uses: `auto` asks NCCL's own tuner
// (models::NcclCostModel) restricted to the algorithms tandem simulates (ring, tree, nvls,
// nvls_tree, collnet_direct / collnet_chain on SHARP clusters, and pat where NCCL enables it:
// all_gather / reduce_scatter with one GPU per node), the way NCCL_ALGO would restrict it; a fixed
// algorithm gets the protocol NCCL would pick for it. all_to_all and send_recv are NCCL's
// point-to-point transfers ("p2p", sim/p2p.h) unless an algorithm is named (direct: core's
// schedule, op by op).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"
#include "models/cost_model.h"
#include "sim/p2p.h"
#include "sim/sim_algorithm.h"
#include "sim/simulator.h"

namespace tandem::sim {

struct Choice {
  SimAlgorithm algorithm;  // a core schedule or one of the simulator's models
  models::NcclProtocol protocol = models::NcclProtocol::kSimple;
  uint32_t tiles = 1;  // pipelining depth for the schedule
  int channels = 1;    // NCCL's runtime channels for this pick (ring and tree schedules run them;
                       // p2p: the channels each peer's transfer is split over)
};

class Tuner {
 public:
  // `nodes` x `gpus_per_node` GPUs of `cluster` take part.
  Tuner(const models::ClusterSpec& cluster, int nodes, int gpus_per_node);

  Choice choose(Collective collective, int64_t bytes) const;
  // `algorithm` forced (NCCL_ALGO); `protocol` too when given (NCCL_PROTO). Throws
  // Error(kUnsupported) when the algorithm does not run `collective` here.
  Choice choose_for(Collective collective, int64_t bytes, SimAlgorithm algorithm,
                    std::optional<models::NcclProtocol> protocol = std::nullopt) const;

  // NCCL's point-to-point plan for these GPUs (what a "p2p" choice runs on).
  const P2pPlan& p2p_plan() const { return p2p_plan_; }

 private:
  Choice choose_p2p(Collective collective, int64_t bytes) const;

  models::NcclCostModel model_;
  P2pPlan p2p_plan_;
  int nodes_;
  int gpus_per_node_;
};

// Runs `choice` when it names one of the simulator's models rather than a core schedule (p2p,
// nvls, nvls_tree, collnet_direct, collnet_chain) on `instances` (each one group's GPUs,
// node-major, `per_node` per node; the in-switch models time the first); nullopt for a core
// algorithm, which the caller runs as a schedule. Throws Error(kUnsupported) for an in-switch
// model asked for another collective than all_reduce.
std::optional<SimResult> run_simulator_model(Simulator& simulator, const Tuner& tuner, const Choice& choice,
                                             Collective collective, int64_t bytes,
                                             const std::vector<std::vector<int>>& instances, int per_node);

}  // namespace tandem::sim
