// tandem: the command line. Each subcommand lives in its own file (cli_*.cc) and registers itself
// through app/commands.h. Errors a user can cause never show a stack trace: one line,
// "tandem: error: <message>", on stderr and a non-zero exit (2 for usage errors, 1 for failures).
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "app/cli_common.h"
#include "app/commands.h"
#include "core/error.h"

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

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem::app;
  CLI::App app(
      "tandem: collective algorithms run in tandem, simulated on a GPU-cluster model or executed on real "
      "hardware, with the same flight recorder and faults.",
      "tandem");
  app.set_version_flag("--version", "tandem " + version_string());
  app.require_subcommand(1);
  app.fallthrough(false);

  CommandStatus status;
  add_schedule_command(app, status);
  add_bench_command(app, status);
  add_topo_command(app, status);
  add_bound_command(app, status);
  add_run_command(app, status);
  add_fr_command(app, status);

  try {
    app.parse(argc, argv);
    return status.exit_code;
  } catch (const CLI::Success& success) {
    return app.exit(success);  // --help, --version
  } catch (const CLI::ParseError& error) {
    std::string hint = app.get_subcommands().empty()
                           ? std::string(" (see 'tandem --help')")
                           : " (see 'tandem " + app.get_subcommands().front()->get_name() + " --help')";
    return report(error.what() + hint, kExitUsage);
  } catch (const tandem::Error& error) {
    return report(error.what(), exit_code_for(error));
  } catch (const std::bad_alloc&) {
    return report("out of memory", kExitFailure);
  } catch (const std::exception& error) {
    return report(std::string("internal error: ") + error.what(), kExitFailure);
  }
}
