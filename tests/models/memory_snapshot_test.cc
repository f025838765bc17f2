// Memory snapshots: the strict reader, the replay and its consistency check, on snapshots written
// by hand in PyTorch's format (tests/support/memory_snapshot_writer.h).
#include "models/memory_snapshot.h"

#include <gtest/gtest.h>

#include <filesystem>
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
    const ConsistencyCheck check = check_consistency(s, 0, pre_trace_memory(s, 0), own);
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
  const PreTraceMemory start = pre_trace_memory(s, 0);
  ASSERT_EQ(start.segments.size(), 1u);  // the 20 MiB segment no segment_alloc made: reserved before
  EXPECT_EQ(start.blocks(), 0u);
  const ConsistencyCheck check = check_consistency(s, 0, start, replay_memory(s.device_traces[0], s.settings, 0));
  EXPECT_TRUE(check.checked);
  EXPECT_FALSE(check.matches);
  EXPECT_NE(check.detail.find("MISMATCH: the snapshot has 14 segment(s), the replay 13"), std::string::npos)
      << check.detail;
  // Replayed from that start, still a mismatch: the first 16 MiB request would have taken the
  // cached 20 MiB segment, where the recorded allocator made a segment of its own.
  const ConsistencyCheck restored =
      check_consistency(s, 0, start, replay_memory(s.device_traces[0], s.settings, 0, &start));
  EXPECT_TRUE(restored.checked);
  EXPECT_FALSE(restored.matches);
  EXPECT_NE(restored.detail.find("MISMATCH"), std::string::npos) << restored.detail;
  EXPECT_NE(restored.detail.find("before recording: 1 segment(s) / 20 MiB reserved and 0 block(s)"), std::string::npos)
      << restored.detail;

  // A segment from before the trace on a stream the trace never uses: replayed from the start,
  // the snapshot is rebuilt exactly.
  MemorySnapshotWriter other = sixteens_then_thirty_twos_snapshot(false);
  other.segment(0x7f3000000000, 1, "large", false, {{20 * kMiB, "inactive", 0}});
  const MemorySnapshot o = parse_memory_snapshot(other.bytes(), "other.pickle");
  const PreTraceMemory other_start = pre_trace_memory(o, 0);
  const ConsistencyCheck other_check =
      check_consistency(o, 0, other_start, replay_memory(o.device_traces[0], o.settings, 0, &other_start));
  EXPECT_TRUE(other_check.matches) << other_check.detail;

  // A trace that frees a block in no segment of the snapshot: the start cannot be rebuilt, and the
  // check says so instead of a mismatch.
  MemorySnapshotWriter late;
  late.free(0x7f0000000000, 4096);
  const MemorySnapshot l = parse_memory_snapshot(late.bytes(), "late.pickle");
  const PreTraceMemory late_start = pre_trace_memory(l, 0);
  EXPECT_EQ(late_start.freed_blocks, 1u);
  EXPECT_EQ(late_start.freed_bytes, 4096u);
  const ConsistencyCheck unknown =
      check_consistency(l, 0, late_start, replay_memory(l.device_traces[0], l.settings, 0, &late_start));
  EXPECT_FALSE(unknown.checked);
  EXPECT_NE(unknown.detail.find("not checked: 0 segment(s) / 0 B were reserved and 1 block(s) / 4 KiB allocated "
                                "before recording started, and the block at 0x7f0000000000, allocated before the "
                                "trace, lies in no segment"),
            std::string::npos)
      << unknown.detail;
}

