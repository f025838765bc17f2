// Reading PyTorch's memory snapshots and replaying their traces (docs/memory.md).
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

// ---- replay ----------------------------------------------------------------------------------

namespace {

bool is_release(TraceAction a) { return a == TraceAction::kSegmentFree || a == TraceAction::kSegmentUnmap; }

// Where the cache was emptied: the first entry of each run of segment_free / segment_unmap. The
// trace cannot tell torch.cuda.empty_cache() from a malloc's own release (the OOM path frees
// every cached whole segment and unmaps free pages, as empty_cache does; garbage collection and
// release_available_cached_blocks free fewer). Both are replayed as empty_cache(), which is exact
// for the first two and frees more than the others did.
std::vector<bool> empty_cache_points(const std::vector<TraceEntry>& trace) {
  std::vector<bool> points(trace.size(), false);
  for (size_t i = 0; i < trace.size(); ++i) {
    points[i] = is_release(trace[i].action) && (i == 0 || !is_release(trace[i - 1].action));
  }
  return points;
}

}  // namespace

PreTraceMemory pre_trace_memory(const MemorySnapshot& snapshot, size_t device) {
  PreTraceMemory result;
  const std::vector<TraceEntry>& trace = snapshot.device_traces.at(device);
  // Walk the trace: what it allocated (and whether still live), and what it freed or released
  // without having allocated it.
  std::unordered_map<uint64_t, bool> traced;     // address -> free_requested since (allocated in the trace)
  std::unordered_set<uint64_t> earlier_pending;  // allocated before, free_requested in the trace
  struct Freed {
    uint64_t address, requested_size;
    BlockState state_at_start;
  };
  std::vector<Freed> freed;
  std::unordered_set<uint64_t> traced_segments;       // segment_alloc'd in the trace, not freed since
  std::vector<std::pair<uint64_t, uint64_t>> mapped;  // [begin, end) of each segment_map in the trace
  bool expandable = false;
  for (const TraceEntry& e : trace) {
    switch (e.action) {
      case TraceAction::kAlloc:
        traced[e.address] = false;
        break;
      case TraceAction::kFreeRequested:
        if (auto it = traced.find(e.address); it != traced.end()) {
          it->second = true;
        } else {
          freed.push_back({e.address, e.size, BlockState::kActiveAllocated});
          earlier_pending.insert(e.address);
        }
        break;
      case TraceAction::kFreeCompleted:
        if (traced.erase(e.address) == 0 && earlier_pending.erase(e.address) == 0) {
          freed.push_back({e.address, e.size, BlockState::kActivePendingFree});
        }
        break;
      case TraceAction::kSegmentAlloc:
        traced_segments.insert(e.address);
        break;
      case TraceAction::kSegmentFree:
        if (traced_segments.erase(e.address) == 0) {
          // Reserved before the trace and released in it: 2 MiB segments are the small pool's.
          SnapshotSegment released;
          released.device = static_cast<int64_t>(device);
          released.address = e.address;
          released.total_size = e.size;
          released.stream = e.stream;
          released.pool = e.size == kSmallBuffer ? Pool::kSmall : Pool::kLarge;
          result.segments.push_back(released);
        }
        break;
      case TraceAction::kSegmentMap:
        mapped.emplace_back(e.address, e.address + e.size);
        expandable = true;
        break;
      case TraceAction::kSegmentUnmap:
        expandable = true;
        break;
      default:
        break;
    }
  }
  // An expandable segment is listed as one entry per run of mapped pages; a run that the trace's
  // maps cover was mapped in the trace.
  std::sort(mapped.begin(), mapped.end());
  const auto mapped_in_trace = [&](uint64_t begin, uint64_t end) {
    for (const auto& [map_begin, map_end] : mapped) {
      if (map_begin > begin) return false;
      if (map_end > begin) begin = map_end;
      if (begin >= end) return true;
    }
    return false;
  };
  // The segments at the trace's start, empty for now; and the blocks from before it still active
  // at its end.
  struct Placed {
    SnapshotBlock block;
    bool freed_in_trace;
  };
  std::vector<std::vector<Placed>> placed;
  for (const SnapshotSegment& s : snapshot.segments) {
    if (static_cast<size_t>(s.device) != device) continue;
    expandable = expandable || s.expandable;
    const bool made_in_trace =
        s.expandable ? mapped_in_trace(s.address, s.address + s.total_size) : traced_segments.contains(s.address);
    if (made_in_trace) traced_segments.insert(s.address);
    for (const SnapshotBlock& b : s.blocks) {
      if (b.state == BlockState::kInactive || traced.contains(b.address) || earlier_pending.contains(b.address))
        continue;
      if (made_in_trace) {
        result.unrestorable = fmt::format(
            "the block at {:#x} is active at the end, no alloc in the trace made it, but its segment was made in the "
            "trace",
            b.address);
      }
      result.live_blocks += 1;
      result.live_bytes += b.size;
    }
    if (made_in_trace) continue;
    SnapshotSegment start = s;
    start.blocks.clear();
    result.segments.push_back(std::move(start));
  }
  std::sort(result.segments.begin(), result.segments.end(),
            [](const SnapshotSegment& a, const SnapshotSegment& b) { return a.address < b.address; });
  for (const SnapshotSegment& s : result.segments) result.reserved_bytes += s.total_size;
  placed.resize(result.segments.size());
  const auto segment_of = [&](uint64_t address) -> std::optional<size_t> {
    auto it = std::upper_bound(result.segments.begin(), result.segments.end(), address,
                               [](uint64_t a, const SnapshotSegment& s) { return a < s.address; });
    if (it == result.segments.begin()) return std::nullopt;
    --it;
    if (address >= it->address + it->total_size) return std::nullopt;
    return static_cast<size_t>(it - result.segments.begin());
  };
  const auto place = [&](const SnapshotBlock& block, bool freed_in_trace) {
    const std::optional<size_t> segment = segment_of(block.address);
    if (!segment) {
      if (result.unrestorable.empty()) {
        result.unrestorable =
            fmt::format("the block at {:#x}, allocated before the trace, lies in no segment", block.address);
      }
      return;
    }
    placed[*segment].push_back({block, freed_in_trace});
  };
  for (const SnapshotSegment& s : snapshot.segments) {
    if (static_cast<size_t>(s.device) != device || traced_segments.contains(s.address)) continue;
    for (const SnapshotBlock& b : s.blocks) {
      if (b.state == BlockState::kInactive || traced.contains(b.address) || earlier_pending.contains(b.address))
        continue;
      place(b, false);
    }
  }
  for (const Freed& f : freed) {
    SnapshotBlock block;
    block.address = f.address;
    block.requested_size = f.requested_size;
    block.size = round_size(f.requested_size, snapshot.settings);
    block.state = f.state_at_start;
    result.freed_blocks += 1;
    place(block, true);
  }
  if (expandable && result.unrestorable.empty() && !result.empty()) {
    result.unrestorable = "the segments are expandable, whose state before the trace is not rebuilt";
  }
  // Each segment's blocks then: the placed ones by address, the gaps free. A block freed in the
  // trace is known by its requested size only; the allocator hands out a whole free block when
  // what would remain is not split off (a large-pool remainder of 1 MiB or less, or an oversize
  // block's within max_non_split_rounding_size), so such a gap is that block's.
  const AllocatorSettings& settings = snapshot.settings;
  for (size_t i = 0; i < result.segments.size(); ++i) {
    SnapshotSegment& segment = result.segments[i];
    std::vector<Placed>& blocks = placed[i];
    std::sort(blocks.begin(), blocks.end(),
              [](const Placed& a, const Placed& b) { return a.block.address < b.block.address; });
    uint64_t at = segment.address;
    const uint64_t end = segment.address + segment.total_size;
    for (size_t j = 0; j < blocks.size(); ++j) {
      SnapshotBlock block = blocks[j].block;
      const uint64_t next = j + 1 < blocks.size() ? blocks[j + 1].block.address : end;
      if (block.address < at || block.address + block.size > next) {
        if (result.unrestorable.empty()) {
          result.unrestorable = fmt::format("the blocks allocated before the trace overlap at {:#x}", block.address);
        }
        break;
      }
      if (blocks[j].freed_in_trace && segment.pool == Pool::kLarge) {
        const uint64_t gap = next - (block.address + block.size);
        const bool unsplit = block.size >= settings.max_split_size_bytes ? gap < settings.max_non_split_rounding_bytes
                                                                         : gap <= kSmallSize;
        if (gap > 0 && unsplit) block.size += gap;
      }
      if (blocks[j].freed_in_trace) result.freed_bytes += block.size;
      if (block.address > at) segment.blocks.push_back({at, block.address - at, 0, BlockState::kInactive});
      segment.blocks.push_back(block);
      at = block.address + block.size;
    }
    if (at < end) segment.blocks.push_back({at, end - at, 0, BlockState::kInactive});
  }
  if (!result.unrestorable.empty()) {
    result.freed_bytes = 0;  // sizes as requested and rounded, without their gaps
    for (const Freed& f : freed) result.freed_bytes += round_size(f.requested_size, settings);
  }
  return result;
}

