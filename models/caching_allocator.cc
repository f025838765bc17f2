// The caching allocator's rules, each in a function named after the PyTorch function it models
// (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator; c10/core/AllocatorConfig.cpp for
// the settings). docs/memory.md lists them with what is left out.
#include "models/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"

namespace tandem::models {

namespace {

// ---- PYTORCH_CUDA_ALLOC_CONF ----------------------------------------------------------------

// AllocatorConfig::lexArgs: ',' ':' '[' ']' are tokens of their own, spaces vanish.
std::vector<std::string> lex(std::string_view text) {
  std::vector<std::string> tokens;
  std::string word;
  for (char c : text) {
    if (c == ',' || c == ':' || c == '[' || c == ']') {
      if (!word.empty()) tokens.push_back(std::move(word));
      word.clear();
      tokens.emplace_back(1, c);
    } else if (c != ' ') {
      word.push_back(c);
    }
  }
  if (!word.empty()) tokens.push_back(std::move(word));
  return tokens;
}

class ConfParser {
 public:
  explicit ConfParser(std::string_view text) : text_(text), tokens_(lex(text)) {}

  AllocatorSettings parse() {
    AllocatorSettings settings;
    while (i_ < tokens_.size()) {
      const std::string key = tokens_[i_++];
      if (key == "max_split_size_mb" || key == "max_non_split_rounding_mb") {
        expect(":", key);
        const uint64_t mib = whole_number(key, value(key));
        // parseMaxSplitSize: "must be >= kLargeBuffer / kMB"
        if (mib < kLargeBuffer / kMiB) bad("{} must be at least {} (MiB), got {}", key, kLargeBuffer / kMiB, mib);
        const uint64_t bytes = mib > kNoMaxSplitSize / kMiB ? kNoMaxSplitSize : mib * kMiB;
        (key == "max_split_size_mb" ? settings.max_split_size_bytes : settings.max_non_split_rounding_bytes) = bytes;
      } else if (key == "garbage_collection_threshold") {
        expect(":", key);
        const double threshold = real_number(key, value(key));
        if (!(threshold > 0 && threshold < 1)) bad("{} must be in (0, 1), got {}", key, threshold);
        settings.garbage_collection_threshold = threshold;
      } else if (key == "per_process_memory_fraction") {
        expect(":", key);
        const double fraction = real_number(key, value(key));
        if (!(fraction > 0 && fraction <= 1)) bad("{} must be in (0, 1], got {}", key, fraction);
        settings.per_process_memory_fraction = fraction;
      } else if (key == "roundup_power2_divisions") {
        expect(":", key);
        roundup_divisions(settings.roundup_power2_divisions);
      } else if (key == "expandable_segments") {
        expect(":", key);
        settings.expandable_segments = true_or_false(key, value(key));
      } else if (key == "release_lock_on_cudamalloc" || key == "pinned_use_cuda_host_register" ||
                 key == "pinned_use_background_threads") {
        expect(":", key);
        true_or_false(key, value(key));  // no effect on placement
      } else if (key == "pinned_num_register_threads") {
        expect(":", key);
        whole_number(key, value(key));
      } else if (key == "backend") {
        expect(":", key);
        const std::string backend = value(key);
        if (backend == "cudaMallocAsync") bad("backend:cudaMallocAsync is not the caching allocator; not modelled");
        if (backend != "native") bad("backend must be native or cudaMallocAsync, got '{}'", backend);
      } else {
        bad("unknown key '{}' (known: max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions, "
            "garbage_collection_threshold, expandable_segments, per_process_memory_fraction, backend, "
            "release_lock_on_cudamalloc, pinned_*)",
            key);
      }
      if (i_ < tokens_.size()) expect(",", key);
    }
    return settings;
  }

 private:
  template <typename... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> format, Args&&... args) const {
    fail(ErrorCode::kInvalidArgument, "alloc conf '{}': {}", text_, fmt::format(format, std::forward<Args>(args)...));
  }

  void expect(std::string_view token, std::string_view after) {
    if (i_ >= tokens_.size() || tokens_[i_] != token) {
      bad("expected '{}' after {}{}", token, after, i_ < tokens_.size() ? fmt::format(", got '{}'", tokens_[i_]) : "");
    }
    ++i_;
  }

  std::string value(std::string_view key) {
    const bool separator = i_ < tokens_.size() && tokens_[i_].size() == 1 &&
                           std::string_view(",:[]").find(tokens_[i_][0]) != std::string_view::npos;
    if (i_ >= tokens_.size() || separator) {
      bad("{} needs a value", key);
    }
    return tokens_[i_++];
  }

  uint64_t whole_number(std::string_view key, const std::string& text) const {
    if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos) {
      bad("{} must be a whole number, got '{}'", key, text);
    }
    return std::stoull(text);
  }

