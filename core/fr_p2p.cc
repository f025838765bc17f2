// Point-to-point matching (see check_p2p in fr_analysis_internal.h).
//
// NCCL runs the operations between two ranks in the order each side issued them, so the k-th send
// from rank s to rank d meets the k-th receive on d from s. Where a dump holds the rank's whole
// history, every operation is aligned that way; where it holds part of it (a wrapped ring, or
// PyTorch's dumps of the operations that had not completed), the operations still pending on each
// side are aligned, oldest first: whatever completed, completed on both sides.
//
//   rank 0 (send 0->3, send 0->3 pending)          rank 12 (recv 3<-0 pending)
//        send #1 ------------------------------------> recv #1      matched, both stuck
//        send #2 ------------------------------------> (nothing)    rank 0 waits on rank 12
#include <charconv>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/fr_analysis_internal.h"

namespace tandem::fr_detail {
namespace {

struct P2pOp {
  const FrEntry* entry = nullptr;
  bool send = false;
  int src = 0;  // global ranks
  int dst = 0;
};

// A group-local rank as p2p names spell it; -1 when it is not a plain number.
int local_rank(std::string_view text) {
  int value = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() ? value : -1;
}

// "nccl:send 0->1" / "nccl:recv 1<-0", group-local ranks, mapped through the sorted membership.
std::optional<P2pOp> parse_p2p(const FrEntry& entry, const Group& group, int rank) {
  const std::string_view type = fr_op_type(entry.profiling_name);
  if (type != "send" && type != "recv") return std::nullopt;
  const std::string_view name = entry.profiling_name;
  const size_t space = name.find(' ');
  const size_t at = space == std::string_view::npos ? space : name.find(type == "send" ? "->" : "<-", space);
  int first = -1, second = -1;
  if (at != std::string_view::npos) {
    first = local_rank(name.substr(space + 1, at - space - 1));
    second = local_rank(name.substr(at + 2));
  }
  const int size = static_cast<int>(group.key.ranks.size());
  if (first < 0 || second < 0 || first >= size || second >= size) {
    fail(ErrorCode::kFormat, "rank {}: entry {} '{}' does not name two local ranks of {} ({} ranks)", rank,
         entry.record_id, entry.profiling_name, group.label, size);
  }
  P2pOp op{&entry, type == "send", 0, 0};
  // send "src->dst", recv "dst<-src"
  op.src = group.key.ranks[static_cast<size_t>(type == "send" ? first : second)];
  op.dst = group.key.ranks[static_cast<size_t>(type == "send" ? second : first)];
  return op;
}

int peer_of(const P2pOp& op) { return op.send ? op.dst : op.src; }

std::string names_toward(const std::vector<P2pOp>& ops, int peer) {
  std::vector<std::string> names;
  for (const P2pOp& op : ops) {
    if (peer_of(op) == peer) names.push_back(op.entry->profiling_name);
  }
  return names.empty() ? "nothing" : fmt::format("{}", fmt::join(names, ", "));
}

struct Divergence {
  FrFinding finding;
  int64_t time_ns = 0;
};

// The ops of `rank` toward `peer` in one direction, in the order issued: all of them when both
// sides hold their whole history, else those not completed.
std::vector<const P2pOp*> direction(const std::vector<P2pOp>& ops, int src, int dst, bool send, bool whole) {
  std::vector<const P2pOp*> out;
  for (const P2pOp& op : ops) {
    if (op.send != send || op.src != src || op.dst != dst) continue;
    if (whole || op.entry->state != FrState::kCompleted) out.push_back(&op);
  }
  return out;
}

// One direction src -> dst: sizes and dtypes of the aligned pairs, then the operations one side
// issued and the other has not. Returns the matched pairs' count.
int64_t check_direction(const Group& group, int src, int dst, const std::map<int, std::vector<P2pOp>>& ops,
                        std::vector<Divergence>& divergences, std::vector<WaitEdge>& waits) {
  const Member& sender = *group.member(src);
  const Member& receiver = *group.member(dst);
  const bool whole = !sender.partial_history && !receiver.partial_history;
  static const std::vector<P2pOp> kNone;
  const auto ops_of = [&](int rank) -> const std::vector<P2pOp>& {
    auto it = ops.find(rank);
    return it == ops.end() ? kNone : it->second;
  };
  const std::vector<const P2pOp*> sends = direction(ops_of(src), src, dst, true, whole);
  const std::vector<const P2pOp*> recvs = direction(ops_of(dst), src, dst, false, whole);
  // A pair has no majority: by the tie rule the lower rank's record stands and the higher rank is
  // the culprit.
  const int low = std::min(src, dst), high = std::max(src, dst);
  const size_t pairs = std::min(sends.size(), recvs.size());
  for (size_t i = 0; i < pairs; ++i) {
    const FrEntry& send = *sends[i]->entry;
    const FrEntry& recv = *recvs[i]->entry;
    const Place place{&group, send.p2p_seq_id, true};
    const FrEntry& low_entry = low == src ? send : recv;
    const FrEntry& high_entry = low == src ? recv : send;
    const auto& low_sizes = low == src ? send.input_sizes : recv.output_sizes;
    const auto& high_sizes = low == src ? recv.output_sizes : send.input_sizes;
    const int64_t time_ns = std::min(send.time_created_ns, recv.time_created_ns);
    if (low_sizes != high_sizes) {
      divergences.push_back(
          {make_finding(FrFindingKind::kSizeMismatch, place, low_entry.profiling_name, {high},
                        fmt::format("rank {}'s {} has size {} where rank {}'s {} has {} at {} of {}", high,
                                    high_entry.profiling_name, sizes_text(high_sizes), low, low_entry.profiling_name,
                                    sizes_text(low_sizes), place.sequence(), group.label)),
           time_ns});
      return static_cast<int64_t>(i);
    }
    const std::string low_dtype = dtype_text(low_entry), high_dtype = dtype_text(high_entry);
    if (low_dtype != high_dtype) {
      divergences.push_back(
          {make_finding(FrFindingKind::kDtypeMismatch, place, low_entry.profiling_name, {high},
                        fmt::format("rank {}'s {} has dtype {} where rank {}'s {} has {} at {} of {}", high,
                                    high_entry.profiling_name, high_dtype, low, low_entry.profiling_name, low_dtype,
                                    place.sequence(), group.label)),
           time_ns});
      return static_cast<int64_t>(i);
    }
  }
  if (sends.size() == recvs.size()) return static_cast<int64_t>(pairs);
  // One side issued an operation the other has not: if it is still pending, its rank waits for the
  // peer; if it completed without a counterpart, the two issued different operations.
  const bool extra_send = sends.size() > recvs.size();
  const P2pOp& extra = extra_send ? *sends[pairs] : *recvs[pairs];
  const int waiter = extra_send ? src : dst;
  const int peer = extra_send ? dst : src;
  const Place place{&group, extra.entry->p2p_seq_id, true};
  if (extra.entry->state != FrState::kCompleted) {
    const Member& member = *group.member(waiter);
    const Unit* unit = member.p2p.find(extra.entry->p2p_seq_id);
    divergences.push_back({missing_finding(place, {Holder{waiter, unit}}, {peer}, extra.entry->profiling_name),
                           extra.entry->time_created_ns});
    waits.push_back({waiter, peer, fmt::format("{} {} of {}", extra.entry->profiling_name, place.sequence(), group.label)});
  } else {
    const std::vector<P2pOp>& low_ops = ops_of(low);
    const std::vector<P2pOp>& high_ops = ops_of(high);
    const std::string detail = fmt::format("rank {} issued {} where rank {} issued {} at {} of {}", high,
                                           names_toward(high_ops, low), low, names_toward(low_ops, high),
                                           place.sequence(), group.label);
    divergences.push_back({make_finding(FrFindingKind::kTypeMismatch, place, names_toward(low_ops, high), {high},
                                        detail),
                           extra.entry->time_created_ns});
  }
  return static_cast<int64_t>(pairs);
}

}  // namespace

StreamResult check_p2p(const Group& group) {
  StreamResult result;
  std::map<int, std::vector<P2pOp>> ops;  // per member with p2p entries, in the order issued
  std::set<std::pair<int, int>> directions;
  for (const Member& member : group.members) {
    std::vector<const FrEntry*> entries = member.p2p.entries;
    std::sort(entries.begin(), entries.end(),
              [](const FrEntry* a, const FrEntry* b) { return a->record_id < b->record_id; });
    for (const FrEntry* entry : entries) {
      if (auto op = parse_p2p(*entry, group, member.rank)) {
        ops[member.rank].push_back(*op);
        directions.emplace(op->src, op->dst);
      }
    }
  }
  std::vector<Divergence> divergences;
  for (const auto& [src, dst] : directions) {
    // A member without a dump: nothing to match against (the missing-dumps finding says so).
    if (!group.member(src) || !group.member(dst)) continue;
    result.matched += check_direction(group, src, dst, ops, divergences, result.waits);
  }
  // The group's first divergence in time; every wait is kept.
  auto first = std::min_element(divergences.begin(), divergences.end(),
                                [](const Divergence& a, const Divergence& b) { return a.time_ns < b.time_ns; });
  if (first != divergences.end()) {
    result.finding = first->finding;
    result.finding_time_ns = first->time_ns;
  }
  return result;
}

}  // namespace tandem::fr_detail
