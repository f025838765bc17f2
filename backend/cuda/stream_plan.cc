#include "backend/cuda/stream_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>

#include "core/dtype.h"
#include "core/error.h"

namespace tandem::cuda {
namespace {

// Scratch slots and staged pieces start on this boundary: the reduction kernels' vector width.
constexpr int64_t kAlignBytes = 16;
constexpr uint32_t kNoEvent = UINT32_MAX;

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// A piece of a message in staging: one chunk of the Send, at its own aligned offset.
struct Piece {
  int64_t offset = 0;
  int64_t elements = 0;
};

// The lowering of one (explicit) schedule; build() is called once.
class Lowering {
 public:
  Lowering(const Schedule& schedule, const CollectiveSpec& spec, uint32_t tiles, int64_t align_elements)
      : schedule_(schedule),
        spec_(spec),
        map_(spec.count, schedule.chunks_per_block, tiles, align_elements),
        align_elements_(kAlignBytes / static_cast<int64_t>(size_bytes(spec.dtype))),
        nranks_(schedule.nranks) {}

  StreamPlan build() {
    plan_.nranks = nranks_;
    plan_.dtype = spec_.dtype;
    plan_.op = spec_.op;
    check_references();
    lay_out_ranks();
    create_messages();
    for (int rank = 0; rank < nranks_; ++rank) emit_rank(rank);
    for (const auto& [key, channel] : channels_) {
      if (channel.next < channel.messages.size()) {
        const Message& m = plan_.messages[static_cast<size_t>(channel.messages[channel.next])];
        fail(ErrorCode::kInvalidSchedule, "cuda plan: rank {} lane {} op {} (tile {}): Send to {} has no matching Recv",
             m.src, m.lane, m.send_op, m.tile, m.dst);
      }
    }
    return std::move(plan_);
  }

 private:
  // Sends from src to dst on one lane, in issue order; `next` is the first not yet received.
  struct Channel {
    std::vector<int32_t> messages;
    size_t next = 0;
  };

  const RankProgram& program(int rank) const { return schedule_.ranks[static_cast<size_t>(rank)]; }
  uint32_t lanes(int rank) const { return static_cast<uint32_t>(program(rank).lanes.size()); }
  uint32_t new_event() { return plan_.event_count++; }

  // A bad reference would make the executor write out of bounds: check even though validate()
  // has passed the schedule.
  void check_references() const {
    const BufferGeometry geometry = schedule_.geometry();
    const uint32_t k = schedule_.chunks_per_block;
    for (int rank = 0; rank < nranks_; ++rank) {
      const RankProgram& rank_program = program(rank);
      const uint32_t limits[] = {geometry.input_blocks * k, geometry.output_blocks * k, rank_program.scratch_chunks};
      for (uint32_t lane = 0; lane < lanes(rank); ++lane) {
        const Lane& ops = rank_program.lanes[lane];
        if (ops.dep_begin.size() != ops.ops.size() + 1 || ops.dep_begin.back() != ops.deps.size()) {
          fail(ErrorCode::kInvalidSchedule, "cuda plan: rank {} lane {}: malformed dependency lists", rank, lane);
        }
        for (size_t index = 0; index < ops.ops.size(); ++index) {
          const Op& op = ops.ops[index];
          const auto check_range = [&](const char* field, const SlotRange& range) {
            const uint32_t limit = limits[static_cast<size_t>(range.buffer)];
            if (range.first > limit || range.count > limit - range.first) {
              fail(ErrorCode::kInvalidSchedule, "cuda plan: rank {} lane {} op {}: {} {} chunks [{}, {}) out of bounds",
                   rank, lane, index, field, name(range.buffer), range.first, range.first + range.count);
            }
          };
          const bool remote = op.kind == OpKind::kSend || op.is_recv();
          if (remote && (op.peer < 0 || op.peer >= nranks_)) {
            fail(ErrorCode::kInvalidSchedule, "cuda plan: rank {} lane {} op {}: peer {} out of range", rank, lane,
                 index, op.peer);
          }
          if (op.reads_src()) check_range("src", op.src);
          if (op.writes_dst()) check_range("dst", op.dst);
          if (op.reads_src() && op.writes_dst() && op.src.count != op.dst.count) {
            fail(ErrorCode::kInvalidSchedule, "cuda plan: rank {} lane {} op {}: src has {} chunks, dst {}", rank, lane,
                 index, op.src.count, op.dst.count);
          }
          for (size_t d = 0; d < ops.dep_count(index); ++d) {
            const OpRef dep = ops.deps_of(index)[d];
            if (dep.lane >= lanes(rank) || dep.index >= rank_program.lanes[dep.lane].ops.size()) {
              fail(ErrorCode::kInvalidSchedule, "cuda plan: rank {} lane {} op {}: dependency on lane {} op {} out of range",
                   rank, lane, index, dep.lane, dep.index);
            }
          }
        }
      }
    }
  }

