#include "backend/host/host_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>
#include <utility>

#include "backend/host/collective_run.h"
#include "backend/host/rank_threads.h"
#include "core/dtype.h"
#include "core/error.h"

namespace tandem {

namespace host {
namespace {

// One rank's side of one collective: its buffers, its scratch, and the progress loop over its lanes.
class RankRunner {
 public:
  RankRunner(CollectiveRun& run, int rank, const Schedule& schedule, const CollectiveSpec& spec,
             const RankBuffers& buffers, const RunContext& context)
      : run_(run),
        rank_(rank),
        schedule_(schedule),
        program_(schedule.ranks.at(static_cast<size_t>(rank))),
        spec_(spec),
        context_(context),
        map_(spec.count, schedule.chunks_per_block, context.tiles, context.align_elements),
        element_bytes_(static_cast<int64_t>(size_bytes(spec.dtype))),
        input_(static_cast<std::byte*>(buffers.input)),
        output_(static_cast<std::byte*>(buffers.output)),
        scratch_slot_elements_(map_.max_chunk_elements()),
        next_(program_.lanes.size(), 0) {
    const BufferGeometry geometry = schedule.geometry();
    chunk_limits_[static_cast<size_t>(BufferKind::kInput)] = geometry.input_blocks * schedule.chunks_per_block;
    chunk_limits_[static_cast<size_t>(BufferKind::kOutput)] = geometry.output_blocks * schedule.chunks_per_block;
    chunk_limits_[static_cast<size_t>(BufferKind::kScratch)] = program_.scratch_chunks;
    check_program();
    for (const Lane& lane : program_.lanes) {
      lane_offset_.push_back(ops_per_tile_);
      ops_per_tile_ += static_cast<int64_t>(lane.ops.size());
    }
    // Not zeroed: every scratch slot is written before it is read (validate / symbolic_check).
    scratch_ = std::make_unique_for_overwrite<std::byte[]>(
        static_cast<size_t>(program_.scratch_chunks * scratch_slot_elements_ * element_bytes_));
  }

  void run() {
    for (tile_ = 0; tile_ < map_.tiles(); ++tile_) run_tile();
    finish_average();
  }

 private:
  struct Segment {
    std::byte* data = nullptr;
    int64_t elements = 0;
  };

  // A bad reference would corrupt memory, not just fail: check once up front even though
  // validate() has already passed the schedule.
  void check_program() const {
    const auto check_range = [&](size_t lane, size_t index, const char* field, const SlotRange& range) {
      const uint32_t limit = chunk_limits_[static_cast<size_t>(range.buffer)];
      if (range.first > limit || range.count > limit - range.first) {
        fail(ErrorCode::kBackend, "host rank {} lane {} op {}: {} {} chunks [{}, {}) out of bounds ({} chunks)", rank_,
             lane, index, field, name(range.buffer), range.first, range.first + range.count, limit);
      }
    };
    for (size_t lane = 0; lane < program_.lanes.size(); ++lane) {
      const Lane& checked = program_.lanes[lane];
      const std::vector<Op>& ops = checked.ops;
      if (checked.dep_begin.size() != ops.size() + 1 || checked.dep_begin.back() != checked.deps.size()) {
        fail(ErrorCode::kBackend, "host rank {} lane {}: malformed dependency lists", rank_, lane);
      }
      for (size_t index = 0; index < ops.size(); ++index) {
        const Op& op = ops[index];
        const bool remote = op.kind == OpKind::kSend || op.is_recv();
        if (remote && (op.peer < 0 || op.peer >= schedule_.nranks)) {
          fail(ErrorCode::kBackend, "host rank {} lane {} op {}: peer {} out of range", rank_, lane, index, op.peer);
        }
        if (op.reads_src()) check_range(lane, index, "src", op.src);
        if (op.writes_dst()) check_range(lane, index, "dst", op.dst);
        for (size_t d = 0; d < checked.dep_count(index); ++d) {
          const OpRef& dep = checked.deps_of(index)[d];
          if (dep.lane >= program_.lanes.size() || dep.index >= program_.lanes[dep.lane].ops.size()) {
            fail(ErrorCode::kBackend, "host rank {} lane {} op {}: dependency on lane {} op {} out of range", rank_,
                 lane, index, dep.lane, dep.index);
          }
        }
        if (op.reads_src() && op.writes_dst() && op.src.count != op.dst.count) {
          fail(ErrorCode::kBackend, "host rank {} lane {} op {}: src has {} chunks, dst {}", rank_, lane, index,
               op.src.count, op.dst.count);
        }
      }
    }
  }

