// Helpers shared by validate(), symbolic_check() and the dependency inference: global op
// numbering, the storage identity of a slot under in-place aliasing, and error locations.
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/schedule.h"

namespace tandem::detail {

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

// "rank 3 lane 0 op 7 (send to 4)"
inline std::string op_location(int rank, uint32_t lane, uint32_t index, const Op& op) {
  std::string what(name(op.kind));
  if (op.kind == OpKind::kSend) {
    what += fmt::format(" to {}", op.peer);
  } else if (op.is_recv()) {
    what += fmt::format(" from {}", op.peer);
  }
  return fmt::format("rank {} lane {} op {} ({})", rank, lane, index, what);
}

inline std::string slot_name(BufferKind buffer, uint32_t chunk) { return fmt::format("{}[{}]", name(buffer), chunk); }

// Where a chunk slot of one rank lives: Input, Output and Scratch slots get their own ids, except
// that with `in_place` an output chunk aliased to an input chunk (in_place_input_chunk) shares its id.
class SlotStorage {
 public:
  SlotStorage(const Schedule& schedule, int rank, bool in_place)
      : collective_(schedule.collective),
        rank_(rank),
        k_(schedule.chunks_per_block),
        in_place_(in_place),
        input_(schedule.geometry().input_blocks * k_),
        output_(schedule.geometry().output_blocks * k_),
        scratch_(schedule.ranks[static_cast<size_t>(rank)].scratch_chunks) {}

  uint32_t size() const { return input_ + output_ + scratch_; }
  bool aliased(uint32_t output_chunk) const {
    return in_place_ && (collective_ != Collective::kAllGather || output_chunk / k_ == static_cast<uint32_t>(rank_));
  }
  uint32_t id(BufferKind buffer, uint32_t chunk) const {
    switch (buffer) {
      case BufferKind::kInput: return chunk;
      case BufferKind::kOutput:
        return aliased(chunk) ? in_place_input_chunk(collective_, rank_, chunk, k_) : input_ + chunk;
      case BufferKind::kScratch: return input_ + output_ + chunk;
    }
    return 0;
  }

 private:
  Collective collective_;
  int rank_;
  uint32_t k_;
  bool in_place_;
  uint32_t input_, output_, scratch_;
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

// Symmetric schedules: the structure of the Symmetry itself (one program, `order` a permutation,
// chunk counts multiples of the rotation group). Throws Error(kInvalidSchedule).
void check_symmetry(const Schedule& schedule);
// symbolic_check() of a symmetric schedule, replaying position 0 only (see symmetric_check.cc).
void symbolic_check_symmetric(const Schedule& schedule);

}  // namespace tandem::detail
