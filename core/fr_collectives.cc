// The collectives of one group checked across its members (see walk_collectives in
// fr_analysis_internal.h). A "unit" is everything one rank recorded under one collective_seq_id: one
// entry, or a coalesced group compared as a whole. At each sequence number the units the members
// hold are compared field by field in PyTorch's order (type, sizes, dtypes, state), a majority vote
// deciding which ranks are the culprits; members that never issued it are missing, and the ones
// holding it wait on them.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/fr_analysis_internal.h"
#include "core/torch_names.h"

namespace tandem::fr_detail {
namespace {

// ---------------------------------------------------------------------------------------------
// Text helpers

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

}  // namespace

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

}  // namespace tandem::fr_detail
