// The caching-allocator model on hand-worked cases: each expected number is derived in the comment
// above it from PyTorch's rules (c10/cuda/CUDACachingAllocator.cpp; docs/memory.md).
#include "models/caching_allocator.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/support/expect_error.h"

namespace tandem::models {
namespace {

using testing::expect_error;

constexpr uint64_t kKiB = 1024;
constexpr int64_t kStream = 0;

int64_t reserved(const CachingAllocator& a) { return a.stats().reserved_bytes[0].current; }
int64_t allocated(const CachingAllocator& a) { return a.stats().allocated_bytes[0].current; }

BlockId must_malloc(CachingAllocator& a, uint64_t bytes, int64_t stream = kStream) {
  const std::optional<BlockId> block = a.malloc(bytes, stream);
  EXPECT_TRUE(block.has_value()) << "malloc of " << bytes << " bytes failed";
  return block.value_or(-1);
}

void free_now(CachingAllocator& a, BlockId block) {
  a.free_requested(block);
  a.free_completed(block);
}

// The block sizes of each segment, by address.
std::vector<std::vector<uint64_t>> layout(const CachingAllocator& a) {
  std::vector<std::vector<uint64_t>> segments;
  for (const SegmentView& s : a.segments()) {
    std::vector<uint64_t> sizes;
    for (const BlockView& b : s.blocks) sizes.push_back(b.size);
    segments.push_back(sizes);
  }
  return segments;
}

// 8 x 16 MiB allocated and freed, then 4 x 32 MiB (the case of PyTorch's devlog on expandable
// segments).
//
// Without expandable segments: 16 MiB is a large-pool request of at least kMinLargeAlloc (10 MiB),
// so each gets a segment of exactly 16 MiB (rounded up to 2 MiB: unchanged) and nothing is split:
// 8 segments, 128 MiB. Freed, they stay cached as 8 free 16 MiB blocks, none of which can hold
// 32 MiB, and blocks never merge across segments: each 32 MiB request gets a new 32 MiB segment.
// 128 + 4 x 32 = 256 MiB reserved, 12 cudaMalloc calls.
//
// With expandable segments: one address range for the large pool on this stream, mapped in 20 MiB
// pages, and the blocks in it split whenever 512 B or more remain. Allocation k (1-based) ends at
// 16k MiB; the mapped end must reach it, in whole pages: 20, 40, 60, 80, 80 (the 5th fits the
// 16 MiB free tail of page 4 exactly), 100, 120, 140. So 7 map calls, 140 MiB mapped for 128 MiB
// allocated. Freed, the 8 blocks and the 12 MiB tail merge into one free 140 MiB block (pages are
// only unmapped by empty_cache or on the OOM path), which holds 4 x 32 MiB: no new page.
TEST(CachingAllocator, SixteensThenThirtyTwosReserve256MiBOr140MiBExpandable) {
  for (const bool expandable : {false, true}) {
    SCOPED_TRACE(expandable ? "expandable segments" : "default");
    CachingAllocator a(parse_alloc_conf(expandable ? "expandable_segments:True" : ""), 0);
    std::vector<BlockId> sixteens;
    for (int i = 0; i < 8; ++i) sixteens.push_back(must_malloc(a, 16 * kMiB));
    EXPECT_EQ(reserved(a), static_cast<int64_t>((expandable ? 140 : 128) * kMiB));
    for (BlockId b : sixteens) free_now(a, b);
    for (int i = 0; i < 4; ++i) must_malloc(a, 32 * kMiB);
    EXPECT_EQ(reserved(a), static_cast<int64_t>((expandable ? 140 : 256) * kMiB));
    EXPECT_EQ(a.stats().reserved_bytes[0].peak, reserved(a));
    EXPECT_EQ(allocated(a), static_cast<int64_t>(128 * kMiB));
    EXPECT_EQ(a.stats().num_device_alloc, expandable ? 7 : 12);
    EXPECT_EQ(a.stats().num_device_free, 0);
    if (expandable) {
      // One mapped run: 4 x 32 MiB allocated, 12 MiB free.
      EXPECT_EQ(layout(a), (std::vector<std::vector<uint64_t>>{
                               {32 * kMiB, 32 * kMiB, 32 * kMiB, 32 * kMiB, 12 * kMiB}}));
      EXPECT_EQ(a.stats().segment[0].current, 0);  // expandable maps are not segments in DeviceStats
    } else {
      EXPECT_EQ(a.stats().segment[0].current, 12);
    }
  }
}

// The reverse order needs no new memory without expandable segments: a 16 MiB request splits a
// cached 32 MiB block (16 MiB remain, more than 1 MiB), so 8 x 16 MiB fit the 4 x 32 MiB segments.
TEST(CachingAllocator, ThirtyTwosThenSixteensReuseTheSegments) {
  CachingAllocator a(AllocatorSettings{}, 0);
  std::vector<BlockId> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(must_malloc(a, 32 * kMiB));
  for (BlockId b : blocks) free_now(a, b);
  for (int i = 0; i < 8; ++i) must_malloc(a, 16 * kMiB);
  EXPECT_EQ(reserved(a), static_cast<int64_t>(128 * kMiB));
  EXPECT_EQ(a.stats().num_device_alloc, 4);
}

// Small pool: 1000 B rounds to 1024 and takes the front of a new 2 MiB segment (2 MiB - 1024 B
// remain, at least 512 B: split); 600 B rounds to 1024 and splits the remainder again.
TEST(CachingAllocator, SmallPoolSplitsDownTo512Bytes) {
  CachingAllocator a(AllocatorSettings{}, 0);
  const BlockId first = must_malloc(a, 1000);
  must_malloc(a, 600);
  EXPECT_EQ(reserved(a), static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(allocated(a), 2048);
  EXPECT_EQ(a.stats().requested_bytes[0].current, 1600);
  EXPECT_EQ(a.stats().allocated_bytes[1].current, 2048);  // the small pool's own stat
  EXPECT_EQ(a.stats().allocated_bytes[2].current, 0);
  EXPECT_EQ(layout(a), (std::vector<std::vector<uint64_t>>{{1024, 1024, 2 * kMiB - 2048}}));
  // One free block inside a split segment: inactive_split.
  EXPECT_EQ(a.stats().inactive_split[0].current, 1);
  EXPECT_EQ(a.stats().inactive_split_bytes[0].current, static_cast<int64_t>(2 * kMiB - 2048));
  // Freeing the first block cannot merge it (its neighbour is allocated): two inactive splits.
  free_now(a, first);
  EXPECT_EQ(a.stats().inactive_split[0].current, 2);
  EXPECT_EQ(a.stats().inactive_split_bytes[0].current, static_cast<int64_t>(2 * kMiB - 1024));

  // 1 MiB is still the small pool: it takes half of a new 2 MiB segment (its 1 MiB remainder is
  // split off), a second 1 MiB takes the remainder exactly, a third needs a third segment.
  CachingAllocator b(AllocatorSettings{}, 0);
  for (int i = 0; i < 3; ++i) must_malloc(b, kMiB);
  EXPECT_EQ(layout(b), (std::vector<std::vector<uint64_t>>{{kMiB, kMiB}, {kMiB, kMiB}}));
  EXPECT_EQ(reserved(b), static_cast<int64_t>(4 * kMiB));
}

// Large pool: under 10 MiB a request gets a 20 MiB segment and splits it (over 1 MiB remains);
// 19.5 MiB gets a 20 MiB segment whose 0.5 MiB remainder is not split off (not over 1 MiB):
// the whole 20 MiB block is allocated for 19.5 MiB requested.
TEST(CachingAllocator, LargePoolSplitsOnlyOverOneMiB) {
  CachingAllocator a(AllocatorSettings{}, 0);
  must_malloc(a, 5 * kMiB);
  must_malloc(a, 19 * kMiB + 512 * kKiB);
  EXPECT_EQ(layout(a), (std::vector<std::vector<uint64_t>>{{5 * kMiB, 15 * kMiB}, {20 * kMiB}}));
  EXPECT_EQ(allocated(a), static_cast<int64_t>(25 * kMiB));
  EXPECT_EQ(a.allocated_requested_bytes(), 24 * kMiB + 512 * kKiB);
  // 1.5 MiB (just over kSmallSize) is a large-pool request: the free 15 MiB block takes it.
  must_malloc(a, kMiB + 512 * kKiB);
  EXPECT_EQ(a.stats().num_device_alloc, 2);
}

// Blocks never merge across segments: 4 x 1 MiB fill two small segments; freed, each segment is
// one free 2 MiB block again, not one 4 MiB block.
TEST(CachingAllocator, NoMergeAcrossSegments) {
  CachingAllocator a(AllocatorSettings{}, 0);
  std::vector<BlockId> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(must_malloc(a, kMiB));
  for (BlockId b : blocks) free_now(a, b);
  EXPECT_EQ(layout(a), (std::vector<std::vector<uint64_t>>{{2 * kMiB}, {2 * kMiB}}));
  EXPECT_EQ(a.stats().inactive_split[0].current, 0);  // unsplit segments are not inactive_split
  a.empty_cache();
  EXPECT_EQ(reserved(a), 0);
  EXPECT_EQ(a.stats().num_device_free, 2);
}

// max_split_size_mb:64. A cached 100 MiB block is oversize: a 30 MiB request (under 64 MiB) may
// not take it and gets its own 30 MiB segment; a 90 MiB request takes it whole (it is less than
// 90 + 20 MiB, max_non_split_rounding's default) and it is not split (90 MiB >= max_split_size);
// a 70 MiB request may not take it (100 >= 70 + 20). Without the setting the 30 MiB request
// splits the 100 MiB block.
TEST(CachingAllocator, MaxSplitSizeKeepsOversizeBlocksWhole) {
  CachingAllocator a(parse_alloc_conf("max_split_size_mb:64"), 0);
  free_now(a, must_malloc(a, 100 * kMiB));
  const BlockId thirty = must_malloc(a, 30 * kMiB);
  EXPECT_EQ(reserved(a), static_cast<int64_t>(130 * kMiB));
  free_now(a, thirty);
  const BlockId ninety = must_malloc(a, 90 * kMiB);
  EXPECT_EQ(a.block_size(ninety), 100 * kMiB);
  EXPECT_EQ(allocated(a), static_cast<int64_t>(100 * kMiB));
  EXPECT_EQ(a.stats().oversize_allocations.current, 1);
  EXPECT_EQ(a.stats().oversize_segments.current, 1);
  free_now(a, ninety);
  must_malloc(a, 70 * kMiB);
  EXPECT_EQ(reserved(a), static_cast<int64_t>(200 * kMiB));
  EXPECT_EQ(a.stats().num_device_alloc, 3);

  CachingAllocator plain(AllocatorSettings{}, 0);
  free_now(plain, must_malloc(plain, 100 * kMiB));
  must_malloc(plain, 30 * kMiB);
  EXPECT_EQ(reserved(plain), static_cast<int64_t>(100 * kMiB));
  EXPECT_EQ(layout(plain), (std::vector<std::vector<uint64_t>>{{30 * kMiB, 70 * kMiB}}));
}

// max_non_split_rounding_mb widens what an oversize request may take: with 64 MiB of slack the
// 70 MiB request takes the cached 100 MiB block.
TEST(CachingAllocator, MaxNonSplitRoundingWidensTheFit) {
  CachingAllocator a(parse_alloc_conf("max_split_size_mb:64,max_non_split_rounding_mb:64"), 0);
  free_now(a, must_malloc(a, 100 * kMiB));
  EXPECT_EQ(a.block_size(must_malloc(a, 70 * kMiB)), 100 * kMiB);
  EXPECT_EQ(a.stats().num_device_alloc, 1);
}

// The out-of-memory path on a 100 MiB device. A cached 60 MiB segment and a 70 MiB request:
// cudaMalloc fails (60 + 70 > 100); release_available_cached_blocks does nothing without
// max_split_size; release_cached_blocks frees the 60 MiB; the retry succeeds. Then 40 MiB more
// does not fit beside the 70 MiB in use: nothing is cached, the retry fails too, and it is an OOM.
TEST(CachingAllocator, OutOfMemoryFreesTheCacheRetriesThenFails) {
  CachingAllocator a(AllocatorSettings{}, 100 * kMiB);
  free_now(a, must_malloc(a, 60 * kMiB));
  must_malloc(a, 70 * kMiB);
  EXPECT_EQ(reserved(a), static_cast<int64_t>(70 * kMiB));
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  EXPECT_EQ(a.stats().num_device_free, 1);
  EXPECT_EQ(a.stats().num_ooms, 0);
  EXPECT_FALSE(a.malloc(40 * kMiB, kStream).has_value());
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_EQ(a.stats().num_alloc_retries, 2);
  EXPECT_EQ(reserved(a), static_cast<int64_t>(70 * kMiB));
}

// With max_split_size_mb:64 on a 200 MiB device, cached oversize blocks of 100 and 80 MiB and a
// 30 MiB request: the request may not take either (oversize), cudaMalloc fails (180 + 30 > 200),
// and release_available_cached_blocks frees the smallest oversize block of at least
// max(30, 64) MiB, the 80 MiB one; the 100 MiB one stays. No full retry is needed.
TEST(CachingAllocator, OutOfMemoryReleasesTheSmallestSufficientOversizeBlock) {
  CachingAllocator a(parse_alloc_conf("max_split_size_mb:64"), 200 * kMiB);
  const BlockId hundred = must_malloc(a, 100 * kMiB);
  const BlockId eighty = must_malloc(a, 80 * kMiB);
  free_now(a, hundred);
  free_now(a, eighty);
  must_malloc(a, 30 * kMiB);
  EXPECT_EQ(reserved(a), static_cast<int64_t>(130 * kMiB));
  EXPECT_EQ(a.stats().num_alloc_retries, 0);
  EXPECT_EQ(a.stats().num_device_free, 1);
  EXPECT_EQ(layout(a), (std::vector<std::vector<uint64_t>>{{100 * kMiB}, {30 * kMiB}}));
}

// garbage_collection_threshold:0.4 with per_process_memory_fraction:1 on a 100 MiB device: GC
// runs on a miss when more than 40 MiB is reserved. A (20 MiB) is freed after 1 lookup of the
// large pool, B (30 MiB) after 2; the lookup for C (40 MiB) is the 3rd and misses: 50 MiB
// reserved, 10 over; ages A 3-1 = 2, B 3-2 = 1, mean 1.5: only A is old enough and is freed. C
// then gets a new segment: 30 + 40 = 70 MiB. Without GC nothing is freed: 90 MiB.
TEST(CachingAllocator, GarbageCollectionFreesBlocksOlderThanTheMean) {
  for (const bool gc : {true, false}) {
    SCOPED_TRACE(gc ? "gc" : "no gc");
    CachingAllocator a(
        parse_alloc_conf(gc ? "garbage_collection_threshold:0.4,per_process_memory_fraction:1"
                            : "per_process_memory_fraction:1"),
        100 * kMiB);
    free_now(a, must_malloc(a, 20 * kMiB));
    free_now(a, must_malloc(a, 30 * kMiB));
    must_malloc(a, 40 * kMiB);
    EXPECT_EQ(reserved(a), static_cast<int64_t>((gc ? 70 : 90) * kMiB));
    EXPECT_EQ(a.stats().num_device_free, gc ? 1 : 0);
    EXPECT_EQ(a.stats().num_alloc_retries, 0);
  }
  // The fraction is of the device: without a device size it means nothing.
  expect_error([] { CachingAllocator(parse_alloc_conf("per_process_memory_fraction:0.5"), 0); },
               ErrorCode::kInvalidArgument, {"per_process_memory_fraction", "device"});
}

// A memory fraction below 1 is a ceiling of its own: 0.5 of 100 MiB refuses a second 30 MiB
// segment (30 + 30 > 50) even though the device has room.
TEST(CachingAllocator, MemoryFractionCapsReserved) {
  CachingAllocator a(parse_alloc_conf("per_process_memory_fraction:0.5"), 100 * kMiB);
  must_malloc(a, 30 * kMiB);
  EXPECT_FALSE(a.malloc(30 * kMiB, kStream).has_value());
  EXPECT_EQ(a.stats().num_ooms, 1);
}

// roundup_power2_divisions: with 4 divisions [2^k, 2^(k+1)) is cut into 4 steps.
TEST(CachingAllocator, RoundupPower2Divisions) {
  const AllocatorSettings plain;
  EXPECT_EQ(round_size(0, plain), 512u);
  EXPECT_EQ(round_size(1, plain), 512u);
  EXPECT_EQ(round_size(513, plain), 1024u);
  EXPECT_EQ(round_size(4200, plain), 4608u);
  const AllocatorSettings four = parse_alloc_conf("roundup_power2_divisions:4");
  EXPECT_EQ(round_size(4200, four), 5120u);             // [4096, 8192) in steps of 1024
  EXPECT_EQ(round_size(2000, four), 2048u);             // not over 512 x 4: 512 rounding
  EXPECT_EQ(round_size(kMiB + 100 * kKiB, four), kMiB + 256 * kKiB);
  EXPECT_EQ(round_size(3 * kMiB, four), 3 * kMiB);      // on a step already
  EXPECT_EQ(round_size(3 * kMiB + 1, four), 3 * kMiB + 512 * kKiB);
  EXPECT_EQ(round_size(4 * kMiB, four), 4 * kMiB);      // powers of two stay
  // A list: the intervals up to [256 MiB, 512 MiB) 1 (off), [512 MiB, 1 GiB) 2.
  const AllocatorSettings list = parse_alloc_conf("roundup_power2_divisions:[256:1,512:2]");
  EXPECT_EQ(round_size(300 * kMiB + 1, list), 300 * kMiB + 512);
  EXPECT_EQ(round_size(600 * kMiB, list), 768 * kMiB);
  EXPECT_EQ(round_size(4200, list), 4608u);
  // ">" fills from the previous entry's interval on, that interval included
  // (parseRoundUpPower2Divisions: std::fill from last_index): here 512's 2 becomes 4.
  const AllocatorSettings rest = parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,>:4]");
  EXPECT_EQ(round_size(600 * kMiB, rest), 640 * kMiB);
  EXPECT_EQ(round_size(1536 * kMiB + 1, rest), 1792 * kMiB);
  // The rounding changes what is allocated: 1.1 MiB x 3 under 4 divisions are 1.25 MiB blocks.
  CachingAllocator a(four, 0);
  for (int i = 0; i < 3; ++i) must_malloc(a, kMiB + 100 * kKiB);
  EXPECT_EQ(allocated(a), static_cast<int64_t>(3 * (kMiB + 256 * kKiB)));
}

// Expandable segments give pages back on empty_cache only where whole pages are free. Three
// 16 MiB blocks map pages [0, 60) MiB; the first two freed make a free [0, 32): page [0, 20) is
// unmapped, [20, 32) stays mapped and free. The page [40, 60) holds live memory up to 48 MiB.
TEST(CachingAllocator, ExpandableSegmentsUnmapWholeFreePages) {
  CachingAllocator a(parse_alloc_conf("expandable_segments:True"), 0);
  const BlockId b0 = must_malloc(a, 16 * kMiB);
  const BlockId b1 = must_malloc(a, 16 * kMiB);
  must_malloc(a, 16 * kMiB);
  free_now(a, b0);
  free_now(a, b1);
  EXPECT_EQ(reserved(a), static_cast<int64_t>(60 * kMiB));
  a.empty_cache();
  EXPECT_EQ(reserved(a), static_cast<int64_t>(40 * kMiB));
  EXPECT_EQ(a.stats().num_device_free, 1);
  EXPECT_EQ(layout(a), (std::vector<std::vector<uint64_t>>{{12 * kMiB, 16 * kMiB, 12 * kMiB}}));
  // The next 16 MiB goes to the lowest address that fits: the unmapped page is mapped again and
  // merges with the free 12 MiB after it.
  must_malloc(a, 16 * kMiB);
  EXPECT_EQ(reserved(a), static_cast<int64_t>(60 * kMiB));
  EXPECT_EQ(layout(a), (std::vector<std::vector<uint64_t>>{{16 * kMiB, 16 * kMiB, 16 * kMiB, 12 * kMiB}}));
}

// Pools are per stream: a block freed on stream 1 is not reused by stream 2.
TEST(CachingAllocator, PoolsArePerStream) {
  CachingAllocator a(AllocatorSettings{}, 0);
  free_now(a, must_malloc(a, 16 * kMiB, 1));
  must_malloc(a, 16 * kMiB, 2);
  EXPECT_EQ(reserved(a), static_cast<int64_t>(32 * kMiB));
  must_malloc(a, 16 * kMiB, 1);
  EXPECT_EQ(reserved(a), static_cast<int64_t>(32 * kMiB));
}

// A block freed by the program but still in use on another stream (free_requested, not yet
// free_completed) is neither allocated nor reusable: it is still active.
TEST(CachingAllocator, PendingFreeStaysActive) {
  CachingAllocator a(AllocatorSettings{}, 0);
  const BlockId b = must_malloc(a, 16 * kMiB);
  a.free_requested(b);
  EXPECT_EQ(allocated(a), 0);
  EXPECT_EQ(a.stats().active_bytes[0].current, static_cast<int64_t>(16 * kMiB));
  must_malloc(a, 16 * kMiB);
  EXPECT_EQ(reserved(a), static_cast<int64_t>(32 * kMiB));
  a.free_completed(b);
  EXPECT_EQ(a.stats().active_bytes[0].current, static_cast<int64_t>(16 * kMiB));
  expect_error([&] { a.free_completed(b); }, ErrorCode::kInvalidArgument, {"not pending free"});
}

// Random programs under every kind of setting keep the allocator's invariants after each step:
// reserved is the sum of the segments, allocated and active the sums of their blocks, the
// recomputed inactive_split equals the statistic, no two free neighbours are left unmerged, and a
// bounded device is never exceeded.
TEST(CachingAllocator, RandomProgramsKeepTheInvariants) {
  const char* settings[] = {"",
                            "expandable_segments:True",
                            "max_split_size_mb:40",
                            "max_split_size_mb:20,max_non_split_rounding_mb:60",
                            "roundup_power2_divisions:4",
                            "roundup_power2_divisions:[1:8,64:2,>:1],expandable_segments:True",
                            "garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
                            "expandable_segments:True,garbage_collection_threshold:0.5,per_process_memory_fraction:1"};
  std::mt19937_64 random(20260601);
  for (const char* text : settings) {
    for (const uint64_t device : {uint64_t{0}, 600 * kMiB}) {
      SCOPED_TRACE(fmt::format("{} on {}", text, device));
      const AllocatorSettings s = parse_alloc_conf(text);
      if (s.per_process_memory_fraction && device == 0) continue;
      CachingAllocator a(s, device);
      std::vector<BlockId> allocated_blocks, pending;
      for (int step = 0; step < 3000; ++step) {
        const uint64_t choice = random() % 10;
        if (choice < 5) {
          // Sizes from bytes to ~100 MiB, log-uniform; three streams.
          const uint64_t bytes = uint64_t{1} << (random() % 27);
          const std::optional<BlockId> b = a.malloc(bytes + random() % bytes, static_cast<int64_t>(random() % 3));
          if (b) allocated_blocks.push_back(*b);
        } else if (choice < 8 && !allocated_blocks.empty()) {
          const size_t i = random() % allocated_blocks.size();
          a.free_requested(allocated_blocks[i]);
          pending.push_back(allocated_blocks[i]);
          allocated_blocks.erase(allocated_blocks.begin() + static_cast<ptrdiff_t>(i));
        } else if (choice < 9 && !pending.empty()) {
          const size_t i = random() % pending.size();
          a.free_completed(pending[i]);
          pending.erase(pending.begin() + static_cast<ptrdiff_t>(i));
        } else if (random() % 20 == 0) {
          a.empty_cache();
        }
        int64_t reserved_sum = 0, allocated_sum = 0, active_sum = 0, split_free = 0;
        for (const SegmentView& segment : a.segments()) {
          reserved_sum += static_cast<int64_t>(segment.total_size);
          for (size_t i = 0; i < segment.blocks.size(); ++i) {
            const BlockView& b = segment.blocks[i];
            if (b.state == BlockState::kActiveAllocated) allocated_sum += static_cast<int64_t>(b.size);
            if (b.state != BlockState::kInactive) active_sum += static_cast<int64_t>(b.size);
            if (b.state == BlockState::kInactive && !segment.expandable && segment.blocks.size() > 1) {
              split_free += static_cast<int64_t>(b.size);
            }
            if (i > 0 && b.state == BlockState::kInactive) {
              ASSERT_NE(segment.blocks[i - 1].state, BlockState::kInactive) << "free neighbours left unmerged";
            }
          }
        }
        ASSERT_EQ(reserved_sum, reserved(a)) << "step " << step;
        ASSERT_EQ(allocated_sum, allocated(a)) << "step " << step;
        ASSERT_EQ(active_sum, a.stats().active_bytes[0].current) << "step " << step;
        ASSERT_EQ(split_free, a.stats().inactive_split_bytes[0].current) << "step " << step;
        if (device != 0) {
          ASSERT_LE(reserved(a), static_cast<int64_t>(device));
        }
      }
    }
  }
}

TEST(AllocConf, ParsesPyTorchSyntax) {
  const AllocatorSettings s = parse_alloc_conf(
      "expandable_segments:True, max_split_size_mb:128,roundup_power2_divisions:4,garbage_collection_threshold:0.8");
  EXPECT_TRUE(s.expandable_segments);
  EXPECT_EQ(s.max_split_size_bytes, 128 * kMiB);
  EXPECT_EQ(s.roundup_power2_divisions[0], 4u);
  EXPECT_EQ(s.roundup_power2_divisions[15], 4u);
  EXPECT_DOUBLE_EQ(s.garbage_collection_threshold, 0.8);
  EXPECT_EQ(describe(s),
            "expandable_segments:True,max_split_size_mb:128,roundup_power2_divisions:4,garbage_collection_threshold:0.8");
  EXPECT_EQ(describe(parse_alloc_conf("")), "default");
  EXPECT_EQ(parse_alloc_conf("backend:native,release_lock_on_cudamalloc:True"), AllocatorSettings{});
}

TEST(AllocConf, ErrorsNameTheKeyAndValue) {
  struct Case {
    const char* text;
    std::vector<std::string> fragments;
  };
  const Case cases[] = {
      {"max_split_size_mb:10", {"max_split_size_mb:10", "at least 20"}},
      {"max_split_size_mb:abc", {"max_split_size_mb must be a whole number", "'abc'"}},
      {"expandable_segments:yes", {"expandable_segments must be True or False", "'yes'"}},
      {"expandable_segment:True", {"unknown key 'expandable_segment'"}},
      {"roundup_power2_divisions:3", {"roundup_power2_divisions", "3 is not a power of 2"}},
      {"roundup_power2_divisions:[100:2]", {"interval 100 is not a power of 2"}},
      {"roundup_power2_divisions:[256:2", {"missing ']'"}},
      {"garbage_collection_threshold:1.5", {"garbage_collection_threshold must be in (0, 1)", "1.5"}},
      {"garbage_collection_threshold", {"expected ':' after garbage_collection_threshold"}},
      {"max_split_size_mb:", {"max_split_size_mb needs a value"}},
      {"expandable_segments:True;max_split_size_mb:20", {"must be True or False", "'True;max_split_size_mb'"}},
      {"backend:cudaMallocAsync", {"not modelled"}},
      {"per_process_memory_fraction:0", {"per_process_memory_fraction must be in (0, 1]"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    try {
      parse_alloc_conf(c.text);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      for (const std::string& fragment : c.fragments) EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tandem::models
