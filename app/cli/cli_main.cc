// tandem's command line (main.cc calls run_command_line). Each subcommand lives in its own file
// (cli_*.cc) and registers itself through app/cli/commands.h. Errors a user can cause never show a stack trace: one line,
// "tandem: error: <message>", on stderr and a non-zero exit (app/common/common.h's scheme: 1
// findings, 2 bad input, 3 internal).
// SIGINT and SIGTERM stop any command at once, with its child processes: exit 130 and 143
// (core/child_processes.h).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <sstream>
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
#include "core/text.h"
#include "sim/simulator.h"

namespace tandem::app {
namespace {

// CLI11 messages may span lines; the error line must not.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// Messages quote what users hand tandem (keys, names, paths): control bytes in them are shown
// escaped (\x1b), never sent to the terminal.
int report(const std::string& message, int exit_code) {
  std::fprintf(stderr, "tandem: error: %s\n", tandem::printable(one_line(message)).c_str());
  return exit_code;
}

// The flags `command` takes, as a user types them ("--nodes", "-g").
std::vector<std::string> flag_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

// " (did you mean '--nodes'?)" for the first flag among the arguments CLI11 did not expect, when
// a flag of the command is that close to it; "".
std::string flag_hint(const CLI::ParseError& error, const CLI::App& command) {
  const std::string message = error.what();
  const size_t colon = message.rfind(": ");
  if (colon == std::string::npos) return "";
  std::istringstream words(message.substr(colon + 2));  // "all_reduce --colective"
  for (std::string word; words >> word;) {
    if (word.size() < 2 || word[0] != '-') continue;
    return tandem::did_you_mean(word.substr(0, word.find('=')), flag_names(command));
  }
  return "";
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
                  kExitInternal);
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
            tandem::read_file_bounded(std::string(arg), kMaxScenarioFileBytes, "scenario");
        if (text.find("packet") != std::string::npos) return true;
      } catch (const tandem::Error&) {
      }
    }
  }
  return false;
}

}  // namespace

int run_command_line(int argc, char** argv) {
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
      "Exit status (every command): 0 success; 1 findings (an expectation that does not hold, wrong elements, a "
      "divergence in dumps, a failed check); 2 bad input (a flag, a value, a file missing, unreadable or malformed, "
      "an unsupported request); 3 an internal or backend failure; 130 stopped by SIGINT (Ctrl-C), 143 by SIGTERM "
      "(the command's worker processes are killed with it).");
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
      std::vector<std::string> command_names;
      for (const CLI::App* command : commands) command_names.push_back(command->get_name());
      return report(fmt::format("unknown command '{}'{} (the commands: {}; see 'tandem --help')", argv[1],
                                tandem::did_you_mean(argv[1], command_names), names),
                    kExitInput);
    }
    app.parse(argc, argv);
    return finish(status.exit_code);
  } catch (const CLI::Success& success) {
    return finish(app.exit(success));  // --help, --version
  } catch (const CLI::ParseError& error) {
    const std::vector<CLI::App*> parsed = app.get_subcommands();
    // The innermost command parsed ("fr analyze": analyze), whose flags a typo was meant for.
    const CLI::App* command = parsed.empty() ? &app : parsed.front();
    while (!command->get_subcommands().empty()) command = command->get_subcommands().front();
    const std::string hint = parsed.empty() ? std::string(" (see 'tandem --help')")
                                            : " (see 'tandem " + parsed.front()->get_name() + " --help')";
    return report(error.what() + flag_hint(error, *command) + hint, kExitInput);
  } catch (const tandem::Error& error) {
    return report(error.what(), exit_code_for(error));
  } catch (const std::system_error& error) {
    // fmt::print reports a failed write of a full buffer this way.
    return report(std::string("could not write the output: ") + error.what(), kExitInternal);
  } catch (const std::bad_alloc&) {
    return report("out of memory", kExitInternal);
  } catch (const std::exception& error) {
    return report(std::string("internal error: ") + error.what(), kExitInternal);
  }
}

}  // namespace tandem::app
