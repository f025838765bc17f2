// The run session: a job of ranks that runs one collective again and again through any backend,
// with the fault plan injected, the recovery policy applied (run_resilient, core/recovery.h) and
// one flight recorder per rank written as ProcessGroupNCCL writes it: one entry per launch (a
// retry is a new launch), a new group after a shrink (ncclCommShrink makes a new communicator),
// every live rank dumped when the watchdog fires or an error aborts.
//
// A backend takes part by supplying an AttemptRunner: one attempt of the collective with the
// faults that are active, and its fault-free time. ExecutorAttempts (below) is the runner of every
// Executor (core/executor.h): real data, checked against a reference; backend/host's HostAttempts
// runs each rank on its own thread (a desynced rank really issues the other collective) and sim's
// SimAttempts times the attempt on the network model. The session, the recorders and the dumps
// are the same for all of them: that is the promise tests/conformance checks.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/data_check.h"
#include "core/error.h"
#include "core/executor.h"
#include "core/faults.h"
#include "core/flight_recorder.h"
#include "core/recovery.h"
#include "core/schedule.h"

namespace tandem {

// The collective a job runs every iteration, as every rank issues it.
struct SessionWork {
  Collective collective = Collective::kAllReduce;
  int64_t size_bytes = 0;  // the message size, turned into counts as nccl-tests does (core/sizes.h)
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kRing;

  // What `nranks` ranks call.
  CollectiveSpec spec(int nranks) const;
};

struct SessionConfig {
  int nranks = 0;
  int iterations = 1;
  SessionWork work;
  RecoveryPolicy recovery;
  FrConfig recorder;     // recorder.prefix: where dumps go (already resolved)
  std::string comm_lib;  // the dumps' comm_lib_version
  int64_t epoch_ns = 0;  // the recorders' clock at the run's time 0
};

struct IterationResult {
  int iteration = 0;
  double start_s = 0;  // on the run's clock (simulated on sim, wall on host)
  Outcome outcome = Outcome::kCompleted;
  double seconds = 0;             // attempts, backoffs and the watchdog's wait
  double fault_free_seconds = 0;  // the same collective on the same ranks without faults
  int attempts = 0;
  std::vector<int> dropped_ranks;  // shrink
  bool rerouted = false;
  std::vector<int> faults;  // the plan's faults that hit this iteration
  std::string detail;       // what the backend saw
};

// One rank's part in one attempt of an iteration, for traces: when it entered the collective and
// when the attempt ended for it (completed, failed, or given up on).
struct RankSlice {
  int rank = 0;
  int iteration = 0;
  int attempt = 0;
  double start_s = 0;
  double end_s = 0;  // a stuck attempt: when the watchdog fired
  bool ok = false;   // the attempt completed
};

// The plan faults that keep ranks out of a collective: ranks that do not arrive, and desyncs.
struct RankFaults {
  std::vector<int> missing;  // hang or crash
  std::vector<int> crashed;
  std::optional<std::string> desync;  // "rank R issued <collective> of <count> <dtype>"
};

// One backend's attempts, what a backend supplies to a session.
class AttemptRunner {
 public:
  virtual ~AttemptRunner() = default;
  // One attempt of the session's collective on plan.ranks with the faults `active` (indices into
  // the plan). Must return: a stuck attempt reports kStuck without the watchdog's wait, which the
  // session adds.
  virtual AttemptResult attempt(const AttemptPlan& plan, const std::vector<int>& active) = 0;
  // The collective on `ranks` without faults (a fault's cost is the difference).
  virtual double fault_free_seconds(const std::vector<int>& ranks) = 0;
};

class Session {
 public:
  // `injector` must outlive the session.
  Session(SessionConfig config, const FaultInjector& injector);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const SessionConfig& config() const { return config_; }
  const FaultInjector& injector() const { return injector_; }
  CollectiveSpec spec(int nranks) const { return config_.work.spec(nranks); }

  RankFaults rank_faults(const std::vector<int>& active, const std::vector<int>& ranks) const;
  bool any_link_fault(const std::vector<int>& active) const;

  // Runs the next iteration through `runner`: attempts, retries, shrink or reroute as the policy
  // says, the recorders' entries and the dumps. False when the session is over (all iterations
  // ran, or one aborted).
  bool run_next(AttemptRunner& runner);
  // Dumps every live rank's recorder now (a crashed rank writes nothing), giving `reason`.
  void dump(const std::string& reason);

