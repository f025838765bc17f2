// The cuda executor's stream plan, run on the CPU by run_on_host (commands one at a time, the next
// stream drawn at random among those whose next command can go), must give bit for bit what the
// host executor gives: every algorithm x every collective it supports x rank counts {1, 2, 3, 5, 8}
// x counts {0, 1, 7, 1000, 4099} x tiles {1, 3} x dtypes {f32, bf16, i32} x ops {sum, max, avg}
// (reducing collectives; the others: sum) x out of place and in place, explicit and symmetric
// forms, default parameters and a multi-channel / pipelined variant, several random orders each.
// Same ops in the same order on both sides, so floats match bitwise, not just within tolerance.
// Mutated plans (a missing wait, a missing divide, a missing record) show the check can fail.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/stream_plan.h"
#include "backend/host/host_executor.h"
#include "core/algorithms.h"
#include "core/error.h"
#include "tests/backend/host/collective_check.h"
#include "tests/support/sweep.h"

namespace tandem {

void PrintTo(Algorithm algorithm, std::ostream* out) { *out << name(algorithm); }
void PrintTo(Collective collective, std::ostream* out) { *out << name(collective); }

namespace cuda {
namespace {

using tandem::testing::sweep_layouts;

constexpr int kRankCounts[] = {1, 2, 3, 5, 8};
constexpr int64_t kCounts[] = {0, 1, 7, 1000, 4099};
constexpr uint32_t kTiles[] = {1, 3};
constexpr DataType kTypes[] = {DataType::kF32, DataType::kBF16, DataType::kI32};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg};
constexpr uint64_t kSeeds[] = {1, 2, 3};
constexpr int kMaxReportedFailures = 10;

// Default parameters, and one variant with several lanes or pipeline chunks where the algorithm
// has such a knob (more streams, cross-lane events).
std::vector<AlgoParams> params_for(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kRing:
    case Algorithm::kHierarchical:
      return {AlgoParams{}, AlgoParams{.channels = 2}};
    case Algorithm::kTree:
    case Algorithm::kRecursiveDoubling:
      return {AlgoParams{}, AlgoParams{.pipeline_chunks = 2}};
    default:
      return {AlgoParams{}};
  }
}

// The bytes of every rank's input and output.
std::vector<std::vector<std::byte>> snapshot(const test::CollectiveData& data, const CollectiveSpec& spec) {
  const BufferGeometry geometry = buffer_geometry(spec.collective, spec.nranks);
  const auto element_bytes = static_cast<int64_t>(size_bytes(spec.dtype));
  std::vector<std::vector<std::byte>> bytes;
  for (const RankBuffers& buffers : data.buffers()) {
    const auto* input = static_cast<const std::byte*>(buffers.input);
    const auto* output = static_cast<const std::byte*>(buffers.output);
    bytes.emplace_back(input, input + geometry.input_blocks * spec.count * element_bytes);
    bytes.emplace_back(output, output + geometry.output_blocks * spec.count * element_bytes);
  }
  return bytes;
}

// Empty when equal, else where the first difference is.
std::string compare(const std::vector<std::vector<std::byte>>& expected,
                    const std::vector<std::vector<std::byte>>& got) {
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& a = expected[i];
    const auto& b = got[i];
    const auto mismatch = std::mismatch(a.begin(), a.end(), b.begin());
    if (mismatch.first != a.end()) {
      return fmt::format("rank {} {} differs from the host at byte {}", i / 2, i % 2 == 0 ? "input" : "output",
                         mismatch.first - a.begin());
    }
  }
  return {};
}

// Runs the plan on fresh buffers in the random order of `seed`; returns the buffers' bytes.
std::vector<std::vector<std::byte>> run_plan(const StreamPlan& plan, const CollectiveSpec& spec, bool in_place,
                                             uint64_t seed) {
  test::CollectiveData data(spec, in_place);
  run_on_host(plan, data.buffers(), seed);
  return snapshot(data, spec);
}

std::vector<std::vector<std::byte>> run_host(HostExecutor& host, const Schedule& schedule, const CollectiveSpec& spec,
                                             bool in_place, uint32_t tiles) {
  test::CollectiveData data(spec, in_place);
  host.run(schedule, spec, data.buffers(), RunContext{.tiles = tiles});
  return snapshot(data, spec);
}

using SweepParam = std::tuple<Algorithm, Collective>;

std::vector<SweepParam> sweep_params() {
  std::vector<SweepParam> params;
  for (Algorithm algorithm : all_algorithms()) {
    for (Collective collective : all_collectives()) {
      if (implements(algorithm, collective)) params.emplace_back(algorithm, collective);
    }
  }
  return params;
}