MemoryReplay replay_memory(const std::vector<TraceEntry>& trace, const AllocatorSettings& settings,
                           uint64_t device_memory_bytes, const PreTraceMemory* start) {
  CachingAllocator allocator(settings, device_memory_bytes);
  MemoryReplay result;
  result.settings = settings;
  result.allocated_bytes.reserve(trace.size());
  result.reserved_bytes.reserve(trace.size());
  const std::vector<bool> empty_cache_at = empty_cache_points(trace);
  // The recorded address of each live block -> the model's handle; nullopt for an allocation the
  // model could not serve (its frees are then no-ops).
  std::unordered_map<uint64_t, std::optional<BlockId>> live;
  std::unordered_set<BlockId> pending;  // free_requested, not yet free_completed
  if (start != nullptr && start->unrestorable.empty()) {
    for (const SnapshotSegment& s : start->segments) {
      SegmentView view{.stream = s.stream,
                       .pool = s.pool,
                       .expandable = false,
                       .address = s.address,
                       .total_size = s.total_size,
                       .blocks = {}};
      for (const SnapshotBlock& b : s.blocks) view.blocks.push_back({b.address, b.size, b.requested_size, b.state});
      const std::vector<BlockId> ids = allocator.restore_segment(view);
      for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] == -1) continue;
        live[s.blocks[i].address] = ids[i];
        if (s.blocks[i].state == BlockState::kActivePendingFree) pending.insert(ids[i]);
      }
    }
  }
  int64_t max_reserved = -1;
  int64_t max_allocated = -1;
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceEntry& e = trace[i];
    switch (e.action) {
      case TraceAction::kAlloc: {
        const std::optional<BlockId> block = allocator.malloc(e.size, e.stream);
        if (!block) result.ooms.push_back({i, e.size, e.stream});
        live[e.address] = block;
        break;
      }
      case TraceAction::kFreeRequested:
      case TraceAction::kFreeCompleted: {
        auto it = live.find(e.address);
        if (it == live.end()) {
          if (e.action == TraceAction::kFreeRequested) ++result.unknown_frees;
          break;
        }
        if (it->second) {
          const BlockId block = *it->second;
          const bool requested = e.action == TraceAction::kFreeRequested;
          // free_completed without free_requested: PyTorch always records both; read it as both.
          if (requested || !pending.contains(block)) allocator.free_requested(block);
          if (requested) {
            pending.insert(block);
            break;
          }
          pending.erase(block);
          allocator.free_completed(block);
        }
        live.erase(it);
        break;
      }
      case TraceAction::kOom: {
        const std::optional<BlockId> block = allocator.malloc(e.size, e.stream);
        if (!block) {
          result.ooms.push_back({i, e.size, e.stream});
        } else {
          allocator.free_requested(*block);
          allocator.free_completed(*block);
        }
        break;
      }
      case TraceAction::kSegmentFree:
      case TraceAction::kSegmentUnmap:
        if (empty_cache_at[i]) {
          allocator.empty_cache();
          ++result.empty_cache_calls;
        }
        break;
      case TraceAction::kSegmentAlloc:
      case TraceAction::kSegmentMap:
      case TraceAction::kSnapshot:
      case TraceAction::kAnnotate:
        break;
    }
    const AllocatorStats& stats = allocator.stats();
    const int64_t reserved = stats.reserved_bytes[0].current;
    const int64_t allocated = stats.allocated_bytes[0].current;
    result.allocated_bytes.push_back(static_cast<uint64_t>(allocated));
    result.reserved_bytes.push_back(static_cast<uint64_t>(reserved));
    if (allocated > max_allocated) {
      max_allocated = allocated;
      result.peak_allocated_index = i;
    }
    if (reserved > max_reserved) {
      max_reserved = reserved;
      result.peak_reserved_index = i;
      result.allocated_at_peak_reserved_bytes = static_cast<uint64_t>(allocated);
      result.internal_at_peak_bytes = static_cast<uint64_t>(allocated) - allocator.allocated_requested_bytes();
      result.external_at_peak_bytes = static_cast<uint64_t>(reserved - allocated);
      result.fragmentation_at_peak =
          reserved == 0 ? 0.0 : 1.0 - static_cast<double>(allocated) / static_cast<double>(reserved);
    }
  }
  result.stats = allocator.stats();
  result.peak_allocated_bytes = static_cast<uint64_t>(result.stats.allocated_bytes[0].peak);
  result.peak_reserved_bytes = static_cast<uint64_t>(result.stats.reserved_bytes[0].peak);
  result.peak_requested_bytes = static_cast<uint64_t>(result.stats.requested_bytes[0].peak);
  result.segments = allocator.segments();
  return result;
}