  // Streams, scratch offsets, flattened op numbering and which ops other lanes wait for.
  void lay_out_ranks() {
    slot_stride_ = round_up(map_.max_chunk_elements(), align_elements_);
    scratch_base_.resize(static_cast<size_t>(nranks_));
    lane_offset_.resize(static_cast<size_t>(nranks_));
    ops_per_tile_.resize(static_cast<size_t>(nranks_));
    awaited_.resize(static_cast<size_t>(nranks_));
    for (int rank = 0; rank < nranks_; ++rank) {
      const auto r = static_cast<size_t>(rank);
      scratch_base_[r] = plan_.scratch_elements;
      plan_.scratch_elements += static_cast<int64_t>(program(rank).scratch_chunks) * slot_stride_;
      plan_.first_stream.push_back(static_cast<uint32_t>(plan_.streams.size()));
      for (uint32_t lane = 0; lane < std::max(lanes(rank), 1u); ++lane) {
        plan_.streams.push_back(Stream{.rank = rank, .lane = lane, .commands = {}});
      }
      awaited_[r].resize(lanes(rank));
      for (uint32_t lane = 0; lane < lanes(rank); ++lane) {
        const Lane& ops = program(rank).lanes[lane];
        lane_offset_[r].push_back(ops_per_tile_[r]);
        ops_per_tile_[r] += static_cast<int64_t>(ops.ops.size());
        awaited_[r][lane].resize(ops.ops.size(), false);
      }
      for (uint32_t lane = 0; lane < lanes(rank); ++lane) {
        const Lane& ops = program(rank).lanes[lane];
        for (size_t index = 0; index < ops.ops.size(); ++index) {
          for (size_t d = 0; d < ops.dep_count(index); ++d) {
            const OpRef dep = ops.deps_of(index)[d];
            if (dep.lane != lane) awaited_[r][dep.lane][dep.index] = true;
          }
        }
      }
    }
  }

  // Elements of chunk `chunk` of `buffer` of `rank` in `tile` (see the header: as the host maps them).
  Location locate(int rank, BufferKind buffer, uint32_t chunk, uint32_t tile, int64_t& elements) const {
    const uint32_t k = schedule_.chunks_per_block;
    const ElementRange range = map_.range(tile, chunk % k);
    elements = range.count;
    const int64_t block_offset = static_cast<int64_t>(chunk / k) * spec_.count + range.offset;
    switch (buffer) {
      case BufferKind::kInput:
        return {Space::kInput, rank, block_offset};
      case BufferKind::kOutput:
        return {Space::kOutput, rank, block_offset};
      case BufferKind::kScratch:
        return {Space::kScratch, rank, scratch_base_[static_cast<size_t>(rank)] + chunk * slot_stride_};
    }
    return {};
  }

