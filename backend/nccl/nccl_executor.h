// The nccl backend: tandem's schedules on NCCL, and NCCL's own collectives as the baseline.
//   - kSchedule: the schedule is lowered to an NCCL plan (backend/nccl/nccl_plan.h: one group per
//     round, a matched send / receive always in the same group, sends to one peer in lane order on
//     both sides); each group is one ncclGroupStart / ncclSend / ncclRecv ... / ncclGroupEnd on the
//     rank's stream; a RecvReduce receives into a staging buffer and reduces with backend/cuda's
//     kernels on the same stream; Copy / Reduce are device copies / kernels. Tiles and alignment as
//     RunContext says.
//   - kNative: ncclAllReduce, ncclAllGather, ncclReduceScatter, ncclBroadcast, ncclReduce (avg:
//     ncclAvg for floats, sum then divide for integers, as the host), all_to_all / send_recv as
//     grouped ncclSend / ncclRecv: the baseline nccl-tests measures. NCCL picks its own chunking,
//     so RunContext::tiles / align_elements do not apply; faults and checksums are kSchedule only
//     (Error(kUnsupported) in kNative).
// Launch (backend/launch/launch.h): single process, rank r on device r (NcclOptions::devices GPUs;
// a collective of more ranks than GPUs is Error(kUnsupported): NCCL does not allow two ranks of one
// communicator on one GPU), all ranks' communicators created in one group, rebuilt when the rank
// count changes; or one process per rank under MPI (ncclCommInitRankConfig, rank 0's unique id
// broadcast over MPI; the GPU is local_rank % visible devices; local_ranks() is this process's
// rank only, and every run must use the world size).
// Communicators are nonblocking (config.blocking = 0): every call may return ncclInProgress and a
// wait polls ncclCommGetAsyncError and the streams; past RunContext::timeout without a rank
// finishing it aborts the communicators (ncclCommAbort; a single process rebuilds them on the next
// run) and throws Error(kTimeout); an NCCL error throws Error(kBackend) naming the call, file and
// line with ncclGetErrorString and ncclGetLastError. shrink() drops ranks (ncclCommShrink with
// NCCL_SHRINK_ABORT on the survivors, renumbered contiguously in the old order).
// Faults (RunContext::on_send, asked once per send op before anything is enqueued), kSchedule:
// fail -> Error(kFault) before the run starts (under MPI every process throws it); stall -> the
// sender posts nothing from that group on, so its peers wait until the timeout (Error(kTimeout));
// delay / bandwidth factors -> the sender's stream spins (factor - 1) x the transfer's expected
// time first; corrupt -> the receiver gets the message with one bit flipped.
// Checksums (RunContext::checksums, kSchedule): every message carries the sender's checksum; a
// mismatch throws Error(kCorrupt) after the run.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/executor.h"

namespace tandem::nccl {

enum class NcclMode : uint8_t { kSchedule, kNative };

struct NcclOptions {
  NcclMode mode = NcclMode::kSchedule;
  int devices = 0;  // single-process launch: GPUs to use (0: all visible)
};

class NcclExecutor : public Executor {
 public:
  // Throws Error(kUnsupported) "no CUDA device: ..." without a GPU (under MPI: on every process
  // when any lacks one), Error(kBackend) when NCCL initialisation fails (with NCCL's message).
  // Under MPI the constructor is collective: every process constructs its executor together.
  explicit NcclExecutor(NcclOptions options = {});
  ~NcclExecutor() override;

  std::string name() const override { return "nccl"; }
  BufferSpace* buffer_space() override;
  std::vector<int> local_ranks(int nranks) const override;
  RunResult run(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                const RunContext& context) override;
  // Drops `ranks` from the communicators (ncclCommShrink); later runs have nranks - ranks.size().
  // After an abort (timeout, error) a single process keeps the surviving devices for the rebuild;
  // under MPI that is Error(kUnsupported). Collective over the surviving processes.
  void shrink(std::span<const int> ranks);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::nccl
