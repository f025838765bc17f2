// Cross-rank flight-recorder analysis on dumps built in C++: each finding kind with its verdict and
// culprits, order independence, split groups, ring-buffer truncation, coalesced groups, p2p, scale.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fr_analysis.h"
#include "tests/support/shared_files.h"

namespace tandem {
namespace {

// ---- builders

struct Op {
  std::string name = "nccl:all_reduce";
  int64_t in = 1024;  // elements per input tensor
  int64_t out = -1;   // -1: same as in
  std::string dtype = "Float";
  FrState state = FrState::kCompleted;
};

FrEntry entry(int64_t seq, const Op& op = {}, const std::string& pg = "0") {
  FrEntry e;
  e.pg_name = pg;
  e.pg_desc = pg == "0" ? "default_pg" : "pg" + pg;
  e.collective_seq_id = seq;
  e.op_id = seq;
  e.profiling_name = op.name;
  e.input_sizes = {{op.in}};
  e.output_sizes = {{op.out < 0 ? op.in : op.out}};
  e.input_dtypes = {op.dtype};
  e.output_dtypes = {op.dtype};
  e.state = op.state;
  e.time_created_ns = seq * 1000;
  return e;
}

FrEntry p2p_entry(int64_t p2p_seq, const std::string& name, int64_t count = 256, const std::string& pg = "0") {
  FrEntry e = entry(0, Op{name, count}, pg);
  e.is_p2p = true;
  e.p2p_seq_id = p2p_seq;
  e.time_created_ns = p2p_seq * 1000 + 1;
  return e;
}

FrGroup group(const std::string& name, std::vector<int> ranks) {
  FrGroup g;
  g.name = name;
  g.desc = name == "0" ? "default_pg" : "pg" + name;
  g.ranks = std::move(ranks);
  return g;
}

std::vector<int> iota(int n, int from = 0) {
  std::vector<int> r(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) r[static_cast<size_t>(i)] = from + i;
  return r;
}

// record ids from `first_record` on (a first record above 0 means the ring wrapped).
FrDump dump(int rank, std::vector<FrGroup> groups, std::vector<FrEntry> entries, uint64_t first_record = 0) {
  FrDump d;
  d.rank = rank;
  d.comm_lib_version = "test";
  d.groups = std::move(groups);
  for (size_t i = 0; i < entries.size(); ++i) entries[i].record_id = first_record + i;
  d.entries = std::move(entries);
  return d;
}

// `ranks` ranks in group 0, each with all_reduces #1..n; `edit(rank, seq, op)` may change one.
template <typename Edit>
std::vector<FrDump> job(int ranks, int n, Edit edit) {
  std::vector<FrDump> dumps;
  for (int r = 0; r < ranks; ++r) {
    std::vector<FrEntry> entries;
    for (int s = 1; s <= n; ++s) {
      Op op;
      if (edit(r, s, op)) entries.push_back(entry(s, op));
    }
    dumps.push_back(dump(r, {group("0", iota(ranks))}, entries));
  }
  return dumps;
}

std::vector<FrDump> clean_job(int ranks, int n) {
  return job(ranks, n, [](int, int, Op&) { return true; });
}

// ---- all matched

TEST(FrAnalysis, AllMatchedGivesNoFindings) {
  const FrAnalysis a = analyze(clean_job(4, 5));
  EXPECT_TRUE(a.findings.empty());
  EXPECT_TRUE(a.culprit_ranks.empty());
  EXPECT_EQ(a.verdict, "no mismatches: 4 ranks, 1 group, 5 collectives matched");
  EXPECT_EQ(a.ranks, 4);
  EXPECT_EQ(a.groups, 1);
  EXPECT_EQ(a.entries, 20);
}

TEST(FrAnalysis, OneRankAndNoDumpsAreClean) {
  EXPECT_TRUE(analyze(clean_job(1, 3)).findings.empty());
  const FrAnalysis empty = analyze({});
  EXPECT_TRUE(empty.findings.empty());
  EXPECT_EQ(empty.verdict, "no mismatches: 0 ranks, 0 groups, 0 collectives matched");
}

// ---- each finding kind

TEST(FrAnalysis, RankThatNeverJoinedIsMissingAndTheCulprit) {
  // 8 ranks; rank 5 stops after #11, the others wait in #12.
  const auto dumps = job(8, 12, [](int r, int s, Op& op) {
    if (s == 12) op.state = FrState::kStarted;
    return !(r == 5 && s == 12);
  });
  const FrAnalysis a = analyze(dumps);
  ASSERT_EQ(a.findings.size(), 1u);
  const FrFinding& f = a.findings[0];
  EXPECT_EQ(f.kind, FrFindingKind::kMissingRanks);
  EXPECT_EQ(f.sequence, 12);
  EXPECT_EQ(f.collective, "nccl:all_reduce");
  EXPECT_EQ(f.missing_ranks, std::vector<int>{5});
  EXPECT_EQ(f.culprit_ranks, std::vector<int>{5});
  EXPECT_EQ(a.culprit_ranks, std::vector<int>{5});
  EXPECT_EQ(a.verdict,
            "rank 5 never joined nccl:all_reduce #12 of group 0 (default_pg): ranks 0-4, 6-7 are waiting in it");
}

TEST(FrAnalysis, MissingMajorityHintsAtAnExtraCollective) {
  // Rank 0 issued one all_reduce more than the others (PyTorch tutorial's crash.py).
  const auto dumps = job(4, 4, [](int r, int s, Op& op) {
    if (s == 4) op.state = FrState::kScheduled;
    return r == 0 || s < 4;
  });
  const FrAnalysis a = analyze(dumps);
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.culprit_ranks, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(a.verdict,
            "ranks 1-3 never joined nccl:all_reduce #4 of group 0 (default_pg): rank 0 is waiting in it (the missing "
            "ranks are the majority: did rank 0 issue an extra collective?)");
}

TEST(FrAnalysis, TypeMismatchNamesTheMinority) {
  const auto dumps = job(8, 9, [](int r, int s, Op& op) {
    if (r == 3 && s == 7) op.name = "nccl:all_gather", op.out = 8 * 1024;
    return true;
  });
  const FrAnalysis a = analyze(dumps);
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.findings[0].kind, FrFindingKind::kTypeMismatch);
  EXPECT_EQ(a.findings[0].collective, "nccl:all_reduce");
  EXPECT_EQ(a.culprit_ranks, std::vector<int>{3});
  EXPECT_EQ(a.verdict,
            "rank 3 issued nccl:all_gather where ranks 0-2, 4-7 issued nccl:all_reduce at #7 of group 0 (default_pg)");
}

TEST(FrAnalysis, SizeMismatchReportsOnlyTheFirstDivergence) {
  // Rank 2 sends a different size at #3 and #5: only #3 is reported.
  const auto dumps = job(4, 6, [](int r, int s, Op& op) {
    if (r == 2 && (s == 3 || s == 5)) op.in = 2048;
    return true;
  });
  const FrAnalysis a = analyze(dumps);
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.findings[0].kind, FrFindingKind::kSizeMismatch);
  EXPECT_EQ(a.findings[0].sequence, 3);
  EXPECT_EQ(a.culprit_ranks, std::vector<int>{2});
  EXPECT_EQ(a.verdict,
            "rank 2 sent size [[2048]] where the others sent [[1024]] in nccl:all_reduce #3 of group 0 (default_pg)");
}

