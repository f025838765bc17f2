// Static checks every schedule passes before any backend runs it.
#pragma once

#include "core/schedule.h"

namespace tandem {

// Structural validation. Throws Error(kInvalidSchedule) naming rank, lane, op and field when:
//   - a reference is out of bounds (peer, buffer chunk range, dependency);
//   - a Send has no matching Recv (or the reverse) on the same (src, dst, lane), or a matched pair
//     differs in size (chunk count or sub-chunk alignment), i.e. per-pair FIFO order is violated;
//   - the dependency graph (issue order, deps, send -> recv) has a cycle: the schedule deadlocks;
//   - two ops of one rank in the same round touch the same slot and one of them writes it.
// Fills Lane::rounds and Schedule::num_rounds.
void validate(Schedule& schedule);

// Replays the schedule on symbols and checks the collective's postcondition, out of place and
// (when the collective allows it) in place. Each chunk slot holds a symbolic value: the number of
// contributions it sums and a 64-bit fingerprint (the wrapping sum of a random key per
// (origin rank, origin chunk)); a Reduce adds both. Reading a slot never written, a wrong
// contributor set (missing, foreign or counted twice) or a wrong chunk in an output slot throws
// Error(kCheckFailed) naming the rank, buffer and chunk (and the op, when an op reads garbage).
// Requires a validated schedule.
void symbolic_check(const Schedule& schedule);

}  // namespace tandem
