// Reading PyTorch's memory snapshots (docs/memory.md); replaying their traces is memory_replay.cc.
#include "models/memory_snapshot.h"

#include <algorithm>
#include <array>
#include <bit>
#include <fstream>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/file_read.h"
#include "core/pickle.h"

namespace tandem::models {

namespace {

using pickle::Dict;
using pickle::List;
using pickle::Value;

// The keys each dict may hold: PyTorch 2.1 to 2.10 and main (allocator_settings from 2.3 on)
// (torch/csrc/cuda/Module.cpp, torch/csrc/cuda/memory_snapshot.cpp).
constexpr std::string_view kTopKeys[] = {"segments", "device_traces", "allocator_settings", "external_annotations",
                                         "host_segments", "host_traces"};
constexpr std::string_view kSegmentKeys[] = {"device",        "address",         "total_size", "allocated_size",
                                             "active_size",   "requested_size",  "stream",     "segment_type",
                                             "segment_pool_id", "is_expandable", "frames",     "blocks"};
constexpr std::string_view kBlockKeys[] = {"address", "size", "requested_size", "state", "frames", "forward_frames"};
constexpr std::string_view kTraceKeys[] = {"action", "addr",        "size",          "stream",           "time_us",
                                           "frames", "device_free", "compile_context", "user_metadata", "pool_id",
                                           "internal_metadata", "forward_frames"};
constexpr std::string_view kSettingsKeys[] = {"PYTORCH_CUDA_ALLOC_CONF",
                                              "max_split_size",
                                              "max_non_split_rounding_size",
                                              "garbage_collection_threshold",
                                              "expandable_segments",
                                              "pinned_num_register_threads",
                                              "release_lock_on_cudamalloc",
                                              "pinned_use_cuda_host_register",
                                              "roundup_power2_divisions",
                                              "graph_capture_record_stream_reuse",
                                              "max_round_threshold",
                                              "max_cached_size"};

// What tandem does not use and pickle::loads skips unbuilt wherever it is a dict key: the stack
// frames above all (most of a snapshot's bytes, and PyTorch writes 2^64 - 1 for an unknown line).
// None of these names a key that is read (requested_size, say, is read in blocks: not here).
const std::vector<std::string> kSkippedKeys = {
    "frames",     "forward_frames",       "time_us",       "compile_context", "user_metadata",   "internal_metadata",
    "pool_id",    "external_annotations", "host_segments", "host_traces",     "segment_pool_id", "allocated_size",
    "active_size"};

constexpr std::pair<std::string_view, TraceAction> kActions[] = {
    {"alloc", TraceAction::kAlloc},
    {"free_requested", TraceAction::kFreeRequested},
    {"free_completed", TraceAction::kFreeCompleted},
    {"segment_alloc", TraceAction::kSegmentAlloc},
    {"segment_free", TraceAction::kSegmentFree},
    {"segment_map", TraceAction::kSegmentMap},
    {"segment_unmap", TraceAction::kSegmentUnmap},
    {"oom", TraceAction::kOom},
    {"snapshot", TraceAction::kSnapshot},
    {"annotate", TraceAction::kAnnotate},
};

class SnapshotReader {
 public:
  explicit SnapshotReader(const std::string& source) : source_(source) {}

  MemorySnapshot read(const Value& root) {
    const Dict& top = dict(root, "(top level)");
    check_keys(top, "(top level)", "(top level)", kTopKeys);
    MemorySnapshot snapshot;
    const List& segments = list(field(root, "(top level)", "segments"), "segments");
    for (size_t i = 0; i < segments.size(); ++i) {
      snapshot.segments.push_back(segment(segments[i], fmt::format("segments[{}]", i)));
    }
    const List& devices = list(field(root, "(top level)", "device_traces"), "device_traces");
    size_t next_taken = 0;
    for (size_t d = 0; d < devices.size(); ++d) {
      const std::string path = fmt::format("device_traces[{}]", d);
      const List& entries = list(devices[d], path);
      std::vector<TraceEntry>& trace = snapshot.device_traces.emplace_back();
      trace.reserve(entries.size());
      for (size_t i = 0; i < entries.size(); ++i) {
        const std::string entry_path = fmt::format("{}[{}]", path, i);
        // An entry take_entry() read while loading stands there as its number, in order.
        if (entries[i].is_int() && entries[i].as_int() == static_cast<int64_t>(next_taken) &&
            next_taken < taken_.size()) {
          trace.push_back(taken_[next_taken++]);
        } else {
          trace.push_back(entry(entries[i], entry_path));
        }
      }
    }
    if (next_taken != taken_.size()) bad("device_traces", "a trace entry outside the traces");
    std::vector<TraceEntry>().swap(taken_);
    if (const Value* settings = root.find("allocator_settings")) {
      snapshot.has_settings = true;
      read_settings(*settings, snapshot);
    }
    for (const SnapshotSegment& s : snapshot.segments) {
      if (s.device < 0 || static_cast<size_t>(s.device) >= std::max<size_t>(snapshot.device_traces.size(), 1)) {
        bad("segments", fmt::format("a segment on device {}, but device_traces has {} devices", s.device,
                                    snapshot.device_traces.size()));
      }
    }
    for (const auto& [where_and_key, count] : unknown_keys_) {
      snapshot.warnings.push_back(fmt::format("{}: {}: unknown key '{}' ({} time{}): ignored", source_,
                                              where_and_key.first, where_and_key.second, count, count == 1 ? "" : "s"));
    }
    return snapshot;
  }

