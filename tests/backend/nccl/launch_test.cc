// The launch in one process: the single launch's collectives, launcher detection from the
// environment (a fake one), device assignment, and the process's own launch (single under CTest).
#include "backend/launch/launch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "core/error.h"

namespace tandem::nccl {
namespace {

std::vector<std::byte> bytes_of(const std::string& text) {
  std::vector<std::byte> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<std::byte>(text[i]);
  return out;
}

TEST(SingleLaunch, IsAWorldOfOne) {
  const std::unique_ptr<Launch> launch = single_launch();
  const LaunchInfo& info = launch->info();
  EXPECT_EQ(info.kind, LaunchKind::kSingle);
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.size, 1);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_size, 1);
  EXPECT_FALSE(info.host.empty());
  EXPECT_EQ(info.describe(), "single process on " + info.host);
}

TEST(SingleLaunch, CollectivesAreIdentities) {
  const std::unique_ptr<Launch> launch = single_launch();
  std::vector<std::byte> bytes = bytes_of("tandem");
  launch->broadcast(bytes, 0);
  EXPECT_EQ(bytes, bytes_of("tandem"));
  EXPECT_THROW(launch->broadcast(bytes, 1), Error);
  EXPECT_EQ(launch->all_gather(bytes), std::vector<std::vector<std::byte>>{bytes_of("tandem")});
  EXPECT_EQ(launch->gather_to_root(bytes_of("x")), std::vector<std::vector<std::byte>>{bytes_of("x")});
  launch->barrier();
  launch->abort_all(3);  // a no-op for single: still running
  SUCCEED();
}

// detect_launcher over a fake environment.
std::optional<LauncherSeen> detect(const std::map<std::string, std::string>& env) {
  return detect_launcher([&](const char* variable) -> const char* {
    const auto it = env.find(variable);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(DetectLauncher, ReadsEachLaunchersVariables) {
  EXPECT_FALSE(detect({}));
  EXPECT_FALSE(detect({{"OMPI_COMM_WORLD_SIZE", "1"}})) << "mpirun -np 1 runs as single";
  ASSERT_TRUE(detect({{"OMPI_COMM_WORLD_SIZE", "4"}}));
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "4"}})->variable, "OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "4"}})->size, 4);
  EXPECT_EQ(detect({{"PMI_SIZE", "8"}})->size, 8);
  EXPECT_EQ(detect({{"PMIX_RANK", "0"}, {"SLURM_NTASKS", "16"}})->variable, "PMIX_RANK with SLURM_NTASKS");
  EXPECT_EQ(detect({{"PMIX_RANK", "0"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_NTASKS", "16"}})->size, 2);
  EXPECT_EQ(detect({{"SLURM_STEP_NUM_TASKS", "3"}})->size, 3);
  // A batch script's one process sees SLURM_NTASKS without a step or PMIx: not a launch.
  EXPECT_FALSE(detect({{"SLURM_NTASKS", "16"}}));
  EXPECT_FALSE(detect({{"OMPI_COMM_WORLD_SIZE", "two"}}));
}

TEST(DeviceForLocalRank, WrapsAroundTheVisibleDevices) {
  EXPECT_EQ(device_for_local_rank(0, 8), 0);
  EXPECT_EQ(device_for_local_rank(7, 8), 7);
  EXPECT_EQ(device_for_local_rank(9, 8), 1);
  EXPECT_EQ(device_for_local_rank(3, 1), 0);
  try {
    device_for_local_rank(0, 0);
    ADD_FAILURE() << "no error without devices";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(error.what()).find("no CUDA device"), std::string::npos) << error.what();
  }
  EXPECT_THROW(device_for_local_rank(-1, 2), Error);
}

TEST(CurrentLaunch, LauncherWithoutMpiIsAnError) {
  if (mpi_available()) GTEST_SKIP() << "this build has MPI";
  if (detect_launcher(&std::getenv)) GTEST_SKIP() << "running under a multi-process launcher";
  ASSERT_EQ(setenv("OMPI_COMM_WORLD_SIZE", "2", 1), 0);
  try {
    current_launch();
    ADD_FAILURE() << "a 2-process launcher ran as single";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(error.what()).find("OMPI_COMM_WORLD_SIZE=2"), std::string::npos) << error.what();
  }
  ASSERT_EQ(unsetenv("OMPI_COMM_WORLD_SIZE"), 0);
  EXPECT_EQ(current_launch().info().kind, LaunchKind::kSingle) << "a failed creation is retried";
}

TEST(CurrentLaunch, IsSingleOutsideALauncher) {
  if (detect_launcher(&std::getenv)) GTEST_SKIP() << "running under a multi-process launcher";
  const Launch& launch = current_launch();
  EXPECT_EQ(launch.info().kind, LaunchKind::kSingle);
  EXPECT_EQ(&launch, &current_launch()) << "one launch per process";
}

TEST(LaunchInfo, DescribesAnMpiRank) {
  const LaunchInfo info{
      .kind = LaunchKind::kMpi, .rank = 1, .size = 2, .local_rank = 1, .local_size = 2, .host = "host-a"};
  EXPECT_EQ(info.describe(), "mpi rank 1 of 2 (local 1 of 2 on host-a)");
}

}  // namespace
}  // namespace tandem::nccl
