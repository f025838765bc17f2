// The host backend: every rank is a CPU thread with real buffers and real reductions. It is the
// reference for correctness and gives real concurrency (a real hang, a real timeout).
//
// How it runs a schedule (core/schedule.h has the semantics):
//   - Transport: one FIFO mailbox per (src, dst, lane). A Send is eager: it copies its chunks into
//     a message and completes. A Recv / RecvReduce waits for the head message of its mailbox.
//   - Lanes: a rank's lanes run concurrently inside the rank's one thread. A progress loop issues
//     each lane's next op once its deps are done (and, for a recv, its message is there), and
//     sleeps on the rank's condition variable when nothing can progress. No busy waiting.
//   - Tiles: the rank runs the whole program once per tile of RunContext::tiles, tile after tile;
//     message order on every (src, dst, lane) is then the same on both sides.
//   - Elements: chunks map to elements through ChunkMap(count, chunks_per_block, tiles, align).
//     Input / Output chunk c is sub-chunk c % k of block c / k (blocks are `count` elements);
//     scratch slot s holds sub-chunk s % k of the current tile (scratch is owned by the backend,
//     scratch_chunks * max_chunk_elements per rank).
//   - In place: callers pass aliased pointers (core/executor.h); a Copy onto the same memory is a
//     no-op, overlapping copies use memmove.
//   - kAvg: after its last op a rank divides its reduced output by nranks (all_reduce and
//     reduce_scatter: every rank; reduce: the root only).
//   - Errors: a rank that waits longer than RunContext::timeout without progress fails with
//     Error(kTimeout) naming the ranks that never arrived, else a rank waiting on a message the
//     fault hook stalled (lost, with the later messages of its connection) and its sender; any
//     error in one rank stops the others
//     promptly, and every rank of that collective throws the first error.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/executor.h"

namespace tandem {

namespace host {
class CollectiveRun;
class RankThreads;
struct Signature;
}  // namespace host

// A group of `nranks` ranks whose threads belong to the caller. Each rank calls run_rank() from its
// own thread, once per collective, in the same collective order on every rank (the k-th call of
// each rank joins the k-th collective). Thread-safe; a rank must not run two collectives at once.
class HostWorld {
 public:
  explicit HostWorld(int nranks);
  ~HostWorld();
  HostWorld(const HostWorld&) = delete;
  HostWorld& operator=(const HostWorld&) = delete;

  int nranks() const { return nranks_; }

  // Runs `rank`'s part of `schedule` (validated) on `buffers` and returns once this rank is done.
  // Every rank must pass an equal schedule, spec and context; a mismatch fails the collective
  // (Error(kBackend), a desync). Throws Error(kTimeout) when a peer never arrives or stops sending
  // for longer than context.timeout, and the first error of any rank of the collective otherwise.
  // RunResult::seconds is this rank's wall time in the collective.
  RunResult run_rank(int rank, const Schedule& schedule, const CollectiveSpec& spec, const RankBuffers& buffers,
                     const RunContext& context);

 private:
  struct ActiveRun {
    uint64_t sequence = 0;
    std::shared_ptr<host::CollectiveRun> run;
    int ranks_left = 0;
  };

  // Finds or creates the run of `rank`'s next collective and returns it with its sequence number.
  std::shared_ptr<host::CollectiveRun> join(int rank, const host::Signature& signature, uint64_t& sequence);
  void leave(int rank, uint64_t sequence);

  const int nranks_;
  std::mutex mutex_;
  std::vector<uint64_t> next_sequence_;  // per rank: the collective its next run_rank joins
  std::vector<bool> busy_;               // per rank: inside run_rank
  // Collectives some rank has joined and not every rank has left (a rank that never arrives keeps
  // its collective here, so that it fails at once with the first error when it finally does).
  std::vector<ActiveRun> runs_;
};

// The most schedule ops one host run takes on. Every op is a message through a rank thread's
// mailbox or a local copy: measured 6.5 us an op on 2 cores (a 1,024-rank all_to_all, 2.1 M ops,
// 13.5 s a run), so this is about a minute a run, and a bench sweep runs it (warmup + iters) x 2.
// Above it the executor refuses the schedule, and `tandem bench --backend host` refuses up front
// from an estimate (core/algorithms.h estimate_schedule_ops) before building anything.
inline constexpr int64_t kMaxHostOpsPerRun = int64_t{1} << 23;

// "the host backend would run 16,773,120 ops ... above its limit": the one-line refusal.
[[noreturn]] void refuse_host_ops(int64_t ops, Collective collective, int nranks, bool estimated);

// Runs a whole collective: one thread per rank, each calling HostWorld::run_rank. The rank
// threads are kept between runs (rank 0 runs on the caller's thread); concurrent run() calls on
// one executor run one after the other.
class HostExecutor : public Executor {
 public:
  HostExecutor();
  ~HostExecutor() override;

  std::string name() const override { return "host"; }
  // Rethrows the first error of any rank. RunResult::seconds is the wall time of the collective.
  RunResult run(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                const RunContext& context) override;

 private:
  std::unique_ptr<host::RankThreads> threads_;
};

}  // namespace tandem
