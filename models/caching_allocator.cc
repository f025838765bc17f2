// The caching allocator's rules, each in a function named after the PyTorch function it models
// (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator). docs/memory.md lists them with what
// is left out. Its settings are read in caching_allocator_conf.cc; its bookkeeping of blocks and
// segments is caching_allocator_blocks.cc, the expandable segments caching_allocator_expandable.cc,
// the snapshot's view of its segments caching_allocator_snapshot.cc.
#include "models/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <iterator>
#include <vector>

#include "core/error.h"

namespace tandem::models {

// round_size and roundup_power2_next_division: [2^k, 2^(k+1)) is cut into `divisions` equal
// steps (divisions rounded down to a power of two by the shift); powers of two stay.
uint64_t round_size(uint64_t bytes, const AllocatorSettings& settings) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  // AllocatorConfig::roundup_power2_divisions(size): the interval of floor(log2 size), clamped.
  const int log_size = std::bit_width(bytes) - 1;
  const int index = std::clamp(log_size - kRoundupPower2StartLog2, 0, kRoundupPower2Intervals - 1);
  const uint64_t divisions = settings.roundup_power2_divisions[static_cast<size_t>(index)];
  if (divisions > 1 && bytes > kMinBlockSize * divisions) {
    if (std::has_single_bit(bytes)) return bytes;
    const uint64_t floor = std::bit_floor(bytes);
    const uint64_t step = floor >> (std::bit_width(divisions) - 1);
    if (step == 0) return floor << 1;
    const uint64_t down = bytes & ~(step - 1);
    return down == bytes ? bytes : down + step;
  }
  return kMinBlockSize * ((bytes + kMinBlockSize - 1) / kMinBlockSize);
}

uint64_t allocation_size(uint64_t rounded_bytes) {
  if (rounded_bytes <= kSmallSize) return kSmallBuffer;
  if (rounded_bytes < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded_bytes + kRoundLarge - 1) / kRoundLarge);
}

std::string_view name(Pool pool) { return pool == Pool::kSmall ? "small" : "large"; }

std::string_view name(BlockState state) {
  switch (state) {
    case BlockState::kInactive:
      return "inactive";
    case BlockState::kActiveAllocated:
      return "active_allocated";
    case BlockState::kActivePendingFree:
      return "active_pending_free";
  }
  return "?";
}

void Stat::increase(int64_t amount) {
  current += amount;
  peak = std::max(peak, current);
  allocated += amount;
}

void Stat::decrease(int64_t amount) {
  current -= amount;
  freed += amount;
}

// ---- the allocator ---------------------------------------------------------------------------

CachingAllocator::CachingAllocator(const AllocatorSettings& settings, uint64_t device_memory_bytes)
    : settings_(settings), device_memory_bytes_(device_memory_bytes) {
  if (settings_.per_process_memory_fraction && device_memory_bytes_ == 0) {
    fail(ErrorCode::kInvalidArgument,
         "per_process_memory_fraction needs the device's memory size (the fraction is of the device)");
  }
}

bool CachingAllocator::gc_enabled() const {
  return settings_.per_process_memory_fraction.has_value() && settings_.garbage_collection_threshold > 0;
}

uint64_t CachingAllocator::allowed_memory_maximum() const {
  return static_cast<uint64_t>(*settings_.per_process_memory_fraction * static_cast<double>(device_memory_bytes_));
}

std::optional<BlockId> CachingAllocator::malloc(uint64_t bytes, int64_t stream) {
  const uint64_t size = round_size(bytes, settings_);
  const Pool pool = size <= kSmallSize ? Pool::kSmall : Pool::kLarge;  // get_pool
  const uint64_t alloc_size = allocation_size(size);
  // The search; trigger_free_memory_callbacks has no callbacks here, so no second search.
  std::optional<BlockId> block = get_free_block(size, stream, pool);
  if (!block) {
    if (gc_enabled()) garbage_collect_cached_blocks();
    block = alloc_block(size, alloc_size, stream, pool, false);
    if (!block && release_available_cached_blocks(size, stream, pool)) {
      block = alloc_block(size, alloc_size, stream, pool, false);
    }
    if (!block) {
      release_cached_blocks();
      block = alloc_block(size, alloc_size, stream, pool, true);
    }
  }
  if (!block) {
    stats_.num_ooms += 1;
    return std::nullopt;
  }
  return alloc_found_block(*block, size, bytes, should_split(*block, size));
}

