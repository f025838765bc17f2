// The steps of one ring lane replayed position by position: the last stage of the simulator's
// compressed rounds for rank-symmetric rings (sim/simulator_replay.cc's run_compressed), once one
// contention round has given every hop its latency and transfer time.
//
// Position p of the ring sends to position p + offset (mod n). At every step each position sends
// what it received at the step before; the receive at q = p + offset completes at
//     R'[q] = max(max(R[p] + latency[p], link_free[p]) + transfer[p] * scale, R[q])
// and the hop's link is busy until then (link_free[p] = R'[q]). `scale` is the step's message size
// relative to the round's (a tile's last chunk is smaller).
//
// Periodic hops: when every hop p is bitwise the same as hop p mod P for a P dividing n (node-major
// placements on identical nodes and leaves give P = one node or one leaf group of GPUs, not n), the
// state after every step is P-periodic too (it starts at 0 and each step maps position p mod P the
// same way), so P positions compute the same doubles as n did, in n / P of the time: a ring of
// 16,384 GPUs costs 2n steps x P positions instead of 2n x n.
#pragma once

#include <cstddef>
#include <vector>

namespace tandem::sim {

struct RingHops {
  std::vector<double> latency_s;   // per position p: the hop p -> p + offset's latency
  std::vector<double> transfer_s;  // ... and its transfer time for one message of the round's size
  size_t offset = 1;               // the lane's peer offset, 0 < offset < positions
};

// The smallest P dividing the positions such that every hop p equals hop p mod P exactly (both
// latency and transfer); the number of positions when there is none smaller.
size_t hop_period(const RingHops& hops);

// The time the last position's last receive completes, after the steps whose message scales
// `step_scales` lists in order (every tile's steps, tile after tile), from every position at 0.
// Replays one period of the hops (hop_period), which gives exactly the same result as all of them.
double ring_lane_seconds(const RingHops& hops, const std::vector<double>& step_scales);

// The same, every position replayed: the reference ring_lane_seconds must equal (tests).
double ring_lane_seconds_every_position(const RingHops& hops, const std::vector<double>& step_scales);

}  // namespace tandem::sim
