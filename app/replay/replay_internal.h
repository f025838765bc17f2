// The pieces of `tandem replay` (replay.h) that its files share: the phases' progress line, the
// dumps read into ops (Built), the logical replay (Replayed), the blocked ops, the simulated timings
// and the replayed clock. The files: replay.cc (replay(): the phases in order, and the completed ops
// on the replayed clock), replay_dumps.cc (the dumps checked and read into ops), replay_logic.cc
// (which ops run, in what order, and where the ranks stop agreeing), replay_timing.cc (the ops
// simulated in child processes), replay_verdict.cc (why each blocked op never ran, and the verdict)
// and replay_recovery.cc (what each recovery policy would have done there); replay_report.cc writes
// the reports from replay.h alone. Not a public header: only those files include it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "app/replay/replay.h"
#include "core/flight_recorder.h"
#include "sim/collective_timer.h"

namespace tandem::app::replay_detail {

// Reports a phase's progress through ReplayOptions::progress: at its start, at its end, and in
// between at most every kProgressInterval (a terminal redraw per dump would cost more than the
// line is worth at 16,384 dumps).
constexpr auto kProgressInterval = std::chrono::milliseconds(100);
class PhaseProgress {
 public:
  PhaseProgress(const ReplayOptions& options, std::string_view phase, size_t total)
      : report_(options.progress), phase_(phase), total_(total), last_(std::chrono::steady_clock::now()) {
    if (report_) report_(phase_, 0, total_);
  }
  void step(size_t done) {
    if (!report_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done == total_ || now - last_ >= kProgressInterval) {
      report_(phase_, done, total_);
      last_ = now;
    }
  }

 private:
  const std::function<void(std::string_view, size_t, size_t)>& report_;
  std::string_view phase_;
  size_t total_;
  std::chrono::steady_clock::time_point last_;
};

// Group memberships, interned: every dump declares its groups with their whole rank lists (the
// default group's 16,384 ranks in each of 16,384 dumps), so a list is sorted and compared once per
// distinct list, not once per dump, per member or per entry (which made the checks and the op index
// cubic in the ranks: nothing within minutes at 4,096 ranks).
class Memberships {
 public:
  // The id of `ranks`' membership: lists of the same ranks share one, in any order.
  size_t id(const std::vector<int>& ranks) {
    auto found = by_list_.find(ranks);
    if (found != by_list_.end()) return found->second;
    std::vector<int> members = ranks;
    std::sort(members.begin(), members.end());
    auto [it, inserted] = by_members_.try_emplace(members, sorted_.size());
    if (inserted) sorted_.push_back(std::move(members));
    by_list_.emplace(ranks, it->second);
    return it->second;
  }
  const std::vector<int>& sorted(size_t id) const { return sorted_[id]; }