// get_free_block: one lower_bound in the pool's ordered set; only that candidate is tried.
std::optional<BlockId> CachingAllocator::get_free_block(uint64_t size, int64_t stream, Pool pool_kind) {
  PoolState& pool = pools_[static_cast<size_t>(pool_kind)];
  if (gc_enabled()) ++pool.get_free_blocks_call_count;
  auto it = pool.blocks.lower_bound(FreeKey{stream, size, 0, 0, -1});
  if (it == pool.blocks.end() || it->stream != stream) return std::nullopt;
  if (segments_[static_cast<size_t>(blocks_[static_cast<size_t>(it->block)].segment)].expandable) {
    // An expandable block counts as big as it could grow: itself and the unmapped range after it.
    // The search moves on while the next block (same stream) could grow to less.
    auto expandable_size = [&](BlockId id) {
      const Block& b = blocks_[static_cast<size_t>(id)];
      const bool unmapped_next = b.next != -1 && !blocks_[static_cast<size_t>(b.next)].mapped;
      return b.size + (unmapped_next ? blocks_[static_cast<size_t>(b.next)].size : 0);
    };
    auto next = std::next(it);
    while (segments_[static_cast<size_t>(blocks_[static_cast<size_t>(it->block)].segment)].expandable &&
           next != pool.blocks.end() && next->stream == stream &&
           expandable_size(next->block) < expandable_size(it->block)) {
      it = next++;
    }
  }
  // The oversize rules: a request below max_split_size never takes an oversize block, and a
  // request at or above it takes none with max_non_split_rounding_size or more to spare.
  if (size < settings_.max_split_size_bytes && it->size >= settings_.max_split_size_bytes) return std::nullopt;
  if (size >= settings_.max_split_size_bytes && it->size >= size + settings_.max_non_split_rounding_bytes) {
    return std::nullopt;
  }
  const BlockId id = it->block;
  erase_free(id);
  return id;
}

// alloc_block: a new segment from cudaMalloc, or pages mapped into an expandable segment.
std::optional<BlockId> CachingAllocator::alloc_block(uint64_t size, uint64_t alloc_size, int64_t stream, Pool pool,
                                                     bool is_retry) {
  if (is_retry) stats_.num_alloc_retries += 1;
  if (settings_.per_process_memory_fraction && total_allocated_memory_ + alloc_size > allowed_memory_maximum()) {
    return std::nullopt;
  }
  if (settings_.expandable_segments) return try_allocate_expandable_block(size, stream, pool);
  if (alloc_size > capacity_bytes() - total_allocated_memory_) return std::nullopt;
  const BlockId id = new_segment(pool, stream, alloc_size, /*expandable=*/false);
  next_address_ += kRoundLarge * ((alloc_size + kRoundLarge - 1) / kRoundLarge) - alloc_size;
  total_allocated_memory_ += alloc_size;
  change(stats_.segment, pool, 1);
  change(stats_.reserved_bytes, pool, static_cast<int64_t>(alloc_size));
  if (alloc_size >= settings_.max_split_size_bytes) stats_.oversize_segments.increase(1);
  stats_.num_device_alloc += 1;
  return id;
}

// release_block: cudaFree of a whole, free segment.
void CachingAllocator::release_block(BlockId id) {
  const Block& b = blocks_[static_cast<size_t>(id)];
  Segment& segment = segments_[static_cast<size_t>(b.segment)];
  erase_free(id);
  total_allocated_memory_ -= b.size;
  change(stats_.segment, segment.pool, -1);
  change(stats_.reserved_bytes, segment.pool, -static_cast<int64_t>(b.size));
  if (b.size >= settings_.max_split_size_bytes) stats_.oversize_segments.decrease(1);
  stats_.num_device_free += 1;
  segment.live = false;
  delete_block(id);
}

// release_available_cached_blocks (max_split_size set only): free the smallest cached oversize
// block that covers the request, else oversize blocks from the largest down until enough is free.
// PyTorch would cudaFree a split block found here too; the model only frees whole segments (an
// oversize block is never split, as should_split refuses requests of max_split_size or more).
bool CachingAllocator::release_available_cached_blocks(uint64_t size, int64_t stream, Pool pool_kind) {
  if (settings_.max_split_size_bytes == kNoMaxSplitSize) return false;
  PoolState& pool = pools_[static_cast<size_t>(pool_kind)];
  const uint64_t key_size = std::max(size, settings_.max_split_size_bytes);
  auto it = pool.blocks.lower_bound(FreeKey{stream, key_size, 0, 0, -1});
  auto releasable = [&](BlockId id) {
    const Block& b = blocks_[static_cast<size_t>(id)];
    return !segments_[static_cast<size_t>(b.segment)].expandable && b.prev == -1 && b.next == -1;
  };
  if (it == pool.blocks.end() || it->stream != stream ||
      segments_[static_cast<size_t>(blocks_[static_cast<size_t>(it->block)].segment)].expandable) {
    if (it == pool.blocks.begin()) return false;
    uint64_t released = 0;
    --it;
    while (released < key_size && it->size >= settings_.max_split_size_bytes && it->stream == stream) {
      const auto current = it;
      const bool is_first = current == pool.blocks.begin();
      if (!is_first) --it;
      const BlockId id = current->block;
      if (releasable(id)) {
        released += current->size;
        release_block(id);
      }
      if (is_first) break;
    }
    return released >= key_size;
  }
  if (!releasable(it->block)) return false;
  release_block(it->block);
  return true;
}

