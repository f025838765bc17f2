// NcclExecutor's injected faults (RunContext::on_send) and message checksums (RunContext::checksums).
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
#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "backend/kernels/fault_kernels.h"
#include "backend/kernels/reduce.h"
#include "backend/launch/launch.h"
#include "backend/nccl/nccl_executor_internal.h"
#include "backend/nccl/nccl_plan.h"
#include "core/error.h"
#include "core/fault_report.h"
#include "core/faults.h"

namespace tandem::nccl {
namespace {

constexpr double kExpectedLinkBytesPerSecond = 100e9;  // NVLink-class, for the delay fault only

}  // namespace

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

}  // namespace tandem::nccl