TEST(FrAnalysis, DtypeMismatch) {
  const auto dumps = job(4, 5, [](int r, int s, Op& op) {
    if (r == 1 && s == 4) op.dtype = "Half";
    return true;
  });
  const FrAnalysis a = analyze(dumps);
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.findings[0].kind, FrFindingKind::kDtypeMismatch);
  EXPECT_EQ(a.culprit_ranks, std::vector<int>{1});
  EXPECT_EQ(a.verdict,
            "rank 1 has dtype Half where the others have Float in nccl:all_reduce #4 of group 0 (default_pg)");
}

TEST(FrAnalysis, StateMismatchTieGoesToTheLowestRanksState) {
  // 4 completed, 4 scheduled: a tie, so rank 0's "completed" is the majority.
  const auto dumps = job(8, 9, [](int r, int s, Op& op) {
    if (s == 9 && r >= 4) op.state = FrState::kScheduled;
    return true;
  });
  const FrAnalysis a = analyze(dumps);
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.findings[0].kind, FrFindingKind::kStateMismatch);
  EXPECT_EQ(a.culprit_ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(
      a.verdict,
      "ranks 4-7 are still in nccl:all_reduce #9 of group 0 (default_pg) (scheduled) while ranks 0-3 completed it");
}

TEST(FrAnalysis, StateMismatchWhereTheMinorityCompleted) {
  const auto dumps = job(4, 2, [](int r, int s, Op& op) {
    if (s == 2 && r != 0) op.state = FrState::kStarted;
    return true;
  });
  // A collective completes nowhere unless every member took part: the ranks still in it are behind.
  const FrAnalysis a = analyze(dumps);
  EXPECT_EQ(a.culprit_ranks, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(a.verdict,
            "ranks 1-3 are still in nccl:all_reduce #2 of group 0 (default_pg) (started) while rank 0 completed it");
}

TEST(FrAnalysis, MajorityAmongThreeValues) {
  // sizes at #1: ranks 0,1 -> 10; ranks 2,3,4 -> 20; rank 5 -> 30. Majority 20.
  const auto dumps = job(6, 1, [](int r, int, Op& op) {
    op.in = r < 2 ? 10 : (r < 5 ? 20 : 30);
    return true;
  });
  const FrAnalysis a = analyze(dumps);
  EXPECT_EQ(a.culprit_ranks, (std::vector<int>{0, 1, 5}));
  EXPECT_EQ(a.verdict,
            "ranks 0-1 sent size [[10]] and rank 5 sent size [[30]] where the others sent [[20]] in nccl:all_reduce #1 "
            "of group 0 (default_pg)");
}

TEST(FrAnalysis, SizeRulesBrokenOnEveryRank) {
  // all_reduce with input != output on every rank: all culprits.
  const FrAnalysis bad = analyze(job(3, 1, [](int, int, Op& op) {
    op.out = 2048;
    return true;
  }));
  ASSERT_EQ(bad.findings.size(), 1u);
  EXPECT_EQ(bad.findings[0].kind, FrFindingKind::kSizeMismatch);
  EXPECT_EQ(bad.culprit_ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_NE(bad.verdict.find("input [[1024]] but output [[2048]]"), std::string::npos) << bad.verdict;

  // all_gather: output numel = input numel x group size; reduce_scatter the other way round.
  EXPECT_TRUE(analyze(job(4, 1, [](int, int, Op& op) {
                op.name = "nccl:all_gather", op.out = 4 * 1024;
                return true;
              })).findings.empty());
  EXPECT_TRUE(analyze(job(4, 1, [](int, int, Op& op) {
                op.name = "nccl:reduce_scatter", op.out = 256;
                return true;
              })).findings.empty());
  const FrAnalysis gather = analyze(job(4, 1, [](int, int, Op& op) {
    op.name = "nccl:all_gather", op.out = 3 * 1024;
    return true;
  }));
  ASSERT_EQ(gather.findings.size(), 1u);
  EXPECT_NE(gather.verdict.find("not 1024 x 4 ranks"), std::string::npos) << gather.verdict;
}

TEST(FrAnalysis, MissingDumpsGetOneFindingAfterTheDivergences) {
  // Group of 4, dumps from ranks 0-2 only; rank 1 also has a wrong size.
  auto dumps = job(4, 3, [](int r, int s, Op& op) {
    if (r == 1 && s == 2) op.in = 4;
    return true;
  });
  dumps.pop_back();
  const FrAnalysis a = analyze(dumps);
  ASSERT_EQ(a.findings.size(), 2u);
  EXPECT_EQ(a.findings[0].kind, FrFindingKind::kSizeMismatch);
  EXPECT_EQ(a.findings[1].kind, FrFindingKind::kMissingDumps);
  EXPECT_EQ(a.findings[1].sequence, -1);
  EXPECT_EQ(a.findings[1].missing_ranks, std::vector<int>{3});
  EXPECT_EQ(a.culprit_ranks, std::vector<int>{1});

  dumps = clean_job(4, 3);
  dumps.pop_back();
  const FrAnalysis only = analyze(dumps);
  ASSERT_EQ(only.findings.size(), 1u);
  EXPECT_EQ(only.verdict, "rank 3 of group 0 (default_pg) left no dump: nothing can be said about it");
}

// ---- order independence

TEST(FrAnalysis, VerdictDoesNotDependOnDumpOrder) {
  std::vector<std::vector<FrDump>> cases = {
      job(8, 12, [](int r, int s, Op&) { return !(r == 5 && s == 12); }),
      job(8, 9,
          [](int r, int s, Op& op) {
            if (s == 9 && r >= 4) op.state = FrState::kScheduled;
            return true;
          }),
      job(6, 3,
          [](int r, int s, Op& op) {
            if (s == 2) op.in = r % 2 == 0 ? 8 : 16;  // 3 vs 3: a tie
            return true;
          }),
  };
  std::mt19937 rng(7);
  for (auto& dumps : cases) {
    const std::string expected = format_json(analyze(dumps));
    for (int i = 0; i < 10; ++i) {
      std::shuffle(dumps.begin(), dumps.end(), rng);
      EXPECT_EQ(format_json(analyze(dumps)), expected);
    }
  }
}

// ---- groups

TEST(FrAnalysis, SplitGroupsReusingANameAreKeptApart) {
  // Group "1" is {0,1} on ranks 0-1 and {2,3} on ranks 2-3; each pair runs its own all_reduces with
  // its own sizes.
  std::vector<FrDump> dumps;
  for (int r = 0; r < 4; ++r) {
    const std::vector<int> pair = r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    std::vector<FrEntry> entries = {entry(1), entry(1, Op{"nccl:all_reduce", r < 2 ? 64 : 128}, "1"),
                                    entry(2, Op{"nccl:all_reduce", r < 2 ? 64 : 128}, "1"), entry(2)};
    dumps.push_back(dump(r, {group("0", iota(4)), group("1", pair)}, entries));
  }
  const FrAnalysis a = analyze(dumps);
  EXPECT_TRUE(a.findings.empty()) << format_text(a);
  EXPECT_EQ(a.groups, 3);
  EXPECT_EQ(a.verdict, "no mismatches: 4 ranks, 3 groups, 6 collectives matched");

  // A mismatch inside one of them names the membership, since the name alone is ambiguous.
  dumps[3].entries[2].input_sizes = {{7}};
  const FrAnalysis b = analyze(dumps);
  ASSERT_EQ(b.findings.size(), 1u);
  EXPECT_EQ(b.findings[0].group, "1");
  EXPECT_EQ(b.findings[0].group_ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(b.culprit_ranks, std::vector<int>{3});
  EXPECT_NE(b.verdict.find("of group 1 (pg1) of ranks 2-3"), std::string::npos) << b.verdict;
}

TEST(FrAnalysis, GroupsAreReportedInNumericNameOrder) {
  // Groups "10" and "2" (ranks 0-1) both diverge; "2" comes first.
  std::vector<FrDump> dumps;
  for (int r = 0; r < 2; ++r) {
    const int64_t n = r == 0 ? 1 : 2;
    dumps.push_back(dump(r, {group("10", {0, 1}), group("2", {0, 1})},
                         {entry(1, Op{"nccl:all_reduce", n}, "10"), entry(1, Op{"nccl:all_reduce", n}, "2")}));
  }
  const FrAnalysis a = analyze(dumps);
  ASSERT_EQ(a.findings.size(), 2u);
  EXPECT_EQ(a.findings[0].group, "2");
  EXPECT_EQ(a.findings[1].group, "10");
}

TEST(FrAnalysis, EntryOfAnUndeclaredGroupIsAFormatError) {
  std::vector<FrDump> dumps = {dump(0, {group("0", {0})}, {entry(1, {}, "7")})};
  try {
    analyze(dumps);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat);
    EXPECT_NE(std::string(e.what()).find("'7'"), std::string::npos) << e.what();
  }
  dumps = {dump(0, {group("0", {0, 1})}, {}), dump(0, {group("0", {0, 1})}, {})};
  EXPECT_THROW(analyze(dumps), Error);
}

// Dumps of two jobs in one folder (a reused output folder): an 8-rank job's ranks 0-7 and a 64-rank
// job's ranks 8-63. Read as one job they gave a false finding ("ranks 0-7 never joined ... of
// ranks 0-63"); they are refused instead.
TEST(FrAnalysis, DumpsOfDifferentJobsAreRefused) {
  std::vector<FrDump> dumps = clean_job(8, 3);
  const std::vector<FrDump> big = clean_job(64, 5);
  dumps.insert(dumps.end(), big.begin() + 8, big.end());
  try {
    analyze(dumps);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat);
    EXPECT_EQ(std::string(e.what()),
              "these dumps come from different jobs: rank 0's declares group '0' as ranks 0-7, rank 8's as ranks "
              "0-63; analyze one job's dumps at a time");
  }
  // Disjoint memberships of one name are one job's split_group, not two jobs.
  std::vector<FrDump> split = {dump(0, {group("1", {0, 1})}, {entry(1, {}, "1")}),
                               dump(1, {group("1", {0, 1})}, {entry(1, {}, "1")}),
                               dump(2, {group("1", {2, 3})}, {entry(1, {}, "1")}),
                               dump(3, {group("1", {2, 3})}, {entry(1, {}, "1")})};
  EXPECT_TRUE(analyze(split).findings.empty());
}

// A pg_config listing a rank twice used to be accepted, and the wrong rank blamed.
TEST(FrAnalysis, AGroupListingARankTwiceIsRefused) {
  const std::vector<FrDump> dumps = {dump(0, {group("0", {3, 3, 3})}, {}), dump(3, {group("0", {3, 3, 3})}, {})};
  try {
    analyze(dumps);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat);
    EXPECT_NE(std::string(e.what()).find("lists a rank twice in its pg_config (3, 3, 3)"), std::string::npos)
        << e.what();
  }
}

