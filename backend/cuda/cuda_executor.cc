// CudaExecutor: issues a StreamPlan (stream_plan.h) on CUDA streams and events.
//
// Per run: the schedule is lowered to a plan; the fault injector is asked about every message up
// front (below); each (rank, lane) stream of the plan gets a cudaStream_t from a pool and each plan
// event a cudaEvent_t; the commands are issued in issue_order(plan), which puts every
// cudaEventRecord before the cudaStreamWaitEvent calls that wait for it (a wait issued before its
// record would not wait at all). A control stream records the start event that every stream waits
// for and, after waiting for every stream's last command, the stop event: RunResult::seconds is
// the device time between the two (with CudaOptions::graph the same commands are captured into a
// CUDA graph, start and stop recorded around its launch). Scratch, staging and checksum memory belong to the executor
// and grow to the largest run (never shrink); streams and events are pooled the same way.
//
// Faults, per message (one Send / Recv pair), from RunContext::on_send(src, dst, op index):
//   - fail: Error(kFault) naming the transfer, before anything is launched (as the host, whose
//     failing send throws kFault, which the recovery policies retry);
//   - stall: a receiver that never gets its data. On one GPU a stream that never proceeds would
//     leave the device busy forever, so nothing is launched: the executor waits RunContext::timeout
//     (as a rank would) and throws Error(kTimeout) naming the stalled receivers and their senders;
//   - delay_factor / bandwidth_factor: the sender's stream spins (a one-thread kernel on the
//     global timer) for (factor - 1) times the copy's expected time, after staging and before
//     publishing the message. The expected time is the message's bytes over the device's
//     device-to-device copy bandwidth (measured once, with a kBandwidthProbeBytes copy), at least
//     kMinSlowedTransfer_s, as the host backend does for small messages;
//   - corrupt: one bit (kCorruptBitMask) of a staged byte is flipped before the message is published.
//     With RunContext::checksums the sender sums what it stages and the receiver what it reads
//     (launch_checksum); a difference throws Error(kCorrupt) naming the message, after the run.
#include "backend/cuda/cuda_executor.h"

#include <cuda_runtime_api.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/kernels/fault_kernels.h"
#include "backend/kernels/reduce.h"
#include "backend/cuda/stream_plan.h"
#include "core/error.h"
#include "core/fault_report.h"

namespace tandem::cuda {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kBandwidthProbeBytes = size_t{64} << 20;
constexpr auto kPollInterval = std::chrono::microseconds(50);  // while waiting for the stop event
constexpr size_t kMinAllocationBytes = 256;                    // allocate() never returns null, even for 0 bytes

// Device memory that grows to the largest request and is reused between runs.
class DeviceArea {
 public:
  DeviceArea() = default;
  DeviceArea(const DeviceArea&) = delete;
  DeviceArea& operator=(const DeviceArea&) = delete;
  ~DeviceArea() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }

  std::byte* reserve(size_t bytes, const char* what) {
    if (bytes <= bytes_ && data_ != nullptr) return data_;
    if (data_ != nullptr) TANDEM_CUDA_CHECK(cudaFree(data_));
    data_ = nullptr;
    bytes_ = 0;
    void* data = nullptr;
    const cudaError_t status = cudaMalloc(&data, std::max(bytes, kMinAllocationBytes));
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      fail(ErrorCode::kBackend, "cuda: cannot allocate {} bytes of {}: {}", bytes, what, cudaGetErrorString(status));
    }
    data_ = static_cast<std::byte*>(data);
    bytes_ = std::max(bytes, kMinAllocationBytes);
    return data_;
  }

 private:
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
};

class DeviceBufferSpace : public BufferSpace {
 public:
  explicit DeviceBufferSpace(int device) : device_(device) {}

