#include "core/schedule.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "core/host_memory.h"

namespace tandem {

std::string_view name(BufferKind b) {
  switch (b) {
    case BufferKind::kInput: return "In";
    case BufferKind::kOutput: return "Out";
    case BufferKind::kScratch: return "Scratch";
  }
  return "?";
}

std::string_view name(OpKind k) {
  switch (k) {
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kRecvReduce: return "recv_reduce";
    case OpKind::kCopy: return "copy";
    case OpKind::kReduce: return "reduce";
  }
  return "?";
}

BufferGeometry buffer_geometry(Collective c, int nranks) {
  const auto n = static_cast<uint32_t>(nranks);
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce: return {1, 1, true};
    case Collective::kReduceScatter: return {n, 1, true};
    case Collective::kAllGather: return {1, n, true};
    case Collective::kAllToAll: return {n, n, false};
    case Collective::kSendRecv: return {1, 1, false};
  }
  return {};
}

uint32_t in_place_input_chunk(Collective c, int rank, uint32_t output_chunk, uint32_t chunks_per_block) {
  switch (c) {
    case Collective::kAllGather:
      // Output block `rank` is the input; other output blocks alias nothing: the caller only asks
      // for chunks of block `rank`.
      return output_chunk - static_cast<uint32_t>(rank) * chunks_per_block;
    case Collective::kReduceScatter: return output_chunk + static_cast<uint32_t>(rank) * chunks_per_block;
    default: return output_chunk;
  }
}

RankLayout RankLayout::flat(int nranks) {
  RankLayout layout;
  layout.nranks = nranks;
  layout.ranks_per_node = 1;
  return layout;
}

RankLayout RankLayout::nodes(int nnodes, int ranks_per_node) {
  RankLayout layout;
  layout.nranks = nnodes * ranks_per_node;
  layout.ranks_per_node = ranks_per_node;
  return layout;
}

RankLayout RankLayout::nccl(int nnodes, int ranks_per_node) {
  RankLayout layout = nodes(nnodes, ranks_per_node);
  if (layout.nranks > 1) layout.rings = nccl_rings(nnodes, ranks_per_node);
  return layout;
}

std::vector<std::vector<int>> nccl_rings(int nnodes, int m) {
  if (nnodes < 1 || m < 1) fail(ErrorCode::kInvalidArgument, "nccl_rings: {} nodes of {} GPUs", nnodes, m);
  // The node-local order of search channel s on a node that uses pattern s: enter on s, walk away
  // from the partner s^1 (down for even s, up for odd s), leave on the GPU next to s.
  auto local_order = [m](int s) {
    std::vector<int> order;
    const int step = s % 2 == 0 ? -1 : 1;
    for (int i = 0; i < m; ++i) order.push_back(((s + step * i) % m + m) % m);
    return order;
  };
  std::vector<std::vector<int>> rings;
  for (int s = 0; s < m; ++s) {
    // An odd node count of m is an unpaired last channel: it keeps its own pattern everywhere.
    const int partner = (s ^ 1) < m ? (s ^ 1) : s;
    std::vector<int> ring;
    ring.reserve(static_cast<size_t>(nnodes * m));
    for (int v = 0; v < nnodes; ++v) {
      for (int local : local_order(v % 2 == 0 ? s : partner)) ring.push_back(v * m + local);
    }
    rings.push_back(std::move(ring));
  }
  return rings;
}

uint32_t Schedule::chunk_count(int rank, BufferKind buffer) const {
  const BufferGeometry g = geometry();
  switch (buffer) {
    case BufferKind::kInput: return g.input_blocks * chunks_per_block;
    case BufferKind::kOutput: return g.output_blocks * chunks_per_block;
    case BufferKind::kScratch: return ranks[static_cast<size_t>(rank)].scratch_chunks;
  }
  return 0;
}

size_t Schedule::op_count() const {
  size_t total = 0;
  for (const RankProgram& rank : ranks) {
    for (const Lane& lane : rank.lanes) total += lane.ops.size();
  }
  return symmetric() ? total * static_cast<size_t>(nranks) : total;
}

namespace {
const std::optional<MemoryBudget>& schedule_budget() {
  static const std::optional<MemoryBudget> budget = memory_budget();
  return budget;
}
}  // namespace