  // Chunk `chunk` of `buffer` in the current tile. Input / output chunk c is sub-chunk c % k of
  // block c / k; scratch slot s holds sub-chunk s % k and has room for the largest chunk.
  Segment segment(BufferKind buffer, uint32_t chunk) const {
    const uint32_t k = schedule_.chunks_per_block;
    const ElementRange range = map_.range(tile_, chunk % k);
    int64_t offset = 0;
    std::byte* base = nullptr;
    switch (buffer) {
      case BufferKind::kInput:
        base = input_;
        offset = static_cast<int64_t>(chunk / k) * spec_.count + range.offset;
        break;
      case BufferKind::kOutput:
        base = output_;
        offset = static_cast<int64_t>(chunk / k) * spec_.count + range.offset;
        break;
      case BufferKind::kScratch:
        base = scratch_.get();
        offset = static_cast<int64_t>(chunk) * scratch_slot_elements_;
        break;
    }
    if (range.count == 0) return {base, 0};
    if (base == nullptr) fail(ErrorCode::kInvalidArgument, "host rank {}: the {} buffer is null", rank_, name(buffer));
    return {base + offset * element_bytes_, range.count};
  }

  size_t bytes_of(const SlotRange& range) const {
    int64_t elements = 0;
    for (uint32_t i = 0; i < range.count; ++i) elements += segment(range.buffer, range.first + i).elements;
    return static_cast<size_t>(elements * element_bytes_);
  }

  void send(uint32_t lane, uint32_t index, const Op& op) {
    const auto began = Clock::now();
    Payload payload = Payload::of_size(bytes_of(op.src));
    std::byte* cursor = payload.data.get();
    for (uint32_t i = 0; i < op.src.count; ++i) {
      const Segment from = segment(op.src.buffer, op.src.first + i);
      const auto bytes = static_cast<size_t>(from.elements * element_bytes_);
      if (bytes > 0) std::memcpy(cursor, from.data, bytes);
      cursor += bytes;
    }
    if (context_.checksums) payload.checksum = checksum(payload);
    if (context_.on_send && !inject(lane, index, op, payload, began)) return;
    run_.send(rank_, op.peer, static_cast<int>(lane), std::move(payload));
  }

  // Applies the fault injector's effect on this send; false when the message is lost (a dead link
  // nobody notices: the receiver waits until its timeout, as NCCL's kernels spin), and with it the
  // later messages of this connection, which queue behind it.
  bool inject(uint32_t lane, uint32_t index, const Op& op, Payload& payload, Clock::time_point began) {
    const int64_t op_index = static_cast<int64_t>(tile_) * ops_per_tile_ + lane_offset_[lane] + index;
    const TransferEffect effect = context_.on_send(rank_, op.peer, op_index);
    if (effect.fail) {
      fail(FaultReport{.kind = FaultReport::Kind::kSendFailed,
                       .backend = "host",
                       .rank = rank_,
                       .peer = op.peer,
                       .at = position(lane, index, op),
                       .fault = effect.fault_index});
    }
    if (effect.stall) {
      run_.lose(rank_, op.peer, static_cast<int>(lane), effect.fault_index);
      return false;
    }
    if (effect.corrupt && payload.bytes > 0) payload.data[payload.bytes / 2] ^= std::byte{kCorruptBitMask};
    // A slow rank or link: this send takes (factor - 1) times longer than it did (core/faults.h).
    const double factor = effect.delay_factor / effect.bandwidth_factor;
    if (factor > 1.0) {
      const auto spent = std::max<Clock::duration>(
          Clock::now() - began,
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kMinSlowedTransfer_s)));
      std::this_thread::sleep_for(std::chrono::duration_cast<Clock::duration>(spent * (factor - 1.0)));
    }
    return true;
  }

  // Recv: dst = received. RecvReduce: dst = src (+) received.
  // FNV-1a over 8-byte words (and the tail): any single flipped bit changes it.
  static uint64_t checksum(const Payload& payload) {
    uint64_t hash = 0xcbf29ce484222325ull;
    size_t i = 0;
    for (; i + 8 <= payload.bytes; i += 8) {
      uint64_t word = 0;
      std::memcpy(&word, payload.data.get() + i, 8);
      hash = (hash ^ word) * 0x100000001b3ull;
    }
    for (; i < payload.bytes; ++i) hash = (hash ^ static_cast<uint64_t>(payload.data[i])) * 0x100000001b3ull;
    return hash;
  }

