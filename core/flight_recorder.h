// The flight recorder: a fixed-capacity ring buffer of collective and p2p entries per rank, the
// same on every backend, dumped in PyTorch's flight-recorder format (version "2.10", pickle
// protocol 2 by default, JSON on request; docs/flight-recorder.md has the schema) so PyTorch's
// torchfrtrace and `tandem fr analyze` read the dumps of a simulated or a real run alike.
//
// Timestamps come from the backend's clock, in ns: wall time on real backends, simulated time in
// sim. Thread-safe: ranks' threads and a watchdog may record and dump concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/pickle.h"

namespace tandem {

inline constexpr std::string_view kFrVersion = "2.10";

enum class FrState : uint8_t { kScheduled, kStarted, kCompleted };
std::string_view name(FrState state);  // "scheduled", "started", "completed"

struct FrEntry {
  uint64_t record_id = 0;                // per rank, monotonic over all groups
  int pg_id = 0;                         // the group's creation index on this rank
  std::string pg_name = "0";             // process_group[0]: the pg_config key
  std::string pg_desc = "default_pg";    // process_group[1]
  int64_t collective_seq_id = 0;         // per group: launched collectives (a coalesced group once)
  int64_t p2p_seq_id = 0;                // per group: launched p2p ops
  int64_t op_id = 0;                     // per group: logical ops
  std::string profiling_name;            // "nccl:all_reduce", "nccl:send 0->1", "nccl:recv 1<-0"
  std::vector<std::vector<int64_t>> input_sizes;   // per tensor, its shape: [[count]]
  std::vector<std::vector<int64_t>> output_sizes;
  std::vector<std::string> input_dtypes;           // PyTorch's names: "Float", "BFloat16", ...
  std::vector<std::string> output_dtypes;
  FrState state = FrState::kScheduled;
  int64_t time_created_ns = 0;
  std::optional<int64_t> time_discovered_started_ns;
  std::optional<int64_t> time_discovered_completed_ns;
  std::optional<double> duration_ms;     // set when completed with both timestamps
  bool retired = false;                  // retired but not completed = timed out
  int64_t timeout_ms = 600000;
  bool is_p2p = false;
  std::string thread_id;
  std::string thread_name;

  bool operator==(const FrEntry&) const = default;
};

// One group's membership (pg_config) and progress (pg_status).
struct FrGroup {
  std::string name = "0";
  std::string desc = "default_pg";
  std::vector<int> ranks;                // global ranks
  int64_t last_enqueued_collective = -1;
  int64_t last_started_collective = -1;
  int64_t last_completed_collective = -1;
  // The group's pg_id on this rank: entries name it, and pg_status is keyed by it (PyTorch's pg_id
  // is sparse: 0, 1, 4, 5, ... where the rank is not a member of every group created). -1: not
  // known (a recorder assigns the group's position when it is declared without one).
  int pg_id = -1;

  bool operator==(const FrGroup&) const = default;
};

// One rank's dump.
struct FrDump {
  std::string version = std::string(kFrVersion);
  std::string comm_lib_version;          // e.g. "tandem-0.1.0 sim" or NCCL's "2.28.3"
  int rank = 0;                          // global rank (from the file name when read back)
  std::vector<FrGroup> groups;           // pg_config / pg_status, in creation order
  std::vector<FrEntry> entries;          // oldest first
  // What the reader could not use, said instead of refusing the dump: e.g. a pg_status key that
  // names no group of pg_config. Not written back.
  std::vector<std::string> warnings;

  bool operator==(const FrDump&) const = default;
};

enum class FrFormat : uint8_t { kPickle, kJson };
FrFormat parse_fr_format(std::string_view text);  // "pickle" or "json"

// The recorder's settings. Defaults follow PyTorch; from_env() honours the variables PyTorch
// engineers already set; a scenario key or flag overrides them afterwards.
struct FrConfig {
  size_t capacity = 2000;         // TORCH_FR_BUFFER_SIZE, else TORCH_NCCL_TRACE_BUFFER_SIZE; 0 = off
  std::string prefix;             // TORCH_FR_DUMP_TEMP_FILE, else TORCH_NCCL_DEBUG_INFO_TEMP_FILE;
                                  // empty: "<out dir>/fr/rank_" chosen by the caller
  bool dump_on_timeout = true;    // TORCH_NCCL_DUMP_ON_TIMEOUT / TORCH_FR_DUMP_ON_TIMEOUT (0/1, true/false)
  FrFormat format = FrFormat::kPickle;