  // Every Send of every tile becomes a message with its staging pieces, in issue order.
  void create_messages() {
    send_message_.resize(static_cast<size_t>(nranks_));
    for (int rank = 0; rank < nranks_; ++rank) {
      send_message_[static_cast<size_t>(rank)].assign(
          static_cast<size_t>(ops_per_tile_[static_cast<size_t>(rank)] * map_.tiles()), -1);
    }
    for (uint32_t tile = 0; tile < map_.tiles(); ++tile) {
      for (int rank = 0; rank < nranks_; ++rank) {
        const auto r = static_cast<size_t>(rank);
        for (uint32_t lane = 0; lane < lanes(rank); ++lane) {
          const std::vector<Op>& ops = program(rank).lanes[lane].ops;
          for (uint32_t index = 0; index < ops.size(); ++index) {
            const Op& op = ops[index];
            if (op.kind != OpKind::kSend) continue;
            Message message{.src = rank,
                            .dst = op.peer,
                            .lane = lane,
                            .tile = tile,
                            .send_op = index,
                            .recv_op = 0,
                            .send_op_index = tile * ops_per_tile_[r] + lane_offset_[r][lane] + index,
                            .staging_offset = round_up(plan_.staging_elements, align_elements_),
                            .staging_elements = 0,
                            .payload_elements = 0,
                            .ready_event = new_event()};
            const auto id = static_cast<int32_t>(plan_.messages.size());
            first_piece_.push_back(pieces_.size());
            for (uint32_t i = 0; i < op.src.count; ++i) {
              int64_t elements = 0;
              locate(rank, op.src.buffer, op.src.first + i, tile, elements);
              const int64_t offset = round_up(plan_.staging_elements, align_elements_);
              pieces_.push_back({offset, elements});
              plan_.staging_elements = offset + elements;
              message.payload_elements += elements;
            }
            message.staging_elements = plan_.staging_elements - message.staging_offset;
            plan_.messages.push_back(message);
            send_message_[r][static_cast<size_t>(message.send_op_index)] = id;
            channels_[{rank, op.peer, lane}].messages.push_back(id);
          }
        }
      }
    }
    first_piece_.push_back(pieces_.size());
  }

  void emit_rank(int rank) {
    const auto r = static_cast<size_t>(rank);
    const uint32_t lane_count = lanes(rank);
    const uint32_t tiles = map_.tiles();
    // Per lane: the event its end of the previous tile recorded (tile barriers, multi-lane ranks).
    std::vector<uint32_t> tile_end(lane_count, kNoEvent);
    for (uint32_t tile = 0; tile < tiles; ++tile) {
      // Events of the ops other lanes wait for in this tile.
      std::vector<std::vector<uint32_t>> op_event(lane_count);
      for (uint32_t lane = 0; lane < lane_count; ++lane) {
        op_event[lane].assign(awaited_[r][lane].size(), kNoEvent);
        for (size_t index = 0; index < op_event[lane].size(); ++index) {
          if (awaited_[r][lane][index]) op_event[lane][index] = new_event();
        }
      }
      const std::vector<uint32_t> previous_end = tile_end;
      for (uint32_t lane = 0; lane < lane_count; ++lane) {
        Stream& stream = plan_.streams[plan_.first_stream[r] + lane];
        if (tile > 0 && lane_count > 1) {
          for (uint32_t other = 0; other < lane_count; ++other) {
            if (other != lane) stream.commands.push_back(wait(previous_end[other]));
          }
        }
        const Lane& ops = program(rank).lanes[lane];
        for (uint32_t index = 0; index < ops.ops.size(); ++index) {
          for (size_t d = 0; d < ops.dep_count(index); ++d) {
            const OpRef dep = ops.deps_of(index)[d];
            if (dep.lane != lane) stream.commands.push_back(wait(op_event[dep.lane][dep.index]));
          }
          emit_op(rank, lane, tile, index, stream.commands);
          if (op_event[lane][index] != kNoEvent) stream.commands.push_back(record(op_event[lane][index]));
        }
        if (lane_count > 1 && tile + 1 < tiles) {
          tile_end[lane] = new_event();
          stream.commands.push_back(record(tile_end[lane]));
        }
      }
    }
    emit_average(rank);
  }

  static Command wait(uint32_t event) { return Command{.kind = CommandKind::kWaitEvent, .event = event}; }
  static Command record(uint32_t event) { return Command{.kind = CommandKind::kRecordEvent, .event = event}; }

  static void push_copy(std::vector<Command>& out, Location dst, Location src, int64_t elements, int32_t message,
                        uint32_t tile, uint32_t op) {
    if (elements == 0) return;
    out.push_back(Command{.kind = CommandKind::kCopy,
                          .dst = dst,
                          .a = src,
                          .elements = elements,
                          .message = message,
                          .tile = tile,
                          .op = op});
  }
  static void push_reduce(std::vector<Command>& out, Location dst, Location a, Location b, int64_t elements,
                          int32_t message, uint32_t tile, uint32_t op) {
    if (elements == 0) return;
    out.push_back(Command{.kind = CommandKind::kReduce,
                          .dst = dst,
                          .a = a,
                          .b = b,
                          .elements = elements,
                          .message = message,
                          .tile = tile,
                          .op = op});
  }

