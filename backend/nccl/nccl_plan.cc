#include "backend/nccl/nccl_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

#include "core/error.h"

namespace tandem::nccl {
namespace {

constexpr uint32_t kNone = UINT32_MAX;

bool is_remote(const Op& op) { return op.kind == OpKind::kSend || op.is_recv(); }

// Every op of the explicit schedule by a global id: rank by rank, lane by lane, in issue order.
class OpIds {
 public:
  explicit OpIds(const Schedule& s) {
    for (const RankProgram& rank : s.ranks) {
      std::vector<uint32_t> lanes;
      for (const Lane& lane : rank.lanes) {
        lanes.push_back(total_);
        total_ += static_cast<uint32_t>(lane.ops.size());
      }
      first_.push_back(std::move(lanes));
    }
  }
  uint32_t id(int rank, uint32_t lane, uint32_t index) const { return first_[static_cast<size_t>(rank)][lane] + index; }
  uint32_t total() const { return total_; }

 private:
  std::vector<std::vector<uint32_t>> first_;
  uint32_t total_ = 0;
};

struct OpAt {
  int rank = 0;
  uint32_t lane = 0;
  uint32_t index = 0;
};

[[noreturn]] void reject(const OpAt& at, const std::string& what) {
  fail(ErrorCode::kInvalidSchedule, "nccl plan: rank {} lane {} op {}: {}", at.rank, at.lane, at.index, what);
}

// The schedule's structure as the plan needs it: each op's partner (the matching receive of a
// send and the reverse) and each op's level.
struct Analysis {
  std::vector<OpAt> at;
  std::vector<uint32_t> partner;
  std::vector<uint32_t> level;
  uint32_t levels = 0;
  int64_t lifted_sends = 0;
};

void check_bounds(const Schedule& s) {
  for (int r = 0; r < s.nranks; ++r) {
    const RankProgram& program = s.ranks[static_cast<size_t>(r)];
    for (uint32_t l = 0; l < program.lanes.size(); ++l) {
      const Lane& lane = program.lanes[l];
      if (lane.dep_begin.size() != lane.ops.size() + 1 || lane.dep_begin.back() != lane.deps.size()) {
        fail(ErrorCode::kInvalidSchedule, "nccl plan: rank {} lane {}: malformed dependency lists", r, l);
      }
      for (uint32_t i = 0; i < lane.ops.size(); ++i) {
        const Op& op = lane.ops[i];
        const OpAt at{r, l, i};
        if (is_remote(op) && (op.peer < 0 || op.peer >= s.nranks))
          reject(at, fmt::format("peer {} out of range", op.peer));
        auto check = [&](const SlotRange& range, const char* field) {
          const uint32_t limit = s.chunk_count(r, range.buffer);
          if (range.first > limit || range.count > limit - range.first) {
            reject(at, fmt::format("{} {} chunks [{}, {}) out of bounds ({} chunks)", field, name(range.buffer),
                                   range.first, range.first + range.count, limit));
          }
        };
        if (op.reads_src()) check(op.src, "src");
        if (op.writes_dst()) check(op.dst, "dst");
        if (op.reads_src() && op.writes_dst() && op.src.count != op.dst.count) {
          reject(at, fmt::format("src has {} chunks, dst {}", op.src.count, op.dst.count));
        }
        for (size_t d = 0; d < lane.dep_count(i); ++d) {
          const OpRef dep = lane.deps_of(i)[d];
          if (dep.lane >= program.lanes.size() || dep.index >= program.lanes[dep.lane].ops.size()) {
            reject(at, fmt::format("dependency on lane {} op {} out of range", dep.lane, dep.index));
          }
        }
      }
    }
  }
}

// FIFO matching per (src, dst, lane): the k-th send meets the k-th receive. Fills a.at and a.partner.
void match_transfers(const Schedule& s, const OpIds& ids, Analysis& a) {
  std::map<std::tuple<int, int, uint32_t>, std::deque<uint32_t>> pending;
  for (int r = 0; r < s.nranks; ++r) {
    const RankProgram& program = s.ranks[static_cast<size_t>(r)];
    for (uint32_t l = 0; l < program.lanes.size(); ++l) {
      for (uint32_t i = 0; i < program.lanes[l].ops.size(); ++i) {
        a.at[ids.id(r, l, i)] = {r, l, i};
        const Op& op = program.lanes[l].ops[i];
        if (op.kind == OpKind::kSend) pending[{r, op.peer, l}].push_back(ids.id(r, l, i));
      }
    }
  }
  for (int r = 0; r < s.nranks; ++r) {
    const RankProgram& program = s.ranks[static_cast<size_t>(r)];
    for (uint32_t l = 0; l < program.lanes.size(); ++l) {
      for (uint32_t i = 0; i < program.lanes[l].ops.size(); ++i) {
        const Op& op = program.lanes[l].ops[i];
        if (!op.is_recv()) continue;
        std::deque<uint32_t>& queue = pending[{op.peer, r, l}];
        if (queue.empty()) reject({r, l, i}, fmt::format("{} from {} has no matching send", name(op.kind), op.peer));
        const uint32_t send = queue.front();
        queue.pop_front();
        const uint32_t recv = ids.id(r, l, i);
        const OpAt& from = a.at[send];
        const Op& sent = s.ranks[static_cast<size_t>(from.rank)].lanes[from.lane].ops[from.index];
        if (sent.src.count != op.dst.count) {
          reject({r, l, i},
                 fmt::format("receives {} chunks, the matching send sends {}", op.dst.count, sent.src.count));
        }
        a.partner[send] = recv;
        a.partner[recv] = send;
      }
    }
  }
  for (const auto& [key, queue] : pending) {
    if (!queue.empty())
      reject(a.at[queue.front()], fmt::format("send to {} has no matching receive", std::get<1>(key)));
  }
}

// The level graph: a node per op, a send and its receive merged into one (the send's id); an edge
// per dependency. A receive's dependency on a Send of its own rank only protects the send's source
// from being overwritten (a write after read): it weighs 0, since a receive in the send's group
// lands in staging and is copied out after the group.
struct LevelGraph {
  struct Edge {
    uint32_t to;
    uint32_t weight;
  };
  std::vector<uint32_t> node;  // op id -> its node
  std::vector<std::vector<Edge>> edges;
};

LevelGraph level_graph(const Schedule& s, const OpIds& ids, const Analysis& a) {
  LevelGraph graph;
  graph.node.resize(ids.total());
  for (uint32_t g = 0; g < ids.total(); ++g) {
    const OpAt& at = a.at[g];
    const Op& op = s.ranks[static_cast<size_t>(at.rank)].lanes[at.lane].ops[at.index];
    graph.node[g] = op.is_recv() ? a.partner[g] : g;
  }
  graph.edges.resize(ids.total());
  for (uint32_t g = 0; g < ids.total(); ++g) {
    const OpAt& at = a.at[g];
    const Lane& lane = s.ranks[static_cast<size_t>(at.rank)].lanes[at.lane];
    const bool receives = lane.ops[at.index].is_recv();
    for (size_t d = 0; d < lane.dep_count(at.index); ++d) {
      const OpRef dep = lane.deps_of(at.index)[d];
      const uint32_t from = graph.node[ids.id(at.rank, dep.lane, dep.index)];
      const uint32_t to = graph.node[g];
      const bool after_send =
          s.ranks[static_cast<size_t>(at.rank)].lanes[dep.lane].ops[dep.index].kind == OpKind::kSend;
      const uint32_t weight = receives && after_send ? 0 : 1;
      if (from == to && weight == 0) continue;  // a self-send's receive waiting for its own send
      if (from == to) reject(at, "depends on its own matched transfer");
      graph.edges[from].push_back({to, weight});
    }
  }
  return graph;
}

// Tarjan's strongly connected components of the graph's nodes, iteratively (dependency chains can
// be long): each node's component, numbered in reverse topological order (a component's
// successors come first); `components` is their count.
std::vector<uint32_t> strong_components(const LevelGraph& graph, uint32_t& components) {
  const auto total = static_cast<uint32_t>(graph.node.size());
  constexpr uint32_t kUnvisited = UINT32_MAX;
  std::vector<uint32_t> order(total, kUnvisited), low(total, 0), component(total, kNone);
  std::vector<bool> on_stack(total, false);
  std::vector<uint32_t> stack;
  std::vector<std::pair<uint32_t, size_t>> calls;  // (node, next edge)
  uint32_t counter = 0;
  components = 0;
  for (uint32_t root = 0; root < total; ++root) {
    if (graph.node[root] != root || order[root] != kUnvisited) continue;
    calls.push_back({root, 0});
    order[root] = low[root] = counter++;
    stack.push_back(root);
    on_stack[root] = true;
    while (!calls.empty()) {
      auto& [v, next] = calls.back();
      if (next < graph.edges[v].size()) {
        const uint32_t w = graph.edges[v][next++].to;
        if (order[w] == kUnvisited) {
          order[w] = low[w] = counter++;
          stack.push_back(w);
          on_stack[w] = true;
          calls.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], order[w]);
        }
        continue;
      }
      const uint32_t done = v;
      calls.pop_back();
      if (!calls.empty()) low[calls.back().first] = std::min(low[calls.back().first], low[done]);
      if (low[done] == order[done]) {
        uint32_t w = kNone;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          component[w] = components;
        } while (w != done);
        ++components;
      }
    }
  }
  return component;
}

