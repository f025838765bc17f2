#include "sim/ring_lane.h"

#include <algorithm>

#include "core/error.h"

namespace tandem::sim {

size_t hop_period(const RingHops& hops) {
  const size_t n = hops.latency_s.size();
  for (size_t period = 1; period < n; ++period) {
    if (n % period != 0) continue;
    bool periodic = true;
    for (size_t p = period; p < n && periodic; ++p) {
      periodic = hops.latency_s[p] == hops.latency_s[p % period] && hops.transfer_s[p] == hops.transfer_s[p % period];
    }
    if (periodic) return period;
  }
  return n;
}

namespace {

// The recurrence of ring_lane.h over the first `positions` hops, position p sending to
// (p + offset) mod positions: with a period's hops, (p + offset) mod P may be p itself (its copy
// one period on).
double replay(const RingHops& hops, size_t positions, const std::vector<double>& step_scales) {
  std::vector<double> received(positions, 0.0), link_free(positions, 0.0), next(positions, 0.0);
  for (const double scale : step_scales) {
    for (size_t p = 0; p < positions; ++p) {
      const size_t q = (p + hops.offset) % positions;
      const double begin = std::max(received[p] + hops.latency_s[p], link_free[p]);
      next[q] = std::max(begin + hops.transfer_s[p] * scale, received[q]);
      link_free[p] = next[q];
    }
    received.swap(next);
  }
  return *std::max_element(received.begin(), received.end());
}

void check(const RingHops& hops) {
  const size_t n = hops.latency_s.size();
  if (n == 0 || hops.transfer_s.size() != n || hops.offset == 0 || hops.offset >= n) {
    fail(ErrorCode::kInvalidArgument, "ring lane: {} latencies, {} transfer times, offset {}", n,
         hops.transfer_s.size(), hops.offset);
  }
}

}  // namespace

double ring_lane_seconds_every_position(const RingHops& hops, const std::vector<double>& step_scales) {
  check(hops);
  return replay(hops, hops.latency_s.size(), step_scales);
}

double ring_lane_seconds(const RingHops& hops, const std::vector<double>& step_scales) {
  check(hops);
  // Position p's state is position (p mod P)'s at every step; with P dividing n, p + offset lands
  // on (p mod P + offset) mod P.
  return replay(hops, hop_period(hops), step_scales);
}

}  // namespace tandem::sim