  void emit_op(int rank, uint32_t lane, uint32_t tile, uint32_t index, std::vector<Command>& out) {
    const auto r = static_cast<size_t>(rank);
    const Op& op = program(rank).lanes[lane].ops[index];
    int64_t elements = 0;
    int64_t other_elements = 0;
    switch (op.kind) {
      case OpKind::kSend: {
        const int32_t id = send_message_[r][static_cast<size_t>(tile * ops_per_tile_[r] + lane_offset_[r][lane] + index)];
        const size_t first = first_piece_[static_cast<size_t>(id)];
        for (uint32_t i = 0; i < op.src.count; ++i) {
          const Location from = locate(rank, op.src.buffer, op.src.first + i, tile, elements);
          const Piece& piece = pieces_[first + i];
          push_copy(out, {Space::kStaging, rank, piece.offset}, from, piece.elements, id, tile, index);
        }
        Command ready = record(plan_.messages[static_cast<size_t>(id)].ready_event);
        ready.message = id;
        ready.tile = tile;
        ready.op = index;
        out.push_back(ready);
        return;
      }
      case OpKind::kRecv:
      case OpKind::kRecvReduce: {
        const int32_t id = receive(rank, lane, tile, index, op);
        Message& message = plan_.messages[static_cast<size_t>(id)];
        Command ready = wait(message.ready_event);
        ready.message = id;
        ready.tile = tile;
        ready.op = index;
        out.push_back(ready);
        const size_t first = first_piece_[static_cast<size_t>(id)];
        for (uint32_t i = 0; i < op.dst.count; ++i) {
          const Location to = locate(rank, op.dst.buffer, op.dst.first + i, tile, elements);
          const Piece& piece = pieces_[first + i];
          const Location staged{Space::kStaging, message.src, piece.offset};
          if (op.kind == OpKind::kRecv) {
            push_copy(out, to, staged, elements, id, tile, index);
          } else {
            // dst = src (+) received, in that operand order (the host's RecvReduce).
            const Location local = locate(rank, op.src.buffer, op.src.first + i, tile, other_elements);
            push_reduce(out, to, local, staged, elements, id, tile, index);
          }
        }
        return;
      }
      case OpKind::kCopy:
        for (uint32_t i = 0; i < op.src.count; ++i) {
          const Location from = locate(rank, op.src.buffer, op.src.first + i, tile, elements);
          const Location to = locate(rank, op.dst.buffer, op.dst.first + i, tile, other_elements);
          push_copy(out, to, from, other_elements, -1, tile, index);  // dst's size, as the host
        }
        return;
      case OpKind::kReduce:
        for (uint32_t i = 0; i < op.src.count; ++i) {
          const Location from = locate(rank, op.src.buffer, op.src.first + i, tile, elements);
          const Location to = locate(rank, op.dst.buffer, op.dst.first + i, tile, other_elements);
          // dst = dst (+) src (the host's Reduce).
          push_reduce(out, to, to, from, other_elements, -1, tile, index);
        }
        return;
    }
  }

  // Matches the Recv / RecvReduce `index` of `rank`'s `lane` in `tile` with the next message of its
  // channel and checks that the pieces fit the chunks it writes.
  int32_t receive(int rank, uint32_t lane, uint32_t tile, uint32_t index, const Op& op) {
    const auto found = channels_.find({op.peer, rank, lane});
    if (found == channels_.end() || found->second.next == found->second.messages.size()) {
      fail(ErrorCode::kInvalidSchedule, "cuda plan: rank {} lane {} op {} (tile {}): {} from {} has no matching Send",
           rank, lane, index, tile, name(op.kind), op.peer);
    }
    const int32_t id = found->second.messages[found->second.next++];
    Message& message = plan_.messages[static_cast<size_t>(id)];
    message.recv_op = index;
    const size_t first = first_piece_[static_cast<size_t>(id)];
    const size_t pieces = first_piece_[static_cast<size_t>(id) + 1] - first;
    bool fits = pieces == op.dst.count;
    for (uint32_t i = 0; fits && i < op.dst.count; ++i) {
      int64_t elements = 0;
      locate(rank, op.dst.buffer, op.dst.first + i, tile, elements);
      fits = elements == pieces_[first + i].elements;
    }
    if (!fits) {
      fail(ErrorCode::kInvalidSchedule,
           "cuda plan: rank {} lane {} op {} (tile {}): {} from {} does not fit the message sent by op {} ({} chunks, "
           "{} elements)",
           rank, lane, index, tile, name(op.kind), op.peer, message.send_op, pieces, message.payload_elements);
    }
    return id;
  }

