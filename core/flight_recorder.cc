// The flight recorder itself (core/flight_recorder.h): its settings from PyTorch's environment
// variables and the ring buffer each rank records into. A dump is written by fr_dump_write.cc,
// read by fr_dump_read.cc, and a folder of them handled by fr_dump_files.cc.
#include "core/flight_recorder.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include "core/error.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------------------------

// The first variable of `names` that is set to something, as (name, value). An empty value counts
// as unset, the way `export VAR=` is commonly used to clear one.
std::optional<std::pair<std::string, std::string>> first_env(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return std::make_pair(std::string(name), std::string(value));
  }
  return std::nullopt;
}

size_t parse_capacity(const std::string& name, const std::string& text) {
  size_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value > kMaxFrCapacity) {
    fail(ErrorCode::kInvalidArgument, "{}='{}': expected an entry count from 0 (off) to {}", name, text,
         kMaxFrCapacity);
  }
  return value;
}

bool parse_env_bool(const std::string& name, const std::string& text) {
  std::string lower = text;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "1" || lower == "true") return true;
  if (lower == "0" || lower == "false") return false;
  fail(ErrorCode::kInvalidArgument, "{}='{}': expected 0, 1, true or false", name, text);
}

}  // namespace

std::string_view name(FrState state) {
  switch (state) {
    case FrState::kScheduled: return "scheduled";
    case FrState::kStarted: return "started";
    case FrState::kCompleted: return "completed";
  }
  return "unknown";
}

FrFormat parse_fr_format(std::string_view text) {
  if (text == "pickle") return FrFormat::kPickle;
  if (text == "json") return FrFormat::kJson;
  fail(ErrorCode::kInvalidArgument, "unknown flight-recorder format '{}' (expected pickle or json)", text);
}

FrConfig FrConfig::from_env() {
  FrConfig config;
  if (const auto size = first_env({"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"})) {
    config.capacity = parse_capacity(size->first, size->second);
  }
  if (const auto prefix = first_env({"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"})) {
    config.prefix = prefix->second;
    // PyTorch opens <prefix><rank> where it is told and fails when the folder is missing; a run
    // told to dump into a folder that is not there is refused before it starts, not half-way.
    const fs::path folder = fs::path(config.prefix).parent_path();
    std::error_code error;
    if (!folder.empty() && !fs::is_directory(folder, error)) {
      fail(ErrorCode::kInvalidArgument, "{}={}: the folder {} does not exist (dumps are written there, it is not created)",
           prefix->first, prefix->second, folder.string());
    }
  }
  if (const auto dump = first_env({"TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT"})) {
    config.dump_on_timeout = parse_env_bool(dump->first, dump->second);
  }
  return config;
}

// ---------------------------------------------------------------------------------------------
// FlightRecorder
//
// Record ids count up from 0 and the ring fills slots 0, 1, 2, ... before wrapping, so record id
// `i` lives in slot `i % capacity` until id `i + capacity` overwrites it:
//
//   capacity 3, ids 0..4 recorded     slot:   0    1    2
//                                     id:     3    4    2      next_slot_ = 5 % 3 = 2
//   dump (oldest first) = slots [next_slot_, end) + [0, next_slot_) = ids 2, 3, 4
// ---------------------------------------------------------------------------------------------

FlightRecorder::FlightRecorder(int rank, size_t capacity, std::string comm_lib_version)
    : rank_(rank), capacity_(capacity), comm_lib_version_(std::move(comm_lib_version)) {}

void FlightRecorder::add_group(const FrGroup& new_group) {
  const std::lock_guard lock(mutex_);
  if (FrGroup* existing = group(new_group.name)) {
    const int pg_id = existing->pg_id;
    *existing = new_group;
    if (existing->pg_id < 0) existing->pg_id = pg_id;
  } else {
    groups_.push_back(new_group);
    if (groups_.back().pg_id < 0) groups_.back().pg_id = static_cast<int>(groups_.size() - 1);
  }
}

uint64_t FlightRecorder::record(FrEntry entry) {
  const std::lock_guard lock(mutex_);
  const uint64_t id = next_id_++;
  // A disabled recorder keeps nothing, pg_status included: a dump must not show progress it
  // could not follow to the end.
  if (capacity_ == 0) return id;
  entry.record_id = id;
  entry.state = FrState::kScheduled;
  entry.time_discovered_started_ns.reset();
  entry.time_discovered_completed_ns.reset();
  entry.duration_ms.reset();
  entry.retired = false;
  if (FrGroup* g = group(entry.pg_name); g != nullptr && !entry.is_p2p)
    g->last_enqueued_collective = entry.collective_seq_id;
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(entry));
  } else {
    ring_[next_slot_] = std::move(entry);
  }
  next_slot_ = (next_slot_ + 1) % capacity_;
  return id;
}

void FlightRecorder::started(uint64_t record_id, int64_t now_ns) {
  const std::lock_guard lock(mutex_);
  FrEntry* entry = find(record_id);
  if (entry == nullptr || entry->time_discovered_started_ns) return;  // the first discovery counts
  entry->time_discovered_started_ns = now_ns;
  if (entry->state == FrState::kScheduled) entry->state = FrState::kStarted;
  if (FrGroup* g = group(entry->pg_name); g != nullptr && !entry->is_p2p)
    g->last_started_collective = entry->collective_seq_id;
}

void FlightRecorder::completed(uint64_t record_id, int64_t now_ns) {
  const std::lock_guard lock(mutex_);
  FrEntry* entry = find(record_id);
  if (entry == nullptr || entry->time_discovered_completed_ns) return;
  entry->time_discovered_completed_ns = now_ns;
  entry->state = FrState::kCompleted;
  if (entry->time_discovered_started_ns) {
    entry->duration_ms = static_cast<double>(now_ns - *entry->time_discovered_started_ns) / 1e6;
  }
  if (FrGroup* g = group(entry->pg_name); g != nullptr && !entry->is_p2p)
    g->last_completed_collective = entry->collective_seq_id;
}

void FlightRecorder::retire(uint64_t record_id) {
  const std::lock_guard lock(mutex_);
  if (FrEntry* entry = find(record_id)) entry->retired = true;
}

FrDump FlightRecorder::dump() const {
  const std::lock_guard lock(mutex_);
  FrDump result;
  result.comm_lib_version = comm_lib_version_;
  result.rank = rank_;
  result.groups = groups_;
  result.entries.reserve(ring_.size());
  const auto split = ring_.begin() + static_cast<ptrdiff_t>(ring_.size() < capacity_ ? 0 : next_slot_);
  result.entries.insert(result.entries.end(), split, ring_.end());
  result.entries.insert(result.entries.end(), ring_.begin(), split);
  return result;
}

FrEntry* FlightRecorder::find(uint64_t record_id) {
  if (capacity_ == 0) return nullptr;
  const size_t slot = record_id % capacity_;
  if (slot >= ring_.size() || ring_[slot].record_id != record_id) return nullptr;
  return &ring_[slot];
}

FrGroup* FlightRecorder::group(const std::string& group_name) {
  const auto it = std::find_if(groups_.begin(), groups_.end(), [&](const FrGroup& g) { return g.name == group_name; });
  return it == groups_.end() ? nullptr : &*it;
}

}  // namespace tandem
