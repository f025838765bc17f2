// Faults rehearsed in a training step: a rank that hangs or crashes before its k-th collective in
// one of its communicators (TP, PP, DP / FSDP, CP, EP), issues another size there (a desync), or
// from there on works `factor` times slower (a straggler: it reaches every op late, its peers wait,
// and the lag spreads through the groups they share),
// played on the step's fault-free timeline (sim/training.h) and written down the way PyTorch's
// flight recorder would have, so that `tandem fr analyze` and `tandem replay` can be rehearsed on
// a 64-GPU hang before one happens.
//
// The rules: every rank issues its collectives in the order the fault-free timeline starts them
// (a p2p op between pipeline stages on both ends); a collective completes when every member has
// entered it with the same op; a rank that enters one that cannot complete waits there and issues
// nothing more (its CPU blocks at the next synchronisation soon after; the few asynchronous ops it
// may still enqueue are not modelled). The watchdog fires watchdog_s after the first rank began to
// wait; every live rank dumps (a crashed one cannot). Each communicator instance is a process group
// on its members, named by a job-wide counter as PyTorch names them ("0" is the default group),
// described by its kind ("tp", "pp0-1", "fsdp", ...).
#pragma once

#include <string>
#include <vector>

#include "core/faults.h"
#include "core/flight_recorder.h"
#include "core/fr_analysis.h"
#include "models/workload.h"
#include "sim/training.h"

namespace tandem::app {

struct StepRehearsal {
  std::vector<std::string> faults;  // each fault, in words
  std::vector<FrDump> dumps;        // every live rank's, at the watchdog
  std::vector<int> waiting_ranks;   // in a collective that cannot complete when the watchdog fires
  std::vector<int> dead_ranks;      // crashed: no dump
  double first_wait_s = -1;         // on the step's clock: when the first rank began to wait (-1: none)
  double watchdog_fires_s = -1;
  std::string first_stuck;          // "TP all_gather (nccl:all_gather #12 of group 9, tp)"
  double fault_free_end_s = 0;      // the fault-free step's end
  double end_s = 0;                 // where the last op ends with the faults (a straggler's lag included)
  FrAnalysis analysis;              // `tandem fr analyze` of the dumps
};

// The fault kinds a training step rehearses, and their list for messages. Link faults, transient
// failures and corrupt data are not (yet): they need the routes of every communicator's transfers
// and the step's data, which the step model does not keep.
bool rehearsed_in_training(FaultKind kind);
inline constexpr const char* kRehearsedInTraining = "rank_hang, rank_crash, desync and straggler";

// Whether a fault's group selector names a communicator kind: "pp" names every "ppS-T" pair group;
// any other selector names the kind exactly ("tp", "fsdp", "dp", "ep", "cp", "hsdp-shard", ...).
bool fault_group_matches(const std::string& selector, const std::string& group_kind);

// `program` and `timeline` are one layout's step (timeline: sim::TrainingRequest::keep_timeline, one
// slice per task); `gpus` its ranks; each fault with Fault::group and trigger.collective set. Throws Error(kInvalidArgument) when a fault's rank takes
// part in fewer collectives of that group than its trigger counts, or in none. Faults are rank
// faults of the kinds rehearsed_in_training names.
StepRehearsal rehearse_step(const models::StepProgram& program, const std::vector<sim::TimelineSlice>& timeline,
                            int gpus, const std::vector<Fault>& faults, double watchdog_s, size_t capacity);

}  // namespace tandem::app
