// NcclExecutor: a schedule's NCCL plan (nccl_plan.h) or NCCL's own collectives, on nonblocking
// communicators.
//
// Communicators. Single process: one communicator per rank of the collective, rank r on device
// devices_[r] (0..n-1 at first), created together inside one ncclGroupStart / End with
// ncclCommInitRankConfig (what ncclCommInitAll does, but with a config: ncclCommInitAll takes none,
// and the communicators must be nonblocking to be abortable). They are rebuilt when a run asks for
// another rank count. Under MPI: one communicator for this process's rank, created once from rank
// 0's ncclUniqueId (unique_id.h); every run must use the world size (or the size after shrink()).
//
// A run (kSchedule). The plan of every local rank is built, the fault hook asked about every send
// up front (a failing send throws Error(kFault) before anything is enqueued; under MPI every
// process learns of it, so none waits for a peer that gave up), then for each (tile, level) in
// order: every local rank's delays (spin kernels), one ncclGroupStart; the ranks' sends / receives
// (ncclSend / ncclRecv of bytes, ncclUint8); ncclGroupEnd; then each rank's local steps on its
// stream (cudaMemcpyAsync copies, launch_reduce). One thread drives all local ranks, so a level's
// groups of all of them go into one NCCL group (NCCL needs that to progress several ranks from one
// thread). The wait polls ncclCommGetAsyncError and cudaStreamQuery every kPollInterval; past
// RunContext::timeout without a rank finishing it aborts every local communicator (they are
// rebuilt on the next run) and throws Error(kTimeout) naming the ranks that did not finish.
//
// Faults, kSchedule only (kNative rejects a hook: NCCL's kernels have no per-transfer seam):
//   - fail: Error(kFault) before the run starts;
//   - stall: the sending rank posts nothing from that group on: its peers wait until the timeout;
//   - delay / bandwidth: the sender's stream spins (factor - 1) x the transfer's expected time
//     (bytes / kExpectedLinkBytesPerSecond, at least kMinSlowedTransfer_s) before the group;
//   - corrupt: the sender sends a copy of its first non-empty message with one bit (kCorruptBitMask)
//     of its middle byte flipped.
// Checksums (RunContext::checksums): each message is followed, in the same group, by an 8-byte
// message with the sender's checksum of it (launch_checksum, taken before any corruption); the
// receiver sums what it got after the group, and a difference throws Error(kCorrupt) after the run.
#include "backend/nccl/nccl_executor.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "backend/kernels/fault_kernels.h"
#include "backend/kernels/reduce.h"
#include "backend/launch/launch.h"
#include "backend/nccl/nccl_plan.h"
#include "backend/nccl/unique_id.h"
#include "core/error.h"
#include "core/fault_report.h"

namespace tandem::nccl {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::microseconds(50);
constexpr auto kInitTimeout = std::chrono::seconds(120);     // communicator creation / shrink
constexpr auto kFinalizeTimeout = std::chrono::seconds(10);  // clean shutdown, then abort
constexpr double kExpectedLinkBytesPerSecond = 100e9;        // NVLink-class, for the delay fault only
constexpr size_t kMinAllocationBytes = 256;                  // allocate() never returns null

// Throws Error(kBackend) "<call> failed at <file>:<line>: <ncclGetErrorString> (<ncclGetLastError>)"
// unless `status` is ncclSuccess or (nonblocking communicators) ncclInProgress.
void check_nccl(ncclResult_t status, const char* call, const char* file, int line, ncclComm_t comm = nullptr) {
  if (status == ncclSuccess || status == ncclInProgress) return;
  const char* last = ncclGetLastError(comm);
  fail(ErrorCode::kBackend, "{} failed at {}:{}: {}{}", call, file, line, ncclGetErrorString(status),
       last != nullptr && *last != '\0' ? fmt::format(" ({})", last) : std::string());
}
#define TANDEM_NCCL_CHECK(call) ::tandem::nccl::check_nccl((call), #call, __FILE__, __LINE__)

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::kF32:
      return ncclFloat32;
    case DataType::kF16:
      return ncclFloat16;
    case DataType::kBF16:
      return ncclBfloat16;
    case DataType::kF64:
      return ncclFloat64;
    case DataType::kI32:
      return ncclInt32;
    case DataType::kI64:
      return ncclInt64;
  }
  return ncclFloat32;
}

bool is_integer(DataType type) { return type == DataType::kI32 || type == DataType::kI64; }

// NCCL's op for `op`; integer averages reduce as a sum and divide after (as the host: truncation).
ncclRedOp_t nccl_op(ReduceOp op, DataType type) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return is_integer(type) ? ncclSum : ncclAvg;
  }
  return ncclSum;
}

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

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

