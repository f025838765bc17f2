// Memory snapshots: the strict reader, the replay and its consistency check, on snapshots written
// by hand in PyTorch's format (tests/support/memory_snapshot_writer.h).
#include "models/memory_snapshot.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/pickle.h"
#include "tests/support/memory_snapshot_writer.h"

namespace tandem::models {
namespace {

using testing::MemorySnapshotWriter;
using testing::sixteens_then_thirty_twos_snapshot;

void expect_format_error(const std::string& bytes, const std::vector<std::string>& fragments) {
  try {
    parse_memory_snapshot(bytes, "snap.pickle");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat);
    for (const std::string& fragment : fragments) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what() << " lacks " << fragment;
    }
  }
}

TEST(MemorySnapshot, ReadsPyTorchsFields) {
  const MemorySnapshot s = parse_memory_snapshot(sixteens_then_thirty_twos_snapshot(true).bytes(), "snap.pickle");
  ASSERT_EQ(s.device_traces.size(), 1u);
  EXPECT_EQ(s.device_traces[0].size(), 1u + 3 + 2 + 7 + 8 + 16 + 4);
  EXPECT_EQ(s.device_traces[0][0].action, TraceAction::kSegmentMap);
  EXPECT_EQ(s.device_traces[0][1].action, TraceAction::kAlloc);
  EXPECT_EQ(s.device_traces[0][1].size, 1000u);
  ASSERT_EQ(s.segments.size(), 2u);
  EXPECT_EQ(s.segments[0].pool, Pool::kSmall);
  EXPECT_TRUE(s.segments[1].expandable);
  EXPECT_EQ(s.segments[1].total_size, 140 * kMiB);
  EXPECT_EQ(s.segments[1].blocks[4].state, BlockState::kInactive);
  EXPECT_TRUE(s.has_settings);
  EXPECT_TRUE(s.settings.expandable_segments);
  EXPECT_EQ(s.settings.max_split_size_bytes, kNoMaxSplitSize);  // recorded as -1
  EXPECT_EQ(s.alloc_conf, "expandable_segments:True");

  MemorySnapshotWriter w;
  w.settings("max_split_size_mb:128,roundup_power2_divisions:4", false, 128 * kMiB, 0, 4);
  const MemorySnapshot t = parse_memory_snapshot(w.bytes(), "t.pickle");
  EXPECT_EQ(t.settings, parse_alloc_conf("max_split_size_mb:128,roundup_power2_divisions:4"));
}

// Replaying the snapshot under its own settings rebuilds its segments, both ways of recording it.
TEST(MemorySnapshot, ReplayUnderItsOwnSettingsReproducesTheSegments) {
  for (const bool expandable : {false, true}) {
    SCOPED_TRACE(expandable ? "expandable" : "default");
    const MemorySnapshot s =
        parse_memory_snapshot(sixteens_then_thirty_twos_snapshot(expandable).bytes(), "snap.pickle");
    const MemoryReplay own = replay_memory(s.device_traces[0], s.settings, 0);
    const ConsistencyCheck check = check_consistency(s, 0, own);
    EXPECT_TRUE(check.checked);
    EXPECT_TRUE(check.matches) << check.detail;
    EXPECT_EQ(check.segments, expandable ? 2u : 13u);
    EXPECT_EQ(own.stats.num_device_alloc, expandable ? 8 : 13);
  }
}