// Recording started late: a 20 MiB segment held A (5 MiB, still live at the end) and B (3 MiB,
// freed in the trace) before it. Worked by hand: at the start [A 5 | B 3 | free 12]; B's free
// merges it into [A 5 | free 15]; the 4 MiB alloc takes the front of the free block (11 MiB
// remain, split off): [A 5 | C 4 | free 11], which is the snapshot. Allocated: 8 MiB at the
// start, 5 after the free, 9 after C: a peak of 9 MiB in 20 MiB reserved. The trace alone, on an
// empty allocator, makes a 20 MiB segment for C: 4 MiB allocated, 20 MiB reserved.
TEST(MemorySnapshot, MemoryAllocatedBeforeRecordingIsRebuilt) {
  constexpr uint64_t kSegment = 0x7f0000000000;
  MemorySnapshotWriter w;
  w.free(kSegment + 5 * kMiB, 3 * kMiB);   // B, never allocated in the trace
  w.alloc(kSegment + 5 * kMiB, 4 * kMiB);  // C
  w.segment(
      kSegment, 0, "large", false,
      {{5 * kMiB, "active_allocated", 5 * kMiB}, {4 * kMiB, "active_allocated", 4 * kMiB}, {11 * kMiB, "inactive", 0}});
  const MemorySnapshot s = parse_memory_snapshot(w.bytes(), "late.pickle");
  const PreTraceMemory start = pre_trace_memory(s, 0);
  EXPECT_TRUE(start.unrestorable.empty()) << start.unrestorable;
  EXPECT_EQ(start.live_blocks, 1u);
  EXPECT_EQ(start.live_bytes, 5 * kMiB);
  EXPECT_EQ(start.freed_blocks, 1u);
  EXPECT_EQ(start.freed_bytes, 3 * kMiB);
  EXPECT_EQ(start.reserved_bytes, 20 * kMiB);
  ASSERT_EQ(start.segments.size(), 1u);
  ASSERT_EQ(start.segments[0].blocks.size(), 3u);
  EXPECT_EQ(start.segments[0].blocks[2].size, 12 * kMiB);
  EXPECT_EQ(start.segments[0].blocks[2].state, BlockState::kInactive);

  const MemoryReplay with = replay_memory(s.device_traces[0], s.settings, 0, &start);
  EXPECT_EQ(with.peak_allocated_bytes, 9 * kMiB);
  EXPECT_EQ(with.peak_reserved_bytes, 20 * kMiB);
  EXPECT_EQ(with.unknown_frees, 0u);
  EXPECT_EQ(with.stats.num_device_alloc, 0);
  const ConsistencyCheck check = check_consistency(s, 0, start, with);
  EXPECT_TRUE(check.matches) << check.detail;
  EXPECT_NE(check.detail.find("2 block(s) / 8 MiB allocated (1 still active at the end, 1 freed in the trace), "
                              "taken from the segments and the trace's frees, not checked against the trace"),
            std::string::npos)
      << check.detail;

  const MemoryReplay alone = replay_memory(s.device_traces[0], s.settings, 0);
  EXPECT_EQ(alone.peak_allocated_bytes, 4 * kMiB);
  EXPECT_EQ(alone.peak_reserved_bytes, 20 * kMiB);
  EXPECT_EQ(alone.unknown_frees, 1u);

  // A block freed in the trace whose rounded size leaves 1 MiB or less before the next block was
  // handed out whole (the allocator does not split such a remainder off): it takes the gap.
  MemorySnapshotWriter gap;
  gap.free(kSegment, 19 * kMiB + 512 * 1024);  // 19.5 MiB of a 20 MiB segment
  gap.segment(kSegment, 0, "large", false, {{20 * kMiB, "inactive", 0}});
  const MemorySnapshot g = parse_memory_snapshot(gap.bytes(), "gap.pickle");
  const PreTraceMemory gap_start = pre_trace_memory(g, 0);
  EXPECT_EQ(gap_start.freed_bytes, 20 * kMiB);
  EXPECT_TRUE(check_consistency(g, 0, gap_start, replay_memory(g.device_traces[0], g.settings, 0, &gap_start)).matches);
}

