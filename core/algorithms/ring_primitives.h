// Ring building blocks over a group of ranks, shared by the ring algorithm and by the algorithms
// composed from rings (hierarchical). `members` lists global ranks in ring order; the data is cut
// into one segment per member, and functions map a segment index to the chunk range that holds it
// in a given role, so the same loops serve a flat buffer, one block per rank, or a 2-D layout.
//
// Reduce-scatter, member p, g members, step s = 0 .. g-2:
//
//     send segment (p - s - 1) mod g  ->  member p+1
//     recv segment (p - s - 2) mod g  <-  member p-1, reduce with own contribution
//
// so segment j starts at member j+1 and, after g-1 hops, ends reduced at member j:
//
//     step 0:  p0 --s3--> p1 --s0--> p2 --s1--> p3 --s2--> p0      (g = 4)
//     step 2:  member p holds the sum of segment p
//
// All-gather, member p, step s = 0 .. g-2: send segment (p - s) mod g, receive (p - s - 1) mod g.
#pragma once

#include <span>

#include "core/builder.h"

namespace tandem::algorithms {

inline uint32_t ring_mod(int64_t value, int64_t g) { return static_cast<uint32_t>(((value % g) + g) % g); }

// After the call, members[j] holds the reduction over all members of segment j in final(j).
//   own(j):     where each member's contribution to segment j lives (read only);
//   partial(j): where a member keeps the running sum of segment j it forwards;
//   final(j):   where member j puts the finished segment j.
template <typename Own, typename Partial, typename Final>
void ring_reduce_scatter(ScheduleBuilder& b, int lane, std::span<const int> members, Own own, Partial partial,
                         Final final) {
  const auto g = static_cast<int64_t>(members.size());
  if (g == 1) {
    if (own(0) != final(0)) b.copy(members[0], lane, own(0), final(0));
    return;
  }
  for (int64_t s = 0; s + 1 < g; ++s) {
    for (int64_t p = 0; p < g; ++p) {
      const int self = members[static_cast<size_t>(p)];
      const int next = members[ring_mod(p + 1, g)];
      const int prev = members[ring_mod(p - 1, g)];
      const uint32_t out_segment = ring_mod(p - s - 1, g);
      const uint32_t in_segment = ring_mod(p - s - 2, g);
      b.send(self, lane, next, s == 0 ? own(out_segment) : partial(out_segment));
      const bool last = s + 2 == g;  // the received segment is p's own: it is final
      b.recv_reduce(self, lane, prev, own(in_segment), last ? final(in_segment) : partial(in_segment));
    }
  }
}

// Before the call, members[j] holds segment j in data(j) (or, with `first_src`, in first_src(j),
// from which the first send reads); after it, every member holds every segment in data.
template <typename Data, typename FirstSource>
void ring_all_gather(ScheduleBuilder& b, int lane, std::span<const int> members, Data data, FirstSource first_src) {
  const auto g = static_cast<int64_t>(members.size());
  for (int64_t s = 0; s + 1 < g; ++s) {
    for (int64_t p = 0; p < g; ++p) {
      const int self = members[static_cast<size_t>(p)];
      const uint32_t out_segment = ring_mod(p - s, g);
      b.send(self, lane, members[ring_mod(p + 1, g)], s == 0 ? first_src(out_segment) : data(out_segment));
      b.recv(self, lane, members[ring_mod(p - 1, g)], data(ring_mod(p - s - 1, g)));
    }
  }
}

template <typename Data>
void ring_all_gather(ScheduleBuilder& b, int lane, std::span<const int> members, Data data) {
  ring_all_gather(b, lane, members, data, data);
}

// The same two rings as programs of ring position 0 for a rank-symmetric schedule (rank 0 of the
// builder is the template; peers are the offsets +1 and g-1, segments are seen from position 0).
template <typename Own, typename Partial, typename Final>
void ring_reduce_scatter_symmetric(ScheduleBuilder& b, int lane, uint32_t members, Own own, Partial partial,
                                   Final final) {
  const auto g = static_cast<int64_t>(members);
  for (int64_t s = 0; s + 1 < g; ++s) {
    const uint32_t out_segment = ring_mod(-s - 1, g);
    const uint32_t in_segment = ring_mod(-s - 2, g);
    b.send(0, lane, 1, s == 0 ? own(out_segment) : partial(out_segment));
    b.recv_reduce(0, lane, static_cast<int>(g) - 1, own(in_segment), s + 2 == g ? final(in_segment) : partial(in_segment));
  }
}

template <typename Data>
void ring_all_gather_symmetric(ScheduleBuilder& b, int lane, uint32_t members, Data data) {
  const auto g = static_cast<int64_t>(members);
  for (int64_t s = 0; s + 1 < g; ++s) {
    b.send(0, lane, 1, data(ring_mod(-s, g)));
    b.recv(0, lane, static_cast<int>(g) - 1, data(ring_mod(-s - 1, g)));
  }
}

}  // namespace tandem::algorithms
