#include "sim/sweep.h"

#include <map>
#include <nlohmann/json.hpp>

#include "core/algorithms.h"
#include "core/error.h"
#include "sim/collective_plan.h"
#include "sim/isolated.h"
#include "sim/protocol.h"
#include "sim/tuner.h"

namespace tandem::sim {

using nlohmann::json;

RankLayout sweep_layout(int nodes, int per_node, bool rail_aligned) {
  return rail_aligned ? RankLayout::nccl(nodes, per_node) : RankLayout::nodes(nodes, per_node);
}

namespace {

std::vector<SweepPointResult> run_in_process(const SweepRequest& request) {
  const models::Topology topology = models::build_cluster(request.cluster);
  const int total_per_node = topology.gpus_per_node();
  const int per_node = request.gpus_per_node > 0 ? request.gpus_per_node : total_per_node;
  if (per_node > total_per_node) {
    fail(ErrorCode::kInvalidArgument, "{} GPUs per node requested but {} has {}", per_node, request.cluster.preset,
         total_per_node);
  }
  const int nodes = topology.node_count();
  const int n = nodes * per_node;
  std::vector<int> gpu_of_rank;
  for (int v = 0; v < nodes; ++v) {
    for (int i = 0; i < per_node; ++i) gpu_of_rank.push_back(v * total_per_node + i);
  }
  const RankLayout layout = sweep_layout(nodes, per_node, request.rail_aligned);
  Simulator simulator(topology, request.cluster, request.network);
  CollectivePlans plans(simulator, request.network);
  const Tuner tuner(request.cluster, nodes, per_node);

  std::vector<SweepPointResult> results;
  for (const SweepPoint& point : request.points) {
    SweepPointResult out;
    out.point = point;
    try {
      const int64_t count = nccl_tests_counts(point.collective, point.bytes, point.dtype, n).count;
      Choice choice = !point.algorithm && !point.protocol
                          ? tuner.choose(point.collective, point.bytes)
                          : tuner.choose_for(point.collective, point.bytes,
                                             point.algorithm.value_or(tuner.choose(point.collective, point.bytes).algorithm),
                                             point.protocol);
      // NCCL's p2p model is a fluid-model one: the packet model runs core's direct schedule.
      if (choice.algorithm == SimAlgorithm::Model::kP2p && request.network.fidelity == Fidelity::kPacket) {
        choice = tuner.choose_for(point.collective, point.bytes, Algorithm::kDirect, point.protocol);
      }
      if (request.channels > 0 && choice.algorithm != SimAlgorithm::Model::kP2p) choice.channels = request.channels;
      out.algorithm = choice.algorithm;
      out.protocol = choice.protocol;
      out.channels = choice.channels;
      CollectiveQuery query;
      query.spec = {point.collective, count, point.dtype, point.op, point.root, n};
      query.bytes = point.bytes;
      query.choice = choice;
      query.tuner = &tuner;
      query.layout = layout;
      query.instances = {gpu_of_rank};
      query.per_node = per_node;
      query.params = request.params;
      // Explicit schedules run op by op (n x channels actors for a ring); otherwise rings take their
      // rank-symmetric rounds, an all_gather / reduce_scatter ring as half an all_reduce's, as
      // training steps time them (sim/collective_plan.h).
      query.form = request.explicit_schedules ? ScheduleForm::kExplicit : ScheduleForm::kSymmetric;
      query.half_ring = !request.explicit_schedules;
      const SimResult sim = plans.run(query);
      out.ok = true;
      out.seconds = sim.seconds;
      out.simulated_transfers = sim.simulated_transfers;
      out.algbw_GBps = sim.seconds > 0 ? static_cast<double>(point.bytes) / sim.seconds / 1e9 : 0;
      out.busbw_GBps = out.algbw_GBps * bus_bandwidth_factor(point.collective, n);
    } catch (const Error& e) {
      out.ok = false;
      out.error = e.what();
    }
    results.push_back(std::move(out));
  }
  return results;
}

std::vector<SweepPointResult> run_child(const SweepRequest& request) {
  return run_isolated([&] { return run_in_process(request); });
}

}  // namespace

void to_json(json& j, const SweepPointResult& result) {
  const SweepPoint& point = result.point;
  j = {{"point",
        {{"collective", name(point.collective)},
         {"bytes", point.bytes},
         {"algorithm", name_or_auto(point.algorithm)},
         {"protocol", point.protocol ? name(*point.protocol) : "auto"},
         {"dtype", name(point.dtype)},
         {"op", name(point.op)},
         {"root", point.root}}},
       {"ok", result.ok},
       {"error", result.error},
       {"algorithm", result.algorithm ? name(*result.algorithm) : ""},
       {"protocol", name(result.protocol)},
       {"channels", result.channels},
       {"seconds", result.seconds},
       {"algbw", result.algbw_GBps},
       {"busbw", result.busbw_GBps},
       {"simulated_transfers", result.simulated_transfers}};
}

void from_json(const json& j, SweepPointResult& result) {
  const json& point = j.at("point");
  result.point.collective = parse_collective(point.at("collective").get<std::string>());
  result.point.bytes = point.at("bytes").get<int64_t>();
  result.point.algorithm = parse_sim_algorithm_or_auto(point.at("algorithm").get<std::string>());
  result.point.protocol = parse_protocol_or_auto(point.at("protocol").get<std::string>());
  result.point.dtype = parse_data_type(point.at("dtype").get<std::string>());
  result.point.op = parse_reduce_op(point.at("op").get<std::string>());
  result.point.root = point.at("root").get<int>();
  result.ok = j.at("ok").get<bool>();
  result.error = j.at("error").get<std::string>();
  const std::string algorithm = j.at("algorithm").get<std::string>();
  result.algorithm = algorithm.empty() ? std::nullopt : std::optional(parse_sim_algorithm(algorithm));
  result.protocol = models::parse_nccl_protocol(j.at("protocol").get<std::string>());
  result.channels = j.at("channels").get<int>();
  result.seconds = j.at("seconds").get<double>();
  result.algbw_GBps = j.at("algbw").get<double>();
  result.busbw_GBps = j.at("busbw").get<double>();
  result.simulated_transfers = j.at("simulated_transfers").get<uint64_t>();
}

std::vector<SweepPointResult> run_sweep(const SweepRequest& request, bool isolated) {
  if (request.network.fidelity == Fidelity::kPacket) {
    // SimGrid 3.32's ns-3 glue can abort the process on an internal assertion for some traffic
    // (docs/simulator.md): each point runs in its own child, so one abort costs that point only.
    std::vector<SweepPointResult> results;
    for (const SweepPoint& point : request.points) {
      SweepRequest one = request;
      one.points = {point};
      try {
        results.push_back(run_child(one).at(0));
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kBackend) throw;
        SweepPointResult failed;
        failed.point = point;
        failed.error = fmt::format("packet model aborted inside SimGrid's ns-3 binding ({})", e.what());
        results.push_back(failed);
      }
    }
    return results;
  }
  if (!isolated) return run_in_process(request);
  return run_child(request);
}

}  // namespace tandem::sim
