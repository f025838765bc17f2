// Child processes that never outlive tandem, and what SIGINT and SIGTERM do to a tandem process.
//
// tandem forks workers (the simulator runs each platform in a child process: sim/isolated.h), and a
// worker may fork again. Whatever ends a tandem process, its children end with it:
//   - killed (SIGKILL, a crash): each child asked the kernel for SIGKILL when its parent dies
//     (PR_SET_PDEATHSIG), right after fork_child(), and leaves at once if the parent was already gone;
//   - SIGINT or SIGTERM: the handler that install_interrupt_handler() sets kills every child that
//     fork_child() started and that is not reaped yet, reaps them, writes one line on stderr and
//     ends the process with 128 + the signal: 130 (SIGINT), 143 (SIGTERM). Nothing else runs: no
//     destructors, no atexit handlers, no buffered output. Files are as the last completed write
//     left them (the command line writes its outputs under a temporary name and renames them).
// Linux only (prctl). The registry is a fixed table read by the handler (async-signal-safe).
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace tandem {

// Exit statuses of a process ended by install_interrupt_handler()'s handler: 128 + the signal,
// as shells report a process the signal killed.
inline constexpr int kExitInterrupted = 130;  // SIGINT (Ctrl-C)
inline constexpr int kExitTerminated = 143;   // SIGTERM

// Children of one process that fork_child() tracks at once (jobs of run_isolated_parallel plus
// the start-up child of each). fork_child() fails with EAGAIN beyond it.
inline constexpr size_t kMaxTrackedChildren = 4096;

// Sets the handler of SIGINT and SIGTERM for the whole process (see the top), also when the
// process started with them ignored (`tandem ... &` in a script): a tandem command always stops on
// them. Idempotent; children from fork_child() inherit it.
void install_interrupt_handler();

// fork() for a child that must not outlive this process. In the parent: the child's pid, tracked
// until forget_child(); -1 with errno when fork failed (EAGAIN: the table is full). In the child: 0,
// the parent's table emptied (the child kills only its own children), PR_SET_PDEATHSIG set to
// SIGKILL, and _exit(kExitTerminated) at once if the parent died before that. Call it from the
// thread that will outlive the child (the kernel sends the death signal when the forking *thread*
// ends): tandem forks from its main thread only.
pid_t fork_child();

// Stops tracking `pid`: call it before reaping the child (waitpid), so that the handler never
// kills a reused pid. Unknown pids are ignored.
void forget_child(pid_t pid);

}  // namespace tandem
