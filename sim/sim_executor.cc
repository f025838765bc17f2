#include "sim/sim_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/fault_report.h"
#include "sim/collective_plan.h"

namespace tandem::sim {
namespace {

// The hook's answer for every send of the explicit schedule, by rank and by op index in the rank's
// program over all tiles (core/executor.h TransferHook; host_executor.cc inject() numbers alike):
//
//   op_index = tile * ops_per_tile + lane_offset[lane] + index_in_lane
//   lane_offset[l] = ops of lanes 0 .. l-1;  ops_per_tile = ops of all lanes
//
// Non-send ops keep a neutral effect.
struct Effects {
  std::vector<std::vector<int64_t>> lane_offset;  // by rank, lane
  std::vector<int64_t> ops_per_tile;              // by rank
  std::vector<std::vector<TransferEffect>> of;    // by rank, op index

  int64_t index(int rank, uint32_t tile, uint32_t lane, uint32_t op) const {
    const auto r = static_cast<size_t>(rank);
    return static_cast<int64_t>(tile) * ops_per_tile[r] + lane_offset[r][lane] + op;
  }
  const TransferEffect& at(int rank, uint32_t tile, uint32_t lane, uint32_t op) const {
    return of[static_cast<size_t>(rank)][static_cast<size_t>(index(rank, tile, lane, op))];
  }
};

Effects ask_hook(const Schedule& schedule, uint32_t tiles, const TransferHook& hook) {
  Effects effects;
  const auto n = static_cast<size_t>(schedule.nranks);
  effects.lane_offset.resize(n);
  effects.ops_per_tile.resize(n);
  effects.of.resize(n);
  for (size_t r = 0; r < n; ++r) {
    const RankProgram& program = schedule.ranks[r];
    int64_t offset = 0;
    for (const Lane& lane : program.lanes) {
      effects.lane_offset[r].push_back(offset);
      offset += static_cast<int64_t>(lane.ops.size());
    }
    effects.ops_per_tile[r] = offset;
    effects.of[r].resize(static_cast<size_t>(offset) * tiles);
    // Tile-major, lanes in order: the order a single-lane host rank asks in.
    for (uint32_t t = 0; t < tiles; ++t) {
      for (uint32_t l = 0; l < program.lanes.size(); ++l) {
        const std::vector<Op>& ops = program.lanes[l].ops;
        for (uint32_t i = 0; i < ops.size(); ++i) {
          if (ops[i].kind != OpKind::kSend) continue;
          const int64_t op_index = effects.index(static_cast<int>(r), t, l, i);
          effects.of[r][static_cast<size_t>(op_index)] = hook(static_cast<int>(r), ops[i].peer, op_index);
        }
      }
    }
  }
  return effects;
}

// The logical replay that decides whether the run fails, and how (see sim_executor.h). Every lane
// runs its ops tile after tile, an op once its cross-lane deps of the same tile are done (same-lane
// deps are the lane's order) and, for a receive, once the head message of its connection has
// arrived. A wave lets every lane issue all it can; messages sent in a wave arrive in the next, so
// the wave number is a logical time. Returns without throwing when every rank finishes.
class OutcomeReplay {
 public:
  OutcomeReplay(const Schedule& schedule, const Effects& effects, uint32_t tiles, const RunContext& context)
      : schedule_(schedule), effects_(effects), tiles_(tiles), context_(context) {
    next_.resize(static_cast<size_t>(schedule.nranks));
    for (int r = 0; r < schedule.nranks; ++r) {
      next_[static_cast<size_t>(r)].assign(schedule.ranks[static_cast<size_t>(r)].lanes.size(), 0);
    }
  }

  void run() {
    while (true) {
      bool progressed = false;
      std::vector<Sent> sent;
      for (int r = 0; r < schedule_.nranks; ++r) {
        const RankProgram& program = schedule_.ranks[static_cast<size_t>(r)];
        for (uint32_t l = 0; l < program.lanes.size(); ++l) {
          while (issue(r, l, sent)) progressed = true;
          if (error_) throw *error_;  // the first rank (in rank order) to fail in the first failing wave
        }
      }
      for (Sent& message : sent) {
        connections_[{message.src, message.dst, message.lane}].push_back(message.state);
        progressed = true;
      }
      if (finished()) return;
      if (!progressed) throw_timeout();
    }
  }

 private:
  struct Message {
    bool lost = false;
    bool corrupt = false;
    int fault_index = -1;
  };
  struct Sent {
    int src = 0, dst = 0;
    uint32_t lane = 0;
    Message state;
  };
  using Key = std::tuple<int, int, uint32_t>;  // src, dst, lane

  uint64_t ops_per_tile(int rank, uint32_t lane) const {
    return schedule_.ranks[static_cast<size_t>(rank)].lanes[lane].ops.size();
  }

  // Whether op `position` (over all tiles) of (rank, lane) is done.
  bool done(int rank, uint32_t lane, uint64_t position) const {
    return next_[static_cast<size_t>(rank)][lane] > position;
  }

