// How this process was launched, and the collectives among processes that a process-per-rank run
// needs before NCCL exists: rank 0's ncclUniqueId broadcast to every process, device assignment,
// results gathered on rank 0. Pure C++ over MPI (built when CMake finds MPI; no CUDA needed), so
// CI tests it with `mpirun -np 2` on loopback.
//
// Launch kinds:
//   - single: one process drives every local GPU (ncclCommInitAll); world size 1.
//   - mpi: one process per rank under mpirun / srun --mpi=pmix (MPI_Init); rank and size from
//     MPI_COMM_WORLD, local rank from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), the GPU of a
//     process is local_rank % visible devices (device_for_local_rank).
// detect_launcher() picks mpi when the environment shows a launcher with more than one process
// (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK with SLURM_NTASKS, SLURM_STEP_NUM_TASKS) and MPI is
// built in; such an environment in a build without MPI is an error, not a silent single-process
// run. Every MPI failure throws Error(kBackend) naming the call, file, line and MPI's message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem::nccl {

enum class LaunchKind : uint8_t { kSingle, kMpi };

struct LaunchInfo {
  LaunchKind kind = LaunchKind::kSingle;
  int rank = 0;        // this process in the world
  int size = 1;        // processes in the world
  int local_rank = 0;  // this process among those on its host
  int local_size = 1;
  std::string host;              // this process's host name
  std::string describe() const;  // "mpi rank 1 of 2 (local 1 of 2 on host-a)"
};

// The collectives among the processes of a launch. Every process calls each one, in the same order
// (as MPI requires); thread-compatible, not thread-safe.
class Launch {
 public:
  virtual ~Launch() = default;
  const LaunchInfo& info() const { return info_; }

  // Every process gets rank `root`'s `bytes`. Every process must pass the same size: a mismatch
  // throws Error(kInvalidArgument) on every process (none hangs).
  virtual void broadcast(std::vector<std::byte>& bytes, int root) = 0;
  // Every process's `bytes` (any size), in rank order, on every process.
  virtual std::vector<std::vector<std::byte>> all_gather(const std::vector<std::byte>& bytes) = 0;
  // Every process's `bytes` in rank order on rank 0; empty elsewhere.
  virtual std::vector<std::vector<std::byte>> gather_to_root(const std::vector<std::byte>& bytes) = 0;
  virtual void barrier() = 0;
  // Any process's failure ends the job: MPI_Abort with `code` (a no-op for single).
  virtual void abort_all(int code) = 0;

 protected:
  LaunchInfo info_;
};

// True when this build has MPI.
bool mpi_available();

// A multi-process launcher seen in the environment: the variable that shows it and the number of
// processes it started.
struct LauncherSeen {
  std::string variable;  // e.g. "OMPI_COMM_WORLD_SIZE"
  int size = 0;
};
// Reads environment variables (getenv's contract: nullptr when unset).
using EnvLookup = std::function<const char*(const char*)>;
// The launcher `env` shows when it started more than one process; nullopt otherwise (no launcher,
// or a launcher of one process, which runs as single).
std::optional<LauncherSeen> detect_launcher(const EnvLookup& env);

// The launch this process is in (see the top), created on first use from the environment. The mpi
// launch calls MPI_Init_thread on first use (unless the program already did) and MPI_Finalize at
// exit (when it initialised MPI). Throws Error(kUnsupported) when a multi-process launcher is
// detected in a build without MPI, naming the variable seen.
Launch& current_launch();

// Single-process launch, for tests and for callers that know.
std::unique_ptr<Launch> single_launch();

// The GPU a process uses: local_rank % device_count. Throws Error(kUnsupported) "no CUDA device"
// when device_count < 1, Error(kInvalidArgument) for a negative local rank.
int device_for_local_rank(int local_rank, int device_count);

}  // namespace tandem::nccl
