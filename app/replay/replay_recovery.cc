// What each recovery policy would have done at the replay's first divergence: core/recovery.h's
// run_resilient, whose first attempt fails as the dumps say and whose later ones run on the
// simulator, after the watchdog fires; shrink drops the culprits' whole model-parallel replicas.
#include <algorithm>
#include <cctype>
#include <iterator>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

#include "app/replay/replay_internal.h"
#include "core/fr_analysis.h"
#include "core/text.h"

namespace tandem::app::replay_detail {
namespace {

// "1 rank", "63 ranks".
std::string count_text(size_t ranks) { return fmt::format("{} rank{}", ranks, ranks == 1 ? "" : "s"); }

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

}  // namespace

// What each of the options' policies would have done at the first divergence `first`.
std::vector<ReplayRecovery> recoveries_at(const std::vector<FrDump>& dumps, const Built& built, const Replayed& logic,
                                          const RankClock& clock, const Timings& timings, const BlockedInfo& first,
                                          const ReplayOptions& options, int job_ranks) {
  const ReplayOp& o = built.ops[first.op];
  const double watchdog = watchdog_at(built, logic, clock, options, first.op);
  // Shrink drops the culprits' whole model-parallel replicas, not the culprits alone.
  const std::vector<int> replicas = replicas_of(dumps, first.culprits);
  std::vector<ReplayRecovery> recoveries;
  for (RecoveryAction action : options.recoveries) {
    ReplayRecovery rec = recover(action, watchdog, o, first, timings, replicas);
    const bool op_leaves = std::includes(replicas.begin(), replicas.end(), o.ranks.begin(), o.ranks.end());
    if (action == RecoveryAction::kShrink && !first.culprits.empty() && op_leaves &&
        static_cast<int>(replicas.size()) < job_ranks) {
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
          job_ranks - static_cast<int>(replicas.size()), job_ranks, first.culprits.size() == 1 ? "it" : "them");
    }
    if (action == RecoveryAction::kShrink && rec.outcome == Outcome::kRecoveredShrink && !op_leaves &&
        replicas.size() > first.culprits.size()) {
      rec.detail += fmt::format("; {}'s model-parallel replica{} (ranks {}) leave{} the job with {}: {} of {} ranks go on",
                                ranks_phrase(first.culprits), first.culprits.size() == 1 ? "" : "s",
                                rank_ranges(replicas), first.culprits.size() == 1 ? "s" : "",
                                first.culprits.size() == 1 ? "it" : "them", job_ranks - static_cast<int>(replicas.size()),
                                job_ranks);
    }
    if (action == RecoveryAction::kShrink && rec.outcome == Outcome::kAborted && !first.culprits.empty() &&
        replicas.size() > first.culprits.size() && static_cast<int>(replicas.size()) >= job_ranks) {
      rec.detail = fmt::format(
          "the watchdog fires after {} s, every rank dumps, the job aborts: shrink cannot help, {} sit in every "
          "model-parallel replica (with their tensor- and pipeline-parallel peers: ranks {}), so none is left to go on",
          watchdog, ranks_phrase(first.culprits), rank_ranges(replicas));
    }
    recoveries.push_back(std::move(rec));
  }
  return recoveries;
}

}  // namespace tandem::app::replay_detail