struct ScheduleRun;  // one schedule-mode run's state (below, with schedule mode)

}  // namespace

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

  // Polls every local communicator until none is in progress; aborts them all and throws on an
  // error or past `timeout`.
  void wait_for_communicators(const char* what, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (true) {
      bool pending = false;
      for (LocalRank& local : ranks) {
        ncclResult_t state = ncclSuccess;
        check_nccl(ncclCommGetAsyncError(local.comm, &state), "ncclCommGetAsyncError", __FILE__, __LINE__, local.comm);
        if (state == ncclInProgress) {
          pending = true;
        } else if (state != ncclSuccess) {
          const std::string message =
              fmt::format("nccl {} failed on rank {} (device {}): {} ({})", what, local.rank, local.device,
                          ncclGetErrorString(state), ncclGetLastError(local.comm));
          abort_all();  // frees `local`
          throw Error(ErrorCode::kBackend, message);
        }
      }
      if (!pending) return;
      if (Clock::now() > deadline) {
        abort_all();
        fail(ErrorCode::kTimeout, "nccl {} did not finish within {} ms", what, timeout.count());
      }
      std::this_thread::sleep_for(kPollInterval);
    }
  }

  // Aborts and forgets every local communicator (all ranks must: NCCL's fault-tolerance contract).
  void abort_all() noexcept {
    for (LocalRank& local : ranks) {
      if (local.comm != nullptr) (void)ncclCommAbort(local.comm);
      local.comm = nullptr;
    }
    destroy_streams();
    ranks.clear();
    world = 0;
  }

  void destroy_streams() noexcept {
    for (LocalRank& local : ranks) {
      if (local.stream == nullptr) continue;
      (void)cudaSetDevice(local.device);
      (void)cudaStreamDestroy(local.stream);
      local.stream = nullptr;
    }
  }

  // Finalizes and destroys the communicators; aborts them when that fails or takes too long.
  void close() noexcept {
    if (ranks.empty()) return;
    try {
      TANDEM_NCCL_CHECK(ncclGroupStart());
      for (LocalRank& local : ranks) TANDEM_NCCL_CHECK(ncclCommFinalize(local.comm));
      TANDEM_NCCL_CHECK(ncclGroupEnd());
      wait_for_communicators("finalize", kFinalizeTimeout);
      for (LocalRank& local : ranks) {
        (void)ncclCommDestroy(local.comm);
        local.comm = nullptr;
      }
      destroy_streams();
      ranks.clear();
      world = 0;
    } catch (...) {
      abort_all();
    }
  }

  void create_streams() {
    for (LocalRank& local : ranks) {
      TANDEM_CUDA_CHECK(cudaSetDevice(local.device));
      TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&local.stream, cudaStreamNonBlocking));
    }
  }

  // Single process: communicators for `nranks` ranks on devices_[0 .. nranks).
  void init_single(int nranks) {
    close();
    if (nranks > static_cast<int>(devices.size())) {
      fail(ErrorCode::kUnsupported,
           "nccl: a collective of {} ranks needs {} GPUs in one process (NCCL does not allow two ranks of one "
           "communicator on one GPU), and {} are in use (NcclOptions::devices, {} visible)",
           nranks, nranks, devices.size(), visible_devices);
    }
    const ncclUniqueId id = [] {
      ncclUniqueId out{};
      TANDEM_NCCL_CHECK(ncclGetUniqueId(&out));
      return out;
    }();
    ranks.resize(static_cast<size_t>(nranks));
    world = nranks;
    TANDEM_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < nranks; ++r) {
      LocalRank& local = ranks[static_cast<size_t>(r)];
      local.rank = r;
      local.device = devices[static_cast<size_t>(r)];
      TANDEM_CUDA_CHECK(cudaSetDevice(local.device));
      ncclConfig_t config = nonblocking_config();
      TANDEM_NCCL_CHECK(ncclCommInitRankConfig(&local.comm, nranks, id, r, &config));
    }
    TANDEM_NCCL_CHECK(ncclGroupEnd());
    wait_for_communicators("communicator initialisation", kInitTimeout);
    create_streams();
  }

  // MPI: this process's communicator, from rank 0's id.
  void init_mpi() {
    const LaunchInfo& info = launch->info();
    const ncclUniqueId id = share_unique_id(*launch, 0);
    ranks.resize(1);
    world = info.size;
    LocalRank& local = ranks[0];
    local.rank = info.rank;
    local.device = device_for_local_rank(info.local_rank, visible_devices);
    TANDEM_CUDA_CHECK(cudaSetDevice(local.device));
    ncclConfig_t config = nonblocking_config();
    TANDEM_NCCL_CHECK(ncclCommInitRankConfig(&local.comm, info.size, id, info.rank, &config));
    wait_for_communicators("communicator initialisation", kInitTimeout);
    create_streams();
  }

  // The communicators for a run of `nranks`.
  void ensure_world(int nranks) {
    if (multi_process) {
      if (excluded) fail(ErrorCode::kInvalidArgument, "nccl: this process was dropped by shrink()");
      if (ranks.empty()) fail(ErrorCode::kBackend, "nccl: the communicator was aborted after an earlier failure");
      if (nranks != world) {
        fail(ErrorCode::kInvalidArgument, "nccl: a collective of {} ranks in a world of {} processes", nranks, world);
      }
      return;
    }
    if (nranks != world || ranks.empty()) init_single(nranks);
  }

  LocalRank* local_rank(int rank) {
    for (LocalRank& local : ranks) {
      if (local.rank == rank) return &local;
    }
    return nullptr;
  }

  RunResult run(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                const RunContext& context);
  RunResult run_native(const CollectiveSpec& spec, std::span<const RankBuffers> buffers, const RunContext& context);
  RunResult run_schedule(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                         const RunContext& context);
  // run_schedule's phases, in the order it runs them.
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
  // Waits for every local stream; RunResult::seconds from `start`.
  RunResult wait(Clock::time_point start, const RunContext& context);
  void shrink(std::span<const int> dropped);
};

