#include "models/memory_snapshot.h"

// Replaying a memory snapshot's trace on the caching allocator model (docs/memory.md): the memory
// from before the trace, the replay, and the check of the replay against the snapshot. Reading the
// snapshot is memory_snapshot.cc.

#include <algorithm>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/file_read.h"

namespace tandem::models {

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

namespace {

// What a trace did to memory it did not allocate: its allocations (and whether still live), and
// what it freed or released without having allocated it.
struct TraceWalk {
  struct Freed {
    uint64_t address, requested_size;
    BlockState state_at_start;
  };
  std::unordered_map<uint64_t, bool> traced;     // address -> free_requested since (allocated in the trace)
  std::unordered_set<uint64_t> earlier_pending;  // allocated before, free_requested in the trace
  std::vector<Freed> freed;
  std::unordered_set<uint64_t> traced_segments;       // segment_alloc'd in the trace, not freed since
  std::vector<std::pair<uint64_t, uint64_t>> mapped;  // [begin, end) of each segment_map, sorted
  bool expandable = false;

  // A block the snapshot holds that was allocated before the trace and is still active at its end.
  bool from_before(const SnapshotBlock& b) const {
    return b.state != BlockState::kInactive && !traced.contains(b.address) && !earlier_pending.contains(b.address);
  }
  // An expandable segment is listed as one entry per run of mapped pages; a run that the trace's
  // maps cover was mapped in the trace.
  bool mapped_in_trace(uint64_t begin, uint64_t end) const {
    for (const auto& [map_begin, map_end] : mapped) {
      if (map_begin > begin) return false;
      if (map_end > begin) begin = map_end;
      if (begin >= end) return true;
    }
    return false;
  }
};

// Walks the trace of `device`; segments reserved before it and released in it go to result.segments.
TraceWalk walk_trace(const std::vector<TraceEntry>& trace, size_t device, PreTraceMemory& result) {
  TraceWalk walk;
  for (const TraceEntry& e : trace) {
    switch (e.action) {
      case TraceAction::kAlloc:
        walk.traced[e.address] = false;
        break;
      case TraceAction::kFreeRequested:
        if (auto it = walk.traced.find(e.address); it != walk.traced.end()) {
          it->second = true;
        } else {
          walk.freed.push_back({e.address, e.size, BlockState::kActiveAllocated});
          walk.earlier_pending.insert(e.address);
        }
        break;
      case TraceAction::kFreeCompleted:
        if (walk.traced.erase(e.address) == 0 && walk.earlier_pending.erase(e.address) == 0) {
          walk.freed.push_back({e.address, e.size, BlockState::kActivePendingFree});
        }
        break;
      case TraceAction::kSegmentAlloc:
        walk.traced_segments.insert(e.address);
        break;
      case TraceAction::kSegmentFree:
        if (walk.traced_segments.erase(e.address) == 0) {
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
        walk.mapped.emplace_back(e.address, e.address + e.size);
        walk.expandable = true;
        break;
      case TraceAction::kSegmentUnmap:
        walk.expandable = true;
        break;
      default:
        break;
    }
  }
  std::sort(walk.mapped.begin(), walk.mapped.end());
  return walk;
}

// The segments at the trace's start (empty for now, sorted by address), and the blocks from before
// it still active at its end counted as live.
void start_segments(const MemorySnapshot& snapshot, size_t device, TraceWalk& walk, PreTraceMemory& result) {
  for (const SnapshotSegment& s : snapshot.segments) {
    if (static_cast<size_t>(s.device) != device) continue;
    walk.expandable = walk.expandable || s.expandable;
    const bool made_in_trace = s.expandable ? walk.mapped_in_trace(s.address, s.address + s.total_size)
                                            : walk.traced_segments.contains(s.address);
    if (made_in_trace) walk.traced_segments.insert(s.address);
    for (const SnapshotBlock& b : s.blocks) {
      if (!walk.from_before(b)) continue;
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
}

// A block from before the trace, in the start segment it lies in.
struct Placed {
  SnapshotBlock block;
  bool freed_in_trace;
};

// The blocks from before the trace, per start segment: those still active at its end, and those
// the trace freed (known by their requested size).
std::vector<std::vector<Placed>> place_blocks(const MemorySnapshot& snapshot, size_t device, const TraceWalk& walk,
                                              PreTraceMemory& result) {
  std::vector<std::vector<Placed>> placed(result.segments.size());
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
    if (static_cast<size_t>(s.device) != device || walk.traced_segments.contains(s.address)) continue;
    for (const SnapshotBlock& b : s.blocks) {
      if (walk.from_before(b)) place(b, false);
    }
  }
  for (const TraceWalk::Freed& f : walk.freed) {
    SnapshotBlock block;
    block.address = f.address;
    block.requested_size = f.requested_size;
    block.size = round_size(f.requested_size, snapshot.settings);
    block.state = f.state_at_start;
    result.freed_blocks += 1;
    place(block, true);
  }
  return placed;
}

// Each segment's blocks then: the placed ones by address, the gaps free. A block freed in the
// trace is known by its requested size only; the allocator hands out a whole free block when what
// would remain is not split off (a large-pool remainder of 1 MiB or less, or an oversize block's
// within max_non_split_rounding_size), so such a gap is that block's.
void lay_out_blocks(const AllocatorSettings& settings, std::vector<std::vector<Placed>>& placed,
                    PreTraceMemory& result) {
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
}

}  // namespace

PreTraceMemory pre_trace_memory(const MemorySnapshot& snapshot, size_t device) {
  PreTraceMemory result;
  TraceWalk walk = walk_trace(snapshot.device_traces.at(device), device, result);
  start_segments(snapshot, device, walk, result);
  std::vector<std::vector<Placed>> placed = place_blocks(snapshot, device, walk, result);
  if (walk.expandable && result.unrestorable.empty() && !result.empty()) {
    result.unrestorable = "the segments are expandable, whose state before the trace is not rebuilt";
  }
  lay_out_blocks(snapshot.settings, placed, result);
  if (!result.unrestorable.empty()) {
    result.freed_bytes = 0;  // sizes as requested and rounded, without their gaps
    for (const TraceWalk::Freed& f : walk.freed) result.freed_bytes += round_size(f.requested_size, snapshot.settings);
  }
  return result;
}

namespace {

// The recorded address of each live block -> the model's handle (nullopt for an allocation the
// model could not serve: its frees are then no-ops), and the blocks free_requested but not yet
// free_completed.
struct LiveBlocks {
  std::unordered_map<uint64_t, std::optional<BlockId>> live;
  std::unordered_set<BlockId> pending;
};

// The memory from before the trace, restored into the allocator.
void restore_start(const PreTraceMemory& start, CachingAllocator& allocator, LiveBlocks& blocks) {
  for (const SnapshotSegment& s : start.segments) {
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
      blocks.live[s.blocks[i].address] = ids[i];
      if (s.blocks[i].state == BlockState::kActivePendingFree) blocks.pending.insert(ids[i]);
    }
  }
}

// A free_requested or free_completed entry of the trace, on the block recorded at its address.
void replay_free(const TraceEntry& e, CachingAllocator& allocator, LiveBlocks& blocks, MemoryReplay& result) {
  auto it = blocks.live.find(e.address);
  if (it == blocks.live.end()) {
    if (e.action == TraceAction::kFreeRequested) ++result.unknown_frees;
    return;
  }
  if (it->second) {
    const BlockId block = *it->second;
    const bool requested = e.action == TraceAction::kFreeRequested;
    // free_completed without free_requested: PyTorch always records both; read it as both.
    if (requested || !blocks.pending.contains(block)) allocator.free_requested(block);
    if (requested) {
      blocks.pending.insert(block);
      return;
    }
    blocks.pending.erase(block);
    allocator.free_completed(block);
  }
  blocks.live.erase(it);
}

// The allocator's totals after entry `i`, and the peaks so far.
void record_totals(size_t i, const CachingAllocator& allocator, MemoryReplay& result) {
  const AllocatorStats& stats = allocator.stats();
  const int64_t reserved = stats.reserved_bytes[0].current;
  const int64_t allocated = stats.allocated_bytes[0].current;
  const bool first = result.allocated_bytes.empty();
  const bool allocated_peak = first || allocated > static_cast<int64_t>(result.allocated_bytes[result.peak_allocated_index]);
  const bool reserved_peak = first || reserved > static_cast<int64_t>(result.reserved_bytes[result.peak_reserved_index]);
  result.allocated_bytes.push_back(static_cast<uint64_t>(allocated));
  result.reserved_bytes.push_back(static_cast<uint64_t>(reserved));
  if (allocated_peak) result.peak_allocated_index = i;
  if (reserved_peak) {
    result.peak_reserved_index = i;
    result.allocated_at_peak_reserved_bytes = static_cast<uint64_t>(allocated);
    result.internal_at_peak_bytes = static_cast<uint64_t>(allocated) - allocator.allocated_requested_bytes();
    result.external_at_peak_bytes = static_cast<uint64_t>(reserved - allocated);
    result.fragmentation_at_peak =
        reserved == 0 ? 0.0 : 1.0 - static_cast<double>(allocated) / static_cast<double>(reserved);
  }
}

}  // namespace

MemoryReplay replay_memory(const std::vector<TraceEntry>& trace, const AllocatorSettings& settings,
                           uint64_t device_memory_bytes, const PreTraceMemory* start) {
  CachingAllocator allocator(settings, device_memory_bytes);
  MemoryReplay result;
  result.settings = settings;
  result.allocated_bytes.reserve(trace.size());
  result.reserved_bytes.reserve(trace.size());
  const std::vector<bool> empty_cache_at = empty_cache_points(trace);
  LiveBlocks blocks;
  if (start != nullptr && start->unrestorable.empty()) restore_start(*start, allocator, blocks);
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceEntry& e = trace[i];
    switch (e.action) {
      case TraceAction::kAlloc: {
        const std::optional<BlockId> block = allocator.malloc(e.size, e.stream);
        if (!block) result.ooms.push_back({i, e.size, e.stream});
        blocks.live[e.address] = block;
        break;
      }
      case TraceAction::kFreeRequested:
      case TraceAction::kFreeCompleted:
        replay_free(e, allocator, blocks, result);
        break;
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
    record_totals(i, allocator, result);
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
