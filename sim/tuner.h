// Which algorithm and protocol a simulated collective uses: `auto` asks NCCL's own tuner
// (models::NcclCostModel) restricted to the algorithms tandem simulates (ring, tree, nvls), the way
// NCCL_ALGO would restrict it; a fixed algorithm gets the protocol NCCL would pick for it.
#pragma once

#include <string>

#include "core/types.h"
#include "models/cost_model.h"
#include "sim/simulator.h"

namespace tandem::sim {

struct Choice {
  std::string algorithm;  // a core algorithm name or "nvls"
  Protocol protocol = Protocol::kSimple;
  uint32_t tiles = 1;     // pipelining depth for the schedule
};

class Tuner {
 public:
  // `nodes` x `gpus_per_node` GPUs of `cluster` take part.
  Tuner(const models::ClusterSpec& cluster, int nodes, int gpus_per_node);

  Choice choose(Collective collective, int64_t bytes) const;
  Choice choose_for(Collective collective, int64_t bytes, const std::string& algorithm) const;

 private:
  models::NcclCostModel model_;
  int nodes_;
};

}  // namespace tandem::sim
