// The identical-interface promise at the level a user sees it: the same collective loop with the
// same fault plan, run through the run session (core/session.h) on every backend's attempts, ends
// every iteration the same way (outcome, attempts, dropped ranks), writes the same flight-recorder
// dumps (every rank's groups and entries; timestamps aside) and gets the same analyzer verdict.
//
// Runners, one loop each:
//   host-threads   backend/host's HostAttempts (a thread per rank, real data, wall time)
//   host-executor  ExecutorAttempts over HostExecutor (the device path cuda and nccl take)
//   sim-executor   ExecutorAttempts over sim::SimExecutor (simulated time, no data)
//   sim-platform   sim::SimAttempts (the SimGrid platform with the faults on its links; what
//                  `tandem run` uses on sim)
// The sim runners build a SimGrid platform, one per process, so each runs in a child process
// (sim::run_isolated, sim/isolated.h) and sends back its signature.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/host/host_attempts.h"
#include "backend/host/host_executor.h"
#include "core/flight_recorder.h"
#include "core/fr_analysis.h"
#include "core/session.h"
#include "models/cluster.h"
#include "models/topology.h"
#include "sim/isolated.h"
#include "sim/sim_attempts.h"
#include "sim/sim_executor.h"

namespace tandem {
namespace {

constexpr int kRanks = 4;
constexpr int kIterations = 4;

models::ClusterSpec one_node() {
  models::ClusterSpec cluster = models::cluster_preset("dgx-h100");
  cluster.nodes = 1;
  return cluster;
}

// A loop and its faults.
struct Case {
  std::string name;
  std::vector<Fault> faults;
  RecoveryAction action = RecoveryAction::kAbort;
  Outcome expected;       // of the faulty iteration (2), so that no runner can agree on a wrong answer
  std::string culprits;   // the analyzer's, when the watchdog dumped ("" : no dumps expected to blame)
};

Fault rank_fault(FaultKind kind, int rank) {
  Fault f;
  f.kind = kind;
  f.rank = rank;
  f.trigger.collective = 2;
  return f;
}

std::vector<Case> cases() {
  Fault desync = rank_fault(FaultKind::kDesync, 1);
  desync.desync_count = 1024;
  return {
      {"none", {}, RecoveryAction::kAbort, Outcome::kCompleted, ""},
      {"transient", {rank_fault(FaultKind::kTransient, 2)}, RecoveryAction::kAbort, Outcome::kCompletedAfterRetry, ""},
      {"corrupt", {rank_fault(FaultKind::kCorrupt, 3)}, RecoveryAction::kAbort, Outcome::kCompletedAfterRetry, ""},
      {"hang", {rank_fault(FaultKind::kRankHang, 1)}, RecoveryAction::kAbort, Outcome::kAborted, "1"},
      {"crash-shrink", {rank_fault(FaultKind::kRankCrash, 3)}, RecoveryAction::kShrink, Outcome::kRecoveredShrink,
       "3"},
      {"desync", {desync}, RecoveryAction::kAbort, Outcome::kAborted, "1"},
  };
}

SessionConfig config_of(const Case& c, const std::string& dir) {
  SessionConfig config;
  config.nranks = kRanks;
  config.iterations = kIterations;
  config.work = {Collective::kAllReduce, 256 << 10, DataType::kF32, ReduceOp::kSum, Algorithm::kRing};
  config.recovery.retry_max = 1;
  // Long enough that a clean attempt never times out on a loaded machine; hangs wait this long on
  // the host runners.
  config.recovery.watchdog_s = 1.0;
  config.recovery.action = c.action;
  config.recorder.prefix = dir + "/rank_";
  config.recorder.format = FrFormat::kJson;
  config.comm_lib = "tandem-conformance";
  return config;
}

// What must be the same on every backend: each iteration's end, every dump without its
// timestamps, the analyzer's verdict.
std::string signature(const Session& session, const std::string& dir) {
  std::string text;
  for (const IterationResult& it : session.iterations()) {
    text += fmt::format("iteration {}: {} after {} attempt(s), dropped [{}], faults [{}]\n", it.iteration,
                        name(it.outcome), it.attempts, fmt::join(it.dropped_ranks, " "), fmt::join(it.faults, " "));
  }
  // Why each dump was written; an error's own words are the backend's ("host rank 2 lane 0 op 0:
  // send to 3 failed", "transient rank 2 at collective 2" on the platform, which has no sends).
  std::vector<std::string> reasons;
  for (const std::string& reason : session.dump_reasons()) reasons.push_back(reason.substr(0, reason.find(": error: ")));
  text += fmt::format("aborted {}, dumps for: {}\n", session.aborted(), fmt::join(reasons, "; "));
  if (session.dump_prefix().empty()) return text + "no dumps\n";
  const std::vector<FrDump> dumps = read_dump_dir(dir, "rank_");
  for (const FrDump& d : dumps) {
    text += fmt::format("rank {} ({}):\n", d.rank, d.comm_lib_version);
    for (const FrGroup& g : d.groups) {
      text += fmt::format("  group {} {} [{}]\n", g.name, g.desc, fmt::join(g.ranks, " "));
    }
    for (const FrEntry& e : d.entries) {
      text += fmt::format("  #{} pg {} {} seq {} {} retired {} in {} out {} {}\n", e.record_id, e.pg_name,
                          e.profiling_name, e.collective_seq_id, name(e.state), e.retired, e.input_sizes[0][0],
                          e.output_sizes[0][0], e.input_dtypes[0]);
    }
  }
  const FrAnalysis analysis = analyze(dumps);
  return text + fmt::format("analysis: {} (culprits [{}])\n", analysis.verdict, fmt::join(analysis.culprit_ranks, " "));
}

std::string fresh_dir(const std::string& runner, const Case& c) {
  const std::string dir = fmt::format("{}tandem_session_conformance_{}_{}_{}", ::testing::TempDir(), getpid(), runner,
                                      c.name);
  std::filesystem::remove_all(dir);
  return dir;
}

// Runs the case's loop through a session over the runner `make` builds; returns its signature.
std::string run_loop(const Case& c, const std::string& dir,
                     const std::function<std::unique_ptr<AttemptRunner>(const Session&)>& make) {
  const FaultInjector injector(FaultPlan{c.faults, 7}, [](const Fault&, int, int) { return false; });
  Session session(config_of(c, dir), injector);
  const std::unique_ptr<AttemptRunner> runner = make(session);
  while (session.run_next(*runner)) {
  }
  std::string text = signature(session, dir);
  std::filesystem::remove_all(dir);
  return text;
}

std::map<std::string, std::string> run_everywhere(const Case& c) {
  std::map<std::string, std::string> out;
  out["host-threads"] = run_loop(c, fresh_dir("host-threads", c),
                                 [](const Session& s) { return std::make_unique<HostAttempts>(s); });
  HostExecutor host;
  out["host-executor"] = run_loop(c, fresh_dir("host-executor", c),
                                  [&](const Session& s) { return std::make_unique<ExecutorAttempts>(s, host); });
  const std::string sim_executor_dir = fresh_dir("sim-executor", c);
  out["sim-executor"] = sim::run_isolated([&] {
    sim::SimExecutor executor(one_node());
    executor.set_placement(sim::SimExecutor::node_major_placement(executor.topology(), kRanks, kRanks));
    return run_loop(c, sim_executor_dir,
                    [&](const Session& s) { return std::make_unique<ExecutorAttempts>(s, executor); });
  });
  const std::string sim_platform_dir = fresh_dir("sim-platform", c);
  out["sim-platform"] = sim::run_isolated([&] {
    const models::Topology topology = models::build_cluster(one_node());
    sim::SimPlacement placement{&topology, one_node(), sim::NetworkModel{}, kRanks, {0, 1, 2, 3}, {}};
    return run_loop(c, sim_platform_dir,
                    [&](const Session& s) { return std::make_unique<sim::SimAttempts>(s, placement); });
  });
  return out;
}

class SessionConformance : public ::testing::TestWithParam<Case> {};

TEST_P(SessionConformance, SameLoopSameFaultsSameOutcomesSameDumps) {
  const Case& c = GetParam();
  const std::map<std::string, std::string> signatures = run_everywhere(c);
  const std::string& reference = signatures.at("host-threads");
  if (std::getenv("TANDEM_SHOW_SIGNATURES") != nullptr) std::cout << reference;
  // The faulty iteration ends as the fault must make it end, not merely alike everywhere.
  const std::string expected = fmt::format("iteration 2: {} ", name(c.expected));
  EXPECT_NE(reference.find(expected), std::string::npos) << "expected '" << expected << "' in\n" << reference;
  if (!c.culprits.empty()) {
    const std::string culprits = fmt::format("(culprits [{}])\n", c.culprits);
    EXPECT_NE(reference.find(culprits), std::string::npos) << "expected " << culprits << " in\n" << reference;
  }
  for (const auto& [runner, text] : signatures) {
    EXPECT_EQ(text, reference) << runner << " differs from host-threads in case " << c.name;
  }
}

// Each iteration's time on the sim executor, twice: a failed or stuck simulated attempt is timed on
// the simulator's clock (the watchdog, the fault-free collective), never on the host's wall clock,
// so two runs agree to the last bit.
TEST(SessionConformanceClock, ASimulatedFailureTakesNoWallTime) {
  for (const Case& c : cases()) {
    if (c.name != "transient" && c.name != "corrupt" && c.name != "hang") continue;
    auto times = [&] {
      const std::string dir = fresh_dir("sim-clock", c);
      return sim::run_isolated([&] {
        sim::SimExecutor executor(one_node());
        executor.set_placement(sim::SimExecutor::node_major_placement(executor.topology(), kRanks, kRanks));
        const FaultInjector injector(FaultPlan{c.faults, 7}, [](const Fault&, int, int) { return false; });
        Session session(config_of(c, dir), injector);
        ExecutorAttempts runner(session, executor);
        while (session.run_next(runner)) {
        }
        std::filesystem::remove_all(dir);
        std::string text;
        for (const IterationResult& it : session.iterations()) text += fmt::format("{:a} ", it.seconds);
        return text;
      });
    };
    const std::string first = times();
    EXPECT_EQ(times(), first) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, SessionConformance, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           std::string name = param.param.name;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace tandem
