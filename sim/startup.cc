#include "sim/startup.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "core/algorithms.h"
#include "core/error.h"
#include "models/cost_model.h"
#include "sim/simulator.h"
#include "sim/sweep.h"

namespace tandem::sim {
namespace {

using nlohmann::json;

// Network time of the three bootstrap-ring all-gathers on the simulated platform, in seconds.
struct RingTimes {
  double address_s = 0;
  double peer_info_s = 0;
  double graph_info_s = 0;
};

// Runs in the child: the cluster of `nodes` x `per_node` GPUs, the ring in rank order (NCCL's
// bootstrap ring is rank r -> r + 1, node-major), one ring all-gather per record size. Core builds
// the rank-symmetric form, which the simulator runs one representative round at a time, only for
// the ring all_reduce: its second half is exactly the all-gather's N - 1 ring steps (and its first
// half the same steps again), so the all-gather of a record is half the all_reduce of N records
// per rank. (The op-by-op all_gather takes ~25 s at 1,024 GPUs; this takes a fraction of a second.)
RingTimes simulate_rings(const models::ClusterSpec& spec, int per_node) {
  const models::Topology topology = models::build_cluster(spec);
  const int total_per_node = topology.gpus_per_node();
  const int n = spec.nodes * per_node;
  std::vector<int> gpu_of_rank;
  for (int v = 0; v < spec.nodes; ++v) {
    for (int i = 0; i < per_node; ++i) gpu_of_rank.push_back(v * total_per_node + i);
  }
  Simulator simulator(topology, spec, NetworkModel::ideal());
  constexpr DataType kType = DataType::kI32;
  const auto element = static_cast<int64_t>(size_bytes(kType));
  CollectiveSpec collective{
      Collective::kAllReduce, n * (kBootstrapAddressBytes / element), kType, ReduceOp::kSum, 0, n};
  const Schedule schedule = build_checked_schedule(collective, RankLayout::nodes(spec.nodes, per_node),
                                                   Algorithm::kRing, AlgoParams{}, ScheduleForm::kSymmetric);
  auto all_gather_s = [&](int bytes_per_rank) {
    collective.count = n * (bytes_per_rank / element);
    const SimResult result =
        simulator.run(SimRequest{&schedule, collective, gpu_of_rank, models::NcclProtocol::kSimple, 1});
    if (!result.compressed) fail(ErrorCode::kBackend, "start-up: the bootstrap ring was not simulated by rounds");
    return result.seconds / 2;
  };
  return {all_gather_s(kBootstrapAddressBytes), all_gather_s(kPeerInfoBytes), all_gather_s(kGraphInfoBytes)};
}

RingTimes simulate_rings_isolated(const models::ClusterSpec& spec, int per_node) {
  const json reply = json::parse(run_isolated([&] {
    const RingTimes t = simulate_rings(spec, per_node);
    return json{{"address_s", t.address_s}, {"peer_info_s", t.peer_info_s}, {"graph_info_s", t.graph_info_s}}.dump();
  }));
  return {reply.at("address_s").get<double>(), reply.at("peer_info_s").get<double>(),
          reply.at("graph_info_s").get<double>()};
}

}  // namespace

StartupResult simulate_startup(const models::ClusterSpec& cluster, int gpus) {
  if (gpus < 1) fail(ErrorCode::kInvalidArgument, "start-up: a job needs at least one GPU, not {}", gpus);
  models::ClusterSpec spec = cluster;
  if (gpus < spec.gpus_per_node) {
    // Part of one node: the GPUs taking part, with their NICs.
    spec.gpus_per_node = gpus;
    spec.nics_per_node = std::gcd(spec.nics_per_node, gpus);
  } else if (gpus % spec.gpus_per_node != 0) {
    fail(ErrorCode::kInvalidArgument, "start-up: {} GPUs do not fill nodes of {} GPUs", gpus, spec.gpus_per_node);
  }
  const int per_node = spec.gpus_per_node;
  spec.nodes = gpus / per_node;
  if (spec.nodes > models::kMaxNodes) {
    fail(ErrorCode::kInvalidArgument, "start-up: {} GPUs need {} nodes, over the limit of {}", gpus, spec.nodes,
         models::kMaxNodes);
  }
  models::validate(spec);

  StartupResult r;
  r.gpus = gpus;
  r.simulated_gpus = gpus;
  r.bootstrap_s = kBootstrapRootPerRank_s;  // one rank: only its check-in with itself
  if (gpus == 1) {
    r.total_s = r.bootstrap_s;
    return r;
  }
  const models::NcclCostModel nccl(spec);
  r.ring_channels = nccl.graph(models::NcclAlgorithm::kRing).channels;
  r.tree_channels = nccl.graph(models::NcclAlgorithm::kTree).channels;

  // Simulate at most kMaxSimulatedStartupGpus and scale the ring's steps.
  models::ClusterSpec simulated = spec;
  if (gpus > kMaxSimulatedStartupGpus) simulated.nodes = std::max(2, kMaxSimulatedStartupGpus / per_node);
  r.simulated_gpus = simulated.nodes * per_node;
  RingTimes rings = simulate_rings_isolated(simulated, per_node);
  const double steps = gpus - 1;
  const double scale = steps / (r.simulated_gpus - 1);
  rings = {rings.address_s * scale, rings.peer_info_s * scale, rings.graph_info_s * scale};

  // Each ring step on the critical path pays one message's software cost on top of the network.
  r.bootstrap_message_s = rings.address_s / steps + kBootstrapMessageSoftware_s;
  const double broadcast_steps = std::ceil(std::log2(static_cast<double>(gpus)));
  const double unique_id_broadcast_s = broadcast_steps * r.bootstrap_message_s;
  const double root_check_in_s = gpus * kBootstrapRootPerRank_s + 2 * r.bootstrap_message_s;
  const double address_allgather_s = rings.address_s + steps * kBootstrapMessageSoftware_s;
  r.bootstrap_s = unique_id_broadcast_s + root_check_in_s + address_allgather_s;
  r.peer_info_allgather_s = rings.peer_info_s + rings.graph_info_s + 2 * steps * kBootstrapMessageSoftware_s;

  // One rank's connections, one after the other, each after a connect-info exchange with the peer
  // (a message there and back). Across nodes the ring connections of a rank at a node's boundary
  // and every tree connection go over the network (the upper estimate: NCCL rotates the boundary
  // over the node's GPUs); inside one node the tree is a chain of intra-node connections.
  const bool multi_node = spec.nodes > 1;
  const int ring_connections = kRingConnectionsPerChannel * r.ring_channels;
  const int tree_connections = multi_node ? kTreeConnectionsPerChannel * r.tree_channels : 2 * r.tree_channels;
  const double setup_s = multi_node ? kNetworkConnectionSetup_s : kIntraNodeConnectionSetup_s;
  r.connection_setup_s = (ring_connections + tree_connections) * (2 * r.bootstrap_message_s + setup_s);
  r.total_s = r.bootstrap_s + r.peer_info_allgather_s + r.connection_setup_s;
  return r;
}

}  // namespace tandem::sim