// ---------------------------------------------------------------------------------------------

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

RunResult NcclExecutor::Impl::wait(Clock::time_point start, const RunContext& context) {
  std::vector<bool> done(ranks.size(), false);
  auto deadline = Clock::now() + context.timeout;
  size_t remaining = ranks.size();
  while (remaining > 0) {
    bool progressed = false;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (done[i]) continue;
      LocalRank& local = ranks[i];
      ncclResult_t state = ncclSuccess;
      check_nccl(ncclCommGetAsyncError(local.comm, &state), "ncclCommGetAsyncError", __FILE__, __LINE__, local.comm);
      if (state != ncclSuccess && state != ncclInProgress) {
        const std::string message = fmt::format("nccl rank {} (device {}): {} ({})", local.rank, local.device,
                                                ncclGetErrorString(state), ncclGetLastError(local.comm));
        abort_all();  // frees `local`
        throw Error(ErrorCode::kBackend, message);
      }
      if (state == ncclInProgress) continue;  // not all of its work is on the stream yet
      const cudaError_t status = cudaStreamQuery(local.stream);
      if (status == cudaErrorNotReady) continue;
      if (status != cudaSuccess) {
        const std::string message = fmt::format("nccl rank {} (device {}): the stream failed: {}", local.rank,
                                                local.device, cudaGetErrorString(status));
        abort_all();  // frees `local`
        throw Error(ErrorCode::kBackend, message);
      }
      done[i] = true;
      --remaining;
      progressed = true;
    }
    if (remaining == 0) break;
    if (progressed) deadline = Clock::now() + context.timeout;
    if (Clock::now() > deadline) {
      std::vector<int> waiting;
      for (size_t i = 0; i < ranks.size(); ++i) {
        if (!done[i]) waiting.push_back(ranks[i].rank);
      }
      abort_all();
      fail(ErrorCode::kTimeout,
           "nccl: rank(s) {} made no progress for {} ms (a peer never sent or never arrived); "
           "the communicators were aborted",
           fmt::join(waiting, ", "), context.timeout.count());
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  return RunResult{.seconds = std::chrono::duration<double>(Clock::now() - start).count()};
}

RunResult NcclExecutor::Impl::run_native(const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                                         const RunContext& context) {
  if (context.on_send) {
    fail(ErrorCode::kUnsupported,
         "nccl native mode cannot inject transfer faults (RunContext::on_send): NCCL's "
         "collectives have no per-transfer seam; use schedule mode");
  }
  if (context.checksums) {
    fail(ErrorCode::kUnsupported,
         "nccl native mode cannot checksum messages (RunContext::checksums); use schedule mode");
  }
  const ncclDataType_t type = nccl_type(spec.dtype);
  const ncclRedOp_t op = nccl_op(spec.op, spec.dtype);
  const size_t count = static_cast<size_t>(spec.count);
  const size_t block_bytes = count * size_bytes(spec.dtype);
  const int n = spec.nranks;
  const auto start = Clock::now();
  TANDEM_NCCL_CHECK(ncclGroupStart());
  for (LocalRank& local : ranks) {
    const RankBuffers& buffer = buffers[static_cast<size_t>(local.rank)];
    const auto* in = static_cast<const std::byte*>(buffer.input);
    auto* out = static_cast<std::byte*>(buffer.output);
    switch (spec.collective) {
      case Collective::kAllReduce:
        check_nccl(ncclAllReduce(in, out, count, type, op, local.comm, local.stream), "ncclAllReduce", __FILE__,
                   __LINE__, local.comm);
        break;
      case Collective::kReduceScatter:
        check_nccl(ncclReduceScatter(in, out, count, type, op, local.comm, local.stream), "ncclReduceScatter", __FILE__,
                   __LINE__, local.comm);
        break;
      case Collective::kAllGather:
        check_nccl(ncclAllGather(in, out, count, type, local.comm, local.stream), "ncclAllGather", __FILE__, __LINE__,
                   local.comm);
        break;
      case Collective::kBroadcast:
        check_nccl(ncclBroadcast(in, out, count, type, spec.root, local.comm, local.stream), "ncclBroadcast", __FILE__,
                   __LINE__, local.comm);
        break;
      case Collective::kReduce:
        check_nccl(ncclReduce(in, out, count, type, op, spec.root, local.comm, local.stream), "ncclReduce", __FILE__,
                   __LINE__, local.comm);
        break;
      case Collective::kAllToAll:
        // Input block p goes to rank p; output block p comes from rank p.
        for (int p = 0; p < n; ++p) {
          check_nccl(
              ncclSend(in + static_cast<size_t>(p) * block_bytes, block_bytes, ncclUint8, p, local.comm, local.stream),
              "ncclSend", __FILE__, __LINE__, local.comm);
          check_nccl(
              ncclRecv(out + static_cast<size_t>(p) * block_bytes, block_bytes, ncclUint8, p, local.comm, local.stream),
              "ncclRecv", __FILE__, __LINE__, local.comm);
        }
        break;
      case Collective::kSendRecv:
        check_nccl(ncclSend(in, block_bytes, ncclUint8, (local.rank + 1) % n, local.comm, local.stream), "ncclSend",
                   __FILE__, __LINE__, local.comm);
        check_nccl(ncclRecv(out, block_bytes, ncclUint8, (local.rank + n - 1) % n, local.comm, local.stream),
                   "ncclRecv", __FILE__, __LINE__, local.comm);
        break;
    }
  }
  TANDEM_NCCL_CHECK(ncclGroupEnd());
  // On nonblocking communicators ncclGroupEnd may return ncclInProgress with nothing on the streams
  // yet (NCCL connects peers and enqueues from its own thread): wait until the group is enqueued
  // before putting work behind it or polling the streams. Seen on an H200: a self send/receive read
  // as finished before NCCL had enqueued it, and its buffers were freed under the kernel.
  wait_for_communicators("collective", context.timeout);
  // Integer averages: NCCL summed; divide as the host does.
  if (spec.op == ReduceOp::kAvg && is_integer(spec.dtype) && is_reduction(spec.collective)) {
    const int64_t elements = static_cast<int64_t>(buffer_geometry(spec.collective, n).output_blocks) * spec.count;
    for (LocalRank& local : ranks) {
      if (spec.collective == Collective::kReduce && local.rank != spec.root) continue;
      if (elements == 0) continue;
      TANDEM_CUDA_CHECK(cudaSetDevice(local.device));
      cuda::launch_divide(spec.dtype, buffers[static_cast<size_t>(local.rank)].output, elements, n, local.stream);
    }
  }
  return wait(start, context);
}

// ---------------------------------------------------------------------------------------------
// Schedule mode.

namespace {

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

// The (tile, level) keys of every local rank's groups, in order.
std::vector<std::pair<uint32_t, uint32_t>> group_keys(const NcclPlan& plan) {
  std::vector<std::pair<uint32_t, uint32_t>> keys;
  for (const RankPlan& rank_plan : plan.ranks) {
    for (const PlanGroup& group : rank_plan.groups) keys.emplace_back(group.tile, group.level);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

}  // namespace

RunResult NcclExecutor::Impl::run_schedule(const Schedule& schedule, const CollectiveSpec& spec,
                                           std::span<const RankBuffers> buffers, const RunContext& context) {
  std::vector<int> local_ids;
  for (const LocalRank& local : ranks) local_ids.push_back(local.rank);
  const NcclPlan plan = build_nccl_plan(
      schedule, spec, PlanOptions{.tiles = context.tiles, .align_elements = context.align_elements}, local_ids);
  ScheduleRun run;
  ask_send_faults(plan, context, run);
  reserve_run_memory(plan, buffers, static_cast<int64_t>(size_bytes(spec.dtype)), context.checksums, run);
  const std::vector<std::pair<uint32_t, uint32_t>> keys = group_keys(plan);
  run.cursor.assign(ranks.size(), 0);
  run.stalled.assign(ranks.size(), false);
  run.stall.assign(ranks.size(), {-1, -1});
  run.send_slot.assign(ranks.size(), 0);
  run.recv_slot.assign(ranks.size(), 0);

  const auto start = Clock::now();
  // Anything thrown while enqueueing leaves peers waiting for groups that never come: abort.
  try {
    for (const auto& key : keys) {
      const std::vector<const PlanGroup*> groups = take_groups(plan, key, run);
      const std::vector<std::vector<const std::byte*>> sources = prepare_sends(groups, context, run);
      post_group(groups, sources, context, run);
      run_local_steps(groups, spec, context, run);
    }
    divide_averages(plan, spec, run);
  } catch (...) {
    abort_all();
    throw;
  }

  const RunResult result = wait(start, context);
  fail_if_stalled(schedule, context, run);
  if (context.checksums) check_checksums(plan, run);
  for (LocalRank& local : ranks) local.corrupt_copies.clear();
  return result;
}

// Faults, asked once per send op, before anything is enqueued; a failing send throws
// Error(kFault) here, in every process of an MPI run.
void NcclExecutor::Impl::ask_send_faults(const NcclPlan& plan, const RunContext& context, ScheduleRun& run) {
  run.faults.assign(ranks.size(), {});
  bool failed_here = false;
  FaultReport failure{.kind = FaultReport::Kind::kSendFailed, .backend = "nccl"};
  if (context.on_send) {
    for (size_t i = 0; i < ranks.size() && !failed_here; ++i) {
      for (const PlanGroup& group : plan.ranks[i].groups) {
        for (const Transfer& t : group.transfers) {
          if (t.kind != TransferKind::kSend || run.faults[i].contains(t.op_index)) continue;
          const TransferEffect effect = context.on_send(ranks[i].rank, t.peer, t.op_index);
          run.faults[i][t.op_index] = SendFault{effect};
          if (effect.fail && !failed_here) {
            failed_here = true;
            failure.rank = ranks[i].rank;
            failure.peer = t.peer;
            failure.at = OpPosition{.lane = t.lane, .op = t.op, .kind = OpKind::kSend, .peer = t.peer};
            failure.fault = effect.fault_index;
          }
        }
      }
    }
  }
  if (multi_process && context.on_send) {
    // Every process learns of a failing send, so that none posts groups a peer will never match.
    std::vector<std::byte> mine(1, std::byte{failed_here ? uint8_t{1} : uint8_t{0}});
    const auto all = launch->all_gather(mine);
    for (size_t r = 0; r < all.size() && !failed_here; ++r) {
      if (all[r].at(0) != std::byte{0}) {
        failed_here = true;
        failure.rank = static_cast<int>(r);
        failure.note = "this rank stops too";
      }
    }
  }
  if (failed_here) fail(std::move(failure));
}

// Memory: scratch and staging per rank; checksum sums (zeroed on the rank's stream); this run's
// corrupt copies start empty.
void NcclExecutor::Impl::reserve_run_memory(const NcclPlan& plan, std::span<const RankBuffers> buffers,
                                            int64_t element_bytes, bool checksums, ScheduleRun& run) {
  run.memory.assign(ranks.size(), {});
  run.sums.assign(ranks.size(), {});
  for (size_t i = 0; i < ranks.size(); ++i) {
    LocalRank& local = ranks[i];
    const RankPlan& rank_plan = plan.ranks[i];
    TANDEM_CUDA_CHECK(cudaSetDevice(local.device));
    const RankBuffers& buffer = buffers[static_cast<size_t>(local.rank)];
    run.memory[i] = RankMemory{
        .input = static_cast<std::byte*>(buffer.input),
        .output = static_cast<std::byte*>(buffer.output),
        .scratch = local.scratch.reserve(static_cast<size_t>(rank_plan.scratch_elements * element_bytes), "scratch",
                                         local.device),
        .staging = local.staging.reserve(static_cast<size_t>(rank_plan.staging_elements * element_bytes), "staging",
                                         local.device),
        .element_bytes = element_bytes,
    };
    local.corrupt_copies.clear();
    if (checksums) {
      ChecksumSlots& sums = run.sums[i];
      for (const PlanGroup& group : rank_plan.groups) {
        for (const Transfer& t : group.transfers) (t.kind == TransferKind::kSend ? sums.sends : sums.recvs)++;
      }
      const size_t slots = sums.sends + 2 * sums.recvs;
      auto* base = reinterpret_cast<unsigned long long*>(
          local.checksums.reserve(slots * sizeof(unsigned long long), "checksums", local.device));
      sums.sent = base;
      sums.expected = base + sums.sends;
      sums.received = base + sums.sends + sums.recvs;
      TANDEM_CUDA_CHECK(cudaMemsetAsync(base, 0, slots * sizeof(unsigned long long), local.stream));
    }
  }
}

// This key's group of each local rank, advancing its cursor (nullptr: none, or the rank stalled).
std::vector<const PlanGroup*> NcclExecutor::Impl::take_groups(const NcclPlan& plan, std::pair<uint32_t, uint32_t> key,
                                                              ScheduleRun& run) {
  std::vector<const PlanGroup*> groups(ranks.size(), nullptr);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const std::vector<PlanGroup>& own = plan.ranks[i].groups;
    if (run.cursor[i] < own.size() && std::make_pair(own[run.cursor[i]].tile, own[run.cursor[i]].level) == key) {
      groups[i] = &own[run.cursor[i]++];
    }
    if (groups[i] == nullptr || run.stalled[i]) {
      groups[i] = nullptr;
      continue;
    }
    // Stall: a send never posted; the rank posts nothing from here on.
    for (const Transfer& t : groups[i]->transfers) {
      if (t.kind == TransferKind::kSend && run.faults[i].contains(t.op_index) &&
          run.faults[i][t.op_index].effect.stall && !run.stalled[i]) {
        run.stalled[i] = true;
        run.stall[i] = {t.peer, run.faults[i][t.op_index].effect.fault_index};
      }
    }
    if (run.stalled[i]) groups[i] = nullptr;
  }
  return groups;
}

// Before the group, on each rank's stream: delays, checksums of what it sends, corrupt copies.
// Returns, per rank and transfer, the address its message goes from (a corrupt copy or the plan's).
std::vector<std::vector<const std::byte*>> NcclExecutor::Impl::prepare_sends(
    const std::vector<const PlanGroup*>& groups, const RunContext& context, ScheduleRun& run) {
  std::vector<std::vector<const std::byte*>> sources(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (groups[i] == nullptr) continue;
    LocalRank& local = ranks[i];
    TANDEM_CUDA_CHECK(cudaSetDevice(local.device));
    double delay_seconds = 0;
    size_t sends = 0;
    for (const Transfer& t : groups[i]->transfers) {
      const std::byte* source = run.memory[i].at(t.range);
      if (t.kind == TransferKind::kSend) {
        const size_t bytes = run.memory[i].bytes(t.range);
        if (context.checksums) {
          cuda::launch_checksum(source, static_cast<int64_t>(bytes), 0, &run.sums[i].sent[run.send_slot[i] + sends],
                                local.stream);
        }
        ++sends;
        auto found = run.faults[i].find(t.op_index);
        if (found != run.faults[i].end()) {
          SendFault& fault = found->second;
          const double factor = fault.effect.delay_factor / fault.effect.bandwidth_factor;
          if (factor > 1.0) {
            delay_seconds += (factor - 1.0) *
                             std::max(kMinSlowedTransfer_s, static_cast<double>(bytes) / kExpectedLinkBytesPerSecond);
          }
          if (fault.effect.corrupt && !fault.corrupted && bytes > 0) {
            fault.corrupted = true;
            DeviceArea& copy = local.corrupt_copies.emplace_back();
            std::byte* data = copy.reserve(bytes, "a corrupted message", local.device);
            TANDEM_CUDA_CHECK(cudaMemcpyAsync(data, source, bytes, cudaMemcpyDeviceToDevice, local.stream));
            cuda::launch_flip_bits(data + bytes / 2, kCorruptBitMask, local.stream);
            source = data;
          }
        }
      }
      sources[i].push_back(source);
    }
    if (delay_seconds > 0) cuda::launch_spin(static_cast<uint64_t>(delay_seconds * 1e9), local.stream);
  }
  return sources;
}

// The group: every local rank's sends and receives of this level (plus checksum messages), in one
// NCCL group, waited for (a nonblocking communicator takes no new call while one is in progress).
void NcclExecutor::Impl::post_group(const std::vector<const PlanGroup*>& groups,
                                    const std::vector<std::vector<const std::byte*>>& sources,
                                    const RunContext& context, ScheduleRun& run) {
  bool any_transfer = false;
  for (size_t i = 0; i < ranks.size(); ++i) any_transfer |= groups[i] != nullptr && !groups[i]->transfers.empty();
  if (!any_transfer) return;
  TANDEM_NCCL_CHECK(ncclGroupStart());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (groups[i] == nullptr) continue;
    LocalRank& local = ranks[i];
    const ChecksumSlots& sums = run.sums[i];
    size_t sends = 0, recvs = 0;
    for (size_t k = 0; k < groups[i]->transfers.size(); ++k) {
      const Transfer& t = groups[i]->transfers[k];
      const size_t bytes = run.memory[i].bytes(t.range);
      if (t.kind == TransferKind::kSend) {
        check_nccl(ncclSend(sources[i][k], bytes, ncclUint8, t.peer, local.comm, local.stream), "ncclSend", __FILE__,
                   __LINE__, local.comm);
        if (context.checksums) {
          check_nccl(ncclSend(&sums.sent[run.send_slot[i] + sends], sizeof(unsigned long long), ncclUint8, t.peer,
                              local.comm, local.stream),
                     "ncclSend", __FILE__, __LINE__, local.comm);
        }
        ++sends;
      } else {
        check_nccl(ncclRecv(run.memory[i].at(t.range), bytes, ncclUint8, t.peer, local.comm, local.stream), "ncclRecv",
                   __FILE__, __LINE__, local.comm);
        if (context.checksums) {
          check_nccl(ncclRecv(&sums.expected[run.recv_slot[i] + recvs], sizeof(unsigned long long), ncclUint8, t.peer,
                              local.comm, local.stream),
                     "ncclRecv", __FILE__, __LINE__, local.comm);
        }
        ++recvs;
      }
    }
  }
  TANDEM_NCCL_CHECK(ncclGroupEnd());
  wait_for_communicators("send / receive group", context.timeout);
}

// After the group, on each rank's stream: checksums of what arrived, then the local steps (copies
// and reductions); the checksum slots move past this group's messages.
void NcclExecutor::Impl::run_local_steps(const std::vector<const PlanGroup*>& groups, const CollectiveSpec& spec,
                                         const RunContext& context, ScheduleRun& run) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (groups[i] == nullptr) continue;
    LocalRank& local = ranks[i];
    const RankMemory& mem = run.memory[i];
    TANDEM_CUDA_CHECK(cudaSetDevice(local.device));
    for (const Transfer& t : groups[i]->transfers) {
      if (t.kind == TransferKind::kSend) {
        ++run.send_slot[i];
        continue;
      }
      if (context.checksums) {
        cuda::launch_checksum(mem.at(t.range), static_cast<int64_t>(mem.bytes(t.range)), 0,
                              &run.sums[i].received[run.recv_slot[i]], local.stream);
      }
      ++run.recv_slot[i];
    }
    for (const LocalStep& step : groups[i]->local) {
      const size_t n = step.segments.size();
      if (step.kind == LocalKind::kCopy) {
        // Back to front when moving data forward within aliased memory (as the host).
        const bool backward = n > 1 && mem.at(step.segments[0].dst) > mem.at(step.segments[0].a);
        for (size_t s = 0; s < n; ++s) {
          const LocalSegment& segment = step.segments[backward ? n - 1 - s : s];
          std::byte* to = mem.at(segment.dst);
          const std::byte* from = mem.at(segment.a);
          const size_t bytes = mem.bytes(segment.dst);
          if (to == from || bytes == 0) continue;
          if (to < from + bytes && from < to + bytes) {
            fail(ErrorCode::kBackend, "nccl rank {} lane {} op {}: overlapping copy", local.rank, step.lane, step.op);
          }
          TANDEM_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, local.stream));
        }
        continue;
      }
      for (const LocalSegment& segment : step.segments) {
        cuda::launch_reduce(spec.dtype, spec.op, mem.at(segment.a), mem.at(segment.b), mem.at(segment.dst),
                            segment.dst.count, local.stream);
      }
    }
  }
}