// The default-recorded snapshot replayed both ways: 258 MiB reserved without expandable segments,
// 142 MiB with them. At the default's peak (the last alloc) 128 MiB + 2 KiB are allocated:
// internal fragmentation 2 x (1024 - 1000) B, external 258 MiB - allocated.
TEST(MemorySnapshot, ReplayUnderOtherSettings) {
  const MemorySnapshot s = parse_memory_snapshot(sixteens_then_thirty_twos_snapshot(false).bytes(), "snap.pickle");
  const std::vector<TraceEntry>& trace = s.device_traces[0];
  const MemoryReplay plain = replay_memory(trace, s.settings, 0);
  EXPECT_EQ(plain.peak_reserved_bytes, 258 * kMiB);
  EXPECT_EQ(plain.peak_reserved_index, trace.size() - 1);
  EXPECT_EQ(plain.peak_allocated_bytes, 128 * kMiB + 2048);  // the small free came first
  EXPECT_EQ(plain.allocated_at_peak_reserved_bytes, 128 * kMiB + 2048);
  EXPECT_EQ(plain.internal_at_peak_bytes, 48u);
  EXPECT_EQ(plain.external_at_peak_bytes, 130 * kMiB - 2048);
  EXPECT_DOUBLE_EQ(plain.fragmentation_at_peak, 1.0 - (128.0 * kMiB + 2048) / (258.0 * kMiB));
  EXPECT_EQ(plain.stats.num_device_alloc, 13);
  ASSERT_EQ(plain.reserved_bytes.size(), trace.size());
  EXPECT_EQ(plain.reserved_bytes.front(), 0u);  // a segment_alloc entry: the model allocates at the alloc
  EXPECT_EQ(plain.reserved_bytes[1], 2 * kMiB);

  const MemoryReplay expandable = replay_memory(trace, parse_alloc_conf("expandable_segments:True"), 0);
  EXPECT_EQ(expandable.peak_reserved_bytes, 142 * kMiB);
  EXPECT_EQ(expandable.peak_allocated_bytes, 128 * kMiB + 2048);
  EXPECT_EQ(expandable.stats.num_device_alloc, 8);
  EXPECT_TRUE(expandable.ooms.empty());

  // On a 200 MiB device the default runs short at the third 32 MiB (2 + 128 + 2 x 32 = 194 MiB are
  // reserved): the OOM path frees the 8 cached 16 MiB segments (not the split small one) and the
  // retry succeeds. No OOM, one retry, a peak of 194 MiB.
  const MemoryReplay small_device = replay_memory(trace, s.settings, 200 * kMiB);
  EXPECT_TRUE(small_device.ooms.empty());
  EXPECT_EQ(small_device.stats.num_alloc_retries, 1);
  EXPECT_EQ(small_device.peak_reserved_bytes, 194 * kMiB);
  // On a 100 MiB device the seventh 16 MiB cannot fit (2 + 7 x 16 = 114 > 100) and nothing is
  // cached: an OOM, with the request named.
  const MemoryReplay tiny = replay_memory(trace, s.settings, 100 * kMiB);
  ASSERT_FALSE(tiny.ooms.empty());
  EXPECT_EQ(tiny.ooms[0].bytes, 16 * kMiB);
  EXPECT_EQ(tiny.ooms[0].trace_index, 6u + 2 * 6 + 1);  // the small prelude, 6 x (segment_alloc, alloc), segment_alloc
  EXPECT_EQ(trace[tiny.ooms[0].trace_index].action, TraceAction::kAlloc);
}

TEST(MemorySnapshot, ConsistencyCheckFindsADifference) {
  MemorySnapshotWriter w = sixteens_then_thirty_twos_snapshot(false);
  w.segment(0x7f3000000000, 0, "large", false, {{20 * kMiB, "inactive", 0}});  // a segment the trace never made
  const MemorySnapshot s = parse_memory_snapshot(w.bytes(), "snap.pickle");
  const ConsistencyCheck check = check_consistency(s, 0, replay_memory(s.device_traces[0], s.settings, 0));
  EXPECT_TRUE(check.checked);
  EXPECT_FALSE(check.matches);
  EXPECT_NE(check.detail.find("MISMATCH: the snapshot has 14 segment(s), the replay 13"), std::string::npos)
      << check.detail;

  // A trace that frees what it never allocated began late: the check cannot be made.
  MemorySnapshotWriter late;
  late.free(0x7f0000000000, 4096);
  const MemorySnapshot l = parse_memory_snapshot(late.bytes(), "late.pickle");
  const ConsistencyCheck unknown = check_consistency(l, 0, replay_memory(l.device_traces[0], l.settings, 0));
  EXPECT_FALSE(unknown.checked);
  EXPECT_NE(unknown.detail.find("frees 1 block(s) it never allocated"), std::string::npos) << unknown.detail;
}

// A segment_free entry is an empty_cache() (or a malloc's release on its OOM path, which frees
// the same): the model releases its cached segments there too.
TEST(MemorySnapshot, EmptyCacheIsReplayed) {
  constexpr uint64_t kBase = 0x7f0000000000;
  MemorySnapshotWriter w;
  w.entry("segment_alloc", kBase, 16 * kMiB).alloc(kBase, 16 * kMiB).free(kBase, 16 * kMiB);
  w.entry("segment_free", kBase, 16 * kMiB);
  w.entry("segment_alloc", kBase, 32 * kMiB).alloc(kBase, 32 * kMiB);
  w.segment(kBase, 0, "large", false, {{32 * kMiB, "active_allocated", 32 * kMiB}});
  const MemorySnapshot s = parse_memory_snapshot(w.bytes(), "snap.pickle");
  const MemoryReplay own = replay_memory(s.device_traces[0], s.settings, 0);
  EXPECT_EQ(own.empty_cache_calls, 1u);
  EXPECT_EQ(own.peak_reserved_bytes, 32 * kMiB);
  EXPECT_TRUE(check_consistency(s, 0, own).matches) << check_consistency(s, 0, own).detail;

  // Two segment_free in a row are one call.
  MemorySnapshotWriter two;
  two.entry("segment_alloc", kBase, 16 * kMiB).alloc(kBase, 16 * kMiB).free(kBase, 16 * kMiB);
  two.entry("segment_free", kBase, 16 * kMiB).entry("segment_free", kBase, 16 * kMiB).entry("snapshot", 0, 0);
  const MemorySnapshot t = parse_memory_snapshot(two.bytes(), "two.pickle");
  EXPECT_EQ(replay_memory(t.device_traces[0], t.settings, 0).empty_cache_calls, 1u);
}