// Each op's level: the longest path to its component over the weighted edges (zero-weight edges
// can close cycles: two ranks exchanging in place, each receive waiting for its own send, which is
// the other's receive; a component with a weight-1 edge inside is a real cycle). Counts the sends
// this plan lifts: receives whose validate() round is later than their send's.
void assign_levels(const Schedule& s, const LevelGraph& graph, Analysis& a) {
  const auto total = static_cast<uint32_t>(graph.node.size());
  uint32_t components = 0;
  const std::vector<uint32_t> component = strong_components(graph, components);
  std::vector<uint32_t> component_level(components, 0);
  std::vector<std::vector<uint32_t>> members(components);
  for (uint32_t g = 0; g < total; ++g) {
    if (graph.node[g] == g) members[component[g]].push_back(g);
  }
  for (uint32_t c = components; c-- > 0;) {
    for (uint32_t v : members[c]) {
      for (const LevelGraph::Edge& edge : graph.edges[v]) {
        const uint32_t target = component[edge.to];
        if (target == c) {
          if (edge.weight != 0) reject(a.at[v], "can never start: the dependency graph has a cycle");
          continue;
        }
        component_level[target] = std::max(component_level[target], component_level[c] + edge.weight);
      }
    }
  }
  a.level.assign(total, 0);
  for (uint32_t g = 0; g < total; ++g) {
    if (graph.node[g] != g) continue;
    a.level[g] = component_level[component[g]];
    a.levels = std::max(a.levels, a.level[g] + 1);
  }
  for (uint32_t g = 0; g < total; ++g) {
    if (graph.node[g] == g) continue;
    a.level[g] = a.level[graph.node[g]];
    const OpAt& recv = a.at[g];
    const OpAt& send = a.at[a.partner[g]];
    const Lane& recv_lane = s.ranks[static_cast<size_t>(recv.rank)].lanes[recv.lane];
    const Lane& send_lane = s.ranks[static_cast<size_t>(send.rank)].lanes[send.lane];
    if (recv_lane.rounds.size() == recv_lane.ops.size() && send_lane.rounds.size() == send_lane.ops.size() &&
        recv_lane.rounds[recv.index] != send_lane.rounds[send.index]) {
      ++a.lifted_sends;
    }
  }
}

