// The caching allocator's bookkeeping: blocks and segments (ids, the doubly linked blocks of a
// segment), each pool's sets of free and unmapped blocks, and the statistics that follow them
// (inactive_split). The rules that use them are caching_allocator.cc.
#include "models/caching_allocator.h"

namespace tandem::models {

// inactive_split / inactive_split_bytes count the free blocks of split, non-expandable segments.
// PyTorch keeps them incrementally in free_block and alloc_found_block; here each segment's share
// is recomputed whenever its blocks change, which gives the same numbers.
void CachingAllocator::refresh_split(int32_t segment_index) {
  Segment& s = segments_[static_cast<size_t>(segment_index)];
  const bool counted = !s.expandable && s.block_count >= 2;
  const int64_t count = counted ? s.free_count : 0;
  const int64_t bytes = counted ? s.free_bytes : 0;
  change(stats_.inactive_split, s.pool, count - s.split_count_counted);
  change(stats_.inactive_split_bytes, s.pool, bytes - s.split_bytes_counted);
  s.split_count_counted = count;
  s.split_bytes_counted = bytes;
}

void CachingAllocator::change(StatArray& stat, Pool pool, int64_t amount) {
  for (int i : {0, stat_index(pool)}) {
    if (amount >= 0) {
      stat[static_cast<size_t>(i)].increase(amount);
    } else {
      stat[static_cast<size_t>(i)].decrease(-amount);
    }
  }
}

BlockId CachingAllocator::new_block() {
  BlockId id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<BlockId>(blocks_.size());
    blocks_.emplace_back();
  }
  blocks_[static_cast<size_t>(id)] = Block{};
  blocks_[static_cast<size_t>(id)].live = true;
  return id;
}

void CachingAllocator::delete_block(BlockId id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  Segment& s = segments_[static_cast<size_t>(b.segment)];
  s.block_count -= 1;
  b.live = false;
  free_ids_.push_back(id);
  refresh_split(b.segment);
}

CachingAllocator::FreeKey CachingAllocator::free_key(BlockId id) const {
  const Block& b = blocks_[static_cast<size_t>(id)];
  return {b.stream, b.size, segments_[static_cast<size_t>(b.segment)].order, b.address, id};
}

// A block enters its pool's free set when it becomes inactive and mapped; the segment's free
// counters follow the set.
void CachingAllocator::insert_free(BlockId id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  Segment& s = segments_[static_cast<size_t>(b.segment)];
  PoolState& pool = pools_[static_cast<size_t>(s.pool)];
  b.gc_count_base = pool.get_free_blocks_call_count;  // BlockPool::insert_into_blocks
  pool.blocks.insert(free_key(id));
  s.free_count += 1;
  s.free_bytes += static_cast<int64_t>(b.size);
  refresh_split(b.segment);
}

void CachingAllocator::erase_free(BlockId id) {
  const Block& b = blocks_[static_cast<size_t>(id)];
  Segment& s = segments_[static_cast<size_t>(b.segment)];
  pools_[static_cast<size_t>(s.pool)].blocks.erase(free_key(id));
  s.free_count -= 1;
  s.free_bytes -= static_cast<int64_t>(b.size);
  refresh_split(b.segment);
}

void CachingAllocator::insert_unmapped(BlockId id) {
  const Block& b = blocks_[static_cast<size_t>(id)];
  pools_[static_cast<size_t>(segments_[static_cast<size_t>(b.segment)].pool)].unmapped.insert(
      {b.stream, b.address, id});
}

void CachingAllocator::erase_unmapped(BlockId id) {
  const Block& b = blocks_[static_cast<size_t>(id)];
  pools_[static_cast<size_t>(segments_[static_cast<size_t>(b.segment)].pool)].unmapped.erase(
      {b.stream, b.address, id});
}

void CachingAllocator::set_prev(BlockId id, BlockId prev) {
  Block& b = blocks_[static_cast<size_t>(id)];
  b.prev = prev;
  if (prev == -1) segments_[static_cast<size_t>(b.segment)].head = id;
}

uint64_t CachingAllocator::age(BlockId id) const {
  const Block& b = blocks_[static_cast<size_t>(id)];
  const Pool pool = segments_[static_cast<size_t>(b.segment)].pool;
  return pools_[static_cast<size_t>(pool)].get_free_blocks_call_count - b.gc_count_base;
}

uint64_t CachingAllocator::block_size(BlockId block) const { return blocks_[static_cast<size_t>(block)].size; }
uint64_t CachingAllocator::block_address(BlockId block) const {
  return blocks_[static_cast<size_t>(block)].address;
}

// A new segment of `size` bytes at the next address, as one block covering it (returned).
BlockId CachingAllocator::new_segment(Pool pool, int64_t stream, uint64_t size, bool expandable) {
  const int32_t segment_index = static_cast<int32_t>(segments_.size());
  Segment segment;
  segment.pool = pool;
  segment.stream = stream;
  segment.address = next_address_;
  segment.size = size;
  segment.order = static_cast<uint64_t>(segment_index);
  segment.expandable = expandable;
  segment.live = true;
  segment.block_count = 1;
  segments_.push_back(segment);
  next_address_ += size;
  const BlockId id = new_block();
  Block& b = blocks_[static_cast<size_t>(id)];
  b.address = segment.address;
  b.size = size;
  b.stream = stream;
  b.segment = segment_index;
  set_prev(id, -1);
  return id;
}

}  // namespace tandem::models
