// The host executor's contract beyond plain correctness: timeouts that name the missing rank,
// errors that stop every rank, desyncs, caller-owned rank threads running consecutive
// collectives, tiles and alignment, channels, rank-symmetric schedules, and checks that a wrong
// result is caught.
#include "backend/host/host_executor.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/algorithms.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fault_report.h"
#include "tests/backend/host/collective_check.h"

namespace tandem {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Generous bound for "returned promptly, did not hang" (sanitizer builds are slow).
constexpr auto kPrompt = std::chrono::seconds(20);

struct Outcome {
  std::optional<ErrorCode> error;  // empty: the rank returned normally
  std::string message;
};

// Runs `ranks` of `world` on threads of our own (the caller-owned form) and returns each outcome.
std::vector<Outcome> run_ranks(HostWorld& world, const std::vector<int>& ranks, const Schedule& schedule,
                               const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                               const RunContext& context) {
  std::vector<Outcome> outcomes(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        world.run_rank(ranks[i], schedule, spec, buffers[static_cast<size_t>(ranks[i])], context);
      } catch (const Error& error) {
        outcomes[i] = {error.code(), error.what()};
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return outcomes;
}

CollectiveSpec spec_of(Collective collective, int n, int64_t count, DataType dtype = DataType::kF32,
                       ReduceOp op = ReduceOp::kSum, int root = 0) {
  return CollectiveSpec{.collective = collective, .count = count, .dtype = dtype, .op = op, .root = root, .nranks = n};
}

TEST(HostWorldTest, TimeoutNamesTheRankThatNeverArrived) {
  const CollectiveSpec spec = spec_of(Collective::kAllReduce, 4, 1001);
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(4), Algorithm::kRing);
  test::CollectiveData data(spec, false);
  HostWorld world(4);
  const RunContext context{.timeout = milliseconds(200)};

  const auto start = Clock::now();
  const std::vector<Outcome> outcomes = run_ranks(world, {0, 1, 2}, schedule, spec, data.buffers(), context);
  EXPECT_LT(Clock::now() - start, kPrompt);
  for (const Outcome& outcome : outcomes) {
    ASSERT_TRUE(outcome.error.has_value());
    EXPECT_EQ(*outcome.error, ErrorCode::kTimeout);
    EXPECT_NE(outcome.message.find("all_reduce (ring, 4 ranks) timed out after 200 ms: rank 3 never arrived (rank "),
              std::string::npos)
        << outcome.message;
    // The rank named as waiting is the one that waits on rank 3 directly (its ring successor).
    EXPECT_NE(outcome.message.find("(rank 0 waits on lane 0 op "), std::string::npos) << outcome.message;
    EXPECT_EQ(outcome.message.substr(outcome.message.size() - 8), " from 3)") << outcome.message;
  }
  // Every rank reports the same first error.
  EXPECT_EQ(outcomes[0].message, outcomes[1].message);
  EXPECT_EQ(outcomes[0].message, outcomes[2].message);

  // The straggler finally arrives: it fails at once with the collective's error instead of waiting
  // out its own (long) timeout.
  const auto late = Clock::now();
  const std::vector<Outcome> straggler =
      run_ranks(world, {3}, schedule, spec, data.buffers(), RunContext{.timeout = std::chrono::seconds(60)});
  EXPECT_LT(Clock::now() - late, kPrompt);
  ASSERT_TRUE(straggler[0].error.has_value());
  EXPECT_EQ(straggler[0].message, outcomes[0].message);
}

TEST(HostWorldTest, TimeoutListsEveryMissingRank) {
  const CollectiveSpec spec = spec_of(Collective::kAllGather, 5, 10, DataType::kI32);
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(5), Algorithm::kRing);
  test::CollectiveData data(spec, false);
  HostWorld world(5);
  const std::vector<Outcome> outcomes =
      run_ranks(world, {0, 2}, schedule, spec, data.buffers(), RunContext{.timeout = milliseconds(100)});
  for (const Outcome& outcome : outcomes) {
    ASSERT_TRUE(outcome.error.has_value());
    EXPECT_EQ(*outcome.error, ErrorCode::kTimeout);
    EXPECT_NE(outcome.message.find("all_gather (ring, 5 ranks) timed out after 100 ms: ranks 1, 3, 4 never arrived"),
              std::string::npos)
        << outcome.message;
  }
}