// kAvg: the reduced output divided once at the end, on every rank that did not stall.
void NcclExecutor::Impl::divide_averages(const NcclPlan& plan, const CollectiveSpec& spec, const ScheduleRun& run) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    const std::optional<LocalStep>& finish = plan.ranks[i].finish;
    if (!finish || run.stalled[i]) continue;
    TANDEM_CUDA_CHECK(cudaSetDevice(ranks[i].device));
    for (const LocalSegment& segment : finish->segments) {
      cuda::launch_divide(spec.dtype, run.memory[i].at(segment.dst), segment.dst.count, spec.nranks, ranks[i].stream);
    }
  }
}

// A rank that stalled stopped posting: whatever its peers do, this collective did not complete.
void NcclExecutor::Impl::fail_if_stalled(const Schedule& schedule, const RunContext& context,
                                         const ScheduleRun& run) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (!run.stalled[i]) continue;
    abort_all();
    fail(FaultReport{.kind = FaultReport::Kind::kLost,
                     .backend = "nccl",
                     .rank = run.stall[i].first,
                     .peer = ranks[i].rank,
                     .fault = run.stall[i].second,
                     .collective = schedule.collective,
                     .algorithm = schedule.algorithm,
                     .nranks = schedule.nranks,
                     .timeout_ms = context.timeout.count(),
                     .note = fmt::format("the stall kept rank {} from posting the send, and the rest of its sends; "
                                         "the communicators were aborted",
                                         ranks[i].rank)});
  }
}