  // pickle::LoadOptions::list_item: a trace entry (a dict with an "action") is read as it is
  // loaded, and stands in its list as its number, so that a trace of millions of entries is never
  // held as Values. One that cannot be read stays, for read() to name its place in the error.
  void take_entry(Value& item) {
    if (!item.is_dict() || item.find("action") == nullptr) return;
    TraceEntry e;
    try {
      e = entry(item, "device_traces[?][?]");
    } catch (const Error&) {
      return;
    }
    item = Value(static_cast<int64_t>(taken_.size()));
    taken_.push_back(e);
  }

  pickle::LoadOptions load_options() {
    return {.skip_keys = kSkippedKeys, .list_item = [this](Value& item) { take_entry(item); }};
  }

 private:
  [[noreturn]] void bad(const std::string& path, std::string_view what) const {
    fail(ErrorCode::kFormat, "{}: {}: {}", source_, path, what);
  }

  template <typename Get>
  decltype(auto) typed(const std::string& path, Get get) const {
    try {
      return get();
    } catch (const Error& e) {
      bad(path, e.what());
    }
  }

  const Dict& dict(const Value& v, const std::string& path) const {
    return typed(path, [&]() -> const Dict& { return v.as_dict(); });
  }
  const List& list(const Value& v, const std::string& path) const {
    return typed(path, [&]() -> const List& { return v.as_list(); });
  }
  const Value& field(const Value& v, const std::string& path, std::string_view key) const {
    const Value* item = v.find(key);
    if (item == nullptr) bad(path, fmt::format("missing key '{}'", key));
    return *item;
  }
  int64_t integer(const Value& v, const std::string& path) const {
    return typed(path, [&] { return v.as_int(); });
  }
  // A size or an address, up to `limit`: far above any device's memory or address space, and low
  // enough that the replay's sums of sizes stay within 64 bits.
  uint64_t bytes(const Value& v, const std::string& path, uint64_t limit) const {
    const int64_t n = integer(v, path);
    if (n < 0) bad(path, fmt::format("a negative size or address {}", n));
    if (static_cast<uint64_t>(n) > limit) bad(path, fmt::format("{} is more than any device holds ({})", n, limit));
    return static_cast<uint64_t>(n);
  }
  uint64_t size(const Value& v, const std::string& path) const { return bytes(v, path, kMaxSnapshotSizeBytes); }
  uint64_t address(const Value& v, const std::string& path) const { return bytes(v, path, kMaxSnapshotAddress); }
  const std::string& text(const Value& v, const std::string& path) const {
    return typed(path, [&]() -> const std::string& { return v.as_string(); });
  }
  bool boolean(const Value& v, const std::string& path) const {
    return typed(path, [&] { return v.as_bool(); });
  }

  // Keys outside `known` are counted for one warning per place (`where`, e.g. "segments[*]") and
  // key: a newer PyTorch's field must not make the file unreadable.
  template <size_t N>
  void check_keys(const Dict& d, const std::string& path, std::string_view where, const std::string_view (&known)[N]) {
    for (const auto& [key, value] : d) {
      if (!key.is_string()) bad(path, fmt::format("a key of type {}, expected str", key.type_name()));
      if (std::find(std::begin(known), std::end(known), key.as_string()) == std::end(known)) {
        ++unknown_keys_[std::pair(std::string(where), key.as_string())];
      }
    }
  }

