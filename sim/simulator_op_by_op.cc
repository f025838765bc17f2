// The op-by-op simulation of sim::Simulator: one SimGrid actor per rank and lane running its ops,
// and one per connection moving its messages one after the other, as NCCL's per-peer FIFO does.
// What a schedule needs when the replays (simulator_replay.cc) do not apply: faults, stragglers,
// slowed sends, the packet model, and schedules that are neither rings nor replayable.
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <malloc.h>

#include "core/error.h"
#include "core/faults.h"
#include "core/fifo.h"
#include "core/host_memory.h"
#include "sim/simulator.h"
#include "sim/simulator_internal.h"

namespace tandem::sim {
namespace {

// The op-by-op simulation has an actor per (rank, lane) and one per connection, all alive at once:
// a direct all_to_all on n GPUs has n^2 of them. Above this many actors in one run their stacks
// are always mmapped too (heap stacks are calloc'ed, and a reused heap chunk is cleared whole:
// 256 KiB resident an actor; 36,864 actors of a 192-GPU all_to_all took 5.2 GB).
constexpr size_t kHeapActorStacksMaxActors = 4096;
// What an actor of the op-by-op simulation keeps resident with an mmapped stack: the stack pages it
// touches, its SimGrid actor and context, and its connection's semaphores and queues (measured:
// a 128-GPU direct all_to_all, 16,512 actors, 284 MB).
constexpr double kOpByOpActorBytes = 16 * 1024;

// Op by op: one actor per (rank, lane), and one per connection (rank pair and lane) that carries
// that connection's messages one after the other, as NCCL's per-peer FIFO (and its proxy) does.
// A send only queues its message, so the lane goes on at once (eager); a receive waits until the
// connection has delivered the message. Cross-lane dependencies wait on the rank's completion
// counters. Without the per-connection order, 64 pipelined chunks issued at once would share the
// link and all arrive at the end, and nothing would pipeline.
struct RankState {
  sg4::MutexPtr mutex = sg4::Mutex::create();
  sg4::ConditionVariablePtr changed = sg4::ConditionVariable::create();
  std::vector<uint64_t> done;  // per lane: ops completed (over all tiles)
};
struct Connection {
  int from = 0, to = 0;
  uint64_t messages = 0;              // over all tiles
  Fifo<uint64_t> queue;               // bytes of the messages waiting to go
  Fifo<double> send_slowdowns;        // their SimRequest::send_slowdown (when set)
  Fifo<double> arrivals;              // when moved messages reach the receiver
  double latency_s = 0;               // route + protocol latency of each message
  sg4::SemaphorePtr queued = sg4::Semaphore::create(0);
  sg4::SemaphorePtr moved = sg4::Semaphore::create(0);

  // The receiver's side: waits until the next message has moved, then until it arrives a route's
  // latency later. Messages of a connection move one after the other with the same latency, so
  // they arrive in order whenever the receiver asks. (A second actor per connection that slept
  // until each arrival did the same for twice the actors: 16 KB of memory each, n^2 of them in a
  // direct all_to_all.)
  void receive() {
    moved->acquire();
    const double at = arrivals.pop_front();
    if (at > sg4::Engine::get_clock()) sg4::this_actor::sleep_until(at);
  }
};

}  // namespace

// What the op-by-op actors share; it outlives them (Impl::run_op_by_op holds it until the engine
// has run). Ranks are global here (group * n + rank): concurrent groups run side by side.
struct OpByOpRun {
  const Schedule& explicit_form;  // the schedule with every rank's program written out
  int n;                          // ranks of one group
  const SimRequest& request;
  const Sizer& sizer;
  uint32_t tiles;
  double wire;          // wire bytes per payload byte
  double base_latency;  // s, every lane waits it before its first op
  std::vector<int> gpu_of_global;
  std::vector<RankState> states;
  std::map<std::tuple<int, int, uint32_t>, Connection> connections;  // by (from, to, lane)