Analysis analyse(const Schedule& s) {
  const OpIds ids(s);
  Analysis a;
  a.at.resize(ids.total());
  a.partner.assign(ids.total(), kNone);
  match_transfers(s, ids, a);
  assign_levels(s, level_graph(s, ids, a), a);
  return a;
}

PlanBuffer plan_buffer(BufferKind buffer) {
  switch (buffer) {
    case BufferKind::kInput:
      return PlanBuffer::kInput;
    case BufferKind::kOutput:
      return PlanBuffer::kOutput;
    case BufferKind::kScratch:
      return PlanBuffer::kScratch;
  }
  return PlanBuffer::kInput;
}

// The caller's input and output may be one allocation (in place), so ranges in the two can alias.
bool may_alias(const PlanRange& x, const PlanRange& y) {
  const auto caller = [](PlanBuffer b) { return b == PlanBuffer::kInput || b == PlanBuffer::kOutput; };
  if (x.buffer == y.buffer) return x.offset < y.end() && y.offset < x.end();
  return caller(x.buffer) && caller(y.buffer);
}

bool continues(const PlanRange& previous, const PlanRange& next) {
  return previous.buffer == next.buffer && previous.end() == next.offset;
}

// A run of chunks of one message: chunks [first, last) of the op, contiguous on both sides.
struct MessageRun {
  uint32_t first = 0;
  uint32_t last = 0;
  PlanRange send;      // on the sender
  PlanRange received;  // on the receiver: the destination, or (RecvReduce) offsets in its staging area
};

