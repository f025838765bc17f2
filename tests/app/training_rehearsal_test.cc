// Faults rehearsed in a training step (app/scenario/training_rehearsal.h), on a hand-built step of 8
// ranks: 2 pipeline stages x 2 data-parallel replicas x TP2 (ranks stage-major: stage 0 holds 0-3,
// stage 1 holds 4-7; rank = (stage * 2 + replica) * 2 + tp).
//
//   stage 0: tp all_gather, tp all_gather, pp send (to stage 1), dp reduce_scatter
//   stage 1:                          pp recv, tp all_gather, tp all_gather, dp reduce_scatter
//
// The dumps must be PyTorch's shape (one process group per communicator instance, p2p as send/recv
// pairs) and `fr analyze` must name the rank that stopped, not the ranks that wait on it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "app/scenario/training_rehearsal.h"
#include "core/error.h"

namespace tandem::app {
namespace {

struct Step {
  models::StepProgram program;
  std::vector<sim::TimelineSlice> timeline;
};

// One comm task of `stage` on group `group` at [start, end) seconds.
void comm(Step& s, int stage, int group, Collective collective, double start, double end) {
  models::CommOp op;
  op.collective = collective;
  op.bytes = 1 << 20;
  op.group = group;
  s.program.comms.push_back(op);
  models::StepTask task;
  task.kind = models::TaskKind::kComm;
  task.stage = stage;
  task.comm = static_cast<int>(s.program.comms.size() - 1);
  task.label = 0;
  s.program.tasks.push_back(task);
  s.timeline.push_back({0, 0, start, end, true});
}

Step eight_rank_step() {
  Step s;
  s.program.stages = 2;
  s.program.labels = {"step"};
  s.program.streams = {"s0/comm"};
  s.program.groups = {
      {"tp", 1, 2, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
      {"pp0-1", 1, 2, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {"dp", 1, 2, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
  };
  comm(s, 0, 0, Collective::kAllGather, 0.0, 0.1);
  comm(s, 0, 0, Collective::kAllGather, 0.2, 0.3);
  comm(s, 0, 1, Collective::kSendRecv, 0.4, 0.5);  // stage 0 sends to stage 1
  comm(s, 1, 0, Collective::kAllGather, 0.6, 0.7);
  comm(s, 1, 0, Collective::kAllGather, 0.8, 0.9);
  comm(s, 0, 2, Collective::kReduceScatter, 1.0, 1.1);
  comm(s, 1, 2, Collective::kReduceScatter, 1.2, 1.3);
  return s;
}

Fault fault(FaultKind kind, int rank, const std::string& group, int at) {
  Fault f;
  f.kind = kind;
  f.rank = rank;
  f.group = group;
  f.trigger.collective = at;
  return f;
}

TEST(TrainingRehearsal, AFaultFreeStepCompletesEverywhere) {
  const Step s = eight_rank_step();
  const StepRehearsal r = rehearse_step(s.program, s.timeline, 8, {}, 600, 2000);
  EXPECT_LT(r.first_wait_s, 0);
  EXPECT_TRUE(r.waiting_ranks.empty());
  ASSERT_EQ(r.dumps.size(), 8u);
  EXPECT_TRUE(r.analysis.findings.empty()) << format_text(r.analysis);
  // Rank 0: the default group, its TP, PP and DP groups; two TP entries, a send, a reduce_scatter.
  const FrDump& rank0 = r.dumps[0];
  EXPECT_EQ(rank0.groups.size(), 4u);
  ASSERT_EQ(rank0.entries.size(), 4u);
  EXPECT_EQ(rank0.entries[2].profiling_name, "nccl:send 0->1");
  EXPECT_TRUE(rank0.entries[2].is_p2p);
  EXPECT_EQ(r.dumps[4].entries[0].profiling_name, "nccl:recv 1<-0");
  for (const FrEntry& e : rank0.entries) EXPECT_EQ(e.state, FrState::kCompleted);
}

// Rank 1 hangs before its second TP all_gather: rank 0 waits in it; rank 0 then never sends to
// rank 4, so stage 1's replica 0 waits in the pipeline; rank 3 (replica 1) waits in the DP
// reduce_scatter for rank 1. Every wait leads to rank 1.
TEST(TrainingRehearsal, AHangIsTracedToTheRankThatStopped) {
  const Step s = eight_rank_step();
  const StepRehearsal r =
      rehearse_step(s.program, s.timeline, 8, {fault(FaultKind::kRankHang, 1, "tp", 1)}, 600, 2000);
  EXPECT_DOUBLE_EQ(r.first_wait_s, 0.2);
  EXPECT_DOUBLE_EQ(r.watchdog_fires_s, 600.2);
  EXPECT_EQ(r.dumps.size(), 8u);  // a hung rank is alive and dumps
  EXPECT_EQ(r.analysis.culprit_ranks, std::vector<int>{1}) << format_text(r.analysis);
  EXPECT_EQ(r.analysis.root_ranks, std::vector<int>{1});
  for (const FrFinding& f : r.analysis.findings) {
    EXPECT_TRUE(f.culprit_ranks == std::vector<int>{1} || f.kind == FrFindingKind::kStateMismatch) << f.detail;
  }
  // Rank 0 waits in TP #2; rank 4 in nothing it can finish (its recv from rank 0 never comes).
  EXPECT_TRUE(std::count(r.waiting_ranks.begin(), r.waiting_ranks.end(), 0));
  EXPECT_TRUE(std::count(r.waiting_ranks.begin(), r.waiting_ranks.end(), 4));
  EXPECT_FALSE(std::count(r.waiting_ranks.begin(), r.waiting_ranks.end(), 1));
}

TEST(TrainingRehearsal, ACrashedRankLeavesNoDump) {
  const Step s = eight_rank_step();
  const StepRehearsal r =
      rehearse_step(s.program, s.timeline, 8, {fault(FaultKind::kRankCrash, 6, "dp", 0)}, 30, 2000);
  EXPECT_EQ(r.dead_ranks, std::vector<int>{6});
  EXPECT_EQ(r.dumps.size(), 7u);
  EXPECT_EQ(r.analysis.culprit_ranks, std::vector<int>{6}) << format_text(r.analysis);
}

TEST(TrainingRehearsal, ADesyncIsNamed) {
  const Step s = eight_rank_step();
  Fault desync = fault(FaultKind::kDesync, 2, "tp", 0);
  desync.desync_count = 12345;
  const StepRehearsal r = rehearse_step(s.program, s.timeline, 8, {desync}, 30, 2000);
  ASSERT_FALSE(r.analysis.findings.empty());
  EXPECT_EQ(r.analysis.findings[0].kind, FrFindingKind::kSizeMismatch) << format_text(r.analysis);
  EXPECT_EQ(r.analysis.findings[0].group_ranks, (std::vector<int>{2, 3}));
  EXPECT_NE(r.analysis.verdict.find("[[12345]]"), std::string::npos) << r.analysis.verdict;
  // A pair has no majority, so which of the two issued the odd size cannot be told from the dumps.
  EXPECT_EQ(r.analysis.culprit_ranks.size(), 1u);
}

// Rank 1 works 3x slower from its second TP all_gather on: it reaches that op 0.2 s late (its 0.1 s
// of work since the first took 0.3 s), rank 0 waits for it, the op runs at rank 1's pace, and the
// lag spreads to stage 1 through the pipeline. Nothing hangs; the step ends late, and the dumps show
// rank 1 reaching its ops after its peers.
TEST(TrainingRehearsal, AStragglerIsLateEverywhereAndEveryoneWaitsForIt) {
  const Step s = eight_rank_step();
  Fault straggler = fault(FaultKind::kStraggler, 1, "tp", 1);
  straggler.factor = 3;
  const StepRehearsal r = rehearse_step(s.program, s.timeline, 8, {straggler}, 600, 2000);
  EXPECT_LT(r.first_wait_s, 0);
  EXPECT_TRUE(r.waiting_ranks.empty());
  ASSERT_EQ(r.dumps.size(), 8u);
  EXPECT_TRUE(r.analysis.findings.empty()) << format_text(r.analysis);
  EXPECT_DOUBLE_EQ(r.fault_free_end_s, 1.3);  // stage 1's DP reduce_scatter ends last
  EXPECT_GT(r.end_s, r.fault_free_end_s + 0.5);
  // The second TP all_gather: rank 1 arrives at 0.4 s, rank 0 at 0.2 s; both leave at 0.7 s.
  const FrEntry& late = r.dumps[1].entries[1];
  const FrEntry& waiting = r.dumps[0].entries[1];
  EXPECT_EQ(late.time_created_ns, 400'000'000);
  EXPECT_EQ(waiting.time_created_ns, 200'000'000);
  EXPECT_EQ(late.time_discovered_completed_ns, waiting.time_discovered_completed_ns);
  EXPECT_EQ(*waiting.time_discovered_completed_ns, 700'000'000);
  // Rank 3 (the other replica's TP peer of rank 2) shares no group with rank 1 before the DP
  // reduce_scatter: its first ops are on time.
  EXPECT_EQ(r.dumps[3].entries[1].time_created_ns, 200'000'000);
}

TEST(TrainingRehearsal, FaultsThatCannotStrikeAreErrors) {
  const Step s = eight_rank_step();
  EXPECT_THROW(rehearse_step(s.program, s.timeline, 8, {fault(FaultKind::kRankHang, 1, "ep", 0)}, 30, 2000), Error);
  EXPECT_THROW(rehearse_step(s.program, s.timeline, 8, {fault(FaultKind::kRankHang, 1, "tp", 9)}, 30, 2000), Error);
  EXPECT_THROW(rehearse_step(s.program, s.timeline, 8, {fault(FaultKind::kTransient, 1, "tp", 0)}, 30, 2000), Error);
  EXPECT_THROW(rehearse_step(s.program, s.timeline, 8, {fault(FaultKind::kRankHang, 8, "tp", 0)}, 30, 2000), Error);
}

}  // namespace
}  // namespace tandem::app