// ---- ring-buffer truncation

TEST(FrAnalysis, TruncatedRingIsUnknownNotMissing) {
  // Rank 0's ring kept only #6..#10; the others kept #1..#10.
  auto dumps = clean_job(4, 10);
  dumps[0].entries.erase(dumps[0].entries.begin(), dumps[0].entries.begin() + 5);
  for (size_t i = 0; i < dumps[0].entries.size(); ++i) dumps[0].entries[i].record_id = 5 + i;
  EXPECT_TRUE(analyze(dumps).findings.empty()) << format_text(analyze(dumps));

  // A rank whose ring was flooded by another group's entries holds none of group "1": unknown.
  std::vector<FrDump> flooded;
  for (int r = 0; r < 2; ++r) {
    std::vector<FrEntry> entries;
    if (r == 0) entries = {entry(1, {}, "1"), entry(1), entry(2)};
    if (r == 1) entries = {entry(1), entry(2)};
    flooded.push_back(dump(r, {group("0", {0, 1}), group("1", {0, 1})}, entries, r == 1 ? 40 : 0));
  }
  EXPECT_TRUE(analyze(flooded).findings.empty()) << format_text(analyze(flooded));

  // Without truncation the same rank never joined.
  flooded[1] = dump(1, {group("0", {0, 1}), group("1", {0, 1})}, {entry(1), entry(2)});
  const FrAnalysis a = analyze(flooded);
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.findings[0].kind, FrFindingKind::kMissingRanks);
  EXPECT_EQ(a.findings[0].group, "1");
  EXPECT_EQ(a.culprit_ranks, std::vector<int>{1});
}