class Lowering {
 public:
  Lowering(const Schedule& s, const CollectiveSpec& spec, const PlanOptions& options)
      : s_(s),
        spec_(spec),
        map_(spec.count, s.chunks_per_block, options.tiles, options.align_elements),
        slot_elements_(map_.max_chunk_elements()),
        analysis_(analyse(s)),
        ids_(s) {
    ops_per_tile_.resize(static_cast<size_t>(s.nranks));
    lane_offset_.resize(static_cast<size_t>(s.nranks));
    for (int r = 0; r < s.nranks; ++r) {
      for (const Lane& lane : s.ranks[static_cast<size_t>(r)].lanes) {
        lane_offset_[static_cast<size_t>(r)].push_back(ops_per_tile_[static_cast<size_t>(r)]);
        ops_per_tile_[static_cast<size_t>(r)] += static_cast<int64_t>(lane.ops.size());
      }
    }
  }

  uint32_t levels() const { return analysis_.levels; }
  int64_t lifted_sends() const { return analysis_.lifted_sends; }

  RankPlan rank_plan(int rank) const {
    const RankProgram& program = s_.ranks[static_cast<size_t>(rank)];
    RankPlan plan;
    plan.rank = rank;
    plan.scratch_slot_elements = slot_elements_;
    plan.scratch_elements = static_cast<int64_t>(program.scratch_chunks) * slot_elements_;
    for (uint32_t tile = 0; tile < map_.tiles(); ++tile) {
      std::vector<PlanGroup> groups(analysis_.levels);
      std::vector<int64_t> staging(analysis_.levels, 0);
      for (uint32_t level = 0; level < analysis_.levels; ++level) {
        groups[level].tile = tile;
        groups[level].level = level;
      }
      for (uint32_t l = 0; l < program.lanes.size(); ++l) {
        for (uint32_t i = 0; i < program.lanes[l].ops.size(); ++i) {
          const uint32_t g = ids_.id(rank, l, i);
          const uint32_t level = analysis_.level[g];
          lower_op(rank, tile, l, i, groups[level], staging[level]);
          plan.staging_elements = std::max(plan.staging_elements, staging[level]);
        }
      }
      for (PlanGroup& group : groups) {
        if (!group.transfers.empty() || !group.local.empty()) plan.groups.push_back(std::move(group));
      }
    }
    const bool averages = spec_.op == ReduceOp::kAvg && is_reduction(s_.collective) &&
                          (s_.collective != Collective::kReduce || rank == s_.root);
    const int64_t output_elements = static_cast<int64_t>(s_.geometry().output_blocks) * spec_.count;
    if (averages && output_elements > 0) {
      const PlanRange output{PlanBuffer::kOutput, 0, output_elements};
      plan.finish = LocalStep{.kind = LocalKind::kDivide, .segments = {{output, {}, output}}};
    }
    return plan;
  }

