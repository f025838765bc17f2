// The flight recorder: ring buffer, state changes, concurrency, settings from the environment, the
// pickle and JSON dumps (PyTorch's conventions, Python's pickle reading ours), parse_dump of ours
// and of older PyTorch versions, and writing / reading a dump directory.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/flight_recorder.h"
#include "core/pickle.h"
#include "core/torch_names.h"
#include "tests/support/expect_error.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using pickle::Dict;
using pickle::List;
using pickle::Value;

using tandem::testing::expect_error;

bool have_python() {
  static const bool found = std::system("python3 -c pass >/dev/null 2>&1") == 0;
  return found;
}

// A fresh directory under the system's temporary folder, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ =
        fs::temp_directory_path() / ("tandem_fr_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

FrEntry collective(int64_t seq, const std::string& pg = "0") {
  FrEntry e;
  e.pg_name = pg;
  e.pg_desc = pg == "0" ? "default_pg" : "pg" + pg;
  e.collective_seq_id = seq;
  e.op_id = seq;
  e.profiling_name = "nccl:all_reduce";
  e.input_sizes = {{3, 4}};
  e.output_sizes = {{3, 4}};
  e.input_dtypes = {"Float"};
  e.output_dtypes = {"Float"};
  e.time_created_ns = 1'700'000'000'000'000'000 + seq;
  e.thread_id = "140001";
  e.thread_name = "pt_main_thread";
  return e;
}

FrGroup group(const std::string& name, std::vector<int> ranks) {
  FrGroup g;
  g.name = name;
  g.desc = name == "0" ? "default_pg" : "pg" + name;
  g.ranks = std::move(ranks);
  return g;
}

// A dump with every optional field both set and unset, two groups and a p2p entry.
FrDump rich_dump(int rank = 0) {
  FrDump dump;
  dump.comm_lib_version = "2.21.5";
  dump.rank = rank;
  // Creation order is not name order: pg_status refers to groups by pg_id, in both formats.
  dump.groups = {group("0", {0, 1, 2}), group("2", {0, 2}), group("10", {1})};
  for (size_t i = 0; i < dump.groups.size(); ++i) dump.groups[i].pg_id = static_cast<int>(i);
  dump.groups[2].last_enqueued_collective = 7;
  dump.groups[0].last_enqueued_collective = 2;
  dump.groups[0].last_started_collective = 1;
  dump.groups[0].last_completed_collective = 1;
  FrEntry done = collective(1);
  done.record_id = 0;
  done.state = FrState::kCompleted;
  done.time_discovered_started_ns = done.time_created_ns + 10;
  done.time_discovered_completed_ns = done.time_created_ns + 2'000'010;
  done.duration_ms = 2.0;
  done.retired = true;
  FrEntry running = collective(2);
  running.record_id = 1;
  running.state = FrState::kStarted;
  running.time_discovered_started_ns = running.time_created_ns + 5;
  FrEntry send = collective(0, "2");
  send.record_id = 2;
  send.pg_id = 1;
  send.is_p2p = true;
  send.p2p_seq_id = 1;
  send.profiling_name = "nccl:send 0->1";
  send.input_dtypes = {"BFloat16"};
  send.output_sizes = {};
  send.output_dtypes = {};
  dump.entries = {done, running, send};
  return dump;
}

// ---- ring buffer and states

TEST(FlightRecorder, RingKeepsTheLastEntriesOldestFirst) {
  FlightRecorder recorder(3, 3, "test");
  recorder.add_group(group("0", {0, 1, 2, 3}));
  for (int64_t seq = 1; seq <= 5; ++seq) EXPECT_EQ(recorder.record(collective(seq)), static_cast<uint64_t>(seq - 1));
  const FrDump dump = recorder.dump();
  EXPECT_EQ(dump.rank, 3);
  EXPECT_EQ(dump.comm_lib_version, "test");
  EXPECT_EQ(dump.version, "2.10");
  ASSERT_EQ(dump.entries.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(dump.entries[i].record_id, i + 2);
    EXPECT_EQ(dump.entries[i].collective_seq_id, static_cast<int64_t>(i + 3));
    EXPECT_EQ(dump.entries[i].state, FrState::kScheduled);
  }
  ASSERT_EQ(dump.groups.size(), 1u);
  EXPECT_EQ(dump.groups[0].last_enqueued_collective, 5);
  EXPECT_EQ(dump.groups[0].last_completed_collective, -1);
}

TEST(FlightRecorder, RingSizesAroundTheCapacity) {
  for (size_t capacity : {1u, 2u, 7u}) {
    for (size_t recorded = 0; recorded <= 3 * capacity + 1; ++recorded) {
      FlightRecorder recorder(0, capacity, "test");
      for (size_t i = 0; i < recorded; ++i) recorder.record(collective(static_cast<int64_t>(i)));
      const FrDump dump = recorder.dump();
      ASSERT_EQ(dump.entries.size(), std::min(recorded, capacity));
      const size_t first = recorded - dump.entries.size();
      for (size_t i = 0; i < dump.entries.size(); ++i) EXPECT_EQ(dump.entries[i].record_id, first + i);
    }
  }
}

TEST(FlightRecorder, StartedCompletedRetiredAndDuration) {
  FlightRecorder recorder(0, 4, "test");
  recorder.add_group(group("0", {0, 1}));
  FrEntry given = collective(7);
  given.state = FrState::kCompleted;  // the recorder starts every entry as scheduled
  given.retired = true;
  const uint64_t a = recorder.record(given);
  const uint64_t b = recorder.record(collective(8));
  const uint64_t c = recorder.record(collective(9));
  recorder.started(a, 1'000'000);
  recorder.completed(a, 3'500'000);
  recorder.retire(a);
  recorder.started(b, 2'000'000);
  recorder.started(b, 9'000'000);  // the first discovery counts
  recorder.completed(c, 4'000'000);
  recorder.retire(c);
  recorder.started(999, 1);  // never recorded: ignored
  const FrDump dump = recorder.dump();
  ASSERT_EQ(dump.entries.size(), 3u);
  const FrEntry& done = dump.entries[0];
  EXPECT_EQ(done.state, FrState::kCompleted);
  EXPECT_EQ(done.time_discovered_started_ns, 1'000'000);
  EXPECT_EQ(done.time_discovered_completed_ns, 3'500'000);
  ASSERT_TRUE(done.duration_ms.has_value());
  EXPECT_DOUBLE_EQ(*done.duration_ms, 2.5);
  EXPECT_TRUE(done.retired);
  const FrEntry& running = dump.entries[1];
  EXPECT_EQ(running.state, FrState::kStarted);
  EXPECT_EQ(running.time_discovered_started_ns, 2'000'000);
  EXPECT_FALSE(running.time_discovered_completed_ns.has_value());
  EXPECT_FALSE(running.duration_ms.has_value());
  EXPECT_FALSE(running.retired);
  const FrEntry& no_start = dump.entries[2];  // completed without a start event: no duration
  EXPECT_EQ(no_start.state, FrState::kCompleted);
  EXPECT_FALSE(no_start.duration_ms.has_value());
  EXPECT_EQ(dump.groups[0].last_enqueued_collective, 9);
  EXPECT_EQ(dump.groups[0].last_started_collective, 8);
  EXPECT_EQ(dump.groups[0].last_completed_collective, 9);
}

TEST(FlightRecorder, OverwrittenEntriesIgnoreLateStateChanges) {
  FlightRecorder recorder(0, 2, "test");
  const uint64_t old = recorder.record(collective(1));
  recorder.record(collective(2));
  recorder.record(collective(3));  // overwrites `old`'s slot
  recorder.started(old, 10);
  recorder.completed(old, 20);
  recorder.retire(old);
  for (const FrEntry& e : recorder.dump().entries) {
    EXPECT_EQ(e.state, FrState::kScheduled);
    EXPECT_FALSE(e.retired);
  }
}

TEST(FlightRecorder, DisabledRecorderKeepsNothing) {
  FlightRecorder recorder(0, 0, "test");
  recorder.add_group(group("0", {0}));
  EXPECT_FALSE(recorder.enabled());
  EXPECT_EQ(recorder.record(collective(1)), 0u);
  EXPECT_EQ(recorder.record(collective(2)), 1u);  // ids stay meaningful
  recorder.started(0, 1);
  recorder.completed(1, 2);
  recorder.retire(1);
  const FrDump dump = recorder.dump();
  EXPECT_TRUE(dump.entries.empty());
  ASSERT_EQ(dump.groups.size(), 1u);
  EXPECT_EQ(dump.groups[0].last_enqueued_collective, -1);
}

TEST(FlightRecorder, AddGroupReplacesByName) {
  FlightRecorder recorder(0, 2, "test");
  recorder.add_group(group("0", {0, 1}));
  recorder.add_group(group("1", {1}));
  recorder.add_group(group("0", {0, 1, 2}));
  const FrDump dump = recorder.dump();
  ASSERT_EQ(dump.groups.size(), 2u);
  EXPECT_EQ(dump.groups[0].ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(dump.groups[1].name, "1");
}

TEST(FlightRecorder, ConcurrentRecordingLosesNothing) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 1000;
  FlightRecorder recorder(0, kThreads * kPerThread, "test");
  recorder.add_group(group("0", {0}));
  std::vector<std::vector<uint64_t>> ids(kThreads);
  std::atomic<bool> stop{false};
  std::thread watchdog([&] {
    while (!stop) (void)recorder.dump();  // dumps race with recording
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t id = recorder.record(collective(i));
        recorder.started(id, i);
        recorder.completed(id, i + 1);
        ids[static_cast<size_t>(t)].push_back(id);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  stop = true;
  watchdog.join();
  std::set<uint64_t> unique;
  for (const auto& list : ids) unique.insert(list.begin(), list.end());
  EXPECT_EQ(unique.size(), static_cast<size_t>(kThreads * kPerThread));
  EXPECT_EQ(*unique.rbegin(), static_cast<uint64_t>(kThreads * kPerThread - 1));
  const FrDump dump = recorder.dump();
  ASSERT_EQ(dump.entries.size(), static_cast<size_t>(kThreads * kPerThread));
  for (size_t i = 0; i < dump.entries.size(); ++i) {
    EXPECT_EQ(dump.entries[i].record_id, i);
    EXPECT_EQ(dump.entries[i].state, FrState::kCompleted);
  }
}

// ---- settings

// Sets (or, for nullptr, unsets) environment variables for one test and restores them after.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> values) {
    for (const char* name : kNames) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      unsetenv(name);
    }
    for (const auto& [name, value] : values) {
      if (value != nullptr) setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  static constexpr const char* kNames[] = {"TORCH_FR_BUFFER_SIZE",     "TORCH_NCCL_TRACE_BUFFER_SIZE",
                                           "TORCH_FR_DUMP_TEMP_FILE",  "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                                           "TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT"};
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(FrConfig, DefaultsFollowPyTorch) {
  const ScopedEnv env({});
  const FrConfig config = FrConfig::from_env();
  EXPECT_EQ(config.capacity, 2000u);
  EXPECT_EQ(config.prefix, "");
  EXPECT_TRUE(config.dump_on_timeout);
  EXPECT_EQ(config.format, FrFormat::kPickle);
}

TEST(FrConfig, ReadsTheVariablesNewestNameFirst) {
  {
    const ScopedEnv env({{"TORCH_NCCL_TRACE_BUFFER_SIZE", "10"},
                         {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/tmp/old_"},
                         {"TORCH_NCCL_DUMP_ON_TIMEOUT", "0"}});
    const FrConfig config = FrConfig::from_env();
    EXPECT_EQ(config.capacity, 10u);
    EXPECT_EQ(config.prefix, "/tmp/old_");
    EXPECT_FALSE(config.dump_on_timeout);
  }
  {
    const ScopedEnv env({{"TORCH_FR_BUFFER_SIZE", "0"},
                         {"TORCH_NCCL_TRACE_BUFFER_SIZE", "10"},
                         {"TORCH_FR_DUMP_TEMP_FILE", "/tmp/new_"},
                         {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/tmp/old_"},
                         {"TORCH_FR_DUMP_ON_TIMEOUT", "TRUE"},
                         {"TORCH_NCCL_DUMP_ON_TIMEOUT", "0"}});
    const FrConfig config = FrConfig::from_env();
    EXPECT_EQ(config.capacity, 0u);
    EXPECT_EQ(config.prefix, "/tmp/new_");
    EXPECT_TRUE(config.dump_on_timeout);
  }
  {
    const ScopedEnv env({{"TORCH_FR_BUFFER_SIZE", ""}, {"TORCH_NCCL_TRACE_BUFFER_SIZE", "5"}});  // empty = unset
    EXPECT_EQ(FrConfig::from_env().capacity, 5u);
  }
}

TEST(FrConfig, InvalidValuesNameTheVariable) {
  for (const char* bad : {"abc", "-1", "12x", "99999999999999999999", "100000000", "1000001"}) {
    const ScopedEnv env({{"TORCH_FR_BUFFER_SIZE", bad}});
    expect_error([] { FrConfig::from_env(); }, ErrorCode::kInvalidArgument, {"TORCH_FR_BUFFER_SIZE", bad});
  }
  const ScopedEnv env({{"TORCH_NCCL_DUMP_ON_TIMEOUT", "maybe"}});
  expect_error([] { FrConfig::from_env(); }, ErrorCode::kInvalidArgument, {"TORCH_NCCL_DUMP_ON_TIMEOUT", "maybe"});
}

TEST(FrConfig, FormatAndStateNames) {
  EXPECT_EQ(parse_fr_format("pickle"), FrFormat::kPickle);
  EXPECT_EQ(parse_fr_format("json"), FrFormat::kJson);
  expect_error([] { parse_fr_format("yaml"); }, ErrorCode::kInvalidArgument, {"'yaml'", "pickle or json"});
  EXPECT_EQ(name(FrState::kScheduled), "scheduled");
  EXPECT_EQ(name(FrState::kStarted), "started");
  EXPECT_EQ(name(FrState::kCompleted), "completed");
}

// ---- formats

TEST(FrFormats, PickleFollowsPyTorchsConventions) {
  const Value root = to_pickle_value(rich_dump());
  EXPECT_EQ(root.at("version").as_string(), "2.10");
  EXPECT_EQ(root.at("comm_lib_version").as_string(), "2.21.5");
  const Value& config = root.at("pg_config").at("2");
  EXPECT_EQ(config.at("name").as_string(), "2");
  EXPECT_EQ(config.at("desc").as_string(), "pg2");
  EXPECT_EQ(config.at("ranks").as_string(), "[0, 2]");  // a string, as ranks_str writes it
  EXPECT_EQ(root.at("pg_config").at("0").at("ranks").as_string(), "[0, 1, 2]");
  const Value& status = root.at("pg_status").at("0");
  EXPECT_EQ(status.at("last_enqueued_collective").as_int(), 2);
  EXPECT_EQ(status.at("last_started_collective").as_int(), 1);
  EXPECT_EQ(root.at("pg_status").at("1").at("last_completed_collective").as_int(), -1);
  EXPECT_EQ(root.at("pg_status").at("2").at("last_enqueued_collective").as_int(), 7);  // group "10"
  const List& entries = root.at("entries").as_list();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_TRUE(entries[0].at("process_group").is_tuple());
  EXPECT_EQ(entries[0].at("process_group"), Value(pickle::Tuple{{"0", "default_pg"}}));
  EXPECT_EQ(entries[0].at("duration_ms").as_number(), 2.0);
  EXPECT_EQ(entries[1].find("duration_ms"), nullptr);  // only when computed
  EXPECT_TRUE(entries[1].at("time_discovered_completed_ns").is_none());
  EXPECT_TRUE(entries[2].at("time_discovered_started_ns").is_none());
  EXPECT_EQ(entries[0].at("input_sizes"), Value(List{List{3, 4}}));
  EXPECT_EQ(entries[2].at("profiling_name").as_string(), "nccl:send 0->1");
  EXPECT_TRUE(entries[2].at("is_p2p").as_bool());
  EXPECT_EQ(entries[1].at("state").as_string(), "started");
  // Entries are always there in pickle, even when empty.
  EXPECT_TRUE(to_pickle_value(FrDump{}).at("entries").as_list().empty());
  EXPECT_EQ(pickle::loads(to_pickle(rich_dump())), root);
}

TEST(FrFormats, JsonFollowsPyTorchsConventions) {
  const json root = json::parse(to_json(rich_dump()));
  EXPECT_EQ(root.at("version"), "2.10");
  EXPECT_EQ(root.at("pg_config").at("0").at("ranks"), "[0, 1, 2]");
  EXPECT_EQ(root.at("pg_status").at("0").at("last_enqueued_collective"), "2");  // strings in JSON
  EXPECT_EQ(root.at("pg_status").at("1").at("last_started_collective"), "-1");
  const json& entries = root.at("entries");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].at("process_group"), json::array({"0", "default_pg"}));
  EXPECT_EQ(entries[1].at("time_discovered_completed_ns"), 0);  // 0, not null
  EXPECT_EQ(entries[2].at("time_discovered_started_ns"), 0);
  EXPECT_EQ(entries[0].at("duration_ms"), 2.0);
  EXPECT_FALSE(entries[1].contains("duration_ms"));
  EXPECT_EQ(entries[0].at("input_sizes"), json::parse("[[3, 4]]"));
  // No entries: no key at all in JSON.
  FrDump empty = rich_dump();
  empty.entries.clear();
  const json no_entries = json::parse(to_json(empty));
  EXPECT_FALSE(no_entries.contains("entries"));
  EXPECT_TRUE(no_entries.contains("pg_config"));
  EXPECT_TRUE(no_entries.contains("pg_status"));
  EXPECT_TRUE(no_entries.contains("comm_lib_version"));
}

TEST(FrFormats, ParseDumpRoundTripsBothFormats) {
  const FrDump original = rich_dump();
  EXPECT_EQ(parse_dump(to_pickle(original), "a.pkl"), original);
  EXPECT_EQ(parse_dump(to_json(original), "a.json"), original);
  EXPECT_EQ(parse_dump("  \n" + to_json(original), "a.json"), original);  // space before the '{'
  // An editor's UTF-8 byte-order mark before the JSON.
  EXPECT_EQ(parse_dump("\xEF\xBB\xBF" + to_json(original), "a.json"), original);
  FrDump empty;
  empty.comm_lib_version = "x";
  EXPECT_EQ(parse_dump(to_pickle(empty), "e.pkl"), empty);
  EXPECT_EQ(parse_dump(to_json(empty), "e.json"), empty);
  // The rank is the caller's to set (read_dump_dir takes it from the file name).
  EXPECT_EQ(parse_dump(to_pickle(rich_dump(5)), "r.pkl").rank, 0);
}

// An older PyTorch dump, as its pickle would hold it: no thread fields, no pg_status,
// nccl_version instead of comm_lib_version, stack frames, and ranks as an actual list.
Value older_dump(const char* version) {
  const Value entry = Dict{
      {"record_id", 4},
      {"pg_id", 0},
      {"process_group", pickle::Tuple{{"0", "default_pg"}}},
      {"collective_seq_id", 3},
      {"p2p_seq_id", 0},
      {"op_id", 3},
      {"profiling_name", "nccl:all_reduce"},
      {"time_created_ns", int64_t{1'700'000'000'000'000'000}},
      {"input_sizes", List{List{3, 4}}},
      {"input_dtypes", List{"Float"}},
      {"output_sizes", List{List{3, 4}}},
      {"output_dtypes", List{"Float"}},
      {"state", "scheduled"},
      {"time_discovered_started_ns", pickle::None{}},
      {"time_discovered_completed_ns", pickle::None{}},
      {"retired", false},
      {"timeout_ms", 600000},
      {"is_p2p", false},
      {"frames", List{Dict{{"name", "main"}, {"filename", "crash.py"}, {"line", 12}}}},
  };
  return Dict{{"version", version},
              {"nccl_version", "2.20.5"},
              {"pg_config", Dict{{"0", Dict{{"name", "0"}, {"desc", "default_pg"}, {"ranks", List{0, 1}}}}}},
              {"entries", List{entry}},
              {"some_later_key", 1}};
}

// Names reach terminals and reports: control characters come out escaped, in both formats.
TEST(FrFormats, ControlCharactersInNamesAreEscaped) {
  FrDump dump = rich_dump();
  dump.groups[0].desc = "\x1b]0;owned\x07\x1b[2Jdefault_pg";
  dump.entries[0].thread_name = "worker\r";
  for (const std::string& bytes : {to_pickle(dump), to_json(dump)}) {
    const FrDump read = parse_dump(bytes, "r");
    EXPECT_EQ(read.groups[0].desc, "\\x1b]0;owned\\x07\\x1b[2Jdefault_pg");
    EXPECT_EQ(read.entries[0].thread_name, "worker\\x0d");
  }
}

// PyTorch keys pg_status by pg_id, sparse where the rank is not in every group created, and its
// group names sort as strings ('0', '1', '112', '33'): a key is matched through the entries that
// name it, the others by order (names and pg_ids rise together), and one matched neither way is a
// warning, not a refusal.
TEST(FrFormats, PgStatusIsKeyedByPgId) {
  FrDump dump;
  dump.comm_lib_version = "2.27.3";
  dump.groups = {group("0", {0, 1}), group("112", {0}), group("33", {0, 1})};
  dump.groups[0].pg_id = 0;
  dump.groups[1].pg_id = 9;
  dump.groups[2].pg_id = 4;
  dump.groups[1].last_enqueued_collective = 90;
  dump.groups[2].last_enqueued_collective = 30;
  dump.groups[2].last_completed_collective = 29;
  FrEntry pending = collective(30, "33");
  pending.pg_id = 4;
  pending.record_id = 17;  // only-active dumps: the completed ones before it are gone
  dump.entries = {pending};
  const Value root = pickle::loads(to_pickle(dump));
  EXPECT_EQ(root.at("pg_status").at("4").at("last_enqueued_collective").as_int(), 30);
  EXPECT_EQ(root.at("pg_status").at("9").at("last_enqueued_collective").as_int(), 90);
  const FrDump read = parse_dump(to_pickle(dump), "d");
  EXPECT_EQ(read, dump);
  EXPECT_TRUE(read.warnings.empty());

  // Names that are not numbers cannot be ordered against pg_ids: a key no entry names is a warning.
  dump.groups[1].name = "experts";
  const FrDump unmatched = parse_dump(to_pickle(dump), "d");
  ASSERT_EQ(unmatched.warnings.size(), 2u);
  EXPECT_NE(unmatched.warnings[0].find("pg_status['0']: no entry names pg_id 0"), std::string::npos)
      << unmatched.warnings[0];
  EXPECT_EQ(unmatched.groups[2].last_enqueued_collective, 30);  // matched through its entry
  EXPECT_EQ(unmatched.groups[1].last_enqueued_collective, -1);  // not used
}

TEST(FrFormats, ReadsOlderPyTorchVersions) {
  const FrDump dump = parse_dump(pickle::dumps(older_dump("2.7")), "rank_0");
  EXPECT_EQ(dump.version, "2.7");
  EXPECT_EQ(dump.comm_lib_version, "2.20.5");
  ASSERT_EQ(dump.groups.size(), 1u);
  EXPECT_EQ(dump.groups[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(dump.groups[0].last_enqueued_collective, -1);
  ASSERT_EQ(dump.entries.size(), 1u);
  EXPECT_EQ(dump.entries[0].record_id, 4u);
  EXPECT_EQ(dump.entries[0].thread_id, "");
  EXPECT_FALSE(dump.entries[0].time_discovered_started_ns.has_value());
  // Our own version is strict: a key we do not know is an error (nccl_version included).
  expect_error([] { parse_dump(pickle::dumps(older_dump("2.10")), "rank_0"); }, ErrorCode::kFormat,
               {"rank_0: (top level): unknown key 'nccl_version'"});
  Value renamed = older_dump("2.10");
  std::get<Dict>(renamed.v)[1].first = "comm_lib_version";
  expect_error([&] { parse_dump(pickle::dumps(renamed), "rank_0"); }, ErrorCode::kFormat,
               {"rank_0: (top level): unknown key 'some_later_key'"});
  std::get<Dict>(renamed.v).pop_back();
  EXPECT_EQ(parse_dump(pickle::dumps(renamed), "rank_0").comm_lib_version, "2.20.5");
}

TEST(FrFormats, ReadsAPyTorchStylePickleFromPython) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  // What FlightRecorder::dump() pickles in 2.10: memoized strings, None times, tuples, frames.
  const std::string script =
      R"(import pickle,sys; e = {"record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"),)"
      R"( "collective_seq_id": 1, "p2p_seq_id": 0, "op_id": 1, "profiling_name": "nccl:all_reduce",)"
      R"( "time_created_ns": 1700000000000000000, "duration_ms": 1.25, "input_sizes": [[3, 4]],)"
      R"( "input_dtypes": ["Float"], "output_sizes": [[3, 4]], "output_dtypes": ["Float"],)"
      R"( "state": "completed", "time_discovered_started_ns": 1700000000000000100,)"
      R"( "time_discovered_completed_ns": 1700000000001250100, "retired": True, "timeout_ms": 600000,)"
      R"( "is_p2p": False, "thread_id": "1234", "thread_name": "pt_main_thread",)"
      R"( "frames": [{"name": "f", "filename": "x.py", "line": 3}]};)"
      R"( d = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},)"
      R"( "comm_lib_version": "2.21.5", "pg_status": {"0": {"last_enqueued_collective": 1,)"
      R"( "last_started_collective": 1, "last_completed_collective": 1}}, "entries": [e, dict(e, record_id=1)]};)"
      R"( sys.stdout.buffer.write(pickle.dumps(d, protocol=2)))";
  FILE* pipe = popen(("python3 -c '" + script + "'").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string bytes;
  char buffer[4096];
  for (size_t n = 0; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) bytes.append(buffer, n);
  ASSERT_EQ(pclose(pipe), 0);
  const FrDump dump = parse_dump(bytes, "python");
  EXPECT_EQ(dump.comm_lib_version, "2.21.5");
  EXPECT_EQ(dump.groups[0].last_completed_collective, 1);
  ASSERT_EQ(dump.entries.size(), 2u);
  EXPECT_EQ(dump.entries[1].record_id, 1u);
  EXPECT_EQ(dump.entries[0].duration_ms, 1.25);
  EXPECT_EQ(dump.entries[0].time_discovered_completed_ns, 1700000000001250100);
  EXPECT_EQ(dump.entries[0].thread_name, "pt_main_thread");
}

TEST(FrFormats, ProblemsNameTheSourceAndTheField) {
  const auto bad = [](const Value& root, std::initializer_list<const char*> fragments) {
    expect_error([&] { parse_dump(pickle::dumps(root), "dumps/rank_3"); }, ErrorCode::kFormat, fragments);
  };
  Value good = to_pickle_value(rich_dump());
  const auto with = [&](const std::function<void(Dict&)>& change) {
    Value copy = good;
    change(std::get<Dict>(copy.v));
    return copy;
  };
  const auto entry0 = [](Dict& root) -> Dict& {
    for (auto& [key, value] : root) {
      if (key == Value("entries")) return std::get<Dict>(std::get<List>(value.v)[0].v);
    }
    throw std::logic_error("no entries");
  };
  const auto set = [](Dict& dict, const char* key, Value value) {
    for (auto& [k, v] : dict) {
      if (k == Value(key)) v = std::move(value);
    }
  };
  bad(List{}, {"dumps/rank_3: (top level): expected a dict, got list"});
  bad(with([&](Dict& r) { set(r, "version", "3.0"); }), {"dumps/rank_3: version: unsupported", "'3.0'"});
  bad(with([&](Dict& r) { set(r, "version", 2); }), {"version: expected str, got int"});
  bad(with([&](Dict& r) { set(entry0(r), "state", 1); }), {"dumps/rank_3: entries[0].state: expected str, got int"});
  bad(with([&](Dict& r) { set(entry0(r), "state", "lost"); }), {"entries[0].state: unknown state 'lost'"});
  bad(with([&](Dict& r) { set(entry0(r), "record_id", -1); }), {"entries[0].record_id: -1 out of range"});
  // Times are checked so that replay's clock (differences of two) cannot overflow.
  bad(with([&](Dict& r) { set(entry0(r), "time_created_ns", std::numeric_limits<int64_t>::min()); }),
      {"entries[0].time_created_ns: -9223372036854775808 out of range [0, 4611686018427387904]"});
  bad(with([&](Dict& r) { set(entry0(r), "time_discovered_started_ns", -5); }),
      {"entries[0].time_discovered_started_ns: -5 out of range"});
  bad(with([&](Dict& r) { set(entry0(r), "duration_ms", std::numeric_limits<double>::quiet_NaN()); }),
      {"entries[0].duration_ms: nan out of range"});
  bad(with([&](Dict& r) { set(entry0(r), "process_group", List{"0"}); }), {"entries[0].process_group"});
  bad(with([&](Dict& r) { set(entry0(r), "input_sizes", List{List{"3"}}); }), {"entries[0].input_sizes"});
  bad(with([&](Dict& r) { entry0(r).erase(entry0(r).begin()); }), {"entries[0]: missing key 'record_id'"});
  bad(with([&](Dict& r) { entry0(r).emplace_back("extra", 1); }), {"entries[0]: unknown key 'extra'"});
  bad(with([&](Dict& r) {
        set(r, "pg_config", Dict{{"0", Dict{{"name", "0"}, {"desc", "d"}, {"ranks", "[0, x]"}}}});
      }),
      {"pg_config['0'].ranks: '[0, x]' is not a list of ranks"});
  bad(with([&](Dict& r) {
        set(r, "pg_config", Dict{{"0", Dict{{"name", "1"}, {"desc", "d"}, {"ranks", "[]"}}}});
      }),
      {"pg_config['0'].name: '1' differs from its key"});
  bad(with([&](Dict& r) {
        set(r, "pg_status", Dict{{"x", Dict{}}});
      }),
      {"pg_status['x']: the key is not a pg_id"});
  bad(with([&](Dict& r) { r.erase(r.begin() + 2); }), {"(top level): missing key 'pg_config'"});
  expect_error([] { parse_dump("", "f"); }, ErrorCode::kFormat, {"f: empty flight-recorder dump"});
  // A top-level array is JSON ('[' is no pickle opcode), refused as such rather than as a pickle.
  expect_error([] { parse_dump("[" + to_json(rich_dump()) + "]", "a.json"); }, ErrorCode::kFormat,
               {"a.json: (top level): expected a dict, got list"});
  expect_error([] { parse_dump("\x80\x02\x63os\nsystem\n.", "f"); }, ErrorCode::kFormat,
               {"f: unsupported pickle opcode 0x63 (GLOBAL) at byte 2"});
  expect_error([] { parse_dump("{\"version\": ", "f.json"); }, ErrorCode::kFormat, {"f.json: bad JSON"});
  expect_error([] { parse_dump("{\"pg_config\": {\"0\": 1, \"0\": 2}}", "f.json"); }, ErrorCode::kFormat,
               {"f.json: JSON key '0' repeated"});
  expect_error([] { parse_dump(std::string(5000, '['), "deep"); }, ErrorCode::kFormat, {"deep:"});
  expect_error([] { parse_dump("{\"a\":" + std::string(5000, '['), "deep.json"); }, ErrorCode::kFormat,
               {"deep.json: JSON nested deeper than 1000"});
  // Truncated at every byte: always a format error naming the file.
  const std::string whole = to_pickle(rich_dump());
  for (size_t length = 0; length < whole.size(); ++length) {
    try {
      parse_dump(std::string_view(whole).substr(0, length), "cut");
      ADD_FAILURE() << "a dump cut at " << length << " parsed";
    } catch (const Error& e) {
      ASSERT_EQ(e.code(), ErrorCode::kFormat);
      ASSERT_EQ(std::string(e.what()).rfind("cut: ", 0), 0u) << e.what();
    }
  }
}

TEST(FrFormats, JsonAcceptsPyTorchsNullsAndStrings) {
  const std::string text = R"({"version": "2.10", "comm_lib_version": "2.21.5", "pg_config": null, "pg_status": null})";
  const FrDump dump = parse_dump(text, "j");
  EXPECT_TRUE(dump.groups.empty());
  EXPECT_TRUE(dump.entries.empty());
}

// ---- files

TEST(FrFiles, WriteAndReadADumpDirectory) {
  const TempDir dir;
  const std::vector<FrDump> dumps = {rich_dump(0), rich_dump(1), rich_dump(2)};
  for (FrFormat format : {FrFormat::kPickle, FrFormat::kJson}) {
    const fs::path out = dir.path() / (format == FrFormat::kJson ? "json" : "pickle");
    const auto paths = write_dumps(dumps, (out / "nested" / "rank_").string(), format);
    ASSERT_EQ(paths.size(), 3u);
    EXPECT_EQ(paths[2], out / "nested" / "rank_2");
    // Not dumps: an unrelated file with digits and one without; no temporary file is left over.
    write_file(out / "nested" / "other7", "x");
    write_file(out / "nested" / "notes.txt", "x");
    EXPECT_EQ(std::distance(fs::directory_iterator(out / "nested"), fs::directory_iterator()), 5);
    EXPECT_EQ(read_dump_dir(out / "nested"), dumps);  // prefix inferred: rank_
    EXPECT_EQ(read_dump_dir(out / "nested", "rank_"), dumps);
  }
}

TEST(FrFiles, ReadingErrorsNameTheFileOrDirectory) {
  const TempDir dir;
  write_dumps({rich_dump(0), rich_dump(1)}, (dir.path() / "trace_").string(), FrFormat::kPickle);
  write_file(dir.path() / "trace_3", "not a pickle");
  expect_error([&] { read_dump_dir(dir.path()); }, ErrorCode::kFormat, {(dir.path() / "trace_3").string().c_str()});
  fs::remove(dir.path() / "trace_3");
  write_file(dir.path() / "trace_01", to_pickle(rich_dump()));
  expect_error([&] { read_dump_dir(dir.path()); }, ErrorCode::kFormat, {"trace_01", "trace_1", "both rank 1"});
  fs::remove(dir.path() / "trace_01");
  EXPECT_EQ(read_dump_dir(dir.path()).size(), 2u);
  expect_error([&] { read_dump_dir(dir.path(), "rank_"); }, ErrorCode::kIo, {"no flight-recorder dumps in"});
  const TempDir empty;
  expect_error([&] { read_dump_dir(empty.path()); }, ErrorCode::kIo,
               {"no flight-recorder dumps in", empty.path().c_str()});
  expect_error([&] { read_dump_dir(empty.path() / "missing"); }, ErrorCode::kIo, {"does not exist"});
  expect_error([] { write_dumps({FrDump{}}, "", FrFormat::kPickle); }, ErrorCode::kInvalidArgument,
               {"prefix is empty"});
}

TEST(FrFiles, PythonLoadsOurDumpWithEveryRequiredField) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  const TempDir dir;
  const auto paths = write_dumps({rich_dump(0)}, (dir.path() / "rank_").string(), FrFormat::kPickle);
  // Only the standard library, as torchfrtrace's loader: pickle.load and the spec's checks.
  const std::string script = R"(
import ast, pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
assert d["version"] == "2.10", d["version"]
assert isinstance(d["comm_lib_version"], str)
for name, info in d["pg_config"].items():
    assert info["name"] == name and isinstance(info["desc"], str)
    assert isinstance(info["ranks"], str) and isinstance(ast.literal_eval(info["ranks"]), list)
for index, status in d["pg_status"].items():
    assert int(index) >= 0
    for key in ("last_enqueued_collective", "last_started_collective", "last_completed_collective"):
        assert isinstance(status[key], int)
assert len(d["entries"]) == 3
types = {"record_id": int, "pg_id": int, "process_group": tuple, "collective_seq_id": int, "p2p_seq_id": int,
         "op_id": int, "profiling_name": str, "input_sizes": list, "input_dtypes": list, "output_sizes": list,
         "output_dtypes": list, "time_created_ns": int, "state": str, "is_p2p": bool, "retired": bool,
         "timeout_ms": int, "thread_id": str, "thread_name": str}
for e in d["entries"]:
    for key, kind in types.items():
        assert isinstance(e[key], kind), (key, e.get(key))
    assert len(e["process_group"]) == 2 and e["process_group"][0] in d["pg_config"]
    assert e["state"] in ("scheduled", "started", "completed")
    for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
        assert e[key] is None or isinstance(e[key], int)
assert d["entries"][0]["duration_ms"] == 2.0 and "duration_ms" not in d["entries"][1]
assert d["entries"][1]["time_discovered_completed_ns"] is None
assert d["entries"][0]["input_sizes"] == [[3, 4]]
)";
  ASSERT_EQ(script.find('\''), std::string::npos);  // it goes into a shell '...'
  const std::string command = "python3 -c '" + script + "' " + paths[0].string();
  EXPECT_EQ(std::system(command.c_str()), 0);
}

// PyTorch's names as the recorder writes them read back with the sizes tandem's dtypes have, and
// every collective tandem runs has a profiling name replay and the analyzer know.
TEST(TorchNames, DtypesAndOpsRoundTrip) {
  for (DataType dtype : all_data_types()) {
    EXPECT_EQ(torch_dtype_bytes(torch_dtype_name(dtype)), static_cast<int>(size_bytes(dtype))) << name(dtype);
  }
  EXPECT_EQ(torch_dtype_bytes("Float8_e4m3fn"), 1);
  EXPECT_EQ(torch_dtype_bytes("float"), std::nullopt);
  for (Collective c : all_collectives()) {
    const std::string type = c == Collective::kSendRecv ? "send" : std::string(name(c));
    const TorchOp* op = torch_op(type);
    ASSERT_NE(op, nullptr) << type;
    EXPECT_EQ(op->collective, c) << type;
  }
  EXPECT_EQ(torch_op("all_gather_into_tensor")->sized_by, TorchSizedBy::kOutput);
  EXPECT_TRUE(torch_op("reduce_scatter_tensor_coalesced")->coalesced);
  EXPECT_EQ(torch_op("scatter"), nullptr);
  EXPECT_EQ(torch_op("coalesced"), nullptr);
}

}  // namespace
}  // namespace tandem