TEST(FrAnalysis, MemberWhoseDumpDoesNotDeclareTheGroupNeverJoinedIt) {
  std::vector<FrDump> dumps = {dump(0, {group("0", {0, 1}), group("1", {0, 1})}, {entry(1, {}, "1")}),
                               dump(1, {group("0", {0, 1})}, {})};
  const FrAnalysis a = analyze(dumps);
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.findings[0].kind, FrFindingKind::kMissingRanks);
  EXPECT_EQ(a.culprit_ranks, std::vector<int>{1});
}

// ---- coalesced groups

std::vector<FrEntry> coalesced(int64_t seq, const std::vector<std::string>& ops) {
  std::vector<FrEntry> entries;
  for (const std::string& op : ops) entries.push_back(entry(seq, Op{op, 512}));
  FrEntry marker = entry(seq, Op{"nccl:coalesced"});
  marker.input_sizes.clear();
  marker.output_sizes.clear();
  entries.push_back(marker);
  return entries;
}

TEST(FrAnalysis, CoalescedGroupsAreComparedAsOneUnit) {
  auto build = [](int odd_rank) {
    std::vector<FrDump> dumps;
    for (int r = 0; r < 4; ++r) {
      std::vector<FrEntry> entries = {entry(1)};
      const std::string second = r == odd_rank ? "nccl:broadcast" : "nccl:all_reduce";
      for (FrEntry& e : coalesced(2, {"nccl:all_reduce", second, "nccl:all_reduce"})) entries.push_back(e);
      entries.push_back(entry(3));
      dumps.push_back(dump(r, {group("0", iota(4))}, entries));
    }
    return dumps;
  };
  const FrAnalysis matched = analyze(build(-1));
  EXPECT_TRUE(matched.findings.empty()) << format_text(matched);
  EXPECT_EQ(matched.verdict, "no mismatches: 4 ranks, 1 group, 3 collectives matched");

  const FrAnalysis a = analyze(build(2));
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.findings[0].kind, FrFindingKind::kTypeMismatch);
  EXPECT_EQ(a.findings[0].sequence, 2);
  EXPECT_EQ(a.culprit_ranks, std::vector<int>{2});
  EXPECT_EQ(a.verdict,
            "rank 2 issued nccl:coalesced(nccl:all_reduce, nccl:broadcast, nccl:all_reduce) where ranks 0-1, 3 issued "
            "nccl:coalesced(nccl:all_reduce, nccl:all_reduce, nccl:all_reduce) at #2 of group 0 (default_pg)");
}

