// The pieces of nccl::NcclExecutor that its files share: NcclExecutor::Impl (the communicators
// this process holds and the steps of a run), LocalRank and its device memory, check_nccl, and the
// state of one schedule-mode run. The files: nccl_executor.cc (construction, the buffer space, run()'s
// argument checks), nccl_executor_communicators.cc (creation, finalize / abort, shrink),
// nccl_executor_wait.cc (the polling waits and their timeouts), nccl_executor_native.cc (NCCL's own
// collectives), nccl_executor_schedule.cc (a schedule's plan, group by group) and
// nccl_executor_faults.cc (injected faults and checksums). Not a public header: only those files
// include it.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "backend/kernels/reduce.h"
#include "backend/launch/launch.h"
#include "backend/nccl/nccl_executor.h"
#include "backend/nccl/nccl_plan.h"
#include "core/error.h"

namespace tandem::nccl {

using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::microseconds(50);
constexpr auto kInitTimeout = std::chrono::seconds(120);     // communicator creation / shrink
constexpr auto kFinalizeTimeout = std::chrono::seconds(10);  // clean shutdown, then abort
constexpr size_t kMinAllocationBytes = 256;                  // allocate() never returns null

// Throws Error(kBackend) "<call> failed at <file>:<line>: <ncclGetErrorString> (<ncclGetLastError>)"
// unless `status` is ncclSuccess or (nonblocking communicators) ncclInProgress.
void check_nccl(ncclResult_t status, const char* call, const char* file, int line, ncclComm_t comm = nullptr);
#define TANDEM_NCCL_CHECK(call) ::tandem::nccl::check_nccl((call), #call, __FILE__, __LINE__)

// Device memory that grows to the largest request and is reused between runs.
class DeviceArea {
 public:
  DeviceArea() = default;
  DeviceArea(const DeviceArea&) = delete;
  DeviceArea& operator=(const DeviceArea&) = delete;
  DeviceArea(DeviceArea&& other) noexcept : data_(std::exchange(other.data_, nullptr)), bytes_(other.bytes_) {}
  ~DeviceArea() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }

  // Call with the area's device current.
  std::byte* reserve(size_t bytes, const char* what, int device) {
    if (data_ != nullptr && bytes <= bytes_) return data_;
    if (data_ != nullptr) TANDEM_CUDA_CHECK(cudaFree(data_));
    data_ = nullptr;
    bytes_ = 0;
    void* data = nullptr;
    const size_t size = std::max(bytes, kMinAllocationBytes);
    const cudaError_t status = cudaMalloc(&data, size);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      fail(ErrorCode::kBackend, "nccl: cannot allocate {} bytes of {} on device {}: {}", bytes, what, device,
           cudaGetErrorString(status));
    }
    data_ = static_cast<std::byte*>(data);
    bytes_ = size;
    return data_;
  }
  std::byte* data() const { return data_; }

 private:
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
};

// One rank this process drives: its device, communicator, stream and the executor's memory for it.
struct LocalRank {
  int rank = 0;  // in the communicator
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  DeviceArea scratch;
  DeviceArea staging;
  DeviceArea checksums;                    // sender sums, expected sums, received sums (u64 each)
  std::vector<DeviceArea> corrupt_copies;  // this run's corrupted messages
};

// nccl_executor.cc: the executor's BufferSpace (device memory on the rank's GPU).
class NcclBufferSpace;

// A local rank's memory, as the plan names it.
struct RankMemory {
  std::byte* input = nullptr;
  std::byte* output = nullptr;
  std::byte* scratch = nullptr;
  std::byte* staging = nullptr;
  int64_t element_bytes = 0;

  std::byte* at(const PlanRange& range) const {
    std::byte* base = nullptr;
    switch (range.buffer) {
      case PlanBuffer::kInput:
        base = input;
        break;
      case PlanBuffer::kOutput:
        base = output;
        break;
      case PlanBuffer::kScratch:
        base = scratch;
        break;
      case PlanBuffer::kStaging:
        base = staging;
        break;
    }
    if (range.count == 0) return base;
    if (base == nullptr) fail(ErrorCode::kInvalidArgument, "nccl: the {} buffer is null", name(range.buffer));
    return base + range.offset * element_bytes;
  }
  size_t bytes(const PlanRange& range) const { return static_cast<size_t>(range.count * element_bytes); }
};