  std::map<std::pair<std::string, std::string>, size_t> unknown_keys_;  // (where, key) -> times
  std::vector<TraceEntry> taken_;                                       // by take_entry(), in the pickle's order

  SnapshotSegment segment(const Value& v, const std::string& path) {
    check_keys(dict(v, path), path, "segments[*]", kSegmentKeys);
    SnapshotSegment s;
    s.device = integer(field(v, path, "device"), path + ".device");
    s.address = address(field(v, path, "address"), path + ".address");
    s.total_size = size(field(v, path, "total_size"), path + ".total_size");
    s.stream = integer(field(v, path, "stream"), path + ".stream");
    const std::string& type = text(field(v, path, "segment_type"), path + ".segment_type");
    if (type != "small" && type != "large") {
      bad(path + ".segment_type", fmt::format("'{}', expected small or large", type));
    }
    s.pool = type == "small" ? Pool::kSmall : Pool::kLarge;
    if (const Value* e = v.find("is_expandable")) s.expandable = boolean(*e, path + ".is_expandable");
    const List& blocks = list(field(v, path, "blocks"), path + ".blocks");
    uint64_t sum = 0;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const std::string block_path = fmt::format("{}.blocks[{}]", path, i);
      check_keys(dict(blocks[i], block_path), block_path, "segments[*].blocks[*]", kBlockKeys);
      SnapshotBlock b;
      b.size = size(field(blocks[i], block_path, "size"), block_path + ".size");
      const std::string& state = text(field(blocks[i], block_path, "state"), block_path + ".state");
      if (state == "active_allocated") {
        b.state = BlockState::kActiveAllocated;
      } else if (state == "active_pending_free") {
        b.state = BlockState::kActivePendingFree;
      } else if (state == "inactive") {
        b.state = BlockState::kInactive;
      } else {
        bad(block_path + ".state", fmt::format("'{}', expected active_allocated, active_pending_free or inactive", state));
      }
      if (const Value* r = blocks[i].find("requested_size")) b.requested_size = size(*r, block_path + ".requested_size");
      b.address = s.address + sum;
      if (const Value* a = blocks[i].find("address")) b.address = address(*a, block_path + ".address");
      if (b.size > s.total_size - sum) bad(block_path + ".size", "the blocks add up to more than total_size");
      sum += b.size;
      s.blocks.push_back(b);
    }
    if (sum != s.total_size) {
      bad(path + ".blocks", fmt::format("the blocks add up to {} bytes, total_size is {}", sum, s.total_size));
    }
    return s;
  }

  TraceEntry entry(const Value& v, const std::string& path) {
    check_keys(dict(v, path), path, "device_traces[*][*]", kTraceKeys);
    TraceEntry e;
    const std::string& action = text(field(v, path, "action"), path + ".action");
    const auto* found = std::find_if(std::begin(kActions), std::end(kActions),
                                     [&](const auto& pair) { return pair.first == action; });
    if (found == std::end(kActions)) bad(path + ".action", fmt::format("unknown action '{}'", action));
    e.action = found->second;
    e.size = size(field(v, path, "size"), path + ".size");
    e.stream = integer(field(v, path, "stream"), path + ".stream");
    if (e.action == TraceAction::kOom) {
      // PyTorch records the device's free memory in place of an address (Module.cpp: device_free).
      const Value* free = v.find("device_free");
      if (free == nullptr) free = &field(v, path, "addr");
      e.device_free = size(*free, path + ".device_free");
    } else if (e.action != TraceAction::kAnnotate) {
      e.address = address(field(v, path, "addr"), path + ".addr");
    }
    return e;
  }

