#include "core/validate.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/schedule_internal.h"

namespace tandem {
namespace {

using detail::op_location;

using detail::OpLoc;

[[noreturn]] void reject(const Schedule& s, const OpLoc& at, const std::string& what) {
  const Op& op = s.ranks[static_cast<size_t>(at.rank)].lanes[at.lane].ops[at.index];
  fail(ErrorCode::kInvalidSchedule, "{}: {}", op_location(at.rank, at.lane, at.index, op), what);
}

void check_bounds(const Schedule& s) {
  const uint32_t k = s.chunks_per_block;
  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) {
    const RankProgram& rank = s.ranks[static_cast<size_t>(r)];
    for (uint32_t l = 0; l < rank.lanes.size(); ++l) {
      const Lane& lane = rank.lanes[l];
      if (lane.dep_begin.size() != lane.ops.size() + 1 || lane.dep_begin.back() != lane.deps.size()) {
        fail(ErrorCode::kInvalidSchedule, "rank {} lane {}: dependency table does not cover its {} ops", r, l,
             lane.ops.size());
      }
      for (uint32_t i = 0; i < lane.ops.size(); ++i) {
        const Op& op = lane.ops[i];
        const OpLoc at{r, l, i};
        const bool comm = op.kind == OpKind::kSend || op.is_recv();
        if (comm && (op.peer < 0 || op.peer >= s.nranks)) {
          reject(s, at, fmt::format("field peer: {} out of range [0, {})", op.peer, s.nranks));
        }
        if (comm && op.peer == r) reject(s, at, "field peer: a rank cannot send to itself");
        if (!comm && op.peer != -1) reject(s, at, fmt::format("field peer: local op has peer {}", op.peer));
        auto check_range = [&](const SlotRange& range, const char* field) {
          const uint32_t limit = s.chunk_count(r, range.buffer);
          if (range.count == 0) reject(s, at, fmt::format("field {}: empty chunk range", field));
          if (range.first >= limit || range.count > limit - range.first) {
            reject(s, at,
                   fmt::format("field {}: {}[{}..{}) out of bounds ({} has {} chunks)", field, name(range.buffer),
                               range.first, uint64_t{range.first} + range.count, name(range.buffer), limit));
          }
        };
        if (s.symmetric()) {
          for (const SlotRange* range : {&op.src, &op.dst}) {
            if (range->count > 1) reject(s, at, "symmetric schedules move single chunks: range of several chunks");
          }
        }
        if (op.reads_src()) check_range(op.src, "src");
        if (op.writes_dst()) {
          check_range(op.dst, "dst");
          if (op.dst.buffer == BufferKind::kInput) reject(s, at, "field dst: the Input buffer is read-only");
        }
        const bool two_ranges = op.kind == OpKind::kRecvReduce || op.kind == OpKind::kCopy ||
                                op.kind == OpKind::kReduce;
        if (two_ranges && (op.src.count != op.dst.count || op.src.first % k != op.dst.first % k)) {
          reject(s, at,
                 fmt::format("fields src/dst: {}[{}] x{} and {}[{}] x{} differ in size", name(op.src.buffer),
                             op.src.first, op.src.count, name(op.dst.buffer), op.dst.first, op.dst.count));
        }
        for (size_t d = lane.dep_begin[i]; d < lane.dep_begin[i + 1]; ++d) {
          const OpRef dep = lane.deps[d];
          if (dep.lane >= rank.lanes.size() || dep.index >= rank.lanes[dep.lane].ops.size()) {
            reject(s, at, fmt::format("field deps: lane {} op {} does not exist", dep.lane, dep.index));
          }
          if (dep.lane == l && dep.index >= i) {
            reject(s, at, fmt::format("field deps: depends on op {} of its own lane, which it precedes", dep.index));
          }
        }
      }
    }
  }
}

constexpr uint32_t kNone = detail::Dag::kNone;

// Matches sends to receives per (src, dst, lane) in FIFO order. Returns, per op gid, the gid of
// the matching send for receives (kNone otherwise).
std::vector<uint32_t> match_pairs(const Schedule& s, const detail::OpIndex& index) {
  struct Queues {
    std::vector<OpLoc> sends, recvs;
  };
  auto key = [&](int from, int to, uint32_t lane) {
    return (static_cast<uint64_t>(from) * static_cast<uint64_t>(s.nranks) + static_cast<uint64_t>(to)) * 65536u + lane;
  };
  std::map<uint64_t, Queues> pairs;  // ordered: the first error reported is deterministic
  // A symmetric template's sends with offset d meet its receives with offset n - d (the same
  // template op, run by the position d ahead).
  const bool symmetric = s.symmetric();
  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) {
    const RankProgram& rank = s.ranks[static_cast<size_t>(r)];
    for (uint32_t l = 0; l < rank.lanes.size(); ++l) {
      const auto& ops = rank.lanes[l].ops;
      for (uint32_t i = 0; i < ops.size(); ++i) {
        if (ops[i].kind == OpKind::kSend) {
          pairs[symmetric ? key(0, ops[i].peer, l) : key(r, ops[i].peer, l)].sends.push_back({r, l, i});
        }
        if (ops[i].is_recv()) {
          pairs[symmetric ? key(0, (s.nranks - ops[i].peer) % s.nranks, l) : key(ops[i].peer, r, l)].recvs.push_back(
              {r, l, i});
        }
      }
    }
  }
  const uint32_t k = s.chunks_per_block;
  // Same size at every position: the sub-chunk of the sent chunk at the sender's position equals
  // that of the receiving slot at the receiver's (see Symmetry::rotate; G divides k).
  auto same_size = [&](const Op& send_op, const Op& recv_op) {
    if (send_op.src.count != recv_op.dst.count) return false;
    if (!symmetric) return send_op.src.first % k == recv_op.dst.first % k;
    const uint32_t g = s.symmetry.rotation_group;
    const uint32_t sent = send_op.src.first;
    const uint32_t received = recv_op.dst.first;
    const uint32_t sender_offset = static_cast<uint32_t>(recv_op.peer);
    return (sent / g * g) % k == (received / g * g) % k && (sent % g + sender_offset) % g == received % g;
  };
  std::vector<uint32_t> matched_send(index.total, kNone);
  for (const auto& [unused, q] : pairs) {
    const size_t common = std::min(q.sends.size(), q.recvs.size());
    for (size_t m = 0; m < common; ++m) {
      const OpLoc& snd = q.sends[m];
      const OpLoc& rcv = q.recvs[m];
      const Op& send_op = s.ranks[static_cast<size_t>(snd.rank)].lanes[snd.lane].ops[snd.index];
      const Op& recv_op = s.ranks[static_cast<size_t>(rcv.rank)].lanes[rcv.lane].ops[rcv.index];
      if (!same_size(send_op, recv_op)) {
        reject(s, rcv,
               fmt::format("per-pair FIFO order violated: message {} from rank {} on lane {} is {} x{} (sub-chunk {}) "
                           "but this receive expects {} x{} (sub-chunk {})",
                           m, snd.rank, snd.lane, detail::slot_name(send_op.src.buffer, send_op.src.first),
                           send_op.src.count, send_op.src.first % k,
                           detail::slot_name(recv_op.dst.buffer, recv_op.dst.first), recv_op.dst.count,
                           recv_op.dst.first % k));
      }
      matched_send[index.gid(static_cast<size_t>(rcv.rank), rcv.lane, rcv.index)] =
          index.gid(static_cast<size_t>(snd.rank), snd.lane, snd.index);
    }
    if (q.sends.size() > common) {
      reject(s, q.sends[common], fmt::format("unmatched send: rank {} posts only {} matching receives on lane {}",
                                             s.ranks[static_cast<size_t>(q.sends[common].rank)]
                                                 .lanes[q.sends[common].lane]
                                                 .ops[q.sends[common].index]
                                                 .peer,
                                             common, q.sends[common].lane));
    }
    if (q.recvs.size() > common) {
      const OpLoc& rcv = q.recvs[common];
      reject(s, rcv,
             fmt::format("unmatched receive: rank {} sends only {} messages on lane {}",
                         s.ranks[static_cast<size_t>(rcv.rank)].lanes[rcv.lane].ops[rcv.index].peer, common, rcv.lane));
    }
  }
  return matched_send;
}