 private:
  struct ListHash {
    size_t operator()(const std::vector<int>& list) const {
      return std::hash<std::string_view>()(
          std::string_view(reinterpret_cast<const char*>(list.data()), list.size() * sizeof(int)));
    }
  };
  std::unordered_map<std::vector<int>, size_t, ListHash> by_list_;  // as declared -> id
  std::map<std::vector<int>, size_t> by_members_;                   // sorted -> id
  std::vector<std::vector<int>> sorted_;
};

// One rank's record of an op: its entries (a coalesced group's several, its marker last).
struct RankOp {
  size_t op = 0;  // index into the ops
  std::vector<const FrEntry*> entries;
};

// The dumps read into ops (replay_dumps.cc's build_ops, then describe_ops; OpKey is there too).
struct Built {
  std::vector<ReplayOp> ops;
  std::vector<std::vector<RankOp>> per_rank;  // per dump (rank order): its ops in record order
  std::vector<std::vector<int64_t>> gaps_ns;  // per dump: recorded time before each of its ops
  std::vector<int> rank_of;                   // per dump: its rank
  std::map<int, size_t> dump_of;              // rank -> dump index
  std::map<std::pair<std::string, size_t>, size_t> group_ids;  // (name, membership) -> OpKey::group
  std::vector<size_t> group_of;               // per op: its OpKey::group
  std::vector<std::pair<int, int>> p2p_pair;  // per op: its OpKey's (sender, receiver); (-1, -1) for a collective
  // Per dump and (group, stream): the oldest sequence number its ring buffer still holds (older
  // ops are unknown for that rank, not missing), when the buffer wrapped.
  std::vector<std::map<std::pair<size_t, bool>, int64_t>> oldest;
  std::vector<bool> truncated;
};

using Signatures = std::vector<std::vector<uint32_t>>;  // per dump: each of its ops' signature(), interned

// The logical replay (replay_logic.cc): which ops ran, in what order, and where each rank stopped.
struct Replayed {
  std::vector<size_t> order;                 // completed ops in the order they became ready
  std::vector<std::vector<size_t>> arrived;  // per op: dump indices that reached it (in order)
  std::vector<size_t> position;              // per dump: index of its next op (== size: done)
};

// Where the ranks stop agreeing: ops some dumps reached but that never ran.
struct Blocked {
  std::vector<size_t> ops;         // ops a rank is stuck at, in the order of the first dump in each
  std::map<size_t, size_t> op_of;  // dump -> the op it waits in
};

// A blocked op: who waits in it, who never came, who is to blame, and who would go on without them.
struct BlockedInfo {
  size_t op;
  std::vector<int> missing, waiting, culprits;
  std::vector<int> survivors;  // its ranks less the culprits and the missing
};

// The simulated timings of ops on sets of ranks, as the replay asked for them.
struct Timings {
  std::map<std::pair<size_t, std::vector<int>>, size_t> index;  // (op, ranks) -> timings
  std::vector<sim::CollectiveTiming> timings;
  std::optional<sim::CollectiveTiming> find(size_t op, const std::vector<int>& ranks) const {
    auto it = index.find({op, ranks});
    if (it == index.end()) return std::nullopt;
    return timings[it->second];
  }
  // Gives `o` (op `op`) its timing on its ranks, where the replay asked for one: the predicted
  // time, the algorithm and the bus bandwidth.
  void predict(size_t op, ReplayOp& o) const;
};

// The replayed clock, per dump: when its rank is free again and the index of its next op. A rank
// reaches its next op when it is free plus the time it recorded before that op.
struct RankClock {
  explicit RankClock(const Built& ops) : built(ops), free_at(ops.per_rank.size(), 0.0), next(ops.per_rank.size(), 0) {}
  double arrival(size_t d) const { return free_at[d] + static_cast<double>(built.gaps_ns[d][next[d]]) / 1e9; }
  // When the last of `dumps` reaches its next op: where an op they all take part in starts.
  double last_arrival(const std::vector<size_t>& dumps) const {
    double at = 0;
    for (size_t d : dumps) at = std::max(at, arrival(d));
    return at;
  }
  const Built& built;
  std::vector<double> free_at;
  std::vector<size_t> next;
};

// replay_dumps.cc
const std::vector<FrDump>& sorted_and_checked(const std::vector<FrDump>& input, std::vector<FrDump>& sorted,
                                              Memberships& memberships);
Built build_ops(const std::vector<FrDump>& dumps, Memberships& memberships, bool recorded_gaps,
                PhaseProgress& progress);
void describe_ops(Built& built, int gpus);
Signatures signatures_of(const Built& built, PhaseProgress& progress);
double median(std::vector<double> values);

// replay_logic.cc
Replayed replay_logic(const Built& built, const Signatures& signatures, PhaseProgress& progress);
bool ops_differ(const Signatures& signatures, const std::vector<size_t>& dumps, const std::vector<size_t>& next);
Blocked find_blocked(const Built& built, const Replayed& logic);
std::vector<BlockedInfo> describe_blocked(Built& built, const Replayed& logic, const Blocked& blocked);

// replay_timing.cc
Timings time_ops(const ReplayOptions& options, const std::vector<ReplayOp>& ops, const Replayed& logic,
                 const std::vector<BlockedInfo>& infos);

// replay_verdict.cc
void judge_blocked(Built& built, const Replayed& logic, const Signatures& signatures, const Timings& timings,
                   const RankClock& clock, BlockedInfo& info);
void judge_replay(const std::vector<FrDump>& dumps, const Built& built, const Replayed& logic, const Timings& timings,
                  const RankClock& clock, std::vector<BlockedInfo>& infos, const ReplayOptions& options,
                  ReplayResult& result);

// replay_recovery.cc
std::vector<ReplayRecovery> recoveries_at(const std::vector<FrDump>& dumps, const Built& built, const Replayed& logic,
                                          const RankClock& clock, const Timings& timings, const BlockedInfo& first,
                                          const ReplayOptions& options, int job_ranks);

}  // namespace tandem::app::replay_detail
