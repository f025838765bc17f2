// core/child_processes.h: a child from fork_child() never outlives its parent, whether the parent
// is killed outright (SIGKILL: the child's death signal) or stopped by SIGINT / SIGTERM (the
// handler kills and reaps the children, then exits 130 / 143).
//
// Each test forks a "parent" process that starts one child with fork_child(), sends the child's pid
// back on a pipe and waits; the test then ends the parent and looks for the child in /proc.
#include "core/child_processes.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace tandem {
namespace {

using namespace std::chrono_literals;

// Running: in /proc and not a zombie (a zombie re-parented to init may wait there to be reaped).
bool running(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::stringstream text;
  text << in.rdbuf();
  const std::string stat = text.str();
  const size_t name_end = stat.rfind(')');
  return name_end != std::string::npos && name_end + 2 < stat.size() && stat[name_end + 2] != 'Z';
}

bool gone_within(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (running(pid)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

struct Family {
  pid_t parent = -1;
  pid_t child = -1;
};

// A parent process (with the interrupt handler if asked) and its child from fork_child(); both
// wait for signals.
Family start_family(bool with_handler) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  Family family;
  family.parent = fork();
  if (family.parent == 0) {
    close(fds[0]);
    if (with_handler) install_interrupt_handler();
    const pid_t child = fork_child();
    if (child == 0) {
      for (;;) pause();
    }
    if (write(fds[1], &child, sizeof child) != sizeof child) _exit(1);
    for (;;) pause();
  }
  close(fds[1]);
  EXPECT_EQ(read(fds[0], &family.child, sizeof family.child), static_cast<ssize_t>(sizeof family.child));
  close(fds[0]);
  return family;
}

int exit_status_of(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

TEST(ChildProcesses, ChildDiesWhenItsParentIsKilled) {
  const Family family = start_family(/*with_handler=*/false);
  ASSERT_GT(family.child, 0);
  kill(family.parent, SIGKILL);
  EXPECT_EQ(exit_status_of(family.parent), -SIGKILL);
  EXPECT_TRUE(gone_within(family.child, 1000ms));
  kill(family.child, SIGKILL);  // should the test fail, leave nothing behind
}

TEST(ChildProcesses, SigtermKillsTheChildrenAndExits143) {
  const Family family = start_family(/*with_handler=*/true);
  ASSERT_GT(family.child, 0);
  kill(family.parent, SIGTERM);
  EXPECT_EQ(exit_status_of(family.parent), kExitTerminated);
  EXPECT_FALSE(running(family.child));  // reaped by the handler before the parent exited
  kill(family.child, SIGKILL);
}

TEST(ChildProcesses, SigintKillsTheChildrenAndExits130) {
  const Family family = start_family(/*with_handler=*/true);
  ASSERT_GT(family.child, 0);
  kill(family.parent, SIGINT);
  EXPECT_EQ(exit_status_of(family.parent), kExitInterrupted);
  EXPECT_FALSE(running(family.child));
  kill(family.child, SIGKILL);
}

}  // namespace
}  // namespace tandem