// ---- p2p

TEST(FrAnalysis, P2pSendMeetsRecv) {
  std::vector<FrDump> dumps = {dump(0, {group("0", {0, 1})}, {entry(1), p2p_entry(1, "nccl:send 0->1")}),
                               dump(1, {group("0", {0, 1})}, {entry(1), p2p_entry(1, "nccl:recv 1<-0")})};
  const FrAnalysis a = analyze(dumps);
  EXPECT_TRUE(a.findings.empty()) << format_text(a);
  EXPECT_EQ(a.verdict, "no mismatches: 2 ranks, 1 group, 2 collectives matched");

  // Sizes differ: a pair has no majority, the higher rank is named.
  dumps[1].entries[1].output_sizes = {{512}};
  const FrAnalysis size = analyze(dumps);
  ASSERT_EQ(size.findings.size(), 1u);
  EXPECT_EQ(size.findings[0].kind, FrFindingKind::kSizeMismatch);
  EXPECT_TRUE(size.findings[0].p2p);
  EXPECT_EQ(size.culprit_ranks, std::vector<int>{1});
  EXPECT_EQ(size.verdict,
            "rank 1's nccl:recv 1<-0 has size [[512]] where rank 0's nccl:send 0->1 has [[256]] at p2p #1 of group 0 "
            "(default_pg)");

  // Both send: a type mismatch.
  dumps[1].entries[1] = p2p_entry(1, "nccl:send 1->0");
  dumps[1].entries[1].record_id = 1;
  const FrAnalysis type = analyze(dumps);
  ASSERT_EQ(type.findings.size(), 1u);
  EXPECT_EQ(type.findings[0].kind, FrFindingKind::kTypeMismatch);
  EXPECT_EQ(type.verdict,
            "rank 1 issued nccl:send 1->0 where rank 0 issued nccl:send 0->1 at p2p #1 of group 0 (default_pg)");
}

