// The cuda backend: every rank of a schedule runs on one GPU (several ranks per GPU; validates the
// kernels and the schedules on a single device). Rank buffers are device memory from
// buffer_space(). Each rank's lane is a CUDA stream; a Send / Recv pair is a device-to-device copy
// (a RecvReduce a reduction kernel reading the sender's data), ordered by events exactly as the
// schedule's semantics (core/schedule.h) require; tiles and alignment as RunContext says.
// RunResult::seconds is the event-timed span of the collective on the device.
// Faults (RunContext::on_send): fail -> Error(kBackend) naming the transfer; stall -> the
// collective does not finish within RunContext::timeout -> Error(kTimeout) naming the ranks;
// delay_factor / bandwidth_factor -> the transfer is slowed by that factor; corrupt -> one bit of
// the received chunk flipped, detected when RunContext::checksums is on (Error(kCorrupt)).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "core/executor.h"

namespace tandem::cuda {

struct CudaOptions {
  int device = 0;  // the GPU every rank runs on
  // Capture each run's launches into a CUDA graph and launch that: the device then runs the
  // schedule without waiting for the host to issue its hundreds of copies, kernels and events one
  // call at a time (what the default path's per-call floor below 64 MiB is suspected to be).
  // RunResult::seconds stays the device time between the start and stop events, around the graph.
  bool graph = false;
};

class CudaExecutor : public Executor {
 public:
  // Throws Error(kUnsupported) "no CUDA device: <reason>" when there is none.
  explicit CudaExecutor(CudaOptions options = {});
  ~CudaExecutor() override;

  std::string name() const override { return "cuda"; }
  BufferSpace* buffer_space() override;
  RunResult run(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                const RunContext& context) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::cuda