  void* allocate(int rank, size_t bytes) override {
    TANDEM_CUDA_CHECK(cudaSetDevice(device_));
    void* data = nullptr;
    const cudaError_t status = cudaMalloc(&data, std::max(bytes, kMinAllocationBytes));
    if (status != cudaSuccess || data == nullptr) {
      (void)cudaGetLastError();
      fail(ErrorCode::kBackend, "cuda: cannot allocate {} bytes for rank {} on device {}: {}", bytes, rank, device_,
           cudaGetErrorString(status));
    }
    return data;
  }
  void release(void* buffer) override {
    if (buffer == nullptr) return;
    TANDEM_CUDA_CHECK(cudaSetDevice(device_));
    TANDEM_CUDA_CHECK(cudaFree(buffer));
  }
  void upload(void* dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return;
    TANDEM_CUDA_CHECK(cudaSetDevice(device_));
    TANDEM_CUDA_CHECK(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
  }
  void download(void* host_dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    TANDEM_CUDA_CHECK(cudaSetDevice(device_));
    TANDEM_CUDA_CHECK(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
  }

 private:
  int device_;
};

// What the fault injector said about each message of a run.
struct MessageFaults {
  std::vector<uint64_t> spin_ns;  // per message: extra device time on the sender's stream
  std::vector<bool> corrupt;      // per message
  std::vector<int32_t> stalled;   // messages that never arrive
  std::vector<int> stall_fault;   // the responsible fault, per stalled message
};

// Where a message's send (kSend) or its receive stands in its rank's program, for fault reports.
OpPosition message_position(const Message& m, const RunContext& context, OpKind kind) {
  const bool send = kind == OpKind::kSend;
  return OpPosition{.tile = context.tiles > 1 ? std::optional<uint32_t>(m.tile) : std::nullopt,
                    .lane = m.lane,
                    .op = send ? m.send_op : m.recv_op,
                    .kind = kind,
                    .peer = send ? m.dst : m.src};
}

}  // namespace

// A captured run's graph and its executable, destroyed when the run returns (or throws).
struct GraphRun {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  GraphRun() = default;
  GraphRun(const GraphRun&) = delete;
  GraphRun& operator=(const GraphRun&) = delete;
  ~GraphRun() {
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
  }
};

struct CudaExecutor::Impl {
  explicit Impl(CudaOptions options_in) : options(options_in), space(options_in.device) {}
  ~Impl() {
    (void)cudaSetDevice(options.device);
    for (cudaStream_t stream : streams) (void)cudaStreamDestroy(stream);
    for (cudaEvent_t event : events) (void)cudaEventDestroy(event);
    if (control != nullptr) (void)cudaStreamDestroy(control);
    if (start != nullptr) (void)cudaEventDestroy(start);
    if (stop != nullptr) (void)cudaEventDestroy(stop);
    if (fork != nullptr) (void)cudaEventDestroy(fork);
  }

  // The run's commands (`issue(fork)`) captured from the control stream (the fork / join pattern is
  // how stream capture follows other streams), instantiated, then launched between the start event
  // and the caller's stop event; `graph` owns them until the run returns.
  template <typename Issue>
  void launch_as_graph(Issue&& issue, GraphRun& graph) {
    TANDEM_CUDA_CHECK(cudaStreamBeginCapture(control, cudaStreamCaptureModeThreadLocal));
    try {
      issue(fork);
    } catch (...) {
      cudaGraph_t partial = nullptr;
      (void)cudaStreamEndCapture(control, &partial);
      if (partial != nullptr) (void)cudaGraphDestroy(partial);
      throw;
    }
    TANDEM_CUDA_CHECK(cudaStreamEndCapture(control, &graph.graph));
    TANDEM_CUDA_CHECK(cudaGraphInstantiate(&graph.exec, graph.graph, 0));
    TANDEM_CUDA_CHECK(cudaEventRecord(start, control));
    TANDEM_CUDA_CHECK(cudaGraphLaunch(graph.exec, control));
  }

  void ensure_streams(size_t count) {
    while (streams.size() < count) {
      cudaStream_t stream = nullptr;
      TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      streams.push_back(stream);
    }
  }
  void ensure_events(size_t count) {
    while (events.size() < count) {
      cudaEvent_t event = nullptr;
      TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      events.push_back(event);
    }
  }

