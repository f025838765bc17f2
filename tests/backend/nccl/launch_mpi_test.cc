// The MPI launch, run by CTest as `mpirun -np 2 tandem_launch_mpi_test` (label mpi): every process
// runs every test in the same order (each test is a collective), and a failure on any rank makes
// that rank exit non-zero, hence mpirun and the CTest test. TANDEM_LAUNCH_TEST_FAIL_RANK=<rank>
// makes that rank fail on purpose (a second CTest test, expected to fail, proves the wiring).
// With CUDA (TANDEM_HAVE_CUDA): rank 0's real ncclGetUniqueId reaches every rank intact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backend/launch/launch.h"
#include "core/error.h"

#ifdef TANDEM_HAVE_CUDA
#include "backend/kernels/reduce.h"
#include "backend/nccl/nccl_executor.h"
#include "backend/nccl/unique_id.h"
#endif

namespace tandem::nccl {
namespace {

constexpr int kWorld = 2;

std::vector<std::byte> text_bytes(const std::string& text) {
  std::vector<std::byte> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<std::byte>(text[i]);
  return out;
}

std::string bytes_text(const std::vector<std::byte>& bytes) {
  std::string out(bytes.size(), '\0');
  for (size_t i = 0; i < bytes.size(); ++i) out[i] = static_cast<char>(bytes[i]);
  return out;
}

// Byte i of rank r's payload.
std::byte pattern(int rank, size_t i) { return static_cast<std::byte>((rank * 131 + i * 7 + 1) & 0xff); }

Launch& launch() { return current_launch(); }

TEST(MpiLaunch, WorldIsTwoProcesses) {
  const LaunchInfo& info = launch().info();
  ASSERT_EQ(info.kind, LaunchKind::kMpi) << "run me under mpirun -np 2: " << info.describe();
  ASSERT_EQ(info.size, kWorld);
  EXPECT_GE(info.rank, 0);
  EXPECT_LT(info.rank, kWorld);
  // Ranks are distinct and cover 0..size-1.
  const auto all = launch().all_gather(text_bytes(std::to_string(info.rank)));
  ASSERT_EQ(all.size(), size_t{kWorld});
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(bytes_text(all[static_cast<size_t>(r)]), std::to_string(r));
  EXPECT_NE(info.describe().find("mpi rank " + std::to_string(info.rank) + " of 2"), std::string::npos);
}

TEST(MpiLaunch, LocalRanksNumberEachHostsProcesses) {
  const LaunchInfo& info = launch().info();
  const auto all = launch().all_gather(
      text_bytes(info.host + "|" + std::to_string(info.local_rank) + "|" + std::to_string(info.local_size)));
  // Per host: local ranks 0..local_size-1, each once, and every process agrees on local_size.
  std::map<std::string, std::set<int>> local_ranks;
  std::map<std::string, std::set<int>> local_sizes;
  for (const auto& entry : all) {
    const std::string text = bytes_text(entry);
    const size_t bar = text.find('|');
    const size_t second = text.rfind('|');
    local_ranks[text.substr(0, bar)].insert(std::stoi(text.substr(bar + 1, second - bar - 1)));
    local_sizes[text.substr(0, bar)].insert(std::stoi(text.substr(second + 1)));
  }
  for (const auto& [host, ranks] : local_ranks) {
    ASSERT_EQ(local_sizes[host].size(), 1u) << host;
    const int size = *local_sizes[host].begin();
    EXPECT_EQ(static_cast<int>(ranks.size()), size) << host;
    EXPECT_EQ(*ranks.begin(), 0) << host;
    EXPECT_EQ(*ranks.rbegin(), size - 1) << host;
  }
  // CTest runs both processes on this machine.
  EXPECT_EQ(info.local_size, kWorld);
}

TEST(MpiLaunch, HostNamesGathered) {
  const LaunchInfo& info = launch().info();
  EXPECT_FALSE(info.host.empty());
  const auto hosts = launch().all_gather(text_bytes(info.host));
  ASSERT_EQ(hosts.size(), size_t{kWorld});
  EXPECT_EQ(bytes_text(hosts[static_cast<size_t>(info.rank)]), info.host);
  for (const auto& host : hosts) EXPECT_FALSE(host.empty());
}

TEST(MpiLaunch, BroadcastFromRootOne) {
  const LaunchInfo& info = launch().info();
  std::vector<std::byte> bytes(4096, std::byte{0});
  if (info.rank == 1) {
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern(1, i);
  }
  launch().broadcast(bytes, 1);
  for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], pattern(1, i)) << "byte " << i;
  EXPECT_THROW(launch().broadcast(bytes, kWorld), Error) << "root out of range";
}