// Each receive's checksum against its sender's: Error(kCorrupt) naming the first that differs.
void NcclExecutor::Impl::check_checksums(const NcclPlan& plan, const ScheduleRun& run) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    const ChecksumSlots& sums = run.sums[i];
    if (sums.recvs == 0) continue;
    std::vector<unsigned long long> expected(sums.recvs), received(sums.recvs);
    TANDEM_CUDA_CHECK(cudaSetDevice(ranks[i].device));
    TANDEM_CUDA_CHECK(cudaMemcpy(expected.data(), sums.expected, expected.size() * sizeof(unsigned long long),
                                 cudaMemcpyDeviceToHost));
    TANDEM_CUDA_CHECK(cudaMemcpy(received.data(), sums.received, received.size() * sizeof(unsigned long long),
                                 cudaMemcpyDeviceToHost));
    size_t slot = 0;
    for (const PlanGroup& group : plan.ranks[i].groups) {
      for (const Transfer& t : group.transfers) {
        if (t.kind != TransferKind::kRecv) continue;
        if (expected[slot] != received[slot]) {
          fail(FaultReport{.kind = FaultReport::Kind::kCorrupt,
                           .backend = "nccl",
                           .rank = ranks[i].rank,
                           .peer = t.peer,
                           .at = OpPosition{.lane = t.lane, .op = t.op, .kind = OpKind::kRecv, .peer = t.peer}});
        }
        ++slot;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------

void NcclExecutor::Impl::shrink(std::span<const int> dropped) {
  std::vector<int> excluded_ranks(dropped.begin(), dropped.end());
  std::sort(excluded_ranks.begin(), excluded_ranks.end());
  excluded_ranks.erase(std::unique(excluded_ranks.begin(), excluded_ranks.end()), excluded_ranks.end());
  for (int r : excluded_ranks) {
    if (r < 0 || r >= world)
      fail(ErrorCode::kInvalidArgument, "nccl shrink: rank {} is not in the world of {}", r, world);
  }
  if (excluded_ranks.empty()) return;
  if (static_cast<int>(excluded_ranks.size()) >= world) {
    fail(ErrorCode::kInvalidArgument, "nccl shrink: dropping all {} ranks", world);
  }
  const auto is_dropped = [&](int rank) {
    return std::binary_search(excluded_ranks.begin(), excluded_ranks.end(), rank);
  };
  const int survivors = world - static_cast<int>(excluded_ranks.size());

  if (ranks.empty()) {
    // The communicators were aborted (after a timeout or an error): nothing to shrink. A single
    // process rebuilds over the surviving devices on the next run; MPI cannot rebuild without the
    // dropped processes taking part in the id broadcast.
    if (multi_process) {
      fail(ErrorCode::kUnsupported,
           "nccl shrink: the communicator was aborted; under MPI it cannot be rebuilt "
           "without the dropped processes");
    }
    std::vector<int> kept;
    for (int r = 0; r < static_cast<int>(devices.size()) && r < world; ++r) {
      if (!is_dropped(r)) kept.push_back(devices[static_cast<size_t>(r)]);
    }
    devices = kept;
    return;
  }

  // Survivors call ncclCommShrink together (one group when one thread drives several); dropped
  // local ranks abort theirs. NCCL_SHRINK_ABORT: ongoing operations of the parent are ended first.
  std::vector<LocalRank> kept;
  std::vector<ncclComm_t> children(ranks.size(), nullptr);
  TANDEM_NCCL_CHECK(ncclGroupStart());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (is_dropped(ranks[i].rank)) continue;
    TANDEM_CUDA_CHECK(cudaSetDevice(ranks[i].device));
    ncclConfig_t config = nonblocking_config();
    check_nccl(ncclCommShrink(ranks[i].comm, excluded_ranks.data(), static_cast<int>(excluded_ranks.size()),
                              &children[i], &config, NCCL_SHRINK_ABORT),
               "ncclCommShrink", __FILE__, __LINE__, ranks[i].comm);
  }
  TANDEM_NCCL_CHECK(ncclGroupEnd());
  std::vector<int> kept_devices;
  for (size_t i = 0; i < ranks.size(); ++i) {
    LocalRank& local = ranks[i];
    if (is_dropped(local.rank)) {
      (void)ncclCommAbort(local.comm);
    } else {
      (void)ncclCommDestroy(local.comm);  // the parent; the child replaces it
      local.comm = children[i];
      // Survivors are renumbered contiguously, in the old order.
      local.rank -= static_cast<int>(std::lower_bound(excluded_ranks.begin(), excluded_ranks.end(), local.rank) -
                                     excluded_ranks.begin());
      kept_devices.push_back(local.device);
      kept.push_back(std::move(local));
      continue;
    }
    local.comm = nullptr;
    if (local.stream != nullptr) {
      (void)cudaSetDevice(local.device);
      (void)cudaStreamDestroy(local.stream);
      local.stream = nullptr;
    }
  }
  ranks = std::move(kept);
  world = survivors;
  if (multi_process && ranks.empty()) excluded = true;
  if (!multi_process) devices = kept_devices;
  if (!ranks.empty()) wait_for_communicators("shrink", kInitTimeout);
}

// ---------------------------------------------------------------------------------------------

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