// A hand-made schedule in which rank 0 waits for a message rank 1 never sends (it has no ops):
// every rank arrived, so the message says where the awaited peer stands.
TEST(HostExecutorTest, TimeoutInsideTheCollectiveSaysWhereThePeerStands) {
  Schedule schedule;
  schedule.collective = Collective::kSendRecv;
  schedule.algorithm = Algorithm::kDirect;
  schedule.nranks = 2;
  schedule.ranks.resize(2);
  Lane lane;
  lane.ops.push_back(Op{.kind = OpKind::kRecv, .peer = 1, .src = {}, .dst = {BufferKind::kOutput, 0, 1}});
  lane.dep_begin = {0, 0};
  schedule.ranks[0].lanes.push_back(lane);

  const CollectiveSpec spec = spec_of(Collective::kSendRecv, 2, 8);
  test::CollectiveData data(spec, false);
  HostExecutor executor;
  const auto start = Clock::now();
  try {
    executor.run(schedule, spec, data.buffers(), RunContext{.timeout = milliseconds(100)});
    FAIL() << "expected a timeout";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kTimeout);
    EXPECT_STREQ(error.what(),
                 "host send_recv (direct, 2 ranks) timed out after 100 ms: rank 0 waits on lane 0 op 0, recv from 1; "
                 "rank 1 has finished");
    ASSERT_NE(error.report(), nullptr);
    EXPECT_EQ(error.report()->kind, FaultReport::Kind::kStalled);
    EXPECT_EQ(error.report()->rank, 0);
    EXPECT_EQ(error.report()->peer, 1);
    EXPECT_EQ(error.report()->fault, -1);
  }
  EXPECT_LT(Clock::now() - start, kPrompt);
}

TEST(HostExecutorTest, AnErrorInOneRankStopsTheOthersPromptly) {
  const CollectiveSpec spec = spec_of(Collective::kAllReduce, 4, 1001);
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(4), Algorithm::kRing);
  test::CollectiveData data(spec, false);
  std::vector<RankBuffers> buffers(data.buffers().begin(), data.buffers().end());
  buffers[2].output = nullptr;  // rank 2 fails at its first write of the output
  HostExecutor executor;
  const auto start = Clock::now();
  // The default timeout is a minute: returning well before it means the others were stopped.
  try {
    executor.run(schedule, spec, buffers, RunContext{});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(error.what(), "host rank 2: the Out buffer is null");
  }
  EXPECT_LT(Clock::now() - start, kPrompt);
}

TEST(HostWorldTest, MismatchedCallsAreADesync) {
  const CollectiveSpec spec = spec_of(Collective::kAllReduce, 2, 16);
  CollectiveSpec other = spec;
  other.count = 17;
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(2), Algorithm::kRing);
  test::CollectiveData data(other, false);  // large enough for both
  HostWorld world(2);
  std::vector<Outcome> outcomes(2);
  std::thread rank1([&] {
    try {
      world.run_rank(1, schedule, other, data.buffers()[1], RunContext{});
    } catch (const Error& error) {
      outcomes[1] = {error.code(), error.what()};
    }
  });
  try {
    world.run_rank(0, schedule, spec, data.buffers()[0], RunContext{});
  } catch (const Error& error) {
    outcomes[0] = {error.code(), error.what()};
  }
  rank1.join();
  for (const Outcome& outcome : outcomes) {
    ASSERT_TRUE(outcome.error.has_value());
    EXPECT_EQ(*outcome.error, ErrorCode::kDesync);
    EXPECT_NE(outcome.message.find("desync in host collective #0"), std::string::npos) << outcome.message;
  }
}