uint64_t device_memory_from_oom(const std::vector<TraceEntry>& trace, const AllocatorSettings& settings,
                                const PreTraceMemory* start) {
  const auto oom = std::find_if(trace.begin(), trace.end(), [](const TraceEntry& e) { return e.action == TraceAction::kOom; });
  if (oom == trace.end()) return 0;
  const std::vector<TraceEntry> before(trace.begin(), oom);
  const MemoryReplay replay = replay_memory(before, settings, 0, start);
  const uint64_t reserved = replay.reserved_bytes.empty() ? 0 : replay.reserved_bytes.back();
  return reserved + oom->device_free;
}

namespace {

// A segment as the check compares it: where it is (stream, pool, expandable), its size, and its
// blocks' sizes, states and (allocated blocks only: PyTorch leaves a freed block's stale) requested
// sizes; no addresses.
using BlockSignature = std::tuple<uint64_t, BlockState, uint64_t>;
struct SegmentSignature {
  int64_t stream;
  Pool pool;
  bool expandable;
  uint64_t total_size;
  std::vector<BlockSignature> blocks;
  auto operator<=>(const SegmentSignature&) const = default;
};

template <typename Blocks>
std::vector<BlockSignature> block_signatures(const Blocks& blocks) {
  std::vector<BlockSignature> result;
  for (const auto& b : blocks) {
    result.emplace_back(b.size, b.state, b.state == BlockState::kActiveAllocated ? b.requested_size : 0);
  }
  return result;
}

std::string describe_segment(const SegmentSignature& s) {
  std::string blocks;
  for (const auto& [size, state, requested] : s.blocks) {
    blocks += fmt::format("{}{} {}", blocks.empty() ? "" : ", ", byte_size_text(size), name(state));
  }
  return fmt::format("stream {} {} pool{}: {} segment [{}]", s.stream, name(s.pool),
                     s.expandable ? " (expandable)" : "", byte_size_text(s.total_size), blocks);
}

}  // namespace

