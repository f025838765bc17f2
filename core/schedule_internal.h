// Helpers shared by validate(), symbolic_check() and the dependency inference: global op
// numbering, the storage identity of a slot under in-place aliasing, and error locations.
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/schedule.h"
#include "core/schedule_dag.h"

namespace tandem::detail {

using tandem::OpIndex;

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

using tandem::build_dag;
using tandem::Dag;
using tandem::OpLoc;

// Symmetric schedules: the structure of the Symmetry itself (one program, `order` a permutation,
// chunk counts multiples of the rotation group). Throws Error(kInvalidSchedule).
void check_symmetry(const Schedule& schedule);
// symbolic_check() of a symmetric schedule, replaying position 0 only (see symmetric_check.cc).
void symbolic_check_symmetric(const Schedule& schedule);

}  // namespace tandem::detail
