// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, the
// DeviceCachingAllocator), detailed enough that replaying a program's allocations through it gives
// the segments, blocks and statistics PyTorch reports (torch.cuda.memory_stats, the memory
// snapshot). No GPU: addresses are synthetic, and "device memory" is a number.
//
// What is modelled, rule by rule, with the PyTorch function each comes from: docs/memory.md.
// In short: 512 B rounding and roundup_power2_divisions (round_size); a small pool (requests up
// to 1 MiB, 2 MiB segments) and a large pool (20 MiB segments below 10 MiB, else rounded up to
// 2 MiB) (get_pool, get_allocation_size); per-stream pools; one best-fit candidate per lookup
// with the oversize rules of max_split_size_mb / max_non_split_rounding_mb (get_free_block);
// splitting (should_split) and merging of free neighbours inside a segment (free_block,
// try_merge_blocks); the out-of-memory path (release_available_cached_blocks,
// release_cached_blocks, the retry, then an OOM); garbage_collection_threshold with a memory
// fraction (garbage_collect_cached_blocks); expandable segments (find_expandable_block,
// map_block, unmap_block). Not modelled: CUDA graphs and MemPools (private pools), recordStream
// (a free waits for its free_completed instead), IPC, host (pinned) memory.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::models {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;

// The allocator's constants (top of c10/cuda/CUDACachingAllocator.cpp).
inline constexpr uint64_t kMinBlockSize = 512;         // every size rounds up to a multiple of this
inline constexpr uint64_t kSmallSize = 1 * kMiB;       // largest request of the small pool
inline constexpr uint64_t kSmallBuffer = 2 * kMiB;     // a small-pool segment (and expandable page)
inline constexpr uint64_t kLargeBuffer = 20 * kMiB;    // a large-pool segment for requests < kMinLargeAlloc
inline constexpr uint64_t kMinLargeAlloc = 10 * kMiB;  // from here on a segment is the request, rounded
inline constexpr uint64_t kRoundLarge = 2 * kMiB;      // ... up to a multiple of this
// roundup_power2_divisions has one value per power-of-two interval from 1 MiB to 64 GiB
// (c10/core/AllocatorConfig.cpp: kRoundUpPowerOfTwoIntervals, kRoundUpPowerOfTwoStart/End).
inline constexpr int kRoundupPower2Intervals = 16;
inline constexpr int kRoundupPower2StartLog2 = 20;  // 1 MiB
inline constexpr uint64_t kNoMaxSplitSize = std::numeric_limits<uint64_t>::max();  // PyTorch's default
// Expandable segments reserve 9/8 of the device's memory as address space (ExpandableSegment's
// constructor: totalGlobalMem + totalGlobalMem / 8). Without a device size the model reserves this.
inline constexpr uint64_t kUnboundedExpandableSpanBytes = uint64_t{1} << 46;  // 64 TiB
// "Unbounded" device memory (a device size of 0) is this much: more than any device holds, and
// low enough that reserved and allocated bytes (int64 statistics, as PyTorch's) never overflow,
// whatever sizes a snapshot's trace asks for.
inline constexpr uint64_t kUnboundedDeviceBytes = uint64_t{1} << 62;

// PYTORCH_CUDA_ALLOC_CONF's settings that change where memory goes.
struct AllocatorSettings {
  uint64_t max_split_size_bytes = kNoMaxSplitSize;            // max_split_size_mb
  uint64_t max_non_split_rounding_bytes = kLargeBuffer;       // max_non_split_rounding_mb
  std::array<uint64_t, kRoundupPower2Intervals> roundup_power2_divisions{};  // 0: off
  double garbage_collection_threshold = 0;                    // 0: off, else in (0, 1)
  bool expandable_segments = false;
  // torch.cuda.set_per_process_memory_fraction (also the CUDA key per_process_memory_fraction):
  // the allocator's ceiling as a share of the device; garbage collection needs it.
  std::optional<double> per_process_memory_fraction;

  bool operator==(const AllocatorSettings&) const = default;
};

// Parses PyTorch's syntax, e.g. "expandable_segments:True,max_split_size_mb:128,
// roundup_power2_divisions:4,garbage_collection_threshold:0.8" or
// "roundup_power2_divisions:[256:1,512:2,>:4]" (AllocatorConfig::parseArgs; spaces ignored).
// Also per_process_memory_fraction:F in (0, 1]. Keys that do not change placement (backend:native,
// release_lock_on_cudamalloc, pinned_*) are accepted and ignored. Throws Error(kInvalidArgument)
// naming the bad key or value: "alloc conf 'max_split_size_mb:10': max_split_size_mb must be at
// least 20 (MiB)".
AllocatorSettings parse_alloc_conf(std::string_view text);

