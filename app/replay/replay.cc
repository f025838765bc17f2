#include "app/replay/replay.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <deque>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/scenario/scenario.h"
#include "app/scenario/scenario_report.h"
#include "core/error.h"
#include "core/text.h"
#include "core/torch_names.h"
#include "sim/collective_timer.h"
#include "sim/isolated.h"

namespace tandem::app {
namespace {

using nlohmann::json;

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

// ---- what the dumps hold ----------------------------------------------------------------------

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

// One rank's record of an op: its entries (a coalesced group's several, its marker last).
struct RankOp {
  size_t op = 0;  // index into the ops
  std::vector<const FrEntry*> entries;
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

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
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

// ---- the logical replay: which ops run, in what order, and where the ranks stop agreeing ---------

struct Replayed {
  std::vector<size_t> order;                 // completed ops in the order they became ready
  std::vector<std::vector<size_t>> arrived;  // per op: dump indices that reached it (in order)
  std::vector<size_t> position;              // per dump: index of its next op (== size: done)
};

// Whether the rank of dump `d` must take part in `op`: a member whose retained records start after
// it (the ring buffer dropped them) has been through it.
bool required(const Built& built, size_t d, size_t op_index) {
  const ReplayOp& op = built.ops[op_index];
  if (op.p2p) return true;  // the pair's k-th op: matched exactly (OpKey)
  const auto& oldest = built.oldest[d];
  auto it = oldest.find(std::make_pair(built.group_of[op_index], op.p2p));
  if (it != oldest.end()) return op.sequence >= it->second;
  return !built.truncated[d];  // no records of the group: missing, unless the buffer wrapped
}

using Signatures = std::vector<std::vector<uint32_t>>;  // per dump: each of its ops' signature(), interned

Replayed replay_logic(const Built& built, const Signatures& signatures, PhaseProgress& progress) {
  Replayed out;
  const size_t dumps = built.per_rank.size();
  out.arrived.resize(built.ops.size());
  out.position.assign(dumps, 0);
  // Participants with a dump, per op, that must arrive for it to start.
  std::vector<std::vector<size_t>> needed(built.ops.size());
  for (size_t i = 0; i < built.ops.size(); ++i) {
    for (int r : built.ops[i].ranks) {
      auto it = built.dump_of.find(r);
      if (it != built.dump_of.end() && required(built, it->second, i)) needed[i].push_back(it->second);
    }
  }
  std::deque<size_t> ready;
  auto arrive = [&](size_t d) {
    if (out.position[d] >= built.per_rank[d].size()) return;
    const size_t op = built.per_rank[d][out.position[d]].op;
    out.arrived[op].push_back(d);
    if (out.arrived[op].size() == needed[op].size()) ready.push_back(op);
  };
  for (size_t d = 0; d < dumps; ++d) arrive(d);
  while (!ready.empty()) {
    const size_t op = ready.front();
    ready.pop_front();
    // Every member is here; with different ops (a desync) it cannot run.
    std::set<uint32_t> seen;
    for (size_t d : out.arrived[op]) seen.insert(signatures[d][out.position[d]]);
    const bool all_recorded_complete = std::all_of(out.arrived[op].begin(), out.arrived[op].end(), [&](size_t d) {
      return built.per_rank[d][out.position[d]].entries.back()->state == FrState::kCompleted;
    });
    if (seen.size() > 1 || !all_recorded_complete) continue;  // stays where it is: desync or stalled
    out.order.push_back(op);
    progress.step(out.order.size());
    for (size_t d : out.arrived[op]) {
      ++out.position[d];
      arrive(d);
    }
  }
  return out;
}

// ---- timing -----------------------------------------------------------------------------------

struct TimingQuery {
  Collective collective = Collective::kAllReduce;
  int64_t bytes = 0;
  std::vector<int> ranks;  // = GPUs
};

// Queries that share schedules: all_gather and reduce_scatter are timed as half a ring all_reduce,
// so they go with all_reduce; each other collective is a family of its own.
int query_family(Collective collective) {
  switch (collective) {
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return static_cast<int>(Collective::kAllReduce);
    default:
      return static_cast<int>(collective);
  }
}

// Times every query on the simulator. With several jobs, each family of queries (query_family)
// runs in a child process of its own, up to options.jobs at a time, each child building its
// platform and the schedules it needs once. Groups of up to sim::kMaxOpByOpRanks run op by op,
// where a time's last bits depend on the runs before it in the process: then, as with one job, one
// child runs every query in order.
std::vector<sim::CollectiveTiming> time_queries(const ReplayOptions& options, const std::vector<TimingQuery>& queries,
                                                PhaseProgress& progress) {
  const bool independent = options.jobs > 1 && std::all_of(queries.begin(), queries.end(), [](const TimingQuery& q) {
                             return q.ranks.size() > static_cast<size_t>(sim::kMaxOpByOpRanks);
                           });
  std::map<int, std::vector<size_t>> by_family;
  for (size_t i = 0; i < queries.size(); ++i) {
    by_family[independent ? query_family(queries[i].collective) : 0].push_back(i);
  }
  std::vector<std::vector<size_t>> families;
  for (auto& [family, members] : by_family) families.push_back(std::move(members));
  std::vector<sim::CollectiveTiming> timings(queries.size());
  size_t done = 0;
  std::optional<Error> failure;
  sim::run_isolated_parallel(
      families.size(),
      [&](size_t f) {
        // Explicit schedules, as tandem run's collective loops simulate them.
        sim::CollectiveTimer timer(options.cluster, options.network, true);
        const std::optional<sim::SimAlgorithm> algorithm = sim::parse_sim_algorithm_or_auto(options.algorithm);
        std::vector<sim::CollectiveTiming> out;
        for (size_t i : families[f]) {
          const TimingQuery& q = queries[i];
          models::CommGroup group{"replay", 1, 1, {q.ranks}};
          out.push_back(timer.time(q.collective, q.bytes, group, algorithm));
        }
        return out;
      },
      std::max(1, options.jobs),
      [&](size_t f, const sim::Isolated<std::vector<sim::CollectiveTiming>>& result) {
        if (!result.reply) {
          if (!failure) failure.emplace(result.code, result.error);
          return;
        }
        for (size_t k = 0; k < families[f].size(); ++k) timings[families[f][k]] = result.reply->at(k);
        done += families[f].size();
        progress.step(done);
      });
  if (failure) throw *failure;
  return timings;
}

}  // namespace

// "1 rank", "63 ranks".
std::string count_text(size_t ranks) { return fmt::format("{} rank{}", ranks, ranks == 1 ? "" : "s"); }

std::string_view name(ReplayState state) {
  switch (state) {
    case ReplayState::kCompleted:
      return "completed";
    case ReplayState::kStuck:
      return "stuck";
    case ReplayState::kDesync:
      return "desync";
    case ReplayState::kStalled:
      return "stalled";
    case ReplayState::kNotReached:
      return "not_reached";
  }
  return "?";
}

namespace {

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

// The result's header: what was read, the flight-recorder analysis of it, and the cluster.
ReplayResult result_header(const std::vector<FrDump>& dumps, const ReplayOptions& options) {
  ReplayResult result;
  result.analysis = analyze(dumps);
  result.ranks = static_cast<int>(dumps.size());
  result.groups = result.analysis.groups;
  result.entries = result.analysis.entries;
  result.version = dumps.front().version;
  result.comm_lib_version = dumps.front().comm_lib_version;
  result.cluster = models::describe(options.cluster);
  return result;
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

// Where the ranks stop agreeing: ops some dumps reached but that never ran.
struct Blocked {
  std::vector<size_t> ops;         // ops a rank is stuck at, in the order of the first dump in each
  std::map<size_t, size_t> op_of;  // dump -> the op it waits in
};

// Finds the op each unfinished dump waits in.
Blocked find_blocked(const Built& built, const Replayed& logic) {
  Blocked blocked;
  for (size_t d = 0; d < built.per_rank.size(); ++d) {
    if (logic.position[d] < built.per_rank[d].size()) {
      const size_t op = built.per_rank[d][logic.position[d]].op;
      blocked.op_of[d] = op;
      if (std::find(blocked.ops.begin(), blocked.ops.end(), op) == blocked.ops.end()) blocked.ops.push_back(op);
    }
  }
  return blocked;
}

// The culprits of a blocked op: follow each missing rank to where it waits, until a rank that
// has nothing more recorded (it never came) or a cycle.
std::vector<int> culprits_of(const Built& built, const Replayed& logic, const Blocked& blocked, size_t op) {
  std::set<int> culprits;
  std::set<size_t> visited;
  std::deque<size_t> todo{op};
  while (!todo.empty()) {
    const size_t o = todo.front();
    todo.pop_front();
    if (!visited.insert(o).second) continue;
    std::set<size_t> here(logic.arrived[o].begin(), logic.arrived[o].end());
    for (int r : built.ops[o].ranks) {
      auto it = built.dump_of.find(r);
      if (it == built.dump_of.end()) {  // no dump: the rank crashed (or was killed) before it could write one
        culprits.insert(r);
        continue;
      }
      const size_t d = it->second;
      if (here.count(d) > 0 || !required(built, d, o)) continue;
      auto waits = blocked.op_of.find(d);
      if (waits == blocked.op_of.end()) {
        culprits.insert(r);
      } else {
        todo.push_back(waits->second);
      }
    }
  }
  return std::vector<int>(culprits.begin(), culprits.end());
}

// A blocked op: who waits in it, who never came, who is to blame, and who would go on without them.
struct BlockedInfo {
  size_t op;
  std::vector<int> missing, waiting, culprits;
  std::vector<int> survivors;  // its ranks less the culprits and the missing
};

// The ranks of `ranks`' model-parallel replicas: the closure over the tensor-, pipeline- and
// context-parallel groups the dumps declare (Megatron's TENSOR_MODEL_PARALLEL_GROUP, ..., tandem's
// "tp", "pp", "cp"). A data-parallel job survives the loss of a rank only by dropping its whole
// replica: the rank's TP and PP peers hold shards that no other replica can stand in for.
bool model_parallel(std::string_view desc) {
  std::string upper(desc);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper.find("DATA") != std::string::npos || upper.find("EXPERT") != std::string::npos) return false;
  // tandem's own: "tp", "cp", and the pipeline pairs "ppS-T".
  if (upper == "TP" || upper == "CP") return true;
  if (upper.rfind("PP", 0) == 0 && (upper.size() == 2 || std::isdigit(static_cast<unsigned char>(upper[2])))) return true;
  return upper.find("TENSOR_MODEL_PARALLEL") != std::string::npos ||
         upper.find("PIPELINE_MODEL_PARALLEL") != std::string::npos ||
         upper.find("CONTEXT_PARALLEL") != std::string::npos;
}

std::vector<int> replicas_of(const std::vector<FrDump>& dumps, const std::vector<int>& ranks) {
  std::map<int, std::set<int>> peers;  // rank -> its model-parallel peers
  for (const FrDump& dump : dumps) {
    for (const FrGroup& g : dump.groups) {
      if (!model_parallel(g.desc)) continue;
      for (int r : g.ranks) peers[r].insert(g.ranks.begin(), g.ranks.end());
    }
  }
  std::set<int> replica(ranks.begin(), ranks.end());
  std::vector<int> todo(ranks.begin(), ranks.end());
  while (!todo.empty()) {
    const int r = todo.back();
    todo.pop_back();
    for (int peer : peers[r]) {
      if (replica.insert(peer).second) todo.push_back(peer);
    }
  }
  return {replica.begin(), replica.end()};
}

// Describes each blocked op (BlockedInfo) and records its waiting and missing ranks on the op.
std::vector<BlockedInfo> describe_blocked(Built& built, const Replayed& logic, const Blocked& blocked) {
  std::vector<BlockedInfo> infos;
  for (size_t op : blocked.ops) {
    BlockedInfo info{op, {}, {}, {}, {}};
    std::set<size_t> here(logic.arrived[op].begin(), logic.arrived[op].end());
    for (size_t d : logic.arrived[op]) info.waiting.push_back(built.rank_of[d]);
    std::sort(info.waiting.begin(), info.waiting.end());
    ReplayOp& o = built.ops[op];
    for (int r : o.ranks) {
      auto it = built.dump_of.find(r);
      if (it == built.dump_of.end() || (here.count(it->second) == 0 && required(built, it->second, op))) {
        info.missing.push_back(r);
      }
    }
    info.culprits = culprits_of(built, logic, blocked, op);
    o.waiting = info.waiting;
    o.missing = info.missing;
    for (int r : o.ranks) {
      if (!std::binary_search(info.culprits.begin(), info.culprits.end(), r) &&
          !std::binary_search(info.missing.begin(), info.missing.end(), r)) {
        info.survivors.push_back(r);
      }
    }
    infos.push_back(std::move(info));
  }
  return infos;
}

// The simulated timings of ops on sets of ranks, as the replay asked for them.
struct Timings {
  std::map<std::pair<size_t, std::vector<int>>, size_t> index;  // (op, ranks) -> timings
  std::vector<sim::CollectiveTiming> timings;
  std::optional<sim::CollectiveTiming> find(size_t op, const std::vector<int>& ranks) const {
    auto it = index.find({op, ranks});
    if (it == index.end()) return std::nullopt;
    return timings[it->second];
  }
};

// Simulates every op that ran on its ranks, and every blocked op on its ranks and on its survivors.
Timings time_ops(const ReplayOptions& options, const std::vector<ReplayOp>& ops, const Replayed& logic,
                 const std::vector<BlockedInfo>& infos) {
  Timings out;
  std::vector<TimingQuery> queries;
  auto ask = [&](size_t op, const std::vector<int>& ranks) {
    if (!ops[op].simulated || ranks.size() < 2) return;
    if (out.index.try_emplace({op, ranks}, queries.size()).second) {
      queries.push_back(TimingQuery{ops[op].collective, ops[op].bytes, ranks});
    }
  };
  for (size_t op : logic.order) ask(op, ops[op].ranks);
  for (const BlockedInfo& info : infos) {
    ask(info.op, ops[info.op].ranks);
    ask(info.op, info.survivors);
  }
  PhaseProgress progress(options, "simulating distinct collectives", queries.size());
  out.timings = time_queries(options, queries, progress);
  return out;
}

// The replayed clock, per dump: when its rank is free again and the index of its next op. A rank
// reaches its next op when it is free plus the time it recorded before that op.
struct RankClock {
  explicit RankClock(const Built& ops) : built(ops), free_at(ops.per_rank.size(), 0.0), next(ops.per_rank.size(), 0) {}
  double arrival(size_t d) const { return free_at[d] + static_cast<double>(built.gaps_ns[d][next[d]]) / 1e9; }
  const Built& built;
  std::vector<double> free_at;
  std::vector<size_t> next;
};

// Runs the completed ops on the replayed clock: an op starts when its last member arrives.
void run_completed(Built& built, const Replayed& logic, const Timings& timings, RankClock& clock,
                   ReplayResult& result, PhaseProgress& progress) {
  size_t done = 0;
  for (size_t op : logic.order) {
    progress.step(++done);
    ReplayOp& o = built.ops[op];
    double start = 0;
    for (size_t d : logic.arrived[op]) start = std::max(start, clock.arrival(d));
    if (auto t = timings.find(op, o.ranks)) {
      o.predicted_s = t->seconds;
      o.algorithm = std::string(sim::name(t->algorithm));
      o.busbw_GBps = t->busbw_GBps;
    }
    o.state = ReplayState::kCompleted;
    o.start_s = start;
    o.end_s = start + o.predicted_s;
    for (size_t d : logic.arrived[op]) {
      result.slices.push_back({built.rank_of[d], op, clock.arrival(d), o.end_s});
      clock.free_at[d] = o.end_s;
      ++clock.next[d];
    }
    result.end_s = std::max(result.end_s, o.end_s);
    if (o.simulated) {
      result.predicted_comm_s += o.predicted_s;
      if (o.recorded_s) {
        result.recorded_comm_s += *o.recorded_s;
        ++result.ops_with_recorded;
      }
    }
  }
}

// A desync: the ranks that hold the majority's op (most ranks; in a tie, the lowest rank's), the
// one meant, and the others, its culprits.
struct DesyncSides {
  std::vector<int> majority, culprits;
};

// Splits the ranks waiting in `op` by the op each of them holds.
DesyncSides desync_sides(const Built& built, const Replayed& logic, const Signatures& signatures,
                         const RankClock& clock, size_t op) {
  std::map<uint32_t, std::vector<int>> holders;
  for (size_t d : logic.arrived[op]) holders[signatures[d][clock.next[d]]].push_back(built.rank_of[d]);
  const std::vector<int>* majority = nullptr;
  for (auto& [sig, ranks] : holders) {
    std::sort(ranks.begin(), ranks.end());
    if (!majority || ranks.size() > majority->size() ||
        (ranks.size() == majority->size() && ranks.front() < majority->front())) {
      majority = &ranks;
    }
  }
  DesyncSides sides{*majority, {}};
  for (const auto& [sig, ranks] : holders) {
    if (&ranks != majority) sides.culprits.insert(sides.culprits.end(), ranks.begin(), ranks.end());
  }
  std::sort(sides.culprits.begin(), sides.culprits.end());
  return sides;
}

// Places one blocked op on the clock and says why it never ran: stuck, desync or stalled.
void judge_blocked(Built& built, const Replayed& logic, const Signatures& signatures, const Timings& timings,
                   const RankClock& clock, BlockedInfo& info) {
  ReplayOp& o = built.ops[info.op];
  double at = 0;
  for (size_t d : logic.arrived[info.op]) at = std::max(at, clock.arrival(d));
  o.start_s = o.end_s = at;
  std::set<uint32_t> seen;
  for (size_t d : logic.arrived[info.op]) seen.insert(signatures[d][clock.next[d]]);
  if (!info.missing.empty()) {
    o.state = ReplayState::kStuck;
    const bool chained = info.culprits != info.missing;
    o.detail = fmt::format("{} {} in {} #{} of group {} ({}) for {}, which never reached it",
                           ranks_phrase(info.waiting), info.waiting.size() == 1 ? "waits" : "wait", o.profiling_name,
                           o.sequence, o.label, o.group_desc, ranks_phrase(info.missing));
    if (chained && !info.culprits.empty()) {
      o.detail += fmt::format(" (the missing ranks are stuck themselves, behind {})", ranks_phrase(info.culprits));
    }
  } else if (seen.size() > 1) {
    o.state = ReplayState::kDesync;
    const DesyncSides sides = desync_sides(built, logic, signatures, clock, info.op);
    info.culprits = sides.culprits;
    o.detail = fmt::format(
        "every member reached {} #{} of group {} ({}), but {} with another op than {} (its type, "
        "sizes or dtype differ): a desync, which no recovery policy fixes",
        o.profiling_name, o.sequence, o.label, o.group_desc, ranks_phrase(info.culprits), ranks_phrase(sides.majority));
  } else {
    o.state = ReplayState::kStalled;
    std::vector<int> not_done;
    for (int r : info.waiting) {
      if (!std::binary_search(o.completed.begin(), o.completed.end(), r)) not_done.push_back(r);
    }
    o.detail = fmt::format(
        "every member reached {} #{} of group {} ({}), but it never completed on {}: stalled "
        "inside the collective (a link, a NIC, or a rank stuck in the kernel)",
        o.profiling_name, o.sequence, o.label, o.group_desc, ranks_phrase(not_done));
    if (o.completed.size() > 0) info.culprits = not_done;
  }
  if (auto t = timings.find(info.op, o.ranks)) {
    o.predicted_s = t->seconds;
    o.algorithm = std::string(sim::name(t->algorithm));
    o.busbw_GBps = t->busbw_GBps;
  }
}

// The watchdog at the first divergence: --watchdog, else the longest timeout its waiting ranks
// recorded, else 600 s.
double watchdog_at(const Built& built, const Replayed& logic, const RankClock& clock, const ReplayOptions& options,
                   size_t op) {
  return options.watchdog_s.value_or([&] {
    int64_t timeout_ms = 0;
    for (size_t d : logic.arrived[op]) {
      timeout_ms = std::max(timeout_ms, built.per_rank[d][clock.next[d]].entries.back()->timeout_ms);
    }
    return timeout_ms > 0 ? static_cast<double>(timeout_ms) / 1e3 : 600.0;
  }());
}

// Says in words how a recovery at the blocked op `o` ended.
std::string recovery_detail(const ReplayRecovery& rec, const ReplayOp& o, const BlockedInfo& first) {
  const double watchdog = rec.watchdog_s;
  switch (rec.outcome) {
    case Outcome::kRecoveredShrink:
      return fmt::format(
          "the watchdog fires after {} s; the group is rebuilt without {} ({} on) and "
          "{} #{} runs again in {}",
          watchdog, ranks_phrase(rec.dropped_ranks),
          count_text(o.ranks.size() - rec.dropped_ranks.size()) +
              (o.ranks.size() - rec.dropped_ranks.size() == 1 ? " goes" : " go"),
          o.profiling_name, o.sequence, duration_text(rec.rerun_s));
    case Outcome::kRecoveredReroute:
      return fmt::format(
          "the watchdog fires after {} s; the communicator is rebuilt around the failed link "
          "(which the dumps do not name; timed at the fault-free routes) and {} #{} runs "
          "again in {}",
          watchdog, o.profiling_name, o.sequence, duration_text(rec.rerun_s));
    default: {
      std::string why;
      if (o.state == ReplayState::kDesync) {
        why = "the ranks called different collectives: fix the program (no policy recovers a desync)";
      } else if (rec.action == RecoveryAction::kReroute) {
        why = o.state == ReplayState::kStuck ? "reroute cannot help: a rank never arrived, no link failed"
                                             : "rerouting once did not help";
      } else if (rec.action == RecoveryAction::kShrink) {
        why = first.culprits.empty() ? "shrink has no rank to drop: every rank is in the op" : "shrink did not help";
      } else {
        why = "the policy is to abort";
      }
      return o.state == ReplayState::kDesync
                 ? fmt::format("the watchdog fires after {} s, every rank dumps, the job aborts: {}", watchdog, why)
                 : fmt::format("the watchdog fires after {} s, every rank dumps, the job aborts ({})", watchdog, why);
    }
  }
}

// What `action` would have done at the first divergence: core/recovery.h's run_resilient, whose
// first attempt fails as the dumps say and whose later ones run on the simulator.
ReplayRecovery recover(RecoveryAction action, double watchdog, const ReplayOp& o, const BlockedInfo& first,
                       const Timings& timings, const std::vector<int>& replicas) {
  ReplayRecovery rec;
  rec.action = action;
  rec.watchdog_s = watchdog;
  RecoveryPolicy policy;
  policy.retry_max = 0;
  policy.watchdog_s = watchdog;
  policy.action = action;
  std::string dumped;
  const CollectiveOutcome outcome = run_resilient(
      policy, o.ranks, o.start_s,
      [&](const AttemptPlan& plan) {
        AttemptResult a;
        if (plan.attempt == 0) {
          a.status = o.state == ReplayState::kDesync ? AttemptResult::Status::kDesync : AttemptResult::Status::kStuck;
          a.failed_ranks =
              o.state == ReplayState::kStuck || o.completed.size() > 0 ? first.culprits : std::vector<int>{};
          if (action == RecoveryAction::kShrink && !a.failed_ranks.empty()) {
            a.failed_ranks.clear();  // the replicas' members in this op
            std::set_intersection(replicas.begin(), replicas.end(), o.ranks.begin(), o.ranks.end(),
                                  std::back_inserter(a.failed_ranks));
          }
          a.link_fault = o.state == ReplayState::kStalled;
          // A desync hangs in NCCL too (mismatched sizes never finish): the watchdog sees it.
          if (o.state == ReplayState::kDesync) a.seconds = watchdog;
          a.message = o.state == ReplayState::kStuck ? fmt::format("{} never arrived", ranks_phrase(first.culprits))
                                                     : std::string(name(o.state));
          return a;
        }
        const std::optional<sim::CollectiveTiming> t = timings.find(first.op, plan.ranks);
        a.status = AttemptResult::Status::kOk;
        a.seconds = plan.ranks.size() < 2 ? 0.0 : t ? t->seconds : o.predicted_s;
        rec.rerun_s = a.seconds;
        return a;
      },
      [&](const std::string& reason) { dumped = reason; });
  rec.outcome = outcome.outcome;
  rec.attempts = outcome.attempts;
  rec.dropped_ranks = outcome.dropped_ranks;
  rec.end_s = o.start_s + outcome.seconds;
  rec.detected_s = o.start_s + watchdog;
  rec.detail = recovery_detail(rec, o, first);
  return rec;
}

// Nothing stuck, but slow: a rank the others keep waiting for (it reaches most of the ops it takes
// part in last, by more than kStragglerShare of the recorded communication time in all: in a
// training step's dumps a rank is in its own groups' ops only), named with its slowdown (its time between
// ops against the others' median); else ops that took kSlowRatio times the simulator's prediction
// on every rank alike, which the dumps cannot pin on one rank (a ring is as slow as its slowest
// hop, and every rank records the same duration). "" when neither.
constexpr double kStragglerShare = 0.1;
constexpr double kSlowRatio = 1.5;

std::string slowdown(const Built& built, const Replayed& logic, const ReplayResult& result) {
  std::map<int, double> waited_for_s;  // rank -> how long the others waited for it, summed
  std::map<int, int> last_count;       // rank -> ops it reached last
  std::map<int, int> shared_count;     // rank -> ops of two or more ranks it took part in
  for (size_t op : logic.order) {
    std::vector<std::pair<int64_t, int>> arrivals;  // (time_created_ns, rank)
    for (size_t d : logic.arrived[op]) {
      for (const RankOp& r : built.per_rank[d]) {
        if (r.op == op) arrivals.emplace_back(r.entries.front()->time_created_ns, built.rank_of[d]);
      }
    }
    if (arrivals.size() < 2) continue;
    for (const auto& arrival : arrivals) ++shared_count[arrival.second];
    std::sort(arrivals.begin(), arrivals.end());
    const int64_t median_ns = arrivals[(arrivals.size() - 1) / 2].first;  // of the others (a pair: the first)
    const auto& last = arrivals.back();
    if (last.first > median_ns) {
      waited_for_s[last.second] += static_cast<double>(last.first - median_ns) / 1e9;
      ++last_count[last.second];
    }
  }
  const auto worst = std::max_element(waited_for_s.begin(), waited_for_s.end(),
                                      [](const auto& a, const auto& b) { return a.second < b.second; });
  if (worst != waited_for_s.end() && result.recorded_comm_s > 0 &&
      worst->second > kStragglerShare * result.recorded_comm_s && 2 * last_count[worst->first] > shared_count[worst->first]) {
    // Its time between ops against the others' median.
    std::vector<double> others;
    double its = 0;
    for (size_t d = 0; d < built.gaps_ns.size(); ++d) {
      double total = 0;
      for (int64_t gap : built.gaps_ns[d]) total += static_cast<double>(gap);
      if (built.rank_of[d] == worst->first) {
        its = total;
      } else {
        others.push_back(total);
      }
    }
    const double typical = others.empty() ? 0 : median(others);
    return fmt::format("rank {} is a straggler: it reached {} of its {} ops last and the others waited {} for it{}",
                       worst->first, last_count[worst->first], shared_count[worst->first], duration_text(worst->second),
                       typical > 0 ? fmt::format(" (its time between ops is {:.1f}x the others' median)", its / typical)
                                   : std::string());
  }
  // Uniformly slow: recorded against predicted, per op.
  std::vector<double> ratios;
  int64_t first_slow = -1;
  for (size_t op : logic.order) {
    const ReplayOp& o = built.ops[op];
    if (!o.recorded_s || !o.simulated || o.predicted_s <= 0) continue;
    const double ratio = *o.recorded_s / o.predicted_s;
    ratios.push_back(ratio);
    if (ratio >= kSlowRatio && first_slow < 0) first_slow = o.sequence;
  }
  if (ratios.empty() || first_slow < 0) return "";
  std::vector<double> slow;
  for (double r : ratios) {
    if (r >= kSlowRatio) slow.push_back(r);
  }
  return fmt::format(
      "{} of {} ops (from #{} on) took {:.1f}x the predicted time on every rank alike: something in their path is slow "
      "(a straggler or a degraded link); every rank records the same duration, so the dumps cannot name the rank",
      slow.size(), ratios.size(), first_slow, median(slow));
}

// Moves the blocked op `tandem fr analyze` leads with to the front of `infos` (the first
// divergence, which the verdict, the policies and the report start from), with the analysis'
// culprits: the root cause, the ranks the waits lead to. One answer from both commands. Without a
// match (the analysis found no wait, or another op), the first blocked op stays first.
void lead_with_the_analysis(const Built& built, std::vector<BlockedInfo>& infos, const FrAnalysis& analysis) {
  if (analysis.findings.empty() || analysis.root_ranks.empty()) return;
  const FrFinding& f = analysis.findings.front();
  for (auto it = infos.begin(); it != infos.end(); ++it) {
    const ReplayOp& o = built.ops[it->op];
    if (o.group != f.group || o.p2p != f.p2p) continue;
    const bool same = f.kind == FrFindingKind::kMissingDumps
                          ? std::includes(it->missing.begin(), it->missing.end(), f.missing_ranks.begin(),
                                          f.missing_ranks.end())
                          : o.sequence == f.sequence;
    if (!same) continue;
    it->culprits = analysis.culprit_ranks;
    std::rotate(infos.begin(), it, std::next(it));
    return;
  }
}

// The verdict: the first divergence (its culprits, and what each policy would have done there),
// or that the replay ran to the end.
void judge_replay(const std::vector<FrDump>& dumps, const Built& built, const Replayed& logic, const Timings& timings,
                  const RankClock& clock, std::vector<BlockedInfo>& infos, const ReplayOptions& options,
                  ReplayResult& result) {
  if (infos.empty()) {
    result.verdict = fmt::format(
        "the replay ran to the end: {} ops of {} ranks, none stuck; predicted "
        "communication {}",
        logic.order.size(), result.ranks, duration_text(result.predicted_comm_s));
    if (const std::string slow = slowdown(built, logic, result); !slow.empty()) result.verdict += "; " + slow;
    return;
  }
  lead_with_the_analysis(built, infos, result.analysis);
  const BlockedInfo& first = infos.front();
  const ReplayOp& o = built.ops[first.op];
  result.culprit_ranks = first.culprits;
  result.verdict = o.detail;
  const double watchdog = watchdog_at(built, logic, clock, options, first.op);
  // Shrink drops the culprits' whole model-parallel replicas, not the culprits alone.
  const std::vector<int> replicas = replicas_of(dumps, first.culprits);
  for (RecoveryAction action : options.recoveries) {
    ReplayRecovery rec = recover(action, watchdog, o, first, timings, replicas);
    const bool op_leaves = std::includes(replicas.begin(), replicas.end(), o.ranks.begin(), o.ranks.end());
    if (action == RecoveryAction::kShrink && !first.culprits.empty() && op_leaves &&
        static_cast<int>(replicas.size()) < result.ranks) {
      // The stuck op's whole group sits in the replicas that leave: nothing of it is re-run, the
      // other replicas go on without them (a smaller data-parallel world).
      rec.outcome = Outcome::kRecoveredShrink;
      rec.dropped_ranks = replicas;
      rec.rerun_s = 0;
      rec.end_s = rec.detected_s;
      rec.detail = fmt::format(
          "the watchdog fires after {} s; {}'s model-parallel replica{} (ranks {}, with {} #{} of group {}) leave{} the job: "
          "{} of {} ranks go on without {}",
          watchdog, ranks_phrase(first.culprits), first.culprits.size() == 1 ? "" : "s", rank_ranges(replicas),
          o.profiling_name, o.sequence, o.label, first.culprits.size() == 1 ? "s" : "",
          result.ranks - static_cast<int>(replicas.size()), result.ranks, first.culprits.size() == 1 ? "it" : "them");
    }
    if (action == RecoveryAction::kShrink && rec.outcome == Outcome::kRecoveredShrink && !op_leaves &&
        replicas.size() > first.culprits.size()) {
      rec.detail += fmt::format("; {}'s model-parallel replica{} (ranks {}) leave{} the job with {}: {} of {} ranks go on",
                                ranks_phrase(first.culprits), first.culprits.size() == 1 ? "" : "s",
                                rank_ranges(replicas), first.culprits.size() == 1 ? "s" : "",
                                first.culprits.size() == 1 ? "it" : "them", result.ranks - static_cast<int>(replicas.size()),
                                result.ranks);
    }
    if (action == RecoveryAction::kShrink && rec.outcome == Outcome::kAborted && !first.culprits.empty() &&
        replicas.size() > first.culprits.size() && static_cast<int>(replicas.size()) >= result.ranks) {
      rec.detail = fmt::format(
          "the watchdog fires after {} s, every rank dumps, the job aborts: shrink cannot help, {} sit in every "
          "model-parallel replica (with their tensor- and pipeline-parallel peers: ranks {}), so none is left to go on",
          watchdog, ranks_phrase(first.culprits), rank_ranges(replicas));
    }
    result.recoveries.push_back(std::move(rec));
  }
}

// Stuck ranks' slices: from their arrival to when the watchdog fires (or the replay's end).
void add_stuck_slices(const Built& built, const Replayed& logic, const RankClock& clock,
                      const std::vector<BlockedInfo>& infos, ReplayResult& result) {
  const double stop = result.recoveries.empty() ? (infos.empty() ? result.end_s : built.ops[infos.front().op].start_s)
                                                : result.recoveries.front().detected_s;
  for (const BlockedInfo& info : infos) {
    for (size_t d : logic.arrived[info.op]) {
      const double at = clock.arrival(d);
      result.slices.push_back({built.rank_of[d], info.op, at, std::max(at, stop)});
    }
  }
  std::stable_sort(result.slices.begin(), result.slices.end(), [](const ReplaySlice& a, const ReplaySlice& b) {
    return std::tie(a.rank, a.start_s) < std::tie(b.rank, b.start_s);
  });
}

// Moves the ops into the result in replay order (completed by start time, then blocked, then the
// rest, not reached) and renumbers the slices and the first divergence to match.
void place_ops(Built& built, const Replayed& logic, const std::vector<BlockedInfo>& infos, ReplayResult& result) {
  std::vector<ReplayOp>& ops = built.ops;
  std::vector<size_t> order = logic.order;
  for (const BlockedInfo& info : infos) order.push_back(info.op);
  std::vector<bool> placed(ops.size(), false);
  for (size_t op : order) placed[op] = true;
  for (size_t op = 0; op < ops.size(); ++op) {
    if (!placed[op]) order.push_back(op);
  }
  std::vector<size_t> new_index(ops.size());
  for (size_t i = 0; i < order.size(); ++i) new_index[order[i]] = i;
  for (size_t op : order) result.ops.push_back(std::move(ops[op]));
  for (ReplaySlice& s : result.slices) s.op = new_index[s.op];
  if (!infos.empty()) result.first_divergence = new_index[infos.front().op];
}

}  // namespace

ReplayResult replay(const std::vector<FrDump>& input, const ReplayOptions& options) {
  std::vector<FrDump> sorted;
  Memberships memberships;
  PhaseProgress(options, "checking dumps", input.size());
  const std::vector<FrDump>& dumps = sorted_and_checked(input, sorted, memberships);
  PhaseProgress(options, "analyzing (fr analyze)", dumps.size());
  ReplayResult result = result_header(dumps, options);
  PhaseProgress building(options, "building ops, dumps", dumps.size());
  Built built = build_ops(dumps, memberships, options.recorded_gaps, building);
  describe_ops(built, options.cluster.nodes * options.cluster.gpus_per_node);
  PhaseProgress comparing(options, "comparing ops across ranks, dumps", dumps.size());
  const Signatures signatures = signatures_of(built, comparing);
  PhaseProgress matching(options, "matching ops", built.ops.size());
  const Replayed logic = replay_logic(built, signatures, matching);
  std::vector<BlockedInfo> infos = describe_blocked(built, logic, find_blocked(built, logic));
  const Timings timings = time_ops(options, built.ops, logic, infos);

  RankClock clock(built);
  PhaseProgress clocking(options, "replaying ops", logic.order.size());
  run_completed(built, logic, timings, clock, result, clocking);
  for (BlockedInfo& info : infos) judge_blocked(built, logic, signatures, timings, clock, info);
  // The blocked ops in the order their last waiting rank arrived.
  std::stable_sort(infos.begin(), infos.end(), [&](const BlockedInfo& a, const BlockedInfo& b) {
    return built.ops[a.op].start_s < built.ops[b.op].start_s;
  });
  judge_replay(dumps, built, logic, timings, clock, infos, options, result);
  add_stuck_slices(built, logic, clock, infos, result);
  place_ops(built, logic, infos, result);
  return result;
}

// ---- reports ------------------------------------------------------------------------------------

namespace {

std::string us_text(double seconds) { return fmt::format("{:.1f}", seconds * 1e6); }

std::string op_row(const ReplayOp& op) {
  const std::string recorded = op.recorded_s ? us_text(*op.recorded_s) : "-";
  const std::string predicted = op.simulated ? us_text(op.predicted_s) : "-";
  const std::string ratio = op.recorded_s && op.simulated && *op.recorded_s > 0
                                ? fmt::format("{:.2f}", op.predicted_s / *op.recorded_s)
                                : "-";
  return fmt::format("{:>10} {:>5} {:<28} {:>10} {:>6} {:<11} {:>13} {:>13} {:>6}  {}\n", op.label, op.sequence,
                     op.profiling_name.substr(0, 28), op.bytes > 0 ? format_size(op.bytes) : "-", op.ranks.size(),
                     name(op.state), predicted, recorded, ratio,
                     op.algorithm.empty() ? op.note
                                          : fmt::format("{} {:.1f} GB/s{}", op.algorithm, op.busbw_GBps,
                                                        op.note.empty() ? "" : "; " + op.note));
}

}  // namespace

std::string format_text(const ReplayResult& r, size_t max_ops) {
  std::string out;
  out += fmt::format("Replay of {} dumps (flight recorder {}, {}): {} group{}, {} entries, rank r on GPU r of {}\n",
                     r.ranks, r.version, r.comm_lib_version.empty() ? "library unknown" : r.comm_lib_version, r.groups,
                     r.groups == 1 ? "" : "s", r.entries, r.cluster);
  out += fmt::format("Verdict: {}\n\n", r.verdict);
  // The ops shown: the last `max_ops` up to the first divergence, and every blocked one.
  const size_t stop = r.first_divergence.value_or(r.ops.size());
  size_t completed = 0;
  for (const ReplayOp& op : r.ops) completed += op.state == ReplayState::kCompleted ? 1 : 0;
  out += fmt::format("{:>10} {:>5} {:<28} {:>10} {:>6} {:<11} {:>13} {:>13} {:>6}  {}\n", "group", "seq", "op", "size",
                     "ranks", "state", "predicted us", "recorded us", "ratio", "simulated as");
  const size_t first_shown = completed > max_ops ? completed - max_ops : 0;
  if (first_shown > 0) out += fmt::format("   ... {} earlier ops (all in --json / --out)\n", first_shown);
  for (size_t i = first_shown; i < r.ops.size(); ++i) {
    const ReplayOp& op = r.ops[i];
    if (op.state == ReplayState::kNotReached) continue;
    out += op_row(op);
  }
  size_t not_reached = r.ops.size() - stop;
  for (size_t i = stop; i < r.ops.size(); ++i) not_reached -= r.ops[i].state != ReplayState::kNotReached ? 1 : 0;
  if (not_reached > 0) out += fmt::format("   ... {} ops behind the stuck ones, not reached\n", not_reached);
  out += fmt::format("\nCommunication, completed ops: predicted {}", duration_text(r.predicted_comm_s));
  if (r.ops_with_recorded > 0) {
    out += fmt::format(", recorded {} over the {} ops that carry a duration", duration_text(r.recorded_comm_s),
                       r.ops_with_recorded);
  }
  out += fmt::format("; replayed clock at the last completed op: {}\n", duration_text(r.end_s));
  for (size_t i = stop; i < r.ops.size(); ++i) {
    const ReplayOp& op = r.ops[i];
    if (op.state == ReplayState::kNotReached || op.state == ReplayState::kCompleted) continue;
    out += fmt::format("{} at {}: {}\n", name(op.state), duration_text(op.start_s), op.detail);
  }
  if (!r.recoveries.empty()) {
    out += "\nWhat a recovery policy would have done there:\n";
    for (const ReplayRecovery& rec : r.recoveries) {
      out += fmt::format("  {:<8} {:<18} at {:>10}: {}\n", name(rec.action), name(rec.outcome),
                         duration_text(rec.end_s), rec.detail);
    }
  }
  const std::vector<int>& fr = r.analysis.culprit_ranks;
  if (fr != r.culprit_ranks) {
    out += fmt::format("\nNote: the flight-recorder analysis names {}: {}\n",
                       fr.empty() ? std::string("no rank") : ranks_phrase(fr), r.analysis.verdict);
  } else {
    out += fmt::format("\nThe flight-recorder analysis agrees: {}\n", r.analysis.verdict);
  }
  return out;
}

json to_json(const ReplayResult& r) {
  json ops = json::array();
  for (const ReplayOp& op : r.ops) {
    ops.push_back({{"group", op.group},
                   {"label", op.label},
                   {"group_desc", op.group_desc},
                   {"p2p", op.p2p},
                   {"sequence", op.sequence},
                   {"profiling_name", op.profiling_name},
                   {"dtype", op.dtype},
                   {"bytes", op.bytes},
                   {"ranks", op.ranks},
                   {"joined", op.joined.size()},
                   {"state", std::string(name(op.state))},
                   {"simulated", op.simulated},
                   {"note", op.note},
                   {"predicted_us", op.predicted_s * 1e6},
                   {"recorded_us", op.recorded_s ? json(*op.recorded_s * 1e6) : json(nullptr)},
                   {"algorithm", op.algorithm},
                   {"busbw_GBps", op.busbw_GBps},
                   {"start_us", op.start_s * 1e6},
                   {"end_us", op.end_s * 1e6},
                   {"waiting", op.waiting},
                   {"missing", op.missing},
                   {"detail", op.detail}});
  }
  json recoveries = json::array();
  for (const ReplayRecovery& rec : r.recoveries) {
    recoveries.push_back({{"action", std::string(name(rec.action))},
                          {"outcome", std::string(name(rec.outcome))},
                          {"attempts", rec.attempts},
                          {"watchdog_s", rec.watchdog_s},
                          {"detected_us", rec.detected_s * 1e6},
                          {"end_us", rec.end_s * 1e6},
                          {"dropped_ranks", rec.dropped_ranks},
                          {"rerun_us", rec.rerun_s * 1e6},
                          {"detail", rec.detail}});
  }
  json slices = json::array();
  for (const ReplaySlice& s : r.slices) slices.push_back({s.rank, s.op, s.start_s * 1e6, s.end_s * 1e6});
  return {{"kind", "replay"},
          {"format_version", kReplayFormatVersion},
          {"ranks", r.ranks},
          {"groups", r.groups},
          {"entries", r.entries},
          {"version", r.version},
          {"comm_lib_version", r.comm_lib_version},
          {"cluster", r.cluster},
          {"verdict", r.verdict},
          {"culprit_ranks", r.culprit_ranks},
          {"first_divergence", r.first_divergence ? json(*r.first_divergence) : json(nullptr)},
          {"end_us", r.end_s * 1e6},
          {"predicted_comm_us", r.predicted_comm_s * 1e6},
          {"recorded_comm_us", r.recorded_comm_s * 1e6},
          {"ops_with_recorded", r.ops_with_recorded},
          {"ops", ops},
          {"slices", slices},
          {"recoveries", recoveries},
          {"analysis", json::parse(format_json(r.analysis))}};
}

std::string ops_csv(const ReplayResult& r) {
  std::string out =
      "group,sequence,p2p,op,dtype,bytes,ranks,state,predicted_us,recorded_us,algorithm,busbw_GBps,start_us\n";
  for (const ReplayOp& op : r.ops) {
    out +=
        fmt::format("{},{},{},{},{},{},{},{},{:.3f},{},{},{:.2f},{:.3f}\n", csv_field(op.group), op.sequence,
                    op.p2p ? 1 : 0, csv_field(op.profiling_name), op.dtype, op.bytes, op.ranks.size(), name(op.state),
                    op.predicted_s * 1e6, op.recorded_s ? fmt::format("{:.3f}", *op.recorded_s * 1e6) : "",
                    op.algorithm, op.busbw_GBps, op.start_s * 1e6);
  }
  return out;
}

}  // namespace tandem::app
