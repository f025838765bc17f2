// The schedule IR: what every algorithm produces and every executor runs.
//
// Logical view. A collective moves *chunks*. Every buffer of a collective is a sequence of
// blocks of `count` elements (all_reduce: 1 input block and 1 output block; all_gather: 1 input
// block and nranks output blocks; ...; see BufferGeometry), and every block is cut into
// `chunks_per_block` chunks. Chunk `c` of a buffer is sub-chunk `c % chunks_per_block` of block
// `c / chunks_per_block`. A schedule never names a byte: chunks become element ranges only when
// an executor runs it (ChunkMap), so one schedule serves every message size.
//
// Lowered view. Each rank has one or more *lanes* (think NCCL channels / CUDA streams): ordered
// lists of ops. Ops: Send, Recv, RecvReduce, Copy, Reduce over contiguous chunk ranges of the
// Input, Output or Scratch buffer. Semantics every executor implements:
//   - A lane issues its ops in order. A Send is eager: it completes once its data is taken,
//     without waiting for the receiver. A Recv / RecvReduce waits for the matching Send.
//   - Sends from rank a to rank b on lane l match Recvs on rank b from a on lane l in FIFO order.
//   - `deps` lists, per op, the ops of the same rank that must have completed before it starts
//     (inferred by the builder from who last wrote / read each chunk slot). Same-lane deps are
//     implied by issue order too; cross-lane deps are what lets lanes run concurrently.
//   - RecvReduce: dst = src (+) received. Reduce: dst = dst (+) src. Copy: dst = src.
//   - kAvg reduces as a sum; executors divide the collective's reduced outputs by nranks at the end.
// A *round* is the depth of an op in the data-dependency DAG, a matched Send/Recv pair counting as
// one node: in a ring all_reduce, step s of every rank is round s.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/types.h"

namespace tandem {

enum class BufferKind : uint8_t { kInput, kOutput, kScratch };

enum class OpKind : uint8_t { kSend, kRecv, kRecvReduce, kCopy, kReduce };

std::string_view name(BufferKind b);
std::string_view name(OpKind k);

// A contiguous run of chunk slots in one buffer of one rank.
struct SlotRange {
  BufferKind buffer = BufferKind::kInput;
  uint32_t first = 0;
  uint32_t count = 0;

  bool operator==(const SlotRange&) const = default;
};

struct Op {
  OpKind kind = OpKind::kSend;
  int32_t peer = -1;  // Send / Recv / RecvReduce: the other rank; -1 for local ops
  SlotRange src;      // Send: data sent; RecvReduce: local operand; Copy / Reduce: source
  SlotRange dst;      // Recv / RecvReduce / Copy / Reduce: slots written; unused by Send

  bool reads_src() const { return kind != OpKind::kRecv; }
  bool writes_dst() const { return kind != OpKind::kSend; }
  bool is_recv() const { return kind == OpKind::kRecv || kind == OpKind::kRecvReduce; }
  // Number of chunks moved (the payload of a Send / Recv).
  uint32_t chunks() const { return kind == OpKind::kSend ? src.count : dst.count; }
};

// An op of the same rank, named by lane and position.
struct OpRef {
  uint32_t lane = 0;
  uint32_t index = 0;
  bool operator==(const OpRef&) const = default;
};

struct Lane {
  std::vector<Op> ops;
  // Dependencies in CSR form: deps of op i are deps[dep_begin[i] .. dep_begin[i+1]).
  std::vector<uint32_t> dep_begin{0};
  std::vector<OpRef> deps;
  // Filled by validate(): the round of each op.
  std::vector<uint32_t> rounds;