// PyTorch writes SIZE_MAX (2^64 - 1, a 9-byte LONG1) for a frame's unknown line: frames are not
// read, so the file is; an integer out of range in a field tandem reads is an error naming it.
TEST(MemorySnapshot, IntegersBeyond64BitsAreAcceptedWhereUnused) {
  const pickle::BigInt unknown_line{std::string("\xff\xff\xff\xff\xff\xff\xff\xff\x00", 9)};
  ASSERT_EQ(unknown_line.decimal(), "18446744073709551615");
  pickle::Value root = sixteens_then_thirty_twos_snapshot(false).value();
  auto& traces = std::get<pickle::List>(std::get<pickle::Dict>(root.v)[1].second.v);
  auto& first = std::get<pickle::Dict>(std::get<pickle::List>(traces[0].v)[0].v);
  for (auto& [key, value] : first) {
    if (key.as_string() == "frames") {
      value = pickle::List{pickle::Dict{{"filename", "??"}, {"line", unknown_line}, {"name", "??"}}};
    }
  }
  const std::string bytes = pickle::dumps(root);
  ASSERT_NE(bytes.find(std::string("\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00", 11)), std::string::npos);
  const MemorySnapshot s = parse_memory_snapshot(bytes, "snap.pickle");
  EXPECT_EQ(s.device_traces[0].size(), 46u);
  EXPECT_TRUE(s.warnings.empty());

  // The same integer as a size tandem reads.
  const pickle::Value bad_size =
      pickle::List{pickle::List{pickle::Dict{{"action", "alloc"}, {"addr", 0}, {"size", unknown_line}, {"stream", 0}}}};
  pickle::Dict top = std::get<pickle::Dict>(root.v);
  top[1].second = bad_size;
  expect_format_error(pickle::dumps(top),
                      {"snap.pickle: device_traces[0][0].size: integer 18446744073709551615 does not fit in 64 bits"});
}

// Keys a newer PyTorch may add are warnings, one per place and key, and the file is read.
TEST(MemorySnapshot, UnknownKeysAreWarnings) {
  pickle::Value root = sixteens_then_thirty_twos_snapshot(false).value();
  pickle::Dict& top = std::get<pickle::Dict>(root.v);
  for (auto& [key, value] : top) {
    if (key.as_string() == "allocator_settings") std::get<pickle::Dict>(value.v).emplace_back("new_setting", 7);
    if (key.as_string() == "device_traces") {
      for (pickle::Value& e : std::get<pickle::List>(std::get<pickle::List>(value.v)[0].v)) {
        std::get<pickle::Dict>(e.v).emplace_back("stack_id", pickle::BigInt{std::string(9, '\x7f')});
      }
    }
  }
  top.emplace_back("extra", 1);
  const MemorySnapshot s = parse_memory_snapshot(pickle::dumps(root), "snap.pickle");
  EXPECT_EQ(s.device_traces[0].size(), 46u);
  ASSERT_EQ(s.warnings.size(), 3u);
  EXPECT_EQ(s.warnings[0], "snap.pickle: (top level): unknown key 'extra' (1 time): ignored");
  EXPECT_EQ(s.warnings[1], "snap.pickle: allocator_settings: unknown key 'new_setting' (1 time): ignored");
  EXPECT_EQ(s.warnings[2], "snap.pickle: device_traces[*][*]: unknown key 'stack_id' (46 times): ignored");
}

// The two snapshots PyTorch wrote in ../shared/reference/pytorch-files/memory/ (its README gives
// the counts). The expected figures come from reading the files once with a restricted Python
// unpickler (pickle.Unpickler whose find_class refuses every global), independently of tandem:
// segments, blocks, the sum of total_size, the trace's length; blocks active at the end whose
// address no alloc in the trace left live (pre-trace, still live), and free_requested entries of
// addresses the trace had not allocated (pre-trace, freed), with their sizes; the peak of the
// requested bytes of active blocks (PyTorch's requested_bytes: up at alloc, down at
// free_completed) with those blocks and for the trace alone, which needs no model of rounding or
// splitting; and the peak allocated with every block rounded up to 512 B only (the model's blocks
// are that or larger: a large-pool remainder of 1 MiB or less is not split off). The script:
// /work/notes/pretrace_facts.py in the session that wrote this test (not shipped).
struct SharedSnapshot {
  const char* file;
  size_t segments, blocks;
  uint64_t reserved_bytes;
  size_t trace_entries;
  size_t live_blocks;
  uint64_t live_bytes;
  size_t freed_blocks;
  uint64_t freed_requested_bytes;
  uint64_t peak_requested_bytes, peak_requested_alone_bytes;
  uint64_t peak_allocated_512_bytes, peak_allocated_512_alone_bytes;
};

