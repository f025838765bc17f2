// Direct algorithms: every rank talks to every peer in one step. Rank r visits its peers in the
// order r+1, r+2, ..., r-1 (mod n) so that in each step every rank sends to a different peer
// (a shifted permutation: no receiver is hit by two senders at once).
#include "core/algorithms/internal.h"
#include "core/error.h"

namespace tandem::algorithms {

Schedule build_direct(const CollectiveSpec& spec, const RankLayout&, const AlgoParams& params) {
  const int n = spec.nranks;
  const auto un = static_cast<uint32_t>(n);
  constexpr auto kIn = BufferKind::kInput;
  constexpr auto kOut = BufferKind::kOutput;
  auto peer = [n](int r, int d) { return (r + d) % n; };
  auto from = [n](int r, int d) { return (r - d + n) % n; };
  auto block = [](BufferKind buffer, int b, uint32_t k) { return SlotRange{buffer, static_cast<uint32_t>(b) * k, k}; };

  switch (spec.collective) {
    case Collective::kAllToAll: {
      ScheduleBuilder b(spec.collective, Algorithm::kDirect, n, spec.root, 1, params);
      for (int r = 0; r < n; ++r) {
        b.copy(r, 0, block(kIn, r, 1), block(kOut, r, 1));
        for (int d = 1; d < n; ++d) {
          b.send(r, 0, peer(r, d), block(kIn, peer(r, d), 1));
          b.recv(r, 0, from(r, d), block(kOut, from(r, d), 1));
        }
      }
      return std::move(b).finish();
    }
    case Collective::kAllGather: {
      ScheduleBuilder b(spec.collective, Algorithm::kDirect, n, spec.root, 1, params);
      for (int r = 0; r < n; ++r) {
        b.copy(r, 0, block(kIn, 0, 1), block(kOut, r, 1));
        for (int d = 1; d < n; ++d) {
          b.send(r, 0, peer(r, d), block(kIn, 0, 1));
          b.recv(r, 0, from(r, d), block(kOut, from(r, d), 1));
        }
      }
      return std::move(b).finish();
    }
    case Collective::kReduceScatter: {
      // Own contribution first, then every peer's contribution to this rank's block.
      ScheduleBuilder b(spec.collective, Algorithm::kDirect, n, spec.root, 1, params);
      for (int r = 0; r < n; ++r) {
        if (n == 1) b.copy(r, 0, block(kIn, r, 1), block(kOut, 0, 1));
        for (int d = 1; d < n; ++d) {
          b.send(r, 0, peer(r, d), block(kIn, peer(r, d), 1));
          b.recv_reduce(r, 0, from(r, d), d == 1 ? block(kIn, r, 1) : block(kOut, 0, 1), block(kOut, 0, 1));
        }
      }
      return std::move(b).finish();
    }
    case Collective::kAllReduce: {
      // Two shots: a direct reduce-scatter of chunk j to rank j, then a direct all-gather of it.
      ScheduleBuilder b(spec.collective, Algorithm::kDirect, n, spec.root, un, params);
      auto chunk = [](BufferKind buffer, int j) { return SlotRange{buffer, static_cast<uint32_t>(j), 1}; };
      for (int r = 0; r < n; ++r) {
        if (n == 1) b.copy(r, 0, chunk(kIn, 0), chunk(kOut, 0));
        for (int d = 1; d < n; ++d) {
          b.send(r, 0, peer(r, d), chunk(kIn, peer(r, d)));
          b.recv_reduce(r, 0, from(r, d), d == 1 ? chunk(kIn, r) : chunk(kOut, r), chunk(kOut, r));
        }
      }
      for (int r = 0; r < n; ++r) {
        for (int d = 1; d < n; ++d) {
          b.send(r, 0, peer(r, d), chunk(kOut, r));
          b.recv(r, 0, from(r, d), chunk(kOut, from(r, d)));
        }
      }
      return std::move(b).finish();
    }
    case Collective::kBroadcast: {
      ScheduleBuilder b(spec.collective, Algorithm::kDirect, n, spec.root, 1, params);
      b.copy(spec.root, 0, block(kIn, 0, 1), block(kOut, 0, 1));
      for (int d = 1; d < n; ++d) b.transfer(0, spec.root, block(kIn, 0, 1), peer(spec.root, d), block(kOut, 0, 1));
      return std::move(b).finish();
    }
    case Collective::kReduce: {
      ScheduleBuilder b(spec.collective, Algorithm::kDirect, n, spec.root, 1, params);
      if (n == 1) b.copy(spec.root, 0, block(kIn, 0, 1), block(kOut, 0, 1));
      for (int d = 1; d < n; ++d) {
        b.transfer_reduce(0, peer(spec.root, d), block(kIn, 0, 1), spec.root,
                          d == 1 ? block(kIn, 0, 1) : block(kOut, 0, 1), block(kOut, 0, 1));
      }
      return std::move(b).finish();
    }
    case Collective::kSendRecv: {
      // Every rank sends its buffer to rank+1 (with one rank, to itself: a copy).
      ScheduleBuilder b(spec.collective, Algorithm::kDirect, n, spec.root, 1, params);
      for (int r = 0; r < n; ++r) {
        if (n == 1) {
          b.copy(r, 0, block(kIn, 0, 1), block(kOut, 0, 1));
        } else {
          b.send(r, 0, peer(r, 1), block(kIn, 0, 1));
          b.recv(r, 0, from(r, 1), block(kOut, 0, 1));
        }
      }
      return std::move(b).finish();
    }
  }
  fail(ErrorCode::kUnsupported, "direct does not implement {}", name(spec.collective));
}

}  // namespace tandem::algorithms
