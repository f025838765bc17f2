#include "core/child_processes.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <ctime>
#include <string_view>

namespace tandem {
namespace {

static_assert(std::atomic<pid_t>::is_always_lock_free, "the signal handler reads the table");

// A slot holds a child's pid, 0 when free, or kReserved between choosing the slot and fork()
// returning. The handler reads it; only the thread that forks writes it.
constexpr pid_t kReserved = -1;
std::array<std::atomic<pid_t>, kMaxTrackedChildren> g_children{};
std::atomic<bool> g_stderr_is_terminal{false};

// How long the handler waits, in all, for the children it killed to be gone: SIGKILL cannot be
// caught, so they end within milliseconds unless the kernel holds one in an uninterruptible wait.
constexpr int kReapWait_ms = 500;

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t written = ::write(fd, text.data(), text.size());
    if (written <= 0) return;
    text.remove_prefix(static_cast<size_t>(written));
  }
}

// Only async-signal-safe calls from here on: kill, waitpid, nanosleep, write, _exit.
void on_interrupt(int signal) {
  for (const auto& slot : g_children) {
    const pid_t pid = slot.load();
    if (pid > 0) ::kill(pid, SIGKILL);
  }
  // Reaped here, so that no child is left (not even as a zombie re-parented to init) once this
  // process is gone.
  int waited_ms = 0;
  for (const auto& slot : g_children) {
    const pid_t pid = slot.load();
    if (pid <= 0) continue;
    while (::waitpid(pid, nullptr, WNOHANG) == 0 && waited_ms < kReapWait_ms) {
      const timespec one_ms{0, 1'000'000};
      ::nanosleep(&one_ms, nullptr);
      ++waited_ms;
    }
  }
  // On a terminal, the progress line (app/common Progress) is erased first.
  if (g_stderr_is_terminal.load()) write_all(STDERR_FILENO, "\r\033[K");
  write_all(STDERR_FILENO, signal == SIGINT ? "tandem: stopped by SIGINT\n" : "tandem: stopped by SIGTERM\n");
  ::_exit(128 + signal);
}

}  // namespace

void install_interrupt_handler() {
  g_stderr_is_terminal.store(::isatty(STDERR_FILENO) == 1);
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGINT);  // one signal at a time: a second one waits for _exit
  sigaddset(&action.sa_mask, SIGTERM);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

pid_t fork_child() {
  // SIGINT and SIGTERM wait until the child is in the table (in the parent) or has its death
  // signal (in the child): neither can be lost between fork() and those steps.
  sigset_t interrupts, before;
  sigemptyset(&interrupts);
  sigaddset(&interrupts, SIGINT);
  sigaddset(&interrupts, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &interrupts, &before);

  std::atomic<pid_t>* slot = nullptr;
  for (auto& candidate : g_children) {
    pid_t empty = 0;
    if (candidate.compare_exchange_strong(empty, kReserved)) {
      slot = &candidate;
      break;
    }
  }
  if (slot == nullptr) {
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    errno = EAGAIN;
    return -1;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (auto& entry : g_children) entry.store(0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(kExitTerminated);  // the parent died before prctl
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    return 0;
  }
  const int fork_errno = errno;
  slot->store(pid > 0 ? pid : 0);
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  errno = fork_errno;
  return pid;
}

void forget_child(pid_t pid) {
  if (pid <= 0) return;
  for (auto& slot : g_children) {
    pid_t expected = pid;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

}  // namespace tandem
