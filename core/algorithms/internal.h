// What the builders of the individual algorithms (core/algorithms/*.cc) share. Each builder is a
// pure function from a spec and a layout to an unvalidated schedule, declared and registered in
// core/algorithms.cc, its only caller. The registry's build_schedule has already checked what every
// builder shares (rank counts, root, channels and pipeline chunks in range, whole nodes where the
// entry needs them, a collective the entry lists); a builder checks only arguments of its own.
#pragma once

#include "core/builder.h"
#include "core/schedule.h"

namespace tandem::algorithms {

// The two buffers, and the lane of the builders that use only one (shorthands every builder shares).
constexpr auto kIn = BufferKind::kInput;
constexpr auto kOut = BufferKind::kOutput;
constexpr int kLane = 0;

// A range of chunk slots (shorthand used by every builder).
inline SlotRange slots(BufferKind buffer, uint32_t first, uint32_t count = 1) { return {buffer, first, count}; }

}  // namespace tandem::algorithms
