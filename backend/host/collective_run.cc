#include "backend/host/collective_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

namespace tandem::host {

Signature Signature::of(const Schedule& schedule, const CollectiveSpec& spec, const RunContext& context) {
  size_t lanes = 0;
  for (const RankProgram& program : schedule.ranks) lanes = std::max(lanes, program.lanes.size());
  return Signature{.collective = schedule.collective,
                   .algorithm = schedule.algorithm,
                   .nranks = schedule.nranks,
                   .root = schedule.root,
                   .chunks_per_block = schedule.chunks_per_block,
                   .lanes = lanes,
                   .op_count = schedule.op_count(),
                   .count = spec.count,
                   .dtype = spec.dtype,
                   .op = spec.op,
                   .tiles = context.tiles,
                   .align_elements = context.align_elements};
}

std::string Signature::describe() const {
  return fmt::format(
      "{} ({}, {} ranks, root {}, count {}, {}, {}; {} chunks per block, {} lanes, {} ops; {} tiles, "
      "align {})",
      name(collective), name(algorithm), nranks, root, count, name(dtype), name(op), chunks_per_block, lanes, op_count,
      tiles, align_elements);
}

OpPosition WaitPoint::position(bool with_tile) const {
  return OpPosition{.tile = with_tile ? std::optional<uint32_t>(tile) : std::nullopt,
                    .lane = lane,
                    .op = op,
                    .kind = kind,
                    .peer = waits_on_message ? peer : -1};
}

CollectiveRun::CollectiveRun(uint64_t sequence, const Signature& signature)
    : sequence_(sequence),
      signature_(signature),
      lanes_per_rank_(signature.lanes),
      states_(static_cast<size_t>(signature.nranks), RankState::kAbsent),
      wait_points_(static_cast<size_t>(signature.nranks)) {
  inboxes_.reserve(static_cast<size_t>(signature.nranks));
  for (int rank = 0; rank < signature.nranks; ++rank) inboxes_.push_back(std::make_unique<Inbox>());
}

const Schedule& CollectiveRun::explicit_schedule(const Schedule& schedule) {
  if (!schedule.symmetric()) return schedule;
  std::call_once(expand_once_, [&] { expanded_ = expand(schedule); });
  return expanded_;
}

void CollectiveRun::arrive(int rank, const Signature& signature) {
  {
    std::lock_guard lock(status_mutex_);
    states_[static_cast<size_t>(rank)] = RankState::kRunning;
  }
  if (aborted()) throw_first_error();  // a straggler: the others have given up already
  if (signature == signature_) return;
  abort(fault_error({.kind = FaultReport::Kind::kDesync,
                     .backend = "host",
                     .rank = rank,
                     .note = fmt::format("desync in host collective #{}: rank {} called {}, but the first rank to "
                                         "arrive called {}",
                                         sequence_, rank, signature.describe(), signature_.describe())}));
  throw_first_error();
}

void CollectiveRun::finish(int rank) {
  std::lock_guard lock(status_mutex_);
  states_[static_cast<size_t>(rank)] = RankState::kFinished;
}

void CollectiveRun::fail(int rank, const Error& error) {
  {
    std::lock_guard lock(status_mutex_);
    states_[static_cast<size_t>(rank)] = RankState::kFailed;
  }
  abort(error);
}

void CollectiveRun::send(int src, int dst, int lane, Payload payload) {
  Inbox& box = inbox(dst);
  {
    std::lock_guard lock(box.mutex);
    Mailbox& mailbox = box.mailboxes[mailbox_key(src, lane)];
    if (mailbox.lost_fault != kNotLost) return;  // behind a lost message: never delivered
    mailbox.queue.push_back(std::move(payload));
    ++box.deliveries;
  }
  box.delivered.notify_one();  // only dst's thread waits on its inbox
}

void CollectiveRun::lose(int src, int dst, int lane, int fault_index) {
  Inbox& box = inbox(dst);
  std::lock_guard lock(box.mutex);
  int& lost = box.mailboxes[mailbox_key(src, lane)].lost_fault;
  if (lost == kNotLost) lost = fault_index;
}

int CollectiveRun::lost_fault(int src, int dst, int lane) {
  Inbox& box = inbox(dst);
  std::lock_guard lock(box.mutex);
  const auto found = box.mailboxes.find(mailbox_key(src, lane));
  return found == box.mailboxes.end() ? kNotLost : found->second.lost_fault;
}

bool CollectiveRun::try_receive(int src, int dst, int lane, Payload& payload) {
  Inbox& box = inbox(dst);
  std::lock_guard lock(box.mutex);
  const auto found = box.mailboxes.find(mailbox_key(src, lane));
  if (found == box.mailboxes.end() || found->second.queue.empty()) return false;
  payload = found->second.queue.pop_front();
  return true;
}

uint64_t CollectiveRun::deliveries(int rank) {
  Inbox& box = inbox(rank);
  std::lock_guard lock(box.mutex);
  return box.deliveries;
}

bool CollectiveRun::wait(int rank, uint64_t seen, Clock::time_point deadline, const WaitPoint& where) {
  {
    std::lock_guard lock(status_mutex_);
    states_[static_cast<size_t>(rank)] = RankState::kWaiting;
    wait_points_[static_cast<size_t>(rank)] = where;
  }
  bool woken;
  {
    Inbox& box = inbox(rank);
    std::unique_lock lock(box.mutex);
    woken = box.delivered.wait_until(lock, deadline, [&] { return box.deliveries != seen || aborted(); });
  }
  // A rank that timed out stays "waiting" where it was, for the other ranks' timeout messages.
  if (!woken) return false;
  std::lock_guard lock(status_mutex_);
  states_[static_cast<size_t>(rank)] = RankState::kRunning;
  return true;
}

void CollectiveRun::abort(const Error& error) {
  {
    std::lock_guard lock(status_mutex_);
    if (!first_error_) first_error_.emplace(error);
  }
  aborted_.store(true, std::memory_order_release);
  // Take each inbox lock before notifying: a rank between its predicate check and its sleep holds
  // that lock, so it either sees aborted() or is asleep and gets the notification.
  for (auto& box : inboxes_) {
    { std::lock_guard lock(box->mutex); }
    box->delivered.notify_all();
  }
}

void CollectiveRun::throw_first_error() {
  std::lock_guard lock(status_mutex_);
  if (!first_error_) throw Error(ErrorCode::kBackend, "host collective aborted without an error");
  throw *first_error_;
}

std::string CollectiveRun::describe_rank(int rank) {
  switch (states_[static_cast<size_t>(rank)]) {
    case RankState::kAbsent:
      return fmt::format("rank {} never arrived", rank);
    case RankState::kRunning:
      return fmt::format("rank {} is running", rank);
    case RankState::kWaiting:
      return fmt::format("rank {} waits on {}", rank,
                         wait_points_[static_cast<size_t>(rank)].position(signature_.tiles > 1).describe());
    case RankState::kFinished:
      return fmt::format("rank {} has finished", rank);
    case RankState::kFailed:
      return fmt::format("rank {} has failed", rank);
  }
  return fmt::format("rank {} is in an unknown state", rank);
}

FaultReport CollectiveRun::timeout_report(int rank, const WaitPoint& where, std::chrono::milliseconds timeout) {
  std::lock_guard lock(status_mutex_);
  const bool with_tile = signature_.tiles > 1;
  FaultReport report{.kind = FaultReport::Kind::kStalled,
                     .backend = "host",
                     .rank = rank,
                     .peer = where.waits_on_message ? where.peer : -1,
                     .at = where.position(with_tile),
                     .collective = signature_.collective,
                     .algorithm = signature_.algorithm,
                     .nranks = signature_.nranks,
                     .timeout_ms = timeout.count()};
  const auto waits_here = [&](int waiter, const WaitPoint& point) {
    report.rank = waiter;
    report.peer = point.waits_on_message ? point.peer : -1;
    report.at = point.position(with_tile);
  };
  for (int other = 0; other < signature_.nranks; ++other) {
    if (states_[static_cast<size_t>(other)] == RankState::kAbsent) report.absent.push_back(other);
  }
  if (!report.absent.empty()) {
    report.kind = FaultReport::Kind::kAbsent;
    // Prefer a rank that waits on a missing rank directly over this one, which may wait further
    // down a chain (in a ring, rank 0 waits on 7, which waits on 6, ..., on the missing 5).
    const auto is_absent = [&](int peer) {
      return std::find(report.absent.begin(), report.absent.end(), peer) != report.absent.end();
    };
    if (!(where.waits_on_message && is_absent(where.peer))) {
      for (int other = 0; other < signature_.nranks; ++other) {
        const WaitPoint& point = wait_points_[static_cast<size_t>(other)];
        if (states_[static_cast<size_t>(other)] == RankState::kWaiting && point.waits_on_message &&
            is_absent(point.peer)) {
          waits_here(other, point);
          break;
        }
      }
    }
    return report;
  }
  // Everyone arrived. A rank waiting on a message that was lost (this one first) names the fault's
  // victim and its sender, whatever rank times out first.
  const auto lost_on = [&](int waiter, const WaitPoint& point) {
    return point.waits_on_message ? lost_fault(point.peer, waiter, static_cast<int>(point.lane)) : kNotLost;
  };
  for (int other = -1; other < signature_.nranks; ++other) {
    const int waiter = other < 0 ? rank : other;
    if (other >= 0 && states_[static_cast<size_t>(other)] != RankState::kWaiting) continue;
    const WaitPoint& point = other < 0 ? where : wait_points_[static_cast<size_t>(other)];
    const int fault = lost_on(waiter, point);
    if (fault == kNotLost) continue;
    waits_here(waiter, point);
    report.kind = FaultReport::Kind::kLost;
    report.fault = fault;
    return report;
  }
  // Say where the awaited peer stands (a hang inside the collective).
  if (where.waits_on_message) report.note = describe_rank(where.peer);
  return report;
}

}  // namespace tandem::host