  size_t dep_count(size_t i) const { return dep_begin[i + 1] - dep_begin[i]; }
  const OpRef* deps_of(size_t i) const { return deps.data() + dep_begin[i]; }
};

struct RankProgram {
  std::vector<Lane> lanes;
  uint32_t scratch_chunks = 0;  // scratch slot s has the size of sub-chunk s % chunks_per_block
};

// How many blocks of `count` elements each buffer of a collective holds, and whether the
// collective can run in place (output aliasing input as NCCL defines it).
struct BufferGeometry {
  uint32_t input_blocks = 1;
  uint32_t output_blocks = 1;
  bool in_place_supported = true;
};
BufferGeometry buffer_geometry(Collective c, int nranks);

// In-place aliasing, as NCCL defines it: all_reduce / broadcast / reduce: output == input;
// all_gather: input is output block `rank`; reduce_scatter: output is input block `rank`.
// Returns the input chunk that output chunk `output_chunk` of `rank` aliases.
uint32_t in_place_input_chunk(Collective c, int rank, uint32_t output_chunk, uint32_t chunks_per_block);

// What a schedule is built for: the collective, the rank count and (broadcast / reduce) the root.
// `count`, `dtype` and `op` are part of the spec so callers can pass one object around, but
// algorithms never look at them: schedules are size- and type-independent.
struct CollectiveSpec {
  Collective collective = Collective::kAllReduce;
  int64_t count = 0;  // elements per block (see BufferGeometry)
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  int nranks = 1;
};

// How ranks sit on the machine, as the algorithms see it. Rank r lives on node
// r / ranks_per_node. `rings` are the ring orders the topology prefers, one per channel: channel c
// of a ring algorithm runs rings[c % rings.size()] (empty: 0..n-1 for every channel). NCCL builds
// a different ring per channel so that, together, the channels leave every node on every NIC
// (nccl_rings below draws them).
struct RankLayout {
  int nranks = 1;
  int ranks_per_node = 1;
  std::vector<std::vector<int>> rings;

  static RankLayout flat(int nranks);
  static RankLayout nodes(int nnodes, int ranks_per_node);
  // `nodes` with NCCL's channel rings (nccl_rings).
  static RankLayout nccl(int nnodes, int ranks_per_node);
  int node_count() const { return (nranks + ranks_per_node - 1) / ranks_per_node; }
  // The ring order of channel `channel`; nullptr when the layout has none (0..n-1).
  const std::vector<int>* ring(int channel) const {
    return rings.empty() ? nullptr : &rings[static_cast<size_t>(channel) % rings.size()];
  }
};

// NCCL 2.28's ring per search channel on `nnodes` nodes of `m` GPUs (graph/search.cc with
// NCCL_CROSS_NIC=2, connect.cc; shared/docs/nccl-multinode-notes.md section 1), one order per
// search channel s = 0..m-1 (a runtime channel c runs s = c % m). Inside node v the ring enters on
// local GPU `in`, visits every GPU of the node and leaves from the GPU next to `in`:
//
//   even node, s even:  in = s,   s, s-1, ..., s+1 (mod m)   leaves on s+1
//   even node, s odd:   in = s,   s, s+1, ..., s-1 (mod m)   leaves on s-1
//   odd node:           the pattern of s^1 ("alternate rings to avoid crossing rails")
//
// so that a channel leaves node v from the GPU (and NIC) it enters node v+1 on. 2 nodes x 8:
//
//   s=0:  0 7 6 5 4 3 2 1 | 9 10 11 12 13 14 15 8     node 0 leaves on GPU 1 (NIC 1), node 1
//   s=1:  1 2 3 4 5 6 7 0 | 8 15 14 13 12 11 10 9     enters on GPU 9 (its NIC 1): one rail
//   s=2:  2 1 0 7 6 5 4 3 | 11 12 13 14 15 8 9 10
//   ...                                                every NIC carries 2 of the 16 channels
//
// Nodes are chained in order 0, 1, ..., nnodes-1; with an odd node count the hop from the last
// node back to node 0 changes rails, as in NCCL. With m == 1 every ring is 0..nnodes-1.
std::vector<std::vector<int>> nccl_rings(int nnodes, int m);

struct AlgoParams {
  int channels = 1;        // ring: parallel rings, each on its own lane; tree: NCCL channels (half
                           // per tree, rounded up to 2)
  int pipeline_chunks = 1;  // tree / chains: chunks a message is cut into so hops overlap
  Algorithm inter_node = Algorithm::kRing;  // hierarchical: the algorithm between nodes
  bool operator==(const AlgoParams&) const = default;
};

// A rank-symmetric schedule stores one program, for ring position 0, that every position runs
// relabelled: the rank at position p is order[p]; an op's `peer` is a position offset d (the peer
// of position p is position (p + d) mod n); chunk c at position p is chunk
// (c / G) * G + (c % G + p) mod G, G = rotation_group (chunk ranges are single chunks). A flat ring
// is such a schedule; storing it once keeps a 16,384-rank ring (5e8 ops) a few MB, and lets the
// checkers and the simulator reason about one position instead of all.
struct Symmetry {
  std::vector<int> order;
  // Lanes that ring over different orders (NCCL's channel rings): one order per lane of the
  // template, lane l's position p being rank lane_orders[l][p]; empty: every lane uses `order`
  // (then `order` is lane 0's). Allowed only when lanes never share a chunk window of
  // rotation_group chunks and have no dependency on each other (validate checks it), so that each
  // lane is a ring of its own and the checks can reason about one position per lane.
  std::vector<std::vector<int>> lane_orders;
  uint32_t rotation_group = 0;

