// The dependency graph of a schedule as validate() builds it: every op numbered, each receive's
// matching send (per (src, dst, lane), FIFO) and one topological order of all ops. The checks use
// it, and so does the simulator's analytic replay of explicit schedules.
#pragma once

#include <cstdint>
#include <vector>

#include "core/schedule.h"

namespace tandem {

// Numbers every op of a schedule: gid = lane_base[rank][lane] + index.
struct OpIndex {
  std::vector<std::vector<uint32_t>> lane_base;
  uint32_t total = 0;

  explicit OpIndex(const Schedule& schedule) {
    lane_base.resize(schedule.ranks.size());
    for (size_t r = 0; r < schedule.ranks.size(); ++r) {
      for (const Lane& lane : schedule.ranks[r].lanes) {
        lane_base[r].push_back(total);
        total += static_cast<uint32_t>(lane.ops.size());
      }
    }
  }
  uint32_t gid(size_t rank, uint32_t lane, uint32_t index) const { return lane_base[rank][lane] + index; }
};

struct OpLoc {
  int rank = 0;
  uint32_t lane = 0;
  uint32_t index = 0;
};

// The dependency graph of a bounds-checked schedule: issue order, deps and send -> recv edges.
struct Dag {
  static constexpr uint32_t kNone = ~0u;
  explicit Dag(const Schedule& schedule) : index(schedule) {}

  OpIndex index;
  std::vector<OpLoc> loc;                // per gid
  std::vector<uint32_t> matched_send;    // per gid: the send a receive matches, kNone otherwise
  std::vector<uint32_t> order;           // a topological order of all ops
};

// Matches sends and receives per (src, dst, lane) in FIFO order and orders the graph
// topologically. Throws Error(kInvalidSchedule) for an unmatched or mis-sized message or a cycle.
Dag build_dag(const Schedule& schedule);

}  // namespace tandem
