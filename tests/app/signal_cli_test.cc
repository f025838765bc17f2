// SIGINT and SIGTERM stop a running command at once, with every process it started: the built
// `tandem` binary runs a long capacity plan (two worker processes, each with a start-up child of
// its own), is signalled while its workers run, and must exit 143 (SIGTERM) or 130 (SIGINT) within
// a second, leave no process it started alive, and write no plan.csv or plan.json
// (core/child_processes.h).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/support/cli_runner.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using tandem::testing::contains;
using tandem::testing::read_text;
using tandem::testing::temp_path;

// Runs for minutes on its own: 32 clusters up to thousands of GPUs.
constexpr const char* kLongPlan = "scenarios/plans/llama3-70b-capacity.yaml";
constexpr auto kRunBeforeSignal = 1500ms;
constexpr auto kExitDeadline = 1s;
// Grandchildren get their SIGKILL (PR_SET_PDEATHSIG) as their parent dies; the kernel may take a
// moment to finish them.
constexpr auto kDescendantGrace = 500ms;

// A process as /proc shows it: pid, parent, state letter, start time (tells a reused pid apart).
struct ProcessEntry {
  pid_t pid = 0;
  pid_t parent = 0;
  char state = '?';
  unsigned long long start_ticks = 0;
};

std::optional<ProcessEntry> read_process(pid_t pid) {
  const std::string stat = read_text(fmt::format("/proc/{}/stat", pid));
  const size_t name_end = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (name_end == std::string::npos) return std::nullopt;
  const std::vector<std::string> fields = tandem::testing::fields_of(stat.substr(name_end + 2));
  if (fields.size() < 20) return std::nullopt;
  // After the name: state (3rd field of stat), ppid (4th), ..., starttime (22nd).
  return ProcessEntry{pid, static_cast<pid_t>(std::stoi(fields[1])), fields[0][0], std::stoull(fields[19])};
}

std::vector<ProcessEntry> all_processes() {
  std::vector<ProcessEntry> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (auto process = read_process(std::stoi(name))) found.push_back(*process);
  }
  return found;
}

// Every process below `root` (children, their children, ...).
std::vector<ProcessEntry> descendants_of(pid_t root) {
  const std::vector<ProcessEntry> processes = all_processes();
  std::vector<ProcessEntry> found;
  std::set<pid_t> parents{root};
  for (bool grew = true; grew;) {
    grew = false;
    for (const ProcessEntry& p : processes) {
      if (parents.count(p.parent) != 0 && parents.insert(p.pid).second) {
        found.push_back(p);
        grew = true;
      }
    }
  }
  return found;
}

// Still running: the same process (same start time) and not a zombie.
bool running(const ProcessEntry& seen) {
  const std::optional<ProcessEntry> now = read_process(seen.pid);
  return now && now->start_ticks == seen.start_ticks && now->state != 'Z';
}

struct Started {
  pid_t pid = -1;
  std::string stderr_path;
};

// `tandem <args>` in a process group of its own (as a shell starts a job), stdout and stderr to
// files, SIGINT and SIGTERM as `ignore_sigint` asks: a script's `tandem ... &` starts it with
// SIGINT ignored.
Started start_tandem(const std::vector<std::string>& args, const std::string& name, bool ignore_sigint) {
  Started started;
  started.stderr_path = temp_path(name + "_stderr");
  const std::string stdout_path = temp_path(name + "_stdout");
  std::vector<std::string> words{TANDEM_BINARY};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  started.pid = fork();
  if (started.pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, ignore_sigint ? SIG_IGN : SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    const int in = open("/dev/null", O_RDONLY);
    const int out = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(started.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(in, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  setpgid(started.pid, started.pid);  // also here, so that the group exists before we signal it
  return started;
}

// The wait status once the process ended, or nullopt at the deadline.
std::optional<int> wait_until(pid_t pid, Clock::time_point deadline) {
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(5ms);
  }
}

// Starts the long plan, lets its workers run, sends `signal` (to the process, or to its group as
// Ctrl-C does) and checks how the command ended.
void expect_stops(int signal, bool to_group, bool ignore_sigint, int expected_exit, const std::string& name) {
  const std::string dir = temp_path(name + "_out");
  std::filesystem::remove_all(dir);
  const Started tandem = start_tandem({"plan", kLongPlan, "--out", dir, "--jobs", "2"}, name, ignore_sigint);
  ASSERT_GT(tandem.pid, 0);

  // The processes it started while it ran (a worker's start-up child comes and goes).
  std::vector<ProcessEntry> started;
  std::set<pid_t> recorded;
  const auto signal_at = Clock::now() + kRunBeforeSignal;
  while (Clock::now() < signal_at) {
    for (const ProcessEntry& p : descendants_of(tandem.pid)) {
      if (recorded.insert(p.pid).second) started.push_back(p);
    }
    std::this_thread::sleep_for(20ms);
  }
  const size_t children =
      std::count_if(started.begin(), started.end(), [&](const ProcessEntry& p) { return p.parent == tandem.pid; });

  const auto signalled = Clock::now();
  kill(to_group ? -tandem.pid : tandem.pid, signal);
  const std::optional<int> status = wait_until(tandem.pid, signalled + kExitDeadline);
  const double exit_s = std::chrono::duration<double>(Clock::now() - signalled).count();
  std::this_thread::sleep_for(kDescendantGrace);
  std::vector<pid_t> survivors;
  for (const ProcessEntry& p : started) {
    if (running(p)) survivors.push_back(p.pid);
  }
  // Whatever happened, leave nothing running behind the test.
  if (!status) {
    kill(-tandem.pid, SIGKILL);
    waitpid(tandem.pid, nullptr, 0);
  }
  for (pid_t pid : survivors) kill(pid, SIGKILL);

  EXPECT_GE(children, 1u) << "no worker process seen in " << kRunBeforeSignal.count() << " ms";
  ASSERT_TRUE(status.has_value()) << "still running " << kExitDeadline.count() << " s after the signal";
  EXPECT_TRUE(WIFEXITED(*status)) << "ended by signal " << (WIFSIGNALED(*status) ? WTERMSIG(*status) : 0);
  if (WIFEXITED(*status)) {
    EXPECT_EQ(WEXITSTATUS(*status), expected_exit);
  }
  EXPECT_LT(exit_s, 1.0);
  EXPECT_EQ(survivors, std::vector<pid_t>{}) << "of " << started.size() << " processes it started";
  EXPECT_FALSE(std::filesystem::exists(dir + "/plan.csv"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/plan.json"));
  const std::string err = read_text(tandem.stderr_path);
  EXPECT_TRUE(contains(err, fmt::format("tandem: stopped by {}", signal == SIGINT ? "SIGINT" : "SIGTERM"))) << err;
  std::filesystem::remove_all(dir);
}

TEST(SignalCli, SigtermToThePlanProcessStopsItAndItsWorkers) {
  expect_stops(SIGTERM, /*to_group=*/false, /*ignore_sigint=*/false, 143, "sigterm");
}

TEST(SignalCli, CtrlCStopsThePlanAndItsWorkers) {
  expect_stops(SIGINT, /*to_group=*/true, /*ignore_sigint=*/false, 130, "sigint");
}

// `tandem plan ... &` from a script starts with SIGINT ignored; SimGrid's engine used to set its
// own handler in the workers only, so they died one by one while the plan went on.
TEST(SignalCli, CtrlCStopsAPlanStartedWithSigintIgnored) {
  expect_stops(SIGINT, /*to_group=*/true, /*ignore_sigint=*/true, 130, "sigint_ignored");
}

}  // namespace