// release_cached_blocks: every free whole segment is cudaFree'd, and every free expandable block's
// whole pages unmapped (release_blocks), small and large pools, all streams.
void CachingAllocator::release_cached_blocks() {
  release_blocks(Pool::kLarge);
  release_blocks(Pool::kSmall);
}

void CachingAllocator::release_blocks(Pool pool_kind) {
  PoolState& pool = pools_[static_cast<size_t>(pool_kind)];
  std::vector<BlockId> to_release, to_unmap;
  for (const FreeKey& key : pool.blocks) {
    const Block& b = blocks_[static_cast<size_t>(key.block)];
    if (segments_[static_cast<size_t>(b.segment)].expandable) {
      to_unmap.push_back(key.block);
    } else if (b.prev == -1 && b.next == -1) {
      to_release.push_back(key.block);
    }
  }
  for (BlockId id : to_release) release_block(id);
  for (BlockId id : to_unmap) {
    unmap_block(id);
    const Block& b = blocks_[static_cast<size_t>(id)];
    if (!b.mapped && b.prev == -1 && b.next == -1) {  // release_expandable_segment
      erase_unmapped(id);
      segments_[static_cast<size_t>(b.segment)].live = false;
      delete_block(id);
    }
  }
}

// garbage_collect_cached_blocks: above threshold x the allowed maximum, free whole large-pool
// segments at least as old (in get_free_block calls) as the mean, until enough is reclaimed.
void CachingAllocator::garbage_collect_cached_blocks() {
  const auto threshold = static_cast<uint64_t>(settings_.garbage_collection_threshold *
                                               static_cast<double>(allowed_memory_maximum()));
  if (total_allocated_memory_ <= threshold) return;
  const uint64_t target = total_allocated_memory_ - threshold;
  PoolState& large = pools_[static_cast<size_t>(Pool::kLarge)];
  uint64_t total_age = 0;
  int64_t freeable = 0;
  for (const FreeKey& key : large.blocks) {
    const Block& b = blocks_[static_cast<size_t>(key.block)];
    if (b.prev == -1 && b.next == -1) {
      total_age += age(key.block);
      ++freeable;
    }
  }
  if (freeable == 0) return;
  uint64_t reclaimed = 0;
  bool freed = true;
  while (reclaimed < target && freed && freeable > 0) {
    const double age_threshold = static_cast<double>(total_age) / static_cast<double>(freeable);
    freed = false;
    for (auto it = large.blocks.begin(); it != large.blocks.end();) {
      const BlockId id = it->block;
      ++it;
      const Block& b = blocks_[static_cast<size_t>(id)];
      if (b.prev == -1 && b.next == -1 && !segments_[static_cast<size_t>(b.segment)].expandable &&
          static_cast<double>(age(id)) >= age_threshold) {
        freed = true;
        reclaimed += b.size;
        total_age -= age(id);
        --freeable;
        release_block(id);
      }
    }
  }
}

// should_split: small pool or expandable segments: a remainder of 512 B or more; large pool:
// below max_split_size and a remainder over 1 MiB.
bool CachingAllocator::should_split(BlockId id, uint64_t size) const {
  const Block& b = blocks_[static_cast<size_t>(id)];
  const uint64_t remaining = b.size - size;
  if (segments_[static_cast<size_t>(b.segment)].pool == Pool::kSmall || settings_.expandable_segments) {
    return remaining >= kMinBlockSize;
  }
  return size < settings_.max_split_size_bytes && remaining > kSmallSize;
}