// Builds the DAG; also computes each op's round (by gid) into `rounds`.
detail::Dag build_dag_with_rounds(const Schedule& s, std::vector<uint32_t>& rounds) {
  detail::Dag dag(s);
  const detail::OpIndex& index = dag.index;
  dag.matched_send = match_pairs(s, index);
  const std::vector<uint32_t>& matched_send = dag.matched_send;

  // Kahn's algorithm over issue order + deps + send->recv. Rounds follow data dependencies only
  // (deps + 1, and a receive shares its send's round), so a ring step is one round on every rank.
  std::vector<OpLoc>& loc = dag.loc;
  loc.resize(index.total);
  std::vector<uint32_t> indegree(index.total, 0);
  std::vector<uint32_t> dependents_begin(index.total + 1, 0);
  std::vector<uint32_t> matched_recv(index.total, kNone);
  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) {
    const RankProgram& rank = s.ranks[static_cast<size_t>(r)];
    for (uint32_t l = 0; l < rank.lanes.size(); ++l) {
      const Lane& lane = rank.lanes[l];
      for (uint32_t i = 0; i < lane.ops.size(); ++i) {
        const uint32_t g = index.gid(static_cast<size_t>(r), l, i);
        loc[g] = {r, l, i};
        indegree[g] += (i > 0) + static_cast<uint32_t>(lane.dep_count(i)) + (matched_send[g] != kNone);
        if (matched_send[g] != kNone) matched_recv[matched_send[g]] = g;
        for (size_t d = lane.dep_begin[i]; d < lane.dep_begin[i + 1]; ++d) {
          ++dependents_begin[index.gid(static_cast<size_t>(r), lane.deps[d].lane, lane.deps[d].index) + 1];
        }
      }
    }
  }
  for (uint32_t g = 0; g < index.total; ++g) dependents_begin[g + 1] += dependents_begin[g];
  std::vector<uint32_t> dependents(dependents_begin.back());
  {
    std::vector<uint32_t> fill(dependents_begin.begin(), dependents_begin.end() - 1);
    for (uint32_t g = 0; g < index.total; ++g) {
      const Lane& lane = s.ranks[static_cast<size_t>(loc[g].rank)].lanes[loc[g].lane];
      for (size_t d = lane.dep_begin[loc[g].index]; d < lane.dep_begin[loc[g].index + 1]; ++d) {
        dependents[fill[index.gid(static_cast<size_t>(loc[g].rank), lane.deps[d].lane, lane.deps[d].index)]++] = g;
      }
    }
  }

  std::vector<uint32_t>& round = rounds;
  round.assign(index.total, 0);
  dag.order.reserve(index.total);
  std::vector<uint32_t> ready;
  for (uint32_t g = 0; g < index.total; ++g) {
    if (indegree[g] == 0) ready.push_back(g);
  }
  uint32_t processed = 0;
  auto release = [&](uint32_t g) {
    if (--indegree[g] == 0) ready.push_back(g);
  };
  while (!ready.empty()) {
    const uint32_t g = ready.back();
    ready.pop_back();
    ++processed;
    dag.order.push_back(g);
    const OpLoc& at = loc[g];
    const Lane& lane = s.ranks[static_cast<size_t>(at.rank)].lanes[at.lane];
    uint32_t r = matched_send[g] != kNone ? round[matched_send[g]] : 0;
    for (size_t d = lane.dep_begin[at.index]; d < lane.dep_begin[at.index + 1]; ++d) {
      r = std::max(r, round[index.gid(static_cast<size_t>(at.rank), lane.deps[d].lane, lane.deps[d].index)] + 1);
    }
    round[g] = r;
    if (at.index + 1 < lane.ops.size()) release(g + 1);
    if (matched_recv[g] != kNone) release(matched_recv[g]);
    for (uint32_t d = dependents_begin[g]; d < dependents_begin[g + 1]; ++d) release(dependents[d]);
  }
  if (processed != index.total) {
    // Report the first op (in rank, lane order) that can never start.
    for (uint32_t g = 0; g < index.total; ++g) {
      if (indegree[g] > 0) {
        reject(s, loc[g], "can never start: the dependency graph has a cycle (the schedule deadlocks)");
      }
    }
  }

  return dag;
}

}  // namespace