  // Throws Error(kInvalidArgument) naming the variable when a value does not parse.
  static FrConfig from_env();
};

class FlightRecorder {
 public:
  FlightRecorder(int rank, size_t capacity, std::string comm_lib_version);

  int rank() const { return rank_; }
  bool enabled() const { return capacity_ > 0; }

  // Declares a group (pg_config). Groups are keyed by name; declaring a name again replaces it.
  void add_group(const FrGroup& group);

  // Records a new entry in state scheduled (collective_seq_id / p2p_seq_id / op_id / record_id /
  // time_created_ns as given in `entry`, except record_id, which the recorder assigns) and updates
  // the group's last_enqueued_collective. Returns the record id (also when disabled: ids stay
  // meaningful). Overwrites the oldest entry when full.
  uint64_t record(FrEntry entry);
  // State changes of a recorded entry; ignored when the entry was overwritten since.
  void started(uint64_t record_id, int64_t now_ns);
  void completed(uint64_t record_id, int64_t now_ns);  // also computes duration_ms when started
  void retire(uint64_t record_id);                     // retired; completed or not (timed out)

  // The dump: entries oldest first, groups with their pg_status.
  FrDump dump() const;

 private:
  FrEntry* find(uint64_t record_id);  // requires mutex_
  FrGroup* group(const std::string& name);

  const int rank_;
  const size_t capacity_;
  const std::string comm_lib_version_;
  mutable std::mutex mutex_;
  uint64_t next_id_ = 0;
  std::vector<FrEntry> ring_;        // grows to capacity_, then wraps
  size_t next_slot_ = 0;
  std::vector<FrGroup> groups_;
};

// The dump as PyTorch writes it: pickle (protocol 2, None for unset discovered times, pg_status
// values as ints) or JSON (0 for unset times, pg_status values as strings, no "entries" key when
// there are none).
pickle::Value to_pickle_value(const FrDump& dump);
std::string to_pickle(const FrDump& dump);
std::string to_json(const FrDump& dump);

// Reads one dump, pickle or JSON (told apart by the first byte), ours or PyTorch's (versions 2.x;
// fields later versions added are optional). `source` names the file in errors: every problem is
// Error(kFormat) "<source>: <what>".
FrDump parse_dump(std::string_view bytes, const std::string& source);

// Removes every `<prefix><rank>` file an earlier run left (only names of that exact form), so that
// a run's dumps are never read together with another run's; returns how many. Error(kIo) when one
// cannot be removed.
int remove_dumps(const std::string& prefix);

// Writes `<prefix><rank>` for each dump; creates the prefix's directory. Returns the paths.
std::vector<std::filesystem::path> write_dumps(const std::vector<FrDump>& dumps, const std::string& prefix,
                                               FrFormat format);

// The largest dump file read_dump_dir reads, checked before reading: a dump takes about as much
// memory as its file, and several are read at once. An entry is a few hundred bytes (about 160 in
// PyTorch's pickle, more in JSON), so 1 GiB holds millions: a thousand times PyTorch's default ring
// of 2000 (FrConfig::capacity), and more than a ring tandem is ever asked to keep in practice.
inline constexpr uint64_t kMaxFrDumpFileBytes = uint64_t{1} << 30;  // 1 GiB
// A ring larger than this is a typo, not a plan: PyTorch's default is 2000. A full ring's dump must
// stay readable under kMaxFrDumpFileBytes: an entry is about 160 bytes of pickle and up to about
// 700 of JSON, so 1,000,000 entries write at most 0.7 GB.
inline constexpr size_t kMaxFrCapacity = 1'000'000;
// Times in a dump are nanoseconds of the recording clock: 0 to 2^62 (year 2116 of the Unix epoch),
// so that differences of two never overflow; durations up to a year.
inline constexpr int64_t kMaxFrTimeNs = int64_t{1} << 62;
inline constexpr double kMaxFrDurationMs = 365.0 * 24 * 3600 * 1000;

// Reads every dump in `dir` whose file name is `<prefix><digits>` (prefix empty: inferred from
// the names as PyTorch's analyzer splits them, `(.*?)(\d+)$`, taking the stem most files share);
// the rank comes from the digits.
// Sorted by rank. Throws Error(kIo) for a missing directory (or a file given as one), no dumps, or
// a dump that is not a regular file or is over kMaxFrDumpFileBytes; Error(kFormat) naming the file
// for a corrupt one. `progress`, when given, is called on the calling thread as files are read
// (files read, of how many; the dumps are parsed on several threads).
std::vector<FrDump> read_dump_dir(const std::filesystem::path& dir, const std::string& prefix = "",
                                  const std::function<void(size_t done, size_t total)>& progress = {});

}  // namespace tandem
