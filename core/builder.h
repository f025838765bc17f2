// ScheduleBuilder: how algorithms write schedules. An algorithm emits ops per rank and lane (or
// whole transfers: a Send on one rank and the matching Recv on another); finish() infers the
// dependency DAG from which op last wrote / read each chunk slot, sizes the scratch buffers and
// returns the Schedule. Emission order per rank is the order the dependency inference follows,
// so an algorithm emits each rank's ops in the order that rank would run them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/schedule.h"

namespace tandem {

class ScheduleBuilder {
 public:
  ScheduleBuilder(Collective collective, Algorithm algorithm, int nranks, int root, uint32_t chunks_per_block,
                  const AlgoParams& params = {});

  // A builder of a rank-symmetric schedule (see Symmetry): emit position 0's program as rank 0,
  // with peers given as position offsets.
  static ScheduleBuilder symmetric(Collective collective, Algorithm algorithm, std::vector<int> order,
                                   uint32_t rotation_group, uint32_t chunks_per_block, const AlgoParams& params = {});
  // The same with one ring order per lane (Symmetry::lane_orders; lane 0's is the order).
  static ScheduleBuilder symmetric(Collective collective, Algorithm algorithm,
                                   std::vector<std::vector<int>> lane_orders, uint32_t rotation_group,
                                   uint32_t chunks_per_block, const AlgoParams& params = {});

  int nranks() const { return schedule_.nranks; }
  uint32_t chunks_per_block() const { return schedule_.chunks_per_block; }

  void send(int rank, int lane, int peer, SlotRange src);
  void recv(int rank, int lane, int peer, SlotRange dst);
  // dst = local (+) received
  void recv_reduce(int rank, int lane, int peer, SlotRange local, SlotRange dst);
  void copy(int rank, int lane, SlotRange src, SlotRange dst);
  // dst = dst (+) src
  void reduce(int rank, int lane, SlotRange src, SlotRange dst);

  // A Send of `src` on `from` and the matching Recv into `dst` on `to`, both on `lane`.
  void transfer(int lane, int from, SlotRange src, int to, SlotRange dst);
  // A Send of `src` on `from` and the matching RecvReduce (dst = local (+) received) on `to`.
  void transfer_reduce(int lane, int from, SlotRange src, int to, SlotRange local, SlotRange dst);

  // Infers dependencies (treating in-place aliased slots as one slot, so the schedule is safe
  // both in and out of place), sizes scratch, and returns the schedule. Does not validate.
  Schedule finish() &&;

 private:
  void append(int rank, int lane, const Op& op);

  Schedule schedule_;
  std::vector<std::vector<OpRef>> emission_;  // per rank: ops in emission order
  int64_t ops_ = 0;                           // emitted so far, checked against max_schedule_ops()
};

// Recomputes every op's dependencies from slot usage, replacing what the lanes hold. Ops of a rank
// are taken lane by lane in their issue order, interleaved by `emission` when given (per rank).
void infer_dependencies(Schedule& schedule, const std::vector<std::vector<OpRef>>* emission = nullptr);

}  // namespace tandem
