// tandem: the command line (app/cli/cli_main.cc). It lives in tandem_app so that it compiles with
// the subcommands, parsing CLI11 once (app/CMakeLists.txt says why).
#include "app/cli/commands.h"

int main(int argc, char** argv) { return tandem::app::run_command_line(argc, argv); }