// The settings in PyTorch's syntax, only what differs from the defaults; "default" when nothing does.
std::string describe(const AllocatorSettings& settings);

// round_size: the bytes a request of `bytes` occupies (>= 512, a multiple of 512, or the next of
// roundup_power2_divisions' steps between two powers of two).
uint64_t round_size(uint64_t bytes, const AllocatorSettings& settings);
// get_allocation_size: the size of a new (non-expandable) segment for a rounded size.
uint64_t allocation_size(uint64_t rounded_bytes);

enum class Pool : uint8_t { kSmall, kLarge };
std::string_view name(Pool pool);  // "small", "large" (the snapshot's segment_type)

// A block's state as the snapshot spells it.
enum class BlockState : uint8_t {
  kInactive,           // free, cached
  kActiveAllocated,    // handed out
  kActivePendingFree,  // freed by the program, waiting for its stream's uses (free_requested)
};
std::string_view name(BlockState state);  // "inactive", "active_allocated", "active_pending_free"

// One of PyTorch's Stat (c10/core/CachingDeviceAllocator.h): current value, peak, and the sums
// of increases and decreases.
struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;
  void increase(int64_t amount);
  void decrease(int64_t amount);
};
// StatArray: [0] all, [1] small pool, [2] large pool (StatType).
using StatArray = std::array<Stat, 3>;

// DeviceStats, the counters torch.cuda.memory_stats reports.
struct AllocatorStats {
  StatArray allocation, segment, active, inactive_split;
  StatArray allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes;
  Stat oversize_allocations, oversize_segments;
  int64_t num_alloc_retries = 0;
  int64_t num_ooms = 0;
  int64_t num_device_alloc = 0;  // cudaMalloc calls and expandable map calls
  int64_t num_device_free = 0;   // cudaFree calls and expandable unmap calls
};

// A block and a segment as a memory snapshot lists them.
struct BlockView {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t requested_size = 0;  // meaningful for active blocks only
  BlockState state = BlockState::kInactive;
};
struct SegmentView {
  int64_t stream = 0;
  Pool pool = Pool::kLarge;
  bool expandable = false;
  uint64_t address = 0;
  uint64_t total_size = 0;
  std::vector<BlockView> blocks;  // by address
};

// Handle of an allocated block: valid from malloc until free_completed.
using BlockId = int32_t;

class CachingAllocator {
 public:
  // `device_memory_bytes`: what cudaMalloc and page maps may take in all (0: unbounded, no OOM).
  // A memory fraction in `settings` needs it (Error(kInvalidArgument) otherwise).
  CachingAllocator(const AllocatorSettings& settings, uint64_t device_memory_bytes);

  // DeviceCachingAllocator::malloc. nullopt is an out-of-memory error (num_ooms counts it; the
  // program would see torch.OutOfMemoryError). `bytes` may be 0 (PyTorch rounds it to 512).
  std::optional<BlockId> malloc(uint64_t bytes, int64_t stream);
  // The program frees the block (free: allocated drops, trace action free_requested) ...
  void free_requested(BlockId block);
  // ... and the block's uses on other streams are over (free_block: active drops, it merges with
  // its free neighbours; trace action free_completed). Error(kInvalidArgument) for a handle that
  // is not in the right state.
  void free_completed(BlockId block);
  // torch.cuda.empty_cache(): release_cached_blocks.
  void empty_cache();
  // A segment made before the model started (a memory snapshot's, from before its trace began):
  // `segment`'s blocks, by address, must cover it exactly. It counts as reserved, and its active
  // blocks as allocated (or pending free), from now on, but as no cudaMalloc call; it is older
  // than every segment the model makes, and keeps its address. Returns each block's handle, -1 for
  // inactive ones. Error(kInvalidArgument) for an expandable segment (not modelled) or blocks
  // that do not cover it.
  std::vector<BlockId> restore_segment(const SegmentView& segment);

  const AllocatorStats& stats() const { return stats_; }
  // Sum of requested sizes of allocated (not pending-free) blocks: _memory_viz's "allocated".
  uint64_t allocated_requested_bytes() const { return allocated_requested_bytes_; }
  uint64_t block_size(BlockId block) const;
  uint64_t block_address(BlockId block) const;
  // What a snapshot's `segments` would list now: by address, an expandable segment as one entry
  // per run of mapped pages.
  std::vector<SegmentView> segments() const;

