// Runs every rank's NCCL plan on host memory with NCCL's group semantics, strictly:
//   - a rank posts its groups in order, one at a time; a group without transfers completes at once;
//   - the transfers a rank posts to peer p in its current group (its "part" with p) meet p's part
//     with the rank in p's current group; the two groups must be the same (tile, level) and the two
//     parts must correspond exactly: the k-th send
//     of one side with the k-th receive of the other, in posting order, of equal element counts;
//     a mismatch throws (this is stricter than NCCL, which would match across group boundaries,
//     and it is the property the plan promises);
//   - a group completes once every part of it has met its partner; the data of its receives lands
//     when it completes (sends read their source when the parts meet), then its local steps run;
//   - no rank can progress and some rank has groups left: a deadlock, which throws naming each
//     stuck rank and the peers it waits for.
// Local steps use core/dtype.h (reduce_elements, divide_elements) and memmove as the host backend.
#pragma once

#include <span>
#include <stdexcept>

#include "backend/nccl/nccl_plan.h"
#include "core/executor.h"

namespace tandem::nccl::test {

// What the simulator found wrong with a plan (the message says what and where).
class PlanFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SimulationStats {
  int64_t groups_completed = 0;
  int64_t messages = 0;
};

// Runs `plan` (all ranks, in rank order) for `spec` over `buffers` (one per rank, host memory).
// Throws PlanFault on a mismatch, a deadlock or an out-of-bounds range.
SimulationStats simulate_plan(const NcclPlan& plan, const CollectiveSpec& spec, std::span<const RankBuffers> buffers);

}  // namespace tandem::nccl::test