  const std::vector<IterationResult>& iterations() const { return iterations_; }
  const std::vector<RankSlice>& slices() const { return slices_; }
  bool aborted() const { return aborted_; }
  // Where dumps went ("" when none were written) and why each was written.
  const std::string& dump_prefix() const { return dump_prefix_; }
  const std::vector<std::string>& dump_reasons() const { return dump_reasons_; }
  // Why a dump was asked for and nothing could be written ("" otherwise): every rank had crashed.
  const std::string& dump_note() const { return dump_note_; }

 private:
  class Recorders;

  AttemptResult run_attempt(AttemptRunner& runner, int k, double began, const AttemptPlan& plan);
  void dump_after(const std::string& reason);

  SessionConfig config_;
  const FaultInjector& injector_;
  std::unique_ptr<Recorders> recorders_;
  std::vector<int> ranks_;  // the participating ranks (fewer after a shrink)
  bool rerouted_ = false;
  double now_s_ = 0;
  bool aborted_ = false;
  std::vector<IterationResult> iterations_;
  std::vector<RankSlice> slices_;
  AttemptPlan last_;
  std::string dump_prefix_;
  std::vector<std::string> dump_reasons_;
  std::string dump_note_;
};

// How an attempt ended, from what its ranks threw (`errors`, one per rank or one for the whole
// run; empty entries: no error) and the plan's rank faults, the same on every backend: a desync,
// then ranks that never arrived or a timeout (stuck; `seconds` loses the watchdog's wait, which
// the session adds), a failed send (failed), a checksum (corrupt). The result's fault is the
// report the error carried (core/fault_report.h), or one made from the plan's rank faults. Any
// other error is the backend's own failure: Error(kBackend) naming `backend`. Ok otherwise: the
// caller verifies data.
AttemptResult attempt_outcome(const Session& session, const std::vector<int>& active, const RankFaults& faults,
                              const std::vector<std::optional<Error>>& errors, double seconds,
                              const std::string& backend);

// A real backend's fault-free time of a rank set, cached: the fastest of three clean runs after a
// warm-up, as the first run of a rank set pays for page faults and cold caches, which are not the
// faults' cost.
class FaultFreeTimes {
 public:
  template <typename CleanRun>
  double get(const std::vector<int>& ranks, CleanRun&& clean_run) {
    auto it = seconds_.find(ranks);
    if (it == seconds_.end()) {
      clean_run();
      double best = clean_run();
      for (int i = 0; i < 2; ++i) best = std::min(best, clean_run());
      it = seconds_.emplace(ranks, best).first;
    }
    return it->second;
  }

 private:
  std::map<std::vector<int>, double> seconds_;
};

// What one attempt of a session's collective on `ranks` runs with, on a backend that moves data or
// times a schedule: the checked schedule, the run context (the watchdog as timeout, checksums when
// the policy verifies, the plan's transfer faults on the attempt's ranks; a rank that hangs or
// crashed never sends) and the inputs' check. One piece for HostAttempts and ExecutorAttempts.
struct AttemptSetup {
  AttemptSetup(const Session& session, const std::vector<int>& ranks, const std::vector<int>& active, int attempt,
               bool clean);

  CollectiveSpec spec;
  RankFaults faults;  // none for a clean (fault-free) run
  Schedule schedule;
  RunContext context;
  CheckSpec check;
  bool verify = false;

  // Inputs filled and outputs poisoned, in the host view of the buffers.
  void prepare(std::span<const RankBuffers> host_buffers) const;
  // An attempt that completed with outputs off the reference becomes corrupt (when the policy verifies).
  void check_outputs(AttemptResult& result, std::span<const RankBuffers> host_buffers, const std::string& backend) const;
};

// The attempts of any Executor: one Executor::run per attempt with real data, checked against the
// reference when the policy verifies. The executor runs a whole collective in one call, so rank
// faults become transfer faults: a rank that hangs or crashed never sends (its peers wait for it
// until the watchdog), which is what a GPU job sees. A desync is caught before launch: the ranks'
// collectives disagree, and NCCL given mismatched calls would hang or corrupt memory rather than
// report it. Throws Error(kUnsupported) for an executor that runs only some ranks in this process.
class ExecutorAttempts : public AttemptRunner {
 public:
  ExecutorAttempts(const Session& session, Executor& executor);
  AttemptResult attempt(const AttemptPlan& plan, const std::vector<int>& active) override;
  double fault_free_seconds(const std::vector<int>& ranks) override;

 private:
  AttemptResult run(const std::vector<int>& ranks, const std::vector<int>& active, int attempt, bool clean);

  const Session& session_;
  Executor& executor_;
  FaultFreeTimes fault_free_;
};

// The watchdog as an executor timeout: at least 1 ms.
std::chrono::milliseconds watchdog_timeout(const RecoveryPolicy& policy);

}  // namespace tandem
