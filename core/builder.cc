#include "core/builder.h"

#include <algorithm>

#include "core/error.h"
#include "core/schedule_internal.h"

namespace tandem {

ScheduleBuilder::ScheduleBuilder(Collective collective, Algorithm algorithm, int nranks, int root,
                                 uint32_t chunks_per_block, const AlgoParams& params) {
  if (nranks < 1) fail(ErrorCode::kInvalidArgument, "a schedule needs at least 1 rank, got {}", nranks);
  if (root < 0 || root >= nranks) fail(ErrorCode::kInvalidArgument, "root {} out of range [0, {})", root, nranks);
  if (chunks_per_block == 0) fail(ErrorCode::kInvalidArgument, "chunks per block must be at least 1");
  schedule_.collective = collective;
  schedule_.algorithm = algorithm;
  schedule_.nranks = nranks;
  schedule_.root = root;
  schedule_.chunks_per_block = chunks_per_block;
  schedule_.params = params;
  schedule_.ranks.resize(static_cast<size_t>(nranks));
  emission_.resize(static_cast<size_t>(nranks));
}

ScheduleBuilder ScheduleBuilder::symmetric(Collective collective, Algorithm algorithm, std::vector<int> order,
                                           uint32_t rotation_group, uint32_t chunks_per_block, const AlgoParams& params) {
  ScheduleBuilder b(collective, algorithm, static_cast<int>(order.size()), 0, chunks_per_block, params);
  if (rotation_group == 0) fail(ErrorCode::kInvalidArgument, "builder: rotation group must be at least 1");
  b.schedule_.symmetry = {std::move(order), {}, rotation_group};
  b.schedule_.ranks.resize(1);
  b.emission_.resize(1);
  return b;
}

ScheduleBuilder ScheduleBuilder::symmetric(Collective collective, Algorithm algorithm,
                                           std::vector<std::vector<int>> lane_orders, uint32_t rotation_group,
                                           uint32_t chunks_per_block, const AlgoParams& params) {
  if (lane_orders.empty()) fail(ErrorCode::kInvalidArgument, "builder: no lane orders");
  ScheduleBuilder b = symmetric(collective, algorithm, lane_orders.front(), rotation_group, chunks_per_block, params);
  const bool all_same = std::all_of(lane_orders.begin(), lane_orders.end(),
                                    [&](const std::vector<int>& order) { return order == lane_orders.front(); });
  if (!all_same) b.schedule_.symmetry.lane_orders = std::move(lane_orders);
  return b;
}

void ScheduleBuilder::append(int rank, int lane, const Op& op) {
  if (rank < 0 || static_cast<size_t>(rank) >= schedule_.ranks.size()) {
    fail(ErrorCode::kInvalidArgument, "builder: rank {} out of range [0, {})", rank, schedule_.nranks);
  }
  if (lane < 0) fail(ErrorCode::kInvalidArgument, "builder: negative lane {}", lane);
  if (++ops_ > max_schedule_ops()) {
    require_schedule_memory(ops_, schedule_.collective, schedule_.algorithm, schedule_.nranks);
  }
  auto& lanes = schedule_.ranks[static_cast<size_t>(rank)].lanes;
  if (lanes.size() <= static_cast<size_t>(lane)) lanes.resize(static_cast<size_t>(lane) + 1);
  auto& ops = lanes[static_cast<size_t>(lane)].ops;
  emission_[static_cast<size_t>(rank)].push_back({static_cast<uint32_t>(lane), static_cast<uint32_t>(ops.size())});
  ops.push_back(op);
}

void ScheduleBuilder::send(int rank, int lane, int peer, SlotRange src) {
  append(rank, lane, {OpKind::kSend, peer, src, {}});
}
void ScheduleBuilder::recv(int rank, int lane, int peer, SlotRange dst) {
  append(rank, lane, {OpKind::kRecv, peer, {}, dst});
}
void ScheduleBuilder::recv_reduce(int rank, int lane, int peer, SlotRange local, SlotRange dst) {
  append(rank, lane, {OpKind::kRecvReduce, peer, local, dst});
}
void ScheduleBuilder::copy(int rank, int lane, SlotRange src, SlotRange dst) {
  append(rank, lane, {OpKind::kCopy, -1, src, dst});
}
void ScheduleBuilder::reduce(int rank, int lane, SlotRange src, SlotRange dst) {
  append(rank, lane, {OpKind::kReduce, -1, src, dst});
}
void ScheduleBuilder::transfer(int lane, int from, SlotRange src, int to, SlotRange dst) {
  send(from, lane, to, src);
  recv(to, lane, from, dst);
}
void ScheduleBuilder::transfer_reduce(int lane, int from, SlotRange src, int to, SlotRange local, SlotRange dst) {
  send(from, lane, to, src);
  recv_reduce(to, lane, from, local, dst);
}

Schedule ScheduleBuilder::finish() && {
  for (RankProgram& rank : schedule_.ranks) {
    uint32_t scratch = 0;
    for (const Lane& lane : rank.lanes) {
      for (const Op& op : lane.ops) {
        for (const SlotRange* range : {&op.src, &op.dst}) {
          if (range->buffer == BufferKind::kScratch && range->count > 0) {
            scratch = std::max(scratch, range->first + range->count);
          }
        }
      }
    }
    rank.scratch_chunks = scratch;
  }
  infer_dependencies(schedule_, &emission_);
  return std::move(schedule_);
}

namespace {

// Who last wrote a storage slot, and who read it since.
struct SlotUse {
  bool written = false;
  OpRef writer;
  std::vector<OpRef> readers;
};

}  // namespace

void infer_dependencies(Schedule& schedule, const std::vector<std::vector<OpRef>>* emission) {
  const bool in_place = schedule.geometry().in_place_supported;
  for (int r = 0; r < static_cast<int>(schedule.ranks.size()); ++r) {
    RankProgram& rank = schedule.ranks[static_cast<size_t>(r)];
    // In-place aliased output chunks share their input chunk's storage, so the inferred order is
    // safe whether the caller runs in place or not.
    const detail::SlotStorage storage(schedule, r, in_place);
    std::vector<SlotUse> uses(storage.size());

    std::vector<OpRef> order;
    if (emission != nullptr) {
      order = (*emission)[static_cast<size_t>(r)];
    } else {
      for (uint32_t l = 0; l < rank.lanes.size(); ++l) {
        for (uint32_t i = 0; i < rank.lanes[l].ops.size(); ++i) order.push_back({l, i});
      }
    }
    for (Lane& lane : rank.lanes) {
      lane.dep_begin.assign(1, 0);
      lane.deps.clear();
    }
    std::vector<OpRef> deps;
    for (const OpRef ref : order) {
      Lane& lane = rank.lanes[ref.lane];
      const Op& op = lane.ops[ref.index];
      deps.clear();
      auto visit = [&](const SlotRange& range, auto&& fn) {
        for (uint32_t c = range.first; c < range.first + range.count; ++c) {
          const uint32_t id = storage.id(range.buffer, c);
          if (id < uses.size()) fn(uses[id]);  // out-of-range slots are validate()'s to report
        }
      };
      const bool reads_dst = op.kind == OpKind::kReduce;
      auto on_read = [&](SlotUse& use) {
        if (use.written) deps.push_back(use.writer);
      };
      auto on_write = [&](SlotUse& use) {
        if (use.written) deps.push_back(use.writer);
        deps.insert(deps.end(), use.readers.begin(), use.readers.end());
      };
      if (op.reads_src()) visit(op.src, on_read);
      if (op.writes_dst()) visit(op.dst, on_write);
      std::sort(deps.begin(), deps.end(), [](OpRef a, OpRef b) {
        return a.lane != b.lane ? a.lane < b.lane : a.index < b.index;
      });
      deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
      std::erase(deps, ref);
      lane.deps.insert(lane.deps.end(), deps.begin(), deps.end());
      lane.dep_begin.push_back(static_cast<uint32_t>(lane.deps.size()));

      if (op.reads_src()) visit(op.src, [&](SlotUse& use) { use.readers.push_back(ref); });
      if (reads_dst) visit(op.dst, [&](SlotUse& use) { use.readers.push_back(ref); });
      if (op.writes_dst()) {
        visit(op.dst, [&](SlotUse& use) {
          use.written = true;
          use.writer = ref;
          use.readers.clear();
        });
      }
    }
  }
}

}  // namespace tandem