int64_t max_schedule_ops() {
  static const int64_t limit = schedule_budget() ? static_cast<int64_t>(schedule_budget()->bytes / kScheduleBytesPerOp)
                                                 : std::numeric_limits<int64_t>::max();
  return limit;
}

void require_schedule_memory(int64_t ops, Collective collective, Algorithm algorithm, int nranks, bool estimated) {
  if (ops <= max_schedule_ops()) return;
  fail(ErrorCode::kInvalidArgument,
       "the {} {} schedule for {} ranks needs {} {} ops, {} of host memory at about {:.0f} bytes an op; {} is "
       "available ({}): use fewer ranks, an algorithm with fewer steps, or the rank-symmetric form where there is one "
       "(tandem schedule --symmetric)",
       name(algorithm), name(collective), nranks, estimated ? "about" : "more than", ops,
       memory_text(static_cast<double>(ops) * kScheduleBytesPerOp),
       kScheduleBytesPerOp, memory_text(schedule_budget()->bytes), schedule_budget()->source);
}

Schedule expand(const Schedule& schedule) {
  if (!schedule.symmetric()) return schedule;
  int64_t base_ops = 0;
  for (const Lane& lane : schedule.ranks.at(0).lanes) base_ops += static_cast<int64_t>(lane.ops.size());
  require_schedule_memory(base_ops * schedule.nranks, schedule.collective, schedule.algorithm, schedule.nranks);
  Schedule out = schedule;
  out.symmetry = {};
  const RankProgram& base = schedule.ranks.at(0);
  out.ranks.assign(static_cast<size_t>(schedule.nranks), RankProgram{{}, base.scratch_chunks});
  for (RankProgram& rank : out.ranks) rank.lanes.resize(base.lanes.size());
  const auto n = static_cast<uint64_t>(schedule.nranks);
  for (size_t l = 0; l < base.lanes.size(); ++l) {
    const std::vector<int>& order = schedule.symmetry.order_of(l);
    for (uint64_t p = 0; p < n; ++p) {
      Lane& lane = out.ranks[static_cast<size_t>(order[p])].lanes[l];
      lane = base.lanes[l];
      for (Op& op : lane.ops) {
        if (op.peer >= 0) op.peer = order[(p + static_cast<uint64_t>(op.peer)) % n];
        if (op.src.count > 0) op.src.first = schedule.symmetry.rotate(op.src.first, p);
        if (op.dst.count > 0) op.dst.first = schedule.symmetry.rotate(op.dst.first, p);
      }
    }
  }
  return out;
}

ChunkMap::ChunkMap(int64_t count, uint32_t chunks_per_block, uint32_t tiles, int64_t align_elements)
    : count_(count), align_(align_elements), chunks_(chunks_per_block), tiles_(tiles) {
  if (count < 0) fail(ErrorCode::kInvalidArgument, "element count {} is negative", count);
  if (chunks_per_block == 0) fail(ErrorCode::kInvalidArgument, "chunks per block must be at least 1");
  if (tiles == 0) fail(ErrorCode::kInvalidArgument, "tiles must be at least 1");
  if (align_elements < 1) fail(ErrorCode::kInvalidArgument, "alignment must be at least 1 element");
  units_ = (count + align_ - 1) / align_;
}

ElementRange ChunkMap::range(uint32_t tile, uint32_t sub) const {
  // Units of the tile, then units of the chunk inside the tile; the last unit may be short.
  const int64_t tile_first = balanced_offset(units_, tiles_, tile);
  const int64_t tile_units = balanced_offset(units_, tiles_, tile + 1) - tile_first;
  const int64_t first = tile_first + balanced_offset(tile_units, chunks_, sub);
  const int64_t last = tile_first + balanced_offset(tile_units, chunks_, sub + 1);
  const int64_t begin = std::min(first * align_, count_);
  const int64_t end = std::min(last * align_, count_);
  return {begin, end - begin};
}

int64_t ChunkMap::max_chunk_elements() const {
  // Tile 0 and chunk 0 get the largest piece of the balanced partition.
  return range(0, 0).count;
}

}  // namespace tandem