  void receive(uint32_t lane, uint32_t index, const Op& op, const Payload& payload) const {
    if (context_.checksums && checksum(payload) != payload.checksum) {
      fail(FaultReport{
          .kind = FaultReport::Kind::kCorrupt, .backend = "host", .rank = rank_, .peer = op.peer, .at = position(lane, index, op)});
    }
    const size_t expected = bytes_of(op.dst);
    if (payload.bytes != expected) {
      fail(ErrorCode::kBackend, "host rank {} lane {} op {}: {} from {} got {} bytes, expected {}", rank_, lane, index,
           name(op.kind), op.peer, payload.bytes, expected);
    }
    const std::byte* cursor = payload.data.get();
    for (uint32_t i = 0; i < op.dst.count; ++i) {
      const Segment to = segment(op.dst.buffer, op.dst.first + i);
      const auto bytes = static_cast<size_t>(to.elements * element_bytes_);
      if (op.kind == OpKind::kRecv) {
        if (bytes > 0) std::memcpy(to.data, cursor, bytes);
      } else {
        const Segment local = segment(op.src.buffer, op.src.first + i);
        reduce_elements(spec_.dtype, spec_.op, local.data, cursor, to.data, to.elements);
      }
      cursor += bytes;
    }
  }

  // dst = src, chunk by chunk. In place, source and destination can be the same memory (nothing
  // to do) or, for a shifted range, overlap: copy back to front when moving data forward.
  void copy(const Op& op) const {
    const bool backward =
        op.src.count > 1 && segment(op.dst.buffer, op.dst.first).data > segment(op.src.buffer, op.src.first).data;
    for (uint32_t step = 0; step < op.src.count; ++step) {
      const uint32_t i = backward ? op.src.count - 1 - step : step;
      const Segment from = segment(op.src.buffer, op.src.first + i);
      const Segment to = segment(op.dst.buffer, op.dst.first + i);
      if (from.data == to.data || to.elements == 0) continue;
      std::memmove(to.data, from.data, static_cast<size_t>(to.elements * element_bytes_));
    }
  }

  // dst = dst (+) src.
  void reduce(const Op& op) const {
    for (uint32_t i = 0; i < op.src.count; ++i) {
      const Segment from = segment(op.src.buffer, op.src.first + i);
      const Segment to = segment(op.dst.buffer, op.dst.first + i);
      reduce_elements(spec_.dtype, spec_.op, to.data, from.data, to.data, to.elements);
    }
  }

  bool deps_done(const Lane& lane, uint32_t index) const {
    const OpRef* deps = lane.deps_of(index);
    for (size_t d = 0; d < lane.dep_count(index); ++d) {
      if (next_[deps[d].lane] <= deps[d].index) return false;
    }
    return true;
  }

  // Runs op `index` of `lane` if it can run now; false when it is a recv whose message is not there.
  bool try_issue(uint32_t lane, uint32_t index) {
    const Op& op = program_.lanes[lane].ops[index];
    switch (op.kind) {
      case OpKind::kSend:
        send(lane, index, op);
        return true;
      case OpKind::kRecv:
      case OpKind::kRecvReduce: {
        Payload payload;
        if (!run_.try_receive(op.peer, rank_, static_cast<int>(lane), payload)) return false;
        receive(lane, index, op, payload);
        return true;
      }
      case OpKind::kCopy:
        copy(op);
        return true;
      case OpKind::kReduce:
        reduce(op);
        return true;
    }
    return false;
  }

  // Where this rank is stuck: the first lane whose next op is a recv without its message, else the
  // first unfinished lane (blocked on a dependency).
  // Op `index` of `lane` in the current tile, for fault reports.
  OpPosition position(uint32_t lane, uint32_t index, const Op& op) const {
    return OpPosition{.tile = context_.tiles > 1 ? std::optional<uint32_t>(tile_) : std::nullopt,
                      .lane = lane,
                      .op = index,
                      .kind = op.kind,
                      .peer = op.peer};
  }

  WaitPoint blocked_point() const {
    std::optional<WaitPoint> on_dependency;
    for (uint32_t lane = 0; lane < program_.lanes.size(); ++lane) {
      const Lane& ops = program_.lanes[lane];
      if (next_[lane] >= ops.ops.size()) continue;
      const Op& op = ops.ops[next_[lane]];
      WaitPoint where{.tile = tile_, .lane = lane, .op = next_[lane], .kind = op.kind, .peer = op.peer};
      if (op.is_recv() && deps_done(ops, next_[lane])) {
        where.waits_on_message = true;
        return where;
      }
      if (!on_dependency) on_dependency = where;
    }
    return on_dependency.value_or(WaitPoint{});
  }

