// NcclExecutor's waits on its nonblocking communicators. wait_for_communicators polls
// ncclCommGetAsyncError until no call is in progress (creation, a group, finalize, shrink); wait
// polls it and cudaStreamQuery every kPollInterval until every local rank's stream is done, and past
// RunContext::timeout without a rank finishing it aborts every local communicator (they are rebuilt
// on the next run) and throws Error(kTimeout) naming the ranks that did not finish.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "backend/nccl/nccl_executor_internal.h"
#include "core/error.h"

namespace tandem::nccl {

// Polls every local communicator until none is in progress; aborts them all and throws on an
// error or past `timeout`.
void NcclExecutor::Impl::wait_for_communicators(const char* what, std::chrono::milliseconds timeout) {
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

}  // namespace tandem::nccl