std::string param_name(const ::testing::TestParamInfo<SweepParam>& info) {
  const auto [algorithm, collective] = info.param;
  return fmt::format("{}_{}", name(algorithm), name(collective));
}

std::atomic<int> total_cases{0};
class CaseCountPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    fmt::print("stream plan sweep: {} cases (each in {} orders)\n", total_cases.load(), std::size(kSeeds));
  }
};
const auto* const kCaseCountPrinter = ::testing::AddGlobalTestEnvironment(new CaseCountPrinter);

class StreamPlanSweep : public ::testing::TestWithParam<SweepParam> {};

TEST_P(StreamPlanSweep, MatchesHostExecutorBitwise) {
  const auto [algorithm, collective] = GetParam();
  HostExecutor host;
  int failures = 0;
  int cases = 0;
  for (int n : kRankCounts) {
    const bool reduces = is_reduction(collective);
    const bool has_in_place = buffer_geometry(collective, n).in_place_supported;
    for (const RankLayout& layout : sweep_layouts(algorithm, n)) {
      for (const AlgoParams& params : params_for(algorithm)) {
        CollectiveSpec spec{.collective = collective, .root = n / 2, .nranks = n};
        const Schedule schedule = build_checked_schedule(spec, layout, algorithm, params);
        std::vector<const Schedule*> forms = {&schedule};
        const Schedule symmetric = build_checked_schedule(spec, layout, algorithm, params, ScheduleForm::kSymmetric);
        if (symmetric.symmetric()) forms.push_back(&symmetric);
        for (const Schedule* form : forms) {
          for (int64_t count : kCounts) {
            for (uint32_t tiles : kTiles) {
              for (DataType dtype : kTypes) {
                for (ReduceOp op : kOps) {
                  if (!reduces && op != ReduceOp::kSum) continue;
                  for (bool in_place : {false, true}) {
                    if (in_place && !has_in_place) continue;
                    spec.count = count;
                    spec.dtype = dtype;
                    spec.op = op;
                    ++cases;
                    const std::string what =
                        fmt::format("{} ({} per node, channels {}, pipeline {}{}) tiles {}",
                                    test::describe(spec, algorithm, in_place), layout.ranks_per_node, params.channels,
                                    params.pipeline_chunks, form->symmetric() ? ", symmetric" : "", tiles);
                    try {
                      const auto expected = run_host(host, *form, spec, in_place, tiles);
                      const StreamPlan plan = build_stream_plan(*form, spec, tiles, 1);
                      for (uint64_t seed : kSeeds) {
                        const std::string difference = compare(expected, run_plan(plan, spec, in_place, seed));
                        if (!difference.empty() && ++failures <= kMaxReportedFailures) {
                          ADD_FAILURE() << what << " seed " << seed << ": " << difference;
                        }
                      }
                    } catch (const std::exception& error) {
                      if (++failures <= kMaxReportedFailures) ADD_FAILURE() << what << " threw: " << error.what();
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << cases << " cases failed";
  total_cases += cases;
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, StreamPlanSweep, ::testing::ValuesIn(sweep_params()), param_name);

CollectiveSpec spec_of_avg_tree() {
  return CollectiveSpec{
      .collective = Collective::kAllReduce, .count = 1000, .op = ReduceOp::kAvg, .root = 0, .nranks = 8};
}

// ---- races: unordered commands never touch the same memory ----
//
// Random orders run one command at a time; on a GPU unordered commands overlap in time. So also
// check the plan's happens-before relation directly: vector clocks over streams (a WaitEvent joins
// the clock its RecordEvent saw), and any two commands whose memory overlaps, one of them writing,
// must be ordered.

struct Access {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool writes = false;
  size_t command = 0;  // index into the clocks
};

// Empty when race-free, else the first race found.
std::string find_race(const StreamPlan& plan, std::span<const RankBuffers> buffers) {
  const auto element_bytes = static_cast<uintptr_t>(size_bytes(plan.dtype));
  // Scratch and staging get disjoint made-up addresses above any real buffer.
  constexpr uintptr_t kScratchBase = uintptr_t{1} << 62;
  constexpr uintptr_t kStagingBase = uintptr_t{3} << 61;
  const auto address = [&](const Location& where) -> uintptr_t {
    const RankBuffers& rank = buffers[static_cast<size_t>(where.rank)];
    switch (where.space) {
      case Space::kInput:
        return reinterpret_cast<uintptr_t>(rank.input) + static_cast<uintptr_t>(where.offset) * element_bytes;
      case Space::kOutput:
        return reinterpret_cast<uintptr_t>(rank.output) + static_cast<uintptr_t>(where.offset) * element_bytes;
      case Space::kScratch:
        return kScratchBase + static_cast<uintptr_t>(where.offset) * element_bytes;
      case Space::kStaging:
        return kStagingBase + static_cast<uintptr_t>(where.offset) * element_bytes;
    }
    return 0;
  };
  const size_t streams = plan.streams.size();
  std::vector<std::vector<uint32_t>> stream_clock(streams, std::vector<uint32_t>(streams, 0));
  std::vector<std::vector<uint32_t>> event_clock(plan.event_count);
  std::vector<std::vector<uint32_t>> command_clock;
  std::vector<CommandRef> command_ref;
  std::vector<Access> accesses;
  for (const CommandRef ref : issue_order(plan)) {
    const Command& command = plan.streams[ref.stream].commands[ref.index];
    std::vector<uint32_t>& clock = stream_clock[ref.stream];
    clock[ref.stream] = ref.index + 1;
    if (command.kind == CommandKind::kWaitEvent) {
      for (size_t s = 0; s < streams; ++s) clock[s] = std::max(clock[s], event_clock[command.event][s]);
    } else if (command.kind == CommandKind::kRecordEvent) {
      event_clock[command.event] = clock;
    } else {
      const size_t id = command_clock.size();
      command_clock.push_back(clock);
      command_ref.push_back(ref);
      const uintptr_t bytes = static_cast<uintptr_t>(command.elements) * element_bytes;
      const auto add = [&](const Location& where, bool writes) {
        accesses.push_back({address(where), address(where) + bytes, writes, id});
      };
      add(command.dst, true);
      if (command.kind == CommandKind::kCopy) add(command.a, false);
      if (command.kind == CommandKind::kReduce) {
        add(command.a, false);
        add(command.b, false);
      }
    }
  }
  const auto ordered = [&](size_t first, size_t second) {
    const CommandRef a = command_ref[first];
    return command_clock[second][a.stream] >= a.index + 1;
  };
  // Sweep by start address: every access against the earlier ones still open.
  std::sort(accesses.begin(), accesses.end(), [](const Access& x, const Access& y) { return x.begin < y.begin; });
  std::vector<const Access*> open;
  for (const Access& access : accesses) {
    std::erase_if(open, [&](const Access* other) { return other->end <= access.begin; });
    for (const Access* other : open) {
      if (!access.writes && !other->writes) continue;
      if (access.command == other->command) continue;
      if (ordered(access.command, other->command) || ordered(other->command, access.command)) continue;
      const CommandRef a = command_ref[access.command];
      const CommandRef b = command_ref[other->command];
      return fmt::format("rank {} lane {} command {} races with rank {} lane {} command {}",
                         plan.streams[a.stream].rank, plan.streams[a.stream].lane, a.index, plan.streams[b.stream].rank,
                         plan.streams[b.stream].lane, b.index);
    }
    open.push_back(&access);
  }
  return {};
}

TEST(StreamPlanRaces, EveryAlgorithmIsRaceFree) {
  int checked = 0;
  for (const auto& [algorithm, collective] : sweep_params()) {
    for (int n : {3, 8}) {
      for (const RankLayout& layout : sweep_layouts(algorithm, n)) {
        for (const AlgoParams& params : params_for(algorithm)) {
          for (uint32_t tiles : kTiles) {
            for (bool in_place : {false, true}) {
              if (in_place && !buffer_geometry(collective, n).in_place_supported) continue;
              CollectiveSpec spec{
                  .collective = collective, .count = 1000, .op = ReduceOp::kAvg, .root = n / 2, .nranks = n};
              const Schedule schedule = build_checked_schedule(spec, layout, algorithm, params);
              const StreamPlan plan = build_stream_plan(schedule, spec, tiles, 1);
              test::CollectiveData data(spec, in_place);
              EXPECT_EQ(find_race(plan, data.buffers()), "")
                  << test::describe(spec, algorithm, in_place) << " channels " << params.channels << " pipeline "
                  << params.pipeline_chunks << " tiles " << tiles;
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// The race check fails on a plan with a cross-lane wait removed (tree all_reduce: 4 lanes).
TEST(StreamPlanRaces, MissingCrossLaneWaitIsARace) {
  const CollectiveSpec spec = spec_of_avg_tree();
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(spec.nranks), Algorithm::kTree);
  const StreamPlan good = build_stream_plan(schedule, spec, 1, 1);
  test::CollectiveData data(spec, false);
  ASSERT_EQ(find_race(good, data.buffers()), "");
  int races = 0;
  int mutations = 0;
  for (size_t s = 0; s < good.streams.size(); ++s) {
    for (size_t i = 0; i < good.streams[s].commands.size(); ++i) {
      const Command& command = good.streams[s].commands[i];
      if (command.kind != CommandKind::kWaitEvent || command.message >= 0) continue;
      StreamPlan bad = good;
      bad.streams[s].commands.erase(bad.streams[s].commands.begin() + static_cast<std::ptrdiff_t>(i));
      ++mutations;
      if (!find_race(bad, data.buffers()).empty()) ++races;
    }
  }
  ASSERT_GT(mutations, 0);
  EXPECT_GT(races, 0) << "no removed cross-lane wait was reported as a race";
  RecordProperty("mutations", mutations);
  RecordProperty("races", races);
}

// ---- the plan's structure ----

CollectiveSpec spec_of(Collective collective, int n, int64_t count, DataType dtype = DataType::kF32,
                       ReduceOp op = ReduceOp::kSum) {
  return CollectiveSpec{.collective = collective, .count = count, .dtype = dtype, .op = op, .root = 0, .nranks = n};
}

TEST(StreamPlan, RingAllReduceHasOneMessagePerSendAndTile) {
  constexpr int kRanks = 5;
  constexpr uint32_t kTileCount = 3;
  const CollectiveSpec spec = spec_of(Collective::kAllReduce, kRanks, 1000);
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(kRanks), Algorithm::kRing);
  const StreamPlan plan = build_stream_plan(schedule, spec, kTileCount, 1);
  // Each rank sends 2 (n - 1) times per tile.
  EXPECT_EQ(plan.messages.size(), size_t{kRanks} * 2 * (kRanks - 1) * kTileCount);
  EXPECT_EQ(plan.streams.size(), size_t{kRanks});
  for (const Message& m : plan.messages) {
    EXPECT_EQ(m.staging_offset * 4 % 16, 0) << "message staging must start 16-byte aligned";
    EXPECT_EQ((m.dst - m.src + kRanks) % kRanks, 1) << "a ring sends to the next rank";
  }
}

// send_op_index is the host's op index: tile * ops per tile + ops of the earlier lanes + index.
TEST(StreamPlan, SendOpIndexCountsOpsOverTilesAndLanes) {
  constexpr int kRanks = 8;
  constexpr uint32_t kTileCount = 2;
  const CollectiveSpec spec = spec_of(Collective::kAllReduce, kRanks, 4099);
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(kRanks), Algorithm::kTree);
  const StreamPlan plan = build_stream_plan(schedule, spec, kTileCount, 1);
  for (const Message& m : plan.messages) {
    const RankProgram& program = schedule.ranks[static_cast<size_t>(m.src)];
    int64_t before = 0;
    int64_t per_tile = 0;
    for (uint32_t lane = 0; lane < program.lanes.size(); ++lane) {
      if (lane < m.lane) before += static_cast<int64_t>(program.lanes[lane].ops.size());
      per_tile += static_cast<int64_t>(program.lanes[lane].ops.size());
    }
    EXPECT_EQ(m.send_op_index, m.tile * per_tile + before + m.send_op);
    const Op& send = program.lanes[m.lane].ops[m.send_op];
    EXPECT_EQ(send.kind, OpKind::kSend);
    EXPECT_EQ(send.peer, m.dst);
    EXPECT_TRUE(schedule.ranks[static_cast<size_t>(m.dst)].lanes[m.lane].ops[m.recv_op].is_recv());
  }
}

// The executor's issue order: each stream in order, and every wait after its record.
TEST(StreamPlan, DefaultIssueOrderRecordsBeforeWaiting) {
  const CollectiveSpec spec = spec_of(Collective::kAllReduce, 8, 1000, DataType::kF32, ReduceOp::kAvg);
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(8), Algorithm::kTree);
  const StreamPlan plan = build_stream_plan(schedule, spec, 3, 1);
  std::vector<bool> recorded(plan.event_count, false);
  std::vector<uint32_t> next(plan.streams.size(), 0);
  size_t total = 0;
  for (const Stream& stream : plan.streams) total += stream.commands.size();
  const std::vector<CommandRef> order = issue_order(plan);
  ASSERT_EQ(order.size(), total);
  for (const CommandRef& ref : order) {
    ASSERT_EQ(ref.index, next[ref.stream]++) << "stream " << ref.stream << " out of order";
    const Command& command = plan.streams[ref.stream].commands[ref.index];
    if (command.kind == CommandKind::kWaitEvent) {
      ASSERT_TRUE(recorded[command.event]) << "event " << command.event;
    }
    if (command.kind == CommandKind::kRecordEvent) {
      ASSERT_FALSE(recorded[command.event]) << "event " << command.event << " recorded twice";
      recorded[command.event] = true;
    }
  }
}

TEST(StreamPlan, UnmatchedSendIsAnInvalidSchedule) {
  const CollectiveSpec spec = spec_of(Collective::kSendRecv, 2, 10);
  Schedule schedule = build_checked_schedule(spec, RankLayout::flat(2), Algorithm::kDirect);
  // Drop rank 1's receive: rank 0's send has no partner.
  for (Lane& lane : schedule.ranks[1].lanes) {
    for (size_t i = 0; i < lane.ops.size(); ++i) {
      if (!lane.ops[i].is_recv()) continue;
      lane.ops[i] = Op{.kind = OpKind::kCopy, .src = lane.ops[i].dst, .dst = lane.ops[i].dst};
    }
  }
  try {
    build_stream_plan(schedule, spec, 1, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidSchedule);
    EXPECT_NE(std::string(error.what()).find("rank 0"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("no matching Recv"), std::string::npos) << error.what();
  }
}

// ---- mutated plans: the checker catches them ----

struct MutationCase {
  CollectiveSpec spec;
  Schedule schedule;
  std::vector<std::vector<std::byte>> expected;
};

MutationCase ring_all_reduce_case(ReduceOp op) {
  const CollectiveSpec spec = spec_of(Collective::kAllReduce, 5, 4099, DataType::kI32, op);
  Schedule schedule = build_checked_schedule(spec, RankLayout::flat(5), Algorithm::kRing);
  HostExecutor host;
  auto expected = run_host(host, schedule, spec, false, 1);
  return {spec, std::move(schedule), std::move(expected)};
}

// Without the wait for a message, some random order reads the staging area before the sender
// wrote it.
TEST(StreamPlanMutation, MissingMessageWaitIsCaught) {
  const MutationCase c = ring_all_reduce_case(ReduceOp::kSum);
  StreamPlan plan = build_stream_plan(c.schedule, c.spec, 1, 1);
  std::vector<Command>& commands = plan.streams[2].commands;
  const auto wait = std::find_if(commands.begin(), commands.end(), [](const Command& command) {
    return command.kind == CommandKind::kWaitEvent && command.message >= 0;
  });
  ASSERT_NE(wait, commands.end());
  commands.erase(wait);
  int caught = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    if (!compare(c.expected, run_plan(plan, c.spec, false, seed)).empty()) ++caught;
  }
  EXPECT_GT(caught, 0) << "no random order exposed the missing wait";
  test::CollectiveData data(c.spec, false);
  EXPECT_NE(find_race(plan, data.buffers()), "");
  // And the unmutated plan passes in the same orders.
  const StreamPlan good = build_stream_plan(c.schedule, c.spec, 1, 1);
  for (uint64_t seed = 1; seed <= 20; ++seed) EXPECT_EQ(compare(c.expected, run_plan(good, c.spec, false, seed)), "");
}

TEST(StreamPlanMutation, MissingAverageDivideIsCaught) {
  const MutationCase c = ring_all_reduce_case(ReduceOp::kAvg);
  StreamPlan plan = build_stream_plan(c.schedule, c.spec, 1, 1);
  std::vector<Command>& commands = plan.streams[0].commands;
  ASSERT_EQ(commands.back().kind, CommandKind::kDivide);
  commands.pop_back();
  EXPECT_NE(compare(c.expected, run_plan(plan, c.spec, false, 1)), "");
}

TEST(StreamPlanMutation, MissingRecordDeadlocks) {
  const MutationCase c = ring_all_reduce_case(ReduceOp::kSum);
  StreamPlan plan = build_stream_plan(c.schedule, c.spec, 1, 1);
  std::vector<Command>& commands = plan.streams[1].commands;
  const auto record = std::find_if(commands.begin(), commands.end(),
                                   [](const Command& command) { return command.kind == CommandKind::kRecordEvent; });
  ASSERT_NE(record, commands.end());
  commands.erase(record);
  try {
    issue_order(plan);
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kBackend);
    EXPECT_NE(std::string(error.what()).find("deadlocks"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace cuda
}  // namespace tandem