TEST(HostWorldTest, CallerThreadsRunConsecutiveCollectives) {
  constexpr int kRanks = 3;
  const RankLayout layout = RankLayout::flat(kRanks);
  struct Step {
    CollectiveSpec spec;
    Schedule schedule;
    std::unique_ptr<test::CollectiveData> data;
  };
  std::vector<Step> steps;
  for (const auto& [collective, algorithm] : {std::pair{Collective::kAllReduce, Algorithm::kRing},
                                              std::pair{Collective::kAllGather, Algorithm::kRecursiveDoubling},
                                              std::pair{Collective::kBroadcast, Algorithm::kDirect},
                                              std::pair{Collective::kReduceScatter, Algorithm::kRing}}) {
    const CollectiveSpec spec = spec_of(collective, kRanks, 257, DataType::kI64, ReduceOp::kMax, 2);
    steps.push_back(
        {spec, build_checked_schedule(spec, layout, algorithm), std::make_unique<test::CollectiveData>(spec, false)});
  }
  HostWorld world(kRanks);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kRanks);
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        for (const Step& step : steps) {
          world.run_rank(rank, step.schedule, step.spec, step.data->buffers()[static_cast<size_t>(rank)], RunContext{});
        }
      } catch (const std::exception& error) {
        errors[static_cast<size_t>(rank)] = error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::string& error : errors) EXPECT_EQ(error, "");
  for (const Step& step : steps) EXPECT_TRUE(step.data->check()) << name(step.spec.collective);
}