  // kAvg: the reduced output divided by nranks once every lane of the rank is done.
  void emit_average(int rank) {
    if (spec_.op != ReduceOp::kAvg || !is_reduction(schedule_.collective)) return;
    if (schedule_.collective == Collective::kReduce && rank != schedule_.root) return;
    const int64_t elements = schedule_.geometry().output_blocks * spec_.count;
    if (elements == 0) return;
    const auto r = static_cast<size_t>(rank);
    std::vector<Command>& first = plan_.streams[plan_.first_stream[r]].commands;
    for (uint32_t lane = 1; lane < lanes(rank); ++lane) {
      const uint32_t done = new_event();
      plan_.streams[plan_.first_stream[r] + lane].commands.push_back(record(done));
      first.push_back(wait(done));
    }
    first.push_back(Command{.kind = CommandKind::kDivide, .dst = {Space::kOutput, rank, 0}, .elements = elements});
  }

  const Schedule& schedule_;
  const CollectiveSpec& spec_;
  const ChunkMap map_;
  const int64_t align_elements_;  // kAlignBytes in elements
  const int nranks_;
  StreamPlan plan_;
  int64_t slot_stride_ = 0;                              // elements between scratch slots
  std::vector<int64_t> scratch_base_;                    // per rank
  std::vector<std::vector<int64_t>> lane_offset_;        // per rank, lane: ops of the lanes before
  std::vector<int64_t> ops_per_tile_;                    // per rank
  std::vector<std::vector<std::vector<bool>>> awaited_;  // per rank, lane, op: another lane waits for it
  std::vector<std::vector<int32_t>> send_message_;       // per rank, flattened op index: its message
  std::vector<Piece> pieces_;                            // staged pieces of all messages
  std::vector<size_t> first_piece_;                      // per message (and one past the last)
  std::map<std::tuple<int, int, uint32_t>, Channel> channels_;  // by (src, dst, lane)
};

void check_arguments(const Schedule& schedule, const CollectiveSpec& spec, uint32_t tiles, int64_t align_elements) {
  if (schedule.nranks < 1 || (!schedule.symmetric() && static_cast<int>(schedule.ranks.size()) != schedule.nranks)) {
    fail(ErrorCode::kInvalidArgument, "cuda plan: the schedule is for {} ranks ({} programs)", schedule.nranks,
         schedule.ranks.size());
  }
  if (spec.collective != schedule.collective || spec.nranks != schedule.nranks) {
    fail(ErrorCode::kInvalidArgument, "cuda plan: the spec ({}, {} ranks) does not match the schedule ({}, {} ranks)",
         name(spec.collective), spec.nranks, name(schedule.collective), schedule.nranks);
  }
  if (spec.count < 0) fail(ErrorCode::kInvalidArgument, "cuda plan: count {} is negative", spec.count);
  if (tiles < 1) fail(ErrorCode::kInvalidArgument, "cuda plan: tiles must be at least 1, got {}", tiles);
  if (align_elements < 1) {
    fail(ErrorCode::kInvalidArgument, "cuda plan: align_elements must be at least 1, got {}", align_elements);
  }
}

}  // namespace

StreamPlan build_stream_plan(const Schedule& schedule, const CollectiveSpec& spec, uint32_t tiles,
                             int64_t align_elements) {
  check_arguments(schedule, spec, tiles, align_elements);
  if (schedule.symmetric()) {
    const Schedule expanded = expand(schedule);
    return Lowering(expanded, spec, tiles, align_elements).build();
  }
  return Lowering(schedule, spec, tiles, align_elements).build();
}

std::vector<CommandRef> issue_order(const StreamPlan& plan, std::optional<uint64_t> seed) {
  size_t total = 0;
  for (const Stream& stream : plan.streams) total += stream.commands.size();
  std::vector<CommandRef> order;
  order.reserve(total);
  std::vector<uint32_t> next(plan.streams.size(), 0);
  std::vector<bool> recorded(plan.event_count, false);
  const auto can_go = [&](size_t s) {
    const std::vector<Command>& commands = plan.streams[s].commands;
    if (next[s] >= commands.size()) return false;
    const Command& command = commands[next[s]];
    return command.kind != CommandKind::kWaitEvent || recorded[command.event];
  };
  const auto issue = [&](size_t s) {
    const Command& command = plan.streams[s].commands[next[s]];
    if (command.kind == CommandKind::kRecordEvent) recorded[command.event] = true;
    order.push_back({static_cast<uint32_t>(s), next[s]++});
  };

  std::mt19937_64 random(seed.value_or(0));
  std::vector<size_t> ready;
  while (order.size() < total) {
    bool progressed = false;
    if (seed) {
      ready.clear();
      for (size_t s = 0; s < plan.streams.size(); ++s) {
        if (can_go(s)) ready.push_back(s);
      }
      if (!ready.empty()) {
        issue(ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(random)]);
        progressed = true;
      }
    } else {
      for (size_t s = 0; s < plan.streams.size(); ++s) {
        while (can_go(s)) {
          issue(s);
          progressed = true;
        }
      }
    }
    if (!progressed) {
      std::string blocked;
      for (size_t s = 0; s < plan.streams.size(); ++s) {
        const Stream& stream = plan.streams[s];
        if (next[s] >= stream.commands.size()) continue;
        blocked += fmt::format("{}rank {} lane {} command {} (event {})", blocked.empty() ? "" : ", ", stream.rank,
                               stream.lane, next[s], stream.commands[next[s]].event);
      }
      fail(ErrorCode::kBackend, "cuda plan deadlocks: waiting for events never recorded: {}", blocked);
    }
  }
  return order;
}