  bool operator==(const Symmetry&) const = default;
  const std::vector<int>& order_of(size_t lane) const { return lane_orders.empty() ? order : lane_orders[lane]; }
  // Chunk `chunk` of the template as seen at ring position `position`.
  uint32_t rotate(uint32_t chunk, uint64_t position) const {
    const uint32_t g = rotation_group;
    return chunk / g * g + static_cast<uint32_t>((chunk % g + position) % g);
  }
};

// Which form build_schedule returns: one program per rank, or the rank-symmetric form where the
// algorithm has one (ring all_reduce); algorithms without one return the explicit form.
enum class ScheduleForm : uint8_t { kExplicit, kSymmetric };

struct Schedule {
  static constexpr int kSchemaVersion = 1;

  Collective collective = Collective::kAllReduce;
  Algorithm algorithm = Algorithm::kRing;
  int nranks = 1;
  int root = 0;
  uint32_t chunks_per_block = 1;
  AlgoParams params;
  std::vector<RankProgram> ranks;  // one per rank; for a symmetric schedule only position 0's
  Symmetry symmetry;               // empty order: explicit
  uint32_t num_rounds = 0;         // filled by validate()

  bool symmetric() const { return !symmetry.order.empty(); }
  BufferGeometry geometry() const { return buffer_geometry(collective, nranks); }
  uint32_t chunk_count(int rank, BufferKind buffer) const;
  // Ops over all ranks (for a symmetric schedule: the template's ops times nranks).
  size_t op_count() const;
};

// The explicit form of a symmetric schedule (a copy of an explicit one). Rounds are kept.
Schedule expand(const Schedule& schedule);

// A schedule's ops live in memory: about this many bytes an op at the peak of building, checking
// and printing one (the Op, its dependencies, emission order and round; `tandem schedule` of a ring
// all_reduce peaked at 150-165 bytes an op over 1,024-4,096 ranks).
inline constexpr double kScheduleBytesPerOp = 160;
// Throws Error(kInvalidArgument), naming the schedule and what it needs against what is available
// (core/host_memory.h), when `ops` ops of the explicit form of a `collective` `algorithm` schedule
// for `nranks` ranks would not fit the host memory budget. build_schedule calls it with an estimate
// before building (`estimated`), builders and expand() with their running count as they grow.
void require_schedule_memory(int64_t ops, Collective collective, Algorithm algorithm, int nranks,
                             bool estimated = false);
// The most ops a schedule may hold under the budget (INT64_MAX when it is unknown). Read once.
int64_t max_schedule_ops();

// Maps the chunks of a block to element ranges, by the balanced aligned partition: a block of
// `count` elements is `units` = ceil(count / align) aligned units; piece i of k over n units
// starts at i*floor(n/k) + min(i, n mod k). Tiles (pipelining, orthogonal to the algorithm) cut
// the block first, then each tile is cut into chunks the same way.
struct ElementRange {
  int64_t offset = 0;
  int64_t count = 0;
};
class ChunkMap {
 public:
  ChunkMap(int64_t count, uint32_t chunks_per_block, uint32_t tiles = 1, int64_t align_elements = 1);
  uint32_t tiles() const { return tiles_; }
  // Elements of sub-chunk `sub` of tile `tile`, relative to the start of a block.
  ElementRange range(uint32_t tile, uint32_t sub) const;
  // The largest chunk over all tiles (sizes scratch slots).
  int64_t max_chunk_elements() const;

 private:
  int64_t count_, align_, units_;
  uint32_t chunks_, tiles_;
};

// Piece i of k of n items by the balanced partition (the first n mod k pieces are one larger).
inline int64_t balanced_offset(int64_t n, int64_t k, int64_t i) { return i * (n / k) + (i < n % k ? i : n % k); }

}  // namespace tandem
