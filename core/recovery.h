// Recovery: what a run does when a collective fails, the same on every backend. A backend runs
// one *attempt* of a collective (all ranks, with the faults the injector says are active) and
// reports how it ended; run_resilient() applies the policy: retry with backoff, and when the
// watchdog fires or retries run out, dump every rank's recorder and abort, shrink (drop failed
// ranks, rebuild the schedule for the survivors, go on) or reroute (rebuild around a dead link or
// NIC). Every collective ends in a named Outcome: never a hang past the watchdog, never silently
// wrong data.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/fault_report.h"

namespace tandem {

enum class RecoveryAction : uint8_t { kAbort, kShrink, kReroute };
std::string_view name(RecoveryAction action);
RecoveryAction parse_recovery_action(std::string_view text);

struct RecoveryPolicy {
  int retry_max = 0;              // retries of a failed attempt (transient errors, flaps, corruption)
  double backoff_s = 0.001;       // before the first retry; doubled each time
  double watchdog_s = 30;         // a collective with no progress for this long is stuck
  RecoveryAction action = RecoveryAction::kAbort;  // when stuck or out of retries
  bool verify = true;             // check results (host: against a reference; corrupt is caught)
};

enum class Outcome : uint8_t { kCompleted, kCompletedAfterRetry, kRecoveredShrink, kRecoveredReroute, kAborted };
std::string_view name(Outcome outcome);
Outcome parse_outcome(std::string_view text);

// How one attempt ended.
struct AttemptResult {
  enum class Status : uint8_t {
    kOk,
    kFailed,    // an op failed (transient, dead link noticed): retryable
    kStuck,     // no progress: ranks missing (hang, crash) or transfers stalled; the watchdog fires
    kCorrupt,   // verification found wrong data: retryable
    kDesync,    // ranks disagree on the collective: not recoverable here
  };
  Status status = Status::kOk;
  double seconds = 0;             // the backend's clock spent in this attempt (to failure or end)
  std::vector<int> failed_ranks;  // stuck: the ranks that never arrived or died
  bool link_fault = false;        // the failure came from a link or NIC (reroute can help)
  std::optional<FaultReport> fault;  // what the backend saw (not kOk), as fields
  std::string message;            // and as words, for the report (fault->text())
};

// What the next attempt runs with.
struct AttemptPlan {
  int attempt = 0;
  std::vector<int> ranks;         // the participating ranks (all, or the survivors after a shrink)
  bool rerouted = false;          // link / NIC faults routed around
  double start_s = 0;             // the run's clock when the attempt starts
};

struct CollectiveOutcome {
  Outcome outcome = Outcome::kCompleted;
  double seconds = 0;             // total: attempts, backoffs, the watchdog's wait
  double fault_free_seconds = 0;  // filled by the caller when it knows it (the cost = the difference)
  int attempts = 0;
  std::vector<int> dropped_ranks; // shrink
  bool dumped = false;            // the watchdog or an error made every rank dump
  std::string detail;             // the backend's messages, joined
};

// Runs attempts until the collective completes or the policy gives up. `attempt` runs one attempt
// (it must return, never hang: a backend bounds a stuck attempt by policy.watchdog_s); `dump` is
// called once when the watchdog fires or an error aborts (every rank's recorder). `start_s` is the
// run's clock when the collective begins; `ranks` all participating ranks.
CollectiveOutcome run_resilient(const RecoveryPolicy& policy, std::vector<int> ranks, double start_s,
                                const std::function<AttemptResult(const AttemptPlan&)>& attempt,
                                const std::function<void(const std::string& reason)>& dump);

}  // namespace tandem