TEST(FrAnalysis, P2pPeerThatNeverPostedItsRecvIsMissing) {
  // Group of 4: rank 2 sends to rank 3 (local ranks), rank 3 never posts the recv; ranks 0-1 do no p2p.
  std::vector<FrDump> dumps;
  for (int r = 0; r < 4; ++r) {
    std::vector<FrEntry> entries = {entry(1)};
    if (r == 2) {
      entries.push_back(p2p_entry(1, "nccl:send 2->3"));
      entries.back().state = FrState::kScheduled;
    }
    dumps.push_back(dump(r, {group("0", iota(4))}, entries));
  }
  const FrAnalysis a = analyze(dumps);
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.findings[0].kind, FrFindingKind::kMissingRanks);
  EXPECT_TRUE(a.findings[0].p2p);
  EXPECT_EQ(a.culprit_ranks, std::vector<int>{3});
  EXPECT_EQ(a.verdict, "rank 3 never joined nccl:send 2->3 p2p #1 of group 0 (default_pg): rank 2 is waiting in it");
}

TEST(FrAnalysis, P2pLocalRanksMapThroughTheMembership) {
  // Group "1" holds global ranks 4 and 6: local 0 -> 4, local 1 -> 6.
  std::vector<FrDump> dumps = {
      dump(4, {group("1", {4, 6})}, {p2p_entry(1, "nccl:send 0->1", 256, "1")}),
      dump(6, {group("1", {4, 6})}, {p2p_entry(1, "nccl:recv 1<-0", 256, "1")}),
  };
  EXPECT_TRUE(analyze(dumps).findings.empty()) << format_text(analyze(dumps));
  dumps[1].entries[0].profiling_name = "nccl:recv 1<-5";
  EXPECT_THROW(analyze(dumps), Error);
}

