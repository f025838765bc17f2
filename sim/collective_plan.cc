#include "sim/collective_plan.h"

#include <string>
#include <utility>

#include "core/error.h"

namespace tandem::sim {

SimRequest CollectivePlan::request() const {
  if (schedule == nullptr) {
    fail(ErrorCode::kBackend, "sim: {} is a simulator model, not a schedule", name(choice.algorithm));
  }
  SimRequest request;
  request.schedule = schedule;
  request.spec = spec;
  request.gpu_of_rank = instances.empty() ? std::vector<int>{} : instances.front();
  request.protocol = choice.protocol;
  request.tiles = choice.tiles;
  if (instances.size() > 1) request.concurrent.assign(instances.begin() + 1, instances.end());
  request.analytic = analytic;
  request.replay_cache = replay_cache;
  return request;
}

CollectivePlans::CollectivePlans(Simulator& simulator, const NetworkModel& network)
    : simulator_(simulator), network_(network) {}

CollectivePlan CollectivePlans::plan(const CollectiveQuery& query) {
  CollectivePlan plan;
  plan.choice = query.choice;
  plan.collective = query.spec.collective;
  plan.bytes = query.bytes;
  plan.spec = query.spec;
  plan.instances = query.instances;
  plan.per_node = query.per_node;
  plan.tuner = query.tuner;
  plan.analytic = query.analytic;
  if (query.choice.algorithm.is_model()) return plan;
  const Algorithm algorithm = query.choice.algorithm.schedule;
  AlgoParams params = query.params;
  if (algorithm == Algorithm::kRing || algorithm == Algorithm::kTree) params.channels = query.choice.channels;
  plan.half_ring = query.half_ring && algorithm == Algorithm::kRing &&
                   (plan.collective == Collective::kAllGather || plan.collective == Collective::kReduceScatter);
  if (plan.half_ring) {
    plan.spec.collective = Collective::kAllReduce;
    plan.spec.count = query.bytes / static_cast<int64_t>(size_bytes(query.spec.dtype));
  }
  Planned& planned = schedule_for(plan.spec, algorithm, query.layout, params, query.form);
  plan.schedule = &planned.schedule;
  plan.replay_cache = &planned.replay_cache;
  // One schedule's derived replay at a time: what the simulator keeps is as large as the schedule
  // (hundreds of MB for a 16,384-rank tree), and runs of one schedule come together (the sizes of
  // a sweep, the layers of a step).
  if (last_cache_ != nullptr && last_cache_ != plan.replay_cache) last_cache_->reset();
  last_cache_ = plan.replay_cache;
  return plan;
}

CollectivePlan CollectivePlans::of_schedule(const Schedule& schedule, const CollectiveSpec& spec, std::vector<int> gpus,
                                            models::NcclProtocol protocol, uint32_t tiles) {
  CollectivePlan plan;
  plan.choice.algorithm = schedule.algorithm;
  plan.choice.protocol = protocol;
  plan.choice.tiles = tiles;
  plan.collective = spec.collective;
  plan.spec = spec;
  plan.schedule = &schedule;
  plan.instances.push_back(std::move(gpus));
  return plan;
}

SimResult CollectivePlans::run(const CollectivePlan& plan) {
  if (plan.schedule == nullptr) {
    if (plan.tuner == nullptr) {
      fail(ErrorCode::kBackend, "sim: {} planned without a tuner", name(plan.choice.algorithm));
    }
    return *run_simulator_model(simulator_, *plan.tuner, plan.choice, plan.collective, plan.bytes, plan.instances,
                                plan.per_node);
  }
  SimResult result = simulator_.run(plan.request());
  if (plan.half_ring) {
    const double base = network_.base_latency_s(plan.choice.protocol, Algorithm::kRing);
    result.seconds = base + (result.seconds - base) / 2;
  }
  return result;
}

CollectivePlans::Planned& CollectivePlans::schedule_for(const CollectiveSpec& spec, Algorithm algorithm,
                                                       const RankLayout& layout, const AlgoParams& params,
                                                       ScheduleForm form) {
  ShapeKey key{spec.collective,       algorithm,      spec.root,    layout.nranks,      layout.ranks_per_node,
               layout.rings,          params.channels, params.pipeline_chunks, params.inter_node, form};
  auto it = schedules_.find(key);
  if (it == schedules_.end()) {
    it = schedules_.emplace(std::move(key), Planned{build_checked_schedule(spec, layout, algorithm, params, form), {}})
             .first;
  }
  return it->second;
}

}  // namespace tandem::sim