ConsistencyCheck check_consistency(const MemorySnapshot& snapshot, size_t device, const PreTraceMemory& start,
                                   const MemoryReplay& own) {
  ConsistencyCheck check;
  std::vector<SegmentSignature> recorded, modelled;
  for (const SnapshotSegment& s : snapshot.segments) {
    if (static_cast<size_t>(s.device) != device) continue;
    recorded.push_back({s.stream, s.pool, s.expandable, s.total_size, block_signatures(s.blocks)});
    check.blocks += s.blocks.size();
  }
  check.segments = recorded.size();
  for (const SegmentView& s : own.segments) {
    modelled.push_back({s.stream, s.pool, s.expandable, s.total_size, block_signatures(s.blocks)});
  }
  if (!start.unrestorable.empty()) {
    check.detail = fmt::format(
        "not checked: {} segment(s) / {} were reserved and {} block(s) / {} allocated before recording started, and "
        "{}",
        start.segments.size(), byte_size_text(start.reserved_bytes), start.blocks(),
        byte_size_text(start.allocated_bytes()), start.unrestorable);
    return check;
  }
  if (own.unknown_frees > 0) {  // the start accounts for every block it frees; kept as a guard
    check.detail = fmt::format("not checked: the trace frees {} block(s) the replay does not hold", own.unknown_frees);
    return check;
  }
  check.checked = true;
  std::sort(recorded.begin(), recorded.end());
  std::sort(modelled.begin(), modelled.end());
  const std::vector<TraceEntry>& trace = snapshot.device_traces[device];
  const auto count = [&](TraceAction a, TraceAction b) {
    return std::count_if(trace.begin(), trace.end(), [&](const TraceEntry& e) { return e.action == a || e.action == b; });
  };
  const int64_t recorded_allocs = count(TraceAction::kSegmentAlloc, TraceAction::kSegmentMap);
  const int64_t recorded_frees = count(TraceAction::kSegmentFree, TraceAction::kSegmentUnmap);
  if (recorded != modelled) {
    const auto [r, m] = std::mismatch(recorded.begin(), recorded.end(), modelled.begin(), modelled.end());
    check.detail = fmt::format(
        "MISMATCH: the snapshot has {} segment(s), the replay {}; first difference: snapshot {}, replay {}",
        recorded.size(), modelled.size(), r == recorded.end() ? "(none)" : describe_segment(*r),
        m == modelled.end() ? "(none)" : describe_segment(*m));
  } else if (recorded_allocs != own.stats.num_device_alloc || recorded_frees != own.stats.num_device_free) {
    check.detail = fmt::format(
        "MISMATCH: the segments agree, but the trace records {} segment allocations / maps and {} frees / unmaps, "
        "the replay made {} and {}",
        recorded_allocs, recorded_frees, own.stats.num_device_alloc, own.stats.num_device_free);
  } else {
    check.matches = true;
    check.detail = fmt::format(
        "OK: the replay under the snapshot's own settings gives its {} segment(s) and {} block(s) exactly (sizes, "
        "states, requested sizes per stream and pool), and its {} segment allocations / maps and {} frees / unmaps",
        check.segments, check.blocks, recorded_allocs, recorded_frees);
  }
  if (!start.empty()) {
    check.detail += fmt::format(
        "; before recording: {} segment(s) / {} reserved and {} block(s) / {} allocated ({} still active at the end, "
        "{} freed in the trace), taken from the segments and the trace's frees, not checked against the trace",
        start.segments.size(), byte_size_text(start.reserved_bytes), start.blocks(),
        byte_size_text(start.allocated_bytes()), start.live_blocks, start.freed_blocks);
  }
  return check;
}

}  // namespace tandem::models