  // Issues the next op of (rank, lane) if it can run; false when it cannot (or the lane is done).
  bool issue(int rank, uint32_t lane, std::vector<Sent>& sent) {
    const Lane& ops = schedule_.ranks[static_cast<size_t>(rank)].lanes[lane];
    const uint64_t per_tile = ops.ops.size();
    uint64_t& next = next_[static_cast<size_t>(rank)][lane];
    if (per_tile == 0 || next >= per_tile * tiles_) return false;
    const auto tile = static_cast<uint32_t>(next / per_tile);
    const auto index = static_cast<uint32_t>(next % per_tile);
    const OpRef* deps = ops.deps_of(index);
    for (size_t d = 0; d < ops.dep_count(index); ++d) {
      if (deps[d].lane == lane) continue;
      if (!done(rank, deps[d].lane, tile * ops_per_tile(rank, deps[d].lane) + deps[d].index)) return false;
    }
    const Op& op = ops.ops[index];
    if (op.kind == OpKind::kSend) {
      const TransferEffect& effect = effects_.at(rank, tile, lane, index);
      if (effect.fail) {
        set_error(FaultReport{.kind = FaultReport::Kind::kSendFailed,
                              .backend = "sim",
                              .rank = rank,
                              .peer = op.peer,
                              .at = position(rank, tile, lane, index),
                              .fault = effect.fault_index});
        return false;
      }
      // A lost message takes the rest of its connection with it: later messages queue behind it.
      bool& broken = broken_[{rank, op.peer, lane}];
      Message state{.lost = effect.stall || broken, .corrupt = effect.corrupt, .fault_index = effect.fault_index};
      if (broken) state.fault_index = lost_fault_[{rank, op.peer, lane}];
      if (effect.stall && !broken) {
        broken = true;
        lost_fault_[{rank, op.peer, lane}] = effect.fault_index;
      }
      sent.push_back({rank, op.peer, lane, state});
    } else if (op.is_recv()) {
      std::deque<Message>& queue = connections_[{op.peer, rank, lane}];
      if (queue.empty() || queue.front().lost) {
        waiting_[{rank, lane}] = {tile, lane, index, op.peer};
        return false;
      }
      const Message message = queue.front();
      queue.pop_front();
      if (message.corrupt && context_.checksums) {
        set_error(FaultReport{.kind = FaultReport::Kind::kCorrupt,
                              .backend = "sim",
                              .rank = rank,
                              .peer = op.peer,
                              .at = position(rank, tile, lane, index)});
        return false;
      }
    }
    waiting_.erase({rank, lane});
    ++next;
    return true;
  }

  void set_error(FaultReport report) {
    if (!error_) error_.emplace(fault_error(std::move(report)));
  }

  bool finished() const {
    for (int r = 0; r < schedule_.nranks; ++r) {
      for (uint32_t l = 0; l < next_[static_cast<size_t>(r)].size(); ++l) {
        if (next_[static_cast<size_t>(r)][l] < ops_per_tile(r, l) * tiles_) return false;
      }
    }
    return true;
  }

  // Nothing can move: some receive waits for a message that will never come. Name a rank that
  // waits on a lost message (the fault's victim) and its sender, as the host backend does.
  [[noreturn]] void throw_timeout() const {
    FaultReport report{.kind = FaultReport::Kind::kStalled,
                       .backend = "sim",
                       .collective = schedule_.collective,
                       .algorithm = schedule_.algorithm,
                       .nranks = schedule_.nranks,
                       .timeout_ms = context_.timeout.count()};
    const auto waits = [&](int rank, const Waiting& w) {
      report.rank = rank;
      report.peer = w.peer;
      report.at = position(rank, w.tile, w.lane, w.op);
    };
    for (const auto& [at, w] : waiting_) {
      const int rank = at.first;
      const auto lost = lost_fault_.find({w.peer, rank, w.lane});
      if (lost == lost_fault_.end()) continue;
      waits(rank, w);
      report.kind = FaultReport::Kind::kLost;
      report.fault = lost->second;
      fail(std::move(report));
    }
    if (waiting_.empty()) {
      report.note = "no rank can progress";
    } else {
      waits(waiting_.begin()->first.first, waiting_.begin()->second);
    }
    fail(std::move(report));
  }

  // Op `op` of (rank, lane) in `tile`, for fault reports ("tile 1 lane 0 op 3, Recv from 2").
  OpPosition position(int rank, uint32_t tile, uint32_t lane, uint32_t op) const {
    const Op& at = schedule_.ranks[static_cast<size_t>(rank)].lanes[lane].ops[op];
    return OpPosition{.tile = tiles_ > 1 ? std::optional<uint32_t>(tile) : std::nullopt,
                      .lane = lane,
                      .op = op,
                      .kind = at.kind,
                      .peer = at.peer};
  }

  struct Waiting {
    uint32_t tile = 0, lane = 0, op = 0;
    int peer = -1;
  };

