// sim/ring_lane.h: replaying one period of periodic hops gives exactly what replaying every
// position gives, and hops that are not periodic are replayed whole.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "sim/ring_lane.h"

namespace tandem::sim {
namespace {

// `n` hops repeating every `period` positions: distinct latencies and transfer times inside a
// period (an NVLink hop, a rail hop, ...), so that a wrong fold would show.
RingHops periodic_hops(size_t n, size_t period, size_t offset) {
  RingHops hops;
  hops.offset = offset;
  for (size_t p = 0; p < n; ++p) {
    const size_t k = p % period;
    hops.latency_s.push_back(1e-6 * static_cast<double>(1 + (k * 7) % 5));
    hops.transfer_s.push_back(1e-5 * static_cast<double>(3 + (k * 3) % 11) / 3.0);
  }
  return hops;
}

// A ring all_reduce's 2(n - 1) steps per tile over `tiles` tiles, the last step of each tile a
// smaller message (an uneven partition).
std::vector<double> steps(size_t n, int tiles) {
  std::vector<double> scales;
  for (int t = 0; t < tiles; ++t) {
    for (size_t s = 0; s < 2 * (n - 1); ++s) scales.push_back(s + 1 == 2 * (n - 1) ? 0.75 : 1.0);
  }
  return scales;
}

TEST(RingLane, PeriodIsTheSmallestDivisorThatRepeats) {
  EXPECT_EQ(hop_period(periodic_hops(64, 8, 1)), 8u);
  EXPECT_EQ(hop_period(periodic_hops(64, 1, 1)), 1u);
  EXPECT_EQ(hop_period(periodic_hops(64, 64, 1)), 64u);
  // 6 does not divide 64: no period short of the whole ring.
  EXPECT_EQ(hop_period(periodic_hops(64, 6, 1)), 64u);
  RingHops one_slow_hop = periodic_hops(64, 8, 1);
  one_slow_hop.latency_s[63] *= 2;  // the ring's wrap-around crosses a spine
  EXPECT_EQ(hop_period(one_slow_hop), 64u);
  RingHops slow_transfer = periodic_hops(64, 8, 1);
  slow_transfer.transfer_s[8] *= 1.5;
  EXPECT_EQ(hop_period(slow_transfer), 64u);
}

TEST(RingLane, OnePeriodGivesExactlyWhatEveryPositionGives) {
  // Rank counts with and without small periods, offsets that are and are not multiples of the
  // period (NCCL's channel rings send to +1; others to further positions), one and several tiles.
  struct Case {
    size_t n, period, offset;
    int tiles;
  };
  for (const Case c :
       {Case{2, 1, 1, 1}, Case{8, 8, 1, 1}, Case{64, 8, 1, 1}, Case{64, 8, 8, 2}, Case{64, 8, 3, 3}, Case{64, 1, 1, 2},
        Case{64, 16, 63, 1}, Case{96, 24, 5, 2}, Case{256, 16, 1, 4}, Case{60, 6, 7, 1}}) {
    const RingHops hops = periodic_hops(c.n, c.period, c.offset);
    const std::vector<double> scales = steps(c.n, c.tiles);
    const double every = ring_lane_seconds_every_position(hops, scales);
    EXPECT_GT(every, 0.0);
    EXPECT_EQ(ring_lane_seconds(hops, scales), every)
        << c.n << " positions, period " << c.period << ", offset " << c.offset << ", " << c.tiles << " tiles";
  }
  // Not periodic: replayed whole, the same.
  RingHops wrap = periodic_hops(64, 8, 1);
  wrap.latency_s[63] *= 4;
  EXPECT_EQ(ring_lane_seconds(wrap, steps(64, 2)), ring_lane_seconds_every_position(wrap, steps(64, 2)));
}

TEST(RingLane, AloneHopsGiveTheAlphaBetaTime) {
  // Every hop alike: 2(n - 1) steps of latency + transfer each.
  RingHops hops = periodic_hops(16, 1, 1);
  const double step_s = hops.latency_s[0] + hops.transfer_s[0];
  std::vector<double> scales(2 * 15, 1.0);
  EXPECT_NEAR(ring_lane_seconds(hops, scales), 30 * step_s, 1e-15);
}

TEST(RingLane, RejectsMalformedHops) {
  RingHops hops = periodic_hops(8, 8, 1);
  hops.offset = 8;
  EXPECT_THROW(ring_lane_seconds(hops, {1.0}), Error);
  hops.offset = 0;
  EXPECT_THROW(ring_lane_seconds(hops, {1.0}), Error);
  hops = periodic_hops(8, 8, 1);
  hops.transfer_s.pop_back();
  EXPECT_THROW(ring_lane_seconds_every_position(hops, {1.0}), Error);
  EXPECT_THROW(ring_lane_seconds(RingHops{}, {1.0}), Error);
}

}  // namespace
}  // namespace tandem::sim
