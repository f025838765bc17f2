// The run session over a scripted backend: what it records, when it dumps, how it ends an
// iteration, independent of any real backend (tests/conformance runs it over the real ones).
#include "core/session.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/flight_recorder.h"

namespace tandem {
namespace {

using Status = AttemptResult::Status;

// A backend whose attempts are a function of the plan: the test says how each one ends.
class ScriptedAttempts : public AttemptRunner {
 public:
  explicit ScriptedAttempts(std::function<AttemptResult(const AttemptPlan&, const std::vector<int>&)> script)
      : script_(std::move(script)) {}
  AttemptResult attempt(const AttemptPlan& plan, const std::vector<int>& active) override {
    ++attempts;
    return script_(plan, active);
  }
  double fault_free_seconds(const std::vector<int>& ranks) override { return 1e-3 * static_cast<double>(ranks.size()); }
  int attempts = 0;

 private:
  std::function<AttemptResult(const AttemptPlan&, const std::vector<int>&)> script_;
};

AttemptResult ok(double seconds) {
  AttemptResult r;
  r.seconds = seconds;
  return r;
}

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / ("tandem_session_test_" + std::to_string(getpid()) + "_" +
                                                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  SessionConfig config(int nranks, int iterations, RecoveryPolicy policy = {}) const {
    SessionConfig c;
    c.nranks = nranks;
    c.iterations = iterations;
    c.work = {Collective::kAllGather, 1 << 20, DataType::kF32, ReduceOp::kSum, Algorithm::kRing};
    c.recovery = policy;
    c.recorder.prefix = (dir_ / "rank_").string();
    c.recorder.format = FrFormat::kJson;
    c.comm_lib = "tandem-test";
    c.epoch_ns = 1'000'000'000;
    return c;
  }

  std::filesystem::path dir_;
};

FaultInjector injector(std::vector<Fault> faults) {
  return FaultInjector(FaultPlan{std::move(faults), 1}, [](const Fault&, int, int) { return false; });
}

TEST_F(SessionTest, CleanIterationsRecordOneCompletedEntryPerRankAndDumpOnlyWhenAsked) {
  const FaultInjector none = injector({});
  Session session(config(4, 3), none);
  ScriptedAttempts runner([](const AttemptPlan&, const std::vector<int>&) { return ok(2e-3); });
  int runs = 0;
  while (session.run_next(runner)) ++runs;
  EXPECT_EQ(runs, 2);  // false after the third
  EXPECT_FALSE(session.run_next(runner));
  ASSERT_EQ(session.iterations().size(), 3u);
  for (const IterationResult& it : session.iterations()) {
    EXPECT_EQ(it.outcome, Outcome::kCompleted);
    EXPECT_DOUBLE_EQ(it.seconds, 2e-3);
    EXPECT_DOUBLE_EQ(it.fault_free_seconds, 4e-3);
  }
  EXPECT_DOUBLE_EQ(session.iterations()[2].start_s, 4e-3);
  EXPECT_EQ(session.slices().size(), 12u);
  EXPECT_TRUE(session.dump_prefix().empty());
  EXPECT_FALSE(std::filesystem::exists(dir_));

  session.dump("end of the run");
  const std::vector<FrDump> dumps = read_dump_dir(dir_, "rank_");
  ASSERT_EQ(dumps.size(), 4u);
  for (const FrDump& d : dumps) {
    EXPECT_EQ(d.comm_lib_version, "tandem-test");
    ASSERT_EQ(d.entries.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      const FrEntry& e = d.entries[k];
      EXPECT_EQ(e.collective_seq_id, static_cast<int64_t>(k) + 1);
      EXPECT_EQ(e.profiling_name, "nccl:all_gather");
      EXPECT_EQ(e.state, FrState::kCompleted);
      // all_gather of 1 MiB float on 4 ranks: 65536 elements in, 262144 out (nccl-tests' counts).
      EXPECT_EQ(e.input_sizes, (std::vector<std::vector<int64_t>>{{65536}}));
      EXPECT_EQ(e.output_sizes, (std::vector<std::vector<int64_t>>{{262144}}));
      EXPECT_EQ(e.time_created_ns, 1'000'000'000 + static_cast<int64_t>(k) * 2'000'000);
    }
  }
  EXPECT_EQ(session.dump_reasons(), std::vector<std::string>{"end of the run"});
}

// A run owns its dumps: an earlier run's rank files at the same prefix (here a bigger job's) are
// removed when the session starts, so they are never read as this job's ranks; other files stay.
TEST_F(SessionTest, AnEarlierRunsDumpsAtThePrefixAreRemoved) {
  std::filesystem::create_directories(dir_);
  for (const char* name : {"rank_0", "rank_5", "rank_63", "notes.txt", "rank_x"}) {
    std::ofstream(dir_ / name) << "old";
  }
  const FaultInjector none = injector({});
  Session session(config(2, 1), none);
  ScriptedAttempts runner([](const AttemptPlan&, const std::vector<int>&) { return ok(1e-3); });
  session.run_next(runner);
  session.dump("end of the run");
  EXPECT_EQ(read_dump_dir(dir_, "rank_").size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "rank_5"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "rank_63"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "notes.txt"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "rank_x"));
}

TEST_F(SessionTest, AFailedAttemptDumpsAndTheRetryCompletes) {
  const FaultInjector none = injector({});
  RecoveryPolicy policy;
  policy.retry_max = 2;
  Session session(config(2, 1, policy), none);
  ScriptedAttempts runner([](const AttemptPlan& plan, const std::vector<int>&) {
    if (plan.attempt > 0) return ok(1e-3);
    AttemptResult r;
    r.status = Status::kFailed;
    r.seconds = 5e-4;
    r.message = "send failed";
    return r;
  });
  EXPECT_FALSE(session.run_next(runner));
  const IterationResult& it = session.iterations().at(0);
  EXPECT_EQ(it.outcome, Outcome::kCompletedAfterRetry);
  EXPECT_EQ(it.attempts, 2);
  ASSERT_EQ(session.dump_reasons().size(), 1u);
  EXPECT_EQ(session.dump_reasons()[0], "iteration 0 attempt 0: error: send failed");
  // Two launches per rank: the failed one stays started, the retry completes.
  const std::vector<FrDump> dumps = read_dump_dir(dir_, "rank_");
  ASSERT_EQ(dumps.size(), 2u);
}

TEST_F(SessionTest, AHungRankIsLeftOutOfTheRecordsAndTheWatchdogAborts) {
  Fault hang;
  hang.kind = FaultKind::kRankHang;
  hang.rank = 2;
  hang.trigger.collective = 1;
  const FaultInjector faults = injector({hang});
  RecoveryPolicy policy;
  policy.watchdog_s = 0.5;
  Session session(config(4, 5, policy), faults);
  ScriptedAttempts runner([&](const AttemptPlan& plan, const std::vector<int>& active) {
    const RankFaults missing = session.rank_faults(active, plan.ranks);
    if (missing.missing.empty()) return ok(1e-3);
    AttemptResult r;
    r.status = Status::kStuck;
    r.failed_ranks = missing.missing;
    return r;
  });
  while (session.run_next(runner)) {
  }
  EXPECT_TRUE(session.aborted());
  ASSERT_EQ(session.iterations().size(), 2u);  // the abort stops the loop
  EXPECT_EQ(session.iterations()[1].outcome, Outcome::kAborted);
  EXPECT_DOUBLE_EQ(session.iterations()[1].seconds, 0.5);  // the watchdog's wait
  const std::vector<FrDump> dumps = read_dump_dir(dir_, "rank_");
  ASSERT_EQ(dumps.size(), 4u);  // a hung rank is alive and dumps
  for (const FrDump& d : dumps) {
    EXPECT_EQ(d.entries.size(), d.rank == 2 ? 1u : 2u) << "rank " << d.rank;
    if (d.rank != 2) {
      EXPECT_EQ(d.entries.back().state, FrState::kStarted);
    }
  }
  // The hung rank has no slice in iteration 1; the others wait until the watchdog.
  for (const RankSlice& s : session.slices()) {
    if (s.iteration != 1) continue;
    EXPECT_NE(s.rank, 2);
    EXPECT_DOUBLE_EQ(s.end_s, s.start_s + 0.5);
    EXPECT_FALSE(s.ok);
  }
}

TEST_F(SessionTest, WhenEveryRankCrashesNoDumpIsWrittenAndTheSessionSaysWhy) {
  std::vector<Fault> faults;
  for (int r = 0; r < 3; ++r) {
    Fault crash;
    crash.kind = FaultKind::kRankCrash;
    crash.rank = r;
    faults.push_back(crash);
  }
  const FaultInjector crashes = injector(faults);
  Session session(config(3, 2), crashes);
  ScriptedAttempts runner([&](const AttemptPlan& plan, const std::vector<int>& active) {
    AttemptResult r;
    r.status = Status::kStuck;
    r.failed_ranks = session.rank_faults(active, plan.ranks).missing;
    return r;
  });
  EXPECT_FALSE(session.run_next(runner));
  EXPECT_TRUE(session.aborted());
  EXPECT_EQ(session.iterations().at(0).outcome, Outcome::kAborted);
  EXPECT_TRUE(session.dump_prefix().empty());
  EXPECT_NE(session.dump_note().find("every rank had crashed"), std::string::npos) << session.dump_note();
  EXPECT_FALSE(std::filesystem::exists(dir_));
}

TEST_F(SessionTest, AttemptOutcomeNamesTheSameStatusForTheSameErrorOnEveryBackend) {
  const FaultInjector none = injector({});
  RecoveryPolicy policy;
  policy.watchdog_s = 0.25;
  const Session session(config(4, 1, policy), none);
  const std::vector<int> active;
  auto with = [&](ErrorCode code) {
    std::vector<std::optional<Error>> errors(4);
    errors[1] = Error(code, "rank 1 saw it");
    return attempt_outcome(session, active, RankFaults{}, errors, 1.0, "test");
  };
  EXPECT_EQ(with(ErrorCode::kTimeout).status, Status::kStuck);
  EXPECT_DOUBLE_EQ(with(ErrorCode::kTimeout).seconds, 0.75);  // less the watchdog's wait
  EXPECT_EQ(with(ErrorCode::kFault).status, Status::kFailed);
  EXPECT_EQ(with(ErrorCode::kCorrupt).status, Status::kCorrupt);
  EXPECT_EQ(with(ErrorCode::kDesync).status, Status::kDesync);
  EXPECT_THROW(with(ErrorCode::kInvalidArgument), Error);
  const std::vector<std::optional<Error>> clean(4);
  EXPECT_EQ(attempt_outcome(session, active, RankFaults{}, clean, 1.0, "test").status, Status::kOk);
  RankFaults missing;
  missing.missing = {3};
  const AttemptResult stuck = attempt_outcome(session, active, missing, clean, 1.0, "test");
  EXPECT_EQ(stuck.status, Status::kStuck);
  EXPECT_EQ(stuck.failed_ranks, std::vector<int>{3});
  ASSERT_TRUE(stuck.fault.has_value());
  EXPECT_EQ(stuck.fault->kind, FaultReport::Kind::kAbsent);
  EXPECT_EQ(stuck.fault->absent, std::vector<int>{3});
  EXPECT_EQ(stuck.fault->culprit(), 3);
  EXPECT_EQ(stuck.message, "rank 3 never arrived");
}

}  // namespace
}  // namespace tandem
