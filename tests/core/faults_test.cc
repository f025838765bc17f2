// The fault plan's triggers and the recovery policy's decisions, backend-free.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "core/error.h"
#include "core/fault_report.h"
#include "core/faults.h"
#include "core/recovery.h"

namespace tandem {
namespace {

Fault fault(FaultKind kind, int rank = -1) {
  Fault f;
  f.kind = kind;
  f.rank = rank;
  return f;
}

TEST(Faults, NamesRoundTripAndUnknownNamesAreErrors) {
  for (FaultKind kind : {FaultKind::kLinkDown, FaultKind::kLinkDegrade, FaultKind::kNicDown, FaultKind::kRankCrash,
                         FaultKind::kRankHang, FaultKind::kStraggler, FaultKind::kTransient, FaultKind::kDesync,
                         FaultKind::kCorrupt}) {
    EXPECT_EQ(parse_fault_kind(name(kind)), kind);
  }
  EXPECT_THROW(parse_fault_kind("link_flap"), Error);
  for (Outcome o : {Outcome::kCompleted, Outcome::kCompletedAfterRetry, Outcome::kRecoveredShrink,
                    Outcome::kRecoveredReroute, Outcome::kAborted}) {
    EXPECT_EQ(parse_outcome(name(o)), o);
  }
  EXPECT_THROW(parse_recovery_action("restart"), Error);
}

TEST(Faults, OneShotFaultsHitTheirCollectiveOncePersistentOnesStay) {
  FaultPlan plan;
  Fault transient = fault(FaultKind::kTransient, 1);
  transient.trigger.collective = 2;
  Fault hang = fault(FaultKind::kRankHang, 3);
  hang.trigger.collective = 4;
  plan.faults = {transient, hang};
  const FaultInjector injector(plan, nullptr);
  EXPECT_TRUE(injector.active(1, 0, 0, 0, false).empty());
  EXPECT_EQ(injector.active(2, 0, 0, 0, false), std::vector<int>{0});
  EXPECT_TRUE(injector.active(2, 1, 0, 0, false).empty()) << "a transient fault fails once";
  EXPECT_TRUE(injector.active(3, 0, 0, 0, false).empty());
  EXPECT_EQ(injector.active(4, 0, 0, 0, false), std::vector<int>{1});
  EXPECT_EQ(injector.active(9, 3, 0, 0, false), std::vector<int>{1}) << "a hung rank stays hung";
  const std::vector<int> at4 = injector.active(4, 0, 0, 0, false);
  EXPECT_EQ(injector.rank_action(at4, 3), RankAction::kHang);
  EXPECT_EQ(injector.rank_action(at4, 2), RankAction::kEnter);
}

TEST(Faults, AFlapComesBackAfterItsRecoveryTime) {
  FaultPlan plan;
  Fault flap = fault(FaultKind::kLinkDown);
  flap.link = "l";
  flap.trigger.collective = 1;
  flap.recover_after_s = 0.005;
  plan.faults = {flap};
  const FaultInjector injector(plan, [](const Fault&, int src, int dst) { return src == 0 && dst == 1; });
  const std::vector<int> hit = injector.active(1, 0, 1.0, 1.0, false);
  ASSERT_EQ(hit.size(), 1u);
  EXPECT_TRUE(injector.transfer(hit, 0, 1, 0).fail) << "a flap is noticed: the transfer errors out";
  EXPECT_FALSE(injector.transfer(hit, 1, 2, 0).fail) << "other routes are untouched";
  EXPECT_EQ(injector.active(1, 1, 1.002, 1.0, false).size(), 1u) << "still down 2 ms in";
  EXPECT_TRUE(injector.active(1, 1, 1.006, 1.0, false).empty()) << "back up after 5 ms";
  EXPECT_TRUE(injector.active(1, 0, 1.0, 1.0, true).empty()) << "rerouted around";
}

TEST(Faults, APermanentLinkFailureStallsAndDegradeSlows) {
  FaultPlan plan;
  Fault down = fault(FaultKind::kLinkDown);
  Fault slow = fault(FaultKind::kLinkDegrade);
  slow.factor = 0.25;
  plan.faults = {down, slow};
  const FaultInjector injector(plan, [](const Fault& f, int src, int) { return f.kind == FaultKind::kLinkDown ? src == 0 : src == 1; });
  const std::vector<int> all = injector.active(0, 0, 0, 0, false);
  EXPECT_TRUE(injector.transfer(all, 0, 1, 0).stall);
  EXPECT_FALSE(injector.transfer(all, 0, 1, 0).fail);
  EXPECT_DOUBLE_EQ(injector.transfer(all, 1, 2, 0).bandwidth_factor, 0.25);
}

TEST(Faults, ProbabilityIsSeededAndDeterministic) {
  FaultPlan plan;
  Fault maybe = fault(FaultKind::kTransient, 0);
  maybe.trigger.probability = 0.3;
  plan.faults = {maybe};
  plan.seed = 42;
  const FaultInjector a(plan, nullptr);
  const FaultInjector b(plan, nullptr);
  int hits = 0;
  for (int64_t k = 0; k < 1000; ++k) {
    const bool hit = !a.active(k, 0, 0, 0, false).empty();
    EXPECT_EQ(hit, !b.active(k, 0, 0, 0, false).empty());
    hits += hit;
  }
  EXPECT_GT(hits, 250);
  EXPECT_LT(hits, 350);
  plan.seed = 43;
  const FaultInjector c(plan, nullptr);
  int same = 0;
  for (int64_t k = 0; k < 1000; ++k) same += a.active(k, 0, 0, 0, false).empty() == c.active(k, 0, 0, 0, false).empty();
  EXPECT_LT(same, 1000) << "another seed draws differently";
}

TEST(Faults, DesyncStragglerAndCorruptAnswers) {
  FaultPlan plan;
  Fault desync = fault(FaultKind::kDesync, 2);
  desync.desync_dtype = DataType::kF16;
  Fault straggler = fault(FaultKind::kStraggler, 1);
  straggler.factor = 3;
  Fault corrupt = fault(FaultKind::kCorrupt, 4);
  corrupt.trigger.op = 7;
  plan.faults = {desync, straggler, corrupt};
  const FaultInjector injector(plan, nullptr);
  const std::vector<int> all = injector.active(0, 0, 0, 0, false);
  CollectiveSpec spec;
  spec.count = 10;
  ASSERT_TRUE(injector.desync(all, 2, spec).has_value());
  EXPECT_EQ(injector.desync(all, 2, spec)->dtype, DataType::kF16);
  EXPECT_FALSE(injector.desync(all, 1, spec).has_value());
  EXPECT_DOUBLE_EQ(injector.straggle(all, 1), 3.0);
  EXPECT_DOUBLE_EQ(injector.transfer(all, 1, 0, 0).delay_factor, 3.0);
  EXPECT_TRUE(injector.transfer(all, 3, 4, 7).corrupt);
  EXPECT_FALSE(injector.transfer(all, 3, 4, 6).corrupt);
  EXPECT_NE(fault(FaultKind::kRankHang, 5).describe().find("rank 5"), std::string::npos);
}

using Status = AttemptResult::Status;

struct Script {
  std::vector<AttemptResult> results;
  std::vector<AttemptPlan> plans;
  int dumps = 0;
  CollectiveOutcome run(const RecoveryPolicy& policy, int nranks = 4) {
    std::vector<int> ranks;
    for (int r = 0; r < nranks; ++r) ranks.push_back(r);
    size_t next = 0;
    return run_resilient(
        policy, ranks, 10.0,
        [&](const AttemptPlan& plan) {
          plans.push_back(plan);
          return results.at(next++);
        },
        [&](const std::string&) { ++dumps; });
  }
};

AttemptResult result(Status status, double seconds, std::vector<int> failed = {}, bool link = false) {
  AttemptResult r;
  r.status = status;
  r.seconds = seconds;
  r.failed_ranks = std::move(failed);
  r.link_fault = link;
  return r;
}

TEST(Recovery, RetryWithBackoffThenComplete) {
  Script s{{result(Status::kFailed, 1), result(Status::kFailed, 1), result(Status::kOk, 2)}};
  RecoveryPolicy policy;
  policy.retry_max = 3;
  policy.backoff_s = 0.5;
  const CollectiveOutcome out = s.run(policy);
  EXPECT_EQ(out.outcome, Outcome::kCompletedAfterRetry);
  EXPECT_EQ(out.attempts, 3);
  EXPECT_DOUBLE_EQ(out.seconds, 1 + 0.5 + 1 + 1.0 + 2);
  EXPECT_DOUBLE_EQ(s.plans[2].start_s, 10 + 1 + 0.5 + 1 + 1.0);
  EXPECT_EQ(s.dumps, 0);
}

TEST(Recovery, OutOfRetriesAborts) {
  Script s{{result(Status::kFailed, 1), result(Status::kFailed, 1)}};
  RecoveryPolicy policy;
  policy.retry_max = 1;
  const CollectiveOutcome out = s.run(policy);
  EXPECT_EQ(out.outcome, Outcome::kAborted);
  EXPECT_EQ(s.dumps, 1);
}

TEST(Recovery, StuckRankIsShrunkAwayAfterTheWatchdog) {
  Script s{{result(Status::kStuck, 0.1, {2}), result(Status::kOk, 1)}};
  RecoveryPolicy policy;
  policy.watchdog_s = 30;
  policy.action = RecoveryAction::kShrink;
  const CollectiveOutcome out = s.run(policy);
  EXPECT_EQ(out.outcome, Outcome::kRecoveredShrink);
  EXPECT_EQ(out.dropped_ranks, std::vector<int>{2});
  EXPECT_EQ(s.plans[1].ranks, (std::vector<int>{0, 1, 3}));
  EXPECT_DOUBLE_EQ(out.seconds, 0.1 + 30 + 1);
  EXPECT_EQ(s.dumps, 1) << "the watchdog dumps every rank before acting";
}

TEST(Recovery, DeadLinkIsReroutedAndAbortPolicyAborts) {
  Script reroute{{result(Status::kStuck, 0.1, {}, true), result(Status::kOk, 1.5)}};
  RecoveryPolicy policy;
  policy.action = RecoveryAction::kReroute;
  const CollectiveOutcome out = reroute.run(policy);
  EXPECT_EQ(out.outcome, Outcome::kRecoveredReroute);
  EXPECT_TRUE(reroute.plans[1].rerouted);

  Script stuck{{result(Status::kStuck, 0.1, {1})}};
  policy.action = RecoveryAction::kAbort;
  EXPECT_EQ(stuck.run(policy).outcome, Outcome::kAborted);
  EXPECT_EQ(stuck.dumps, 1);

  Script twice{{result(Status::kStuck, 0.1, {1}), result(Status::kStuck, 0.1, {0})}};
  policy.action = RecoveryAction::kShrink;
  EXPECT_EQ(twice.run(policy).outcome, Outcome::kAborted) << "one shrink, then the second hang aborts";
}

TEST(Recovery, DesyncAbortsAtOnceAndCorruptionIsRetried) {
  Script desync{{result(Status::kDesync, 0.1)}};
  RecoveryPolicy policy;
  policy.retry_max = 5;
  EXPECT_EQ(desync.run(policy).outcome, Outcome::kAborted);
  EXPECT_EQ(desync.plans.size(), 1u);
  Script corrupt{{result(Status::kCorrupt, 1), result(Status::kOk, 1)}};
  EXPECT_EQ(corrupt.run(policy).outcome, Outcome::kCompletedAfterRetry);
}

// ---- the fault report: one value, one text ------------------------------------------------------

TEST(FaultReport, EachKindHasItsCodeCulpritAndText) {
  const OpPosition recv{.lane = 1, .op = 7, .kind = OpKind::kRecv, .peer = 3};
  const FaultReport sent{.kind = FaultReport::Kind::kSendFailed,
                         .backend = "sim",
                         .rank = 3,
                         .peer = 4,
                         .at = OpPosition{.lane = 1, .op = 6, .kind = OpKind::kSend, .peer = 4},
                         .fault = 2};
  EXPECT_EQ(sent.code(), ErrorCode::kFault);
  EXPECT_EQ(sent.culprit(), 3);
  EXPECT_EQ(sent.text(), "sim rank 3 lane 1 op 6: send to 4 failed (injected fault #2)");

  const FaultReport corrupt{.kind = FaultReport::Kind::kCorrupt, .backend = "host", .rank = 4, .peer = 3, .at = recv};
  EXPECT_EQ(corrupt.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(corrupt.culprit(), 4);
  EXPECT_EQ(corrupt.text(), "host rank 4 lane 1 op 7: the message from 3 failed its checksum");

  FaultReport lost{.kind = FaultReport::Kind::kLost,
                   .backend = "host",
                   .rank = 4,
                   .peer = 3,
                   .at = recv,
                   .fault = 0,
                   .collective = Collective::kAllGather,
                   .algorithm = Algorithm::kRing,
                   .nranks = 8,
                   .timeout_ms = 200};
  EXPECT_EQ(lost.code(), ErrorCode::kTimeout);
  EXPECT_EQ(lost.culprit(), 3);  // the sender whose message was lost, not the waiting receiver
  EXPECT_EQ(lost.text(),
            "host all_gather (ring, 8 ranks) timed out after 200 ms: rank 4 waits on lane 1 op 7, recv from 3; its "
            "message from rank 3 was lost (injected fault #0)");
  lost.at->tile = 2;
  EXPECT_NE(lost.text().find("rank 4 waits on tile 2 lane 1 op 7, recv from 3"), std::string::npos) << lost.text();

  const FaultReport absent{.kind = FaultReport::Kind::kAbsent, .backend = "sim", .absent = {5, 6}};
  EXPECT_EQ(absent.culprit(), 5);
  EXPECT_EQ(absent.text(), "ranks 5, 6 never arrived");

  // A fault the backend cannot place on an op (the simulator's dead link) is its note.
  const FaultReport link{.kind = FaultReport::Kind::kStalled, .backend = "sim", .fault = 1, .note = "link l3 is down"};
  EXPECT_EQ(link.text(), "link l3 is down");
  EXPECT_EQ(link.culprit(), -1);
}

TEST(FaultReport, TravelsWithItsErrorThroughCopies) {
  const FaultReport report{.kind = FaultReport::Kind::kSendFailed, .backend = "nccl", .rank = 1, .peer = 2, .fault = 0};
  std::optional<Error> kept;
  try {
    fail(report);
  } catch (const Error& e) {
    kept = e;  // as the backends keep the first error and rethrow it
  }
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->code(), ErrorCode::kFault);
  EXPECT_STREQ(kept->what(), "nccl rank 1: send to 2 failed (injected fault #0)");
  ASSERT_NE(kept->report(), nullptr);
  EXPECT_EQ(kept->report()->peer, 2);
  EXPECT_EQ(Error(ErrorCode::kIo, "no report").report(), nullptr);
}

}  // namespace
}  // namespace tandem
