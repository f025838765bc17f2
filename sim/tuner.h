// Which algorithm and protocol a simulated collective uses: `auto` asks NCCL's own tuner
// (models::NcclCostModel) restricted to the algorithms tandem simulates (ring, tree, nvls,
// nvls_tree, and pat where NCCL enables it: all_gather / reduce_scatter with one GPU per node), the
// way NCCL_ALGO would restrict it; a fixed algorithm gets the protocol NCCL would pick for it.
#pragma once

#include <string>

#include "core/types.h"
#include "models/cost_model.h"
#include "sim/simulator.h"

namespace tandem::sim {

struct Choice {
  std::string algorithm;  // a core algorithm name, "nvls" or "nvls_tree"
  Protocol protocol = Protocol::kSimple;
  uint32_t tiles = 1;     // pipelining depth for the schedule
  int channels = 1;       // NCCL's runtime channels for this pick (ring and tree schedules run them)
};

class Tuner {
 public:
  // `nodes` x `gpus_per_node` GPUs of `cluster` take part.
  Tuner(const models::ClusterSpec& cluster, int nodes, int gpus_per_node);

  Choice choose(Collective collective, int64_t bytes) const;
  // `algorithm` forced (NCCL_ALGO); `protocol` too unless "auto" (NCCL_PROTO).
  Choice choose_for(Collective collective, int64_t bytes, const std::string& algorithm,
                    const std::string& protocol = "auto") const;

 private:
  models::NcclCostModel model_;
  int nodes_;
  int gpus_per_node_;
};

}  // namespace tandem::sim