  void read_settings(const Value& v, MemorySnapshot& snapshot) {
    const std::string path = "allocator_settings";
    check_keys(dict(v, path), path, path, kSettingsKeys);
    AllocatorSettings& s = snapshot.settings;
    if (const Value* conf = v.find("PYTORCH_CUDA_ALLOC_CONF")) {
      if (!conf->is_none()) snapshot.alloc_conf = text(*conf, path + ".PYTORCH_CUDA_ALLOC_CONF");
    }
    // Module.cpp writes max_split_size as int64_t(size_t): "unlimited" (SIZE_MAX) reads as -1.
    if (const Value* split = v.find("max_split_size")) {
      const int64_t bytes_value = integer(*split, path + ".max_split_size");
      if (bytes_value == -1 || bytes_value == std::numeric_limits<int64_t>::max()) {
        s.max_split_size_bytes = kNoMaxSplitSize;
      } else if (bytes_value < static_cast<int64_t>(kLargeBuffer)) {
        bad(path + ".max_split_size", fmt::format("{} bytes, below PyTorch's minimum of 20 MiB", bytes_value));
      } else {
        s.max_split_size_bytes = static_cast<uint64_t>(bytes_value);
      }
    }
    if (const Value* rounding = v.find("max_non_split_rounding_size")) {
      s.max_non_split_rounding_bytes = size(*rounding, path + ".max_non_split_rounding_size");
    }
    if (const Value* gc = v.find("garbage_collection_threshold")) {
      const double threshold = typed(path + ".garbage_collection_threshold", [&] { return gc->as_number(); });
      if (!(threshold >= 0 && threshold < 1)) {
        bad(path + ".garbage_collection_threshold", fmt::format("{} is outside [0, 1)", threshold));
      }
      s.garbage_collection_threshold = threshold;
    }
    if (const Value* es = v.find("expandable_segments")) {
      s.expandable_segments = boolean(*es, path + ".expandable_segments");
    }
    if (const Value* divisions = v.find("roundup_power2_divisions")) {
      // {"1": d, "2": d, ..., "32768": d}: the interval starting at that many MiB.
      const std::string dpath = path + ".roundup_power2_divisions";
      for (const auto& [key, value] : dict(*divisions, dpath)) {
        const std::string key_text = key.is_string() ? key.as_string() : key.is_int() ? std::to_string(key.as_int()) : "";
        uint64_t mib = 0;
        const bool digits = !key_text.empty() && key_text.size() <= 6 &&
                            key_text.find_first_not_of("0123456789") == std::string::npos;
        if (digits) mib = std::stoull(key_text);
        if (!digits || !std::has_single_bit(mib) || std::bit_width(mib) > kRoundupPower2Intervals) {
          bad(dpath, fmt::format("key '{}' is not an interval (1, 2, 4, ... 32768 MiB)", key_text));
        }
        const int64_t d = integer(value, fmt::format("{}[{}]", dpath, key_text));
        if (d < 0 || (d != 0 && !std::has_single_bit(static_cast<uint64_t>(d)))) {
          bad(fmt::format("{}[{}]", dpath, key_text), fmt::format("{} is not a power of 2 (or 0)", d));
        }
        s.roundup_power2_divisions[static_cast<size_t>(std::bit_width(mib) - 1)] = static_cast<uint64_t>(d);
      }
    }
  }

  const std::string& source_;
};

}  // namespace

std::string_view name(TraceAction action) {
  for (const auto& [text, value] : kActions) {
    if (value == action) return text;
  }
  return "?";
}

MemorySnapshot parse_memory_snapshot(std::string_view bytes, const std::string& source) {
  if (bytes.empty()) fail(ErrorCode::kFormat, "{}: empty memory snapshot", source);
  SnapshotReader reader(source);
  Value root;
  try {
    root = pickle::loads(bytes, reader.load_options());
  } catch (const Error& e) {
    fail(ErrorCode::kFormat, "{}: not a memory snapshot pickle: {}", source, e.what());
  }
  return reader.read(root);
}

MemorySnapshot read_memory_snapshot(const std::filesystem::path& path) {
  // The first bytes first: what is not a pickle of a dict is refused before the rest is read.
  // Python's pickle.dump starts with PROTO (0x80) and the protocol; protocols 0 and 1 with a
  // MARK or an EMPTY_DICT.
  std::string head;
  std::error_code error;
  if (std::filesystem::is_regular_file(path, error)) {  // no FIFO or device is opened here
    std::ifstream in(path, std::ios::binary);
    char first[2] = {0, 0};
    if (in) in.read(first, 2);
    head.assign(first, static_cast<size_t>(in.gcount()));
  }
  if (!head.empty()) {
    const auto code = static_cast<uint8_t>(head[0]);
    const bool pickle_start =
        (code == 0x80 && (head.size() < 2 || static_cast<uint8_t>(head[1]) <= 5)) || code == '(' || code == '}';
    if (!pickle_start) {
      fail(ErrorCode::kFormat, "{}: not a memory snapshot pickle: it starts with byte 0x{:02x}{}", path.string(), code,
           code == 0x80 ? fmt::format(" 0x{:02x} (no pickle protocol above 5)", static_cast<uint8_t>(head[1])) : "");
    }
  }
  const std::string bytes = read_file_bounded(path, kMaxMemorySnapshotFileBytes, "memory snapshot");
  return parse_memory_snapshot(bytes, path.string());
}

}  // namespace tandem::models