Dag build_dag(const Schedule& s) {
  std::vector<uint32_t> rounds;
  return build_dag_with_rounds(s, rounds);
}

namespace {

// Races: two ops of one rank in one round touching one storage slot, one of them writing it.
void check_races(const Schedule& s, const detail::OpIndex& index, const std::vector<OpLoc>& loc) {
  struct Touch {
    uint32_t slot;
    uint32_t round;
    uint32_t gid;
    bool write;
  };
  const bool in_place = s.geometry().in_place_supported;
  std::vector<Touch> touches;
  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) {
    const RankProgram& rank = s.ranks[static_cast<size_t>(r)];
    const detail::SlotStorage storage(s, r, in_place);
    touches.clear();
    for (uint32_t l = 0; l < rank.lanes.size(); ++l) {
      const Lane& lane = rank.lanes[l];
      for (uint32_t i = 0; i < lane.ops.size(); ++i) {
        const Op& op = lane.ops[i];
        const uint32_t g = index.gid(static_cast<size_t>(r), l, i);
        auto add = [&](const SlotRange& range, bool write) {
          for (uint32_t c = range.first; c < range.first + range.count; ++c) {
            touches.push_back({storage.id(range.buffer, c), lane.rounds[i], g, write});
          }
        };
        if (op.reads_src()) add(op.src, false);
        if (op.writes_dst()) add(op.dst, true);
      }
    }
    std::sort(touches.begin(), touches.end(), [](const Touch& a, const Touch& b) {
      return a.slot != b.slot ? a.slot < b.slot : a.round != b.round ? a.round < b.round : a.gid < b.gid;
    });
    for (size_t a = 0; a < touches.size();) {
      size_t b = a;
      bool any_write = false;
      bool several_ops = false;
      while (b < touches.size() && touches[b].slot == touches[a].slot && touches[b].round == touches[a].round) {
        any_write |= touches[b].write;
        several_ops |= touches[b].gid != touches[a].gid;
        ++b;
      }
      if (any_write && several_ops) {
        uint32_t other = touches[a].gid;
        for (size_t t = a; t < b; ++t) {
          if (touches[t].gid != touches[a].gid) other = touches[t].gid;
        }
        const OpLoc& o = loc[other];
        reject(s, loc[touches[a].gid],
               fmt::format("race in round {}: it and {} touch the same slot and one writes it (missing dependency)",
                           touches[a].round,
                           op_location(o.rank, o.lane, o.index,
                                       s.ranks[static_cast<size_t>(o.rank)].lanes[o.lane].ops[o.index])));
      }
      a = b;
    }
  }
}

}  // namespace

