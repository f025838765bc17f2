// The NCCL plan: a schedule lowered to what NCCL can run. Plain C++ (no CUDA, no NCCL), so the
// lowering is tested on CPU; the nccl executor only replays it.
//
// NCCL has no lanes and no dependency lists: a rank posts groups (ncclGroupStart; ncclSend /
// ncclRecv ...; ncclGroupEnd) on one stream, a group completes once all its sends and receives
// have, and within a group (and across groups) the messages between two ranks match in posting
// order. The plan turns each rank's program into an ordered list of groups:
//
//   tile 0: group(level 0) group(level 1) ... group(level L-1)   tile 1: group(level 0) ...   [divide]
//
//   - Levels. The level of an op is its round as core/schedule.h defines it: the depth in the
//     data-dependency DAG (deps), a matched Send / Recv pair counting as one node. (validate()'s
//     Lane::rounds can place a receive one round after its send when the receive also waits for a
//     local op; the plan lifts the send to the receive's level, so a pair is always in one group.)
//     Ops of one level never depend on each other, so a level's transfers run concurrently in one
//     group and its local ops (Copy, Reduce, and the reduction of each RecvReduce) run after the
//     group, in lane order. Every dependency points to a lower level, hence to an earlier group.
//   - Matching. A group's transfers are posted in (lane, op, chunk) order. A pair's send and
//     receive are at the same level and the k-th send on (src, dst, lane) matches the k-th receive,
//     so src's sends to dst and dst's receives from src appear in the same order on both sides:
//     NCCL's posting-order matching pairs exactly the schedule's messages. Deadlock freedom: group
//     g of a rank only waits for group g's partner ops on its peers, and every rank posts its groups
//     in level order, so by induction on the level every group completes.
//   - Messages. An op over several chunks becomes one message per run of chunks that are
//     contiguous on both sides (the split is computed from both the send and the receive, so both
//     sides agree); empty chunks send nothing.
//   - Staging. A RecvReduce receives into the rank's staging area (allocated per group from 0),
//     then dst = src (+) staging after the group. Scratch slots are scratch_slot_elements apart.
//   - Tiles run one after the other (RunContext::tiles), with the same groups each.
//   - kAvg: after the last group, the reduced output is divided by nranks (finish step).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/schedule.h"

namespace tandem::nccl {

// Where an element range lives on a rank: the caller's input / output, the executor's scratch or
// its staging area.
enum class PlanBuffer : uint8_t { kInput, kOutput, kScratch, kStaging };
std::string_view name(PlanBuffer buffer);

struct PlanRange {
  PlanBuffer buffer = PlanBuffer::kInput;
  int64_t offset = 0;  // elements from the buffer's start
  int64_t count = 0;   // elements

  int64_t end() const { return offset + count; }
  bool operator==(const PlanRange&) const = default;
};

enum class TransferKind : uint8_t { kSend, kRecv };

// One ncclSend / ncclRecv of `range` to / from `peer`, for op `op` of `lane` in tile `tile`.
struct Transfer {
  TransferKind kind = TransferKind::kSend;
  int peer = -1;
  PlanRange range;
  uint32_t tile = 0;
  uint32_t lane = 0;
  uint32_t op = 0;
  // Sends: the op's index in this rank's program over all tiles, lanes in order (what
  // RunContext::on_send is asked with, as on the host backend).
  int64_t op_index = 0;
};

// kCopy: dst = a.  kReduce: dst = a (+) b.  kDivide: dst /= nranks (a, b unused).
enum class LocalKind : uint8_t { kCopy, kReduce, kDivide };

struct LocalSegment {
  PlanRange a;
  PlanRange b;
  PlanRange dst;
};

// One schedule op's local work, as segments of elements. A Copy's segments are its chunks (never
// merged when source and destination could alias in place: each is then identical or disjoint);
// run them back to front when the destination starts after the source in memory, as the host does.
struct LocalStep {
  LocalKind kind = LocalKind::kCopy;
  std::vector<LocalSegment> segments;
  uint32_t lane = 0;
  uint32_t op = 0;
};

struct PlanGroup {
  uint32_t tile = 0;
  uint32_t level = 0;
  std::vector<Transfer> transfers;  // one ncclGroupStart / End (none: local work only)
  std::vector<LocalStep> local;     // after the group completes, in order
};

struct RankPlan {
  int rank = 0;
  std::vector<PlanGroup> groups;
  std::optional<LocalStep> finish;  // kAvg's division of the reduced output
  int64_t scratch_slot_elements = 0;
  int64_t scratch_elements = 0;  // scratch the executor allocates for this rank
  int64_t staging_elements = 0;  // staging the executor allocates for this rank
};

struct NcclPlan {
  int nranks = 0;
  uint32_t tiles = 1;
  uint32_t levels = 0;          // per tile
  std::vector<RankPlan> ranks;  // the ranks asked for, in that order
  // Statistics: pairs whose send validate() put in an earlier round than its receive (lifted).
  int64_t lifted_sends = 0;
};

struct PlanOptions {
  uint32_t tiles = 1;
  int64_t align_elements = 1;
};

// Lowers `schedule` (validated; a symmetric one is expanded) for `spec` into the plans of `ranks`
// (empty: every rank). Throws Error(kInvalidArgument) for a spec / option mismatch and
// Error(kInvalidSchedule) for a schedule that is malformed (unmatched send, chunk-size mismatch,
// cyclic dependencies).
NcclPlan build_nccl_plan(const Schedule& schedule, const CollectiveSpec& spec, const PlanOptions& options,
                         std::span<const int> ranks = {});

// "rank 2 tile 0 level 3: send 1000 elements of output[2000, 3000) to 3" (for debugging).
std::string describe(const Transfer& transfer, int rank);

}  // namespace tandem::nccl
