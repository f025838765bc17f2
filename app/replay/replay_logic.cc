// The logical replay: which ops run and in what order (an op runs once every member has reached it,
// all with the same op, and the dumps say it completed), and where the ranks stop agreeing: the
// ops some ranks wait in, who never came, and the ranks the waits lead to.
#include <algorithm>
#include <deque>
#include <set>

#include "app/replay/replay_internal.h"

namespace tandem::app::replay_detail {
namespace {

// Whether the rank of dump `d` must take part in `op`: a member whose retained records start after
// it (the ring buffer dropped them) has been through it.
bool required(const Built& built, size_t d, size_t op_index) {
  const ReplayOp& op = built.ops[op_index];
  if (op.p2p) return true;  // the pair's k-th op: matched exactly (OpKey)
  const auto& oldest = built.oldest[d];
  auto it = oldest.find(std::make_pair(built.group_of[op_index], op.p2p));
  if (it != oldest.end()) return op.sequence >= it->second;
  return !built.truncated[d];  // no records of the group: missing, unless the buffer wrapped
}

// The culprits of a blocked op: follow each missing rank to where it waits, until a rank that
// has nothing more recorded (it never came) or a cycle.
std::vector<int> culprits_of(const Built& built, const Replayed& logic, const Blocked& blocked, size_t op) {
  std::set<int> culprits;
  std::set<size_t> visited;
  std::deque<size_t> todo{op};
  while (!todo.empty()) {
    const size_t o = todo.front();
    todo.pop_front();
    if (!visited.insert(o).second) continue;
    std::set<size_t> here(logic.arrived[o].begin(), logic.arrived[o].end());
    for (int r : built.ops[o].ranks) {
      auto it = built.dump_of.find(r);
      if (it == built.dump_of.end()) {  // no dump: the rank crashed (or was killed) before it could write one
        culprits.insert(r);
        continue;
      }
      const size_t d = it->second;
      if (here.count(d) > 0 || !required(built, d, o)) continue;
      auto waits = blocked.op_of.find(d);
      if (waits == blocked.op_of.end()) {
        culprits.insert(r);
      } else {
        todo.push_back(waits->second);
      }
    }
  }
  return std::vector<int>(culprits.begin(), culprits.end());
}

}  // namespace

Replayed replay_logic(const Built& built, const Signatures& signatures, PhaseProgress& progress) {
  Replayed out;
  const size_t dumps = built.per_rank.size();
  out.arrived.resize(built.ops.size());
  out.position.assign(dumps, 0);
  // Participants with a dump, per op, that must arrive for it to start.
  std::vector<std::vector<size_t>> needed(built.ops.size());
  for (size_t i = 0; i < built.ops.size(); ++i) {
    for (int r : built.ops[i].ranks) {
      auto it = built.dump_of.find(r);
      if (it != built.dump_of.end() && required(built, it->second, i)) needed[i].push_back(it->second);
    }
  }
  std::deque<size_t> ready;
  auto arrive = [&](size_t d) {
    if (out.position[d] >= built.per_rank[d].size()) return;
    const size_t op = built.per_rank[d][out.position[d]].op;
    out.arrived[op].push_back(d);
    if (out.arrived[op].size() == needed[op].size()) ready.push_back(op);
  };
  for (size_t d = 0; d < dumps; ++d) arrive(d);
  while (!ready.empty()) {
    const size_t op = ready.front();
    ready.pop_front();
    // Every member is here; with different ops (a desync) it cannot run.
    const bool desync = ops_differ(signatures, out.arrived[op], out.position);
    const bool all_recorded_complete = std::all_of(out.arrived[op].begin(), out.arrived[op].end(), [&](size_t d) {
      return built.per_rank[d][out.position[d]].entries.back()->state == FrState::kCompleted;
    });
    if (desync || !all_recorded_complete) continue;  // stays where it is: desync or stalled
    out.order.push_back(op);
    progress.step(out.order.size());
    for (size_t d : out.arrived[op]) {
      ++out.position[d];
      arrive(d);
    }
  }
  return out;
}

// Whether the dumps `dumps` hold different ops (signatures) at their positions `next`: a desync.
bool ops_differ(const Signatures& signatures, const std::vector<size_t>& dumps, const std::vector<size_t>& next) {
  std::set<uint32_t> seen;
  for (size_t d : dumps) seen.insert(signatures[d][next[d]]);
  return seen.size() > 1;
}

// Finds the op each unfinished dump waits in.
Blocked find_blocked(const Built& built, const Replayed& logic) {
  Blocked blocked;
  for (size_t d = 0; d < built.per_rank.size(); ++d) {
    if (logic.position[d] < built.per_rank[d].size()) {
      const size_t op = built.per_rank[d][logic.position[d]].op;
      blocked.op_of[d] = op;
      if (std::find(blocked.ops.begin(), blocked.ops.end(), op) == blocked.ops.end()) blocked.ops.push_back(op);
    }
  }
  return blocked;
}

// Describes each blocked op (BlockedInfo) and records its waiting and missing ranks on the op.
std::vector<BlockedInfo> describe_blocked(Built& built, const Replayed& logic, const Blocked& blocked) {
  std::vector<BlockedInfo> infos;
  for (size_t op : blocked.ops) {
    BlockedInfo info{op, {}, {}, {}, {}};
    std::set<size_t> here(logic.arrived[op].begin(), logic.arrived[op].end());
    for (size_t d : logic.arrived[op]) info.waiting.push_back(built.rank_of[d]);
    std::sort(info.waiting.begin(), info.waiting.end());
    ReplayOp& o = built.ops[op];
    for (int r : o.ranks) {
      auto it = built.dump_of.find(r);
      if (it == built.dump_of.end() || (here.count(it->second) == 0 && required(built, it->second, op))) {
        info.missing.push_back(r);
      }
    }
    info.culprits = culprits_of(built, logic, blocked, op);
    o.waiting = info.waiting;
    o.missing = info.missing;
    for (int r : o.ranks) {
      if (!std::binary_search(info.culprits.begin(), info.culprits.end(), r) &&
          !std::binary_search(info.missing.begin(), info.missing.end(), r)) {
        info.survivors.push_back(r);
      }
    }
    infos.push_back(std::move(info));
  }
  return infos;
}

}  // namespace tandem::app::replay_detail
