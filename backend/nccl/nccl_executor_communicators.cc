// NcclExecutor's communicators: their creation, clean shutdown or abort, and shrink.
//
// Communicators. Single process: one communicator per rank of the collective, rank r on device
// devices_[r] (0..n-1 at first), created together inside one ncclGroupStart / End with
// ncclCommInitRankConfig (what ncclCommInitAll does, but with a config: ncclCommInitAll takes none,
// and the communicators must be nonblocking to be abortable). They are rebuilt when a run asks for
// another rank count. Under MPI: one communicator for this process's rank, created once from rank
// 0's ncclUniqueId (unique_id.h); every run must use the world size (or the size after shrink()).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/kernels/reduce.h"
#include "backend/launch/launch.h"
#include "backend/nccl/nccl_executor_internal.h"
#include "backend/nccl/unique_id.h"
#include "core/error.h"

namespace tandem::nccl {
namespace {

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

void check_nccl(ncclResult_t status, const char* call, const char* file, int line, ncclComm_t comm) {
  if (status == ncclSuccess || status == ncclInProgress) return;
  const char* last = ncclGetLastError(comm);
  fail(ErrorCode::kBackend, "{} failed at {}:{}: {}{}", call, file, line, ncclGetErrorString(status),
       last != nullptr && *last != '\0' ? fmt::format(" ({})", last) : std::string());
}

// Aborts and forgets every local communicator (all ranks must: NCCL's fault-tolerance contract).
void NcclExecutor::Impl::abort_all() noexcept {
  for (LocalRank& local : ranks) {
    if (local.comm != nullptr) (void)ncclCommAbort(local.comm);
    local.comm = nullptr;
  }
  destroy_streams();
  ranks.clear();
  world = 0;
}

void NcclExecutor::Impl::destroy_streams() noexcept {
  for (LocalRank& local : ranks) {
    if (local.stream == nullptr) continue;
    (void)cudaSetDevice(local.device);
    (void)cudaStreamDestroy(local.stream);
    local.stream = nullptr;
  }
}

// Finalizes and destroys the communicators; aborts them when that fails or takes too long.
void NcclExecutor::Impl::close() noexcept {
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

void NcclExecutor::Impl::create_streams() {
  for (LocalRank& local : ranks) {
    TANDEM_CUDA_CHECK(cudaSetDevice(local.device));
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&local.stream, cudaStreamNonBlocking));
  }
}

// Single process: communicators for `nranks` ranks on devices_[0 .. nranks).
void NcclExecutor::Impl::init_single(int nranks) {
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
void NcclExecutor::Impl::init_mpi() {
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
void NcclExecutor::Impl::ensure_world(int nranks) {
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

LocalRank* NcclExecutor::Impl::local_rank(int rank) {
  for (LocalRank& local : ranks) {
    if (local.rank == rank) return &local;
  }
  return nullptr;
}

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

}  // namespace tandem::nccl
