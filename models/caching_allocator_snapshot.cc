// The caching allocator's segments as a memory snapshot lists them: restore_segment takes in a
// segment made before the model started, segments() gives out what the model holds now.
#include "models/caching_allocator.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace tandem::models {

std::vector<BlockId> CachingAllocator::restore_segment(const SegmentView& view) {
  if (view.expandable) fail(ErrorCode::kInvalidArgument, "restore_segment: expandable segments are not restored");
  uint64_t covered = 0;
  for (const BlockView& block : view.blocks) {
    if (block.address != view.address + covered || block.size == 0) {
      fail(ErrorCode::kInvalidArgument, "restore_segment: the blocks of the segment at {:#x} do not cover it",
           view.address);
    }
    covered += block.size;
  }
  if (covered != view.total_size || view.blocks.empty()) {
    fail(ErrorCode::kInvalidArgument, "restore_segment: the blocks of the segment at {:#x} add up to {} of {} bytes",
         view.address, covered, view.total_size);
  }
  const auto segment_index = static_cast<int32_t>(segments_.size());
  Segment segment;
  segment.pool = view.pool;
  segment.stream = view.stream;
  segment.address = view.address;
  segment.size = view.total_size;
  segment.order = static_cast<uint64_t>(segment_index);
  segment.live = true;
  segment.block_count = static_cast<int64_t>(view.blocks.size());
  segments_.push_back(segment);
  const uint64_t end = view.address + view.total_size;
  next_address_ = std::max(next_address_, kRoundLarge * ((end + kRoundLarge - 1) / kRoundLarge));
  total_allocated_memory_ += view.total_size;
  change(stats_.segment, view.pool, 1);
  change(stats_.reserved_bytes, view.pool, static_cast<int64_t>(view.total_size));
  if (view.total_size >= settings_.max_split_size_bytes) stats_.oversize_segments.increase(1);

  std::vector<BlockId> ids;
  BlockId prev = -1;
  for (const BlockView& view_block : view.blocks) {
    const BlockId id = new_block();
    Block& b = blocks_[static_cast<size_t>(id)];
    b.address = view_block.address;
    b.size = view_block.size;
    b.requested_size = view_block.requested_size;
    b.stream = view.stream;
    b.segment = segment_index;
    b.state = view_block.state;
    set_prev(id, prev);
    if (prev != -1) blocks_[static_cast<size_t>(prev)].next = id;
    prev = id;
    if (view_block.state == BlockState::kInactive) {
      insert_free(id);
      ids.push_back(-1);
      continue;
    }
    const auto size = static_cast<int64_t>(view_block.size);
    change(stats_.active, view.pool, 1);
    change(stats_.active_bytes, view.pool, size);
    change(stats_.requested_bytes, view.pool, static_cast<int64_t>(view_block.requested_size));
    if (view_block.state == BlockState::kActiveAllocated) {
      change(stats_.allocation, view.pool, 1);
      change(stats_.allocated_bytes, view.pool, size);
      if (view_block.size >= settings_.max_split_size_bytes) stats_.oversize_allocations.increase(1);
      allocated_requested_bytes_ += view_block.requested_size;
    }
    ids.push_back(id);
  }
  refresh_split(segment_index);
  return ids;
}

std::vector<SegmentView> CachingAllocator::segments() const {
  std::vector<SegmentView> views;
  for (const Segment& segment : segments_) {
    if (!segment.live) continue;
    SegmentView view;
    bool open = false;
    for (BlockId id = segment.head; id != -1; id = blocks_[static_cast<size_t>(id)].next) {
      const Block& b = blocks_[static_cast<size_t>(id)];
      if (!b.mapped) {
        if (open) views.push_back(std::move(view));
        view = SegmentView{};
        open = false;
        continue;
      }
      if (!open) {
        view.stream = segment.stream;
        view.pool = segment.pool;
        view.expandable = segment.expandable;
        view.address = b.address;
        open = true;
      }
      view.total_size += b.size;
      view.blocks.push_back({b.address, b.size, b.requested_size, b.state});
    }
    if (open) views.push_back(std::move(view));
  }
  std::sort(views.begin(), views.end(),
            [](const SegmentView& a, const SegmentView& b) { return a.address < b.address; });
  return views;
}

}  // namespace tandem::models
