// Rank buffers for the commands that move real data (bench, run): host allocations that the checks
// fill and read (core/data_check.h), and, for a backend with memory of its own (cuda, nccl: see
// Executor::buffer_space), device allocations of the same sizes that the runs use. Host backends
// run on the host allocations themselves. Under a process-per-rank launch only this process's
// ranks (Executor::local_ranks) get memory; the other ranks' buffers are null in both views.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/host_memory.h"
#include "core/executor.h"

namespace tandem {

class RunMemory {
 public:
  // Input and output allocations of these sizes for every local rank of an `nranks` collective.
  // Checks host memory first (require_host_memory); device allocation failures throw Error(kBackend).
  RunMemory(Executor& executor, int nranks, size_t input_bytes, size_t output_bytes);
  ~RunMemory();
  RunMemory(const RunMemory&) = delete;
  RunMemory& operator=(const RunMemory&) = delete;

  // Whether runs use memory other than the host view (then upload / download copy between them).
  bool on_device() const { return space_ != nullptr; }
  bool local(int rank) const { return host_inputs_[static_cast<size_t>(rank)] != nullptr; }

  // The buffers of a collective, placed as bench_check's place_buffers places them: the host view
  // for fill_inputs / poison_outputs / count_wrong, the run view for Executor::run.
  std::vector<RankBuffers> host(Collective collective, int64_t count, DataType dtype, bool in_place) const;
  std::vector<RankBuffers> run(Collective collective, int64_t count, DataType dtype, bool in_place) const;

  // Whole allocations, host -> device and back; nothing on host memory.
  void upload() const;
  void download() const;

 private:
  std::vector<RankBuffers> place(const std::vector<void*>& inputs, const std::vector<void*>& outputs,
                                 Collective collective, int64_t count, DataType dtype, bool in_place) const;

  BufferSpace* space_;
  size_t input_bytes_, output_bytes_;
  std::vector<std::unique_ptr<AlignedBuffer>> host_inputs_, host_outputs_;  // null: not a local rank
  std::vector<void*> device_inputs_, device_outputs_;                       // empty on host memory
};

}  // namespace tandem