  // The progress loop: issue every op that can run, lane by lane, until the tile is done; sleep
  // until the next delivery when nothing can run.
  void run_tile() {
    std::fill(next_.begin(), next_.end(), 0);
    size_t remaining = 0;
    for (const Lane& lane : program_.lanes) remaining += lane.ops.size();
    Clock::time_point deadline = Clock::now() + context_.timeout;
    while (remaining > 0) {
      if (run_.aborted()) run_.throw_first_error();
      const uint64_t seen = run_.deliveries(rank_);
      bool progressed = false;
      for (uint32_t lane = 0; lane < program_.lanes.size(); ++lane) {
        const Lane& ops = program_.lanes[lane];
        while (next_[lane] < ops.ops.size() && deps_done(ops, next_[lane]) && try_issue(lane, next_[lane])) {
          ++next_[lane];
          --remaining;
          progressed = true;
        }
      }
      if (progressed) {
        deadline = Clock::now() + context_.timeout;
        continue;
      }
      const WaitPoint where = blocked_point();
      if (!run_.wait(rank_, seen, deadline, where)) {
        if (run_.aborted()) run_.throw_first_error();
        fail(run_.timeout_report(rank_, where, context_.timeout));
      }
    }
  }

  // kAvg reduces as a sum; the reduced output is divided once at the end.
  void finish_average() const {
    if (spec_.op != ReduceOp::kAvg || !is_reduction(schedule_.collective)) return;
    if (schedule_.collective == Collective::kReduce && rank_ != schedule_.root) return;
    const int64_t elements = schedule_.geometry().output_blocks * spec_.count;
    if (elements == 0) return;
    if (output_ == nullptr) fail(ErrorCode::kInvalidArgument, "host rank {}: the output buffer is null", rank_);
    divide_elements(spec_.dtype, output_, elements, schedule_.nranks);
  }

  CollectiveRun& run_;
  const int rank_;
  const Schedule& schedule_;
  const RankProgram& program_;
  const CollectiveSpec& spec_;
  const RunContext& context_;
  const ChunkMap map_;
  const int64_t element_bytes_;
  std::byte* const input_;
  std::byte* const output_;
  const int64_t scratch_slot_elements_;
  uint32_t chunk_limits_[3] = {};  // by BufferKind
  std::unique_ptr<std::byte[]> scratch_;
  uint32_t tile_ = 0;
  std::vector<uint32_t> next_;        // per lane: the next op to issue in the current tile
  std::vector<int64_t> lane_offset_;  // per lane: its first op's index in the flattened program
  int64_t ops_per_tile_ = 0;
};

void check_arguments(int world_ranks, const Schedule& schedule, const CollectiveSpec& spec, const RunContext& context) {
  if (schedule.nranks != world_ranks || static_cast<int>(schedule.ranks.size()) != world_ranks) {
    fail(ErrorCode::kInvalidArgument, "host: the schedule is for {} ranks ({} programs), the world has {}",
         schedule.nranks, schedule.ranks.size(), world_ranks);
  }
  if (spec.collective != schedule.collective || spec.nranks != schedule.nranks) {
    fail(ErrorCode::kInvalidArgument, "host: the spec ({}, {} ranks) does not match the schedule ({}, {} ranks)",
         name(spec.collective), spec.nranks, name(schedule.collective), schedule.nranks);
  }
  if (spec.count < 0) fail(ErrorCode::kInvalidArgument, "host: count {} is negative", spec.count);
  if (context.tiles < 1) fail(ErrorCode::kInvalidArgument, "host: tiles must be at least 1, got {}", context.tiles);
  if (context.align_elements < 1) {
    fail(ErrorCode::kInvalidArgument, "host: align_elements must be at least 1, got {}", context.align_elements);
  }
  if (context.timeout.count() <= 0) {
    fail(ErrorCode::kInvalidArgument, "host: timeout must be positive, got {} ms", context.timeout.count());
  }
}

}  // namespace
}  // namespace host

HostWorld::HostWorld(int nranks)
    : nranks_(nranks),
      next_sequence_(static_cast<size_t>(std::max(nranks, 0)), 0),
      busy_(static_cast<size_t>(std::max(nranks, 0)), false) {
  if (nranks < 1) fail(ErrorCode::kInvalidArgument, "host world: nranks must be at least 1, got {}", nranks);
}