void run_on_host(const StreamPlan& plan, std::span<const RankBuffers> buffers, uint64_t seed) {
  if (buffers.size() != static_cast<size_t>(plan.nranks)) {
    fail(ErrorCode::kInvalidArgument, "cuda plan: {} rank buffers for a plan of {} ranks", buffers.size(), plan.nranks);
  }
  const auto element_bytes = static_cast<int64_t>(size_bytes(plan.dtype));
  // Not zeroed, like device memory: every scratch and staging element is written before it is read.
  const auto scratch = std::make_unique_for_overwrite<std::byte[]>(static_cast<size_t>(plan.scratch_elements * element_bytes));
  const auto staging = std::make_unique_for_overwrite<std::byte[]>(static_cast<size_t>(plan.staging_elements * element_bytes));
  const auto address = [&](const Location& where) {
    std::byte* base = nullptr;
    switch (where.space) {
      case Space::kInput:
        base = static_cast<std::byte*>(buffers[static_cast<size_t>(where.rank)].input);
        break;
      case Space::kOutput:
        base = static_cast<std::byte*>(buffers[static_cast<size_t>(where.rank)].output);
        break;
      case Space::kScratch:
        base = scratch.get();
        break;
      case Space::kStaging:
        base = staging.get();
        break;
    }
    if (base == nullptr) fail(ErrorCode::kInvalidArgument, "cuda plan: rank {}'s buffer is null", where.rank);
    return base + where.offset * element_bytes;
  };

  for (const CommandRef ref : issue_order(plan, seed)) {
    const Command& command = plan.streams[ref.stream].commands[ref.index];
    switch (command.kind) {
      case CommandKind::kCopy: {
        std::byte* to = address(command.dst);
        const std::byte* from = address(command.a);
        const int64_t bytes = command.elements * element_bytes;
        if (to == from) break;  // in place
        if (to < from + bytes && from < to + bytes) {
          fail(ErrorCode::kUnsupported, "cuda: rank {} lane {} op {}: a copy between partly overlapping ranges",
               plan.streams[ref.stream].rank, plan.streams[ref.stream].lane, command.op);
        }
        std::memcpy(to, from, static_cast<size_t>(bytes));
        break;
      }
      case CommandKind::kReduce:
        reduce_elements(plan.dtype, plan.op, address(command.a), address(command.b), address(command.dst),
                        command.elements);
        break;
      case CommandKind::kDivide:
        divide_elements(plan.dtype, address(command.dst), command.elements, plan.nranks);
        break;
      case CommandKind::kRecordEvent:
      case CommandKind::kWaitEvent:
        break;  // issue_order has ordered the commands
    }
  }
}

}  // namespace tandem::cuda