  // Device-to-device copy bandwidth in bytes per second, measured on first use.
  double copy_bandwidth() {
    if (copy_bandwidth_Bps) return *copy_bandwidth_Bps;
    DeviceArea probe;
    std::byte* data = probe.reserve(2 * kBandwidthProbeBytes, "the bandwidth probe");
    TANDEM_CUDA_CHECK(cudaEventRecord(start, control));
    TANDEM_CUDA_CHECK(
        cudaMemcpyAsync(data + kBandwidthProbeBytes, data, kBandwidthProbeBytes, cudaMemcpyDeviceToDevice, control));
    TANDEM_CUDA_CHECK(cudaEventRecord(stop, control));
    TANDEM_CUDA_CHECK(cudaEventSynchronize(stop));
    float milliseconds = 0;
    TANDEM_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start, stop));
    copy_bandwidth_Bps = static_cast<double>(kBandwidthProbeBytes) / std::max(1e-6, milliseconds * 1e-3);
    return *copy_bandwidth_Bps;
  }

  MessageFaults query_faults(const StreamPlan& plan, const RunContext& context) {
    MessageFaults faults;
    faults.spin_ns.assign(plan.messages.size(), 0);
    faults.corrupt.assign(plan.messages.size(), false);
    if (!context.on_send) return faults;
    const auto element_bytes = static_cast<double>(size_bytes(plan.dtype));
    for (size_t id = 0; id < plan.messages.size(); ++id) {
      const Message& m = plan.messages[id];
      const TransferEffect effect = context.on_send(m.src, m.dst, m.send_op_index);
      if (effect.fail) {
        fail(FaultReport{.kind = FaultReport::Kind::kSendFailed,
                         .backend = "cuda",
                         .rank = m.src,
                         .peer = m.dst,
                         .at = message_position(m, context, OpKind::kSend),
                         .fault = effect.fault_index});
      }
      if (effect.stall) {
        faults.stalled.push_back(static_cast<int32_t>(id));
        faults.stall_fault.push_back(effect.fault_index);
      }
      faults.corrupt[id] = effect.corrupt;
      const double factor = effect.delay_factor / effect.bandwidth_factor;
      if (factor > 1.0) {
        const double seconds =
            std::max(kMinSlowedTransfer_s, static_cast<double>(m.payload_elements) * element_bytes / copy_bandwidth());
        faults.spin_ns[id] = static_cast<uint64_t>(seconds * (factor - 1.0) * 1e9);
      }
    }
    return faults;
  }

  // A stalled message never arrives: its receiver waits until the timeout (the first stalled
  // message names the fault; the note counts the others).
  [[noreturn]] static void stall(const Schedule& schedule, const StreamPlan& plan, const MessageFaults& faults,
                                 const RunContext& context) {
    std::this_thread::sleep_for(context.timeout);
    const Message& m = plan.messages[static_cast<size_t>(faults.stalled.front())];
    FaultReport report{.kind = FaultReport::Kind::kLost,
                       .backend = "cuda",
                       .rank = m.dst,
                       .peer = m.src,
                       .at = message_position(m, context, OpKind::kRecv),
                       .fault = faults.stall_fault.front(),
                       .collective = schedule.collective,
                       .algorithm = schedule.algorithm,
                       .nranks = schedule.nranks,
                       .timeout_ms = context.timeout.count()};
    if (faults.stalled.size() > 1) report.note = fmt::format("{} more messages stalled", faults.stalled.size() - 1);
    fail(std::move(report));
  }

  CudaOptions options;
  DeviceBufferSpace space;
  std::mutex mutex;  // one run at a time
  DeviceArea scratch, staging, checksums;
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> events;
  cudaStream_t control = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  cudaEvent_t fork = nullptr;  // the captured run's fork (graph mode; start stays outside the graph)
  std::optional<double> copy_bandwidth_Bps;
};

namespace {

// One run: binds the plan's locations to memory and issues its commands.
class Launch {
 public:
  Launch(const StreamPlan& plan, std::span<const RankBuffers> buffers, const MessageFaults& faults, bool checksums,
         std::byte* scratch, std::byte* staging, unsigned long long* sums, const std::vector<cudaStream_t>& streams,
         const std::vector<cudaEvent_t>& events)
      : plan_(plan),
        buffers_(buffers),
        faults_(faults),
        checksums_(checksums),
        element_bytes_(static_cast<int64_t>(size_bytes(plan.dtype))),
        scratch_(scratch),
        staging_(staging),
        sent_(sums),
        received_(sums + plan.messages.size()),
        streams_(streams),
        events_(events),
        corrupt_target_(plan.messages.size(), nullptr) {}

  void issue(const CommandRef& ref) {
    const Command& command = plan_.streams[ref.stream].commands[ref.index];
    const cudaStream_t stream = streams_[ref.stream];
    const Message* message = command.message >= 0 ? &plan_.messages[static_cast<size_t>(command.message)] : nullptr;
    switch (command.kind) {
      case CommandKind::kCopy: {
        std::byte* to = address(command.dst);
        const std::byte* from = address(command.a);
        const int64_t bytes = command.elements * element_bytes_;
        if (to == from) return;  // in place
        if (to < from + bytes && from < to + bytes) {
          fail(ErrorCode::kUnsupported, "cuda: rank {} lane {} op {}: a copy between partly overlapping ranges",
               plan_.streams[ref.stream].rank, plan_.streams[ref.stream].lane, command.op);
        }
        if (message != nullptr && command.dst.space == Space::kStaging) {
          if (checksums_) checksum(from, bytes, command.dst.offset, *message, sent_, stream);
          if (corrupt_target_[static_cast<size_t>(command.message)] == nullptr) {
            corrupt_target_[static_cast<size_t>(command.message)] = to + bytes / 2;
          }
        }
        if (message != nullptr && command.a.space == Space::kStaging && checksums_) {
          checksum(from, bytes, command.a.offset, *message, received_, stream);
        }
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(to, from, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream));
        return;
      }
      case CommandKind::kReduce:
        if (message != nullptr && command.b.space == Space::kStaging && checksums_) {
          checksum(address(command.b), command.elements * element_bytes_, command.b.offset, *message, received_,
                   stream);
        }
        launch_reduce(plan_.dtype, plan_.op, address(command.a), address(command.b), address(command.dst),
                      command.elements, stream);
        return;
      case CommandKind::kDivide:
        launch_divide(plan_.dtype, address(command.dst), command.elements, plan_.nranks, stream);
        return;
      case CommandKind::kRecordEvent:
        if (message != nullptr) publish(static_cast<size_t>(command.message), stream);
        TANDEM_CUDA_CHECK(cudaEventRecord(events_[command.event], stream));
        return;
      case CommandKind::kWaitEvent:
        TANDEM_CUDA_CHECK(cudaStreamWaitEvent(stream, events_[command.event], 0));
        return;
    }
  }