HostWorld::~HostWorld() = default;

std::shared_ptr<host::CollectiveRun> HostWorld::join(int rank, const host::Signature& signature, uint64_t& sequence) {
  std::lock_guard lock(mutex_);
  if (busy_[static_cast<size_t>(rank)]) {
    fail(ErrorCode::kInvalidArgument, "host world: rank {} is already inside a collective", rank);
  }
  sequence = next_sequence_[static_cast<size_t>(rank)]++;
  busy_[static_cast<size_t>(rank)] = true;
  for (ActiveRun& active : runs_) {
    if (active.sequence == sequence) return active.run;
  }
  runs_.push_back({sequence, std::make_shared<host::CollectiveRun>(sequence, signature), 0});
  return runs_.back().run;
}

void HostWorld::leave(int rank, uint64_t sequence) {
  std::lock_guard lock(mutex_);
  busy_[static_cast<size_t>(rank)] = false;
  for (size_t i = 0; i < runs_.size(); ++i) {
    if (runs_[i].sequence != sequence) continue;
    if (++runs_[i].ranks_left == nranks_) runs_.erase(runs_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
}

RunResult HostWorld::run_rank(int rank, const Schedule& schedule, const CollectiveSpec& spec,
                              const RankBuffers& buffers, const RunContext& context) {
  if (rank < 0 || rank >= nranks_) {
    fail(ErrorCode::kInvalidArgument, "host world: rank {} out of range [0, {})", rank, nranks_);
  }
  const auto start = host::Clock::now();
  const host::Signature signature = host::Signature::of(schedule, spec, context);
  uint64_t sequence = 0;
  const std::shared_ptr<host::CollectiveRun> run = join(rank, signature, sequence);
  // Leave on every path, so a finished collective's state is freed once all ranks are out.
  struct Leave {
    HostWorld& world;
    int rank;
    uint64_t sequence;
    ~Leave() { world.leave(rank, sequence); }
  } leave_on_exit{*this, rank, sequence};

  try {
    run->arrive(rank, signature);
    const Schedule& program = run->explicit_schedule(schedule);
    host::check_arguments(nranks_, program, spec, context);
    host::RankRunner(*run, rank, program, spec, buffers, context).run();
    run->finish(rank);
  } catch (const Error& error) {
    run->fail(rank, error);
    run->throw_first_error();
  } catch (const std::exception& error) {
    run->fail(rank, Error(ErrorCode::kBackend, fmt::format("host rank {}: {}", rank, error.what())));
    run->throw_first_error();
  }
  return RunResult{.seconds = std::chrono::duration<double>(host::Clock::now() - start).count()};
}

HostExecutor::HostExecutor() : threads_(std::make_unique<host::RankThreads>()) {}

HostExecutor::~HostExecutor() = default;

void refuse_host_ops(int64_t ops, Collective collective, int nranks, bool estimated) {
  fail(ErrorCode::kInvalidArgument,
       "the host backend would run {}{} schedule ops per {} on {} ranks, above its limit of {} "
       "(kMaxHostOpsPerRun: about a minute a run on CPU threads); use fewer ranks (-g), or time it on the "
       "simulator (--backend sim)",
       estimated ? "about " : "", ops, name(collective), nranks, kMaxHostOpsPerRun);
}

RunResult HostExecutor::run(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                            const RunContext& context) {
  const int nranks = schedule.nranks;
  if (const auto ops = static_cast<int64_t>(schedule.op_count()); ops > kMaxHostOpsPerRun) {
    refuse_host_ops(ops, spec.collective, nranks, /*estimated=*/false);
  }
  if (nranks < 1 || buffers.size() != static_cast<size_t>(nranks)) {
    fail(ErrorCode::kInvalidArgument, "host: {} rank buffers for a schedule of {} ranks", buffers.size(), nranks);
  }
  HostWorld world(nranks);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(nranks));
  const auto run_one = [&](int rank) {
    try {
      world.run_rank(rank, schedule, spec, buffers[static_cast<size_t>(rank)], context);
    } catch (...) {
      errors[static_cast<size_t>(rank)] = std::current_exception();
    }
  };
  const auto start = host::Clock::now();
  threads_->run_all(nranks, run_one);
  const double seconds = std::chrono::duration<double>(host::Clock::now() - start).count();
  // Every failed rank carries the collective's first error; report the lowest rank's copy.
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  return RunResult{.seconds = seconds};
}

}  // namespace tandem