// alloc_found_block: the front `size` bytes are handed out; a split remainder goes back to the pool.
BlockId CachingAllocator::alloc_found_block(BlockId id, uint64_t size, uint64_t requested, bool split) {
  const int32_t segment_index = blocks_[static_cast<size_t>(id)].segment;
  const Pool pool = segments_[static_cast<size_t>(segment_index)].pool;
  BlockId result = id;
  {
    if (split) {
      //   before: prev <-> [ id: size + remaining ] <-> next
      //   after:  prev <-> [ result: size ] <-> [ id: remaining ] <-> next
      result = new_block();
      Block& remaining = blocks_[static_cast<size_t>(id)];
      Block& front = blocks_[static_cast<size_t>(result)];
      front.address = remaining.address;
      front.size = size;
      front.stream = remaining.stream;
      front.segment = segment_index;
      front.prev = remaining.prev;
      if (front.prev != -1) blocks_[static_cast<size_t>(front.prev)].next = result;
      front.next = id;
      set_prev(result, front.prev);
      remaining.prev = result;
      remaining.address += size;
      remaining.size -= size;
      segments_[static_cast<size_t>(segment_index)].block_count += 1;
      insert_free(id);  // (refreshes the segment's inactive_split share)
    }
    Block& b = blocks_[static_cast<size_t>(result)];
    b.state = BlockState::kActiveAllocated;
    b.requested_size = requested;
  }
  const Block& b = blocks_[static_cast<size_t>(result)];
  change(stats_.allocation, pool, 1);
  change(stats_.allocated_bytes, pool, static_cast<int64_t>(b.size));
  change(stats_.active, pool, 1);
  change(stats_.active_bytes, pool, static_cast<int64_t>(b.size));
  change(stats_.requested_bytes, pool, static_cast<int64_t>(requested));
  if (b.size >= settings_.max_split_size_bytes) stats_.oversize_allocations.increase(1);
  allocated_requested_bytes_ += requested;
  return result;
}

void CachingAllocator::free_requested(BlockId id) {
  if (id < 0 || static_cast<size_t>(id) >= blocks_.size() || !blocks_[static_cast<size_t>(id)].live ||
      blocks_[static_cast<size_t>(id)].state != BlockState::kActiveAllocated) {
    fail(ErrorCode::kInvalidArgument, "free of block {}, which is not allocated", id);
  }
  Block& b = blocks_[static_cast<size_t>(id)];
  const Pool pool = segments_[static_cast<size_t>(b.segment)].pool;
  b.state = BlockState::kActivePendingFree;
  change(stats_.allocation, pool, -1);
  change(stats_.allocated_bytes, pool, -static_cast<int64_t>(b.size));
  if (b.size >= settings_.max_split_size_bytes) stats_.oversize_allocations.decrease(1);
  allocated_requested_bytes_ -= b.requested_size;
}

void CachingAllocator::free_completed(BlockId id) {
  if (id < 0 || static_cast<size_t>(id) >= blocks_.size() || !blocks_[static_cast<size_t>(id)].live ||
      blocks_[static_cast<size_t>(id)].state != BlockState::kActivePendingFree) {
    fail(ErrorCode::kInvalidArgument, "free_completed of block {}, which is not pending free", id);
  }
  free_block(id);
}

// free_block: the block merges with its free neighbours (same segment, same mapped state) and
// goes back to its pool.
void CachingAllocator::free_block(BlockId id) {
  const Pool pool = segments_[static_cast<size_t>(blocks_[static_cast<size_t>(id)].segment)].pool;
  const uint64_t original_size = blocks_[static_cast<size_t>(id)].size;
  const uint64_t requested = blocks_[static_cast<size_t>(id)].requested_size;
  blocks_[static_cast<size_t>(id)].state = BlockState::kInactive;
  try_merge_blocks(id, blocks_[static_cast<size_t>(id)].prev);
  try_merge_blocks(id, blocks_[static_cast<size_t>(id)].next);
  insert_free(id);
  change(stats_.active, pool, -1);
  change(stats_.active_bytes, pool, -static_cast<int64_t>(original_size));
  change(stats_.requested_bytes, pool, -static_cast<int64_t>(requested));
}

// try_merge_blocks: `src` (a neighbour of `dst`) is absorbed when it is free and in the same
// mapped state; `dst` is outside every set while this runs. Returns the bytes absorbed.
uint64_t CachingAllocator::try_merge_blocks(BlockId dst, BlockId src) {
  if (src == -1) return 0;
  Block& s = blocks_[static_cast<size_t>(src)];
  Block& d = blocks_[static_cast<size_t>(dst)];
  if (s.state != BlockState::kInactive || s.mapped != d.mapped) return 0;
  if (s.mapped) {
    erase_free(src);
  } else {
    erase_unmapped(src);
  }
  if (d.prev == src) {
    d.address = s.address;
    d.prev = s.prev;
    if (d.prev != -1) blocks_[static_cast<size_t>(d.prev)].next = dst;
    set_prev(dst, d.prev);
  } else {
    d.next = s.next;
    if (d.next != -1) blocks_[static_cast<size_t>(d.next)].prev = dst;
  }
  const uint64_t subsumed = s.size;
  d.size += subsumed;
  delete_block(src);
  return subsumed;
}

void CachingAllocator::empty_cache() { release_cached_blocks(); }

}  // namespace tandem::models
