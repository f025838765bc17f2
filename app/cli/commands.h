// The subcommands of the `tandem` command line. Each add_*_command registers one subcommand on the
// root CLI11 app; its callback runs the command and writes the process exit status into `status`.
// Errors a user can cause are thrown as tandem::Error; main() turns them into one line on stderr.
#pragma once

namespace CLI {
class App;
}

namespace tandem::app {

struct CommandStatus {
  int exit_code = 0;
};

// The whole command line: registers every subcommand, parses argv, runs the command and turns what
// it throws into one line on stderr and an exit status. main() is this call.
int run_command_line(int argc, char** argv);

// tandem schedule: build, print, export (--json) or check (--check FILE) a schedule.
void add_schedule_command(CLI::App& app, CommandStatus& status);

// tandem bench <collective>: nccl-tests-style sweep of message sizes on a backend.
void add_bench_command(CLI::App& app, CommandStatus& status);

// tandem topo: a cluster's topology graph as a summary with routes, or Graphviz DOT.
void add_topo_command(CLI::App& app, CommandStatus& status);

// tandem bound <collective> <size>: NCCL's cost model per algorithm and the physical lower bound.
void add_bound_command(CLI::App& app, CommandStatus& status);

// tandem reliability: job MTBF, checkpoint interval, restart cost and goodput for a job size.
void add_reliability_command(CLI::App& app, CommandStatus& status);

// tandem run SCENARIO: the main job; runs a scenario file and checks its expectations.
void add_run_command(CLI::App& app, CommandStatus& status);

// tandem fr analyze DIR: cross-rank analysis of flight-recorder dumps; exit 1 when it finds a divergence.
void add_fr_command(CLI::App& app, CommandStatus& status);

// tandem replay DIR: flight-recorder dumps replayed on a simulated cluster; exit 1 when the ranks stop agreeing.
void add_replay_command(CLI::App& app, CommandStatus& status);

// tandem report RUN_DIR: the self-contained HTML report page of a run.
void add_report_command(CLI::App& app, CommandStatus& status);

// tandem plan SWEEP: capacity planning over clusters, layouts, algorithms and failure rates.
void add_plan_command(CLI::App& app, CommandStatus& status);

// tandem memory SNAPSHOT: a PyTorch memory snapshot replayed through the caching-allocator model under
// other settings; exit 1 when its own settings do not rebuild its segments.
void add_memory_command(CLI::App& app, CommandStatus& status);

// tandem calibrate LOG...: fit the simulator's network model to nccl-tests logs; write a calibration profile.
void add_calibrate_command(CLI::App& app, CommandStatus& status);

}  // namespace tandem::app
