// The dumps read into the replay's ops: the checks that they come from one job (one recorder
// version, one membership per group), each rank's entries keyed into logical ops (a coalesced
// group is one op, a p2p op is matched by its pair), what the ranks recorded of each op and its
// size, and each rank's ops as the cross-rank comparison sees them (their signatures).
#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/replay/replay_internal.h"
#include "core/error.h"
#include "core/fr_analysis.h"
#include "core/torch_names.h"

namespace tandem::app::replay_detail {
namespace {

bool is_coalesced_marker(std::string_view type) { return type == "coalesced" || type.ends_with("_coalesced"); }

// The group-local peer of a p2p op, "nccl:send 0->1" -> 1, "nccl:recv 1<-0" -> 0.
std::optional<int> p2p_peer(std::string_view profiling_name) {
  for (std::string_view arrow : {"->", "<-"}) {
    const size_t at = profiling_name.rfind(arrow);
    if (at == std::string_view::npos) continue;
    const std::string_view digits = profiling_name.substr(at + 2);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    return std::stoi(std::string(digits));
  }
  return std::nullopt;
}

// An op's key; its group is an id of Built::group_ids (name and membership). A collective: (group,
// collective_seq_id). A p2p op: (group, sender, receiver, k), the k-th op between the pair in the
// order each side issued it (docs/flight-recorder.md: a rank's p2p_seq_id counts all of its p2p ops
// in the group and cannot be compared across ranks). In a dump that holds part of its history, k
// counts the ops still pending; one that completed there has a key of its own (sender = receiver =
// its rank) and runs on its rank alone.
struct OpKey {
  size_t group = 0;
  bool p2p = false;
  int64_t sequence = 0;
  int src = -1;
  int dst = -1;
  auto operator<=>(const OpKey&) const = default;
};

// What one rank recorded of an op, as the cross-rank comparison sees it: the type, element
// counts and dtypes of each of its ops; a p2p op by what it moves (a send matches a recv).
std::string signature(const RankOp& record) {
  std::string text;
  for (const FrEntry* e : record.entries) {
    const std::string_view type = fr_op_type(e->profiling_name);
    if (is_coalesced_marker(type)) continue;
    if (e->is_p2p) {
      const bool send = type == "send";
      text += fmt::format("p2p {} {};", fr_numel(send ? e->input_sizes : e->output_sizes),
                          fmt::join(send ? e->input_dtypes : e->output_dtypes, ","));
    } else {
      text += fmt::format("{} {} {} {};", type, fr_numel(e->input_sizes), fr_numel(e->output_sizes),
                          fmt::join(e->input_dtypes, ","));
    }
  }
  return text;
}

std::optional<double> recorded_duration(const FrEntry& e) {
  if (e.state != FrState::kCompleted) return std::nullopt;
  if (e.duration_ms) return *e.duration_ms / 1e3;
  if (e.time_discovered_started_ns && e.time_discovered_completed_ns) {
    return static_cast<double>(*e.time_discovered_completed_ns - *e.time_discovered_started_ns) / 1e9;
  }
  return std::nullopt;
}

// When the rank was done with an op, on its own clock (ns), if the dump says.
std::optional<int64_t> recorded_end_ns(const FrEntry& e) {
  if (e.time_discovered_completed_ns) return e.time_discovered_completed_ns;
  if (e.duration_ms && e.time_discovered_started_ns) {
    return *e.time_discovered_started_ns + static_cast<int64_t>(*e.duration_ms * 1e6);
  }
  return std::nullopt;
}

// ---- checks -----------------------------------------------------------------------------------

void check_versions(const std::vector<FrDump>& dumps) {
  std::map<std::string, std::vector<int>> by_version;
  for (const FrDump& d : dumps) by_version[d.version].push_back(d.rank);
  if (by_version.size() <= 1) return;
  std::vector<std::string> parts;
  for (auto& [version, ranks] : by_version) {
    std::sort(ranks.begin(), ranks.end());
    parts.push_back(fmt::format("{} wrote version {}", ranks_phrase(ranks), version));
  }
  fail(ErrorCode::kFormat,
       "the dumps disagree on the flight-recorder version ({}): one job's dumps share one version; are they from "
       "different jobs?",
       fmt::join(parts, ", "));
}

// Every member of a group a rank declares must declare it with the same members.
void check_membership(const std::vector<FrDump>& dumps, Memberships& memberships) {
  std::map<int, size_t> by_rank;
  for (size_t d = 0; d < dumps.size(); ++d) by_rank[dumps[d].rank] = d;
  std::vector<std::vector<size_t>> ids(dumps.size());  // per dump, per group: its membership
  std::map<std::string, std::set<size_t>> declared;     // group name -> the memberships declared
  for (size_t d = 0; d < dumps.size(); ++d) {
    for (const FrGroup& g : dumps[d].groups) {
      ids[d].push_back(memberships.id(g.ranks));
      declared[g.name].insert(ids[d].back());
    }
  }
  for (size_t d = 0; d < dumps.size(); ++d) {
    for (size_t k = 0; k < dumps[d].groups.size(); ++k) {
      const FrGroup& g = dumps[d].groups[k];
      // One membership for the name everywhere: nothing to disagree on (the usual case, and the
      // only one where the check below would cost ranks^2).
      if (declared[g.name].size() == 1) continue;
      const std::vector<int>& mine = memberships.sorted(ids[d][k]);
      if (!std::binary_search(mine.begin(), mine.end(), dumps[d].rank)) continue;
      for (int other : mine) {
        auto it = by_rank.find(other);
        if (other == dumps[d].rank || it == by_rank.end()) continue;
        const FrDump& their_dump = dumps[it->second];
        for (size_t j = 0; j < their_dump.groups.size(); ++j) {
          const FrGroup& h = their_dump.groups[j];
          if (h.name != g.name) continue;
          const std::vector<int>& theirs = memberships.sorted(ids[it->second][j]);
          if (ids[it->second][j] != ids[d][k] && std::binary_search(theirs.begin(), theirs.end(), other)) {
            fail(ErrorCode::kFormat,
                 "the dumps disagree on the membership of group {} ({}): rank {} has it as ranks {}, rank {} as ranks "
                 "{}; were they written by different jobs, or did the group change between the dumps?",
                 g.name, g.desc, dumps[d].rank, rank_ranges(mine), other, rank_ranges(theirs));
          }
        }
      }
    }
  }
}

// ---- building the ops ---------------------------------------------------------------------------

// See OpKey. `issued` counts, per (group, sender, receiver), the rank's p2p ops so far.
OpKey op_key(const FrEntry& e, int rank, const FrGroup& group, size_t group_id, const std::map<int, bool>& partial,
             std::map<std::tuple<size_t, int, int>, int64_t>& issued) {
  if (!e.is_p2p) return OpKey{group_id, false, e.collective_seq_id};
  const std::string_view type = fr_op_type(e.profiling_name);
  // A batch's marker ("nccl:coalesced") names no peer: it goes with its batch's sequence number.
  if (type != "send" && type != "recv") return OpKey{group_id, true, e.p2p_seq_id, -2, -2};
  const std::optional<int> peer = p2p_peer(e.profiling_name);
  if (!peer || *peer < 0 || *peer >= static_cast<int>(group.ranks.size())) {
    fail(ErrorCode::kFormat, "rank {}: entry {} '{}' does not name a peer among the {} ranks of group {}", rank,
         e.record_id, e.profiling_name, group.ranks.size(), group.name);
  }
  const int other = group.ranks[static_cast<size_t>(*peer)];
  const bool send = type == "send";
  const int src = send ? rank : other, dst = send ? other : rank;
  const auto partial_of = [&](int r) {
    auto it = partial.find(r);
    return it != partial.end() && it->second;
  };
  const bool whole = !partial_of(src) && !partial_of(dst);
  if (!whole && e.state == FrState::kCompleted) {
    return OpKey{group_id, true, -1 - static_cast<int64_t>(e.record_id), rank, rank};
  }
  return OpKey{group_id, true, issued[{group_id, src, dst}]++, src, dst};
}

}  // namespace

// The middle value of `values`; with an even count, the mean of the middle two.
double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Reads each dump's entries into ops (one per OpKey): the ops, each rank's record of them in its
// order, and the time it recorded before each (its compute, where `recorded_gaps`).
Built build_ops(const std::vector<FrDump>& dumps, Memberships& memberships, bool recorded_gaps,
                PhaseProgress& progress) {
  Built built;
  std::map<OpKey, size_t> index;
  std::map<int, bool> partial;  // per rank
  for (const FrDump& dump : dumps) partial[dump.rank] = fr_partial_history(dump);
  for (size_t d = 0; d < dumps.size(); ++d) {
    const FrDump& dump = dumps[d];
    std::map<std::tuple<size_t, int, int>, int64_t> issued;  // (group, src, dst) -> p2p ops counted
    built.rank_of.push_back(dump.rank);
    built.dump_of[dump.rank] = d;
    built.truncated.push_back(!dump.entries.empty() && dump.entries.front().record_id > 0);
    built.oldest.emplace_back();
    std::map<std::string, std::pair<const FrGroup*, size_t>> declared;  // name -> (group, OpKey::group)
    for (const FrGroup& g : dump.groups) {
      const std::pair<std::string, size_t> group{g.name, memberships.id(g.ranks)};
      declared[g.name] = {&g, built.group_ids.try_emplace(group, built.group_ids.size()).first->second};
    }
    std::vector<RankOp> ops;
    std::vector<int64_t> gaps;
    std::optional<int64_t> previous_end;
    for (const FrEntry& e : dump.entries) {
      auto g = declared.find(e.pg_name);
      if (g == declared.end()) {
        fail(ErrorCode::kFormat, "rank {}: entry {} names group '{}', which its pg_config does not declare", dump.rank,
             e.record_id, e.pg_name);
      }
      const FrGroup& group = *g->second.first;
      const OpKey key = op_key(e, dump.rank, group, g->second.second, partial, issued);
      auto found = index.find(key);
      if (found != index.end() && !ops.empty() && ops.back().op == found->second) {  // a coalesced group goes on
        ops.back().entries.push_back(&e);
      } else {
        auto [it, inserted] = index.try_emplace(key, built.ops.size());
        if (inserted) {
          ReplayOp op;
          op.group = group.name;
          op.group_desc = group.desc;
          op.group_ranks = memberships.sorted(memberships.id(group.ranks));
          op.p2p = key.p2p;
          op.sequence = e.is_p2p ? e.p2p_seq_id : e.collective_seq_id;  // the first recorder's, to show
          op.profiling_name = e.profiling_name;
          built.ops.push_back(std::move(op));
          built.group_of.push_back(key.group);
          built.p2p_pair.emplace_back(key.src, key.dst);
        }
        ops.push_back(RankOp{it->second, {&e}});
        int64_t gap = 0;
        if (recorded_gaps && previous_end) gap = std::max<int64_t>(0, e.time_created_ns - *previous_end);
        gaps.push_back(gap);
        auto& oldest = built.oldest.back();
        oldest.try_emplace(std::make_pair(key.group, key.p2p), key.sequence);
      }
      if (auto end = recorded_end_ns(e)) previous_end = std::max(previous_end.value_or(*end), *end);
    }
    built.per_rank.push_back(std::move(ops));
    built.gaps_ns.push_back(std::move(gaps));
    progress.step(d + 1);
  }
  return built;
}

// Fills each op's participants, what was recorded of it, its size and whether it can be simulated.
void describe_ops(Built& built, int gpus) {
  std::vector<std::vector<const RankOp*>> records(built.ops.size());
  std::vector<std::vector<int>> recorders(built.ops.size());
  for (size_t d = 0; d < built.per_rank.size(); ++d) {
    for (const RankOp& r : built.per_rank[d]) {
      records[r.op].push_back(&r);
      recorders[r.op].push_back(built.rank_of[d]);
    }
  }
  std::map<std::string, std::set<std::vector<int>>> memberships;  // split groups reuse a name
  for (const ReplayOp& op : built.ops) memberships[op.group].insert(op.group_ranks);
  for (size_t i = 0; i < built.ops.size(); ++i) {
    ReplayOp& op = built.ops[i];
    op.label =
        memberships[op.group].size() == 1 ? op.group : fmt::format("{}[{}]", op.group, rank_ranges(op.group_ranks));
    const RankOp& first = *records[i].front();
    op.joined = recorders[i];
    op.profiling_name = first.entries.size() == 1 ? first.entries.front()->profiling_name
                                                  : fmt::format("{} ({} ops)", first.entries.back()->profiling_name,
                                                                first.entries.size() - 1);
    std::vector<double> durations;
    for (size_t k = 0; k < records[i].size(); ++k) {
      const FrEntry& last = *records[i][k]->entries.back();
      if (last.state == FrState::kCompleted) op.completed.push_back(recorders[i][k]);
      if (auto s = recorded_duration(last)) durations.push_back(*s);
    }
    if (!durations.empty()) op.recorded_s = median(durations);
    // Who must take part: a collective's whole group; a p2p op's pair (the recorders and their peers).
    if (op.p2p) {
      const auto [src, dst] = built.p2p_pair[i];
      if (src < 0) {
        op.ranks = op.joined;
      } else {
        op.ranks = src == dst ? std::vector<int>{src} : std::vector<int>{std::min(src, dst), std::max(src, dst)};
      }
    } else {
      op.ranks = op.group_ranks;
    }
    // Its size, from the lowest recorder's entries: the sum over a coalesced group's ops.
    std::optional<Collective> collective;
    for (const FrEntry* e : first.entries) {
      const std::string_view type = fr_op_type(e->profiling_name);
      if (is_coalesced_marker(type)) continue;
      const TorchOp* model = torch_op(type);
      if (model == nullptr) {
        op.note = fmt::format("no model for '{}': not simulated (time 0)", e->profiling_name);
        collective.reset();
        break;
      }
      const auto& dtypes = model->sized_by == TorchSizedBy::kInput ? e->input_dtypes : e->output_dtypes;
      op.dtype = dtypes.empty() ? "Float" : dtypes.front();
      const std::optional<int> element = torch_dtype_bytes(op.dtype);
      if (!element) op.note = fmt::format("unknown dtype '{}': taken as 4 bytes", op.dtype);
      const int64_t elements = fr_numel(model->sized_by == TorchSizedBy::kInput ? e->input_sizes : e->output_sizes);
      op.bytes += elements * element.value_or(4);
      if (collective && *collective != model->collective) {
        op.note = "a coalesced group of different collectives: timed as its first";
      }
      if (!collective) collective = model->collective;
    }
    op.collective = collective.value_or(Collective::kAllReduce);
    op.simulated = collective.has_value() && op.bytes > 0;
    if (!collective && op.note.empty()) op.note = "no op to simulate";
    for (int r : op.ranks) {
      if (r >= gpus) {
        fail(ErrorCode::kInvalidArgument,
             "the dumps name rank {} (group {}), but the cluster has {} GPUs: give a bigger cluster (--nodes)", r,
             op.group, gpus);
      }
    }
  }
}

// The dumps in rank order, checked to come from one job (one recorder version, one membership per
// group): `input` itself when it is in rank order already (read_dump_dir's), else a sorted copy
// kept in `sorted` (a copy of 16,384 dumps is a GiB more: each holds its groups' rank lists).
const std::vector<FrDump>& sorted_and_checked(const std::vector<FrDump>& input, std::vector<FrDump>& sorted,
                                              Memberships& memberships) {
  if (input.empty()) fail(ErrorCode::kInvalidArgument, "no dumps to replay");
  auto by_rank = [](const FrDump& a, const FrDump& b) { return a.rank < b.rank; };
  const bool in_order = std::is_sorted(input.begin(), input.end(), by_rank);
  if (!in_order) {
    sorted = input;
    std::stable_sort(sorted.begin(), sorted.end(), by_rank);
  }
  const std::vector<FrDump>& dumps = in_order ? input : sorted;
  check_versions(dumps);
  check_membership(dumps, memberships);
  return dumps;
}

// Each dump's ops as the cross-rank comparison sees them: equal signatures, equal ids (ranks x ops
// small integers rather than as many strings).
Signatures signatures_of(const Built& built, PhaseProgress& progress) {
  Signatures signatures(built.per_rank.size());
  std::unordered_map<std::string, uint32_t> ids;
  for (size_t d = 0; d < built.per_rank.size(); ++d) {
    signatures[d].reserve(built.per_rank[d].size());
    for (const RankOp& r : built.per_rank[d]) {
      signatures[d].push_back(ids.try_emplace(signature(r), static_cast<uint32_t>(ids.size())).first->second);
    }
    progress.step(d + 1);
  }
  return signatures;
}

}  // namespace tandem::app::replay_detail