void validate(Schedule& s) {
  if (s.nranks < 1) fail(ErrorCode::kInvalidSchedule, "schedule has {} ranks", s.nranks);
  if (s.symmetric()) {
    detail::check_symmetry(s);
  } else if (s.ranks.size() != static_cast<size_t>(s.nranks)) {
    fail(ErrorCode::kInvalidSchedule, "schedule declares {} ranks but has programs for {}", s.nranks, s.ranks.size());
  }
  if (s.chunks_per_block == 0) fail(ErrorCode::kInvalidSchedule, "chunks_per_block is 0");
  if (s.root < 0 || s.root >= s.nranks) fail(ErrorCode::kInvalidSchedule, "root {} out of range", s.root);
  check_bounds(s);

  std::vector<uint32_t> round;
  const detail::Dag dag = build_dag_with_rounds(s, round);
  const detail::OpIndex& index = dag.index;
  const std::vector<OpLoc>& loc = dag.loc;
  uint32_t num_rounds = 0;
  for (uint32_t r : round) num_rounds = std::max(num_rounds, r + 1);

  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) {
    RankProgram& rank = s.ranks[static_cast<size_t>(r)];
    for (uint32_t l = 0; l < rank.lanes.size(); ++l) {
      Lane& lane = rank.lanes[l];
      lane.rounds.resize(lane.ops.size());
      for (uint32_t i = 0; i < lane.ops.size(); ++i) lane.rounds[i] = round[index.gid(static_cast<size_t>(r), l, i)];
    }
  }
  s.num_rounds = num_rounds;
  check_races(s, index, loc);
}

}  // namespace tandem