  const RankProgram& program_of(int global) const { return explicit_form.ranks[static_cast<size_t>(global % n)]; }
  int peer_of(int global, int peer) const { return global - global % n + peer; }
};

// Sets up the op-by-op simulation (OpByOpRun's comment), runs SimGrid's engine over it and returns
// the simulated seconds it took.
double Simulator::Impl::run_op_by_op(const Schedule& schedule, const SimRequest& request,
                                     const std::vector<std::vector<int>>& placements, const Sizer& sizer,
                                     uint32_t tiles, double wire, double base_latency) {
  const double start = sg4::Engine::get_clock();
  // NCCL's per-hop protocol latency rides on every message (the larger of it and the route's).
  const bool latencies = model.protocol_effects;
  const double extra_nvlink = latencies ? model.hop_latency_s(request.protocol, schedule.algorithm, false) : 0.0;
  const double extra_network = latencies ? model.hop_latency_s(request.protocol, schedule.algorithm, true) : 0.0;
  if (zone != nullptr) {
    zone->extra_nvlink_s = extra_nvlink;
    zone->extra_network_s = extra_network;
  }
  packet_extra_nvlink_s = extra_nvlink;
  packet_extra_network_s = extra_network;
  struct ResetLatency {
    Impl& s;
    ~ResetLatency() {
      if (s.zone != nullptr) s.zone->extra_nvlink_s = s.zone->extra_network_s = 0;
      s.packet_extra_nvlink_s = s.packet_extra_network_s = 0;
    }
  } reset{*this};
  const Schedule expanded = schedule.symmetric() ? expand(schedule) : Schedule{};
  const Schedule& explicit_form = schedule.symmetric() ? expanded : schedule;

  OpByOpRun run{explicit_form, schedule.nranks, request, sizer, tiles, wire, base_latency, {}, {}, {}};
  for (const std::vector<int>& placement : placements) {
    run.gpu_of_global.insert(run.gpu_of_global.end(), placement.begin(), placement.end());
  }
  run.states.resize(static_cast<size_t>(static_cast<int>(placements.size()) * schedule.nranks));
  add_connections(run);
  size_t actors = run.connections.size();
  for (size_t r = 0; r < run.states.size(); ++r) actors += run.program_of(static_cast<int>(r)).lanes.size();
  require_host_memory(static_cast<double>(actors) * kOpByOpActorBytes,
                      fmt::format("simulating the {} {} on {} ranks op by op ({} actors, one per connection and lane)",
                                  name(schedule.algorithm), name(schedule.collective), run.states.size(), actors),
                      "; use fewer GPUs, or an algorithm the simulator replays (ring, tree, pat: docs/simulator.md)");
  if (actors > kHeapActorStacksMaxActors) {
    mallopt(M_MMAP_THRESHOLD, kActorStackKiB * 1024 / 2);
    mallopt(M_MMAP_MAX, std::numeric_limits<int>::max());
  }
  // A connection moves its messages' bytes one after the other (SimGrid flows with the route's
  // latency switched off); the receiver waits out each message's route latency after it moved:
  // latencies of consecutive messages overlap, as NCCL's FIFO slots let them, while their bytes queue.
  if (zone != nullptr) zone->latency_off = true;
  struct LatencyBack {
    TopologyZone* zone;
    ~LatencyBack() {
      if (zone != nullptr) zone->latency_off = false;
    }
  } latency_back{zone};
  start_connection_actors(run);
  start_lane_actors(run);
  engine->run();
  return sg4::Engine::get_clock() - start;
}

// Every rank's completion counters and every connection that carries a send, with its messages
// over all tiles. The packet model refuses a message over 4 GiB here, before any actor exists.
void Simulator::Impl::add_connections(OpByOpRun& run) const {
  for (int r = 0; r < static_cast<int>(run.states.size()); ++r) {
    const RankProgram& program = run.program_of(r);
    run.states[static_cast<size_t>(r)].done.assign(program.lanes.size(), 0);
    for (uint32_t l = 0; l < program.lanes.size(); ++l) {
      for (const Op& op : program.lanes[l].ops) {
        if (op.kind != OpKind::kSend) continue;
        if (zone == nullptr) {
          for (uint32_t t = 0; t < run.tiles; ++t) {
            const double bytes = static_cast<double>(run.sizer.bytes(op.src, t)) * run.wire;
            if (bytes > static_cast<double>(UINT32_MAX)) {
              fail(ErrorCode::kUnsupported, "the packet (ns-3) model carries messages of at most 4 GiB; this "
                   "schedule sends {:.0f} bytes at once (a smaller size, or --network fluid)", bytes);
            }
          }
        }
        Connection& c = run.connections[{r, run.peer_of(r, op.peer), l}];
        c.from = r;
        c.to = run.peer_of(r, op.peer);
        c.messages += run.tiles;
      }
    }
  }
}

// One actor per connection: it moves its messages' bytes in order (a straggling or slowed sender
// holding the connection longer); the receiver waits out the latency (Connection::receive).
void Simulator::Impl::start_connection_actors(OpByOpRun& run) {
  const bool packet = zone == nullptr;
  // Every connection's route first (this is where a pair with no route left around dead links
  // throws), so that a failure leaves no actor behind to haunt the next run.
  for (auto& [key, connection] : run.connections) {
    connection.latency_s = message_latency(run.gpu_of_global[static_cast<size_t>(connection.from)],
                                           run.gpu_of_global[static_cast<size_t>(connection.to)]);
  }
  for (auto& [key, connection] : run.connections) {
    Connection* c = &connection;
    const int from_gpu = run.gpu_of_global[static_cast<size_t>(c->from)];
    const int to_gpu = run.gpu_of_global[static_cast<size_t>(c->to)];
    sg4::Host* from = gpu_hosts[static_cast<size_t>(from_gpu)];
    sg4::Host* to = gpu_hosts[static_cast<size_t>(to_gpu)];
    const double latency = c->latency_s;
    // A straggling sender holds the connection (slowdown - 1) x the transfer time longer: its
    // kernel pushes the bytes that much slower, while the links are free for other flows.
    const double slowdown = gpu_slowdown[static_cast<size_t>(from_gpu)];
    const bool slowed_sends = static_cast<bool>(run.request.send_slowdown);
    sg4::Actor::create(fmt::format("c{}-{}", c->from, c->to), from,
                       [c, from, to, latency, packet, slowdown, slowed_sends] {
      for (uint64_t m = 0; m < c->messages; ++m) {
        c->queued->acquire();
        const uint64_t bytes = c->queue.pop_front();
        const double began = sg4::Engine::get_clock();
        // ns-3 carries a message as one TCP flow (at most 4 GiB; an empty one never completes).
        if (!packet || bytes > 0) sg4::Comm::sendto(from, to, bytes);
        if (slowdown != 1.0) sg4::this_actor::sleep_for((slowdown - 1.0) * (sg4::Engine::get_clock() - began));
        if (slowed_sends) {
          const double factor = c->send_slowdowns.pop_front();
          const double spent = std::max(sg4::Engine::get_clock() - began, kMinSlowedTransfer_s);
          if (factor > 1.0) sg4::this_actor::sleep_for((factor - 1.0) * spent);
        }
        c->arrivals.push_back(sg4::Engine::get_clock() + latency);
        c->moved->release();
      }
    });
  }
}

// One actor per (rank, lane): it runs the lane's ops tile after tile, waiting for cross-lane
// dependencies on the rank's counters, queueing sends on their connection, waiting for receives.
void Simulator::Impl::start_lane_actors(OpByOpRun& run) {
  for (int r = 0; r < static_cast<int>(run.states.size()); ++r) {
    const RankProgram& program = run.program_of(r);
    sg4::Host* host = gpu_hosts[static_cast<size_t>(run.gpu_of_global[static_cast<size_t>(r)])];
    // A straggler's copies and reduces take `slowdown` times as long (its host's speed is HBM's).
    const double slowdown = gpu_slowdown[static_cast<size_t>(run.gpu_of_global[static_cast<size_t>(r)])];
    for (uint32_t l = 0; l < program.lanes.size(); ++l) {
      sg4::Actor::create(fmt::format("r{}-l{}", r, l), host, [&run, r, l, slowdown] {
        const Lane& lane = run.program_of(r).lanes[l];
        RankState& state = run.states[static_cast<size_t>(r)];
        const uint64_t per_tile = lane.ops.size();
        // SimRequest::send_slowdown's op numbering: over all tiles, lanes in order.
        int64_t lane_offset = 0, ops_per_tile = 0;
        for (uint32_t other = 0; other < run.program_of(r).lanes.size(); ++other) {
          if (other < l) lane_offset += static_cast<int64_t>(run.program_of(r).lanes[other].ops.size());
          ops_per_tile += static_cast<int64_t>(run.program_of(r).lanes[other].ops.size());
        }
        if (run.base_latency > 0) sg4::this_actor::sleep_for(run.base_latency);
        for (uint32_t t = 0; t < run.tiles; ++t) {
          for (uint64_t i = 0; i < per_tile; ++i) {
            const Op& op = lane.ops[i];
            // Cross-lane dependencies (same tile): wait until those lanes completed them.
            const OpRef* deps = lane.deps_of(i);
            for (size_t d = 0; d < lane.dep_count(i); ++d) {
              if (deps[d].lane == l) continue;
              const uint64_t needed = t * run.program_of(r).lanes[deps[d].lane].ops.size() + deps[d].index + 1;
              std::unique_lock lock(*state.mutex);
              state.changed->wait(lock, [&] { return state.done[deps[d].lane] >= needed; });
            }
            switch (op.kind) {
              case OpKind::kSend: {
                Connection& c = run.connections.at({r, run.peer_of(r, op.peer), l});
                c.queue.push_back(static_cast<uint64_t>(static_cast<double>(run.sizer.bytes(op.src, t)) * run.wire));
                if (run.request.send_slowdown) {
                  const int64_t op_index = static_cast<int64_t>(t) * ops_per_tile + lane_offset + static_cast<int64_t>(i);
                  c.send_slowdowns.push_back(run.request.send_slowdown(r, op_index));
                }
                c.queued->release();
                break;
              }
              case OpKind::kRecv:
              case OpKind::kRecvReduce:
                run.connections.at({run.peer_of(r, op.peer), r, l}).receive();
                break;
              case OpKind::kCopy:
                sg4::this_actor::execute(slowdown * 2.0 * static_cast<double>(run.sizer.bytes(op.dst, t)));
                break;
              case OpKind::kReduce:
                sg4::this_actor::execute(slowdown * 3.0 * static_cast<double>(run.sizer.bytes(op.dst, t)));
                break;
            }
            std::unique_lock lock(*state.mutex);
            ++state.done[l];
            state.changed->notify_all();
          }
        }
      });
    }
  }
}

}  // namespace tandem::sim
