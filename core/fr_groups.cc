// The dumps gathered into groups: each group keyed by name and sorted membership, with a member per
// rank of it that left a dump, that member's entries of the group split into its collective and p2p
// tracks (see Group in fr_analysis_internal.h). Checks on the way that the dumps are one job's, each
// entry in a group its own dump declares.
#include <algorithm>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/fr_analysis_internal.h"

namespace tandem {

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

namespace fr_detail {
namespace {

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

// The groups as the dumps declare them, each with the members whose dump declares it.
struct Declarations {
  std::map<GroupKey, Group> groups;
  std::map<GroupKey, int> declared_by;                       // the first rank whose dump declares each membership
  std::map<GroupKey, std::vector<const FrGroup*>> declared;  // per group, parallel to its members
};

Declarations declare_groups(const std::vector<const FrDump*>& dumps, const std::map<int, bool>& partial) {
  Declarations result;
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
      result.declared_by.try_emplace(key, dump->rank);
      auto [it, inserted] = result.groups.try_emplace(key);
      Group& group = it->second;
      if (inserted) {
        group.key = key;
        group.desc = declared.desc;  // the lowest rank's, as dumps are visited in rank order
      }
      if (std::binary_search(key.ranks.begin(), key.ranks.end(), dump->rank)) {
        group.members.push_back(make_member(*dump, &declared, partial.at(dump->rank)));
        result.declared[key].push_back(&declared);
      }
    }
  }
  return result;
}

// One job gives a group name one membership, or disjoint ones (split_group); overlapping but
// different memberships of one name come from different jobs, e.g. a folder reused by two runs.
void check_one_job(const std::map<GroupKey, int>& declared_by) {
  for (auto a = declared_by.begin(); a != declared_by.end(); ++a) {
    for (auto b = std::next(a); b != declared_by.end() && b->first.name == a->first.name; ++b) {
      std::vector<int> both;
      std::set_intersection(a->first.ranks.begin(), a->first.ranks.end(), b->first.ranks.begin(), b->first.ranks.end(),
                            std::back_inserter(both));
      if (both.empty()) continue;
      fail(ErrorCode::kFormat,
           "these dumps come from different jobs: rank {}'s declares group '{}' as {}, rank {}'s as {}; "
           "analyze one job's dumps at a time",
           a->second, a->first.name, ranks_phrase(a->first.ranks), b->second, ranks_phrase(b->first.ranks));
    }
  }
}

// The kind of every entry of the group, on every member (see status_stream): kUnknown when it has
// both kinds or none.
StatusStream entry_kinds(const Group& group) {
  bool any_collective = false, any_p2p = false;
  for (const Member& member : group.members) {
    any_collective = any_collective || !member.collectives.units.empty();
    any_p2p = any_p2p || !member.p2p.units.empty();
  }
  return any_collective == any_p2p ? StatusStream::kUnknown : any_p2p ? StatusStream::kP2p : StatusStream::kCollectives;
}

// A declared group made whole: members with a dump that does not declare the group recorded nothing
// in it; members without a dump cannot be judged. `declared` is parallel to the declaring members;
// `name_shared`: another group has this name, so the label names the membership too.
void complete_group(Group& group, const std::vector<const FrGroup*>& declared,
                    const std::map<int, const FrDump*>& by_rank, const std::map<int, bool>& partial, bool name_shared) {
  std::vector<Member> undeclared;
  for (int rank : group.key.ranks) {
    auto it = by_rank.find(rank);
    if (it == by_rank.end()) {
      group.missing_dumps.push_back(rank);
    } else if (!group.member(rank)) {
      undeclared.push_back(make_member(*it->second, nullptr, partial.at(rank)));
    }
  }
  // Whether pg_status counts collectives or p2p ops, member by member (see status_stream).
  const StatusStream kinds = entry_kinds(group);
  for (size_t i = 0; i < declared.size(); ++i) {
    group.members[i].status_stream = status_stream(*declared[i], group.members[i], kinds);
  }
  for (Member& member : undeclared) group.members.push_back(std::move(member));
  std::sort(group.members.begin(), group.members.end(),
            [](const Member& a, const Member& b) { return a.rank < b.rank; });
  group.label = fmt::format("group {} ({})", group.key.name, group.desc);
  if (name_shared) group.label += " of " + ranks_phrase(group.key.ranks);
}

}  // namespace

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
  std::map<int, bool> partial;  // per rank
  for (const FrDump* dump : dumps) partial[dump->rank] = fr_partial_history(*dump);
  Declarations declarations = declare_groups(dumps, partial);
  check_one_job(declarations.declared_by);
  std::map<int, const FrDump*> by_rank;
  for (const FrDump* dump : dumps) by_rank[dump->rank] = dump;
  std::map<std::string, int> name_count;
  for (const auto& [key, group] : declarations.groups) ++name_count[key.name];
  std::vector<Group> result;
  for (auto& [key, group] : declarations.groups) {
    complete_group(group, declarations.declared[key], by_rank, partial, name_count[key.name] > 1);
    result.push_back(std::move(group));
  }
  return result;
}

}  // namespace fr_detail
}  // namespace tandem
