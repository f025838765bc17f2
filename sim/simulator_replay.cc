// The two ways sim::Simulator times a schedule without running it op by op, both after one round
// of max-min contention (Snapshot): the compressed rings (rank-symmetric ring-shaped schedules,
// replayed per position on arrays: sim/ring_lane.h) and the analytic replay (explicit schedules:
// trees, PAT, and any schedule with SimRequest::analytic, replayed in one topological order of
// their ops). Simulator::run (simulator.cc) picks between them and the op-by-op simulation.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/schedule_dag.h"
#include "sim/ring_lane.h"
#include "sim/simulator.h"
#include "sim/simulator_internal.h"

namespace tandem::sim {
// One round of concurrent flows: every connection of a round (or of a pipeline's steady state)
// sends its message at the same time, so flows that share a link share it. Each flow gets its
// max-min fair rate with all of them active, the allocation SimGrid's CM02 model starts every flow
// at (progressive filling over the topology's links at their efficiency-scaled and fault-scaled
// bandwidth, one direction each), and a flow's transfer time is its bytes over that rate. Flows
// between the same two GPUs are one flow of their summed bytes (max-min gives flows on one path
// equal shares): a 16-channel ring on 16,384 GPUs is about 49,000 flows, not 262,000. Computing
// the allocation directly, instead of running the round through SimGrid's event loop (one re-solve
// per completion, quadratic in the flows of a component), made a 4,096-GPU tree 5x faster.
class Snapshot {
 public:
  void add(int from_gpu, int to_gpu, double bytes) {
    Pair& pair = pairs_[key(from_gpu, to_gpu)];
    pair.bytes += bytes;
    pair.flows += 1;
  }
  size_t pairs() const { return pairs_.size(); }

  // `capacity(link)`: bytes per second of one direction of topology link `link`.
  void run(const models::Topology& topology, const std::function<double(uint32_t)>& capacity) {
    // Flows (one per pair) and the directed links they cross.
    std::vector<Pair*> flows;
    std::vector<std::vector<uint32_t>> links_of;  // directed link index: 2 * link + forward
    std::unordered_map<uint32_t, std::vector<uint32_t>> flows_on;
    for (auto& [k, pair] : pairs_) {
      const models::Route route = topology.route(static_cast<int>(k >> 32), static_cast<int>(k & 0xffffffffu));
      std::vector<uint32_t> links;
      for (const models::Hop& hop : route.hops) links.push_back(2 * hop.link + (hop.forward ? 1 : 0));
      for (uint32_t l : links) flows_on[l].push_back(static_cast<uint32_t>(flows.size()));
      links_of.push_back(std::move(links));
      flows.push_back(&pair);
    }
    // Progressive filling: raise every unfrozen flow's rate together; the link whose fair share
    // is smallest saturates first and freezes its flows at that share. A pair standing for w flows
    // counts w times.
    std::unordered_map<uint32_t, double> remaining;
    std::unordered_map<uint32_t, double> unfrozen;  // weight of the unfrozen flows on the link
    for (const auto& [l, on] : flows_on) {
      remaining[l] = capacity(l / 2);
      double weight = 0;
      for (uint32_t f : on) weight += flows[f]->flows;
      unfrozen[l] = weight;
    }
    std::vector<double> rate(flows.size(), -1);
    using Entry = std::pair<double, uint32_t>;  // (fair share, directed link)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
    for (const auto& [l, weight] : unfrozen) queue.emplace(remaining[l] / weight, l);
    while (!queue.empty()) {
      const auto [share, l] = queue.top();
      queue.pop();
      if (unfrozen[l] <= 0.5 || std::abs(share - remaining[l] / unfrozen[l]) > 1e-12 * share) continue;  // stale
      for (uint32_t f : flows_on[l]) {
        if (rate[f] >= 0) continue;
        const double w = flows[f]->flows;
        rate[f] = share * w;
        for (uint32_t other : links_of[f]) {
          remaining[other] = std::max(0.0, remaining[other] - share * w);
          unfrozen[other] -= w;
          if (unfrozen[other] > 0.5) queue.emplace(remaining[other] / unfrozen[other], other);
        }
      }
    }
    for (size_t f = 0; f < flows.size(); ++f) {
      flows[f]->seconds = rate[f] > 0 ? flows[f]->bytes / rate[f] : 0.0;
    }
  }

  // The time a flow of `bytes` between the two GPUs took in the round.
  double transfer(int from_gpu, int to_gpu, double bytes) const {
    const Pair& pair = pairs_.at(key(from_gpu, to_gpu));
    return pair.bytes > 0 ? pair.seconds * pair.flows * bytes / pair.bytes : 0.0;
  }