 private:
  // Chunk `chunk` of `buffer` on a rank in tile `tile`: input / output chunk c is sub-chunk c % k of
  // block c / k; scratch slot s is slot_elements_ apart and holds sub-chunk s % k.
  PlanRange segment(BufferKind buffer, uint32_t chunk, uint32_t tile) const {
    const uint32_t k = s_.chunks_per_block;
    const ElementRange range = map_.range(tile, chunk % k);
    if (buffer == BufferKind::kScratch) return {PlanBuffer::kScratch, int64_t{chunk} * slot_elements_, range.count};
    return {plan_buffer(buffer), int64_t{chunk / k} * spec_.count + range.offset, range.count};
  }

  // Does receive `recv` land in staging? A RecvReduce always does (it reduces after the group); a
  // Recv does when it shares its group with a Send of its rank that reads what it overwrites.
  bool is_staged(uint32_t recv) const {
    const Op& op = op_of(recv);
    if (op.kind == OpKind::kRecvReduce) return true;
    const OpAt& at = analysis_.at[recv];
    const Lane& lane = s_.ranks[static_cast<size_t>(at.rank)].lanes[at.lane];
    for (size_t d = 0; d < lane.dep_count(at.index); ++d) {
      const OpRef dep = lane.deps_of(at.index)[d];
      const uint32_t g = ids_.id(at.rank, dep.lane, dep.index);
      if (op_of(g).kind == OpKind::kSend && analysis_.level[g] == analysis_.level[recv]) return true;
    }
    return false;
  }

  const Op& op_of(uint32_t g) const {
    const OpAt& at = analysis_.at[g];
    return s_.ranks[static_cast<size_t>(at.rank)].lanes[at.lane].ops[at.index];
  }

  // The messages of the pair (send `send`, receive `recv`) in tile `tile`; both sides compute it
  // from the same two ops, so they agree on the split.
  std::vector<MessageRun> message_runs(uint32_t send, uint32_t recv, uint32_t tile) const {
    const Op& sent = op_of(send);
    const Op& received = op_of(recv);
    const bool staged = is_staged(recv);
    std::vector<MessageRun> runs;
    int64_t staged_elements = 0;
    for (uint32_t c = 0; c < sent.src.count; ++c) {
      const PlanRange from = segment(sent.src.buffer, sent.src.first + c, tile);
      PlanRange to = segment(received.dst.buffer, received.dst.first + c, tile);
      if (from.count != to.count) {
        reject(analysis_.at[recv],
               fmt::format("chunk {} has {} elements, the sender's {} (sub-chunk mismatch)", c, to.count, from.count));
      }
      if (from.count == 0) continue;
      if (staged) {
        to = {PlanBuffer::kStaging, staged_elements, from.count};
        staged_elements += from.count;
      }
      if (!runs.empty() && continues(runs.back().send, from) && continues(runs.back().received, to)) {
        runs.back().last = c + 1;
        runs.back().send.count += from.count;
        runs.back().received.count += to.count;
      } else {
        runs.push_back({c, c + 1, from, to});
      }
    }
    return runs;
  }

