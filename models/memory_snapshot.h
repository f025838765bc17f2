// PyTorch's CUDA memory snapshot (torch.cuda.memory._dump_snapshot: a pickled dict of `segments`,
// `device_traces` and `allocator_settings`, from torch/csrc/cuda/Module.cpp's
// THCPModule_memorySnapshot), read strictly, and its trace replayed through the caching-allocator
// model under the snapshot's own settings or any others. docs/memory.md has the fields and rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "models/caching_allocator.h"

namespace tandem::models {

// The largest snapshot file read: a trace entry with its stack frames is a few hundred bytes to a
// few KiB of pickle, and PyTorch's default ring (max_entries) holds 1,000 entries; 1 GiB is
// hundreds of thousands of entries with frames, millions without. The pickle reader itself stops
// at 2 GiB and at a 256x expansion.
inline constexpr uint64_t kMaxMemorySnapshotFileBytes = uint64_t{1} << 30;  // 1 GiB
// A size in a snapshot (a segment, a block, a trace entry's request) above 1 PiB, or an address
// above 2^57 (x86-64's and ARM's largest virtual address space is 2^57), is refused as
// malformed: no device holds that much, and the replay's int64 sums of up to millions of sizes
// stay far from overflow under these bounds.
inline constexpr uint64_t kMaxSnapshotSizeBytes = uint64_t{1} << 50;
inline constexpr uint64_t kMaxSnapshotAddress = uint64_t{1} << 57;

// A trace entry's action (TraceEntry::Action in CUDACachingAllocator.h).
enum class TraceAction : uint8_t {
  kAlloc,          // size: the request; addr: the block
  kFreeRequested,  // the program freed the block
  kFreeCompleted,  // its uses on other streams are over: it is free
  kSegmentAlloc,   // cudaMalloc; size: the segment
  kSegmentFree,    // cudaFree
  kSegmentMap,     // expandable segments: pages mapped
  kSegmentUnmap,   // pages unmapped
  kOom,            // an allocation failed; size: the rounded request; device_free: the device's free bytes
  kSnapshot,       // a snapshot was taken; size: the active bytes
  kAnnotate,       // a user annotation (newer PyTorch)
};
std::string_view name(TraceAction action);  // "alloc", "free_requested", ...

struct TraceEntry {
  TraceAction action = TraceAction::kAlloc;
  uint64_t address = 0;      // addr (0 for oom)
  uint64_t size = 0;
  int64_t stream = 0;
  uint64_t device_free = 0;  // oom only
};

struct SnapshotBlock {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t requested_size = 0;
  BlockState state = BlockState::kInactive;
};

struct SnapshotSegment {
  int64_t device = 0;
  uint64_t address = 0;
  uint64_t total_size = 0;
  int64_t stream = 0;
  Pool pool = Pool::kLarge;
  bool expandable = false;
  std::vector<SnapshotBlock> blocks;
};

struct MemorySnapshot {
  std::vector<SnapshotSegment> segments;
  std::vector<std::vector<TraceEntry>> device_traces;  // index: device
  bool has_settings = false;                           // allocator_settings was present (PyTorch 2.3 and later)
  AllocatorSettings settings;        // from allocator_settings; the defaults when absent
  std::string alloc_conf;            // PYTORCH_CUDA_ALLOC_CONF as the program set it ("" when unset)
  std::vector<std::string> warnings;  // keys this reader does not know, one line per key and place
};

// Parses a snapshot pickle. Every error is Error(kFormat) naming `source` and the field:
//   "snap.pickle: device_traces[0][12].action: unknown action 'mallc'"
//   "snap.pickle: segments[3].total_size: integer 18446744073709551615 does not fit in 64 bits"
// A key the reader does not know (it knows those of PyTorch 2.1 to 2.10 and main, listed in
// docs/memory.md) is a warning in `warnings`, so that a field a newer PyTorch adds is noticed
// without refusing the file. What tandem does not use (stack frames, times, annotations) is
// skipped unbuilt (pickle::LoadOptions), whatever its values.
MemorySnapshot parse_memory_snapshot(std::string_view bytes, const std::string& source);

// Reads and parses `path` (a regular file of at most kMaxMemorySnapshotFileBytes; Error(kIo)
// otherwise, core/file_read.h). A file that does not start as a pickle is refused (Error(kFormat))
// before the rest of it is read.
MemorySnapshot read_memory_snapshot(const std::filesystem::path& path);

// The memory a device's trace found already allocated: recording started after the program had
// allocated (the usual case), or PyTorch's ring of trace entries (max_entries) wrapped. Rebuilt
// from the snapshot at the trace's start:
//   - blocks active at the end that no alloc in the trace accounts for: allocated before it;
//   - frees in the trace of blocks it never allocated: those blocks were allocated before it (the
//     trace records their requested size; the block is that size rounded as the allocator rounds,
//     taking the rest of its gap where the allocator would not have split it off);
//   - segments at the end that no segment_alloc made, and those the trace frees without having
//     made them: they were reserved before it. Their other bytes were free (inactive) then.
struct PreTraceMemory {
  std::vector<SnapshotSegment> segments;  // at the trace's start, with their blocks then, by address
  size_t live_blocks = 0;                 // allocated before the trace, still active at its end
  uint64_t live_bytes = 0;
  size_t freed_blocks = 0;      // allocated before the trace, freed in it
  uint64_t freed_bytes = 0;     // their sizes as rebuilt
  uint64_t reserved_bytes = 0;  // the segments' total
  std::string unrestorable;     // why the start cannot be rebuilt ("" when it can)

