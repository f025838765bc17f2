#include "sim/startup.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/algorithms.h"
#include "core/error.h"
#include "models/cost_model.h"
#include "sim/collective_plan.h"
#include "sim/isolated.h"
#include "sim/simulator.h"

namespace tandem::sim {
namespace {

using nlohmann::json;

// Network time of the three bootstrap-ring all-gathers on the simulated platform, in seconds.
struct RingTimes {
  double address_s = 0;
  double peer_info_s = 0;
  double graph_info_s = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RingTimes, address_s, peer_info_s, graph_info_s)

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
  const NetworkModel ideal = NetworkModel::ideal();
  Simulator simulator(topology, spec, ideal);
  CollectivePlans plans(simulator, ideal);
  constexpr DataType kType = DataType::kI32;
  const auto element = static_cast<int64_t>(size_bytes(kType));
  CollectiveQuery query;
  query.choice.algorithm = Algorithm::kRing;  // one channel, Simple: the bootstrap ring is plain sockets
  query.layout = RankLayout::nodes(spec.nodes, per_node);
  query.instances = {gpu_of_rank};
  query.per_node = per_node;
  query.form = ScheduleForm::kSymmetric;
  query.half_ring = true;  // the all_gather as half a ring all_reduce, simulated by rounds
  auto all_gather_s = [&](int bytes_per_rank) {
    query.bytes = n * int64_t{bytes_per_rank / element} * element;
    query.spec = {Collective::kAllGather, query.bytes / element, kType, ReduceOp::kSum, 0, n};
    const SimResult result = plans.run(query);
    if (!result.compressed) fail(ErrorCode::kBackend, "start-up: the bootstrap ring was not simulated by rounds");
    return result.seconds;
  };
  return {all_gather_s(kBootstrapAddressBytes), all_gather_s(kPeerInfoBytes), all_gather_s(kGraphInfoBytes)};
}

RingTimes simulate_rings_isolated(const models::ClusterSpec& spec, int per_node) {
  return run_isolated([&] { return simulate_rings(spec, per_node); });
}

// Per ring step of each record size: network (simulated) and software, for this job's levers.
struct RingStep {
  double address_s = 0;
  double peer_info_s = 0;
  double graph_info_s = 0;
};

// Connections one rank sets up for one communicator, and what each costs.
double connections_s(int connections, bool across_nodes, double message_s) {
  const double setup_s = across_nodes ? kNetworkConnectionSetup_s : kIntraNodeConnectionSetup_s;
  return connections * (2 * message_s + setup_s);  // a connect-info exchange, then the transport's setup
}

}  // namespace

std::string_view name(StoreBackend store) { return store == StoreBackend::kLegacy ? "legacy" : "libuv"; }

StoreBackend parse_store_backend(std::string_view text) {
  if (text == "legacy") return StoreBackend::kLegacy;
  if (text == "libuv") return StoreBackend::kLibuv;
  fail(ErrorCode::kInvalidArgument, "unknown store '{}' (expected: legacy, libuv)", text);
}

double StartupResult::phase_s(std::string_view phase) const {
  for (const StartupPhase& p : phases) {
    if (p.name == phase) return p.seconds;
  }
  return 0;
}

std::vector<StartupGroup> layout_groups(const models::ParallelLayout& layout, int gpus) {
  // Megatron's rank order: tp innermost, then cp, dp (with ep inside it), pp outermost.
  std::vector<StartupGroup> groups;
  const int dp = gpus / std::max(1, layout.tp * layout.cp * layout.pp);
  auto add = [&](const char* group, int size, int stride) {
    if (size > 1 && size < gpus) groups.push_back({group, size, stride});
  };
  add("tp", layout.tp, 1);
  add("cp", layout.cp, layout.tp);
  add("ep", layout.ep, layout.tp * layout.cp);
  add("dp", dp, layout.tp * layout.cp);
  add("pp", layout.pp, layout.tp * layout.cp * dp);
  return groups;
}

