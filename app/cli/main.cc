// tandem: the command line. Each subcommand lives in its own file (cli_*.cc) and registers itself
// through app/cli/commands.h. Errors a user can cause never show a stack trace: one line,
// "tandem: error: <message>", on stderr and a non-zero exit (2 for usage errors, 1 for failures).
// SIGINT and SIGTERM stop any command at once, with its child processes: exit 130 and 143
// (core/child_processes.h).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "app/common/common.h"
#include "app/cli/commands.h"
#include "app/scenario/scenario.h"
#include "core/child_processes.h"
#include "core/error.h"
#include "core/file_read.h"
#include "sim/simulator.h"

namespace {

// CLI11 messages may span lines; the error line must not.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

int report(const std::string& message, int exit_code) {
  std::fprintf(stderr, "tandem: error: %s\n", one_line(message).c_str());
  return exit_code;
}

// Every output is checked, standard output included: what a command printed is only written when
// the buffers are flushed, so a full disk or a closed pipe shows here. A command whose output was
// lost failed, whatever it computed.
int finish(int exit_code) {
  std::cout.flush();
  const bool stream_failed = std::cout.bad();
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || stream_failed) {
    const int error = errno;
    return report(std::string("could not write the standard output: ") +
                      (error != 0 ? std::strerror(error) : "the device is full or the reader went away"),
                  tandem::app::kExitFailure);
  }
  return exit_code;
}

// Whether this command line may run the simulator's packet model: `--network packet`, or a
// scenario file that names it. Cheap and conservative; a false positive costs one re-exec. A file
// that cannot be read (missing, too large, not a regular file) is the loader's to report.
bool may_run_packet_model(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "packet" || arg == "--network=packet") return true;
    if (arg.ends_with(".yaml") || arg.ends_with(".yml")) {
      try {
        const std::string text =
            tandem::read_file_bounded(std::string(arg), tandem::app::kMaxScenarioFileBytes, "scenario");
        if (text.find("packet") != std::string::npos) return true;
      } catch (const tandem::Error&) {
      }
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem::app;
  // Before anything else: ns-3 takes the packet model's settings only from the environment it
  // started with (sim/simulator.h).
  if (may_run_packet_model(argc, argv)) tandem::sim::packet_model_reexec(argv);
  tandem::install_interrupt_handler();
  CLI::App app(
      "tandem: collective algorithms run in tandem, simulated on a GPU-cluster model or executed on real "
      "hardware, with the same flight recorder and faults.",
      "tandem");
  app.set_version_flag("--version", "tandem " + version_string());
  app.footer(
      "Exit status: 0 success, 1 the command failed (fr analyze and replay: findings), 2 a usage error; 130 "
      "stopped by SIGINT (Ctrl-C), 143 stopped by SIGTERM (the command's worker processes are killed with it).");
  app.require_subcommand(1);
  app.fallthrough(false);

  CommandStatus status;
  add_schedule_command(app, status);
  add_bench_command(app, status);
  add_topo_command(app, status);
  add_bound_command(app, status);
  add_reliability_command(app, status);
  add_run_command(app, status);
  add_fr_command(app, status);
  add_replay_command(app, status);
  add_report_command(app, status);
  add_plan_command(app, status);
  add_memory_command(app, status);
  add_calibrate_command(app, status);

  try {
    // A word that names no command: say so, with the commands (CLI11 says "A subcommand is required").
    const std::vector<CLI::App*> commands = app.get_subcommands({});
    if (argc > 1 && argv[1][0] != '-' &&
        std::none_of(commands.begin(), commands.end(), [&](const CLI::App* c) { return c->check_name(argv[1]); })) {
      std::string names;
      for (const CLI::App* command : commands) names += (names.empty() ? "" : ", ") + command->get_name();
      return report(fmt::format("unknown command '{}' (the commands: {}; see 'tandem --help')", argv[1], names),
                    tandem::app::kExitUsage);
    }
    app.parse(argc, argv);
    return finish(status.exit_code);
  } catch (const CLI::Success& success) {
    return finish(app.exit(success));  // --help, --version
  } catch (const CLI::ParseError& error) {
    std::string hint = app.get_subcommands().empty()
                           ? std::string(" (see 'tandem --help')")
                           : " (see 'tandem " + app.get_subcommands().front()->get_name() + " --help')";
    return report(error.what() + hint, kExitUsage);
  } catch (const tandem::Error& error) {
    return report(error.what(), exit_code_for(error));
  } catch (const std::system_error& error) {
    // fmt::print reports a failed write of a full buffer this way.
    return report(std::string("could not write the output: ") + error.what(), kExitFailure);
  } catch (const std::bad_alloc&) {
    return report("out of memory", kExitFailure);
  } catch (const std::exception& error) {
    return report(std::string("internal error: ") + error.what(), kExitFailure);
  }
}
