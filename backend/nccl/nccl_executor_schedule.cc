// NcclExecutor's schedule mode (NcclMode::kSchedule): a schedule's NCCL plan, run group by group.
//
// A run (kSchedule). The plan of every local rank is built, the fault hook asked about every send
// up front (a failing send throws Error(kFault) before anything is enqueued; under MPI every
// process learns of it, so none waits for a peer that gave up), then for each (tile, level) in
// order: every local rank's delays (spin kernels), one ncclGroupStart; the ranks' sends / receives
// (ncclSend / ncclRecv of bytes, ncclUint8); ncclGroupEnd; then each rank's local steps on its
// stream (cudaMemcpyAsync copies, launch_reduce). One thread drives all local ranks, so a level's
// groups of all of them go into one NCCL group (NCCL needs that to progress several ranks from one
// thread). The wait: nccl_executor_wait.cc; the faults and checksums: nccl_executor_faults.cc.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "backend/kernels/fault_kernels.h"
#include "backend/kernels/reduce.h"
#include "backend/nccl/nccl_executor_internal.h"
#include "backend/nccl/nccl_plan.h"
#include "core/error.h"

namespace tandem::nccl {
namespace {

// The (tile, level) keys of every local rank's groups, in order.
std::vector<std::pair<uint32_t, uint32_t>> group_keys(const NcclPlan& plan) {
  std::vector<std::pair<uint32_t, uint32_t>> keys;
  for (const RankPlan& rank_plan : plan.ranks) {
    for (const PlanGroup& group : rank_plan.groups) keys.emplace_back(group.tile, group.level);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

}  // namespace

RunResult NcclExecutor::Impl::run_schedule(const Schedule& schedule, const CollectiveSpec& spec,
                                           std::span<const RankBuffers> buffers, const RunContext& context) {
  std::vector<int> local_ids;
  for (const LocalRank& local : ranks) local_ids.push_back(local.rank);
  const NcclPlan plan = build_nccl_plan(
      schedule, spec, PlanOptions{.tiles = context.tiles, .align_elements = context.align_elements}, local_ids);
  ScheduleRun run;
  ask_send_faults(plan, context, run);
  reserve_run_memory(plan, buffers, static_cast<int64_t>(size_bytes(spec.dtype)), context.checksums, run);
  const std::vector<std::pair<uint32_t, uint32_t>> keys = group_keys(plan);
  run.cursor.assign(ranks.size(), 0);
  run.stalled.assign(ranks.size(), false);
  run.stall.assign(ranks.size(), {-1, -1});
  run.send_slot.assign(ranks.size(), 0);
  run.recv_slot.assign(ranks.size(), 0);

  const auto start = Clock::now();
  // Anything thrown while enqueueing leaves peers waiting for groups that never come: abort.
  try {
    for (const auto& key : keys) {
      const std::vector<const PlanGroup*> groups = take_groups(plan, key, run);
      const std::vector<std::vector<const std::byte*>> sources = prepare_sends(groups, context, run);
      post_group(groups, sources, context, run);
      run_local_steps(groups, spec, context, run);
    }
    divide_averages(plan, spec, run);
  } catch (...) {
    abort_all();
    throw;
  }

  const RunResult result = wait(start, context);
  fail_if_stalled(schedule, context, run);
  if (context.checksums) check_checksums(plan, run);
  for (LocalRank& local : ranks) local.corrupt_copies.clear();
  return result;
}

// Memory: scratch and staging per rank; checksum sums (zeroed on the rank's stream); this run's
// corrupt copies start empty.
void NcclExecutor::Impl::reserve_run_memory(const NcclPlan& plan, std::span<const RankBuffers> buffers,
                                            int64_t element_bytes, bool checksums, ScheduleRun& run) {
  run.memory.assign(ranks.size(), {});
  run.sums.assign(ranks.size(), {});
  for (size_t i = 0; i < ranks.size(); ++i) {
    LocalRank& local = ranks[i];
    const RankPlan& rank_plan = plan.ranks[i];
    TANDEM_CUDA_CHECK(cudaSetDevice(local.device));
    const RankBuffers& buffer = buffers[static_cast<size_t>(local.rank)];
    run.memory[i] = RankMemory{
        .input = static_cast<std::byte*>(buffer.input),
        .output = static_cast<std::byte*>(buffer.output),
        .scratch = local.scratch.reserve(static_cast<size_t>(rank_plan.scratch_elements * element_bytes), "scratch",
                                         local.device),
        .staging = local.staging.reserve(static_cast<size_t>(rank_plan.staging_elements * element_bytes), "staging",
                                         local.device),
        .element_bytes = element_bytes,
    };
    local.corrupt_copies.clear();
    if (checksums) {
      ChecksumSlots& sums = run.sums[i];
      for (const PlanGroup& group : rank_plan.groups) {
        for (const Transfer& t : group.transfers) (t.kind == TransferKind::kSend ? sums.sends : sums.recvs)++;
      }
      const size_t slots = sums.sends + 2 * sums.recvs;
      auto* base = reinterpret_cast<unsigned long long*>(
          local.checksums.reserve(slots * sizeof(unsigned long long), "checksums", local.device));
      sums.sent = base;
      sums.expected = base + sums.sends;
      sums.received = base + sums.sends + sums.recvs;
      TANDEM_CUDA_CHECK(cudaMemsetAsync(base, 0, slots * sizeof(unsigned long long), local.stream));
    }
  }
}

// This key's group of each local rank, advancing its cursor (nullptr: none, or the rank stalled).
std::vector<const PlanGroup*> NcclExecutor::Impl::take_groups(const NcclPlan& plan, std::pair<uint32_t, uint32_t> key,
                                                              ScheduleRun& run) {
  std::vector<const PlanGroup*> groups(ranks.size(), nullptr);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const std::vector<PlanGroup>& own = plan.ranks[i].groups;
    if (run.cursor[i] < own.size() && std::make_pair(own[run.cursor[i]].tile, own[run.cursor[i]].level) == key) {
      groups[i] = &own[run.cursor[i]++];
    }
    if (groups[i] == nullptr || run.stalled[i]) {
      groups[i] = nullptr;
      continue;
    }
    // Stall: a send never posted; the rank posts nothing from here on.
    for (const Transfer& t : groups[i]->transfers) {
      if (t.kind == TransferKind::kSend && run.faults[i].contains(t.op_index) &&
          run.faults[i][t.op_index].effect.stall && !run.stalled[i]) {
        run.stalled[i] = true;
        run.stall[i] = {t.peer, run.faults[i][t.op_index].effect.fault_index};
      }
    }
    if (run.stalled[i]) groups[i] = nullptr;
  }
  return groups;
}

// The group: every local rank's sends and receives of this level (plus checksum messages), in one
// NCCL group, waited for (a nonblocking communicator takes no new call while one is in progress).
void NcclExecutor::Impl::post_group(const std::vector<const PlanGroup*>& groups,
                                    const std::vector<std::vector<const std::byte*>>& sources,
                                    const RunContext& context, ScheduleRun& run) {
  bool any_transfer = false;
  for (size_t i = 0; i < ranks.size(); ++i) any_transfer |= groups[i] != nullptr && !groups[i]->transfers.empty();
  if (!any_transfer) return;
  TANDEM_NCCL_CHECK(ncclGroupStart());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (groups[i] == nullptr) continue;
    LocalRank& local = ranks[i];
    const ChecksumSlots& sums = run.sums[i];
    size_t sends = 0, recvs = 0;
    for (size_t k = 0; k < groups[i]->transfers.size(); ++k) {
      const Transfer& t = groups[i]->transfers[k];
      const size_t bytes = run.memory[i].bytes(t.range);
      if (t.kind == TransferKind::kSend) {
        check_nccl(ncclSend(sources[i][k], bytes, ncclUint8, t.peer, local.comm, local.stream), "ncclSend", __FILE__,
                   __LINE__, local.comm);
        if (context.checksums) {
          check_nccl(ncclSend(&sums.sent[run.send_slot[i] + sends], sizeof(unsigned long long), ncclUint8, t.peer,
                              local.comm, local.stream),
                     "ncclSend", __FILE__, __LINE__, local.comm);
        }
        ++sends;
      } else {
        check_nccl(ncclRecv(run.memory[i].at(t.range), bytes, ncclUint8, t.peer, local.comm, local.stream), "ncclRecv",
                   __FILE__, __LINE__, local.comm);
        if (context.checksums) {
          check_nccl(ncclRecv(&sums.expected[run.recv_slot[i] + recvs], sizeof(unsigned long long), ncclUint8, t.peer,
                              local.comm, local.stream),
                     "ncclRecv", __FILE__, __LINE__, local.comm);
        }
        ++recvs;
      }
    }
  }
  TANDEM_NCCL_CHECK(ncclGroupEnd());
  wait_for_communicators("send / receive group", context.timeout);
}

// After the group, on each rank's stream: checksums of what arrived, then the local steps (copies
// and reductions); the checksum slots move past this group's messages.
void NcclExecutor::Impl::run_local_steps(const std::vector<const PlanGroup*>& groups, const CollectiveSpec& spec,
                                         const RunContext& context, ScheduleRun& run) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (groups[i] == nullptr) continue;
    LocalRank& local = ranks[i];
    const RankMemory& mem = run.memory[i];
    TANDEM_CUDA_CHECK(cudaSetDevice(local.device));
    for (const Transfer& t : groups[i]->transfers) {
      if (t.kind == TransferKind::kSend) {
        ++run.send_slot[i];
        continue;
      }
      if (context.checksums) {
        cuda::launch_checksum(mem.at(t.range), static_cast<int64_t>(mem.bytes(t.range)), 0,
                              &run.sums[i].received[run.recv_slot[i]], local.stream);
      }
      ++run.recv_slot[i];
    }
    for (const LocalStep& step : groups[i]->local) {
      const size_t n = step.segments.size();
      if (step.kind == LocalKind::kCopy) {
        // Back to front when moving data forward within aliased memory (as the host).
        const bool backward = n > 1 && mem.at(step.segments[0].dst) > mem.at(step.segments[0].a);
        for (size_t s = 0; s < n; ++s) {
          const LocalSegment& segment = step.segments[backward ? n - 1 - s : s];
          std::byte* to = mem.at(segment.dst);
          const std::byte* from = mem.at(segment.a);
          const size_t bytes = mem.bytes(segment.dst);
          if (to == from || bytes == 0) continue;
          if (to < from + bytes && from < to + bytes) {
            fail(ErrorCode::kBackend, "nccl rank {} lane {} op {}: overlapping copy", local.rank, step.lane, step.op);
          }
          TANDEM_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, local.stream));
        }
        continue;
      }
      for (const LocalSegment& segment : step.segments) {
        cuda::launch_reduce(spec.dtype, spec.op, mem.at(segment.a), mem.at(segment.b), mem.at(segment.dst),
                            segment.dst.count, local.stream);
      }
    }
  }
}

// kAvg: the reduced output divided once at the end, on every rank that did not stall.
void NcclExecutor::Impl::divide_averages(const NcclPlan& plan, const CollectiveSpec& spec, const ScheduleRun& run) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    const std::optional<LocalStep>& finish = plan.ranks[i].finish;
    if (!finish || run.stalled[i]) continue;
    TANDEM_CUDA_CHECK(cudaSetDevice(ranks[i].device));
    for (const LocalSegment& segment : finish->segments) {
      cuda::launch_divide(spec.dtype, run.memory[i].at(segment.dst), segment.dst.count, spec.nranks, ranks[i].stream);
    }
  }
}

}  // namespace tandem::nccl
