#include "sim/collective_timer.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/algorithms.h"
#include "core/builder.h"
#include "core/error.h"
#include "sim/collective_plan.h"
#include "sim/protocol.h"
#include "sim/sweep.h"
#include "sim/tuner.h"

namespace tandem::sim {
namespace {

// Ranks of concurrent instances simulated together, at most, before only the instances that share
// a node with the first are kept: for rings (simulated round by round) and for the rest (trees,
// send/recv: op by op, one actor per rank and connection, a cost that grows with the ranks).
constexpr int64_t kMaxConcurrentRanks = 4096;
constexpr int64_t kMaxConcurrentRanksOpByOp = 256;

// The instances of a group simulated at once with the first. Inside one node: those on that node
// (other nodes' NVLink is their own), which keeps 2,048 TP groups from being simulated together.
// Across nodes: all of them (their rings meet on leaves and spines) up to `max_ranks` ranks;
// beyond, those that share a node with the first (they share its NICs' rails and leaves;
// instances on other nodes meet only at the spines, which then count as less loaded than they are).
std::vector<std::vector<int>> instances_to_simulate(const std::vector<std::vector<int>>& all, int nodes,
                                                    int gpus_per_node, int64_t max_ranks) {
  const auto total = static_cast<int64_t>(all.size() * all.front().size());
  if (nodes > 1 && total <= max_ranks) return all;
  std::set<int> first_nodes;
  for (int gpu : all.front()) first_nodes.insert(gpu / gpus_per_node);
  std::vector<std::vector<int>> out;
  for (const auto& instance : all) {
    if (std::any_of(instance.begin(), instance.end(),
                    [&](int gpu) { return first_nodes.count(gpu / gpus_per_node) > 0; })) {
      out.push_back(instance);
    }
  }
  return out;
}

// How an instance lies on the nodes: `nodes` nodes, `per_node` GPUs on each, and whether it is
// node-major whole blocks of equal size (what the rank-symmetric schedules assume).
struct Shape {
  int nodes = 0;
  int per_node = 0;
  bool regular = false;
};

Shape shape_of(const std::vector<int>& gpus, int gpus_per_node) {
  Shape shape;
  std::vector<int> counts;  // GPUs per node, in the order nodes appear
  std::set<int> seen;
  int previous = -1;
  bool contiguous = true;
  for (int gpu : gpus) {
    const int node = gpu / gpus_per_node;
    if (node != previous) {
      if (!seen.insert(node).second) contiguous = false;  // the node appears again later
      counts.push_back(0);
      previous = node;
    }
    ++counts.back();
  }
  shape.nodes = static_cast<int>(seen.size());
  shape.per_node = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
  shape.regular = contiguous && std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts.front(); });
  return shape;
}

}  // namespace

CollectiveTimer::CollectiveTimer(const models::ClusterSpec& cluster, const NetworkModel& network,
                                 bool explicit_schedules)
    : cluster_(cluster),
      network_(network),
      explicit_schedules_(explicit_schedules),
      topology_(models::build_cluster(cluster)),
      simulator_(topology_, cluster, network),
      plans_(simulator_, network) {}

CollectiveTiming CollectiveTimer::time(Collective collective, int64_t bytes, const models::CommGroup& group,
                                       std::optional<SimAlgorithm> algorithm) {
  if (group.instances.empty() || group.instances.front().empty()) {
    fail(ErrorCode::kInvalidArgument, "group '{}' has no ranks to time {} on", group.name, name(collective));
  }
  const auto n = static_cast<int>(group.instances.front().size());
  const Shape shape = shape_of(group.instances.front(), cluster_.gpus_per_node);
  const Tuner tuner(cluster_, shape.nodes, shape.per_node);
  // A named algorithm where it implements the collective (tree: all_reduce), NCCL's pick elsewhere.
  const bool named = algorithm && applies(*algorithm, collective);
  Choice choice = named ? tuner.choose_for(collective, bytes, *algorithm) : tuner.choose(collective, bytes);
  // NCCL's p2p plan assumes the same ranks on every node, and is a fluid-model simulation: the
  // survivors of a shrink, and the packet model, run core's direct schedule op by op instead.
  using Model = SimAlgorithm::Model;
  if (choice.algorithm == Model::kP2p && (!shape.regular || network_.fidelity == Fidelity::kPacket)) {
    choice = tuner.choose_for(collective, bytes, Algorithm::kDirect);
  }
  // The in-switch models (NVLS, NVLS Tree, CollNet) assume the same ranks on every node, as NCCL's
  // set-up of them does: a group that is not (the ranks still waiting in a hang, the survivors of a
  // shrink) gets the ring.
  if (!shape.regular && choice.algorithm.is_model() && choice.algorithm != Model::kP2p) {
    choice = tuner.choose_for(collective, bytes, Algorithm::kRing);
  }
  // Rings run round by round and p2p in one round (cheap at any scale); anything else op by op,
  // one actor per rank.
  const bool round_by_round =
      shape.regular && (choice.algorithm == Algorithm::kRing || choice.algorithm == Model::kP2p);
  std::vector<std::vector<int>> instances =
      instances_to_simulate(group.instances, shape.nodes, cluster_.gpus_per_node,
                            round_by_round ? kMaxConcurrentRanks : kMaxConcurrentRanksOpByOp);
  const auto key = std::make_tuple(collective, bytes, algorithm, instances);
  CollectiveTiming timing;
  timing.collective = collective;
  timing.bytes = bytes;
  timing.group = group.name;
  timing.ranks = n;
  timing.instances = static_cast<int>(instances.size());
  if (auto it = cache_.find(key); it != cache_.end()) {
    timing.algorithm = it->second.algorithm;
    timing.protocol = it->second.protocol;
    timing.seconds = it->second.seconds;
    timing.busbw_GBps = it->second.busbw_GBps;
    return timing;
  }
  timing.algorithm = choice.algorithm;
  timing.protocol = choice.protocol;
  const bool op_by_op = explicit_schedules_ && n <= kMaxOpByOpRanks;
  SimResult result;
  if (n != 1) {
    const DataType dtype = DataType::kBF16;
    CollectiveQuery query;
    query.spec = {collective, nccl_tests_counts(collective, bytes, dtype, n).count, dtype, ReduceOp::kSum, 0, n};
    query.bytes = bytes;
    query.choice = choice;
    query.tuner = &tuner;
    query.instances = instances;
    query.per_node = shape.per_node;
    query.analytic = explicit_schedules_ && !op_by_op;
    // A ring all_gather / reduce_scatter on a regular placement runs as half a ring all_reduce
    // (sim/collective_plan.h); tests/sim/training_test.cc checks it against the explicit schedules.
    query.half_ring = shape.regular;
    if (shape.regular) {
      query.layout = sweep_layout(shape.nodes, shape.per_node, true);
      query.form = op_by_op ? ScheduleForm::kExplicit : ScheduleForm::kSymmetric;
      result = plans_.run(query);
    } else {
      result = run_irregular(query, cluster_.gpus_per_node);
    }
  }
  timing.seconds = result.seconds;
  timing.busbw_GBps =
      result.seconds > 0 ? static_cast<double>(bytes) / result.seconds / 1e9 * bus_bandwidth_factor(collective, n) : 0;
  cache_.emplace(key, timing);
  return timing;
}

