// The state the ranks of one host collective share: the FIFO mailboxes, who has arrived, where
// each rank waits, and the first error. Internal to backend/host.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/executor.h"
#include "core/fault_report.h"
#include "core/fifo.h"

namespace tandem::host {

using Clock = std::chrono::steady_clock;

// A message: the bytes of a Send's chunks, packed in chunk order. Not zero-initialised (it is
// overwritten right away), which matters for megabyte chunks.
struct Payload {
  std::unique_ptr<std::byte[]> data;
  size_t bytes = 0;
  uint64_t checksum = 0;  // of the bytes as sent, when RunContext::checksums is on

  static Payload of_size(size_t bytes) { return {std::make_unique_for_overwrite<std::byte[]>(bytes), bytes}; }
};

// What every rank of a collective must agree on; a mismatch is a desync.
struct Signature {
  Collective collective = Collective::kAllReduce;
  Algorithm algorithm = Algorithm::kRing;
  int nranks = 0;
  int root = 0;
  uint32_t chunks_per_block = 0;
  size_t lanes = 0;  // the most lanes of any rank
  size_t op_count = 0;
  int64_t count = 0;
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  uint32_t tiles = 1;
  int64_t align_elements = 1;

  static Signature of(const Schedule& schedule, const CollectiveSpec& spec, const RunContext& context);
  bool operator==(const Signature&) const = default;
  std::string describe() const;  // "all_reduce (ring, count 1001, f32, sum, root 0, 1 tile, align 1)"
};

// The op a rank is blocked on, for timeout messages.
struct WaitPoint {
  uint32_t tile = 0;
  uint32_t lane = 0;
  uint32_t op = 0;
  OpKind kind = OpKind::kRecv;
  int peer = -1;
  bool waits_on_message = false;  // false: blocked on a dependency of another lane

  OpPosition position(bool with_tile) const;
};

class CollectiveRun {
 public:
  CollectiveRun(uint64_t sequence, const Signature& signature);

  const Signature& signature() const { return signature_; }
  // `schedule` in explicit form: a rank-symmetric schedule is expanded once per run, for all ranks.
  const Schedule& explicit_schedule(const Schedule& schedule);

  // Arrival and departure, for the timeout message. arrive() throws the desync error (after
  // aborting the run) when `signature` differs from the run's.
  void arrive(int rank, const Signature& signature);
  void finish(int rank);
  // `rank` failed with this error: records it (when it is the first) and aborts the run.
  void fail(int rank, const Error& error);

  // Eager send: queues `payload` on (src, dst, lane) and wakes dst.
  void send(int src, int dst, int lane, Payload payload);
  // A stalled transfer (TransferEffect::stall, fault `fault_index`): the message is lost, and so is
  // every later one on (src, dst, lane), which would queue behind it (per-connection FIFO).
  void lose(int src, int dst, int lane, int fault_index);
  // Pops the head message of (src, dst, lane) into `payload`; false when the mailbox is empty.
  bool try_receive(int src, int dst, int lane, Payload& payload);

  // Messages delivered to `rank` so far. A rank reads this before scanning its lanes and passes
  // it to wait(), so a message that lands during the scan is never missed.
  uint64_t deliveries(int rank);
  // Blocks `rank` until a message is delivered after `seen`, the run aborts, or `deadline`.
  // Returns false on the deadline. `where` is published for other ranks' timeout messages.
  bool wait(int rank, uint64_t seen, Clock::time_point deadline, const WaitPoint& where);

  // Records the first error (later ones are dropped) and wakes every rank.
  void abort(const Error& error);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // Throws the first error. Requires aborted().
  [[noreturn]] void throw_first_error();

  // The timeout of `rank`, blocked at `where` after `timeout`: the ranks that never arrived, else a
  // rank waiting on a lost message and its sender (kLost, with the fault), else where the awaited
  // peer stands.
  FaultReport timeout_report(int rank, const WaitPoint& where, std::chrono::milliseconds timeout);

 private:
  enum class RankState : uint8_t { kAbsent, kRunning, kWaiting, kFinished, kFailed };

  static constexpr int kNotLost = -2;
  // One connection (src, lane) into a rank: its FIFO (core/fifo.h: all_to_all has a mailbox per
  // pair of ranks) and the fault that lost a message on it.
  struct Mailbox {
    Fifo<Payload> queue;
    int lost_fault = kNotLost;
  };
  // Mailboxes exist only for the connections a schedule uses, created at their first message:
  // a dense nranks x lanes table of deques per rank cost 4 MB a rank at 1,024 ranks.
  struct Inbox {
    std::mutex mutex;
    std::condition_variable delivered;
    uint64_t deliveries = 0;
    std::unordered_map<uint64_t, Mailbox> mailboxes;  // by src * lanes_per_rank + lane
  };

  Inbox& inbox(int rank) { return *inboxes_[static_cast<size_t>(rank)]; }
  uint64_t mailbox_key(int src, int lane) const {
    return static_cast<uint64_t>(src) * lanes_per_rank_ + static_cast<uint64_t>(lane);
  }
  std::string describe_rank(int rank);  // requires status_mutex_
  int lost_fault(int src, int dst, int lane);  // kNotLost when nothing was lost there

  const uint64_t sequence_;
  const Signature signature_;
  const size_t lanes_per_rank_;
  std::vector<std::unique_ptr<Inbox>> inboxes_;

  std::once_flag expand_once_;
  Schedule expanded_;

  std::atomic<bool> aborted_{false};
  std::mutex status_mutex_;  // guards everything below
  std::vector<RankState> states_;
  std::vector<WaitPoint> wait_points_;
  std::optional<Error> first_error_;
};

}  // namespace tandem::host