  size_t blocks() const { return live_blocks + freed_blocks; }
  uint64_t allocated_bytes() const { return live_bytes + freed_bytes; }  // at the trace's start
  bool empty() const { return segments.empty() && blocks() == 0; }
};
PreTraceMemory pre_trace_memory(const MemorySnapshot& snapshot, size_t device);

// What replaying one device's trace under one setting gave.
struct MemoryOom {
  size_t trace_index = 0;  // the entry that failed
  uint64_t bytes = 0;      // the request
  int64_t stream = 0;
};

struct MemoryReplay {
  AllocatorSettings settings;
  AllocatorStats stats;  // at the end of the trace
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  uint64_t peak_requested_bytes = 0;
  size_t peak_allocated_index = 0;  // the first trace entry after which the peak held
  size_t peak_reserved_index = 0;
  // At the peak of reserved: allocated, and _memory_viz's split of the rest (segsum): internal =
  // allocated blocks' size - their requested size (rounding), external = reserved - allocated
  // (free and pending-free blocks inside segments). fragmentation = 1 - allocated / reserved.
  uint64_t allocated_at_peak_reserved_bytes = 0;
  uint64_t internal_at_peak_bytes = 0;
  uint64_t external_at_peak_bytes = 0;
  double fragmentation_at_peak = 0;
  std::vector<MemoryOom> ooms;  // allocations the model could not serve
  size_t unknown_frees = 0;     // frees of blocks allocated before the trace began
  size_t empty_cache_calls = 0;  // runs of segment_free / segment_unmap, replayed as empty_cache()
  // Per trace entry, after it: allocated and reserved bytes.
  std::vector<uint64_t> allocated_bytes;
  std::vector<uint64_t> reserved_bytes;
  std::vector<SegmentView> segments;  // at the end
};

// Replays `trace` through a CachingAllocator(settings, device_memory_bytes) (0: unbounded),
// starting from `start`'s segments and blocks when given (restorable, not empty), else empty:
// alloc -> malloc, free_requested / free_completed -> the frees, oom -> the same request tried
// again (kept and freed at once if it fits now), and each run of segment_free / segment_unmap ->
// empty_cache() (the trace cannot tell empty_cache() from a malloc's release on its OOM path,
// which frees the same). segment_alloc / segment_map are the recorded allocator's own decisions,
// which the model makes for itself.
MemoryReplay replay_memory(const std::vector<TraceEntry>& trace, const AllocatorSettings& settings,
                           uint64_t device_memory_bytes, const PreTraceMemory* start = nullptr);

// The device memory a snapshot's first oom entry implies: the replay's reserved bytes at that
// entry plus the device's free bytes it recorded. 0 when the trace has no oom.
uint64_t device_memory_from_oom(const std::vector<TraceEntry>& trace, const AllocatorSettings& settings,
                                const PreTraceMemory* start = nullptr);

// Whether replaying the snapshot's trace under its own settings (from `start`, the memory allocated
// before it) gives its `segments`: per stream and pool, the same segments (sizes), blocks (sizes,
// states, requested sizes of allocated blocks) in the same order, addresses aside; and as many
// device allocations and frees as it recorded. Memory from before the trace is taken from the
// segments, so the check says what it could not check against the trace.
struct ConsistencyCheck {
  bool checked = false;  // false: the trace cannot tell (why in `detail`)
  bool matches = false;
  std::string detail;    // one line
  size_t segments = 0;   // the snapshot's, on this device
  size_t blocks = 0;
};
ConsistencyCheck check_consistency(const MemorySnapshot& snapshot, size_t device, const PreTraceMemory& start,
                                   const MemoryReplay& own);

}  // namespace tandem::models