 private:
  std::byte* address(const Location& where) const {
    std::byte* base = nullptr;
    switch (where.space) {
      case Space::kInput:
        base = static_cast<std::byte*>(buffers_[static_cast<size_t>(where.rank)].input);
        break;
      case Space::kOutput:
        base = static_cast<std::byte*>(buffers_[static_cast<size_t>(where.rank)].output);
        break;
      case Space::kScratch:
        base = scratch_;
        break;
      case Space::kStaging:
        base = staging_;
        break;
    }
    if (base == nullptr) fail(ErrorCode::kInvalidArgument, "cuda: rank {}'s buffer is null", where.rank);
    return base + where.offset * element_bytes_;
  }

  // Sums a staged piece, indexed by its byte position in the message, into sums[message].
  void checksum(const std::byte* data, int64_t bytes, int64_t staging_offset, const Message& message,
                unsigned long long* sums, cudaStream_t stream) const {
    const auto id = static_cast<size_t>(&message - plan_.messages.data());
    launch_checksum(data, bytes, (staging_offset - message.staging_offset) * element_bytes_, sums + id, stream);
  }

  // The message is staged: apply its faults before its event tells the receiver.
  void publish(size_t id, cudaStream_t stream) const {
    if (faults_.corrupt[id] && corrupt_target_[id] != nullptr)
      launch_flip_bits(corrupt_target_[id], kCorruptBitMask, stream);
    launch_spin(faults_.spin_ns[id], stream);
  }

  const StreamPlan& plan_;
  std::span<const RankBuffers> buffers_;
  const MessageFaults& faults_;
  const bool checksums_;
  const int64_t element_bytes_;
  std::byte* const scratch_;
  std::byte* const staging_;
  unsigned long long* const sent_;
  unsigned long long* const received_;
  const std::vector<cudaStream_t>& streams_;
  const std::vector<cudaEvent_t>& events_;
  std::vector<std::byte*> corrupt_target_;  // per message: a byte of its first non-empty piece
};

void check_arguments(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                     const RunContext& context) {
  if (schedule.nranks < 1 || buffers.size() != static_cast<size_t>(schedule.nranks)) {
    fail(ErrorCode::kInvalidArgument, "cuda: {} rank buffers for a schedule of {} ranks", buffers.size(),
         schedule.nranks);
  }
  if (spec.collective != schedule.collective || spec.nranks != schedule.nranks) {
    fail(ErrorCode::kInvalidArgument, "cuda: the spec ({}, {} ranks) does not match the schedule ({}, {} ranks)",
         name(spec.collective), spec.nranks, name(schedule.collective), schedule.nranks);
  }
  if (context.timeout.count() <= 0) {
    fail(ErrorCode::kInvalidArgument, "cuda: timeout must be positive, got {} ms", context.timeout.count());
  }
}

}  // namespace

CudaExecutor::CudaExecutor(CudaOptions options) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    fail(ErrorCode::kUnsupported, "no CUDA device: {}", cudaGetErrorString(status));
  }
  if (count == 0) fail(ErrorCode::kUnsupported, "no CUDA device: none visible");
  if (options.device < 0 || options.device >= count) {
    fail(ErrorCode::kInvalidArgument, "cuda: device {} out of range ({} visible)", options.device, count);
  }
  impl_ = std::make_unique<Impl>(options);
  TANDEM_CUDA_CHECK(cudaSetDevice(options.device));
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->control, cudaStreamNonBlocking));
  TANDEM_CUDA_CHECK(cudaEventCreate(&impl_->start));
  TANDEM_CUDA_CHECK(cudaEventCreate(&impl_->stop));
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->fork, cudaEventDisableTiming));
}