TEST(MpiLaunch, BroadcastSizeMismatchFailsEveryRank) {
  std::vector<std::byte> bytes(static_cast<size_t>(8 + launch().info().rank));
  try {
    launch().broadcast(bytes, 0);
    ADD_FAILURE() << "sizes 8 and 9 were accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << error.what();
  }
  launch().barrier();  // both ranks are still in step
}

TEST(MpiLaunch, AllGatherOfDifferentSizes) {
  const int rank = launch().info().rank;
  // Rank 0 sends 3 bytes, rank 1 sends 100003; then rank 0 sends nothing.
  for (const size_t base : {size_t{3}, size_t{0}}) {
    const size_t own = rank == 0 ? base : 100000 + 3;
    std::vector<std::byte> mine(own);
    for (size_t i = 0; i < own; ++i) mine[i] = pattern(rank, i);
    const auto all = launch().all_gather(mine);
    ASSERT_EQ(all.size(), size_t{kWorld});
    for (int r = 0; r < kWorld; ++r) {
      const auto& part = all[static_cast<size_t>(r)];
      ASSERT_EQ(part.size(), r == 0 ? base : size_t{100003}) << "from rank " << r;
      for (size_t i = 0; i < part.size(); ++i) ASSERT_EQ(part[i], pattern(r, i)) << "rank " << r << " byte " << i;
    }
  }
}

TEST(MpiLaunch, GatherToRoot) {
  const int rank = launch().info().rank;
  const auto gathered =
      launch().gather_to_root(text_bytes("from " + std::to_string(rank) + std::string(rank * 10, '+')));
  if (rank != 0) {
    EXPECT_TRUE(gathered.empty());
    return;
  }
  ASSERT_EQ(gathered.size(), size_t{kWorld});
  EXPECT_EQ(bytes_text(gathered[0]), "from 0");
  EXPECT_EQ(bytes_text(gathered[1]), "from 1" + std::string(10, '+'));
}

TEST(MpiLaunch, EachProcessPicksLocalRankModuloDevices) {
  const LaunchInfo& info = launch().info();
  // One GPU per process on a node of two (as under mpirun -np 2 on a 2-GPU node), and both
  // processes on one GPU (as on a 1-GPU machine).
  EXPECT_EQ(device_for_local_rank(info.local_rank, 2), info.local_rank);
  EXPECT_EQ(device_for_local_rank(info.local_rank, 1), 0);
  const auto devices = launch().all_gather(text_bytes(std::to_string(device_for_local_rank(info.local_rank, 8))));
  EXPECT_NE(devices[0], devices[1]) << "two processes of one host share a device";
  launch().barrier();
}

#ifdef TANDEM_HAVE_CUDA
TEST(MpiLaunch, NcclUniqueIdReachesEveryRank) {
  const ncclUniqueId id = share_unique_id(launch(), 0);
  std::vector<std::byte> bytes(NCCL_UNIQUE_ID_BYTES);
  std::memcpy(bytes.data(), id.internal, NCCL_UNIQUE_ID_BYTES);
  const auto all = launch().all_gather(bytes);
  ASSERT_EQ(all.size(), size_t{kWorld});
  EXPECT_EQ(all[0], all[1]) << "ranks hold different ids";
  EXPECT_NE(all[0], std::vector<std::byte>(NCCL_UNIQUE_ID_BYTES)) << "the id is all zeros";
  // A second id differs from the first (ncclGetUniqueId was really called).
  const ncclUniqueId other = share_unique_id(launch(), 1);
  EXPECT_NE(std::memcmp(id.internal, other.internal, NCCL_UNIQUE_ID_BYTES), 0);
}

TEST(MpiLaunch, NcclExecutorWithoutGpuFailsOnEveryRank) {
  // Collective: every process constructs; none may wait in the id broadcast for one that gave up.
  const bool have_gpu = cuda::device_count() > 0;
  const auto all = launch().all_gather(std::vector<std::byte>(1, std::byte{have_gpu ? uint8_t{1} : uint8_t{0}}));
  const bool all_have = std::all_of(all.begin(), all.end(), [](const auto& b) { return b.at(0) == std::byte{1}; });
  if (all_have) GTEST_SKIP() << "every process has a GPU";
  try {
    NcclExecutor executor;
    ADD_FAILURE() << "constructed although a process has no GPU";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
    EXPECT_EQ(std::string(error.what()).rfind("no CUDA device: ", 0), 0u) << error.what();
  }
  launch().barrier();
}
#endif

TEST(MpiLaunch, InjectedFailure) {
  const char* fail_rank = std::getenv("TANDEM_LAUNCH_TEST_FAIL_RANK");
  if (fail_rank != nullptr && std::atoi(fail_rank) == launch().info().rank) {
    ADD_FAILURE() << "failing rank " << fail_rank << " on purpose (TANDEM_LAUNCH_TEST_FAIL_RANK)";
  }
  launch().barrier();
}

}  // namespace
}  // namespace tandem::nccl
