#include "core/recovery.h"

#include <algorithm>
#include <array>

#include "core/error.h"

namespace tandem {
namespace {

constexpr std::array<std::pair<RecoveryAction, std::string_view>, 3> kActions{{
    {RecoveryAction::kAbort, "abort"},
    {RecoveryAction::kShrink, "shrink"},
    {RecoveryAction::kReroute, "reroute"},
}};

constexpr std::array<std::pair<Outcome, std::string_view>, 5> kOutcomes{{
    {Outcome::kCompleted, "completed"},
    {Outcome::kCompletedAfterRetry, "completed_after_retry"},
    {Outcome::kRecoveredShrink, "recovered_shrink"},
    {Outcome::kRecoveredReroute, "recovered_reroute"},
    {Outcome::kAborted, "aborted"},
}};

template <typename T, size_t N>
std::string_view lookup(const std::array<std::pair<T, std::string_view>, N>& table, T value) {
  for (const auto& [v, text] : table) {
    if (v == value) return text;
  }
  return "?";
}

template <typename T, size_t N>
std::optional<T> lookup(const std::array<std::pair<T, std::string_view>, N>& table, std::string_view text) {
  for (const auto& [v, name] : table) {
    if (name == text) return v;
  }
  return std::nullopt;
}

using Status = AttemptResult::Status;

void append(std::string& detail, const std::string& message) {
  if (message.empty()) return;
  if (!detail.empty()) detail += "; ";
  detail += message;
}

}  // namespace

std::string_view name(RecoveryAction action) { return lookup(kActions, action); }

RecoveryAction parse_recovery_action(std::string_view text) {
  if (auto action = lookup(kActions, text)) return *action;
  fail(ErrorCode::kInvalidArgument, "unknown recovery action '{}' (expected abort, shrink or reroute)", text);
}

std::string_view name(Outcome outcome) { return lookup(kOutcomes, outcome); }

Outcome parse_outcome(std::string_view text) {
  if (auto outcome = lookup(kOutcomes, text)) return *outcome;
  fail(ErrorCode::kInvalidArgument,
       "unknown outcome '{}' (expected completed, completed_after_retry, recovered_shrink, recovered_reroute or "
       "aborted)",
       text);
}

CollectiveOutcome run_resilient(const RecoveryPolicy& policy, std::vector<int> ranks, double start_s,
                                const std::function<AttemptResult(const AttemptPlan&)>& attempt,
                                const std::function<void(const std::string& reason)>& dump) {
  CollectiveOutcome out;
  AttemptPlan plan;
  plan.ranks = std::move(ranks);
  plan.start_s = start_s;
  int retries = 0;
  double backoff = policy.backoff_s;
  auto give_up = [&](const std::string& reason) {
    if (!out.dumped) dump(reason);
    out.dumped = true;
    out.outcome = Outcome::kAborted;
  };
  // Bounded: each retry uses one of retry_max, and a shrink or reroute happens at most once each
  // (a second stuck attempt after them aborts).
  for (;;) {
    const AttemptResult result = attempt(plan);
    ++out.attempts;
    out.seconds += result.seconds;
    plan.start_s += result.seconds;
    append(out.detail, result.message);
    if (result.status == Status::kOk) {
      if (!out.dropped_ranks.empty()) {
        out.outcome = Outcome::kRecoveredShrink;
      } else if (plan.rerouted) {
        out.outcome = Outcome::kRecoveredReroute;
      } else {
        out.outcome = retries > 0 ? Outcome::kCompletedAfterRetry : Outcome::kCompleted;
      }
      return out;
    }
    if (result.status == Status::kDesync) {
      give_up("desync: " + result.message);
      return out;
    }
    const bool retryable = result.status == Status::kFailed || result.status == Status::kCorrupt;
    if (retryable && retries < policy.retry_max) {
      ++retries;
      out.seconds += backoff;
      plan.start_s += backoff;
      backoff *= 2;
      ++plan.attempt;
      continue;
    }
    if (result.status == Status::kStuck) {
      // The watchdog saw no progress for watchdog_s: every rank dumps, then the action.
      out.seconds += policy.watchdog_s;
      plan.start_s += policy.watchdog_s;
      if (!out.dumped) dump("watchdog: " + result.message);
      out.dumped = true;
    }
    const bool can_shrink = policy.action == RecoveryAction::kShrink && !result.failed_ranks.empty() &&
                            out.dropped_ranks.empty() && result.failed_ranks.size() < plan.ranks.size();
    const bool can_reroute = policy.action == RecoveryAction::kReroute && result.link_fault && !plan.rerouted;
    if (can_shrink) {
      for (int r : result.failed_ranks) {
        plan.ranks.erase(std::remove(plan.ranks.begin(), plan.ranks.end(), r), plan.ranks.end());
      }
      out.dropped_ranks = result.failed_ranks;
      ++plan.attempt;
      continue;
    }
    if (can_reroute) {
      plan.rerouted = true;
      ++plan.attempt;
      continue;
    }
    give_up(result.message);
    return out;
  }
}

}  // namespace tandem
