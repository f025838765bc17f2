// Direct algorithms: every rank talks to every peer in one step. Rank r visits its peers in the
// order r+1, r+2, ..., r-1 (mod n) so that in each step every rank sends to a different peer
// (a shifted permutation: no receiver is hit by two senders at once).
#include "core/algorithms/internal.h"
#include "core/error.h"

namespace tandem::algorithms {
namespace {

// Slot j of a buffer (every direct schedule has one chunk per block).
SlotRange slot(BufferKind buffer, int j) { return SlotRange{buffer, static_cast<uint32_t>(j), 1}; }

// Rank r's d-th peer, and the rank whose d-th peer r is.
int peer(int n, int r, int d) { return (r + d) % n; }
int from(int n, int r, int d) { return (r - d + n) % n; }

// Every rank sends `sent(r, to)` to every peer and receives each peer's into Out[from]; with
// `own_copy`, rank r first copies its own `sent(r, r)` into Out[r].
template <typename Sent>
void exchange(ScheduleBuilder& b, int n, bool own_copy, Sent sent) {
  for (int r = 0; r < n; ++r) {
    if (own_copy) b.copy(r, 0, sent(r, r), slot(kOut, r));
    for (int d = 1; d < n; ++d) {
      b.send(r, 0, peer(n, r, d), sent(r, peer(n, r, d)));
      b.recv(r, 0, from(n, r, d), slot(kOut, from(n, r, d)));
    }
  }
}

// Every rank sends In[to] to each peer `to` and sums what it receives into `owned(r)`, starting
// from its own In[r]: a direct reduce-scatter.
template <typename Owned>
void reduce_to_owners(ScheduleBuilder& b, int n, Owned owned) {
  for (int r = 0; r < n; ++r) {
    if (n == 1) b.copy(r, 0, slot(kIn, r), owned(r));
    for (int d = 1; d < n; ++d) {
      b.send(r, 0, peer(n, r, d), slot(kIn, peer(n, r, d)));
      b.recv_reduce(r, 0, from(n, r, d), d == 1 ? slot(kIn, r) : owned(r), owned(r));
    }
  }
}

}  // namespace

Schedule build_direct(const CollectiveSpec& spec, const RankLayout&, const AlgoParams& params) {
  const int n = spec.nranks;
  const int root = spec.root;
  // Two shots for all_reduce (chunk j reduced to rank j, then gathered from it); one chunk else.
  const uint32_t chunks = spec.collective == Collective::kAllReduce ? static_cast<uint32_t>(n) : 1;
  ScheduleBuilder b(spec.collective, Algorithm::kDirect, n, root, chunks, params);
  switch (spec.collective) {
    case Collective::kAllToAll: exchange(b, n, true, [](int, int to) { return slot(kIn, to); }); break;
    case Collective::kAllGather: exchange(b, n, true, [](int, int) { return slot(kIn, 0); }); break;
    case Collective::kReduceScatter:  // own contribution first, then every peer's to this rank's block
      reduce_to_owners(b, n, [](int) { return slot(kOut, 0); });
      break;
    case Collective::kAllReduce:
      reduce_to_owners(b, n, [](int r) { return slot(kOut, r); });
      exchange(b, n, false, [](int r, int) { return slot(kOut, r); });
      break;
    case Collective::kBroadcast:
      b.copy(root, 0, slot(kIn, 0), slot(kOut, 0));
      for (int d = 1; d < n; ++d) b.transfer(0, root, slot(kIn, 0), peer(n, root, d), slot(kOut, 0));
      break;
    case Collective::kReduce:
      if (n == 1) b.copy(root, 0, slot(kIn, 0), slot(kOut, 0));
      for (int d = 1; d < n; ++d) {
        b.transfer_reduce(0, peer(n, root, d), slot(kIn, 0), root, d == 1 ? slot(kIn, 0) : slot(kOut, 0),
                          slot(kOut, 0));
      }
      break;
    case Collective::kSendRecv:  // every rank sends its buffer to rank+1 (alone, to itself: a copy)
      for (int r = 0; r < n; ++r) {
        if (n == 1) {
          b.copy(r, 0, slot(kIn, 0), slot(kOut, 0));
        } else {
          b.send(r, 0, peer(n, r, 1), slot(kIn, 0));
          b.recv(r, 0, from(n, r, 1), slot(kOut, 0));
        }
      }
      break;
    default:
      fail(ErrorCode::kUnsupported, "direct does not implement {}", name(spec.collective));
  }
  return std::move(b).finish();
}

}  // namespace tandem::algorithms
