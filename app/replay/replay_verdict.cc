// The replay's verdict: why each blocked op never ran (stuck, desync or stalled) and which of them
// is the first divergence (the one `tandem fr analyze` leads with), with its culprits; or, where
// nothing is stuck, a straggler or a uniformly slow path, where the dumps show one.
#include <algorithm>
#include <iterator>
#include <map>
#include <string>

#include <fmt/format.h>

#include "app/replay/replay_internal.h"
#include "core/fr_analysis.h"
#include "core/text.h"

namespace tandem::app::replay_detail {
namespace {

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

}  // namespace

// Places one blocked op on the clock and says why it never ran: stuck, desync or stalled.
void judge_blocked(Built& built, const Replayed& logic, const Signatures& signatures, const Timings& timings,
                   const RankClock& clock, BlockedInfo& info) {
  ReplayOp& o = built.ops[info.op];
  o.start_s = o.end_s = clock.last_arrival(logic.arrived[info.op]);
  if (!info.missing.empty()) {
    o.state = ReplayState::kStuck;
    const bool chained = info.culprits != info.missing;
    o.detail = fmt::format("{} {} in {} #{} of group {} ({}) for {}, which never reached it",
                           ranks_phrase(info.waiting), info.waiting.size() == 1 ? "waits" : "wait", o.profiling_name,
                           o.sequence, o.label, o.group_desc, ranks_phrase(info.missing));
    if (chained && !info.culprits.empty()) {
      o.detail += fmt::format(" (the missing ranks are stuck themselves, behind {})", ranks_phrase(info.culprits));
    }
  } else if (ops_differ(signatures, logic.arrived[info.op], clock.next)) {
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
  timings.predict(info.op, o);
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
  result.culprit_ranks = first.culprits;
  result.verdict = built.ops[first.op].detail;
  result.recoveries = recoveries_at(dumps, built, logic, clock, timings, first, options, result.ranks);
}

}  // namespace tandem::app::replay_detail
