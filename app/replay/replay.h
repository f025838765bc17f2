// Replaying flight-recorder dumps in simulation (`tandem replay DIR`): the dumps of a job (ours,
// or PyTorch's from a real one) give each rank's sequence of collectives and p2p ops (types, sizes,
// dtypes, groups); the replay runs those sequences on a simulated cluster, rank r on GPU r: an op
// starts when every member of its group has reached it and lasts what the simulator predicts (each
// distinct op simulated once, in child processes), a rank's recorded time between two ops (its
// compute) kept. It reports the predicted time of every op against the recorded one, where the
// ranks stop agreeing (an op some members never reach, or reach with another op, or that never
// completed), which ranks the others wait for (following waits through other stuck ops), and what
// a recovery policy would have done there (core/recovery.h's run_resilient, as `tandem run`).
// docs/replay.md has the rules.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/flight_recorder.h"
#include "core/fr_analysis.h"
#include "core/recovery.h"
#include "core/types.h"
#include "models/cluster.h"
#include "sim/simulator.h"

namespace tandem::app {

struct ReplayOptions {
  models::ClusterSpec cluster;            // must have a GPU for every rank the dumps name
  sim::NetworkModel network;
  std::string algorithm = "auto";         // NCCL's tuner, or the one the job forced (NCCL_ALGO)
  std::vector<RecoveryAction> recoveries; // the policies to try where the ranks stop agreeing
  std::optional<double> watchdog_s;       // none: the stuck op's recorded timeout (timeout_ms)
  bool recorded_gaps = true;              // keep each rank's recorded time between its ops
  // Child processes simulating at once: 1, one child times every op; more, where every group has
  // over sim::kMaxOpByOpRanks ranks, one child per family of collectives (the same times).
  int jobs = 1;
  // Called as the replay goes (a phase, and how much of it is done: ops, dumps, collectives), for
  // a progress line; several times a second at most in long phases. None: silent.
  std::function<void(std::string_view phase, size_t done, size_t total)> progress;
};

enum class ReplayState : uint8_t {
  kCompleted,   // every member reached it and it ran
  kStuck,       // some members never reached it: the others wait in it
  kDesync,      // every member reached it, but not all with the same op (type, sizes, dtype)
  kStalled,     // every member reached it with the same op, but the dumps say it never completed
  kNotReached,  // behind a stuck op on every rank that has it
};
std::string_view name(ReplayState state);  // "completed", "stuck", "desync", "stalled", "not_reached"

// One logical op: a collective of a group at a sequence number (a coalesced group is one), or a
// p2p op, with what the ranks recorded of it and how the replay ran it.
struct ReplayOp {
  std::string group;             // the group's name (pg_config key)
  std::string group_desc;
  std::vector<int> group_ranks;  // its members (global ranks)
  std::string label;             // the name, or "2[5, 13]" where split groups reuse the name
  bool p2p = false;
  int64_t sequence = 0;          // collective_seq_id, or p2p_seq_id for p2p
  std::string profiling_name;    // as the lowest participating rank recorded it
  Collective collective = Collective::kAllReduce;  // what it is simulated as
  std::string dtype;             // PyTorch's name
  int64_t bytes = 0;             // nccl-tests' size (all_gather / reduce_scatter: the total)
  bool simulated = false;        // false: no model for this op (its time is 0); `note` says why
  std::string note;
  std::vector<int> ranks;        // who must take part (the group, or a p2p pair)
  std::vector<int> joined;       // who recorded it
  std::vector<int> completed;    // who recorded it completed
  std::optional<double> recorded_s;  // median recorded duration over the ranks that have one
  ReplayState state = ReplayState::kNotReached;
  std::vector<int> waiting;      // stuck / desync / stalled: the ranks in it
  std::vector<int> missing;      // stuck: the ranks that never reached it
  std::string detail;            // stuck / desync / stalled: what happened, in words
  double predicted_s = 0;        // the simulator's time for it (0 when not simulated)
  std::string algorithm;         // what the simulator ran (NCCL's tuner's choice)
  double busbw_GBps = 0;
  double start_s = 0;            // replayed clock: completed: when it started; stuck: when the
  double end_s = 0;              // last waiting rank arrived (start = end)
};

// A rank's part in an op, on the replayed clock.
struct ReplaySlice {
  int rank = 0;
  size_t op = 0;       // index into ReplayResult::ops
  double start_s = 0;  // when the rank reached it
  double end_s = 0;    // when it finished (stuck ops: when the watchdog fires)
};

// What one policy would have done at the first op where the ranks stop agreeing.
struct ReplayRecovery {
  RecoveryAction action = RecoveryAction::kAbort;
  Outcome outcome = Outcome::kAborted;
  int attempts = 0;
  double watchdog_s = 0;
  double detected_s = 0;         // replayed clock: when the watchdog fires (the dumps are written)
  double end_s = 0;              // when the op completes after recovery, or the job aborts
  std::vector<int> dropped_ranks;
  double rerun_s = 0;            // the op's simulated time on the ranks that go on
  std::string detail;            // what happened, in words
};

struct ReplayResult {
  int ranks = 0;                 // dumps read
  int groups = 0;
  int64_t entries = 0;
  std::string version;           // the dumps' flight-recorder version
  std::string comm_lib_version;
  std::string cluster;           // "8 x dgx-h100 (64 GPUs)"
  std::vector<ReplayOp> ops;     // completed ones in start order, then the rest
  std::vector<ReplaySlice> slices;
  std::optional<size_t> first_divergence;  // index into ops
  std::vector<int> culprit_ranks;
  std::string verdict;           // one line
  double end_s = 0;              // replayed clock: the last op's end (fault-free part)
  double predicted_comm_s = 0;   // sum over completed simulated ops of their predicted time
  double recorded_comm_s = 0;    // ... and of their recorded time, over those that have one
  int ops_with_recorded = 0;
  std::vector<ReplayRecovery> recoveries;
  FrAnalysis analysis;           // `tandem fr analyze`'s verdict on the same dumps
};

// Throws Error(kFormat) when the dumps disagree on the recorder version or on a group's
// membership, Error(kInvalidArgument) when the cluster has too few GPUs for the ranks.
ReplayResult replay(const std::vector<FrDump>& dumps, const ReplayOptions& options);

std::string format_text(const ReplayResult& result, size_t max_ops);  // the report a user reads

// replay.json (`tandem replay --json`, `--out`): {"kind": "replay", "format_version":
// kReplayFormatVersion, ...}; `tandem report` reads it and refuses another kind or version.
inline constexpr int kReplayFormatVersion = 1;
nlohmann::json to_json(const ReplayResult& result);
std::string ops_csv(const ReplayResult& result);  // one row per op

}  // namespace tandem::app