// An oom entry records the device's free bytes: with what was reserved then, the device's size.
TEST(MemorySnapshot, DeviceMemoryFromAnOomEntry) {
  constexpr uint64_t kBase = 0x7f0000000000;
  MemorySnapshotWriter w;
  w.entry("segment_alloc", kBase, 60 * kMiB).alloc(kBase, 60 * kMiB);
  w.entry("oom", 30 * kMiB, 50 * kMiB);  // 30 MiB free on the device, 50 MiB asked
  const MemorySnapshot s = parse_memory_snapshot(w.bytes(), "snap.pickle");
  EXPECT_EQ(device_memory_from_oom(s.device_traces[0], s.settings), 90 * kMiB);
  const MemoryReplay replay = replay_memory(s.device_traces[0], s.settings, 90 * kMiB);
  ASSERT_EQ(replay.ooms.size(), 1u);
  EXPECT_EQ(replay.ooms[0].trace_index, 2u);
  EXPECT_EQ(replay.ooms[0].bytes, 50 * kMiB);
  EXPECT_EQ(device_memory_from_oom({}, s.settings), 0u);
}

TEST(MemorySnapshot, ErrorsNameTheFileAndTheField) {
  using pickle::Dict;
  using pickle::List;
  using pickle::Value;
  const auto with = [](const std::string& key, const Value& value) {
    pickle::Value root = sixteens_then_thirty_twos_snapshot(false).value();
    Dict& d = std::get<Dict>(root.v);
    for (auto& [k, v] : d) {
      if (k.as_string() == key) {
        v = value;
        return pickle::dumps(root);
      }
    }
    d.emplace_back(key, value);
    return pickle::dumps(root);
  };
  expect_format_error("", {"snap.pickle", "empty memory snapshot"});
  expect_format_error("not a pickle", {"snap.pickle", "not a memory snapshot pickle"});
  expect_format_error(pickle::dumps(List{}), {"snap.pickle: (top level): expected dict, got list"});
  expect_format_error(with("extra", 1), {"(top level): unknown key 'extra'"});
  expect_format_error(pickle::dumps(Dict{{"segments", List{}}}), {"missing key 'device_traces'"});
  const Value bad_action = List{List{Dict{{"action", "mallc"}, {"addr", 0}, {"size", 1}, {"stream", 0}}}};
  expect_format_error(with("device_traces", bad_action), {"snap.pickle: device_traces[0][0].action: unknown action 'mallc'"});
  const Value bad_size = List{List{Dict{{"action", "alloc"}, {"addr", 0}, {"size", "1"}, {"stream", 0}}}};
  expect_format_error(with("device_traces", bad_size), {"device_traces[0][0].size", "expected int, got str"});
  const Value negative = List{List{Dict{{"action", "alloc"}, {"addr", -5}, {"size", 1}, {"stream", 0}}}};
  expect_format_error(with("device_traces", negative), {"device_traces[0][0].addr: a negative size or address -5"});
  const Value no_addr = List{List{Dict{{"action", "alloc"}, {"size", 1}, {"stream", 0}}}};
  expect_format_error(with("device_traces", no_addr), {"device_traces[0][0]: missing key 'addr'"});
  const Value bad_segment = List{Dict{{"device", 0}, {"address", 0}, {"total_size", 100}, {"stream", 0},
                                      {"segment_type", "large"},
                                      {"blocks", List{Dict{{"size", 60}, {"state", "inactive"}}}}}};
  expect_format_error(with("segments", bad_segment), {"segments[0].blocks: the blocks add up to 60 bytes, total_size is 100"});
  const Value bad_state = List{Dict{{"device", 0}, {"address", 0}, {"total_size", 100}, {"stream", 0},
                                    {"segment_type", "large"},
                                    {"blocks", List{Dict{{"size", 100}, {"state", "free"}}}}}};
  expect_format_error(with("segments", bad_state), {"segments[0].blocks[0].state: 'free'"});
  const Value bad_device = List{Dict{{"device", 3}, {"address", 0}, {"total_size", 0}, {"stream", 0},
                                     {"segment_type", "large"}, {"blocks", List{}}}};
  expect_format_error(with("segments", bad_device), {"a segment on device 3, but device_traces has 1 devices"});
  const Value bad_settings = Dict{{"max_split_size", 1024}};
  expect_format_error(with("allocator_settings", bad_settings), {"allocator_settings.max_split_size", "below"});
  const Value bad_divisions = Dict{{"roundup_power2_divisions", Dict{{"3", 4}}}};
  expect_format_error(with("allocator_settings", bad_divisions), {"roundup_power2_divisions", "key '3'"});
  const Value unknown_setting = Dict{{"expandable", true}};
  expect_format_error(with("allocator_settings", unknown_setting), {"allocator_settings: unknown key 'expandable'"});
}

}  // namespace
}  // namespace tandem::models
