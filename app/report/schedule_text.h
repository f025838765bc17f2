// A schedule as text a person can read: what each rank does, round by round.
//
//   all_reduce ring: 4 ranks, 4 chunks per block, 6 rounds, 24 ops
//   ...
//   round 0
//     r0 L0 send In[0] -> r1
//     r1 L0 recv-reduce Out[0] = In[0] + r0
//     ...
#pragma once

#include <string>

#include "core/schedule.h"

namespace tandem::app {

// "all_reduce ring: 8 ranks, 8 chunks per block, 14 rounds, 112 ops". Rounds as validate() counted
// them (0 for a schedule that has not been validated).
std::string schedule_summary(const Schedule& schedule);

// "In[3]", "Out[2..5]", "Scr[0]": a slot range, first and last chunk inclusive.
std::string format_slots(const SlotRange& slots);

// One op without its rank and lane: "send In[3] -> r1", "recv Out[2] <- r7",
// "recv-reduce Out[2] = In[2] + r7", "copy Out[2] = In[2]", "reduce Out[2] += Scr[0]".
std::string format_op(const Op& op);

// The summary, a few lines on parameters and buffers, then every op grouped by round, within a
// round by rank, lane and issue order ("  r0 L0 send In[3] -> r1"). Needs a validated schedule
// (Lane::rounds filled). A rank-symmetric schedule is expanded first, so every rank is shown.
std::string format_schedule_text(const Schedule& schedule);

}  // namespace tandem::app