CudaExecutor::~CudaExecutor() = default;

BufferSpace* CudaExecutor::buffer_space() { return &impl_->space; }

RunResult CudaExecutor::run(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                            const RunContext& context) {
  std::lock_guard lock(impl_->mutex);
  check_arguments(schedule, spec, buffers, context);
  TANDEM_CUDA_CHECK(cudaSetDevice(impl_->options.device));
  const StreamPlan plan = build_stream_plan(schedule, spec, context.tiles, context.align_elements);
  const MessageFaults faults = impl_->query_faults(plan, context);
  if (!faults.stalled.empty()) Impl::stall(schedule, plan, faults, context);

  const auto element_bytes = size_bytes(spec.dtype);
  std::byte* scratch = impl_->scratch.reserve(static_cast<size_t>(plan.scratch_elements) * element_bytes, "scratch");
  std::byte* staging = impl_->staging.reserve(static_cast<size_t>(plan.staging_elements) * element_bytes, "staging");
  // Checksums: sent then received, one 64-bit sum per message each.
  const size_t sum_bytes = 2 * plan.messages.size() * sizeof(unsigned long long);
  auto* sums = reinterpret_cast<unsigned long long*>(impl_->checksums.reserve(sum_bytes, "checksums"));
  impl_->ensure_streams(plan.streams.size());
  // The plan's events, then one "stream done" event per stream.
  impl_->ensure_events(plan.event_count + plan.streams.size());

  const cudaStream_t control = impl_->control;
  if (context.checksums) TANDEM_CUDA_CHECK(cudaMemsetAsync(sums, 0, sum_bytes, control));
  // Every stream waits for `fork` on the control stream, runs its commands, and the control stream
  // waits for every stream's last one.
  auto issue_all = [&](cudaEvent_t fork) {
    TANDEM_CUDA_CHECK(cudaEventRecord(fork, control));
    for (size_t s = 0; s < plan.streams.size(); ++s) {
      TANDEM_CUDA_CHECK(cudaStreamWaitEvent(impl_->streams[s], fork, 0));
    }
    Launch launch(plan, buffers, faults, context.checksums, scratch, staging, sums, impl_->streams, impl_->events);
    for (const CommandRef& ref : issue_order(plan)) launch.issue(ref);
    for (size_t s = 0; s < plan.streams.size(); ++s) {
      const cudaEvent_t done = impl_->events[plan.event_count + s];
      TANDEM_CUDA_CHECK(cudaEventRecord(done, impl_->streams[s]));
      TANDEM_CUDA_CHECK(cudaStreamWaitEvent(control, done, 0));
    }
  };
  GraphRun graph;
  if (impl_->options.graph) {
    impl_->launch_as_graph(issue_all, graph);
  } else {
    issue_all(impl_->start);
  }
  TANDEM_CUDA_CHECK(cudaEventRecord(impl_->stop, control));

  // Wait for the stop event, within the timeout (a kernel that never ends would otherwise hang
  // the caller; the device is then still busy with it).
  const Clock::time_point deadline = Clock::now() + context.timeout;
  cudaError_t status = cudaEventQuery(impl_->stop);
  while (status == cudaErrorNotReady) {
    if (Clock::now() > deadline) {
      fail(ErrorCode::kTimeout, "cuda: {} ({} ranks) did not finish on device {} within {} ms",
           tandem::name(spec.collective), spec.nranks, impl_->options.device, context.timeout.count());
    }
    std::this_thread::sleep_for(kPollInterval);
    status = cudaEventQuery(impl_->stop);
  }
  TANDEM_CUDA_CHECK(status);
  float milliseconds = 0;
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, impl_->start, impl_->stop));

  if (context.checksums && !plan.messages.empty()) {
    std::vector<unsigned long long> host_sums(2 * plan.messages.size());
    TANDEM_CUDA_CHECK(cudaMemcpy(host_sums.data(), sums, sum_bytes, cudaMemcpyDeviceToHost));
    for (size_t id = 0; id < plan.messages.size(); ++id) {
      if (host_sums[id] == host_sums[plan.messages.size() + id]) continue;
      const Message& m = plan.messages[id];
      fail(FaultReport{.kind = FaultReport::Kind::kCorrupt,
                       .backend = "cuda",
                       .rank = m.dst,
                       .peer = m.src,
                       .at = message_position(m, context, OpKind::kRecv)});
    }
  }
  return RunResult{.seconds = milliseconds * 1e-3};
}

}  // namespace tandem::cuda
