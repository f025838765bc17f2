// NcclExecutor: a schedule's NCCL plan (nccl_plan.h) or NCCL's own collectives, on nonblocking
// communicators. This file: the constructor (the devices to use; under MPI every process learns
// whether all have a GPU), the buffer space, and run()'s checks of its arguments before the mode's
// path. The other pieces (communicators, waits, native mode, schedule mode, faults): see
// nccl_executor_internal.h.
#include "backend/nccl/nccl_executor.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "backend/kernels/reduce.h"
#include "backend/launch/launch.h"
#include "backend/nccl/nccl_executor_internal.h"
#include "core/error.h"

namespace tandem::nccl {

class NcclBufferSpace final : public BufferSpace {
 public:
  explicit NcclBufferSpace(std::function<int(int)> device_of) : device_of_(std::move(device_of)) {}

  void* allocate(int rank, size_t bytes) override {
    const int device = device_of_(rank);
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    void* data = nullptr;
    const cudaError_t status = cudaMalloc(&data, std::max(bytes, kMinAllocationBytes));
    if (status != cudaSuccess || data == nullptr) {
      (void)cudaGetLastError();
      fail(ErrorCode::kBackend, "nccl: cannot allocate {} bytes for rank {} on device {}: {}", bytes, rank, device,
           cudaGetErrorString(status));
    }
    return data;
  }
  void release(void* buffer) override {
    if (buffer != nullptr) TANDEM_CUDA_CHECK(cudaFree(buffer));
  }
  void upload(void* dst, const void* host_src, size_t bytes) override {
    if (bytes > 0) TANDEM_CUDA_CHECK(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
  }
  void download(void* host_dst, const void* src, size_t bytes) override {
    if (bytes > 0) TANDEM_CUDA_CHECK(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
  }

 private:
  std::function<int(int)> device_of_;
};

RunResult NcclExecutor::Impl::run(const Schedule& schedule, const CollectiveSpec& spec,
                                  std::span<const RankBuffers> buffers, const RunContext& context) {
  const int nranks = schedule.nranks;
  if (spec.collective != schedule.collective || spec.nranks != nranks) {
    fail(ErrorCode::kInvalidArgument, "nccl: the spec ({}, {} ranks) does not match the schedule ({}, {} ranks)",
         tandem::name(spec.collective), spec.nranks, tandem::name(schedule.collective), nranks);
  }
  if (nranks < 1 || buffers.size() != static_cast<size_t>(nranks)) {
    fail(ErrorCode::kInvalidArgument, "nccl: {} rank buffers for a schedule of {} ranks", buffers.size(), nranks);
  }
  if (spec.count < 0) fail(ErrorCode::kInvalidArgument, "nccl: count {} is negative", spec.count);
  if (context.timeout.count() <= 0) {
    fail(ErrorCode::kInvalidArgument, "nccl: timeout must be positive, got {} ms", context.timeout.count());
  }
  ensure_world(nranks);
  return options.mode == NcclMode::kNative ? run_native(spec, buffers, context)
                                           : run_schedule(schedule, spec, buffers, context);
}

NcclExecutor::NcclExecutor(NcclOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& impl = *impl_;
  impl.options = options;
  impl.launch = &current_launch();
  impl.multi_process = impl.launch->info().kind == LaunchKind::kMpi;
  impl.visible_devices = cuda::device_count();
  if (impl.multi_process) {
    // Every process learns whether all have a GPU, so that none waits in the id broadcast.
    std::vector<std::byte> mine(1, std::byte{impl.visible_devices > 0 ? uint8_t{1} : uint8_t{0}});
    const auto all = impl.launch->all_gather(mine);
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].at(0) == std::byte{0}) {
        fail(ErrorCode::kUnsupported, "no CUDA device: process {} ({}) sees no GPU", r,
             r == static_cast<size_t>(impl.launch->info().rank) ? impl.launch->info().describe() : "another host");
      }
    }
  } else if (impl.visible_devices == 0) {
    fail(ErrorCode::kUnsupported,
         "no CUDA device: the nccl backend needs at least one GPU and cudaGetDeviceCount "
         "found none ({})",
         impl.launch->info().describe());
  }
  if (options.devices < 0 || options.devices > impl.visible_devices) {
    fail(ErrorCode::kInvalidArgument, "nccl: NcclOptions::devices = {}, but {} GPUs are visible", options.devices,
         impl.visible_devices);
  }
  if (impl.multi_process) {
    impl.init_mpi();
  } else {
    const int devices = options.devices == 0 ? impl.visible_devices : options.devices;
    for (int d = 0; d < devices; ++d) impl.devices.push_back(d);
  }
  impl.space = std::make_unique<NcclBufferSpace>([this](int rank) {
    Impl& self = *impl_;
    if (self.multi_process) return self.ranks.empty() ? 0 : self.ranks[0].device;
    if (self.devices.empty()) fail(ErrorCode::kInvalidArgument, "nccl: no devices left for rank {}", rank);
    return self.devices[static_cast<size_t>(rank) % self.devices.size()];
  });
}

NcclExecutor::~NcclExecutor() {
  if (impl_) impl_->close();
}

BufferSpace* NcclExecutor::buffer_space() { return impl_->space.get(); }

std::vector<int> NcclExecutor::local_ranks(int nranks) const {
  if (!impl_->multi_process) return Executor::local_ranks(nranks);
  if (impl_->ranks.empty()) return {};
  return {impl_->ranks[0].rank};
}

RunResult NcclExecutor::run(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                            const RunContext& context) {
  std::lock_guard lock(impl_->mutex);
  return impl_->run(schedule, spec, buffers, context);
}

void NcclExecutor::shrink(std::span<const int> ranks) {
  std::lock_guard lock(impl_->mutex);
  impl_->shrink(ranks);
}

}  // namespace tandem::nccl