  const Schedule& schedule_;
  const Effects& effects_;
  const uint32_t tiles_;
  const RunContext& context_;
  std::vector<std::vector<uint64_t>> next_;  // by rank, lane: ops done over all tiles
  std::map<Key, std::deque<Message>> connections_;
  std::map<Key, bool> broken_;
  std::map<Key, int> lost_fault_;
  std::map<std::pair<int, uint32_t>, Waiting> waiting_;  // lanes blocked on a receive, by (rank, lane)
  std::optional<Error> error_;
};

void check_arguments(const Schedule& schedule, const CollectiveSpec& spec, const RunContext& context) {
  if (spec.collective != schedule.collective || spec.nranks != schedule.nranks) {
    fail(ErrorCode::kInvalidArgument, "sim: the spec ({}, {} ranks) does not match the schedule ({}, {} ranks)",
         name(spec.collective), spec.nranks, name(schedule.collective), schedule.nranks);
  }
  if (spec.count < 0) fail(ErrorCode::kInvalidArgument, "sim: count {} is negative", spec.count);
  if (context.tiles < 1) fail(ErrorCode::kInvalidArgument, "sim: tiles must be at least 1, got {}", context.tiles);
  if (context.timeout.count() <= 0) {
    fail(ErrorCode::kInvalidArgument, "sim: timeout must be positive, got {} ms", context.timeout.count());
  }
}

}  // namespace

SimExecutor::SimExecutor(const models::ClusterSpec& cluster, SimExecutorOptions options)
    : topology_(models::build_cluster(cluster)),
      options_(options),
      simulator_(std::make_unique<Simulator>(topology_, cluster, options.network)) {}

SimExecutor::~SimExecutor() = default;

void SimExecutor::set_placement(std::vector<int> gpu_of_rank) {
  std::vector<char> used(static_cast<size_t>(topology_.gpu_count()), 0);
  for (int gpu : gpu_of_rank) {
    if (gpu < 0 || gpu >= topology_.gpu_count()) {
      fail(ErrorCode::kInvalidArgument, "sim: GPU {} out of range (the cluster has {})", gpu, topology_.gpu_count());
    }
    if (used[static_cast<size_t>(gpu)]++) fail(ErrorCode::kInvalidArgument, "sim: GPU {} placed twice", gpu);
  }
  placement_ = std::move(gpu_of_rank);
}

std::vector<int> SimExecutor::node_major_placement(const models::Topology& topology, int nranks, int ranks_per_node) {
  if (ranks_per_node < 1 || ranks_per_node > topology.gpus_per_node()) {
    fail(ErrorCode::kInvalidArgument, "sim: {} ranks per node on nodes of {} GPUs", ranks_per_node,
         topology.gpus_per_node());
  }
  std::vector<int> gpus;
  for (int r = 0; r < nranks; ++r) gpus.push_back(r / ranks_per_node * topology.gpus_per_node() + r % ranks_per_node);
  return gpus;
}

std::vector<int> SimExecutor::gpus_for(int nranks) const {
  if (placement_.empty()) {
    if (nranks > topology_.gpu_count()) {
      fail(ErrorCode::kInvalidArgument, "sim: {} ranks on a cluster of {} GPUs", nranks, topology_.gpu_count());
    }
    std::vector<int> gpus;
    for (int r = 0; r < nranks; ++r) gpus.push_back(r);
    return gpus;
  }
  if (static_cast<size_t>(nranks) > placement_.size()) {
    fail(ErrorCode::kInvalidArgument, "sim: {} ranks but {} GPUs placed", nranks, placement_.size());
  }
  return {placement_.begin(), placement_.begin() + nranks};
}

RunResult SimExecutor::run(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers>,
                           const RunContext& context) {
  check_arguments(schedule, spec, context);
  const std::vector<int> gpus = gpus_for(schedule.nranks);
  if (!context.on_send) {
    const SimRequest request =
        CollectivePlans::of_schedule(schedule, spec, gpus, options_.protocol, context.tiles).request();
    return RunResult{.seconds = simulator_->run(request).seconds};
  }
  // The hook is asked about the ops of each rank's own program: the explicit form.
  const Schedule expanded = schedule.symmetric() ? expand(schedule) : Schedule{};
  const Schedule& program = schedule.symmetric() ? expanded : schedule;
  const Effects effects = ask_hook(program, context.tiles, context.on_send);
  OutcomeReplay(program, effects, context.tiles, context).run();

  // It completes: simulate it, with the slowed sends where any is slowed.
  bool slowed = false;
  for (const std::vector<TransferEffect>& rank : effects.of) {
    for (const TransferEffect& effect : rank) slowed = slowed || effect.delay_factor / effect.bandwidth_factor > 1.0;
  }
  SimRequest request = CollectivePlans::of_schedule(program, spec, gpus, options_.protocol, context.tiles).request();
  if (slowed) {
    request.send_slowdown = [&effects](int rank, int64_t op_index) {
      const TransferEffect& effect = effects.of[static_cast<size_t>(rank)][static_cast<size_t>(op_index)];
      return std::max(1.0, effect.delay_factor / effect.bandwidth_factor);
    };
  }
  return RunResult{.seconds = simulator_->run(request).seconds};
}

}  // namespace tandem::sim
