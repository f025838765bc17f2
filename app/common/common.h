// What every room of app/ shares: exit codes, the names and durations users type (on the command
// line and in scenario and plan files), rank layouts, text files in and out, and a progress line
// for long work.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/schedule.h"
#include "core/types.h"

namespace tandem::app {

// One exit-code scheme for every subcommand, as docs/cli.md ("Exit status") states it and
// tests/app/exit_codes_cli_test.cc checks per subcommand. 130 and 143 (signals) are in
// core/child_processes.h.
inline constexpr int kExitSuccess = 0;
inline constexpr int kExitFindings = 1;  // the command ran and found something wrong: an expectation that
                                         // does not hold, wrong elements, findings in dumps, a failed check
inline constexpr int kExitInput = 2;     // bad input: a flag or value, a file that is missing, unreadable or
                                         // malformed, a request tandem does not support
inline constexpr int kExitInternal = 3;  // tandem or a backend failed: a backend error, out of memory, an
                                         // internal error, the standard output not writable

// The exit code of a command that stopped on `error`: what the user gave (kInvalidArgument,
// kUnsupported, kFormat, kIo) is kExitInput; what a run found (an invalid schedule, a failed check, a
// timeout, a fault, a desync, corrupt data) kExitFindings; a backend's failure kExitInternal.
int exit_code_for(const Error& error);

// The version `tandem --version` prints.
std::string version_string();

// Files a command reads and writes; each failure is Error(kIo) naming the path.
// The whole of a text file (`what` names it in messages: "scenario", "plan"), which must be a
// regular file (or a link to one) of at most `max_bytes`: its kind's limit, kMaxScenarioFileBytes
// and the like (core/file_read.h's read_file_bounded, whose messages these are).
std::string read_text_file(const std::string& path, std::string_view what, uint64_t max_bytes);
// Creates `dir` and its parents if missing (an --out folder).
void create_output_folder(const std::string& dir);
void write_text_file(const std::string& path, const std::string& text);

// Collective names as core spells them ("all_reduce"), with '-' accepted for '_' and nccl-tests'
// names as aliases (allreduce, allgather, reducescatter, alltoall, sendrecv). Throws
// Error(kInvalidArgument) listing the accepted names.
Collective parse_collective_name(std::string_view text);

// Algorithm names as core spells them, '-' accepted for '_'; "auto" gives Algorithm::kAuto.
Algorithm parse_algorithm_name(std::string_view text);
// "ring, tree, ..., hierarchical": the registry's algorithms, for --algo's help.
std::string algorithm_names();

// A duration as a user types it: a non-negative number with a unit, ns, us, ms, s, m or min, h, d
// ("250us", "1.5h", "2e3s"), or a plain number of seconds; at most kMaxDuration_s (a year: longer
// is a typo, not a plan). Throws Error(kInvalidArgument) naming `option` for anything else.
inline constexpr double kMaxDuration_s = 365.0 * 86400;
double parse_duration_s(std::string_view text, std::string_view option);

// Rank layout for `nranks` ranks. ranks_per_node == 0 means "not given": RankLayout::flat, a flat
// layout of one rank per node. Throws Error(kInvalidArgument) for nranks < 1 or ranks_per_node outside
// [1, nranks]. (A last, partly filled node is the algorithms' business: they accept or reject it.)
RankLayout make_layout(int nranks, int ranks_per_node);

// One status line on stderr, redrawn in place, shown only when stderr is a terminal (so logs and
// pipes never see it). The destructor erases it.
class Progress {
 public:
  Progress();
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool enabled() const { return enabled_; }
  void update(std::string_view text);
  void clear();

 private:
  bool enabled_ = false;
  bool shown_ = false;
};

// Sizes as the report prints them: in the largest binary unit that divides them ("8 B", "64 KiB",
// "16 GiB", "1536 B").
std::string format_size(int64_t bytes);

// A place in a YAML file (a scenario, a plan), 1-based; 0 when unknown.
struct SourceMark {
  int line = 0;
  int column = 0;
};

// The largest size a file may give one collective (or a bound), in bytes: beyond it a value is a
// typo rather than a plan.
inline constexpr int64_t kMaxScenarioSizeBytes = int64_t{1} << 40;  // 1 TiB

}  // namespace tandem::app