void check_groups(const std::vector<StartupGroup>& groups, int gpus) {
  for (const StartupGroup& g : groups) {
    if (g.size < 1 || g.stride < 1 || gpus % g.size != 0 || static_cast<int64_t>(g.size) * g.stride > gpus) {
      fail(ErrorCode::kInvalidArgument, "start-up: a {} group of {} ranks (stride {}) does not fit {} GPUs", g.name,
           g.size, g.stride, gpus);
    }
  }
}

namespace {

// The cluster the job's GPUs make: whole nodes, or part of one node with its share of the NICs.
models::ClusterSpec job_cluster(const models::ClusterSpec& cluster, const StartupJob& job) {
  const int gpus = job.gpus;
  if (gpus < 1) fail(ErrorCode::kInvalidArgument, "start-up: a job needs at least one GPU, not {}", gpus);
  models::ClusterSpec spec = cluster;
  if (gpus < spec.gpus_per_node) {
    // Part of one node: the GPUs taking part, with their NICs.
    spec.gpus_per_node = gpus;
    spec.nics_per_node = std::gcd(spec.nics_per_node, gpus);
  } else if (gpus % spec.gpus_per_node != 0) {
    fail(ErrorCode::kInvalidArgument, "start-up: {} GPUs do not fill nodes of {} GPUs", gpus, spec.gpus_per_node);
  }
  spec.nodes = gpus / spec.gpus_per_node;
  if (spec.nodes > models::kMaxNodes) {
    fail(ErrorCode::kInvalidArgument, "start-up: {} GPUs need {} nodes, over the limit of {}", gpus, spec.nodes,
         models::kMaxNodes);
  }
  if (job.levers.ranks_per_root < 0) {
    fail(ErrorCode::kInvalidArgument, "start-up: ranks_per_root must be 0 (one root) or positive, not {}",
         job.levers.ranks_per_root);
  }
  check_groups(job.groups, gpus);
  models::validate(spec);
  return spec;
}

// The bootstrap ring's steps: simulated network time per step (at most kMaxSimulatedStartupGpus
// simulated, the rest scaled) plus each message's software cost; the channels NCCL builds.
RingStep ring_step(const models::ClusterSpec& spec, const StartupLevers& levers, StartupResult& r) {
  const double software_s = levers.oob_net ? kOobNetMessageSoftware_s : kBootstrapMessageSoftware_s;
  if (r.gpus <= 1) return {software_s, software_s, software_s};
  const int per_node = spec.gpus_per_node;
  const models::NcclCostModel nccl(spec);
  r.ring_channels = nccl.graph(models::NcclAlgorithm::kRing).channels;
  r.tree_channels = nccl.graph(models::NcclAlgorithm::kTree).channels;
  models::ClusterSpec simulated = spec;
  if (r.gpus > kMaxSimulatedStartupGpus) simulated.nodes = std::max(2, kMaxSimulatedStartupGpus / per_node);
  r.simulated_gpus = simulated.nodes * per_node;
  const RingTimes rings = simulate_rings_isolated(simulated, per_node);
  const double steps = r.simulated_gpus - 1;
  return {rings.address_s / steps + software_s, rings.peer_info_s / steps + software_s,
          rings.graph_info_s / steps + software_s};
}

// A communicator of the job, created by every rank in program order: the world, then each group.
struct Comm {
  std::string label;
  int size = 0;
  int count = 1;  // groups of this kind (all created at once)
  bool across_nodes = false;
};

// What creating the communicators costs: the unique ids through the store, NCCL's init, and the
// connections a runtime connect leaves to each communicator's first collective.
struct CommCosts {
  double unique_ids_s = 0, nccl_s = 0, first_use_s = 0;
  int64_t id_requests = 0;
};

// The store's cost of one request, for `gpus` clients.
double store_request_s(const StartupLevers& levers, int gpus) {
  return kStoreRequest_s + (levers.store == StoreBackend::kLegacy ? gpus * kLegacyStorePerSocket_s : 0);
}

// One communicator's init (the c-th of `total`), adding its store requests to `costs`.
double comm_init_s(const Comm& comm, size_t c, size_t total, const StartupJob& job, const RingStep& step,
                   const StartupResult& r, CommCosts& costs) {
  const StartupLevers& levers = job.levers;
  const double n = comm.size;
  const double n_world = job.gpus;
  double init_s = c == 0 ? kNcclKernels_s : 0;  // NCCL's kernels load once per process
  if (comm.size > 1) {
    if (levers.eager_init && c > 0) {
      // ncclCommSplit: an all-gather of (color, key) over the world's bootstrap ring, then the
      // child's own peer-info and graph-info rings.
      init_s += kSplitRingAllgathers * (n_world - 1) * step.address_s + (n - 1) * (step.peer_info_s + step.graph_info_s);
    } else {
      // Unique ids through the store: each root sets one, every rank of every group gets its own.
      const int roots = levers.ranks_per_root > 0 && comm.size > levers.ranks_per_root
                            ? (comm.size + levers.ranks_per_root - 1) / levers.ranks_per_root
                            : 1;
      const int64_t requests = job.gpus + static_cast<int64_t>(comm.count) * roots;
      costs.id_requests += requests;
      costs.unique_ids_s += static_cast<double>(requests) * store_request_s(levers, job.gpus);
      // Bootstrap: every rank checks in with its root (staggered above the threshold), then the rings.
      const double per_root = std::ceil(n / roots);
      const double stagger_s = per_root > kStaggerThreshold ? per_root / kStaggerRate_per_s : 0;
      const double ring_step_s = step.address_s + step.peer_info_s + step.graph_info_s;  // the three init rings
      init_s += per_root * kBootstrapRootPerRank_s + stagger_s + 2 * step.address_s + (n - 1) * ring_step_s;
    }
    const int ring_connections = kRingConnectionsPerChannel * r.ring_channels;
    const int tree_connections = comm.across_nodes ? kTreeConnectionsPerChannel * r.tree_channels : 2 * r.tree_channels;
    const double connect_all_s = connections_s(ring_connections + tree_connections, comm.across_nodes, step.address_s);
    // What NCCL measured as "connections" at init with runtime connect on is paid either way; the
    // ring and tree connections come on top, at init or at the communicator's first collective.
    init_s += kNcclConnectAtInit_s;
    if (!levers.runtime_connect) {
      init_s += connect_all_s;
    } else if (c > 0 || total == 1) {
      // The world is used by the first collective only when the job has no groups (data parallel).
      costs.first_use_s += connect_all_s;
    }
  }
  init_s += (c > 0 && levers.topo_cache ? kCachedTopoShare : 1.0) * kNcclTopo_s + kNcclGraphs_s + kNcclRest_s;
  return init_s;
}

}  // namespace