TEST(MemorySnapshot, SnapshotsPyTorchWrote) {
  const std::filesystem::path folder = "../shared/reference/pytorch-files/memory";
  if (!std::filesystem::exists(folder)) GTEST_SKIP() << folder << " is absent";
  const SharedSnapshot snapshots[] = {
      {"wedsonlin_medium_128_inference.pickle", 98, 230, 1'763'704'832, 3'840, 223, 1'703'276'544, 0, 0, 1'736'962'048,
       35'651'584, 1'738'928'128, 35'651'584},
      {"bcrafton_memory_snapshot.pickle", 96, 550, 4'238'344'192, 6'486, 225, 1'545'204'736, 222, 1'523'681'280,
       3'849'232'640, 1'999'716'608, 3'853'700'608, 1'999'716'864},
  };
  for (const SharedSnapshot& expected : snapshots) {
    SCOPED_TRACE(expected.file);
    const MemorySnapshot s = read_memory_snapshot(folder / expected.file);
    EXPECT_TRUE(s.warnings.empty());
    ASSERT_EQ(s.segments.size(), expected.segments);
    size_t blocks = 0;
    uint64_t reserved = 0;
    for (const SnapshotSegment& segment : s.segments) {
      blocks += segment.blocks.size();
      reserved += segment.total_size;
    }
    EXPECT_EQ(blocks, expected.blocks);
    EXPECT_EQ(reserved, expected.reserved_bytes);
    ASSERT_EQ(s.device_traces.size(), 1u);
    EXPECT_EQ(s.device_traces[0].size(), expected.trace_entries);

    const PreTraceMemory start = pre_trace_memory(s, 0);
    EXPECT_TRUE(start.unrestorable.empty()) << start.unrestorable;
    EXPECT_EQ(start.segments.size(), expected.segments);  // the traces make no segment
    EXPECT_EQ(start.reserved_bytes, expected.reserved_bytes);
    EXPECT_EQ(start.live_blocks, expected.live_blocks);
    EXPECT_EQ(start.live_bytes, expected.live_bytes);
    EXPECT_EQ(start.freed_blocks, expected.freed_blocks);
    EXPECT_GE(start.freed_bytes, expected.freed_requested_bytes);  // rounded, with unsplit gaps

    const MemoryReplay with = replay_memory(s.device_traces[0], s.settings, 0, &start);
    const ConsistencyCheck check = check_consistency(s, 0, start, with);
    EXPECT_TRUE(check.checked);
    EXPECT_EQ(check.detail.find("MISMATCH"), std::string::npos) << check.detail;
    EXPECT_EQ(with.peak_reserved_bytes, expected.reserved_bytes);  // no cudaMalloc in either trace
    EXPECT_EQ(with.stats.num_device_alloc, 0);
    const MemoryReplay alone = replay_memory(s.device_traces[0], s.settings, 0);
    EXPECT_EQ(alone.unknown_frees, expected.freed_blocks);
    EXPECT_EQ(with.peak_requested_bytes, expected.peak_requested_bytes);
    EXPECT_EQ(alone.peak_requested_bytes, expected.peak_requested_alone_bytes);
    // Unsplit remainders make the model's blocks up to 1 MiB larger than 512 B rounding: a few MiB.
    EXPECT_GE(with.peak_allocated_bytes, expected.peak_allocated_512_bytes);
    EXPECT_LE(with.peak_allocated_bytes, expected.peak_allocated_512_bytes + 8 * kMiB);
    EXPECT_GE(alone.peak_allocated_bytes, expected.peak_allocated_512_alone_bytes);
    EXPECT_LE(alone.peak_allocated_bytes, expected.peak_allocated_512_alone_bytes + 8 * kMiB);
  }
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
  const ConsistencyCheck check = check_consistency(s, 0, pre_trace_memory(s, 0), own);
  EXPECT_TRUE(check.matches) << check.detail;

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
}

}  // namespace
}  // namespace tandem::models