// ---- output

TEST(FrAnalysis, TextAndJsonCarryTheFindings) {
  const auto dumps = job(8, 12, [](int r, int s, Op&) { return !(r == 5 && s == 12); });
  const FrAnalysis a = analyze(dumps);
  const std::string text = format_text(a);
  EXPECT_EQ(text.substr(0, a.verdict.size() + 1), a.verdict + "\n");
  EXPECT_NE(text.find("[missing_ranks] group 0 (default_pg), ranks 0-7, #12: nccl:all_reduce"), std::string::npos)
      << text;
  EXPECT_NE(text.find("culprit ranks: 5"), std::string::npos) << text;

  const nlohmann::json json = nlohmann::json::parse(format_json(a));
  EXPECT_EQ(json["verdict"], a.verdict);
  EXPECT_EQ(json["culprit_ranks"], nlohmann::json::array({5}));
  EXPECT_EQ(json["ranks"], 8);
  EXPECT_EQ(json["groups"], 1);
  EXPECT_EQ(json["entries"], 95);
  ASSERT_EQ(json["findings"].size(), 1u);
  const nlohmann::json& f = json["findings"][0];
  EXPECT_EQ(f["kind"], "missing_ranks");
  EXPECT_EQ(f["group"], "0");
  EXPECT_EQ(f["group_desc"], "default_pg");
  EXPECT_EQ(f["sequence"], 12);
  EXPECT_EQ(f["collective"], "nccl:all_reduce");
  EXPECT_EQ(f["missing_ranks"], nlohmann::json::array({5}));
  EXPECT_EQ(f["culprit_ranks"], nlohmann::json::array({5}));
  EXPECT_EQ(f["detail"], a.verdict);
}

TEST(FrAnalysis, KindNames) {
  EXPECT_EQ(name(FrFindingKind::kMissingRanks), "missing_ranks");
  EXPECT_EQ(name(FrFindingKind::kTypeMismatch), "collective_type_mismatch");
  EXPECT_EQ(name(FrFindingKind::kSizeMismatch), "size_mismatch");
  EXPECT_EQ(name(FrFindingKind::kDtypeMismatch), "dtype_mismatch");
  EXPECT_EQ(name(FrFindingKind::kStateMismatch), "state_mismatch");
  EXPECT_EQ(name(FrFindingKind::kMissingDumps), "missing_dumps");
}

// ---- scale

TEST(FrAnalysis, ThousandRanksTwoHundredEntriesEach) {
  // 1,024 ranks, 200 all_reduces each; rank 777 never joins the last one.
  const auto dumps = job(1024, 200, [](int r, int s, Op& op) {
    if (s == 200) op.state = FrState::kStarted;
    return !(r == 777 && s == 200);
  });
  const auto start = std::chrono::steady_clock::now();
  const FrAnalysis a = analyze(dumps);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(a.findings.size(), 1u);
  EXPECT_EQ(a.culprit_ranks, std::vector<int>{777});
  EXPECT_EQ(a.verdict,
            "rank 777 never joined nccl:all_reduce #200 of group 0 (default_pg): ranks 0-776, 778-1023 are "
            "waiting in it");
  EXPECT_LT(seconds, 30.0);  // about 0.5 s in Release; generous for Debug and sanitizer builds
}

}  // namespace
}  // namespace tandem

// ---- dumps PyTorch itself wrote