// What the fault hook said about one send op.
struct SendFault {
  TransferEffect effect;
  bool corrupted = false;  // its corrupt copy is made already (first message only)
};

// A local rank's checksum sums on its device (RunContext::checksums).
struct ChecksumSlots {
  unsigned long long* sent = nullptr;      // one per send message
  unsigned long long* expected = nullptr;  // one per receive message: what the sender summed
  unsigned long long* received = nullptr;  // one per receive message: what arrived
  size_t sends = 0;
  size_t recvs = 0;
};

// One schedule-mode run, per local rank (indexed as Impl::ranks).
struct ScheduleRun {
  std::vector<std::map<int64_t, SendFault>> faults;  // by the send's op index
  std::vector<RankMemory> memory;
  std::vector<ChecksumSlots> sums;
  std::vector<size_t> cursor;     // the rank's next group in its plan
  std::vector<bool> stalled;      // an injected stall: the rank posts nothing more
  std::vector<std::pair<int, int>> stall;  // and that send's (peer, fault)
  std::vector<size_t> send_slot;  // checksum slot of the rank's next send message
  std::vector<size_t> recv_slot;  // and of its next receive message
};

struct NcclExecutor::Impl {
  NcclOptions options;
  Launch* launch = nullptr;
  bool multi_process = false;
  int visible_devices = 0;
  std::vector<int> devices;      // single process: the device of each rank of the communicators
  std::vector<LocalRank> ranks;  // the communicators this process holds (empty: none)
  int world = 0;                 // ranks of the communicators
  bool excluded = false;         // MPI: shrink() dropped this process
  std::unique_ptr<NcclBufferSpace> space;
  std::mutex mutex;

  // The communicators (nccl_executor_communicators.cc).
  void abort_all() noexcept;
  void destroy_streams() noexcept;
  void close() noexcept;
  void create_streams();
  void init_single(int nranks);
  void init_mpi();
  void ensure_world(int nranks);
  LocalRank* local_rank(int rank);
  void shrink(std::span<const int> dropped);

  // The waits (nccl_executor_wait.cc).
  void wait_for_communicators(const char* what, std::chrono::milliseconds timeout);
  // Waits for every local stream; RunResult::seconds from `start`.
  RunResult wait(Clock::time_point start, const RunContext& context);

  // A run: its checks (nccl_executor.cc), then native mode (nccl_executor_native.cc) or schedule
  // mode (nccl_executor_schedule.cc).
  RunResult run(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                const RunContext& context);
  RunResult run_native(const CollectiveSpec& spec, std::span<const RankBuffers> buffers, const RunContext& context);
  RunResult run_schedule(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                         const RunContext& context);
  // run_schedule's phases, in the order it runs them (nccl_executor_schedule.cc; the faults and
  // checksums: nccl_executor_faults.cc).
  void ask_send_faults(const NcclPlan& plan, const RunContext& context, ScheduleRun& run);
  void reserve_run_memory(const NcclPlan& plan, std::span<const RankBuffers> buffers, int64_t element_bytes,
                          bool checksums, ScheduleRun& run);
  std::vector<const PlanGroup*> take_groups(const NcclPlan& plan, std::pair<uint32_t, uint32_t> key, ScheduleRun& run);
  std::vector<std::vector<const std::byte*>> prepare_sends(const std::vector<const PlanGroup*>& groups,
                                                           const RunContext& context, ScheduleRun& run);
  void post_group(const std::vector<const PlanGroup*>& groups,
                  const std::vector<std::vector<const std::byte*>>& sources, const RunContext& context,
                  ScheduleRun& run);
  void run_local_steps(const std::vector<const PlanGroup*>& groups, const CollectiveSpec& spec,
                       const RunContext& context, ScheduleRun& run);
  void divide_averages(const NcclPlan& plan, const CollectiveSpec& spec, const ScheduleRun& run);
  void fail_if_stalled(const Schedule& schedule, const RunContext& context, const ScheduleRun& run);
  void check_checksums(const NcclPlan& plan, const ScheduleRun& run);
};

}  // namespace tandem::nccl
