// The cuda executor's lowering of a schedule to streams, in plain C++ (no CUDA) so that it can be
// run and checked on any machine.
//
// A StreamPlan has one stream per (rank, lane): an ordered list of commands a CUDA stream executes
// in order (Copy, Reduce, Divide), plus RecordEvent / WaitEvent pairs that order commands across
// streams the way the schedule's deps and its Send -> Recv matching demand. Locations are element
// offsets into a rank's Input / Output buffer or into the executor-owned Scratch and Staging areas;
// a caller binds them to memory (device pointers in CudaExecutor, host memory in run_on_host).
//
// How the schedule's semantics (core/schedule.h) are kept:
//   - Eager sends by staging: a Send copies its chunks into a staging area of its own (one per
//     message, never reused within a run) and records the message's event; the matching Recv
//     waits for that event and copies (RecvReduce: reduces) from staging. The sender can then
//     overwrite its slot at once, exactly as with the host's eager payload copy. The alternative,
//     copying straight from the sender's slot and making later writers of that slot wait for the
//     receiver, turns an eager send into a rendezvous and deadlocks valid schedules (A sends x to
//     B, then overwrites x, then sends to C; B receives from C before it receives x), and needs
//     to know the caller's in-place aliasing. Staging costs one extra device copy and the bytes
//     of all messages of a run; correctness first.
//   - Per-(src, dst, lane) FIFO matching: the k-th Send from a to b on lane l, counted over all
//     tiles, is the k-th Recv of b from a on l.
//   - deps: a dep on another lane of the same rank is a WaitEvent on the event recorded right
//     after that op; same-lane deps are the stream's order.
//   - Tiles run tile after tile on every lane; before a rank's lane starts tile t + 1 it waits for
//     every other lane of that rank to finish tile t (as the host's per-tile progress loop does:
//     scratch slots are reused from tile to tile).
//   - kAvg: after its last tile a rank's first stream waits for its other lanes and divides the
//     reduced output by nranks (all_reduce, reduce_scatter: every rank; reduce: the root).
//   - Chunks map to elements through ChunkMap exactly as in the host executor: Input / Output
//     chunk c is sub-chunk c % k of block c / k (blocks of `count` elements); scratch slot s holds
//     sub-chunk s % k of the current tile.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/executor.h"
#include "core/schedule.h"

namespace tandem::cuda {

enum class Space : uint8_t { kInput, kOutput, kScratch, kStaging };

struct Location {
  Space space = Space::kInput;
  int32_t rank = 0;    // Input / Output: whose buffer (Scratch: the owner; Staging: the sender)
  int64_t offset = 0;  // elements from the start of the rank's buffer, or of the whole scratch /
                       // staging area (those are one area each, shared by all ranks)
};

enum class CommandKind : uint8_t { kCopy, kReduce, kDivide, kRecordEvent, kWaitEvent };

struct Command {
  static constexpr uint32_t kNoOp = UINT32_MAX;

  CommandKind kind = CommandKind::kCopy;
  Location dst;          // Copy / Reduce / Divide: written
  Location a;            // Copy: the source; Reduce: the left operand (dst = a (+) b)
  Location b;            // Reduce: the right operand
  int64_t elements = 0;  // Copy / Reduce / Divide (never 0: empty pieces are left out)
  uint32_t event = 0;    // RecordEvent / WaitEvent
  // The message this command stages (a Copy into staging, and the RecordEvent that publishes it)
  // or delivers (the WaitEvent for it, and the Copy / Reduce reading staging); -1 otherwise.
  int32_t message = -1;
  // The schedule op it comes from (for messages): tile and index in the stream's lane; kNoOp for
  // tile barriers and the final divide.
  uint32_t tile = kNoOp;
  uint32_t op = kNoOp;
};

struct Stream {
  int rank = 0;
  uint32_t lane = 0;
  std::vector<Command> commands;
};

// One matched Send / Recv.
struct Message {
  int src = 0;
  int dst = 0;
  uint32_t lane = 0;
  uint32_t tile = 0;
  uint32_t send_op = 0;  // index of the Send in src's lane
  uint32_t recv_op = 0;  // index of the Recv / RecvReduce in dst's lane
  // The Send's index in src's program over all tiles, lanes in order (what TransferHook gets):
  // tile * ops_per_tile + ops of the lanes before `lane` + send_op.
  int64_t send_op_index = 0;
  int64_t staging_offset = 0;  // elements into the staging area (16-byte aligned)
  int64_t staging_elements = 0;  // from staging_offset to the end of the last piece
  int64_t payload_elements = 0;  // elements carried (staging_elements less alignment padding)
  uint32_t ready_event = 0;      // recorded once the message is staged
};

struct StreamPlan {
  int nranks = 0;
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  std::vector<Stream> streams;        // rank-major, lanes in order; every rank has at least one
  std::vector<uint32_t> first_stream;  // per rank: the index of its lane 0 stream
  std::vector<Message> messages;       // in the order the sends are issued: tile, rank, lane, op
  uint32_t event_count = 0;            // events are 0 .. event_count - 1, each recorded once
  int64_t scratch_elements = 0;        // size of the whole scratch area
  int64_t staging_elements = 0;        // size of the whole staging area
};

// Lowers `schedule` (explicit or rank-symmetric; validated) for `spec` with `tiles` tiles and chunk
// boundaries on multiples of `align_elements`. Scratch slots and staged pieces start on 16-byte
// boundaries, so that the reduction kernels can vectorize. Throws Error(kInvalidArgument) for bad
// arguments and Error(kInvalidSchedule) naming rank, lane and op for a schedule whose sends and
// receives do not match.
StreamPlan build_stream_plan(const Schedule& schedule, const CollectiveSpec& spec, uint32_t tiles,
                             int64_t align_elements);

struct CommandRef {
  uint32_t stream = 0;
  uint32_t index = 0;
};

// An order in which the commands can be issued one at a time: each stream's commands in order,
// and every WaitEvent after the RecordEvent of its event (CUDA's cudaStreamWaitEvent only sees a
// record issued before it). Without `seed`: stream after stream, each as far as it can go (what
// the executor issues); with one: the next stream is drawn at random among those that can go on.
// Throws Error(kBackend) naming the blocked streams when the plan deadlocks.
std::vector<CommandRef> issue_order(const StreamPlan& plan, std::optional<uint64_t> seed = std::nullopt);

// Runs `plan` on host memory, commands one at a time in issue_order(plan, seed), with core/dtype.h's
// reduce_elements and divide_elements: the reference interpretation of a plan, for tests. Scratch
// and staging are allocated here. A Copy onto the same memory is skipped (in place); a Copy whose
// ranges partly overlap throws Error(kUnsupported), as the device executor does.
void run_on_host(const StreamPlan& plan, std::span<const RankBuffers> buffers, uint64_t seed);

}  // namespace tandem::cuda