  // Appends a segment to `step`, merged into the previous one when every operand continues it and
  // merging cannot change what an aliased in-place run computes.
  static void add_segment(LocalStep& step, const LocalSegment& segment) {
    if (segment.dst.count == 0) return;
    if (!step.segments.empty()) {
      LocalSegment& last = step.segments.back();
      const bool reads_b = step.kind == LocalKind::kReduce;
      const bool contiguous = continues(last.a, segment.a) && continues(last.dst, segment.dst) &&
                              (!reads_b || continues(last.b, segment.b));
      const auto safe = [](const PlanRange& x, const PlanRange& dst) {
        return (x.buffer == dst.buffer && x.offset == dst.offset) || !may_alias(x, dst);
      };
      const PlanRange merged_a{last.a.buffer, last.a.offset, last.a.count + segment.a.count};
      const PlanRange merged_b{last.b.buffer, last.b.offset, last.b.count + segment.b.count};
      const PlanRange merged_dst{last.dst.buffer, last.dst.offset, last.dst.count + segment.dst.count};
      // Merged ranges must be identical or provably disjoint: input and output never merge with each
      // other (in place they may alias chunk by chunk, and order then matters).
      if (contiguous && safe(merged_a, merged_dst) && (!reads_b || safe(merged_b, merged_dst))) {
        last.a = merged_a;
        if (reads_b) last.b = merged_b;
        last.dst = merged_dst;
        return;
      }
    }
    step.segments.push_back(segment);
  }

  void lower_op(int rank, uint32_t tile, uint32_t lane, uint32_t index, PlanGroup& group, int64_t& staging_used) const {
    const Op& op = s_.ranks[static_cast<size_t>(rank)].lanes[lane].ops[index];
    const uint32_t g = ids_.id(rank, lane, index);
    const int64_t op_index = static_cast<int64_t>(tile) * ops_per_tile_[static_cast<size_t>(rank)] +
                             lane_offset_[static_cast<size_t>(rank)][lane] + index;
    const Transfer base{.peer = op.peer, .tile = tile, .lane = lane, .op = index, .op_index = op_index};
    switch (op.kind) {
      case OpKind::kSend:
        for (const MessageRun& run : message_runs(g, analysis_.partner[g], tile)) {
          Transfer send = base;
          send.kind = TransferKind::kSend;
          send.range = run.send;
          group.transfers.push_back(send);
        }
        return;
      case OpKind::kRecv:
      case OpKind::kRecvReduce: {
        const bool staged = is_staged(g);
        const bool reduces = op.kind == OpKind::kRecvReduce;
        const int64_t staging_base = staging_used;
        LocalStep after{
            .kind = reduces ? LocalKind::kReduce : LocalKind::kCopy, .segments = {}, .lane = lane, .op = index};
        for (const MessageRun& run : message_runs(analysis_.partner[g], g, tile)) {
          Transfer recv = base;
          recv.kind = TransferKind::kRecv;
          recv.range = run.received;
          if (staged) {
            recv.range.offset += staging_base;
            staging_used = std::max(staging_used, recv.range.end());
            // RecvReduce: dst = src (+) received; Recv: dst = received; chunk by chunk over the run.
            int64_t offset = recv.range.offset;
            for (uint32_t c = run.first; c < run.last; ++c) {
              const PlanRange dst = segment(op.dst.buffer, op.dst.first + c, tile);
              const PlanRange staged_chunk{PlanBuffer::kStaging, offset, dst.count};
              if (reduces) {
                add_segment(after, {segment(op.src.buffer, op.src.first + c, tile), staged_chunk, dst});
              } else {
                add_segment(after, {staged_chunk, {}, dst});
              }
              offset += dst.count;
            }
          }
          group.transfers.push_back(recv);
        }
        if (!after.segments.empty()) group.local.push_back(std::move(after));
        return;
      }
      case OpKind::kCopy:
      case OpKind::kReduce: {
        const bool copies = op.kind == OpKind::kCopy;
        LocalStep step{
            .kind = copies ? LocalKind::kCopy : LocalKind::kReduce, .segments = {}, .lane = lane, .op = index};
        for (uint32_t c = 0; c < op.src.count; ++c) {
          const PlanRange src = segment(op.src.buffer, op.src.first + c, tile);
          const PlanRange dst = segment(op.dst.buffer, op.dst.first + c, tile);
          // Copy: dst = src. Reduce: dst = dst (+) src (operand order as the host's reduce_elements).
          add_segment(step, copies ? LocalSegment{src, {}, dst} : LocalSegment{dst, src, dst});
        }
        if (!step.segments.empty()) group.local.push_back(std::move(step));
        return;
      }
    }
  }

