// `tandem replay`'s run (replay.h): the phases in order, from the dumps to the result, and the
// replayed clock: the completed ops where their last member arrives, the stuck ranks' slices until
// the watchdog fires, and the ops in the result's order.
#include "app/replay/replay.h"

#include <algorithm>
#include <tuple>

#include "app/replay/replay_internal.h"
#include "core/fr_analysis.h"

namespace tandem::app {

std::string_view name(ReplayState state) {
  switch (state) {
    case ReplayState::kCompleted:
      return "completed";
    case ReplayState::kStuck:
      return "stuck";
    case ReplayState::kDesync:
      return "desync";
    case ReplayState::kStalled:
      return "stalled";
    case ReplayState::kNotReached:
      return "not_reached";
  }
  return "?";
}

namespace replay_detail {
namespace {

// The result's header: what was read, the flight-recorder analysis of it, and the cluster.
ReplayResult result_header(const std::vector<FrDump>& dumps, const ReplayOptions& options) {
  ReplayResult result;
  result.analysis = analyze(dumps);
  result.ranks = static_cast<int>(dumps.size());
  result.groups = result.analysis.groups;
  result.entries = result.analysis.entries;
  result.version = dumps.front().version;
  result.comm_lib_version = dumps.front().comm_lib_version;
  result.cluster = models::describe(options.cluster);
  return result;
}

// Runs the completed ops on the replayed clock: an op starts when its last member arrives.
void run_completed(Built& built, const Replayed& logic, const Timings& timings, RankClock& clock,
                   ReplayResult& result, PhaseProgress& progress) {
  size_t done = 0;
  for (size_t op : logic.order) {
    progress.step(++done);
    ReplayOp& o = built.ops[op];
    const double start = clock.last_arrival(logic.arrived[op]);
    timings.predict(op, o);
    o.state = ReplayState::kCompleted;
    o.start_s = start;
    o.end_s = start + o.predicted_s;
    for (size_t d : logic.arrived[op]) {
      result.slices.push_back({built.rank_of[d], op, clock.arrival(d), o.end_s});
      clock.free_at[d] = o.end_s;
      ++clock.next[d];
    }
    result.end_s = std::max(result.end_s, o.end_s);
    if (o.simulated) {
      result.predicted_comm_s += o.predicted_s;
      if (o.recorded_s) {
        result.recorded_comm_s += *o.recorded_s;
        ++result.ops_with_recorded;
      }
    }
  }
}

// Stuck ranks' slices: from their arrival to when the watchdog fires (or the replay's end).
void add_stuck_slices(const Built& built, const Replayed& logic, const RankClock& clock,
                      const std::vector<BlockedInfo>& infos, ReplayResult& result) {
  const double stop = result.recoveries.empty() ? (infos.empty() ? result.end_s : built.ops[infos.front().op].start_s)
                                                : result.recoveries.front().detected_s;
  for (const BlockedInfo& info : infos) {
    for (size_t d : logic.arrived[info.op]) {
      const double at = clock.arrival(d);
      result.slices.push_back({built.rank_of[d], info.op, at, std::max(at, stop)});
    }
  }
  std::stable_sort(result.slices.begin(), result.slices.end(), [](const ReplaySlice& a, const ReplaySlice& b) {
    return std::tie(a.rank, a.start_s) < std::tie(b.rank, b.start_s);
  });
}

// Moves the ops into the result in replay order (completed by start time, then blocked, then the
// rest, not reached) and renumbers the slices and the first divergence to match.
void place_ops(Built& built, const Replayed& logic, const std::vector<BlockedInfo>& infos, ReplayResult& result) {
  std::vector<ReplayOp>& ops = built.ops;
  std::vector<size_t> order = logic.order;
  for (const BlockedInfo& info : infos) order.push_back(info.op);
  std::vector<bool> placed(ops.size(), false);
  for (size_t op : order) placed[op] = true;
  for (size_t op = 0; op < ops.size(); ++op) {
    if (!placed[op]) order.push_back(op);
  }
  std::vector<size_t> new_index(ops.size());
  for (size_t i = 0; i < order.size(); ++i) new_index[order[i]] = i;
  for (size_t op : order) result.ops.push_back(std::move(ops[op]));
  for (ReplaySlice& s : result.slices) s.op = new_index[s.op];
  if (!infos.empty()) result.first_divergence = new_index[infos.front().op];
}

}  // namespace
}  // namespace replay_detail

using namespace replay_detail;

ReplayResult replay(const std::vector<FrDump>& input, const ReplayOptions& options) {
  std::vector<FrDump> sorted;
  Memberships memberships;
  PhaseProgress(options, "checking dumps", input.size());
  const std::vector<FrDump>& dumps = sorted_and_checked(input, sorted, memberships);
  PhaseProgress(options, "analyzing (fr analyze)", dumps.size());
  ReplayResult result = result_header(dumps, options);
  PhaseProgress building(options, "building ops, dumps", dumps.size());
  Built built = build_ops(dumps, memberships, options.recorded_gaps, building);
  describe_ops(built, options.cluster.nodes * options.cluster.gpus_per_node);
  PhaseProgress comparing(options, "comparing ops across ranks, dumps", dumps.size());
  const Signatures signatures = signatures_of(built, comparing);
  PhaseProgress matching(options, "matching ops", built.ops.size());
  const Replayed logic = replay_logic(built, signatures, matching);
  std::vector<BlockedInfo> infos = describe_blocked(built, logic, find_blocked(built, logic));
  const Timings timings = time_ops(options, built.ops, logic, infos);

  RankClock clock(built);
  PhaseProgress clocking(options, "replaying ops", logic.order.size());
  run_completed(built, logic, timings, clock, result, clocking);
  for (BlockedInfo& info : infos) judge_blocked(built, logic, signatures, timings, clock, info);
  // The blocked ops in the order their last waiting rank arrived.
  std::stable_sort(infos.begin(), infos.end(), [&](const BlockedInfo& a, const BlockedInfo& b) {
    return built.ops[a.op].start_s < built.ops[b.op].start_s;
  });
  judge_replay(dumps, built, logic, timings, clock, infos, options, result);
  add_stuck_slices(built, logic, clock, infos, result);
  place_ops(built, logic, infos, result);
  return result;
}

}  // namespace tandem::app
