// Writes memory snapshots in PyTorch's format (torch.cuda.memory._dump_snapshot: a pickled dict of
// segments, device_traces and allocator_settings, with the keys torch/csrc/cuda/Module.cpp
// writes), through the project's pickle writer (core/pickle.h), for tests that must not need
// PyTorch. The test states every trace entry and every segment itself, so what a snapshot holds
// is worked out by hand, never by the model under test.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/pickle.h"

namespace tandem::testing {

class MemorySnapshotWriter {
 public:
  struct Block {
    uint64_t size;
    std::string state;  // "active_allocated", "active_pending_free", "inactive"
    uint64_t requested_size = 0;
  };

  // One trace entry on device 0. `time_us` counts up by one per entry.
  MemorySnapshotWriter& entry(const std::string& action, uint64_t address, uint64_t size, int64_t stream = 0) {
    pickle::Dict e{{"action", action},
                   {action == "oom" ? "device_free" : "addr", static_cast<int64_t>(address)},
                   {"size", static_cast<int64_t>(size)},
                   {"stream", stream},
                   {"time_us", static_cast<int64_t>(1'700'000'000'000'000 + trace_.size())},
                   {"frames", pickle::List{pickle::Dict{{"filename", "train.py"}, {"line", 12}, {"name", "step"}}}}};
    trace_.push_back(std::move(e));
    return *this;
  }
  MemorySnapshotWriter& alloc(uint64_t address, uint64_t size, int64_t stream = 0) {
    return entry("alloc", address, size, stream);
  }
  // free_requested then free_completed, as PyTorch records a free without recordStream.
  MemorySnapshotWriter& free(uint64_t address, uint64_t requested_size, int64_t stream = 0) {
    entry("free_requested", address, requested_size, stream);
    return entry("free_completed", address, requested_size, stream);
  }

  // One segment of device 0; blocks start at `address`, in order.
  MemorySnapshotWriter& segment(uint64_t address, int64_t stream, const std::string& type, bool expandable,
                                const std::vector<Block>& blocks) {
    pickle::List block_list;
    uint64_t total = 0, allocated = 0, active = 0, requested = 0;
    for (const Block& b : blocks) {
      block_list.push_back(pickle::Dict{{"address", static_cast<int64_t>(address + total)},
                                        {"size", static_cast<int64_t>(b.size)},
                                        {"requested_size", static_cast<int64_t>(b.requested_size)},
                                        {"state", b.state},
                                        {"frames", pickle::List{}}});
      total += b.size;
      if (b.state == "active_allocated") allocated += b.size;
      if (b.state != "inactive") {
        active += b.size;
        requested += b.requested_size;
      }
    }
    segments_.push_back(pickle::Dict{{"device", 0},
                                     {"address", static_cast<int64_t>(address)},
                                     {"total_size", static_cast<int64_t>(total)},
                                     {"allocated_size", static_cast<int64_t>(allocated)},
                                     {"active_size", static_cast<int64_t>(active)},
                                     {"requested_size", static_cast<int64_t>(requested)},
                                     {"stream", stream},
                                     {"segment_type", type},
                                     {"segment_pool_id", pickle::Tuple{{0, 0}}},
                                     {"is_expandable", expandable},
                                     {"frames", pickle::List{}},
                                     {"blocks", std::move(block_list)}});
    return *this;
  }

  // allocator_settings as Module.cpp writes them: max_split_size -1 when unlimited, the
  // divisions per interval keyed by its start in MiB ("1", "2", ... "32768").
  MemorySnapshotWriter& settings(const std::string& alloc_conf, bool expandable, int64_t max_split_size = -1,
                                 double gc_threshold = 0, uint64_t divisions = 0) {
    pickle::Dict roundup;
    for (int i = 0; i < 16; ++i) roundup.emplace_back(std::to_string(1 << i), static_cast<int64_t>(divisions));
    settings_ = pickle::Dict{{"PYTORCH_CUDA_ALLOC_CONF", alloc_conf},
                             {"max_split_size", max_split_size},
                             {"garbage_collection_threshold", gc_threshold},
                             {"expandable_segments", expandable},
                             {"pinned_num_register_threads", 1},
                             {"release_lock_on_cudamalloc", false},
                             {"pinned_use_cuda_host_register", false},
                             {"roundup_power2_divisions", std::move(roundup)}};
    return *this;
  }

  pickle::Value value() const {
    pickle::Dict root{{"segments", segments_}, {"device_traces", pickle::List{trace_}}};
    if (!settings_.empty()) root.emplace_back("allocator_settings", settings_);
    return root;
  }
  std::string bytes() const { return pickle::dumps(value()); }

 private:
  pickle::List trace_;
  pickle::List segments_;
  pickle::Dict settings_;
};

}  // namespace tandem::testing

namespace tandem::testing {

// The snapshot worked out in tests/models/caching_allocator_test.cc (8 x 16 MiB allocated and
// freed, then 4 x 32 MiB), as PyTorch records it, with a small-pool prelude: three 1000 B tensors
// (1024 B blocks at the front of a 2 MiB segment) and the middle one freed. Recorded without
// expandable segments (13 cudaMalloc: 2 MiB, 8 x 16 MiB, 4 x 32 MiB; 258 MiB reserved) or with
// them (8 maps: one 2 MiB small page and 7 x 20 MiB large pages; 142 MiB mapped).
inline MemorySnapshotWriter sixteens_then_thirty_twos_snapshot(bool expandable) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  constexpr uint64_t kSmall = 0x7f0000000000;  // where the recorded allocator put things
  constexpr uint64_t kLarge = 0x7f1000000000;
  constexpr uint64_t kLater = 0x7f2000000000;
  MemorySnapshotWriter w;
  w.settings(expandable ? "expandable_segments:True" : "", expandable);
  w.entry(expandable ? "segment_map" : "segment_alloc", kSmall, 2 * kMiB);
  for (uint64_t i = 0; i < 3; ++i) w.alloc(kSmall + 1024 * i, 1000);
  w.free(kSmall + 1024, 1000);
  // The k-th 16 MiB block ends at 16 (k + 1) MiB; with expandable segments the mapped end grows in
  // 20 MiB pages: maps before blocks 0, 1, 2, 3, 5, 6, 7 (block 4 fits the tail of page 3).
  for (uint64_t k = 0; k < 8; ++k) {
    if (!expandable) {
      w.entry("segment_alloc", kLarge + 16 * kMiB * k, 16 * kMiB);
    } else if (k != 4) {
      const uint64_t page = k < 4 ? k : k - 1;
      w.entry("segment_map", kLarge + 20 * kMiB * page, 20 * kMiB);
    }
    w.alloc(kLarge + 16 * kMiB * k, 16 * kMiB);
  }
  for (uint64_t k = 0; k < 8; ++k) w.free(kLarge + 16 * kMiB * k, 16 * kMiB);
  for (uint64_t j = 0; j < 4; ++j) {
    const uint64_t address = expandable ? kLarge + 32 * kMiB * j : kLater + 32 * kMiB * j;
    if (!expandable) w.entry("segment_alloc", address, 32 * kMiB);
    w.alloc(address, 32 * kMiB);
  }
  const std::vector<MemorySnapshotWriter::Block> small = {{1024, "active_allocated", 1000},
                                                          {1024, "inactive", 1000},
                                                          {1024, "active_allocated", 1000},
                                                          {2 * kMiB - 3072, "inactive", 0}};
  w.segment(kSmall, 0, "small", expandable, small);
  if (expandable) {
    std::vector<MemorySnapshotWriter::Block> large(4, {32 * kMiB, "active_allocated", 32 * kMiB});
    large.push_back({12 * kMiB, "inactive", 0});
    w.segment(kLarge, 0, "large", true, large);
  } else {
    for (uint64_t k = 0; k < 8; ++k) w.segment(kLarge + 16 * kMiB * k, 0, "large", false, {{16 * kMiB, "inactive", 16 * kMiB}});
    for (uint64_t j = 0; j < 4; ++j) {
      w.segment(kLater + 32 * kMiB * j, 0, "large", false, {{32 * kMiB, "active_allocated", 32 * kMiB}});
    }
  }
  return w;
}

}  // namespace tandem::testing