  const Schedule& s_;
  const CollectiveSpec& spec_;
  const ChunkMap map_;
  const int64_t slot_elements_;
  const Analysis analysis_;
  const OpIds ids_;
  std::vector<int64_t> ops_per_tile_;              // per rank
  std::vector<std::vector<int64_t>> lane_offset_;  // per rank, per lane
};

}  // namespace

std::string_view name(PlanBuffer buffer) {
  switch (buffer) {
    case PlanBuffer::kInput:
      return "input";
    case PlanBuffer::kOutput:
      return "output";
    case PlanBuffer::kScratch:
      return "scratch";
    case PlanBuffer::kStaging:
      return "staging";
  }
  return "?";
}

NcclPlan build_nccl_plan(const Schedule& schedule, const CollectiveSpec& spec, const PlanOptions& options,
                         std::span<const int> ranks) {
  if (spec.collective != schedule.collective || spec.nranks != schedule.nranks) {
    fail(ErrorCode::kInvalidArgument, "nccl plan: the spec ({}, {} ranks) does not match the schedule ({}, {} ranks)",
         name(spec.collective), spec.nranks, name(schedule.collective), schedule.nranks);
  }
  if (spec.count < 0) fail(ErrorCode::kInvalidArgument, "nccl plan: count {} is negative", spec.count);
  if (options.tiles < 1)
    fail(ErrorCode::kInvalidArgument, "nccl plan: tiles must be at least 1, got {}", options.tiles);
  if (options.align_elements < 1) {
    fail(ErrorCode::kInvalidArgument, "nccl plan: align_elements must be at least 1, got {}", options.align_elements);
  }
  Schedule expanded;
  const Schedule* explicit_schedule = &schedule;
  if (schedule.symmetric()) {
    expanded = expand(schedule);
    explicit_schedule = &expanded;
  }
  const Schedule& s = *explicit_schedule;
  if (s.nranks < 1 || s.ranks.size() != static_cast<size_t>(s.nranks)) {
    fail(ErrorCode::kInvalidSchedule, "nccl plan: schedule of {} ranks has {} programs", s.nranks, s.ranks.size());
  }
  if (s.chunks_per_block == 0) fail(ErrorCode::kInvalidSchedule, "nccl plan: chunks_per_block is 0");
  check_bounds(s);

  const Lowering lowering(s, spec, options);
  NcclPlan plan;
  plan.nranks = s.nranks;
  plan.tiles = options.tiles;
  plan.levels = lowering.levels();
  plan.lifted_sends = lowering.lifted_sends();
  std::vector<int> wanted(ranks.begin(), ranks.end());
  if (wanted.empty()) {
    for (int r = 0; r < s.nranks; ++r) wanted.push_back(r);
  }
  for (int rank : wanted) {
    if (rank < 0 || rank >= s.nranks) fail(ErrorCode::kInvalidArgument, "nccl plan: rank {} out of range", rank);
    plan.ranks.push_back(lowering.rank_plan(rank));
  }
  return plan;
}

std::string describe(const Transfer& transfer, int rank) {
  const bool send = transfer.kind == TransferKind::kSend;
  return fmt::format("rank {} tile {} lane {} op {}: {} {} elements of {}[{}, {}) {} {}", rank, transfer.tile,
                     transfer.lane, transfer.op, send ? "send" : "recv", transfer.range.count,
                     name(transfer.range.buffer), transfer.range.offset, transfer.range.end(), send ? "to" : "from",
                     transfer.peer);
}

}  // namespace tandem::nccl