  double real_number(std::string_view key, const std::string& text) const {
    char* end = nullptr;
    const double number = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(number)) {
      bad("{} must be a number, got '{}'", key, text);
    }
    return number;
  }

  bool true_or_false(std::string_view key, const std::string& text) const {
    if (text != "True" && text != "False") bad("{} must be True or False, got '{}'", key, text);
    return text == "True";
  }

  uint64_t divisions(const std::string& text) const {
    const uint64_t d = whole_number("roundup_power2_divisions", text);
    if (d != 0 && !std::has_single_bit(d)) bad("roundup_power2_divisions: {} is not a power of 2 (or 0)", d);
    return d;
  }

  // parseRoundUpPower2Divisions: "N" for every interval, or "[MB:N,...,>:N]" where MB is a power
  // of two naming the interval [MB, 2 MB) MiB; the first entry also covers the intervals below
  // it, and ">" every interval after the previous entry.
  void roundup_divisions(std::array<uint64_t, kRoundupPower2Intervals>& table) {
    if (i_ < tokens_.size() && tokens_[i_] == "[") {
      ++i_;
      bool first = true;
      size_t last_index = 0;
      while (true) {
        if (i_ >= tokens_.size()) bad("roundup_power2_divisions: missing ']'");
        if (tokens_[i_] == "]") break;
        const std::string interval = tokens_[i_++];
        expect(":", "roundup_power2_divisions interval " + interval);
        const uint64_t d = divisions(value("roundup_power2_divisions"));
        if (interval == ">") {
          std::fill(table.begin() + static_cast<ptrdiff_t>(last_index), table.end(), d);
        } else {
          const uint64_t mib = whole_number("roundup_power2_divisions interval", interval);
          if (!std::has_single_bit(mib)) bad("roundup_power2_divisions: interval {} is not a power of 2 (MiB)", mib);
          const size_t index = std::min<size_t>(std::bit_width(mib) - 1, kRoundupPower2Intervals - 1);
          if (first) std::fill(table.begin(), table.begin() + static_cast<ptrdiff_t>(index), d);
          first = false;
          table[index] = d;
          last_index = index;
        }
        if (i_ < tokens_.size() && tokens_[i_] != "]") expect(",", "roundup_power2_divisions entry");
      }
      ++i_;  // ']'
    } else {
      table.fill(divisions(value("roundup_power2_divisions")));
    }
  }

  std::string_view text_;
  std::vector<std::string> tokens_;
  size_t i_ = 0;
};

std::string number_text(double value) { return fmt::format("{}", value); }

}  // namespace

AllocatorSettings parse_alloc_conf(std::string_view text) { return ConfParser(text).parse(); }

std::string describe(const AllocatorSettings& s) {
  std::vector<std::string> parts;
  if (s.expandable_segments) parts.push_back("expandable_segments:True");
  if (s.max_split_size_bytes != kNoMaxSplitSize) {
    parts.push_back(fmt::format("max_split_size_mb:{}", s.max_split_size_bytes / kMiB));
  }
  if (s.max_non_split_rounding_bytes != kLargeBuffer) {
    parts.push_back(fmt::format("max_non_split_rounding_mb:{}", s.max_non_split_rounding_bytes / kMiB));
  }
  const auto& d = s.roundup_power2_divisions;
  if (std::all_of(d.begin(), d.end(), [&](uint64_t x) { return x == d[0]; })) {
    if (d[0] != 0) parts.push_back(fmt::format("roundup_power2_divisions:{}", d[0]));
  } else {
    std::string list;
    for (int i = 0; i < kRoundupPower2Intervals; ++i) {
      list += fmt::format("{}{}:{}", i == 0 ? "" : ",", uint64_t{1} << i, d[static_cast<size_t>(i)]);
    }
    parts.push_back("roundup_power2_divisions:[" + list + "]");
  }
  if (s.garbage_collection_threshold > 0) {
    parts.push_back("garbage_collection_threshold:" + number_text(s.garbage_collection_threshold));
  }
  if (s.per_process_memory_fraction) {
    parts.push_back("per_process_memory_fraction:" + number_text(*s.per_process_memory_fraction));
  }
  if (parts.empty()) return "default";
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : ",") + part;
  return text;
}

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

bool CachingAllocator::gc_enabled() const {
  return settings_.per_process_memory_fraction.has_value() && settings_.garbage_collection_threshold > 0;
}

uint64_t CachingAllocator::allowed_memory_maximum() const {
  return static_cast<uint64_t>(*settings_.per_process_memory_fraction * static_cast<double>(device_memory_bytes_));
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
  const uint64_t page = pool_kind == Pool::kSmall ? kSmallBuffer : kLargeBuffer;
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
  const uint64_t page = pool == Pool::kSmall ? kSmallBuffer : kLargeBuffer;
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
  const uint64_t page = pool == Pool::kSmall ? kSmallBuffer : kLargeBuffer;
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
