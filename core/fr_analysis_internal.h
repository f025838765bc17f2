// The pieces of the flight-recorder analysis that its files share (fr_groups.cc gathers the dumps
// into groups, fr_collectives.cc checks the collectives, fr_p2p.cc matches point-to-point
// operations, fr_waits.cc follows who waits on whom to the root cause, fr_analysis.cc writes the
// verdict). Not a public header: only core/fr_*.cc include it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "core/fr_analysis.h"
#include "core/flight_recorder.h"

namespace tandem::fr_detail {

struct Unit {
  int64_t seq = 0;
  std::span<const FrEntry* const> entries;  // in record order; a coalesced group ends in its marker
};

// One rank's units of one stream in one group, ascending by sequence number. The units view slices
// of `entries` (one allocation per track, not per unit: a 1,024-rank job has millions of units).
struct Track {
  std::vector<const FrEntry*> entries;  // stable-sorted by sequence number
  std::vector<Unit> units;

  const Unit* find(int64_t seq) const {
    auto it = std::lower_bound(units.begin(), units.end(), seq, [](const Unit& u, int64_t s) { return u.seq < s; });
    return it != units.end() && it->seq == seq ? &*it : nullptr;
  }
};

// Which of a group's two sequence counters a rank's pg_status counts. PyTorch sets
// last_enqueued_collective to the sequence number of the last work enqueued, a collective's
// collective_seq_id or a p2p op's p2p_seq_id, whichever came last (and last_completed likewise).
enum class StatusStream : uint8_t { kUnknown, kCollectives, kP2p };

struct Member {
  int rank = 0;
  // The dump holds less than the rank's whole history: its ring wrapped (the oldest record is not
  // record 0), or it holds only the entries that had not completed (PyTorch's only-active dumps:
  // record ids with gaps). An absent entry may then have completed rather than never been issued.
  bool partial_history = false;
  Track collectives;
  Track p2p;
  // The rank's pg_status for the group, where the dump has one it could match.
  bool has_status = false;
  int64_t last_enqueued = -1;
  int64_t last_completed = -1;
  StatusStream status_stream = StatusStream::kUnknown;
};

// Whether a member recorded a sequence number of a stream (kPresent), issued it and no longer holds
// it, so it completed (kDone: pg_status says it was enqueued, or a later one is held in a dump that
// keeps only what has not completed), is known never to have issued it (kMissing), or cannot be
// judged (kUnknown: older than a wrapped ring's oldest entry).
enum class Presence : uint8_t { kPresent, kDone, kMissing, kUnknown };

struct GroupKey {
  std::string name;
  std::vector<int> ranks;  // sorted

  // Numeric names in numeric order ("2" before "10"), then other names; then membership.
  bool operator<(const GroupKey& other) const {
    auto numeric = [](const std::string& s) {
      return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    const auto order = [&](const GroupKey& k) {
      return std::make_tuple(!numeric(k.name), numeric(k.name) ? k.name.size() : 0, std::cref(k.name),
                             std::cref(k.ranks));
    };
    return order(*this) < order(other);
  }
};

struct Group {
  GroupKey key;
  std::string desc;
  std::string label;            // "group 0 (default_pg)"
  std::vector<Member> members;  // member ranks with a dump, ascending
  std::vector<int> missing_dumps;

  const Member* member(int rank) const {
    auto it = std::lower_bound(members.begin(), members.end(), rank, [](const Member& m, int r) { return m.rank < r; });
    return it != members.end() && it->rank == rank ? &*it : nullptr;
  }
};

struct Place {
  const Group* group = nullptr;
  int64_t seq = 0;
  bool p2p = false;

  std::string sequence() const;  // "#12" or "p2p #3"
};

// One present rank's unit at a sequence number.
struct Holder {
  int rank = 0;
  const Unit* unit = nullptr;
};

// `waiter` cannot go on until `waited_on` joins an operation: the edges the root cause follows.
struct WaitEdge {
  int waiter = 0;
  int waited_on = 0;
  std::string where;  // "nccl:all_reduce #12 of group 0 (default_pg)"
};

// What checking one stream of one group found: the first divergence and when it began (to order
// the streams), how many units matched, and who waits on whom.
struct StreamResult {
  std::optional<FrFinding> finding;
  int64_t finding_time_ns = 0;
  // A rank whose GPU never finished work its peers completed (a state finding) does not end the
  // walk: the first missing rank after it is what the others wait for.
  std::optional<FrFinding> stall;
  int64_t stall_time_ns = 0;
  int64_t matched = 0;
  std::vector<WaitEdge> waits;
};

// Text shared by the findings.
std::string sizes_text(const std::vector<std::vector<int64_t>>& sizes);  // [[3, 4], [8]]
std::string dtype_text(const FrEntry& op);
std::vector<int> ranks_of(const std::vector<Holder>& holders);

FrFinding make_finding(FrFindingKind kind, const Place& place, std::string collective, std::vector<int> culprits,
                       std::string detail);
// "rank 5 never joined nccl:all_reduce #12 of group 0 (default_pg): ranks 0-4, 6-7 are waiting in it".
FrFinding missing_finding(const Place& place, const std::vector<Holder>& present, const std::vector<int>& missing,
                          const std::string& collective);

// fr_groups.cc: the dumps in ascending rank order (two dumps of one rank are a format error), and
// their groups keyed by (name, membership), ascending (see GroupKey), each with a member per rank of
// it that left a dump. Fails on an entry in a group its dump does not declare, and on dumps of
// different jobs (one group name with overlapping but different memberships).
std::vector<const FrDump*> sorted_by_rank(const std::vector<FrDump>& dumps);
std::vector<Group> build_groups(const std::vector<const FrDump*>& dumps);

// fr_collectives.cc: the group's collectives in sequence order, compared across the members that
// hold each, up to the first divergence.
StreamResult walk_collectives(const Group& group);
// The members without a dump, waited on by the members still in the group's oldest unfinished
// collective: the wait edges (empty when nothing waits), and in `where` that collective.
std::vector<WaitEdge> waits_on_missing_dumps(const Group& group, std::string* where);

// fr_p2p.cc: every send must meet its receive on the peer. Operations are matched per (sender,
// receiver) pair in the order each side issued them: a rank's p2p_seq_id counts all of its p2p
// operations in the group, so two ranks' counters drift apart and cannot be compared.
StreamResult check_p2p(const Group& group);

// fr_waits.cc: the ranks at the end of every wait chain (the sink components of the wait graph):
// the ranks the others wait for, transitively.
struct WaitGraph {
  explicit WaitGraph(const std::vector<WaitEdge>& edges);

  const std::vector<int>& roots() const { return roots_; }
  // The roots a rank leads to (itself when it waits on nobody).
  std::vector<int> roots_from(const std::vector<int>& ranks) const;
  // "rank 8 waits on rank 9 in nccl:all_reduce #88684 of group 37 (...)", the first edge of each
  // step from `rank` to a root, "" when `rank` waits on nobody.
  std::string chain(int rank) const;

 private:
  std::vector<int> nodes_;                       // sorted
  std::vector<std::vector<size_t>> out_;         // per node index: edge indices
  std::vector<WaitEdge> edges_;
  std::vector<int> component_;                   // per node index
  std::vector<bool> sink_;                       // per component
  std::vector<int> roots_;                       // sorted

  size_t index(int rank) const;                  // nodes_.size() when absent
};

}  // namespace tandem::fr_detail