namespace tandem {
namespace {

struct RealSet {
  const char* name;
  std::vector<int> injected;  // fault_injection.log
  std::vector<int> culprits;  // NVIDIA's analyzer (nvrx_reference_output.txt): the missing ranks
  const char* verdict_group;  // ... and the group it names
};

// Two 16-rank Megatron MoE jobs (PyTorch 2.9, NCCL 2.27.3) from nvidia-resiliency-ext: faults on two
// ranks, then every rank dumped the entries that had not completed. The culprits must be the
// injected ranks NVIDIA's analyzer names, and no healthy rank may be a culprit anywhere.
TEST(FrAnalysisRealDumps, CulpritsAreTheInjectedRanksNvidiaNames) {
  const RealSet sets[] = {{"gpu_error_1st", {12, 14}, {12}, "74"}, {"lock_gil_1st", {9, 14}, {9, 14}, "72"}};
  for (const RealSet& set : sets) {
    const auto dir = test::shared_reference("pytorch-files/fr") / set.name;
    if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
    const std::vector<FrDump> dumps = read_dump_dir(dir, "_dump_");
    ASSERT_EQ(dumps.size(), 16u);
    for (const FrDump& d : dumps) EXPECT_TRUE(d.warnings.empty()) << set.name << " rank " << d.rank;
    const FrAnalysis a = analyze(dumps);
    SCOPED_TRACE(set.name + std::string(": ") + format_text(a));
    EXPECT_EQ(a.culprit_ranks, set.culprits);
    EXPECT_EQ(a.root_ranks, set.culprits);
    ASSERT_FALSE(a.findings.empty());
    EXPECT_EQ(a.findings[0].kind, FrFindingKind::kMissingRanks);
    EXPECT_EQ(a.findings[0].group, set.verdict_group);
    EXPECT_EQ(a.findings[0].collective, "nccl:all_to_all");
    for (const FrFinding& f : a.findings) {
      for (int rank : f.culprit_ranks) {
        EXPECT_TRUE(std::count(set.injected.begin(), set.injected.end(), rank)) << "healthy rank " << rank << " blamed: "
                                                                                << f.detail;
      }
    }
  }
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// TP8 x DP2 on 16 ranks: TP groups {0-7}, {8-15}; DP groups {r, r+8}. Rank 13 hangs before TP #5,
// so its TP peers wait in TP #5; their DP partners (ranks 0-4, 6-7... of the other replica) never
// reach DP #3 because they wait in TP too. The DP group {5, 13} shows rank 13 missing, and the
// DP groups {r, r+8} show the second replica's ranks missing: victims, waiting on rank 13.
TEST(FrAnalysis, TheCulpritIsTheRankTheWaitsLeadTo) {
  std::vector<FrDump> dumps;
  for (int r = 0; r < 16; ++r) {
    const int replica = r / 8;
    const std::string tp = replica == 0 ? "1" : "2";
    const std::string dp = std::to_string(3 + r % 8);
    std::vector<FrGroup> groups = {group(tp, iota(8, replica * 8)), group(dp, {r % 8, r % 8 + 8})};
    std::vector<FrEntry> entries;
    // Replica 0 finished TP #1..#6 and waits in DP #3; replica 1 finished TP #1..#4 and waits in
    // TP #5, where rank 13 never arrives.
    const int tp_done = replica == 0 ? 6 : 4;
    for (int s = 1; s <= tp_done; ++s) entries.push_back(entry(s, {}, tp));
    for (int s = 1; s <= 2; ++s) entries.push_back(entry(s, {}, dp));
    if (replica == 0) entries.push_back(entry(3, Op{.state = FrState::kStarted}, dp));
    if (replica == 1 && r != 13) entries.push_back(entry(5, Op{.state = FrState::kStarted}, tp));
    // A step's DP collectives follow its TP ones.
    for (FrEntry& e : entries) {
      if (e.pg_name == dp) e.time_created_ns += 100'000;
    }
    dumps.push_back(dump(r, groups, entries));
  }
  const FrAnalysis a = analyze(dumps);
  EXPECT_EQ(a.root_ranks, std::vector<int>{13}) << format_text(a);
  EXPECT_EQ(a.culprit_ranks, std::vector<int>{13});
  EXPECT_EQ(a.findings[0].group, "2");
  EXPECT_EQ(a.verdict,
            "rank 13 never joined nccl:all_reduce #5 of group 2 (pg2): ranks 8-12, 14-15 are waiting in it");
  // The DP groups' findings name their missing ranks, but blame rank 13 and say why.
  for (const FrFinding& f : a.findings) EXPECT_EQ(f.culprit_ranks, std::vector<int>{13}) << f.detail;
  const auto dp8 = std::find_if(a.findings.begin(), a.findings.end(), [](const FrFinding& f) { return f.group == "3"; });
  ASSERT_NE(dp8, a.findings.end());
  EXPECT_EQ(dp8->missing_ranks, std::vector<int>{8});
  EXPECT_NE(dp8->detail.find("rank 8 waits on rank 13 in nccl:all_reduce #5 of group 2 (pg2)"), std::string::npos)
      << dp8->detail;
}

}  // namespace
}  // namespace tandem
