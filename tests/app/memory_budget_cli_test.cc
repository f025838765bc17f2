// Large sizes inside the documented ranges either run within a stated memory budget or are refused
// up front, in one line that says what they need and what is available (core/host_memory.h). Each
// case here once exhausted the machine: the host backend's mailboxes took 4 MB a rank, a 1,048,576
// rank schedule built for minutes until it was killed, and the simulator's actors took 256 KiB each
// past a few thousand of them.
#include <chrono>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/cli_runner.h"

namespace {

using tandem::testing::contains;
using tandem::testing::expect_usage_error;
using tandem::testing::MeasuredOutcome;
using tandem::testing::Outcome;
using tandem::testing::run_tandem;
using tandem::testing::run_tandem_limited;
using tandem::testing::run_tandem_measured;

// Refused before anything is built: the estimate from three small probes is exact for a ring
// (n x 2(n-1) sends and receives) and for recursive doubling (n x log2 n x 2).
TEST(MemoryBudget, ScheduleOfAMillionRanksIsRefusedAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  const Outcome ring = run_tandem_limited("schedule --collective all_reduce --nranks 1048576");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  expect_usage_error(ring, "the ring all_reduce schedule for 1048576 ranks needs about 4398042316800 ops, 640.0 TiB");
  EXPECT_TRUE(contains(ring.err, "is available (")) << ring.err;
  // 42 M ops, 6.2 GiB: refused under a 1 GiB budget, named as such.
  const Outcome limited = run_tandem(
      "schedule --collective all_reduce --algo recursive_doubling --nranks 1048576", "TANDEM_MEMORY_LIMIT=1G");
  expect_usage_error(limited, "needs about 41943040 ops, 6.2 GiB of host memory at about 160 bytes an op; 1 GiB is "
                              "available (TANDEM_MEMORY_LIMIT)");
}

// Below the estimate's threshold the builders' running count stops a schedule at the budget.
TEST(MemoryBudget, BuilderStopsAtTheBudget) {
  // 67 M ops, 10 GiB: some machines have it, a 64 MiB budget does not.
  const Outcome limited = run_tandem("schedule --collective all_reduce --nranks 4096", "TANDEM_MEMORY_LIMIT=64M");
  expect_usage_error(limited, "the ring all_reduce schedule for 4096 ranks needs more than 419431 ops");
  EXPECT_TRUE(contains(limited.err, "64 MiB is available (TANDEM_MEMORY_LIMIT)")) << limited.err;
}

TEST(MemoryBudget, ScheduleJsonIsChecked) {
  const Outcome limited =
      run_tandem("schedule --collective all_reduce --nranks 256 --json", "TANDEM_MEMORY_LIMIT=64M");
  expect_usage_error(limited, "the JSON of the ring all_reduce schedule for 256 ranks (261120 ops) needs 286.4 MiB");
}

TEST(MemoryBudget, MalformedLimitIsNamed) {
  expect_usage_error(run_tandem("schedule --collective all_reduce --nranks 8", "TANDEM_MEMORY_LIMIT=lots"),
                     "TANDEM_MEMORY_LIMIT=lots: expected a positive size in bytes");
}

// 8-byte all_reduces on 1,024 host ranks: kilobytes a rank (4.2 GB in all before, 80 MB now).
TEST(MemoryBudget, HostRanksCostKilobytes) {
  if (tandem::testing::kSanitizerBuild) GTEST_SKIP() << "sanitizers multiply memory";
  const MeasuredOutcome outcome = run_tandem_measured("bench all_reduce -g 1024 -b 8 -e 8 -n 1 -w 0 -c 1");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_LT(outcome.peak_rss_kib, 400 * 1024) << "peak RSS of 1,024 host ranks";
  EXPECT_TRUE(contains(outcome.out, "Out of bounds values : 0 OK")) << outcome.out;
}

// A direct all_to_all on 4,096 host ranks is 33.5 M schedule ops a run: it built for minutes and
// ran out of time (no result in 300 s, 4.5 GB); now it is refused from an estimate before building.
TEST(MemoryBudget, HostAllToAllOn4096RanksIsRefusedUpFront) {
  const MeasuredOutcome outcome = run_tandem_measured("bench all_to_all -g 4096 -b 8 -e 8");
  expect_usage_error(outcome, "the host backend would run about 33550336 schedule ops per all_to_all on 4096 ranks, "
                              "above its limit of 8388608");
  EXPECT_LT(outcome.peak_rss_kib, 400 * 1024) << "refused before building the schedule";
}

// A direct all_to_all on 192 GPUs runs 36,864 actors at once in the op-by-op simulation: 589 MB
// with mmapped stacks, 5.2 GB when reused heap stacks were cleared whole.
TEST(MemoryBudget, SimulatedAllToAllActorsStaySmall) {
  if (tandem::testing::kSanitizerBuild) GTEST_SKIP() << "sanitizers multiply memory";
  const MeasuredOutcome outcome =
      run_tandem_measured("bench all_to_all --backend sim --nodes 24 -b 1M -e 1M --algo direct -n 1 -w 0");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_LT(outcome.peak_rss_kib, 1536 * 1024) << "peak RSS of a 192-GPU direct all_to_all";
}

TEST(MemoryBudget, SimulatedActorsAreCheckedUpFront) {
  const Outcome limited = run_tandem("bench all_to_all --backend sim --nodes 16 -b 1M -e 1M --algo direct",
                                     "TANDEM_MEMORY_LIMIT=100M");
  // The table's header is out by then (the size is what decides): one error line, exit 2.
  EXPECT_EQ(limited.exit_code, 2);
  EXPECT_EQ(tandem::testing::lines_of(limited.err).size(), 1u) << limited.err;
  EXPECT_TRUE(contains(limited.err, "tandem: error: 1048576 B: simulating the direct all_to_all on 128 ranks op by op "
                                    "(16384 actors, one per connection and lane) needs 256 MiB of host memory; 100 MiB "
                                    "is available (TANDEM_MEMORY_LIMIT)"))
      << limited.err;
}

}  // namespace

// Dumps are read on several threads and all kept: their total is checked before the first is read.
TEST(MemoryBudget, DumpsAreCheckedBeforeReading) {
  const std::string dir = tandem::testing::temp_path("budget_dumps");
  const Outcome run = run_tandem("run scenarios/faults/host/rank-hang-host.yaml --out " + dir);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Outcome limited = run_tandem("fr analyze " + dir + "/fr", "TANDEM_MEMORY_LIMIT=4K");
  expect_usage_error(limited, "reading 8 flight-recorder dump(s) (");
  EXPECT_TRUE(contains(limited.err, "4 KiB is available (TANDEM_MEMORY_LIMIT)")) << limited.err;
  EXPECT_EQ(run_tandem("fr analyze " + dir + "/fr").exit_code, 1);  // the hang: a finding
  std::filesystem::remove_all(dir);
}