StartupResult simulate_startup(const models::ClusterSpec& cluster, const StartupJob& job) {
  const models::ClusterSpec spec = job_cluster(cluster, job);
  const int gpus = job.gpus;
  const StartupLevers& levers = job.levers;
  StartupResult r;
  r.gpus = gpus;
  r.simulated_gpus = gpus;
  const RingStep step = ring_step(spec, levers, r);
  r.bootstrap_message_s = step.address_s;

  // The store: one server, one request after the other.
  const double request_s = store_request_s(levers, gpus);
  const double connect_s = levers.store == StoreBackend::kLegacy ? request_s : kLibuvStoreConnect_s;
  r.phases.push_back({"launch", kProcessLaunch_s + kCudaContext_s,
                      fmt::format("process spawn and import torch {:.1f} s, CUDA context {:.1f} s (assumed)",
                                  kProcessLaunch_s, kCudaContext_s)});
  r.store_requests = gpus;
  r.phases.push_back({"store", static_cast<double>(gpus) * connect_s,
                      fmt::format("{} clients connect to the {} TCPStore, {:.2f} ms each", gpus, name(levers.store),
                                  connect_s * 1e3)});

  std::vector<Comm> comms{{"world", gpus, 1, spec.nodes > 1}};
  for (const StartupGroup& g : job.groups) {
    comms.push_back(
        {g.name, g.size, gpus / g.size, static_cast<int64_t>(g.size) * g.stride > spec.gpus_per_node});
  }
  r.communicators = static_cast<int>(comms.size());
  CommCosts costs;
  for (size_t c = 0; c < comms.size(); ++c) costs.nccl_s += comm_init_s(comms[c], c, comms.size(), job, step, r, costs);
  r.store_requests += costs.id_requests;
  r.nccl_init_s = costs.nccl_s;
  std::vector<std::string> names;
  for (const Comm& comm : comms) names.push_back(fmt::format("{}({})", comm.label, comm.size));
  r.phases.push_back({"communicators", costs.unique_ids_s + costs.nccl_s,
                      fmt::format("{}: unique ids through the store {:.3f} s ({} requests), NCCL init {:.3f} s{}",
                                  fmt::join(names, " "), costs.unique_ids_s, costs.id_requests, costs.nccl_s,
                                  levers.eager_init && comms.size() > 1 ? " (groups split from the world)" : "")});
  if (levers.init_barriers) {
    // A world barrier (an add and a check per rank) after init_process_group and after every new_group.
    int64_t barriers = 1;
    for (size_t c = 1; c < comms.size(); ++c) barriers += comms[c].count;
    const int64_t requests = barriers * 2 * gpus;
    r.store_requests += requests;
    r.phases.push_back(
        {"group barriers", static_cast<double>(requests) * request_s,
         fmt::format("{} world barriers (TORCH_DIST_INIT_BARRIER=1), {} store requests", barriers, requests)});
  }
  if (levers.runtime_connect && gpus > 1) {
    r.phases.push_back({"first collectives", costs.first_use_s,
                        "ring and tree connections set up at each communicator's first collective "
                        "(NCCL_RUNTIME_CONNECT=1)"});
  }
  for (const StartupPhase& p : r.phases) r.total_s += p.seconds;
  return r;
}

