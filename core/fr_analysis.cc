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

#include <algorithm>
#include <iterator>
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

// ---------------------------------------------------------------------------------------------
// Text helpers

// "1 group", "3 groups".
std::string count_text(int64_t count, std::string_view noun, std::string_view plural = "") {
  if (count == 1) return fmt::format("1 {}", noun);
  return plural.empty() ? fmt::format("{} {}s", count, noun) : fmt::format("{} {}", count, plural);
}

// Python's repr of a shape list: [[3, 4], [8]].
std::string sizes_text(const std::vector<std::vector<int64_t>>& sizes) {
  std::vector<std::string> shapes;
  shapes.reserve(sizes.size());
  for (const auto& shape : sizes) shapes.push_back(fmt::format("[{}]", fmt::join(shape, ", ")));
  return fmt::format("[{}]", fmt::join(shapes, ", "));
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

struct Member {
  int rank = 0;
  // The dump's ring buffer wrapped (its oldest record is not record 0): a group this rank has no
  // entries for may have been overwritten rather than never joined.
  bool truncated = false;
  Track collectives;
  Track p2p;
};

enum class Presence : uint8_t { kPresent, kMissing, kUnknown };

// Whether `member` recorded `seq` of a stream, or is known not to have, or cannot be judged: the
// ring buffer keeps only the newest entries, so a sequence number older than the oldest one kept is
// unknown, not missing.
Presence presence(const Member& member, const Track& track, int64_t seq, const Unit** unit) {
  *unit = track.find(seq);
  if (*unit) return Presence::kPresent;
  if (track.units.empty()) return member.truncated ? Presence::kUnknown : Presence::kMissing;
  return seq < track.units.front().seq ? Presence::kUnknown : Presence::kMissing;
}

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
Member make_member(const FrDump& dump, const std::string* group_name) {
  Member member;
  member.rank = dump.rank;
  member.truncated = !dump.entries.empty() && dump.entries.front().record_id > 0;
  std::vector<std::pair<int64_t, const FrEntry*>> collectives, p2p;
  for (const FrEntry& entry : dump.entries) {
    if (!group_name || entry.pg_name != *group_name) continue;
    if (entry.is_p2p) {
      p2p.emplace_back(entry.p2p_seq_id, &entry);
    } else {
      collectives.emplace_back(entry.collective_seq_id, &entry);
    }
  }
  build_track(member.collectives, collectives);
  build_track(member.p2p, p2p);
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
        group.members.push_back(make_member(*dump, &declared.name));
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
        undeclared.push_back(make_member(*it->second, nullptr));
      }
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

// One present rank's unit at a sequence number.
struct Holder {
  int rank = 0;
  const Unit* unit = nullptr;
};

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

struct Place {
  const Group* group = nullptr;
  int64_t seq = 0;
  bool p2p = false;

  std::string sequence() const { return p2p ? fmt::format("p2p #{}", seq) : fmt::format("#{}", seq); }
};

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
  const std::vector<int> culprits = states.culprits();
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
    detail = fmt::format("{} completed {} while {} {} still in it ({})", ranks_phrase(culprits), what, others,
                         are(states.majority_ranks()), majority);
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
// P2P units: each send must meet a recv on its peer with the same (src, dst) and size

struct P2pOp {
  const FrEntry* entry = nullptr;
  bool send = false;
  int src = 0;  // global ranks
  int dst = 0;
};

// A group-local rank as p2p names spell it; -1 when it is not a plain number.
int local_rank(std::string_view text) {
  int value = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() ? value : -1;
}

// "nccl:send 0->1" / "nccl:recv 1<-0", group-local ranks, mapped through the sorted membership.
std::optional<P2pOp> parse_p2p(const FrEntry& entry, const Group& group, int rank) {
  const std::string_view type = fr_op_type(entry.profiling_name);
  if (type != "send" && type != "recv") return std::nullopt;
  const std::string_view name = entry.profiling_name;
  const size_t space = name.find(' ');
  const size_t at = space == std::string_view::npos ? space : name.find(type == "send" ? "->" : "<-", space);
  int first = -1, second = -1;
  if (at != std::string_view::npos) {
    first = local_rank(name.substr(space + 1, at - space - 1));
    second = local_rank(name.substr(at + 2));
  }
  const int size = static_cast<int>(group.key.ranks.size());
  if (first < 0 || second < 0 || first >= size || second >= size) {
    fail(ErrorCode::kFormat, "rank {}: entry {} '{}' does not name two local ranks of {} ({} ranks)", rank,
         entry.record_id, entry.profiling_name, group.label, size);
  }
  P2pOp op{&entry, type == "send", 0, 0};
  // send "src->dst", recv "dst<-src"
  op.src = group.key.ranks[static_cast<size_t>(type == "send" ? first : second)];
  op.dst = group.key.ranks[static_cast<size_t>(type == "send" ? second : first)];
  return op;
}

std::vector<P2pOp> p2p_ops(const Unit& unit, const Group& group, int rank) {
  std::vector<P2pOp> ops;
  for (const FrEntry* entry : unit.entries) {
    if (auto op = parse_p2p(*entry, group, rank)) ops.push_back(*op);
  }
  return ops;
}

int peer_of(const P2pOp& op) { return op.send ? op.dst : op.src; }

// The ops of `ops` in direction src -> dst, sends or recvs.
std::vector<const P2pOp*> direction(const std::vector<P2pOp>& ops, int src, int dst, bool send) {
  std::vector<const P2pOp*> out;
  for (const P2pOp& op : ops) {
    if (op.send == send && op.src == src && op.dst == dst) out.push_back(&op);
  }
  return out;
}

std::string names_toward(const std::vector<P2pOp>& ops, int peer) {
  std::vector<std::string> names;
  for (const P2pOp& op : ops) {
    if (peer_of(op) == peer) names.push_back(op.entry->profiling_name);
  }
  return names.empty() ? "nothing" : fmt::format("{}", fmt::join(names, ", "));
}

// A pair has no majority: by the tie rule the lower rank's record stands and the higher rank is the
// culprit.
std::optional<FrFinding> compare_direction(const Place& place, int src, int dst, const std::vector<P2pOp>& src_ops,
                                           const std::vector<P2pOp>& dst_ops) {
  const std::vector<const P2pOp*> sends = direction(src_ops, src, dst, true);
  const std::vector<const P2pOp*> recvs = direction(dst_ops, src, dst, false);
  const int low = std::min(src, dst), high = std::max(src, dst);
  const std::vector<P2pOp>& low_ops = low == src ? src_ops : dst_ops;
  const std::vector<P2pOp>& high_ops = low == src ? dst_ops : src_ops;
  if (sends.size() != recvs.size()) {
    const std::string detail =
        fmt::format("rank {} issued {} where rank {} issued {} at {} of {}", high, names_toward(high_ops, low), low,
                    names_toward(low_ops, high), place.sequence(), place.group->label);
    return make_finding(FrFindingKind::kTypeMismatch, place, names_toward(low_ops, high), {high}, detail);
  }
  for (size_t i = 0; i < sends.size(); ++i) {
    const FrEntry& send = *sends[i]->entry;
    const FrEntry& recv = *recvs[i]->entry;
    const FrEntry& low_entry = low == src ? send : recv;
    const FrEntry& high_entry = low == src ? recv : send;
    const auto& low_sizes = low == src ? send.input_sizes : recv.output_sizes;
    const auto& high_sizes = low == src ? recv.output_sizes : send.input_sizes;
    if (low_sizes != high_sizes) {
      return make_finding(FrFindingKind::kSizeMismatch, place, low_entry.profiling_name, {high},
                          fmt::format("rank {}'s {} has size {} where rank {}'s {} has {} at {} of {}", high,
                                      high_entry.profiling_name, sizes_text(high_sizes), low, low_entry.profiling_name,
                                      sizes_text(low_sizes), place.sequence(), place.group->label));
    }
    const std::string low_dtype = dtype_text(low_entry), high_dtype = dtype_text(high_entry);
    if (low_dtype != high_dtype) {
      return make_finding(FrFindingKind::kDtypeMismatch, place, low_entry.profiling_name, {high},
                          fmt::format("rank {}'s {} has dtype {} where rank {}'s {} has {} at {} of {}", high,
                                      high_entry.profiling_name, high_dtype, low, low_entry.profiling_name, low_dtype,
                                      place.sequence(), place.group->label));
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Walking a stream

struct StreamResult {
  std::optional<FrFinding> finding;
  int64_t finding_time_ns = 0;  // when the diverging unit was first recorded (to order the streams)
  int64_t matched = 0;
};

int64_t earliest_time(const std::vector<Holder>& present) {
  int64_t t = present.front().unit->entries.front()->time_created_ns;
  for (const Holder& h : present) t = std::min(t, h.unit->entries.front()->time_created_ns);
  return t;
}

std::vector<int64_t> all_sequences(const Group& group, bool p2p) {
  std::vector<int64_t> seqs;
  for (const Member& m : group.members) {
    for (const Unit& u : (p2p ? m.p2p : m.collectives).units) seqs.push_back(u.seq);
  }
  std::sort(seqs.begin(), seqs.end());
  seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
  return seqs;
}

std::optional<FrFinding> check_collective(const Place& place, std::vector<Holder>& present) {
  present.clear();
  std::vector<int> missing;
  for (const Member& member : place.group->members) {
    const Unit* unit = nullptr;
    const Presence p = presence(member, member.collectives, place.seq, &unit);
    if (p == Presence::kPresent) present.push_back({member.rank, unit});
    if (p == Presence::kMissing) missing.push_back(member.rank);
  }
  if (!missing.empty()) {
    const Vote names = vote_on(present, [](const Unit& u) { return describe(u); });
    return missing_finding(place, present, missing, names.majority_value());
  }
  return compare_collective(place, present);
}

std::optional<FrFinding> check_p2p(const Place& place, std::vector<Holder>& present) {
  const Group& group = *place.group;
  present.clear();
  for (const Member& member : group.members) {
    if (const Unit* unit = member.p2p.find(place.seq)) present.push_back({member.rank, unit});
  }
  std::map<int, std::vector<P2pOp>> ops;  // per present rank
  for (const Holder& h : present) ops[h.rank] = p2p_ops(*h.unit, group, h.rank);
  // Peers that should have recorded this p2p sequence number and did not.
  std::set<int> missing;
  std::string missing_op;
  for (const auto& [rank, rank_ops] : ops) {
    for (const P2pOp& op : rank_ops) {
      const Member* peer = group.member(peer_of(op));
      const Unit* unit = nullptr;
      if (peer && !ops.count(peer->rank) && presence(*peer, peer->p2p, place.seq, &unit) == Presence::kMissing) {
        if (missing.empty()) missing_op = op.entry->profiling_name;
        missing.insert(peer->rank);
      }
    }
  }
  if (!missing.empty()) {
    std::vector<Holder> waiting;
    for (const Holder& h : present) {
      const auto& rank_ops = ops[h.rank];
      if (std::any_of(rank_ops.begin(), rank_ops.end(), [&](const P2pOp& op) { return missing.count(peer_of(op)); })) {
        waiting.push_back(h);
      }
    }
    return missing_finding(place, waiting, {missing.begin(), missing.end()}, missing_op);
  }
  // Each pair once, lower rank first, each direction.
  for (const auto& [rank, rank_ops] : ops) {
    std::set<int> peers;
    for (const P2pOp& op : rank_ops) peers.insert(peer_of(op));
    for (int peer : peers) {
      if (peer < rank && ops.count(peer)) continue;  // done from the peer's side
      if (!ops.count(peer)) continue;                // peer unknown (truncated) or without a dump
      if (auto f = compare_direction(place, rank, peer, rank_ops, ops[peer])) return f;
      if (auto f = compare_direction(place, peer, rank, ops[peer], rank_ops)) return f;
    }
  }
  return std::nullopt;
}

StreamResult walk_stream(const Group& group, bool p2p) {
  StreamResult result;
  std::vector<Holder> present;
  for (int64_t seq : all_sequences(group, p2p)) {
    const Place place{&group, seq, p2p};
    std::optional<FrFinding> finding = p2p ? check_p2p(place, present) : check_collective(place, present);
    if (!finding) {
      ++result.matched;
      continue;
    }
    result.finding = std::move(finding);
    result.finding_time_ns = present.empty() ? 0 : earliest_time(present);
    break;  // later units follow from the first divergence (PyTorch stops pairing here too)
  }
  return result;
}

FrFinding missing_dumps_finding(const Group& group) {
  Place place{&group, -1, false};
  FrFinding finding =
      make_finding(FrFindingKind::kMissingDumps, place, "", group.missing_dumps,
                   fmt::format("{} of {} left no dump: nothing can be said about {}", ranks_phrase(group.missing_dumps),
                               group.label, group.missing_dumps.size() == 1 ? "it" : "them"));
  finding.missing_ranks = group.missing_dumps;
  return finding;
}

}  // namespace

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
  for (const FrDump& dump : dumps) analysis.entries += static_cast<int64_t>(dump.entries.size());

  int64_t matched = 0;
  std::vector<FrFinding> missing_dumps;
  for (const Group& group : groups) {
    StreamResult collectives = walk_stream(group, false);
    StreamResult p2p = walk_stream(group, true);
    matched += collectives.matched + p2p.matched;
    // One divergence per group: the stream that diverged first in time.
    if (collectives.finding && (!p2p.finding || collectives.finding_time_ns <= p2p.finding_time_ns)) {
      analysis.findings.push_back(std::move(*collectives.finding));
    } else if (p2p.finding) {
      analysis.findings.push_back(std::move(*p2p.finding));
    }
    if (!group.missing_dumps.empty()) missing_dumps.push_back(missing_dumps_finding(group));
  }
  // Divergences first: a missing dump says less than a rank caught diverging.
  for (FrFinding& finding : missing_dumps) analysis.findings.push_back(std::move(finding));

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
  nlohmann::ordered_json json = {{"verdict", analysis.verdict}, {"culprit_ranks", analysis.culprit_ranks},
                                 {"findings", findings},        {"ranks", analysis.ranks},
                                 {"groups", analysis.groups},   {"entries", analysis.entries}};
  return json.dump(2) + "\n";
}

}  // namespace tandem
