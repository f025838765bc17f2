// Cross-rank analysis of flight-recorder dumps: matches collectives by (group, collective_seq_id) as
// PyTorch's analyzer does (coalesced groups as one), point-to-point operations per (sender,
// receiver) pair in the order each side issued them, and reports ranks that never joined an
// operation and type / size / dtype / state mismatches. The culprit is the root cause: a missing
// rank that is itself waiting in another group is followed to the rank the others wait for,
// transitively. Reads PyTorch's own dumps as they are: pg_status by pg_id, and dumps that keep only
// the entries that had not completed (an absent entry the rank's pg_status says it enqueued has
// completed).
//
// Unlike PyTorch's analyzer: the verdict does not depend on the order of the dumps (every
// decision is taken over all ranks at once, ranks in ascending order), and groups are keyed by
// name *and* membership, so split groups that reuse a name are not confused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/flight_recorder.h"

namespace tandem {

enum class FrFindingKind : uint8_t {
  kMissingRanks,        // ranks of the group that never recorded this sequence number
  kTypeMismatch,        // different collectives at one sequence number
  kSizeMismatch,        // input / output sizes disagree (or all_reduce in != out, ...)
  kDtypeMismatch,
  kStateMismatch,       // e.g. completed on some ranks, scheduled on others
  kMissingDumps,        // member ranks without a dump file: nothing can be said about them
};
std::string_view name(FrFindingKind kind);  // "missing_ranks", "collective_type_mismatch", ...

struct FrFinding {
  FrFindingKind kind = FrFindingKind::kMissingRanks;
  std::string group;              // group name
  std::string group_desc;
  std::vector<int> group_ranks;   // membership (global ranks)
  int64_t sequence = -1;          // collective_seq_id (or p2p_seq_id for p2p), -1 for kMissingDumps
  bool p2p = false;
  std::string collective;         // the majority profiling name, e.g. "nccl:all_reduce"
  std::vector<int> missing_ranks;
  std::vector<int> culprit_ranks;
  std::string detail;             // what differs: "rank 3: input [[1024]] vs [[2048]] on ranks 0-2, 4-7"
};

struct FrAnalysis {
  int ranks = 0;                   // dumps read
  int groups = 0;
  int64_t entries = 0;
  std::vector<FrFinding> findings; // first divergence per group first, in (group, sequence) order
  // One line for a tired on-call engineer: "rank 5 never joined all_reduce #12 of group 0
  // (default_pg); ranks 0-4, 6-7 are waiting in it" or "no mismatches: 8 ranks, 120 collectives".
  std::string verdict;
  std::vector<int> culprit_ranks;  // of the first finding (empty when all matched)
  std::vector<int> root_ranks;     // the ranks every wait leads to, ascending (empty: nothing waits)
  std::vector<std::string> warnings;  // what the dumps held that could not be used ("rank 3: ...")
};

FrAnalysis analyze(const std::vector<FrDump>& dumps);

// Whether a dump holds less than its rank's history: its ring wrapped (the first record id is above
// 0) or it kept only the entries that had not completed (gaps in the record ids, as PyTorch's dumps
// on a hang do). An entry absent from such a dump may have completed.
bool fr_partial_history(const FrDump& dump);

// The op of a profiling name, "nccl:send 0->1" -> "send", "nccl:all_reduce" -> "all_reduce"; and
// the elements of a list of tensor shapes ([[3, 4], [8]] -> 20).
std::string_view fr_op_type(std::string_view profiling_name);
int64_t fr_numel(const std::vector<std::vector<int64_t>>& sizes);

// Ascending ranks as ranges, "0-4, 6-7", and as a phrase, "rank 5" / "ranks 0-4, 6-7".
std::string rank_ranges(const std::vector<int>& ranks);
std::string ranks_phrase(const std::vector<int>& ranks);

// Text report (verdict first, then each finding) and JSON ({"verdict", "culprit_ranks",
// "root_ranks", "findings": [{"group", "group_desc", "sequence", "kind", "collective",
// "missing_ranks", "culprit_ranks", "detail"}], "ranks", "groups", "entries", "warnings"}).
std::string format_text(const FrAnalysis& analysis);
std::string format_json(const FrAnalysis& analysis);

}  // namespace tandem