StartupResult simulate_startup(const models::ClusterSpec& cluster, int gpus) {
  return simulate_startup(cluster, StartupJob{.gpus = gpus});
}

json startup_to_json(const StartupResult& r) {
  json phases = json::array();
  for (const StartupPhase& p : r.phases)
    phases.push_back({{"name", p.name}, {"seconds", p.seconds}, {"detail", p.detail}});
  return {{"gpus", r.gpus},
          {"simulated_gpus", r.simulated_gpus},
          {"ring_channels", r.ring_channels},
          {"tree_channels", r.tree_channels},
          {"communicators", r.communicators},
          {"store_requests", r.store_requests},
          {"bootstrap_message_s", r.bootstrap_message_s},
          {"nccl_init_s", r.nccl_init_s},
          {"phases", phases},
          {"total_s", r.total_s}};
}

StartupResult startup_from_json(const json& j) {
  StartupResult r;
  r.gpus = j.at("gpus").get<int>();
  r.simulated_gpus = j.at("simulated_gpus").get<int>();
  r.ring_channels = j.at("ring_channels").get<int>();
  r.tree_channels = j.at("tree_channels").get<int>();
  r.communicators = j.at("communicators").get<int>();
  r.store_requests = j.at("store_requests").get<int64_t>();
  r.bootstrap_message_s = j.at("bootstrap_message_s").get<double>();
  r.nccl_init_s = j.at("nccl_init_s").get<double>();
  for (const json& p : j.at("phases")) {
    r.phases.push_back(
        {p.at("name").get<std::string>(), p.at("seconds").get<double>(), p.at("detail").get<std::string>()});
  }
  r.total_s = j.at("total_s").get<double>();
  return r;
}

}  // namespace tandem::sim