// Pipelining (tiles), chunk alignment and multi-lane parameters change how chunks map to
// elements and how lanes interleave, never the result.
TEST(HostExecutorTest, TilesAlignmentChannelsAndPipelineChunks) {
  HostExecutor executor;
  int cases = 0;
  for (Algorithm algorithm : all_algorithms()) {
    for (Collective collective : all_collectives()) {
      if (!implements(algorithm, collective)) continue;
      for (int n : {3, 4}) {
        const RankLayout layout = algorithm == Algorithm::kHierarchical
                                      ? RankLayout::nodes(n == 4 ? 2 : 1, n == 4 ? 2 : 3)
                                      : RankLayout::flat(n);
        for (int parallel : {1, 3}) {
          const AlgoParams params{.channels = parallel, .pipeline_chunks = parallel};
          CollectiveSpec spec = spec_of(collective, n, 0, DataType::kF32, ReduceOp::kSum, n - 1);
          const Schedule schedule = build_checked_schedule(spec, layout, algorithm, params);
          for (uint32_t tiles : {1u, 2u, 5u}) {
            for (int64_t align : {1, 4, 16}) {
              for (int64_t count : {0, 1, 7, 100, 1001}) {
                for (const auto& [dtype, op] :
                     {std::pair{DataType::kF32, ReduceOp::kSum}, std::pair{DataType::kI32, ReduceOp::kMax},
                      std::pair{DataType::kBF16, ReduceOp::kAvg}}) {
                  if (!is_reduction(collective) && op != ReduceOp::kSum) continue;
                  for (bool in_place : {false, true}) {
                    if (in_place && !buffer_geometry(collective, n).in_place_supported) continue;
                    spec.count = count;
                    spec.dtype = dtype;
                    spec.op = op;
                    SCOPED_TRACE(fmt::format("{} parallel={} tiles={} align={}",
                                             test::describe(spec, algorithm, in_place), parallel, tiles, align));
                    test::CollectiveData data(spec, in_place);
                    executor.run(schedule, spec, data.buffers(), RunContext{.tiles = tiles, .align_elements = align});
                    ASSERT_TRUE(data.check());
                    ++cases;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 1000);
}

TEST(HostExecutorTest, RankSymmetricSchedulesRunLikeTheirExpansion) {
  HostExecutor executor;
  for (int n : {1, 2, 5, 8}) {
    CollectiveSpec spec = spec_of(Collective::kAllReduce, n, 1001, DataType::kF64, ReduceOp::kSum);
    const Schedule schedule =
        build_checked_schedule(spec, RankLayout::flat(n), Algorithm::kRing, AlgoParams{}, ScheduleForm::kSymmetric);
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(test::describe(spec, Algorithm::kRing, in_place));
      test::CollectiveData data(spec, in_place);
      executor.run(schedule, spec, data.buffers(), RunContext{.tiles = 2});
      EXPECT_TRUE(data.check());
    }
  }
}

TEST(HostExecutorTest, RejectsBuffersForTheWrongRankCount) {
  const CollectiveSpec spec = spec_of(Collective::kAllReduce, 3, 4);
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(3), Algorithm::kRing);
  test::CollectiveData data(spec_of(Collective::kAllReduce, 2, 4), false);
  HostExecutor executor;
  EXPECT_THROW(executor.run(schedule, spec, data.buffers(), RunContext{}), Error);
}

// The fault hook (RunContext::on_send): each effect shows the way the recovery layer expects.
class FaultHookTest : public ::testing::Test {
 protected:
  const CollectiveSpec spec_ = spec_of(Collective::kAllReduce, 4, 4096);
  const Schedule schedule_ = build_checked_schedule(spec_, RankLayout::flat(4), Algorithm::kRing);
  HostExecutor executor_;
  bool checksums_ = false;

  // Runs with `effect` on rank 1's sends to rank 2 at op `op_index` (-1: all of them).
  std::optional<Error> run(test::CollectiveData& data, TransferEffect effect, int64_t op_index = -1,
                           milliseconds timeout = milliseconds(60000)) {
    RunContext context{.timeout = timeout};
    context.checksums = checksums_;
    context.on_send = [=](int src, int dst, int64_t op) {
      return src == 1 && dst == 2 && (op_index < 0 || op == op_index) ? effect : TransferEffect{};
    };
    try {
      executor_.run(schedule_, spec_, data.buffers(), context);
    } catch (const Error& error) {
      return error;
    }
    return std::nullopt;
  }
};

TEST_F(FaultHookTest, AFailedSendStopsTheCollectiveWithAFaultError) {
  test::CollectiveData data(spec_, false);
  const auto start = Clock::now();
  const std::optional<Error> error = run(data, TransferEffect{.fail = true, .fault_index = 0}, 0);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::kFault) << error->what();
  EXPECT_NE(std::string(error->what()).find("send to 2 failed"), std::string::npos) << error->what();
  EXPECT_LT(Clock::now() - start, kPrompt);
}

TEST_F(FaultHookTest, AStalledSendIsATimeoutOfTheReceiver) {
  test::CollectiveData data(spec_, false);
  const std::optional<Error> error = run(data, TransferEffect{.stall = true}, 0, milliseconds(200));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::kTimeout) << error->what();
  EXPECT_NE(std::string(error->what()).find("recv_reduce from 1"), std::string::npos) << error->what();
}

// A lost message stops its connection (later messages would queue behind it, not overtake it):
// the receiver times out naming the sender and the fault, whichever rank times out first, and
// never takes the next message for the lost one.
TEST_F(FaultHookTest, AStalledSendLosesItsConnectionAndNamesTheSender) {
  test::CollectiveData data(spec_, false);
  const std::optional<Error> error = run(data, TransferEffect{.stall = true, .fault_index = 3}, 0, milliseconds(200));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::kTimeout) << error->what();
  EXPECT_NE(std::string(error->what()).find("rank 2 waits on lane 0 op 1"), std::string::npos) << error->what();
  EXPECT_NE(std::string(error->what()).find("its message from rank 1 was lost (injected fault #3)"), std::string::npos)
      << error->what();
}

TEST_F(FaultHookTest, ACorruptedMessageFailsItsChecksum) {
  test::CollectiveData data(spec_, false);
  checksums_ = true;
  const std::optional<Error> error = run(data, TransferEffect{.corrupt = true}, 0);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::kCorrupt) << error->what();
  EXPECT_NE(std::string(error->what()).find("message from 1 failed its checksum"), std::string::npos) << error->what();
  test::CollectiveData clean(spec_, false);
  ASSERT_FALSE(run(clean, TransferEffect{}).has_value()) << "checksums pass on clean data";
  EXPECT_TRUE(clean.check());
}

TEST_F(FaultHookTest, ASlowLinkOrRankTakesLonger) {
  test::CollectiveData data(spec_, false);
  const auto start = Clock::now();
  ASSERT_FALSE(run(data, TransferEffect{.delay_factor = 101.0}).has_value());
  // Every send of rank 1 to 2 sleeps at least 100 x 20 us = 2 ms; a ring all_reduce on 4 ranks
  // makes 6 of them.
  EXPECT_GE(Clock::now() - start, milliseconds(12));
  EXPECT_TRUE(data.check()) << "slow, not wrong";
}

TEST(HostExecutorTest, ReportsWallTime) {
  const CollectiveSpec spec = spec_of(Collective::kAllReduce, 4, 4096);
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(4), Algorithm::kRing);
  test::CollectiveData data(spec, false);
  HostExecutor executor;
  const RunResult result = executor.run(schedule, spec, data.buffers(), RunContext{});
  EXPECT_GT(result.seconds, 0);
  EXPECT_LT(result.seconds, 60);
}

// The checks must be able to fail: tamper with a correct result in the ways a broken executor or
// schedule would, and expect check() to say so.
class CheckCatchesTest : public ::testing::Test {
 protected:
  void run(const CollectiveSpec& spec, Algorithm algorithm, test::CollectiveData& data) {
    const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(spec.nranks), algorithm);
    executor_.run(schedule, spec, data.buffers(), RunContext{});
    ASSERT_TRUE(data.check());
  }
  HostExecutor executor_;
};

