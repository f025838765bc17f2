// Every file a command reads is read the same way (core/file_read.h): a regular file, or a link to
// one, under its kind's limit. These inputs once made tandem read until the machine ran out of
// memory (/dev/zero, an 8 GB sparse dump) or wait forever (a FIFO); each must now stop at once with
// one line that names the file. Each command runs under a time and memory limit, so a regression
// fails the test instead of taking the machine down.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/support/cli_runner.h"

namespace {

namespace fs = std::filesystem;
using tandem::testing::expect_one_line_error;
using tandem::testing::Outcome;
using tandem::testing::run_tandem_limited;
using tandem::testing::temp_path;

constexpr int kExitInput = 2;  // every command: a file that cannot be read is bad input (docs/cli.md)
// Refusing a file takes no reading; the slowest part is starting the binary.
constexpr auto kQuickly = std::chrono::seconds(5);

class InputFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_path("input_files");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file of `bytes` bytes that takes no disk space.
  std::string sparse_file(const std::string& name, off_t bytes) {
    const std::string path = dir_ + "/" + name;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_GE(fd, 0) << path;
    EXPECT_EQ(::ftruncate(fd, bytes), 0) << path;
    ::close(fd);
    return path;
  }

  // Runs `tandem <args>` (time and memory bounded) and expects one error line mentioning `mentions`.
  void expect_refused(const std::string& args, int exit_code, const std::string& mentions) {
    const auto start = std::chrono::steady_clock::now();
    const Outcome outcome = run_tandem_limited(args);
    const auto took = std::chrono::steady_clock::now() - start;
    expect_one_line_error(outcome, exit_code, mentions);
    EXPECT_LT(took, kQuickly) << args;
  }

  std::string dir_;
};

TEST_F(InputFiles, RunRefusesDevZeroAsAScenario) {
  expect_refused("run /dev/zero", kExitInput, "scenario '/dev/zero' is a character device, not a regular file");
}

TEST_F(InputFiles, RunRefusesALinkToDevZeroNamedLikeAScenario) {
  // A name ending in .yaml is also read before the command line is parsed (the packet-model check).
  fs::create_symlink("/dev/zero", dir_ + "/zero.yaml");
  expect_refused(fmt::format("run '{}/zero.yaml'", dir_), kExitInput,
                 "zero.yaml' is a character device, not a regular file");
}

TEST_F(InputFiles, RunRefusesAFifoWithoutWaitingForAWriter) {
  ASSERT_EQ(::mkfifo((dir_ + "/scenario.yaml").c_str(), 0600), 0);
  expect_refused(fmt::format("run '{}/scenario.yaml'", dir_), kExitInput,
                 "scenario.yaml' is a FIFO (named pipe), not a regular file");
}

TEST_F(InputFiles, RunRefusesAScenarioOverItsLimitWithBothSizes) {
  const std::string big = sparse_file("big.yaml", off_t{5} << 20);
  expect_refused(fmt::format("run '{}'", big), kExitInput,
                 "big.yaml' is 5 MiB (5242880 bytes), over the limit of 4 MiB (4194304 bytes)");
}

TEST_F(InputFiles, RunRefusesAFolderAsAScenario) {
  expect_refused(fmt::format("run '{}'", dir_), kExitInput, "' is a folder, not a file");
}

TEST_F(InputFiles, PlanRefusesDevZero) {
  expect_refused("plan /dev/zero", kExitInput, "plan '/dev/zero' is a character device, not a regular file");
}

TEST_F(InputFiles, ScheduleCheckRefusesDevZero) {
  expect_refused("schedule --check /dev/zero", kExitInput,
                 "schedule '/dev/zero' is a character device, not a regular file");
}

TEST_F(InputFiles, ScheduleCheckRefusesAFileOverTheScheduleLimit) {
  const std::string big = sparse_file("schedule.json", (off_t{1} << 30) + 1);
  expect_refused(fmt::format("schedule --check '{}'", big), kExitInput,
                 "schedule.json' is 1.0 GiB (1073741825 bytes), over the limit of 1 GiB (1073741824 bytes)");
}

TEST_F(InputFiles, ReportRefusesResultsJsonLinkedToDevZero) {
  fs::create_symlink("/dev/zero", dir_ + "/results.json");
  expect_refused(fmt::format("report '{}' -o '{}/report.html'", dir_, dir_), kExitInput,
                 "results.json' is a character device, not a regular file");
}

TEST_F(InputFiles, ReportSaysAFileIsNotARunFolder) {
  expect_refused("report README.md", kExitInput, "'README.md' is a file, not a run folder");
}

TEST_F(InputFiles, FrAnalyzeRefusesAnEightGigabyteSparseDumpBeforeReadingIt) {
  sparse_file("rank_0", off_t{8} << 30);
  expect_refused(fmt::format("fr analyze '{}'", dir_), kExitInput,
                 "rank_0' is 8 GiB (8589934592 bytes), over the limit of 1 GiB (1073741824 bytes)");
}

TEST_F(InputFiles, ReplayRefusesAnEightGigabyteSparseDumpBeforeReadingIt) {
  sparse_file("rank_0", off_t{8} << 30);
  expect_refused(fmt::format("replay '{}'", dir_), kExitInput,
                 "rank_0' is 8 GiB (8589934592 bytes), over the limit of 1 GiB (1073741824 bytes)");
}

TEST_F(InputFiles, FrAnalyzeAndReplaySayAFileIsNotAFolder) {
  expect_refused("fr analyze README.md", kExitInput, "README.md is a file, not a folder");
  expect_refused("replay README.md", kExitInput, "README.md is a file, not a folder");
}

}  // namespace
