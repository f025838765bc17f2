// Cross-rank analysis of flight-recorder dumps (see fr_analysis.h and docs/flight-recorder.md).
//
// The data, per group (keyed by name and sorted membership) and per member rank with a dump:
//
//   group "0" ranks 0-3     rank 0: collectives  #1 [all_reduce]  #2 [all_reduce]  #3 [ar, ar, coalesced]
//                                   p2p          #1 [send 0->1]
//                           rank 1: collectives  #1 [all_reduce]  #2 [all_reduce]  #3 [ar, ar, coalesced]
//                                   p2p          #1 [recv 1<-0]
//
// A "unit" is everything one rank recorded under one sequence number of one stream (collective_seq_id
// for collectives, p2p_seq_id for p2p): one entry, or a coalesced group compared as a whole. Each
// stream is walked in ascending sequence order over every member at once, so the result never
// depends on the order of the dumps.
#include "core/fr_analysis.h"
#include "core/fr_analysis_internal.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <charconv>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/torch_names.h"

namespace tandem {

std::string_view name(FrFindingKind kind) {
  switch (kind) {
    case FrFindingKind::kMissingRanks:
      return "missing_ranks";
    case FrFindingKind::kTypeMismatch:
      return "collective_type_mismatch";
    case FrFindingKind::kSizeMismatch:
      return "size_mismatch";
    case FrFindingKind::kDtypeMismatch:
      return "dtype_mismatch";
    case FrFindingKind::kStateMismatch:
      return "state_mismatch";
    case FrFindingKind::kMissingDumps:
      return "missing_dumps";
  }
  return "unknown";
}

namespace {

using namespace fr_detail;

// ---------------------------------------------------------------------------------------------
// Text helpers

// "1 group", "3 groups".
std::string count_text(int64_t count, std::string_view noun, std::string_view plural = "") {
  if (count == 1) return fmt::format("1 {}", noun);
  return plural.empty() ? fmt::format("{} {}s", count, noun) : fmt::format("{} {}", count, plural);
}


std::string_view state_text(FrState state) {
  switch (state) {
    case FrState::kScheduled:
      return "scheduled";
    case FrState::kStarted:
      return "started";
    case FrState::kCompleted:
      return "completed";
  }
  return "unknown";
}

bool is_coalesced_marker(const FrEntry& entry) {
  const std::string_view type = fr_op_type(entry.profiling_name);
  return type == "coalesced" || type.ends_with("_coalesced");
}

// ---------------------------------------------------------------------------------------------
// Groups, members, units

// See Presence (fr_analysis_internal.h). pg_status, where the dump has one for the collectives, is
// the authority on what a rank enqueued; without it the entries held are, read with the dump's
// partial history in mind.
Presence presence(const Member& member, int64_t seq, const Unit** unit) {
  const Track& track = member.collectives;
  *unit = track.find(seq);
  if (*unit) return Presence::kPresent;
  if (member.has_status && member.status_stream == StatusStream::kCollectives) {
    return seq <= member.last_enqueued ? Presence::kDone : Presence::kMissing;
  }
  const bool partial = member.partial_history;
  if (track.units.empty() || seq < track.units.front().seq) return partial ? Presence::kUnknown : Presence::kMissing;
  if (seq > track.units.back().seq) return Presence::kMissing;
  return partial ? Presence::kDone : Presence::kMissing;  // a gap between entries held
}

void build_track(Track& track, std::vector<std::pair<int64_t, const FrEntry*>>& records) {
  std::stable_sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  track.entries.reserve(records.size());
  for (const auto& record : records) track.entries.push_back(record.second);
  for (size_t first = 0; first < records.size();) {
    size_t end = first + 1;
    while (end < records.size() && records[end].first == records[first].first) ++end;
    track.units.push_back(Unit{records[first].first, std::span(track.entries).subspan(first, end - first)});
    first = end;
  }
}

// One member's tracks from its dump: the entries of the group that rank calls `group_name` (none
// when the rank's dump does not declare the group).
}  // namespace

// Record ids are per rank and consecutive: a first one above 0 means the ring wrapped, a gap that
// the dump kept only the entries that had not completed.
bool fr_partial_history(const FrDump& dump) {
  if (dump.entries.empty()) return false;
  if (dump.entries.front().record_id > 0) return true;
  for (size_t i = 1; i < dump.entries.size(); ++i) {
    if (dump.entries[i].record_id != dump.entries[i - 1].record_id + 1) return true;
  }
  return false;
}

namespace {

// Which stream the rank's pg_status counts (StatusStream): the kind of the group's last entry the
// dump holds, when its sequence number is the last enqueued one; a group whose entries (on every
// rank, `kinds`) are all of one kind, that kind.
StatusStream status_stream(const FrGroup& declared, const Member& member, StatusStream kinds) {
  const FrEntry* last = nullptr;
  for (const Track* track : {&member.collectives, &member.p2p}) {
    for (const FrEntry* e : track->entries) {
      if (last == nullptr || e->record_id > last->record_id) last = e;
    }
  }
  if (last != nullptr) {
    const int64_t seq = last->is_p2p ? last->p2p_seq_id : last->collective_seq_id;
    if (seq == declared.last_enqueued_collective) {
      return last->is_p2p ? StatusStream::kP2p : StatusStream::kCollectives;
    }
  }
  return kinds;
}

// One member's tracks from its dump: the entries of the group that rank calls `declared` (none
// when the rank's dump does not declare the group).
Member make_member(const FrDump& dump, const FrGroup* declared, bool partial) {
  Member member;
  member.rank = dump.rank;
  member.partial_history = partial;
  std::vector<std::pair<int64_t, const FrEntry*>> collectives, p2p;
  for (const FrEntry& entry : dump.entries) {
    if (!declared || entry.pg_name != declared->name) continue;
    if (entry.is_p2p) {
      p2p.emplace_back(entry.p2p_seq_id, &entry);
    } else {
      collectives.emplace_back(entry.collective_seq_id, &entry);
    }
  }
  build_track(member.collectives, collectives);
  build_track(member.p2p, p2p);
  if (declared && declared->last_enqueued_collective >= 0) {
    member.has_status = true;
    member.last_enqueued = declared->last_enqueued_collective;
    member.last_completed = declared->last_completed_collective;
  }
  return member;
}

// Every entry must name a group its own dump declares (pg_config), one the rank is a member of.
void check_entries_name_groups(const FrDump& dump) {
  std::map<std::string, const FrGroup*> declared;
  for (const FrGroup& group : dump.groups) declared[group.name] = &group;
  const FrEntry* previous = nullptr;
  for (const FrEntry& entry : dump.entries) {
    if (previous && previous->pg_name == entry.pg_name) continue;  // checked already; runs are common
    previous = &entry;
    auto it = declared.find(entry.pg_name);
    if (it == declared.end()) {
      fail(ErrorCode::kFormat, "rank {}: entry {} names group '{}', which its pg_config does not declare", dump.rank,
           entry.record_id, entry.pg_name);
    }
    const std::vector<int>& ranks = it->second->ranks;
    if (std::find(ranks.begin(), ranks.end(), dump.rank) == ranks.end()) {
      fail(ErrorCode::kFormat, "rank {}: entry {} is in group '{}', whose ranks ({}) do not include rank {}", dump.rank,
           entry.record_id, entry.pg_name, rank_ranges(ranks), dump.rank);
    }
  }
}

std::vector<const FrDump*> sorted_by_rank(const std::vector<FrDump>& dumps) {
  std::vector<const FrDump*> sorted;
  for (const FrDump& dump : dumps) sorted.push_back(&dump);
  std::sort(sorted.begin(), sorted.end(), [](const FrDump* a, const FrDump* b) { return a->rank < b->rank; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->rank == sorted[i - 1]->rank) fail(ErrorCode::kFormat, "two dumps for rank {}", sorted[i]->rank);
  }
  return sorted;
}

// Groups keyed by (name, membership): split_group can reuse a name for disjoint memberships.
std::vector<Group> build_groups(const std::vector<const FrDump*>& dumps) {
  std::map<GroupKey, Group> groups;
  std::map<GroupKey, int> declared_by;  // the first rank whose dump declares each membership
  // Each distinct declared list sorted and checked once: every dump declares its groups' whole
  // lists (the default group's 16,384 ranks in each of 16,384 dumps), and a sort per dump made this
  // O(ranks^2 log ranks), seconds at 16,384 ranks.
  std::map<std::vector<int>, std::vector<int>> sorted_lists;  // as declared -> sorted
  std::map<int, bool> partial;  // per rank
  for (const FrDump* dump : dumps) partial[dump->rank] = fr_partial_history(*dump);
  std::map<GroupKey, std::vector<const FrGroup*>> declarations;  // per group, parallel to its members
  for (const FrDump* dump : dumps) {
    check_entries_name_groups(*dump);
    for (const FrGroup& declared : dump->groups) {
      auto [sorted, fresh] = sorted_lists.try_emplace(declared.ranks);
      if (fresh) {
        sorted->second = declared.ranks;
        std::sort(sorted->second.begin(), sorted->second.end());
      }
      GroupKey key{declared.name, sorted->second};
      if (std::adjacent_find(key.ranks.begin(), key.ranks.end()) != key.ranks.end()) {
        fail(ErrorCode::kFormat, "rank {}: group '{}' lists a rank twice in its pg_config ({})", dump->rank,
             declared.name, fmt::join(declared.ranks, ", "));
      }
      declared_by.try_emplace(key, dump->rank);
      auto [it, inserted] = groups.try_emplace(key);
      Group& group = it->second;
      if (inserted) {
        group.key = key;
        group.desc = declared.desc;  // the lowest rank's, as dumps are visited in rank order
      }
      if (std::binary_search(key.ranks.begin(), key.ranks.end(), dump->rank)) {
        group.members.push_back(make_member(*dump, &declared, partial[dump->rank]));
        declarations[key].push_back(&declared);
      }
    }
  }
  // One job gives a group name one membership, or disjoint ones (split_group); overlapping but
  // different memberships of one name come from different jobs, e.g. a folder reused by two runs.
  for (auto a = declared_by.begin(); a != declared_by.end(); ++a) {
    for (auto b = std::next(a); b != declared_by.end() && b->first.name == a->first.name; ++b) {
      std::vector<int> both;
      std::set_intersection(a->first.ranks.begin(), a->first.ranks.end(), b->first.ranks.begin(),
                            b->first.ranks.end(), std::back_inserter(both));
      if (both.empty()) continue;
      fail(ErrorCode::kFormat,
           "these dumps come from different jobs: rank {}'s declares group '{}' as {}, rank {}'s as {}; "
           "analyze one job's dumps at a time",
           a->second, a->first.name, ranks_phrase(a->first.ranks), b->second, ranks_phrase(b->first.ranks));
    }
  }
  // Members with a dump that does not declare the group recorded nothing in it; members without a
  // dump cannot be judged.
  std::map<int, const FrDump*> by_rank;
  for (const FrDump* dump : dumps) by_rank[dump->rank] = dump;
  std::map<std::string, int> name_count;
  for (const auto& [key, group] : groups) ++name_count[key.name];
  std::vector<Group> result;
  for (auto& [key, group] : groups) {
    std::vector<Member> undeclared;
    for (int rank : key.ranks) {
      auto it = by_rank.find(rank);
      if (it == by_rank.end()) {
        group.missing_dumps.push_back(rank);
      } else if (!group.member(rank)) {
        undeclared.push_back(make_member(*it->second, nullptr, partial[rank]));
      }
    }
    // Whether pg_status counts collectives or p2p ops, member by member (see status_stream).
    bool any_collective = false, any_p2p = false;
    for (const Member& member : group.members) {
      any_collective = any_collective || !member.collectives.units.empty();
      any_p2p = any_p2p || !member.p2p.units.empty();
    }
    const StatusStream kinds = any_collective == any_p2p ? StatusStream::kUnknown
                               : any_p2p                 ? StatusStream::kP2p
                                                         : StatusStream::kCollectives;
    const std::vector<const FrGroup*>& declared = declarations[key];
    for (size_t i = 0; i < declared.size(); ++i) {
      group.members[i].status_stream = status_stream(*declared[i], group.members[i], kinds);
    }
    for (Member& member : undeclared) group.members.push_back(std::move(member));
    std::sort(group.members.begin(), group.members.end(),
              [](const Member& a, const Member& b) { return a.rank < b.rank; });
    group.label = fmt::format("group {} ({})", key.name, group.desc);
    if (name_count[key.name] > 1) group.label += " of " + ranks_phrase(key.ranks);
    result.push_back(std::move(group));
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Majority vote

// The ranks holding each distinct value, and which value is the majority: most ranks; in a tie,
// the value the lowest of the tied ranks holds. Culprits are every rank outside the majority.
struct Vote {
  std::vector<std::pair<std::string, std::vector<int>>> values;  // ordered by lowest holder
  size_t majority = 0;

  bool unanimous() const { return values.size() <= 1; }
  const std::string& majority_value() const { return values[majority].first; }
  const std::vector<int>& majority_ranks() const { return values[majority].second; }
  std::vector<int> culprits() const {
    std::vector<int> ranks;
    for (size_t i = 0; i < values.size(); ++i) {
      if (i != majority) ranks.insert(ranks.end(), values[i].second.begin(), values[i].second.end());
    }
    std::sort(ranks.begin(), ranks.end());
    return ranks;
  }
  // The minority values, each with its ranks.
  std::vector<std::pair<std::string, std::vector<int>>> minority() const {
    std::vector<std::pair<std::string, std::vector<int>>> out;
    for (size_t i = 0; i < values.size(); ++i) {
      if (i != majority) out.push_back(values[i]);
    }
    return out;
  }
};

// `ranks` ascending, `values` parallel to it.
Vote vote(const std::vector<int>& ranks, const std::vector<std::string>& values) {
  Vote result;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < ranks.size(); ++i) {
    auto [it, inserted] = index.emplace(values[i], result.values.size());
    if (inserted) result.values.push_back({values[i], {}});
    result.values[it->second].second.push_back(ranks[i]);
  }
  for (size_t i = 1; i < result.values.size(); ++i) {
    // Strictly more ranks wins; values are ordered by lowest holder, so a tie keeps the earlier.
    if (result.values[i].second.size() > result.values[result.majority].second.size()) result.majority = i;
  }
  return result;
}

// "rank 3 issued X and rank 5 issued Y": one clause per minority value.
template <typename Clause>
std::string minority_clauses(const Vote& vote, Clause clause) {
  std::vector<std::string> parts;
  for (const auto& [value, ranks] : vote.minority()) parts.push_back(clause(value, ranks));
  return fmt::format("{}", fmt::join(parts, " and "));
}

// ---------------------------------------------------------------------------------------------
// Collective units: what each aspect looks like as text (the vote's values)


// "nccl:all_reduce", or for a coalesced group "nccl:coalesced(nccl:all_reduce, nccl:all_gather)".
std::string describe(const Unit& unit) {
  if (unit.entries.size() == 1) return unit.entries[0]->profiling_name;
  std::vector<std::string> ops;
  for (size_t i = 0; i + 1 < unit.entries.size(); ++i) ops.push_back(unit.entries[i]->profiling_name);
  const FrEntry& last = *unit.entries.back();
  if (!is_coalesced_marker(last)) {
    ops.push_back(last.profiling_name);
    return fmt::format("{}", fmt::join(ops, " + "));
  }
  return fmt::format("{}({})", last.profiling_name, fmt::join(ops, ", "));
}

// The ops whose sizes and dtypes carry meaning (a coalesced group's marker carries none).
std::vector<const FrEntry*> payload_ops(const Unit& unit) {
  std::vector<const FrEntry*> ops;
  for (const FrEntry* entry : unit.entries) {
    if (unit.entries.size() == 1 || !is_coalesced_marker(*entry)) ops.push_back(entry);
  }
  return ops;
}

// PyTorch's Op.match: all_to_all sizes differ legitimately per rank, scatter inputs and gather
// outputs exist only on the root.
bool inputs_compared(std::string_view type) { return type != "all_to_all" && type != "scatter"; }
bool outputs_compared(std::string_view type) { return type != "all_to_all" && type != "gather"; }

std::string input_text(const Unit& unit) {
  std::vector<std::string> parts;
  for (const FrEntry* op : payload_ops(unit)) {
    parts.push_back(inputs_compared(fr_op_type(op->profiling_name)) ? sizes_text(op->input_sizes) : "-");
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string output_text(const Unit& unit) {
  std::vector<std::string> parts;
  for (const FrEntry* op : payload_ops(unit)) {
    parts.push_back(outputs_compared(fr_op_type(op->profiling_name)) ? sizes_text(op->output_sizes) : "-");
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}


using fr_detail::dtype_text;

std::string dtype_text(const Unit& unit) {
  std::vector<std::string> parts;
  for (const FrEntry* op : payload_ops(unit)) parts.push_back(dtype_text(*op));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string state_text(const Unit& unit) { return std::string(state_text(unit.entries.back()->state)); }

// The fast path: units identical in every compared field need no vote.
bool identical(const Unit& a, const Unit& b) {
  if (a.entries.size() != b.entries.size()) return false;
  for (size_t i = 0; i < a.entries.size(); ++i) {
    const FrEntry& x = *a.entries[i];
    const FrEntry& y = *b.entries[i];
    if (x.profiling_name != y.profiling_name || x.input_sizes != y.input_sizes || x.output_sizes != y.output_sizes ||
        x.input_dtypes != y.input_dtypes || x.output_dtypes != y.output_dtypes || x.state != y.state) {
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Findings




template <typename Text>
Vote vote_on(const std::vector<Holder>& holders, Text text) {
  std::vector<std::string> values;
  for (const Holder& h : holders) values.push_back(text(*h.unit));
  return vote(ranks_of(holders), values);
}

// The unit a value's lowest holder recorded (to phrase sizes and states).
const Unit& unit_of(const std::vector<Holder>& holders, int rank) {
  for (const Holder& h : holders) {
    if (h.rank == rank) return *h.unit;
  }
  return *holders.front().unit;
}


std::optional<FrFinding> type_finding(const Place& place, const std::vector<Holder>& present) {
  const Vote types = vote_on(present, [](const Unit& u) { return describe(u); });
  if (types.unanimous()) return std::nullopt;
  std::string detail =
      fmt::format("{} where {} issued {} at {} of {}",
                  minority_clauses(types,
                                   [](const std::string& value, const std::vector<int>& r) {
                                     return fmt::format("{} issued {}", ranks_phrase(r), value);
                                   }),
                  ranks_phrase(types.majority_ranks()), types.majority_value(), place.sequence(), place.group->label);
  return make_finding(FrFindingKind::kTypeMismatch, place, types.majority_value(), types.culprits(), detail);
}

std::optional<FrFinding> size_finding(const Place& place, const std::vector<Holder>& present) {
  const Vote sizes = vote_on(present, [](const Unit& u) { return input_text(u) + " -> " + output_text(u); });
  if (sizes.unanimous()) return std::nullopt;
  const Unit& majority = unit_of(present, sizes.majority_ranks().front());
  const std::string collective = describe(majority);
  // Say what the culprits sent when their inputs differ, else what they expect to receive.
  auto clause = [&](const std::string&, const std::vector<int>& ranks) {
    const Unit& unit = unit_of(present, ranks.front());
    if (input_text(unit) != input_text(majority))
      return fmt::format("{} sent size {}", ranks_phrase(ranks), input_text(unit));
    return fmt::format("{} expects output size {}", ranks_phrase(ranks), output_text(unit));
  };
  const auto minority = sizes.minority();
  const bool inputs_differ = std::any_of(minority.begin(), minority.end(), [&](const auto& value) {
    return input_text(unit_of(present, value.second.front())) != input_text(majority);
  });
  const std::string detail = fmt::format(
      "{} where the others {} {} in {} {} of {}", minority_clauses(sizes, clause), inputs_differ ? "sent" : "expect",
      inputs_differ ? input_text(majority) : output_text(majority), collective, place.sequence(), place.group->label);
  return make_finding(FrFindingKind::kSizeMismatch, place, collective, sizes.culprits(), detail);
}

// Per-op rules that hold on every rank (PyTorch's Op.match): "" when they hold.
std::string size_rule_broken(const FrEntry& op, size_t group_size) {
  const std::string_view type = fr_op_type(op.profiling_name);
  if (op.input_sizes.empty() || op.output_sizes.empty()) return "";
  const int64_t in = fr_numel(op.input_sizes), out = fr_numel(op.output_sizes), n = static_cast<int64_t>(group_size);
  const TorchOp* torch = torch_op(type);
  if (torch == nullptr) return "";
  const Collective c = torch->collective;
  if ((c == Collective::kAllReduce || c == Collective::kBroadcast || c == Collective::kReduce) &&
      op.input_sizes != op.output_sizes) {
    return fmt::format("input {} but output {} ({} needs equal sizes)", sizes_text(op.input_sizes),
                       sizes_text(op.output_sizes), type);
  }
  if (c == Collective::kAllGather && out != in * n) {
    return fmt::format("input numel {} and output numel {}, not {} x {} ranks", in, out, in, n);
  }
  if (c == Collective::kReduceScatter && in != out * n) {
    return fmt::format("input numel {}, not output numel {} x {} ranks", in, out, n);
  }
  return "";
}

// Rules broken alike on every rank (the sizes agree): every rank is a culprit.
std::optional<FrFinding> size_rule_finding(const Place& place, const std::vector<Holder>& present) {
  const Unit& unit = *present.front().unit;
  for (const FrEntry* op : payload_ops(unit)) {
    const std::string broken = size_rule_broken(*op, place.group->key.ranks.size());
    if (broken.empty()) continue;
    const std::vector<int> ranks = ranks_of(present);
    const std::string detail = fmt::format("{} issued {} {} of {} with {}", ranks_phrase(ranks), op->profiling_name,
                                           place.sequence(), place.group->label, broken);
    return make_finding(FrFindingKind::kSizeMismatch, place, describe(unit), ranks, detail);
  }
  return std::nullopt;
}

std::optional<FrFinding> dtype_finding(const Place& place, const std::vector<Holder>& present) {
  const Vote dtypes = vote_on(present, [](const Unit& u) { return dtype_text(u); });
  if (dtypes.unanimous()) return std::nullopt;
  const std::string collective = describe(*present.front().unit);
  const std::string detail = fmt::format("{} where the others have {} in {} {} of {}",
                                         minority_clauses(dtypes,
                                                          [](const std::string& value, const std::vector<int>& r) {
                                                            return fmt::format("{} {} dtype {}", ranks_phrase(r),
                                                                               r.size() == 1 ? "has" : "have", value);
                                                          }),
                                         dtypes.majority_value(), collective, place.sequence(), place.group->label);
  return make_finding(FrFindingKind::kDtypeMismatch, place, collective, dtypes.culprits(), detail);
}

// Input and output dtypes differ alike on every rank (the dtypes agree): every rank is a culprit.
// Scatter, gather and broadcast are exempt, as in PyTorch.
std::optional<FrFinding> dtype_rule_finding(const Place& place, const std::vector<Holder>& present) {
  const Unit& unit = *present.front().unit;
  for (const FrEntry* op : payload_ops(unit)) {
    const std::string_view type = fr_op_type(op->profiling_name);
    const std::string dtypes = dtype_text(*op);
    if (dtypes.find(" -> ") == std::string::npos || type == "scatter" || type == "gather" || type == "broadcast") {
      continue;
    }
    const std::vector<int> ranks = ranks_of(present);
    return make_finding(FrFindingKind::kDtypeMismatch, place, describe(unit), ranks,
                        fmt::format("{} issued {} {} of {} with dtypes {}", ranks_phrase(ranks), op->profiling_name,
                                    place.sequence(), place.group->label, dtypes));
  }
  return std::nullopt;
}

// The culprits are the minority state; the sentence says which side is behind.
std::optional<FrFinding> state_finding(const Place& place, const std::vector<Holder>& present) {
  const Vote states = vote_on(present, [](const Unit& u) { return state_text(u); });
  if (states.unanimous()) return std::nullopt;
  const std::string collective = describe(*present.front().unit);
  const std::string what = fmt::format("{} {} of {}", collective, place.sequence(), place.group->label);
  const auto minority = states.minority();
  const std::string& majority = states.majority_value();
  const std::string others = ranks_phrase(states.majority_ranks());
  // Where one side completed, the ranks still in it are behind, majority or not: a collective
  // completes nowhere unless every member took part, so theirs is the stream that stopped.
  std::vector<int> culprits = states.culprits();
  if (minority.size() == 1 && minority[0].first == "completed") culprits = states.majority_ranks();
  const auto are = [](const std::vector<int>& r) { return r.size() == 1 ? "is" : "are"; };
  std::string detail;
  if (minority.size() > 1) {
    detail = fmt::format("{} where {} {} {} in {}",
                         minority_clauses(states,
                                          [&](const std::string& value, const std::vector<int>& r) {
                                            return fmt::format("{} {} {}", ranks_phrase(r), are(r), value);
                                          }),
                         others, are(states.majority_ranks()), majority, what);
  } else if (majority == "completed") {
    detail = fmt::format("{} {} still in {} ({}) while {} completed it", ranks_phrase(culprits), are(culprits), what,
                         minority[0].first, others);
  } else if (minority[0].first == "completed") {
    detail = fmt::format("{} {} still in {} ({}) while {} completed it", others, are(states.majority_ranks()), what,
                         majority, ranks_phrase(minority[0].second));
  } else {
    detail = fmt::format("{} {} {} in {} while {} {} {}", ranks_phrase(culprits), are(culprits), minority[0].first,
                         what, others, are(states.majority_ranks()), majority);
  }
  return make_finding(FrFindingKind::kStateMismatch, place, collective, culprits, detail);
}

// PyTorch's order: type, then sizes, then dtypes, then state.
std::optional<FrFinding> compare_collective(const Place& place, const std::vector<Holder>& present) {
  const Unit& reference = *present.front().unit;
  const bool all_identical =
      std::all_of(present.begin(), present.end(), [&](const Holder& h) { return identical(*h.unit, reference); });
  // The votes build text per rank: only where the units differ at all.
  if (!all_identical) {
    if (auto finding = type_finding(place, present)) return finding;
    if (auto finding = size_finding(place, present)) return finding;
  }
  if (auto finding = size_rule_finding(place, present)) return finding;
  if (!all_identical) {
    if (auto finding = dtype_finding(place, present)) return finding;
  }
  if (auto finding = dtype_rule_finding(place, present)) return finding;
  if (!all_identical) return state_finding(place, present);
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Walking a stream


int64_t earliest_time(const std::vector<Holder>& present) {
  int64_t t = present.front().unit->entries.front()->time_created_ns;
  for (const Holder& h : present) t = std::min(t, h.unit->entries.front()->time_created_ns);
  return t;
}

std::vector<int64_t> all_sequences(const Group& group) {
  std::vector<int64_t> seqs;
  for (const Member& m : group.members) {
    for (const Unit& u : m.collectives.units) seqs.push_back(u.seq);
  }
  std::sort(seqs.begin(), seqs.end());
  seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
  return seqs;
}

bool completed(const Unit& unit) { return unit.entries.back()->state == FrState::kCompleted; }

// A collective completed on some ranks (`done`: issued and no longer held) that others still hold
// unfinished: every member took part, or it could not have completed anywhere, so the ranks still
// in it are those whose GPU stopped making progress (a GPU fault, a kernel that never ends).
std::optional<FrFinding> stall_finding(const Place& place, const std::vector<Holder>& present,
                                       const std::vector<int>& done) {
  std::vector<int> stalled;
  for (const Holder& h : present) {
    if (!completed(*h.unit)) stalled.push_back(h.rank);
  }
  if (stalled.empty() || done.empty()) return std::nullopt;
  const std::string collective = describe(*present.front().unit);
  return make_finding(FrFindingKind::kStateMismatch, place, collective, stalled,
                      fmt::format("{} never completed {} {} of {}, which {} completed: {} GPU work stopped", 
                                  ranks_phrase(stalled), collective, place.sequence(), place.group->label,
                                  ranks_phrase(done), stalled.size() == 1 ? "its" : "their"));
}

std::optional<FrFinding> check_collective(const Place& place, std::vector<Holder>& present) {
  present.clear();
  std::vector<int> missing, done;
  for (const Member& member : place.group->members) {
    const Unit* unit = nullptr;
    const Presence p = presence(member, place.seq, &unit);
    if (p == Presence::kPresent) present.push_back({member.rank, unit});
    if (p == Presence::kDone) done.push_back(member.rank);
    if (p == Presence::kMissing) missing.push_back(member.rank);
  }
  if (present.empty()) return std::nullopt;  // completed wherever it was issued: nothing waits in it
  if (!missing.empty()) {
    const Vote names = vote_on(present, [](const Unit& u) { return describe(u); });
    return missing_finding(place, present, missing, names.majority_value());
  }
  if (auto finding = compare_collective(place, present)) return finding;
  return stall_finding(place, present, done);
}

// The group's collectives in sequence order, up to the first divergence (later ones follow from it;
// PyTorch stops pairing there too). A state divergence does not stop the walk: the first missing
// rank after it is what the others wait for.
StreamResult walk_collectives(const Group& group) {
  StreamResult result;
  std::vector<Holder> present;
  for (int64_t seq : all_sequences(group)) {
    const Place place{&group, seq, false};
    std::optional<FrFinding> finding = check_collective(place, present);
    if (!finding) {
      ++result.matched;
      continue;
    }
    if (finding->kind == FrFindingKind::kStateMismatch) {
      if (!result.stall) {
        result.stall = std::move(finding);
        result.stall_time_ns = earliest_time(present);
      }
      continue;
    }
    if (finding->kind == FrFindingKind::kMissingRanks) {
      const std::string where = fmt::format("{} {} of {}", finding->collective, place.sequence(), group.label);
      for (const Holder& h : present) {
        if (completed(*h.unit)) continue;
        for (int rank : finding->missing_ranks) result.waits.push_back({h.rank, rank, where});
      }
    }
    result.finding = std::move(finding);
    result.finding_time_ns = earliest_time(present);
    break;
  }
  return result;
}

// Members of a group that left no dump, waited on by the members still in its oldest unfinished
// collective (a crashed rank writes nothing): the wait edges, empty when nothing waits.
std::vector<WaitEdge> waits_on_missing_dumps(const Group& group, std::string* where) {
  std::vector<WaitEdge> waits;
  if (group.missing_dumps.empty()) return waits;
  for (int64_t seq : all_sequences(group)) {
    for (const Member& member : group.members) {
      const Unit* unit = member.collectives.find(seq);
      if (unit == nullptr || completed(*unit)) continue;
      *where = fmt::format("{} #{} of {}", describe(*unit), seq, group.label);
      for (int rank : group.missing_dumps) waits.push_back({member.rank, rank, *where});
    }
    if (!waits.empty()) return waits;
  }
  return waits;
}

// `waited_in`: where the members with a dump wait for them ("" when none waits).
FrFinding missing_dumps_finding(const Group& group, const std::string& waited_in) {
  Place place{&group, -1, false};
  const bool one = group.missing_dumps.size() == 1;
  const std::string detail =
      waited_in.empty()
          ? fmt::format("{} of {} left no dump: nothing can be said about {}", ranks_phrase(group.missing_dumps),
                        group.label, one ? "it" : "them")
          : fmt::format("{} of {} left no dump (crashed, or killed before dumping) while the others wait for {} "
                        "in {}",
                        ranks_phrase(group.missing_dumps), group.label, one ? "it" : "them", waited_in);
  FrFinding finding = make_finding(FrFindingKind::kMissingDumps, place, "", group.missing_dumps, detail);
  finding.missing_ranks = group.missing_dumps;
  return finding;
}

// The order findings are read in: a rank caught issuing the wrong operation first; then the ranks
// everyone ends up waiting for (most of them named at once, then the earliest); GPU stalls; the
// findings whose missing ranks are themselves waiting elsewhere; dumps nobody waits for.
struct Ranked {
  FrFinding finding;
  int64_t time_ns = 0;
  int order = 0;
  size_t roots_named = 0;
};

int reading_order(const FrFinding& f, size_t roots_named) {
  switch (f.kind) {
    case FrFindingKind::kTypeMismatch:
    case FrFindingKind::kSizeMismatch:
    case FrFindingKind::kDtypeMismatch:
      return 0;
    case FrFindingKind::kMissingRanks:
      return roots_named > 0 ? 1 : 3;
    case FrFindingKind::kMissingDumps:
      return roots_named > 0 ? 1 : 4;
    case FrFindingKind::kStateMismatch:
      return 2;
  }
  return 4;
}

}  // namespace

namespace fr_detail {

// Python's repr of a shape list: [[3, 4], [8]].
std::string sizes_text(const std::vector<std::vector<int64_t>>& sizes) {
  std::vector<std::string> shapes;
  shapes.reserve(sizes.size());
  for (const auto& shape : sizes) shapes.push_back(fmt::format("[{}]", fmt::join(shape, ", ")));
  return fmt::format("[{}]", fmt::join(shapes, ", "));
}

// Dtypes of the tensors that exist (an empty size list has no dtypes worth comparing), "in -> out"
// when a single op's input and output dtypes differ.
std::string dtype_text(const FrEntry& op) {
  const std::set<std::string> in(op.input_dtypes.begin(), op.input_dtypes.end());
  const std::set<std::string> out(op.output_dtypes.begin(), op.output_dtypes.end());
  const std::string in_text = op.input_sizes.empty() ? "" : fmt::format("{}", fmt::join(in, "/"));
  const std::string out_text = op.output_sizes.empty() ? "" : fmt::format("{}", fmt::join(out, "/"));
  if (in_text.empty() || out_text.empty() || in_text == out_text) return in_text.empty() ? out_text : in_text;
  return in_text + " -> " + out_text;
}

std::string Place::sequence() const { return p2p ? fmt::format("p2p #{}", seq) : fmt::format("#{}", seq); }

FrFinding make_finding(FrFindingKind kind, const Place& place, std::string collective, std::vector<int> culprits,
                       std::string detail) {
  FrFinding finding;
  finding.kind = kind;
  finding.group = place.group->key.name;
  finding.group_desc = place.group->desc;
  finding.group_ranks = place.group->key.ranks;
  finding.sequence = place.seq;
  finding.p2p = place.p2p;
  finding.collective = std::move(collective);
  finding.culprit_ranks = std::move(culprits);
  finding.detail = std::move(detail);
  return finding;
}

std::vector<int> ranks_of(const std::vector<Holder>& holders) {
  std::vector<int> ranks;
  for (const Holder& h : holders) ranks.push_back(h.rank);
  return ranks;
}

FrFinding missing_finding(const Place& place, const std::vector<Holder>& present, const std::vector<int>& missing,
                          const std::string& collective) {
  const bool waiting = std::any_of(present.begin(), present.end(), [](const Holder& h) {
    return h.unit->entries.back()->state != FrState::kCompleted;
  });
  std::string detail =
      fmt::format("{} never joined {} {} of {}: {} {}", ranks_phrase(missing), collective, place.sequence(),
                  place.group->label, ranks_phrase(ranks_of(present)),
                  waiting ? (present.size() == 1 ? "is waiting in it" : "are waiting in it") : "recorded it");
  // A rank that issued one collective too many looks the same as the others never joining it.
  if (missing.size() > present.size()) {
    detail += fmt::format(" (the missing ranks are the majority: did {} issue an extra collective?)",
                          ranks_phrase(ranks_of(present)));
  }
  FrFinding finding = make_finding(FrFindingKind::kMissingRanks, place, collective, missing, std::move(detail));
  finding.missing_ranks = missing;
  return finding;
}

}  // namespace fr_detail

// "nccl:send 0->1" -> "send"; "nccl:all_reduce" -> "all_reduce".
std::string_view fr_op_type(std::string_view profiling_name) {
  const size_t colon = profiling_name.find(':');
  if (colon != std::string_view::npos) profiling_name.remove_prefix(colon + 1);
  return profiling_name.substr(0, profiling_name.find(' '));
}

int64_t fr_numel(const std::vector<std::vector<int64_t>>& sizes) {
  int64_t total = 0;
  for (const auto& shape : sizes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    total += n;
  }
  return total;
}

// "0-4, 6-7" for ascending ranks.
std::string rank_ranges(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!text.empty()) text += ", ";
    text += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return text;
}

// "rank 5" or "ranks 0-4, 6-7".
std::string ranks_phrase(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_ranges(ranks);
}

FrAnalysis analyze(const std::vector<FrDump>& dumps) {
  FrAnalysis analysis;
  const std::vector<const FrDump*> sorted = sorted_by_rank(dumps);
  const std::vector<Group> groups = build_groups(sorted);
  analysis.ranks = static_cast<int>(dumps.size());
  analysis.groups = static_cast<int>(groups.size());
  for (const FrDump* dump : sorted) {
    analysis.entries += static_cast<int64_t>(dump->entries.size());
    for (const std::string& warning : dump->warnings) analysis.warnings.push_back(fmt::format("rank {}: {}", dump->rank, warning));
  }

  int64_t matched = 0;
  std::vector<Ranked> ranked;
  std::vector<WaitEdge> waits;
  for (const Group& group : groups) {
    StreamResult collectives = walk_collectives(group);
    StreamResult p2p = check_p2p(group);
    matched += collectives.matched + p2p.matched;
    const size_t waits_before = waits.size();
    waits.insert(waits.end(), collectives.waits.begin(), collectives.waits.end());
    waits.insert(waits.end(), p2p.waits.begin(), p2p.waits.end());
    if (collectives.stall) ranked.push_back({std::move(*collectives.stall), collectives.stall_time_ns});
    // One divergence per group: the stream that diverged first in time.
    if (collectives.finding && (!p2p.finding || collectives.finding_time_ns <= p2p.finding_time_ns)) {
      ranked.push_back({std::move(*collectives.finding), collectives.finding_time_ns});
    } else if (p2p.finding) {
      ranked.push_back({std::move(*p2p.finding), p2p.finding_time_ns});
    }
    if (!group.missing_dumps.empty()) {
      std::string waited_in;
      // Only where no member with a dump explains the wait.
      if (waits.size() == waits_before) {
        const std::vector<WaitEdge> on_missing = waits_on_missing_dumps(group, &waited_in);
        waits.insert(waits.end(), on_missing.begin(), on_missing.end());
      }
      ranked.push_back({missing_dumps_finding(group, waited_in), std::numeric_limits<int64_t>::max()});
    }
  }

  // Follow the waits: a missing rank that is itself waiting elsewhere is a victim, not the cause.
  const WaitGraph graph(waits);
  analysis.root_ranks = graph.roots();
  for (Ranked& r : ranked) {
    FrFinding& f = r.finding;
    if (f.kind == FrFindingKind::kMissingRanks || f.kind == FrFindingKind::kMissingDumps) {
      if (f.kind == FrFindingKind::kMissingRanks) f.culprit_ranks = graph.roots_from(f.missing_ranks);
      for (int rank : f.missing_ranks) {
        if (const std::string chain = graph.chain(rank); !chain.empty()) f.detail += "; " + chain;
      }
    }
    for (int rank : f.missing_ranks) {
      if (std::binary_search(analysis.root_ranks.begin(), analysis.root_ranks.end(), rank)) ++r.roots_named;
    }
    r.order = reading_order(f, r.roots_named);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    if (a.order != b.order) return a.order < b.order;
    if (a.order == 1 && a.roots_named != b.roots_named) return a.roots_named > b.roots_named;
    if (a.order == 1) return a.time_ns < b.time_ns;
    return false;
  });
  for (Ranked& r : ranked) analysis.findings.push_back(std::move(r.finding));

  if (analysis.findings.empty()) {
    analysis.verdict = fmt::format("no mismatches: {}, {}, {} matched", count_text(analysis.ranks, "rank"),
                                   count_text(analysis.groups, "group"), count_text(matched, "collective"));
  } else {
    analysis.verdict = analysis.findings.front().detail;
    analysis.culprit_ranks = analysis.findings.front().culprit_ranks;
  }
  return analysis;
}

std::string format_text(const FrAnalysis& analysis) {
  std::string text = analysis.verdict + "\n";
  text += fmt::format("{}, {}, {}; {}\n", count_text(analysis.ranks, "rank"), count_text(analysis.groups, "group"),
                      count_text(analysis.entries, "entry", "entries"),
                      count_text(static_cast<int64_t>(analysis.findings.size()), "finding"));
  for (const std::string& warning : analysis.warnings) text += "warning: " + warning + "\n";
  for (const FrFinding& f : analysis.findings) {
    text +=
        fmt::format("\n[{}] group {} ({}), ranks {}", name(f.kind), f.group, f.group_desc, rank_ranges(f.group_ranks));
    if (f.sequence >= 0) text += fmt::format(", {}{}: {}", f.p2p ? "p2p #" : "#", f.sequence, f.collective);
    text += "\n";
    if (!f.culprit_ranks.empty()) text += "  culprit ranks: " + rank_ranges(f.culprit_ranks) + "\n";
    if (!f.missing_ranks.empty()) text += "  missing ranks: " + rank_ranges(f.missing_ranks) + "\n";
    text += "  " + f.detail + "\n";
  }
  return text;
}

std::string format_json(const FrAnalysis& analysis) {
  nlohmann::ordered_json findings = nlohmann::ordered_json::array();
  for (const FrFinding& f : analysis.findings) {
    findings.push_back({{"kind", name(f.kind)},
                        {"group", f.group},
                        {"group_desc", f.group_desc},
                        {"group_ranks", f.group_ranks},
                        {"sequence", f.sequence},
                        {"p2p", f.p2p},
                        {"collective", f.collective},
                        {"missing_ranks", f.missing_ranks},
                        {"culprit_ranks", f.culprit_ranks},
                        {"detail", f.detail}});
  }
  nlohmann::ordered_json json = {{"verdict", analysis.verdict},   {"culprit_ranks", analysis.culprit_ranks},
                                 {"root_ranks", analysis.root_ranks}, {"findings", findings},
                                 {"ranks", analysis.ranks},       {"groups", analysis.groups},
                                 {"entries", analysis.entries},   {"warnings", analysis.warnings}};
  return json.dump(2) + "\n";
}

}  // namespace tandem