 private:
  struct Pair {
    double bytes = 0;
    int flows = 0;
    double seconds = 0;
  };
  static uint64_t key(int a, int b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
  std::unordered_map<uint64_t, Pair> pairs_;
};

// Ring-shaped symmetric schedules at scale: one Snapshot round with every lane's flow from every
// position gives each hop's transfer time under contention; the rounds are then replayed on
// per-position arrays. The receive at position q of step s completes at
//     R[q] = max(R[q-o] + latency(q-o), link_free(q-o)) + transfer(q-o)
// (its sender issued the send once it had received step s-1; the link carries one message after
// the other), so a slow hop slows the positions behind it, not every step of every position.
// Lanes with the same ring order and offset (NCCL's channels c and c + nChannels/2 are copies) are
// replayed once, and a lane's positions once per period of its hops (sim/ring_lane.h).
double Simulator::Impl::run_compressed(const Schedule& schedule, const std::vector<std::vector<int>>& placements,
                                       const std::function<int64_t(const SlotRange&, uint32_t)>& bytes_of,
                                       uint32_t tiles, double wire,
                                       const std::function<double(int, int)>& hop_latency, SimResult& result) {
  const int n = schedule.nranks;
  const auto& lanes = schedule.ranks[0].lanes;
  // One representative round: every lane's flow from every position, largest step size.
  std::vector<int64_t> round_bytes(lanes.size(), 0);
  for (size_t l = 0; l < lanes.size(); ++l) {
    for (size_t i = 0; i < lanes[l].ops.size(); i += 2) {
      round_bytes[l] = std::max(round_bytes[l], bytes_of(lanes[l].ops[i].src, 0));
    }
  }
  Snapshot snapshot;
  for (const std::vector<int>& gpu_of_rank : placements) {
    for (size_t l = 0; l < lanes.size(); ++l) {
      const std::vector<int>& order = schedule.symmetry.order_of(l);
      const int offset = lanes[l].ops[0].peer;
      for (int p = 0; p < n; ++p) {
        const int from = gpu_of_rank[static_cast<size_t>(order[static_cast<size_t>(p)])];
        const int to = gpu_of_rank[static_cast<size_t>(order[static_cast<size_t>((p + offset) % n)])];
        snapshot.add(from, to, static_cast<double>(round_bytes[l]) * wire);
      }
    }
  }
  snapshot.run(topology, [this](uint32_t link) { return link_capacity(link); });
  result.simulated_transfers = snapshot.pairs();

  // Lanes that replay alike: same order, offset and op sizes.
  std::vector<size_t> first_alike(lanes.size());
  for (size_t l = 0; l < lanes.size(); ++l) {
    first_alike[l] = l;
    for (size_t e = 0; e < l; ++e) {
      if (first_alike[e] == e && schedule.symmetry.order_of(e) == schedule.symmetry.order_of(l) &&
          lanes[e].ops.size() == lanes[l].ops.size() && lanes[e].ops[0].peer == lanes[l].ops[0].peer &&
          round_bytes[e] == round_bytes[l]) {
        first_alike[l] = e;
        break;
      }
    }
  }

  double total = 0;
  for (const std::vector<int>& gpu_of_rank : placements) {
    for (size_t l = 0; l < lanes.size(); ++l) {
      if (first_alike[l] != l) continue;
      const std::vector<int>& order = schedule.symmetry.order_of(l);
      RingHops hops;
      hops.offset = static_cast<size_t>(lanes[l].ops[0].peer);
      for (int p = 0; p < n; ++p) {
        const int a = order[static_cast<size_t>(p)];
        const int b = order[(static_cast<size_t>(p) + hops.offset) % static_cast<size_t>(n)];
        const int ga = gpu_of_rank[static_cast<size_t>(a)];
        const int gb = gpu_of_rank[static_cast<size_t>(b)];
        hops.latency_s.push_back(std::max(topology.route(ga, gb).latency_s, hop_latency(a, b)));
        hops.transfer_s.push_back(snapshot.transfer(ga, gb, static_cast<double>(round_bytes[l]) * wire));
      }
      std::vector<double> step_scales;
      for (uint32_t t = 0; t < tiles; ++t) {
        for (size_t i = 0; i < lanes[l].ops.size(); i += 2) {
          step_scales.push_back(round_bytes[l] > 0 ? static_cast<double>(bytes_of(lanes[l].ops[i].src, t)) /
                                                         static_cast<double>(round_bytes[l])
                                                   : 0.0);
        }
      }
      total = std::max(total, ring_lane_seconds(hops, step_scales));
    }
  }
  return total;
}

namespace {

// A replayed schedule's connections: one per (rank, peer, lane) that sends; its sends go one after
// the other. Each with its first message's wire bytes (tile 0) and the Snapshot it contends in.
struct ReplayConnections {
  struct Ends {
    int from = 0, to = 0;
  };
  std::vector<Ends> connections;
  std::vector<size_t> connection_of_send;  // by op id (SIZE_MAX: not a send)
  std::vector<SlotRange> first_src;        // each connection's first message (its bytes: per size)
  std::vector<size_t> group_of;            // the Snapshot each connection contends in
  size_t groups = 0;                       // Snapshots: one, or one per round (contention_by_round)
};

ReplayConnections replay_connections(const Schedule& schedule, const Dag& dag, bool contention_by_round) {
  ReplayConnections out;
  std::map<std::tuple<int, int, uint32_t>, size_t> connection_of;
  out.connection_of_send.assign(dag.index.total, SIZE_MAX);
  std::map<uint32_t, size_t> group_of_round;
  for (uint32_t gid = 0; gid < dag.index.total; ++gid) {
    const OpLoc& at = dag.loc[gid];
    const Lane& lane = schedule.ranks[static_cast<size_t>(at.rank)].lanes[at.lane];
    const Op& op = lane.ops[at.index];
    if (op.kind != OpKind::kSend) continue;
    const auto [it, fresh] = connection_of.emplace(std::make_tuple(at.rank, op.peer, at.lane), out.connections.size());
    if (fresh) {
      out.connections.push_back({at.rank, op.peer});
      out.first_src.push_back(op.src);
      const uint32_t round = contention_by_round && at.index < lane.rounds.size() ? lane.rounds[at.index] : 0;
      out.group_of.push_back(group_of_round.emplace(round, group_of_round.size()).first->second);
    }
    out.connection_of_send[gid] = it->second;
  }
  out.groups = group_of_round.size();
  return out;
}

// The replay's static part, flattened once in topological order: per op its kind, lane, cross-lane
// dependencies, connection or matched send, and chunks.
struct ReplayStep {
  OpKind kind;
  uint32_t lane_slot;
  uint32_t deps_begin, deps_end;  // into ReplayProgram::step_deps
  size_t id;
  size_t link;  // send: its connection; receive: its matched send's op id
  uint32_t chunk_first, chunk_count;
};
struct ReplayProgram {
  std::vector<ReplayStep> steps;
  std::vector<size_t> step_deps;
  std::vector<uint32_t> first_lane;  // lanes numbered like ops: slot = rank's first lane + lane
};

ReplayProgram flatten_replay(const Schedule& schedule, const Dag& dag, const std::vector<size_t>& connection_of_send) {
  ReplayProgram out;
  out.first_lane.assign(static_cast<size_t>(schedule.nranks) + 1, 0);
  for (int r = 0; r < schedule.nranks; ++r) {
    out.first_lane[static_cast<size_t>(r) + 1] =
        out.first_lane[static_cast<size_t>(r)] +
        static_cast<uint32_t>(schedule.ranks[static_cast<size_t>(r)].lanes.size());
  }
  out.steps.reserve(dag.index.total);
  for (const uint32_t id : dag.order) {
    const OpLoc& w = dag.loc[id];
    const Lane& lane = schedule.ranks[static_cast<size_t>(w.rank)].lanes[w.lane];
    const Op& op = lane.ops[w.index];
    ReplayStep step{op.kind,
                    out.first_lane[static_cast<size_t>(w.rank)] + w.lane,
                    static_cast<uint32_t>(out.step_deps.size()),
                    0,
                    id,
                    0,
                    0,
                    0};
    for (size_t d = 0; d < lane.dep_count(w.index); ++d) {
      const OpRef dep = lane.deps_of(w.index)[d];
      if (dep.lane != w.lane) out.step_deps.push_back(dag.index.gid(static_cast<size_t>(w.rank), dep.lane, dep.index));
    }
    step.deps_end = static_cast<uint32_t>(out.step_deps.size());
    const SlotRange& range = op.kind == OpKind::kSend ? op.src : op.dst;
    step.chunk_first = range.first;
    step.chunk_count = range.count;
    if (op.kind == OpKind::kSend) step.link = connection_of_send[id];
    if (op.is_recv()) step.link = dag.matched_send[id];
    out.steps.push_back(step);
  }
  return out;
}

// What the analytic replay derives from a schedule alone, whatever its size: its op graph, its
// connections and its flattened program. Built once per schedule that CollectivePlans keeps
// (SimRequest::replay_cache): at 16,384 ranks a tree's graph is millions of ops, and rebuilding it
// for every size was most of a training step's simulation time (allocating and faulting in its
// pages).
struct ReplayPrep {
  explicit ReplayPrep(Dag graph) : dag(std::move(graph)) {}
  Dag dag;
  ReplayConnections replay;
  ReplayProgram program;
};

std::shared_ptr<const ReplayPrep> replay_prep(const Schedule& schedule, bool contention_by_round,
                                              std::shared_ptr<void>* cache) {
  if (cache != nullptr && *cache) return std::static_pointer_cast<const ReplayPrep>(*cache);
  auto prep = std::make_shared<ReplayPrep>(build_dag(schedule));
  prep->replay = replay_connections(schedule, prep->dag, contention_by_round);
  prep->program = flatten_replay(schedule, prep->dag, prep->replay.connection_of_send);
  if (cache != nullptr) *cache = prep;
  return prep;
}


// Contention over all placements at once, as the compressed rings take it: one Snapshot per group
// of connections (ReplayConnections::group_of), each connection's first message in it.
std::vector<Snapshot> replay_contention(const ReplayConnections& replay, const std::vector<double>& first_bytes,
                                        const std::vector<std::vector<int>>& placements,
                                        const models::Topology& topology,
                                        const std::function<double(uint32_t)>& capacity) {
  std::vector<Snapshot> snapshots(std::max<size_t>(1, replay.groups));
  for (const std::vector<int>& gpu_of_rank : placements) {
    for (size_t c = 0; c < replay.connections.size(); ++c) {
      snapshots[replay.group_of[c]].add(gpu_of_rank[static_cast<size_t>(replay.connections[c].from)],
                                        gpu_of_rank[static_cast<size_t>(replay.connections[c].to)], first_bytes[c]);
    }
  }
  for (Snapshot& snapshot : snapshots) snapshot.run(topology, capacity);
  return snapshots;
}

// Per tile the payload bytes of each of the schedule's k sub-chunks.
struct TileBytes {
  uint32_t k = 1;
  uint32_t tiles = 1;
  std::vector<double> bytes;  // [tile * k + sub-chunk]
  const double* of_tile(uint32_t tile) const { return bytes.data() + static_cast<size_t>(tile) * k; }
};

TileBytes sub_chunk_bytes(uint32_t k, uint32_t tiles,
                          const std::function<int64_t(const SlotRange&, uint32_t)>& bytes_of) {
  TileBytes out{k, tiles, std::vector<double>(static_cast<size_t>(tiles) * k)};
  for (uint32_t t = 0; t < tiles; ++t) {
    for (uint32_t c = 0; c < k; ++c) {
      out.bytes[static_cast<size_t>(t) * k + c] = static_cast<double>(bytes_of(SlotRange{BufferKind::kInput, c, 1}, t));
    }
  }
  return out;
}

// What a message costs on each connection of one placement: the larger of its route's and its
// protocol's latency, and seconds per payload byte under the round's contention (wire bytes over
// payload included).
struct ConnectionCosts {
  std::vector<double> latency_s;
  std::vector<double> seconds_per_byte;
};

ConnectionCosts connection_costs(const ReplayConnections& replay, const std::vector<Snapshot>& snapshots,
                                 const std::vector<double>& first_bytes, const std::vector<int>& gpu_of_rank,
                                 double wire, const models::Topology& topology,
                                 const std::function<double(int, int)>& hop_latency) {
  const auto& connections = replay.connections;
  ConnectionCosts costs{std::vector<double>(connections.size()), std::vector<double>(connections.size(), 0)};
  for (size_t c = 0; c < connections.size(); ++c) {
    const int ga = gpu_of_rank[static_cast<size_t>(connections[c].from)];
    const int gb = gpu_of_rank[static_cast<size_t>(connections[c].to)];
    costs.latency_s[c] =
        std::max(topology.route(ga, gb).latency_s, hop_latency(connections[c].from, connections[c].to));
    if (first_bytes[c] > 0) {
      costs.seconds_per_byte[c] =
          snapshots[replay.group_of[c]].transfer(ga, gb, first_bytes[c]) / first_bytes[c] * wire;
    }
  }
  return costs;
}

// When each op ended and each send's message arrives (by op id), and where each lane stands (by
// lane slot). Reused for every tile and placement: the topological order writes an entry before
// any op reads it.
struct ReplayTimes {
  std::vector<double> done, arrival, lane_end;
};

// One placement's replay: every tile of the program in its topological order, a send queueing its
// message on its connection (one message after the other, then the latency), a receive waiting for
// it, a copy or reduce taking its HBM traffic's time. Returns when the last op ends.
double replay_tiles(const ReplayProgram& program, const ConnectionCosts& costs, const TileBytes& sizes,
                    double base_latency, double hbm, ReplayTimes& times) {
  const uint32_t k = sizes.k;
  std::vector<double> free(costs.latency_s.size(), 0);
  times.lane_end.assign(program.first_lane.back(), base_latency);
  double finish = 0;
  for (uint32_t t = 0; t < sizes.tiles; ++t) {
    const double* tile_bytes = sizes.of_tile(t);
    for (const ReplayStep& step : program.steps) {
      double ready = times.lane_end[step.lane_slot];
      for (uint32_t d = step.deps_begin; d < step.deps_end; ++d) {
        ready = std::max(ready, times.done[program.step_deps[d]]);
      }
      double bytes = 0;
      for (uint32_t c = step.chunk_first; c < step.chunk_first + step.chunk_count; ++c) bytes += tile_bytes[c % k];
      double end = ready;
      switch (step.kind) {
        case OpKind::kSend:
          free[step.link] = std::max(ready, free[step.link]) + costs.seconds_per_byte[step.link] * bytes;
          times.arrival[step.id] = free[step.link] + costs.latency_s[step.link];
          break;
        case OpKind::kRecv:
        case OpKind::kRecvReduce: end = std::max(ready, times.arrival[step.link]); break;
        case OpKind::kCopy: end = ready + 2.0 * bytes / hbm; break;
        case OpKind::kReduce: end = ready + 3.0 * bytes / hbm; break;
      }
      times.done[step.id] = end;
      times.lane_end[step.lane_slot] = end;
      finish = std::max(finish, end);
    }
  }
  return finish;
}

}  // namespace

// Explicit schedules whose connections all carry traffic at once in steady state (a pipelined
// tree: every edge busy up and down): one Snapshot round with each connection's first message
// gives its transfer time under contention, then the program is replayed analytically, tile by
// tile, in one topological order of its ops, with the op-by-op simulation's semantics: a send
// queues its message on its connection (which moves one message after the other, then delays it by
// the route's and protocol's latency) and the lane goes on; a receive waits for its message; a copy
// or reduce takes its HBM traffic's time. O(ops x tiles) arithmetic after one contention round.
// With `contention_by_round`, connections share a Snapshot only with those whose first send is in
// the same round (validate()'s rounds): PAT's steps, each one shift of every rank, run one after
// the other, so a step's flows contend with each other and not with the other steps'.
double Simulator::Impl::run_replayed(const Schedule& schedule, const std::vector<std::vector<int>>& placements,
                                     const std::function<int64_t(const SlotRange&, uint32_t)>& bytes_of,
                                     uint32_t tiles, double wire, const std::function<double(int, int)>& hop_latency,
                                     double base_latency, SimResult& result, bool contention_by_round,
                                     std::shared_ptr<void>* cache) {
  // Ops numbered, each receive's matching send and one topological order (the graph validate()
  // builds, core/schedule_dag.h), the connections and the flattened program: per schedule.
  const std::shared_ptr<const ReplayPrep> prep = replay_prep(schedule, contention_by_round, cache);
  const size_t total_ops = prep->dag.index.total;
  const ReplayConnections& replay = prep->replay;
  // Wire bytes of each connection's first message (tile 0), at this size.
  std::vector<double> first_bytes(replay.connections.size());
  for (size_t c = 0; c < replay.connections.size(); ++c) {
    first_bytes[c] = static_cast<double>(bytes_of(replay.first_src[c], 0)) * wire;
  }
  const std::vector<Snapshot> snapshots = replay_contention(replay, first_bytes, placements, topology,
                                                            [this](uint32_t link) { return link_capacity(link); });
  result.simulated_transfers = 0;
  for (const Snapshot& snapshot : snapshots) result.simulated_transfers += snapshot.pairs();

  const TileBytes sizes = sub_chunk_bytes(schedule.chunks_per_block, tiles, bytes_of);
  ReplayTimes times{std::vector<double>(total_ops, 0), std::vector<double>(total_ops, 0), {}};
  const double hbm = hbm_Bps();
  double total = 0;
  for (const std::vector<int>& gpu_of_rank : placements) {
    const ConnectionCosts costs =
        connection_costs(replay, snapshots, first_bytes, gpu_of_rank, wire, topology, hop_latency);
    total = std::max(total, replay_tiles(prep->program, costs, sizes, base_latency, hbm, times));
  }
  return total;
}

}  // namespace tandem::sim