 private:
  struct Block {
    uint64_t address = 0;
    uint64_t size = 0;
    uint64_t requested_size = 0;
    int64_t stream = 0;
    int32_t segment = -1;
    BlockId prev = -1;
    BlockId next = -1;
    BlockState state = BlockState::kInactive;
    bool mapped = true;
    bool live = false;
    uint64_t gc_count_base = 0;
  };
  struct Segment {
    Pool pool = Pool::kLarge;
    int64_t stream = 0;
    uint64_t address = 0;
    uint64_t size = 0;  // bytes of cudaMalloc, or of reserved address space when expandable
    uint64_t order = 0;  // creation index: ties in a pool go to the older segment
    bool expandable = false;
    bool live = false;
    BlockId head = -1;
    int64_t block_count = 0;  // blocks, mapped or not
    int64_t free_count = 0;   // free mapped blocks (in the pool's set)
    int64_t free_bytes = 0;
    int64_t split_count_counted = 0;  // this segment's share of inactive_split now
    int64_t split_bytes_counted = 0;
  };
  // A pool's free (mapped) blocks in PyTorch's order: stream, size, segment age, address.
  struct FreeKey {
    int64_t stream;
    uint64_t size;
    uint64_t segment_order;
    uint64_t address;
    BlockId block;
    auto operator<=>(const FreeKey&) const = default;
  };
  // A pool's unmapped expandable ranges by stream and address.
  struct UnmappedKey {
    int64_t stream;
    uint64_t address;
    BlockId block;
    auto operator<=>(const UnmappedKey&) const = default;
  };
  struct PoolState {
    std::set<FreeKey> blocks;
    std::set<UnmappedKey> unmapped;
    uint64_t get_free_blocks_call_count = 0;
  };
  BlockId new_block();
  BlockId new_segment(Pool pool, int64_t stream, uint64_t size, bool expandable);
  void delete_block(BlockId id);
  FreeKey free_key(BlockId id) const;
  void insert_free(BlockId id);
  void erase_free(BlockId id);
  void insert_unmapped(BlockId id);
  void erase_unmapped(BlockId id);
  void set_prev(BlockId id, BlockId prev);
  int stat_index(Pool pool) const { return pool == Pool::kSmall ? 1 : 2; }
  void change(StatArray& stat, Pool pool, int64_t amount);
  void refresh_split(int32_t segment);
  bool gc_enabled() const;
  uint64_t allowed_memory_maximum() const;
  // What cudaMalloc and page maps may take in all: the device's memory, or kUnboundedDeviceBytes.
  uint64_t capacity_bytes() const { return device_memory_bytes_ == 0 ? kUnboundedDeviceBytes : device_memory_bytes_; }
  uint64_t age(BlockId id) const;

  std::optional<BlockId> get_free_block(uint64_t size, int64_t stream, Pool pool);
  std::optional<BlockId> alloc_block(uint64_t size, uint64_t alloc_size, int64_t stream, Pool pool, bool is_retry);
  std::optional<BlockId> try_allocate_expandable_block(uint64_t size, int64_t stream, Pool pool);
  BlockId find_expandable_block(uint64_t size, int64_t stream, Pool pool);
  bool map_block(BlockId id, uint64_t size);
  void unmap_block(BlockId id);
  bool release_available_cached_blocks(uint64_t size, int64_t stream, Pool pool);
  void release_cached_blocks();
  void release_blocks(Pool pool);
  void release_block(BlockId id);
  void garbage_collect_cached_blocks();
  bool should_split(BlockId id, uint64_t size) const;
  BlockId alloc_found_block(BlockId id, uint64_t size, uint64_t requested, bool split);
  void free_block(BlockId id);
  uint64_t try_merge_blocks(BlockId dst, BlockId src);
  bool allocatable(BlockId id) const;

  AllocatorSettings settings_;
  uint64_t device_memory_bytes_;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_ids_;
  std::vector<Segment> segments_;
  std::array<PoolState, 2> pools_;
  AllocatorStats stats_;
  uint64_t total_allocated_memory_ = 0;  // reserved: segments plus mapped pages
  uint64_t allocated_requested_bytes_ = 0;
  uint64_t next_address_ = uint64_t{1} << 40;  // synthetic device addresses, never reused
};

}  // namespace tandem::models
