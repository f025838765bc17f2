// One collective as the simulator runs it: the one place that turns (collective, bytes, the GPUs of
// a communicator, the algorithm chosen) into the checked schedule and the simulator's request.
//
// A caller decides what runs (the tuner's Choice, or a named algorithm), on which GPUs (one or more
// instances of a group, the first one timed) and in which schedule form; CollectivePlans then
//   - leaves the simulator's own models (p2p, nvls, nvls_tree, collnet_direct, collnet_chain)
//     without a schedule: they run as models (sim/tuner.h's run_simulator_model);
//   - times a ring all_gather / reduce_scatter of S bytes whose query allows it as half of a ring
//     all_reduce of S bytes (N - 1 steps of S / N each, on the same channel rings): core has the
//     rank-symmetric form, which the simulator runs round by round at any scale, for the all_reduce
//     ring only; the time is half of that all_reduce's plus the protocol's base latency once
//     (tests/sim/simulator_test.cc and tests/sim/training_test.cc check it against the explicit
//     schedules);
//   - builds the checked schedule of anything else once per shape (collective, algorithm, root,
//     ranks, ranks per node, ring orders, parameters, form) and reuses it for every size: schedules
//     count chunks, not elements.
//
// Sweeps (sim/sweep.h), the collective timer of training steps and replay (sim/collective_timer.h),
// the run session's attempts (sim/sim_attempts.h), start-up's bootstrap rings (sim/startup.h) and
// SimExecutor (a schedule it is given) all run through it: nothing else builds a SimRequest.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/algorithms.h"
#include "core/schedule.h"
#include "core/types.h"
#include "sim/simulator.h"
#include "sim/tuner.h"

namespace tandem::sim {

// What to plan.
struct CollectiveQuery {
  CollectiveSpec spec;  // count: the elements nccl-tests gives `bytes` of spec.collective
  int64_t bytes = 0;    // nccl-tests' size
  Choice choice;        // what runs: a core algorithm or one of the simulator's models
  // NCCL's point-to-point plan of a "p2p" choice (Tuner::p2p_plan); not needed otherwise.
  const Tuner* tuner = nullptr;
  // The ranks on the nodes and their ring orders (NCCL's channel rings, a shrink's survivors).
  RankLayout layout;
  // The GPUs of each instance of the group, in rank order, node-major; the first is the one
  // timed, the others run at the same time on their own GPUs (SimRequest::concurrent).
  std::vector<std::vector<int>> instances;
  int per_node = 1;  // GPUs of an instance on each node (the simulator models' placement)
  ScheduleForm form = ScheduleForm::kExplicit;
  AlgoParams params;  // ring and tree: the channels are the choice's
  bool half_ring = false;  // a ring all_gather / reduce_scatter may run as half a ring all_reduce
  bool analytic = false;   // SimRequest::analytic
};

// A planned collective: what the simulator runs for a query.
struct CollectivePlan {
  Choice choice;
  Collective collective = Collective::kAllReduce;  // asked
  int64_t bytes = 0;
  CollectiveSpec spec;                 // simulated: the all_reduce of a half ring
  const Schedule* schedule = nullptr;  // null: one of the simulator's models
  std::shared_ptr<void>* replay_cache = nullptr;  // the schedule's (SimRequest::replay_cache)
  std::vector<std::vector<int>> instances;
  int per_node = 1;
  const Tuner* tuner = nullptr;
  bool half_ring = false;
  bool analytic = false;

  // The simulator's request of a planned schedule (its first instance, the others concurrent).
  SimRequest request() const;
};

class CollectivePlans {
 public:
  // On `simulator`'s platform, with `network` (the half ring's base latency).
  CollectivePlans(Simulator& simulator, const NetworkModel& network);

  // The plan of `query`: its schedule built and checked once per shape. Nothing is simulated.
  CollectivePlan plan(const CollectiveQuery& query);

  // A plan of a schedule the caller built and checked (SimExecutor's), on `gpus`.
  static CollectivePlan of_schedule(const Schedule& schedule, const CollectiveSpec& spec, std::vector<int> gpus,
                                    models::NcclProtocol protocol, uint32_t tiles);

  // Simulates `plan` on the platform as it stands (its link factors, dead links, slowed GPUs).
  SimResult run(const CollectivePlan& plan);

  // The plan of `query`, simulated.
  SimResult run(const CollectiveQuery& query) { return run(plan(query)); }

 private:
  using ShapeKey = std::tuple<Collective, Algorithm, int, int, int, std::vector<std::vector<int>>, int, int,
                              Algorithm, ScheduleForm>;
  // A schedule built once per shape, with what the simulator derives from it.
  struct Planned {
    Schedule schedule;
    std::shared_ptr<void> replay_cache;
  };
  Planned& schedule_for(const CollectiveSpec& spec, Algorithm algorithm, const RankLayout& layout,
                        const AlgoParams& params, ScheduleForm form);

  Simulator& simulator_;
  NetworkModel network_;
  std::map<ShapeKey, Planned> schedules_;  // map nodes stay put: plans point into them
  std::shared_ptr<void>* last_cache_ = nullptr;  // the one replay_cache kept filled
};

}  // namespace tandem::sim
