// The caching allocator's expandable segments (PyTorch's Note [Expandable Segments]): one range of
// address space per pool and stream whose pages are mapped on demand (find_expandable_block,
// try_allocate_expandable_block, map_block) and unmapped when the cache is emptied (unmap_block).
#include "models/caching_allocator.h"

#include <algorithm>

namespace tandem::models {

namespace {

// An expandable segment's page: what one map or unmap call takes or gives back.
uint64_t page_bytes(Pool pool) { return pool == Pool::kSmall ? kSmallBuffer : kLargeBuffer; }

}  // namespace

bool CachingAllocator::allocatable(BlockId id) const {
  return id != -1 && blocks_[static_cast<size_t>(id)].state == BlockState::kInactive;
}

// find_expandable_block: the lowest-address unmapped range of this pool and stream (with the
// free block before it) that has room, else a new segment of address space.
BlockId CachingAllocator::find_expandable_block(uint64_t size, int64_t stream, Pool pool_kind) {
  PoolState& pool = pools_[static_cast<size_t>(pool_kind)];
  auto has_room = [&](BlockId id) {
    uint64_t bytes = 0;
    while (bytes < size && allocatable(id)) {
      bytes += blocks_[static_cast<size_t>(id)].size;
      id = blocks_[static_cast<size_t>(id)].next;
    }
    return bytes >= size;
  };
  for (auto it = pool.unmapped.lower_bound(UnmappedKey{stream, 0, -1});
       it != pool.unmapped.end() && it->stream == stream; ++it) {
    BlockId candidate = it->block;
    const BlockId prev = blocks_[static_cast<size_t>(candidate)].prev;
    if (allocatable(prev)) candidate = prev;
    if (has_room(candidate)) return candidate;
  }
  const uint64_t page = page_bytes(pool_kind);
  const uint64_t span = device_memory_bytes_ == 0 ? kUnboundedExpandableSpanBytes
                                                  : device_memory_bytes_ + device_memory_bytes_ / 8;
  const BlockId id = new_segment(pool_kind, stream, page * ((span + page - 1) / page),  // numSegments(size) pages
                                 /*expandable=*/true);
  blocks_[static_cast<size_t>(id)].mapped = false;
  insert_unmapped(id);
  return id;
}

// try_allocate_expandable_block: map what the candidate lacks, page by page, merging as it goes.
std::optional<BlockId> CachingAllocator::try_allocate_expandable_block(uint64_t size, int64_t stream, Pool pool) {
  BlockId candidate = find_expandable_block(size, stream, pool);
  if (!blocks_[static_cast<size_t>(candidate)].mapped &&
      !map_block(candidate, std::min(blocks_[static_cast<size_t>(candidate)].size, size))) {
    return std::nullopt;
  }
  while (blocks_[static_cast<size_t>(candidate)].size < size) {
    // Here candidate is free and mapped, followed by an unmapped range; mapping part of that range
    // merges the candidate into it.
    const uint64_t remaining = size - blocks_[static_cast<size_t>(candidate)].size;
    const BlockId next = blocks_[static_cast<size_t>(candidate)].next;
    // A fresh segment whose whole address space is less than the request (PyTorch reserves 9/8 of
    // the device, so cuMemCreate would have failed first): out of memory.
    if (next == -1 || blocks_[static_cast<size_t>(next)].mapped) return std::nullopt;
    if (!map_block(next, std::min(remaining, blocks_[static_cast<size_t>(next)].size))) return std::nullopt;
    candidate = next;
  }
  erase_free(candidate);
  return candidate;
}

// map_block: whole pages from the start of an unmapped block (ExpandableSegment::map rounds the
// end up to a page); cuMemCreate fails when the device is full, and then nothing is mapped.
bool CachingAllocator::map_block(BlockId id, uint64_t size) {
  Block& b = blocks_[static_cast<size_t>(id)];
  const int32_t segment_index = b.segment;
  const Pool pool = segments_[static_cast<size_t>(segment_index)].pool;
  const uint64_t page = page_bytes(pool);
  const uint64_t mapped = page * ((size + page - 1) / page);
  if (mapped > capacity_bytes() - total_allocated_memory_) return false;
  erase_unmapped(id);
  b.mapped = true;
  if (mapped < b.size) {
    const BlockId rest_id = new_block();
    Block& block = blocks_[static_cast<size_t>(id)];  // new_block may move blocks_
    Block& rest = blocks_[static_cast<size_t>(rest_id)];
    rest.address = block.address + mapped;
    rest.size = block.size - mapped;
    rest.stream = block.stream;
    rest.segment = segment_index;
    rest.mapped = false;
    rest.next = block.next;
    if (rest.next != -1) blocks_[static_cast<size_t>(rest.next)].prev = rest_id;
    rest.prev = id;
    block.next = rest_id;
    block.size = mapped;
    segments_[static_cast<size_t>(segment_index)].block_count += 1;
    insert_unmapped(rest_id);
  }
  try_merge_blocks(id, blocks_[static_cast<size_t>(id)].prev);
  try_merge_blocks(id, blocks_[static_cast<size_t>(id)].next);
  insert_free(id);
  total_allocated_memory_ += mapped;
  change(stats_.reserved_bytes, pool, static_cast<int64_t>(mapped));
  stats_.num_device_alloc += 1;
  return true;
}

// unmap_block: the whole pages inside a free expandable block go back to the device; the parts
// before and after them stay free and mapped.
void CachingAllocator::unmap_block(BlockId id) {
  const int32_t segment_index = blocks_[static_cast<size_t>(id)].segment;
  const Segment& segment = segments_[static_cast<size_t>(segment_index)];
  const Pool pool = segment.pool;
  const uint64_t page = page_bytes(pool);
  const uint64_t start = blocks_[static_cast<size_t>(id)].address;
  const uint64_t end = start + blocks_[static_cast<size_t>(id)].size;
  //   segment.address        start          begin ... end_page           end
  //   |  page | page | ...   |....[ free ]..|## whole free pages ##|...]...|
  const uint64_t begin = segment.address + page * ((start - segment.address + page - 1) / page);
  const uint64_t end_page = segment.address + page * ((end - segment.address) / page);
  if (begin >= end_page) return;
  erase_free(id);
  auto split_off = [&](uint64_t address, uint64_t size, bool before) {
    const BlockId part = new_block();
    Block& b = blocks_[static_cast<size_t>(id)];
    Block& p = blocks_[static_cast<size_t>(part)];
    p.address = address;
    p.size = size;
    p.stream = b.stream;
    p.segment = segment_index;
    segments_[static_cast<size_t>(segment_index)].block_count += 1;
    if (before) {
      p.prev = b.prev;
      p.next = id;
      if (p.prev != -1) blocks_[static_cast<size_t>(p.prev)].next = part;
      set_prev(part, p.prev);
      blocks_[static_cast<size_t>(id)].prev = part;
    } else {
      p.next = b.next;
      p.prev = id;
      if (p.next != -1) blocks_[static_cast<size_t>(p.next)].prev = part;
      blocks_[static_cast<size_t>(id)].next = part;
    }
    insert_free(part);
  };
  if (begin > start) split_off(start, begin - start, true);
  if (end > end_page) split_off(end_page, end - end_page, false);
  Block& b = blocks_[static_cast<size_t>(id)];
  b.address = begin;
  b.size = end_page - begin;
  b.mapped = false;
  try_merge_blocks(id, b.prev);
  try_merge_blocks(id, blocks_[static_cast<size_t>(id)].next);
  insert_unmapped(id);
  const uint64_t unmapped = end_page - begin;
  total_allocated_memory_ -= unmapped;
  change(stats_.reserved_bytes, pool, -static_cast<int64_t>(unmapped));
  stats_.num_device_free += 1;
}

}  // namespace tandem::models
