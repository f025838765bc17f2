// Fuzzes the memory-snapshot reader and the replay behind `tandem memory` (it reads snapshots any
// process wrote): every input goes to parse_memory_snapshot; one that parses is replayed under its
// own settings and under expandable segments on a bounded and an unbounded device, and checked
// against its segments. tandem::Error is the expected answer to a bad input; a crash, undefined
// behaviour, a hang or any other exception is a bug. A replay must keep PyTorch's invariants:
// allocated <= reserved after every entry, and peaks at least the final values.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"
#include "models/caching_allocator.h"
#include "models/memory_snapshot.h"

namespace {

[[noreturn]] void bug(const char* what, const std::string& detail) {
  std::fprintf(stderr, "%s: %s\n", what, detail.c_str());
  std::abort();
}

// A fuzzed trace of a million entries is a slow input, not a finding.
constexpr size_t kMaxReplayedEntries = 20'000;

void replay_checked(const tandem::models::MemorySnapshot& snapshot, size_t device,
                    const tandem::models::AllocatorSettings& settings, uint64_t device_memory) {
  const auto& trace = snapshot.device_traces[device];
  if (trace.size() > kMaxReplayedEntries) return;
  try {
    const tandem::models::PreTraceMemory start = tandem::models::pre_trace_memory(snapshot, device);
    const tandem::models::MemoryReplay replay = tandem::models::replay_memory(trace, settings, device_memory, &start);
    for (size_t i = 0; i < replay.allocated_bytes.size(); ++i) {
      if (replay.allocated_bytes[i] > replay.reserved_bytes[i]) bug("replay", "allocated above reserved");
      if (device_memory != 0 && replay.reserved_bytes[i] > device_memory) bug("replay", "reserved above the device");
    }
    if (replay.stats.inactive_split_bytes[0].current < 0 || replay.stats.active_bytes[0].current < 0) {
      bug("replay", "a negative statistic");
    }
    tandem::models::check_consistency(snapshot, device, start, replay);
  } catch (const tandem::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  tandem::models::MemorySnapshot snapshot;
  try {
    snapshot = tandem::models::parse_memory_snapshot(bytes, "fuzz");
  } catch (const tandem::Error&) {
    return 0;
  }
  tandem::models::AllocatorSettings expandable = snapshot.settings;
  expandable.expandable_segments = !expandable.expandable_segments;
  for (size_t device = 0; device < snapshot.device_traces.size(); ++device) {
    replay_checked(snapshot, device, snapshot.settings, 0);
    replay_checked(snapshot, device, expandable, uint64_t{256} << 20);
  }
  return 0;
}
