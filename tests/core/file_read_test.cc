// read_file_bounded: the one way tandem reads an input file. Regular files (and links to them) up
// to the limit are read whole; larger files, devices, FIFOs and folders are refused with one line
// that names the file, without reading it (so never blocking, never growing without end).
#include "core/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/support/expect_error.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;

class FileReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("tandem_file_read_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  fs::path dir_;
};

TEST_F(FileReadTest, ReadsARegularFileWhole) {
  const std::string text = std::string("line one\nline two\n\0binary\xff", 26);
  EXPECT_EQ(read_file_bounded(write("a.txt", text), 1024, "scenario"), text);
  EXPECT_EQ(read_file_bounded(write("empty", ""), 1024, "scenario"), "");
}

TEST_F(FileReadTest, AFileOfExactlyTheLimitIsReadOneByteMoreIsRefusedWithBothSizes) {
  EXPECT_EQ(read_file_bounded(write("ten", "0123456789"), 10, "plan"), "0123456789");
  const fs::path eleven = write("eleven", "0123456789a");
  expect_error([&] { read_file_bounded(eleven, 10, "plan"); }, ErrorCode::kIo,
               {"plan '", "eleven' is 11 B (11 bytes), over the limit of 10 B (10 bytes)"});
}

TEST_F(FileReadTest, ASparseFileOverTheLimitIsRefusedBeforeReading) {
  const fs::path path = dir_ / "rank_0";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t{8} << 30), 0);  // 8 GiB of nothing: no disk, no memory
  ::close(fd);
  const auto start = std::chrono::steady_clock::now();
  expect_error(
      [&] { read_file_bounded(path, uint64_t{1} << 30, "flight-recorder dump"); }, ErrorCode::kIo,
      {"flight-recorder dump '", "rank_0' is 8 GiB (8589934592 bytes), over the limit of 1 GiB (1073741824 bytes)"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST_F(FileReadTest, DevZeroIsRefusedAsADevice) {
  expect_error([] { read_file_bounded("/dev/zero", 1 << 20, "scenario"); }, ErrorCode::kIo,
               {"scenario '/dev/zero' is a character device, not a regular file"});
}

TEST_F(FileReadTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  const fs::path fifo = dir_ / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opening a FIFO for reading blocks until a writer comes; no writer ever comes here.
  expect_error([&] { read_file_bounded(fifo, 1 << 20, "schedule"); }, ErrorCode::kIo,
               {"schedule '", "pipe' is a FIFO (named pipe), not a regular file"});
}

TEST_F(FileReadTest, AFolderIsRefusedAsAFolder) {
  expect_error([&] { read_file_bounded(dir_, 1 << 20, "results"); }, ErrorCode::kIo,
               {"results '", "' is a folder, not a file"});
}

TEST_F(FileReadTest, ALinkToARegularFileIsReadALinkToADeviceIsNot) {
  const fs::path target = write("target.yaml", "version: 1\n");
  fs::create_symlink(target, dir_ / "link.yaml");
  EXPECT_EQ(read_file_bounded(dir_ / "link.yaml", 1024, "scenario"), "version: 1\n");

  fs::create_symlink("/dev/zero", dir_ / "zero.json");
  expect_error([&] { read_file_bounded(dir_ / "zero.json", 1 << 20, "results"); }, ErrorCode::kIo,
               {"zero.json' is a character device, not a regular file"});
}

TEST_F(FileReadTest, AMissingFileSaysWhy) {
  expect_error([&] { read_file_bounded(dir_ / "nowhere.yaml", 1024, "scenario"); }, ErrorCode::kIo,
               {"cannot read scenario '", "nowhere.yaml': No such file or directory"});
}

TEST_F(FileReadTest, TheBufferIsReplacedNotAppendedTo) {
  std::string bytes = "left over from the previous file, longer than the next";
  read_file_bounded(write("short", "abc"), 1024, "flight-recorder dump", bytes);
  EXPECT_EQ(bytes, "abc");
}

TEST(ByteSizeText, WholeUnitsPlainOthersOneDecimal) {
  EXPECT_EQ(byte_size_text(0), "0 B");
  EXPECT_EQ(byte_size_text(1023), "1023 B");
  EXPECT_EQ(byte_size_text(1024), "1 KiB");
  EXPECT_EQ(byte_size_text(1536), "1.5 KiB");
  EXPECT_EQ(byte_size_text(uint64_t{4} << 20), "4 MiB");
  EXPECT_EQ(byte_size_text(uint64_t{1} << 30), "1 GiB");
  EXPECT_EQ(byte_size_text((uint64_t{8} << 30) + 1), "8.0 GiB");
}

}  // namespace
}  // namespace tandem