// The survivors of a shrink (7 GPUs on one node, 8 on the others): the schedule as if the ranks
// filled nodes of the largest count in rank order, which keeps the algorithm's node structure
// (chains inside a node, a tree or ring across), with NCCL's channel rings over the nodes the group
// touches, in the order they appear, keeping the group's GPUs, as a topology-aware rebuild would
// order them (up node 0's, down node 1's, ...), so that hops stay on NVLink or on one rail; a flat
// layout where the algorithm refuses the partly filled nodes. The simulator places each rank on its
// real GPU.
SimResult CollectiveTimer::run_irregular(CollectiveQuery query, int gpus_per_node) {
  const int n = query.spec.nranks;
  const std::vector<int>& gpus = query.instances.front();
  RankLayout layout = RankLayout::flat(n);
  layout.ranks_per_node = std::clamp(query.per_node, 1, n);
  std::vector<int> nodes;  // in order of appearance
  for (int gpu : gpus) {
    const int node = gpu / gpus_per_node;
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
  }
  const int m = gpus_per_node;
  std::map<int, int> rank_of_gpu;
  for (size_t i = 0; i < gpus.size(); ++i) rank_of_gpu[gpus[i]] = static_cast<int>(i);
  for (const std::vector<int>& full : nccl_rings(static_cast<int>(nodes.size()), m)) {
    std::vector<int> ring;
    for (int position : full) {
      const auto it = rank_of_gpu.find(nodes[static_cast<size_t>(position / m)] * m + position % m);
      if (it != rank_of_gpu.end()) ring.push_back(it->second);
    }
    layout.rings.push_back(std::move(ring));
  }
  query.form = ScheduleForm::kExplicit;
  query.layout = std::move(layout);
  CollectivePlan plan;
  try {
    plan = plans_.plan(query);
  } catch (const Error&) {
    query.layout = RankLayout::flat(n);
    query.params.channels = 1;
    query.choice.channels = 1;
    plan = plans_.plan(query);
  }
  return plans_.run(plan);
}

void to_json(nlohmann::json& j, const CollectiveTiming& timing) {
  j = {{"collective", name(timing.collective)},
       {"bytes", timing.bytes},
       {"group", timing.group},
       {"ranks", timing.ranks},
       {"instances", timing.instances},
       {"algorithm", name(timing.algorithm)},
       {"protocol", name(timing.protocol)},
       {"seconds", timing.seconds},
       {"busbw_GBps", timing.busbw_GBps}};
}

void from_json(const nlohmann::json& j, CollectiveTiming& timing) {
  timing.collective = parse_collective(j.at("collective").get<std::string>());
  timing.bytes = j.at("bytes").get<int64_t>();
  timing.group = j.at("group").get<std::string>();
  timing.ranks = j.at("ranks").get<int>();
  timing.instances = j.at("instances").get<int>();
  timing.algorithm = parse_sim_algorithm(j.at("algorithm").get<std::string>());
  timing.protocol = models::parse_nccl_protocol(j.at("protocol").get<std::string>());
  timing.seconds = j.at("seconds").get<double>();
  timing.busbw_GBps = j.at("busbw_GBps").get<double>();
}

}  // namespace tandem::sim
