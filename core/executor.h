// The executor contract: what every backend implements: host threads (backend/host,
// HostExecutor), the simulator (sim/sim_executor.h, SimExecutor: simulated time, no data), CUDA
// (backend/cuda) and NCCL (backend/nccl). tests/conformance runs one suite of schedules and faults
// over every executor this machine can run and checks that they end alike.
//
// run() executes a validated schedule once for every rank. Each backend honours the semantics in
// core/schedule.h: lanes issue in order, sends are eager, per-(src, dst, lane) FIFO matching,
// deps before an op starts, kAvg as a sum divided by nranks at the end. Chunks map to elements
// through ChunkMap(count, chunks_per_block, tiles, align): the program runs once per tile, tile
// after tile on each lane, so consecutive tiles pipeline across ranks.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/faults.h"
#include "core/schedule.h"

namespace tandem {

// One rank's buffers. In-place runs pass aliased pointers exactly as NCCL defines them (see
// in_place_input_chunk); the schedule's dependencies are inferred with that aliasing, so both
// forms are safe. Buffers belong to the caller.
struct RankBuffers {
  void* input = nullptr;
  void* output = nullptr;
};

// The fault injector's hook into a backend: asked for every send (src rank, dst rank, the op's
// index in src's program over all tiles, lanes in order: tile * ops_per_tile + the lane's first op
// + the op's index in its lane); empty = no faults. Backends apply the effect to that transfer
// (core/faults.h says what each field means) and report it alike, as a FaultReport inside the
// Error (core/fault_report.h, fault_error()): a failed send as kSendFailed (rank = the sender, peer,
// its op, the fault); a stalled one loses its message and the later ones of that (src, dst,
// lane), and the receiver's timeout is kLost (rank = the receiver, peer = the sender, the fault);
// a corrupt one, with checksums, kCorrupt (rank = the receiver, peer = the sender, its op).
using TransferHook = std::function<TransferEffect(int src, int dst, int64_t op_index)>;

struct RunContext {
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  // a rank waiting longer fails
  uint32_t tiles = 1;                                           // pipelining depth (>= 1)
  int64_t align_elements = 1;                                   // chunk boundaries on multiples of this
  TransferHook on_send;                                         // faults (may be empty)
  bool checksums = false;  // every message carries a checksum the receiver verifies (Error(kCorrupt))
};

struct RunResult {
  double seconds = 0;  // the backend's clock: wall time on real backends, simulated time in sim
};

// Memory a backend wants its rank buffers in, when that is not the caller's host memory: device
// memory for the cuda and nccl backends. The caller allocates every rank's buffers through it,
// fills inputs with upload() and reads results with download(). All calls are synchronous.
class BufferSpace {
 public:
  virtual ~BufferSpace() = default;
  // `bytes` for `rank` (on the device that rank runs on); never null (throws Error(kBackend) with
  // the device and size when it cannot). Contents are undefined.
  virtual void* allocate(int rank, size_t bytes) = 0;
  virtual void release(void* buffer) = 0;
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  // Where run() wants the RankBuffers' memory; nullptr: the caller's host memory (host, sim).
  virtual BufferSpace* buffer_space() { return nullptr; }
  // False for an executor that times a schedule without moving data (sim): run() neither reads nor
  // writes the buffers, which may be empty, so there is nothing to fill or check.
  virtual bool moves_data() const { return true; }
  // Whether run()'s seconds are wall time (host, cuda, nccl) or a clock of the backend's own (sim's
  // simulated time): a caller must not time a failed run() with the wall clock of the latter.
  virtual bool wall_clock() const { return true; }
  // The ranks of an `nranks` collective this process runs: every rank, except under a
  // process-per-rank launch (nccl under mpirun / srun), where run() reads and writes only these
  // ranks' buffers and the others may be null.
  virtual std::vector<int> local_ranks(int nranks) const {
    std::vector<int> ranks(static_cast<size_t>(nranks));
    for (int r = 0; r < nranks; ++r) ranks[static_cast<size_t>(r)] = r;
    return ranks;
  }
  // Runs `schedule` for `spec` (its count, dtype and op) over `buffers` (one per rank).
  // Throws Error(kTimeout) naming the rank that never arrived, Error(kBackend) on other failures.
  virtual RunResult run(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                        const RunContext& context) = 0;
};

}  // namespace tandem
