// The IR's own rules: chunk partition, validation errors, symbolic-check errors, JSON strictness.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/algorithms.h"
#include "core/builder.h"
#include "core/error.h"
#include "tests/support/expect_error.h"
#include "core/schedule_json.h"
#include "core/validate.h"

namespace tandem {
namespace {

SlotRange in(uint32_t c, uint32_t n = 1) { return {BufferKind::kInput, c, n}; }
SlotRange out(uint32_t c, uint32_t n = 1) { return {BufferKind::kOutput, c, n}; }

using tandem::testing::expect_error;

TEST(ChunkMap, BalancedPartitionCoversTheBlockExactly) {
  for (int64_t count : {0, 1, 7, 8, 1000, 1001, 4097}) {
    for (uint32_t k : {1u, 3u, 8u, 13u}) {
      for (uint32_t tiles : {1u, 2u, 5u}) {
        for (int64_t align : {1, 4, 16}) {
          const ChunkMap map(count, k, tiles, align);
          int64_t next = 0;
          int64_t largest = 0;
          for (uint32_t t = 0; t < tiles; ++t) {
            for (uint32_t i = 0; i < k; ++i) {
              const ElementRange r = map.range(t, i);
              EXPECT_EQ(r.offset, next) << count << " " << k << " " << tiles << " " << align;
              if (r.offset + r.count < count) {
                EXPECT_EQ(r.count % align, 0);  // only the tail is short
              }
              next += r.count;
              largest = std::max(largest, r.count);
            }
          }
          EXPECT_EQ(next, count);
          EXPECT_EQ(map.max_chunk_elements(), largest);
        }
      }
    }
  }
}

TEST(ChunkMap, FirstPiecesAreOneLarger) {
  // 10 elements over 4 chunks: 3, 3, 2, 2 starting at i*2 + min(i, 2).
  const ChunkMap map(10, 4);
  EXPECT_EQ(map.range(0, 0).count, 3);
  EXPECT_EQ(map.range(0, 1).offset, 3);
  EXPECT_EQ(map.range(0, 2).offset, 6);
  EXPECT_EQ(map.range(0, 3).offset, 8);
  EXPECT_EQ(map.range(0, 3).count, 2);
}

// A correct 2-rank all_reduce written by hand: exchange, reduce.
ScheduleBuilder two_rank_all_reduce() {
  ScheduleBuilder b(Collective::kAllReduce, Algorithm::kDirect, 2, 0, 1);
  for (int r = 0; r < 2; ++r) {
    b.send(r, 0, 1 - r, in(0));
    b.recv_reduce(r, 0, 1 - r, in(0), out(0));
  }
  return b;
}

TEST(Validate, AcceptsAHandWrittenSchedule) {
  Schedule s = two_rank_all_reduce().finish();
  validate(s);
  symbolic_check(s);
  // The receive waits for the send in round 0: in place, Out[0] is In[0], which the send reads.
  EXPECT_EQ(s.num_rounds, 2u);
}

TEST(Validate, RejectsUnmatchedSend) {
  ScheduleBuilder b(Collective::kAllReduce, Algorithm::kDirect, 2, 0, 1);
  b.send(0, 0, 1, in(0));
  b.copy(0, 0, in(0), out(0));
  b.copy(1, 0, in(0), out(0));
  Schedule s = std::move(b).finish();
  expect_error([&] { validate(s); }, ErrorCode::kInvalidSchedule, {"rank 0 lane 0 op 0 (send to 1)", "unmatched send"});
}

TEST(Validate, RejectsUnmatchedReceive) {
  ScheduleBuilder b(Collective::kAllReduce, Algorithm::kDirect, 2, 0, 1);
  b.recv(1, 0, 0, out(0));
  b.copy(0, 0, in(0), out(0));
  Schedule s = std::move(b).finish();
  expect_error([&] { validate(s); }, ErrorCode::kInvalidSchedule, {"rank 1 lane 0 op 0 (recv from 0)", "unmatched receive"});
}

TEST(Validate, RejectsFifoOrderViolation) {
  // Rank 0 sends chunk 0 then chunks 1..2; rank 1 receives them the other way round.
  ScheduleBuilder b(Collective::kBroadcast, Algorithm::kDirect, 2, 0, 3);
  b.copy(0, 0, in(0, 3), out(0, 3));
  b.send(0, 0, 1, in(0));
  b.send(0, 0, 1, in(1, 2));
  b.recv(1, 0, 0, out(1, 2));
  b.recv(1, 0, 0, out(0));
  Schedule s = std::move(b).finish();
  expect_error([&] { validate(s); }, ErrorCode::kInvalidSchedule, {"rank 1 lane 0 op 0", "FIFO order violated"});
}

TEST(Validate, RejectsACycle) {
  // Both ranks first wait for the other's message: a deadlock.
  ScheduleBuilder b(Collective::kAllReduce, Algorithm::kDirect, 2, 0, 1);
  for (int r = 0; r < 2; ++r) {
    b.recv_reduce(r, 0, 1 - r, in(0), out(0));
    b.send(r, 0, 1 - r, in(0));
  }
  Schedule s = std::move(b).finish();
  expect_error([&] { validate(s); }, ErrorCode::kInvalidSchedule, {"cycle", "deadlocks"});
}

TEST(Validate, RejectsOutOfBoundsSlot) {
  ScheduleBuilder b = two_rank_all_reduce();
  Schedule s = std::move(b).finish();
  s.ranks[1].lanes[0].ops[1].dst = out(1);  // all_reduce with 1 chunk has Out[0] only
  expect_error([&] { validate(s); }, ErrorCode::kInvalidSchedule,
               {"rank 1 lane 0 op 1 (recv_reduce from 0)", "field dst", "out of bounds"});
}

TEST(Validate, RejectsOutOfRangePeerAndWritesToInput) {
  Schedule s = two_rank_all_reduce().finish();
  s.ranks[0].lanes[0].ops[0].peer = 5;
  expect_error([&] { validate(s); }, ErrorCode::kInvalidSchedule, {"rank 0 lane 0 op 0", "field peer", "out of range"});
  Schedule t = two_rank_all_reduce().finish();
  t.ranks[0].lanes[0].ops[1].dst = in(0);
  expect_error([&] { validate(t); }, ErrorCode::kInvalidSchedule, {"field dst", "read-only"});
}

TEST(Validate, RejectsARaceFromAMissingDependency) {
  // Two lanes of rank 0 write Out[0] with no dependency between them.
  ScheduleBuilder b(Collective::kAllReduce, Algorithm::kDirect, 1, 0, 1);
  b.copy(0, 0, in(0), out(0));
  b.copy(0, 1, in(0), out(0));
  Schedule s = std::move(b).finish();
  s.ranks[0].lanes[1].deps.clear();
  s.ranks[0].lanes[1].dep_begin = {0, 0};
  expect_error([&] { validate(s); }, ErrorCode::kInvalidSchedule, {"race in round 0", "missing dependency"});
}

TEST(SymbolicCheck, RejectsAMissingContribution) {
  // Rank 1 receives rank 0's chunk but does not add its own: its result misses a contribution.
  ScheduleBuilder b(Collective::kAllReduce, Algorithm::kDirect, 2, 0, 1);
  b.send(0, 0, 1, in(0));
  b.recv_reduce(0, 0, 1, in(0), out(0));
  b.send(1, 0, 0, in(0));
  b.recv(1, 0, 0, out(0));
  Schedule s = std::move(b).finish();
  validate(s);
  expect_error([&] { symbolic_check(s); }, ErrorCode::kCheckFailed, {"rank 1 Out[0]", "holds 1 contribution(s)"});
}

TEST(SymbolicCheck, RejectsADoubleCount) {
  ScheduleBuilder b = two_rank_all_reduce();
  b.reduce(0, 0, in(0), out(0));  // adds rank 0's own data a second time
  Schedule s = std::move(b).finish();
  validate(s);
  expect_error([&] { symbolic_check(s); }, ErrorCode::kCheckFailed, {"rank 0 Out[0]", "counted twice"});
}

TEST(SymbolicCheck, RejectsReadingUnwrittenScratch) {
  ScheduleBuilder b(Collective::kAllReduce, Algorithm::kDirect, 1, 0, 1);
  b.copy(0, 0, {BufferKind::kScratch, 0, 1}, out(0));
  Schedule s = std::move(b).finish();
  validate(s);
  expect_error([&] { symbolic_check(s); }, ErrorCode::kCheckFailed, {"reads Scratch[0] before anything was written"});
}

TEST(SymbolicCheck, CatchesAnInPlaceOnlyBug) {
  // Rank 1 reduces into Out[0] and only then sends In[0]. Out of place that is its own input; in
  // place In[0] already holds the sum, so rank 0 counts its own contribution twice.
  ScheduleBuilder b(Collective::kAllReduce, Algorithm::kDirect, 2, 0, 1);
  b.send(0, 0, 1, in(0));
  b.recv_reduce(1, 0, 0, in(0), out(0));
  b.send(1, 0, 0, in(0));
  b.recv_reduce(0, 0, 1, in(0), out(0));
  Schedule s = std::move(b).finish();
  validate(s);
  expect_error([&] { symbolic_check(s); }, ErrorCode::kCheckFailed, {"(in place)", "rank 0 Out[0]", "counted twice"});
}

TEST(ScheduleJson, RoundTripsEveryAlgorithm) {
  for (Algorithm a : all_algorithms()) {
    for (Collective c : all_collectives()) {
      if (!implements(a, c)) continue;
      const int n = a == Algorithm::kHierarchical ? 4 : 5;
      RankLayout layout = a == Algorithm::kHierarchical ? RankLayout::nodes(2, 2) : RankLayout::flat(n);
      const Schedule s = build_checked_schedule({c, 0, DataType::kF32, ReduceOp::kSum, 1, n}, layout, a);
      Schedule back = schedule_from_json(schedule_to_json(s));
      validate(back);
      symbolic_check(back);
      EXPECT_EQ(schedule_to_json(back), schedule_to_json(s)) << name(a) << " " << name(c);
    }
  }
}

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Golden files pin the exact lowering of a few small cases: a change to an algorithm shows up as a
// diff a reviewer reads. After an intended change, regenerate them by running this test with
// TANDEM_UPDATE_GOLDEN=1 and review the diff.
TEST(ScheduleJson, MatchesGoldenFiles) {
  struct Case {
    const char* file;
    Collective collective;
    Algorithm algorithm;
    int nranks;
  };
  for (const Case& c : {Case{"ring_all_reduce_4", Collective::kAllReduce, Algorithm::kRing, 4},
                        Case{"tree_all_reduce_4", Collective::kAllReduce, Algorithm::kTree, 4},
                        Case{"halving_doubling_all_reduce_3", Collective::kAllReduce, Algorithm::kHalvingDoubling, 3},
                        Case{"direct_all_to_all_3", Collective::kAllToAll, Algorithm::kDirect, 3}}) {
    const std::string path = std::string("tests/core/golden/") + c.file + ".json";
    const Schedule s = build_checked_schedule({c.collective, 0, DataType::kF32, ReduceOp::kSum, 0, c.nranks},
                                              RankLayout::flat(c.nranks), c.algorithm);
    if (std::getenv("TANDEM_UPDATE_GOLDEN") != nullptr) std::ofstream(path) << schedule_to_json(s) << "\n";
    const std::string golden = read_file(path);
    ASSERT_FALSE(golden.empty()) << path;
    const std::string now = schedule_to_json(s) + "\n";
    if (now != golden) {
      // Name the first differing line instead of printing two whole schedules.
      std::istringstream a(now), b(golden);
      std::string line_now, line_golden;
      int line = 1;
      while (std::getline(a, line_now) && std::getline(b, line_golden) && line_now == line_golden) ++line;
      ADD_FAILURE() << path << " differs at line " << line << ": now '" << line_now << "', golden '" << line_golden
                    << "'";
    }
  }
}

TEST(ScheduleJson, IsStrict) {
  const std::string good = schedule_to_json(two_rank_all_reduce().finish());
  auto mutate = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  expect_error([&] { schedule_from_json(mutate("\"schema_version\": 1", "\"schema_version\": 2")); }, ErrorCode::kFormat,
               {"schema_version", "version 2 is not supported"});
  expect_error([&] { schedule_from_json(mutate("\"root\": 0", "\"root\": 0, \"extra\": 1")); }, ErrorCode::kFormat,
               {"unknown field 'extra'"});
  expect_error([&] { schedule_from_json(mutate("\"root\": 0,", "")); }, ErrorCode::kFormat, {"missing field 'root'"});
  expect_error([&] { schedule_from_json(mutate("\"op\": \"send\"", "\"op\": \"teleport\"")); }, ErrorCode::kFormat,
               {"ranks[0].lanes[0].ops[0].op", "unknown op 'teleport'"});
  expect_error([&] { schedule_from_json(mutate("\"collective\": \"all_reduce\"", "\"collective\": 3")); },
               ErrorCode::kFormat, {"collective", "expected a string"});
  expect_error([&] { schedule_from_json("{\"schema_version\": 1,"); }, ErrorCode::kFormat, {"not valid JSON"});
}

}  // namespace
}  // namespace tandem
