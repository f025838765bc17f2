// Shared helpers for the end-to-end tests that run the built `tandem` binary: run it with a command
// line, capture its stdout, stderr and exit code, and split what it printed into lines and fields.
//
// The binary's path comes from the compile definition TANDEM_BINARY, a string literal that the
// test's CMakeLists.txt sets, e.g.
//   target_compile_definitions(<test> PRIVATE TANDEM_BINARY="$<TARGET_FILE:tandem>")
//   add_dependencies(<test> tandem)
// Header-only; needs fmt and GoogleTest (for ::testing::TempDir()).
#pragma once

#ifndef TANDEM_BINARY
#error "tests/support/cli_runner.h needs TANDEM_BINARY, the tandem binary's path (see the comment above)"
#endif

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace tandem::testing {

// What one run of the binary left: its stdout, its stderr and its exit code (-1 if it did not exit).
struct Outcome {
  std::string out;
  std::string err;
  int exit_code = -1;
};

// The whole file as text; empty if it cannot be read.
inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A path in GoogleTest's temp folder, per process, so that test runs of several build trees at once
// do not share files.
inline std::string temp_path(const std::string& name) {
  return fmt::format("{}tandem_test_{}_{}", ::testing::TempDir(), getpid(), name);
}

// True when the tests (and so the binary they run) are built with AddressSanitizer or
// ThreadSanitizer: their shadow memory needs terabytes of address space and multiplies resident
// memory and time.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizerBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif
#else
inline constexpr bool kSanitizerBuild = false;
#endif

// Runs `tandem <args>` with stdin from /dev/null, and `env` ("NAME=value ...") added to its
// environment. `args` is passed through the shell; tests only use plain words (and single-quoted
// paths).
inline Outcome run_tandem(const std::string& args, const std::string& env = "") {
  const std::string out = temp_path("stdout"), err = temp_path("stderr");
  const std::string command = fmt::format("{} '{}' {} >'{}' 2>'{}' </dev/null", env, TANDEM_BINARY, args, out, err);
  const int status = std::system(command.c_str());
  Outcome outcome;
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  outcome.out = read_text(out);
  outcome.err = read_text(err);
  return outcome;
}

// Runs `tandem <args>` as run_tandem does, killed after `seconds` and, outside sanitizer builds
// (whose shadow memory needs terabytes of address space), limited to `memory_kib` of address
// space: for inputs that once made tandem read without end. A run that was stopped shows as an
// exit code of 137 (killed) or -1 (a signal), never as a hung or swapping test machine.
inline Outcome run_tandem_limited(const std::string& args, long memory_kib = 4'000'000, int seconds = 20) {
  const bool limit_memory = !kSanitizerBuild;
  const std::string limit = limit_memory ? fmt::format("ulimit -v {}; ", memory_kib) : "";
  const std::string out = temp_path("stdout"), err = temp_path("stderr");
  const std::string command = fmt::format("{}exec timeout -s KILL {} '{}' {} >'{}' 2>'{}' </dev/null", limit, seconds,
                                          TANDEM_BINARY, args, out, err);
  const int status = std::system(command.c_str());
  Outcome outcome;
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  outcome.out = read_text(out);
  outcome.err = read_text(err);
  return outcome;
}

// Runs `tandem <args>` as run_tandem does and also reports the run's peak resident memory (KiB),
// for tests that hold a command to a memory figure without limiting its address space (rank threads
// reserve 8 MiB of stack each: a thousand of them would fail any ulimit -v that means anything).
struct MeasuredOutcome : Outcome {
  long peak_rss_kib = 0;
};
inline MeasuredOutcome run_tandem_measured(const std::string& args, const std::string& env = "") {
  const std::string out = temp_path("stdout"), err = temp_path("stderr");
  const std::string command =
      fmt::format("{} exec '{}' {} >'{}' 2>'{}' </dev/null", env, TANDEM_BINARY, args, out, err);
  MeasuredOutcome outcome;
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  if (pid > 0 && wait4(pid, &status, 0, &usage) == pid) {
    outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    outcome.peak_rss_kib = usage.ru_maxrss;
  }
  outcome.out = read_text(out);
  outcome.err = read_text(err);
  return outcome;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Whitespace-separated fields of one line.
inline std::vector<std::string> fields_of(const std::string& line) {
  std::vector<std::string> fields;
  std::istringstream in(line);
  for (std::string field; in >> field;) fields.push_back(field);
  return fields;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// An error as tandem reports one: exit code `exit_code`, nothing on stdout, exactly one
// "tandem: error: " line on stderr that mentions `mentions`.
inline void expect_one_line_error(const Outcome& outcome, int exit_code, const std::string& mentions) {
  EXPECT_EQ(outcome.exit_code, exit_code) << outcome.err;
  EXPECT_EQ(outcome.out, "");
  const std::vector<std::string> lines = lines_of(outcome.err);
  ASSERT_EQ(lines.size(), 1u) << outcome.err;
  EXPECT_EQ(lines[0].rfind("tandem: error: ", 0), 0u) << lines[0];
  EXPECT_TRUE(contains(lines[0], mentions)) << lines[0] << " does not mention " << mentions;
}

// A usage error (exit 2).
inline void expect_usage_error(const Outcome& outcome, const std::string& mentions) {
  expect_one_line_error(outcome, 2, mentions);
}

}  // namespace tandem::testing
