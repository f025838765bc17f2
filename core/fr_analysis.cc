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
//
// The pieces: fr_groups.cc gathers the dumps into groups, fr_collectives.cc and fr_p2p.cc check each
// stream, fr_waits.cc follows the waits to their root; this file orders what they found into the
// verdict and writes it as text and JSON.
#include "core/fr_analysis.h"
#include "core/fr_analysis_internal.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

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

// ---------------------------------------------------------------------------------------------
// Findings in reading order

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