TEST_F(CheckCatchesTest, NaNUnwrittenAndPerturbedElements) {
  const CollectiveSpec spec = spec_of(Collective::kAllReduce, 4, 100, DataType::kF32, ReduceOp::kMax);
  test::CollectiveData data(spec, false);
  run(spec, Algorithm::kRing, data);
  auto* values = reinterpret_cast<float*>(data.output(1));
  const float saved = values[7];
  values[7] = std::nanf("");
  EXPECT_FALSE(data.check());
  std::memset(&values[7], test::kPoisonByte, sizeof(float));
  EXPECT_FALSE(data.check());
  values[7] = std::nextafter(saved, 2.0f);  // max is exact: one ulp off fails
  EXPECT_FALSE(data.check());
  values[7] = saved;
  EXPECT_TRUE(data.check());
}

TEST_F(CheckCatchesTest, SumsOutsideTheToleranceAndOffByOneIntegers) {
  const CollectiveSpec spec = spec_of(Collective::kAllReduce, 8, 64, DataType::kF16, ReduceOp::kSum);
  test::CollectiveData data(spec, false);
  run(spec, Algorithm::kTree, data);
  auto* halves = reinterpret_cast<uint16_t*>(data.output(3));
  // sum_j |x_j| <= 8 for 8 inputs in [-1, 1): the tolerance is at most 8 * 8 * 2^-10 = 1/16.
  halves[5] = float_to_half(half_to_float(halves[5]) + 0.25f);
  EXPECT_FALSE(data.check());

  const CollectiveSpec ints = spec_of(Collective::kReduceScatter, 5, 33, DataType::kI64, ReduceOp::kSum);
  test::CollectiveData int_data(ints, false);
  run(ints, Algorithm::kRing, int_data);
  reinterpret_cast<int64_t*>(int_data.output(4))[32] += 1;
  EXPECT_FALSE(int_data.check());
}

TEST_F(CheckCatchesTest, AScheduleThatDropsItsLastRecvLeavesPoison) {
  const CollectiveSpec spec = spec_of(Collective::kAllGather, 4, 50, DataType::kI32);
  Schedule schedule = build_checked_schedule(spec, RankLayout::flat(4), Algorithm::kRing);
  // Drop the last op of rank 1's lane 0 (a recv into its output) along with its deps.
  Lane& lane = schedule.ranks[1].lanes[0];
  ASSERT_TRUE(lane.ops.back().is_recv());
  lane.ops.pop_back();
  lane.dep_begin.pop_back();
  lane.deps.resize(lane.dep_begin.back());
  if (!lane.rounds.empty()) lane.rounds.pop_back();
  test::CollectiveData data(spec, false);
  executor_.run(schedule, spec, data.buffers(), RunContext{});
  EXPECT_FALSE(data.check());
}

TEST_F(CheckCatchesTest, AModifiedInputIsReported) {
  const CollectiveSpec spec = spec_of(Collective::kBroadcast, 3, 10, DataType::kF64, ReduceOp::kSum, 1);
  test::CollectiveData data(spec, false);
  run(spec, Algorithm::kRing, data);
  auto* input = static_cast<double*>(const_cast<void*>(data.buffers()[0].input));
  input[3] += 1;
  EXPECT_FALSE(data.check());
}

}  // namespace
}  // namespace tandem
