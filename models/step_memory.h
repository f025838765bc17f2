// A training step's memory timeline on one GPU: the busiest pipeline stage's rank (the stage
// memory_per_gpu reports) issues its allocations and frees per stream in the order PyTorch would
// (parameters, optimizer states, FSDP units gathered in prefetch order, activations per microbatch
// and layer, collective buffers, logits, gradients), and the caching-allocator model
// (caching_allocator.h) turns them into reserved memory. Sizes are those of memory_per_gpu, at the
// granularity of tensors (q, k, v, o, gate, up, down, norms; one activation tensor per op output),
// so that the allocator's rounding, splitting and segment reuse are exercised as in a real step.
// docs/memory.md ("The training-step timeline") lists what is allocated when.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "models/caching_allocator.h"
#include "models/cluster.h"
#include "models/workload.h"

namespace tandem::models {

// The first allocation the device could not serve.
struct StepMemoryOom {
  uint64_t bytes = 0;  // the request
  int64_t stream = 0;  // 0: compute, 1: the FSDP all-gather stream
  std::string phase;   // "backward of microbatch 4, layer 3"
};

struct StepMemoryResult {
  AllocatorSettings settings;
  int stage = 0;  // the pipeline stage simulated (memory_per_gpu's busiest)
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  // At the peak of reserved (as `tandem memory` defines it, memory_snapshot.h's MemoryReplay):
  // allocated there, and fragmentation = 1 - allocated / reserved.
  uint64_t allocated_at_peak_reserved_bytes = 0;
  double fragmentation_at_peak = 0;
  std::string peak_phase;           // where allocated peaked: "step 2, forward of microbatch 1, layer 79"
  std::string peak_reserved_phase;  // where reserved first reached its peak (the last segment made)
  int64_t device_mallocs = 0;       // cudaMalloc calls and expandable page maps
  int64_t allocations = 0;          // tensors the program allocated (both steps)
  double runtime_bytes = 0;         // outside the allocator (kRuntimeReserveBytes)
  std::optional<StepMemoryOom> oom;
  // What the GPU needs: peak reserved plus the runtime outside the allocator.
  double total_bytes() const { return static_cast<double>(peak_reserved_bytes) + runtime_bytes; }
};

// The microbatches a 1F1B stage runs in its steady state repeat the same allocations and frees, so
// after the warm-up a few of them reach the step's peak allocated. all_microbatches = false runs
// at most pp + 2 microbatches (interleaved: 3 pp): the same peak allocated, and peak reserved within
// 1% (a late segment made by a rare transient is missed; the fragmentation at the peak can differ
// more). `tandem plan` takes it; scenarios run every microbatch.
inline constexpr int kSteadyMicrobatchesBeyondPp = 2;
inline constexpr int kInterleavedMicrobatchGroups = 3;

// Two training steps of `config` (the first one with an empty cache and no optimizer state; after it
// the optimizer's states are allocated and the gradients freed, as optimizer.step() and
// zero_grad(set_to_none=True) do), replayed through CachingAllocator(settings, the GPU's memory
// minus kRuntimeReserveBytes). Peaks are over both steps: the second is the steady state.
// Precondition: `derived` is derive(config, ...)'s. Throws what memory_per_gpu throws.
StepMemoryResult step_memory(const TrainingConfig& config, const DerivedLayout& derived, const GpuSpec& gpu,
                             const AllocatorSettings& settings, bool all_microbatches = true);

}  // namespace tandem::models
