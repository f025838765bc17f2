#include "app/report/schedule_text.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace tandem::app {

namespace {

std::string_view short_name(BufferKind buffer) {
  switch (buffer) {
    case BufferKind::kInput:
      return "In";
    case BufferKind::kOutput:
      return "Out";
    case BufferKind::kScratch:
      return "Scr";
  }
  return "?";
}

struct PlacedOp {
  int rank = 0;
  uint32_t lane = 0;
  const Op* op = nullptr;
};

}  // namespace

std::string schedule_summary(const Schedule& schedule) {
  return fmt::format("{} {}: {} ranks, {} chunks per block, {} rounds, {} ops", name(schedule.collective),
                     name(schedule.algorithm), schedule.nranks, schedule.chunks_per_block, schedule.num_rounds,
                     schedule.op_count());
}

std::string format_slots(const SlotRange& slots) {
  if (slots.count == 1) return fmt::format("{}[{}]", short_name(slots.buffer), slots.first);
  if (slots.count == 0) return fmt::format("{}[]", short_name(slots.buffer));
  return fmt::format("{}[{}..{}]", short_name(slots.buffer), slots.first, slots.first + slots.count - 1);
}

std::string format_op(const Op& op) {
  switch (op.kind) {
    case OpKind::kSend:
      return fmt::format("send {} -> r{}", format_slots(op.src), op.peer);
    case OpKind::kRecv:
      return fmt::format("recv {} <- r{}", format_slots(op.dst), op.peer);
    case OpKind::kRecvReduce:
      return fmt::format("recv-reduce {} = {} + r{}", format_slots(op.dst), format_slots(op.src), op.peer);
    case OpKind::kCopy:
      return fmt::format("copy {} = {}", format_slots(op.dst), format_slots(op.src));
    case OpKind::kReduce:
      return fmt::format("reduce {} += {}", format_slots(op.dst), format_slots(op.src));
  }
  return "?";
}

std::string format_schedule_text(const Schedule& stored) {
  // A rank-symmetric schedule stores one program; a person wants to see every rank's.
  const Schedule schedule = expand(stored);
  const BufferGeometry geometry = schedule.geometry();
  uint32_t max_scratch = 0;
  for (const RankProgram& program : schedule.ranks) max_scratch = std::max(max_scratch, program.scratch_chunks);

  std::string out = schedule_summary(schedule) + "\n";
  out += fmt::format("  root {}, channels {}, pipeline chunks {}, inter-node {}\n", schedule.root,
                     schedule.params.channels, schedule.params.pipeline_chunks, name(schedule.params.inter_node));
  if (stored.symmetric()) {
    out += fmt::format("  stored in rank-symmetric form (one program, rotation group {}); every rank shown\n",
                       stored.symmetry.rotation_group);
  }
  out += fmt::format("  per rank: input {} block(s), output {} block(s), scratch up to {} chunk(s); in place: {}\n",
                     geometry.input_blocks, geometry.output_blocks, max_scratch,
                     geometry.in_place_supported ? "supported" : "not supported");

  // Bucket ops by round, keeping rank, lane and issue order within a round.
  std::vector<std::vector<PlacedOp>> rounds(schedule.num_rounds);
  for (size_t rank = 0; rank < schedule.ranks.size(); ++rank) {
    const RankProgram& program = schedule.ranks[rank];
    for (size_t lane = 0; lane < program.lanes.size(); ++lane) {
      const Lane& ops = program.lanes[lane];
      for (size_t i = 0; i < ops.ops.size(); ++i) {
        uint32_t round = i < ops.rounds.size() ? ops.rounds[i] : 0;
        if (round >= rounds.size()) rounds.resize(round + 1);
        rounds[round].push_back({static_cast<int>(rank), static_cast<uint32_t>(lane), &ops.ops[i]});
      }
    }
  }
  for (size_t round = 0; round < rounds.size(); ++round) {
    if (rounds[round].empty()) continue;
    out += fmt::format("round {}\n", round);
    for (const PlacedOp& placed : rounds[round]) {
      out += fmt::format("  r{} L{} {}\n", placed.rank, placed.lane, format_op(*placed.op));
    }
  }
  return out;
}

}  // namespace tandem::app
