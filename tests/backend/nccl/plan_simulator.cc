#include "tests/backend/nccl/plan_simulator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tandem::nccl::test {
namespace {

[[noreturn]] void fault(const std::string& message) { throw PlanFault(message); }

struct Message {
  std::vector<std::byte> data;
};

class Simulator {
 public:
  Simulator(const NcclPlan& plan, const CollectiveSpec& spec, std::span<const RankBuffers> buffers)
      : plan_(plan), spec_(spec), element_bytes_(static_cast<int64_t>(size_bytes(spec.dtype))) {
    if (plan.ranks.size() != static_cast<size_t>(plan.nranks) || buffers.size() != plan.ranks.size()) {
      fault(fmt::format("simulator: {} rank plans and {} buffers for {} ranks", plan.ranks.size(), buffers.size(),
                        plan.nranks));
    }
    const BufferGeometry geometry = buffer_geometry(spec.collective, spec.nranks);
    for (size_t r = 0; r < plan.ranks.size(); ++r) {
      if (plan.ranks[r].rank != static_cast<int>(r))
        fault(fmt::format("simulator: plan {} is rank {}", r, plan.ranks[r].rank));
      Rank rank;
      rank.input = static_cast<std::byte*>(buffers[r].input);
      rank.output = static_cast<std::byte*>(buffers[r].output);
      rank.input_elements = geometry.input_blocks * spec.count;
      rank.output_elements = geometry.output_blocks * spec.count;
      // Garbage, not zeros: a plan that reads scratch or staging before writing it shows up.
      rank.scratch.assign(static_cast<size_t>(plan.ranks[r].scratch_elements * element_bytes_), std::byte{0x5a});
      rank.staging.assign(static_cast<size_t>(plan.ranks[r].staging_elements * element_bytes_), std::byte{0x5a});
      ranks_.push_back(std::move(rank));
    }
  }

  SimulationStats run() {
    while (true) {
      bool progressed = false;
      bool all_done = true;
      for (int r = 0; r < plan_.nranks; ++r) {
        Rank& rank = ranks_[static_cast<size_t>(r)];
        const RankPlan& rank_plan = plan_.ranks[static_cast<size_t>(r)];
        if (rank.next >= rank_plan.groups.size()) continue;
        all_done = false;
        progressed |= try_meet(r);
        if (group_complete(r)) {
          complete_group(r);
          progressed = true;
        }
      }
      if (all_done) break;
      if (!progressed) fault(deadlock_report());
    }
    for (int r = 0; r < plan_.nranks; ++r) {
      const RankPlan& rank_plan = plan_.ranks[static_cast<size_t>(r)];
      if (rank_plan.finish) run_local(r, *rank_plan.finish);
    }
    return stats_;
  }

 private:
  struct Rank {
    std::byte* input = nullptr;
    std::byte* output = nullptr;
    int64_t input_elements = 0;
    int64_t output_elements = 0;
    std::vector<std::byte> scratch;
    std::vector<std::byte> staging;
    size_t next = 0;                    // the group posted now
    std::set<int> met;                  // peers whose part met ours in the current group
    std::map<size_t, Message> arrived;  // transfer index in the group -> data, landed at completion
  };

  const PlanGroup& current(int r) const {
    return plan_.ranks[static_cast<size_t>(r)].groups[ranks_[static_cast<size_t>(r)].next];
  }
  bool posted(int r) const {
    return ranks_[static_cast<size_t>(r)].next < plan_.ranks[static_cast<size_t>(r)].groups.size();
  }

  // Transfer indices of `r`'s current group with `peer`, of one kind, in posting order.
  std::vector<size_t> part(int r, int peer, TransferKind kind) const {
    std::vector<size_t> indices;
    const PlanGroup& group = current(r);
    for (size_t i = 0; i < group.transfers.size(); ++i) {
      if (group.transfers[i].peer == peer && group.transfers[i].kind == kind) indices.push_back(i);
    }
    return indices;
  }

  std::set<int> peers(int r) const {
    std::set<int> out;
    for (const Transfer& t : current(r).transfers) {
      if (t.peer < 0 || t.peer >= plan_.nranks) fault(describe(t, r) + ": peer out of range");
      out.insert(t.peer);
    }
    return out;
  }

  std::string where(int r) const {
    const PlanGroup& group = current(r);
    return fmt::format("rank {} group {} (tile {} level {})", r, ranks_[static_cast<size_t>(r)].next, group.tile,
                       group.level);
  }

  // Meets every part of r's current group whose peer is posting a group with a part for r.
  bool try_meet(int r) {
    bool progressed = false;
    for (int p : peers(r)) {
      if (ranks_[static_cast<size_t>(r)].met.count(p) != 0) continue;
      if (!posted(p)) {
        fault(fmt::format("{} has transfers with rank {}, which has finished all its groups", where(r), p));
      }
      // p has not reached a group with a part for r yet (or its current part for r met an earlier
      // group of r): wait.
      if (!peers(p).contains(r) || ranks_[static_cast<size_t>(p)].met.contains(r)) continue;
      meet(r, p);
      ranks_[static_cast<size_t>(r)].met.insert(p);
      if (p != r) ranks_[static_cast<size_t>(p)].met.insert(r);
      progressed = true;
    }
    return progressed;
  }

  // r's sends to p against p's receives from r, and the reverse, pair by pair.
  void meet(int r, int p) {
    match(r, p);
    if (p != r) match(p, r);
  }

  void match(int from, int to) {
    const PlanGroup& sending = current(from);
    const PlanGroup& receiving = current(to);
    if (sending.tile != receiving.tile || sending.level != receiving.level) {
      fault(fmt::format("group mismatch: {} meets {}, which is not its corresponding group", where(from), where(to)));
    }
    const std::vector<size_t> sends = part(from, to, TransferKind::kSend);
    const std::vector<size_t> recvs = part(to, from, TransferKind::kRecv);
    if (sends.size() != recvs.size()) {
      fault(fmt::format("group mismatch: {} posts {} sends to rank {}, whose {} posts {} receives from it", where(from),
                        sends.size(), to, where(to), recvs.size()));
    }
    for (size_t k = 0; k < sends.size(); ++k) {
      const Transfer& send = current(from).transfers[sends[k]];
      const Transfer& recv = current(to).transfers[recvs[k]];
      if (send.range.count != recv.range.count) {
        fault(fmt::format("message {} mismatch: [{}] meets [{}]", k, describe(send, from), describe(recv, to)));
      }
      Message message;
      const std::byte* source = address(from, send.range);
      message.data.assign(source, source + send.range.count * element_bytes_);
      ranks_[static_cast<size_t>(to)].arrived[recvs[k]] = std::move(message);
      ++stats_.messages;
    }
  }

  bool group_complete(int r) const {
    if (!posted(r)) return false;
    const std::set<int> wanted = peers(r);
    const std::set<int>& met = ranks_[static_cast<size_t>(r)].met;
    for (int p : wanted) {
      if (!met.contains(p)) return false;
    }
    return true;
  }

  void complete_group(int r) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    const PlanGroup& group = current(r);
    for (auto& [index, message] : rank.arrived) {
      const Transfer& recv = group.transfers[index];
      if (!message.data.empty()) std::memcpy(address(r, recv.range), message.data.data(), message.data.size());
    }
    for (const LocalStep& step : group.local) run_local(r, step);
    rank.arrived.clear();
    rank.met.clear();
    ++rank.next;
    ++stats_.groups_completed;
  }

  std::byte* address(int r, const PlanRange& range) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    std::byte* base = nullptr;
    int64_t limit = 0;
    switch (range.buffer) {
      case PlanBuffer::kInput:
        base = rank.input;
        limit = rank.input_elements;
        break;
      case PlanBuffer::kOutput:
        base = rank.output;
        limit = rank.output_elements;
        break;
      case PlanBuffer::kScratch:
        base = rank.scratch.data();
        limit = static_cast<int64_t>(rank.scratch.size()) / element_bytes_;
        break;
      case PlanBuffer::kStaging:
        base = rank.staging.data();
        limit = static_cast<int64_t>(rank.staging.size()) / element_bytes_;
        break;
    }
    if (range.offset < 0 || range.count < 0 || range.end() > limit) {
      fault(fmt::format("rank {}: {}[{}, {}) out of bounds ({} elements)", r, name(range.buffer), range.offset,
                        range.end(), limit));
    }
    if (range.count == 0) return base;
    if (base == nullptr) fault(fmt::format("rank {}: the {} buffer is null", r, name(range.buffer)));
    return base + range.offset * element_bytes_;
  }

  void run_local(int r, const LocalStep& step) {
    const size_t n = step.segments.size();
    if (step.kind == LocalKind::kCopy) {
      // As the host: back to front when moving data forward within aliased memory.
      const bool backward = n > 1 && address(r, step.segments[0].dst) > address(r, step.segments[0].a);
      for (size_t k = 0; k < n; ++k) {
        const LocalSegment& segment = step.segments[backward ? n - 1 - k : k];
        if (segment.a.count != segment.dst.count) fault(fmt::format("rank {}: copy of unequal ranges", r));
        std::byte* to = address(r, segment.dst);
        const std::byte* from = address(r, segment.a);
        if (to != from && segment.dst.count > 0) {
          std::memmove(to, from, static_cast<size_t>(segment.dst.count * element_bytes_));
        }
      }
      return;
    }
    for (const LocalSegment& segment : step.segments) {
      if (step.kind == LocalKind::kDivide) {
        divide_elements(spec_.dtype, address(r, segment.dst), segment.dst.count, plan_.nranks);
        continue;
      }
      if (segment.a.count != segment.dst.count || segment.b.count != segment.dst.count) {
        fault(fmt::format("rank {}: reduce of unequal ranges", r));
      }
      reduce_elements(spec_.dtype, spec_.op, address(r, segment.a), address(r, segment.b), address(r, segment.dst),
                      segment.dst.count);
    }
  }

  std::string deadlock_report() const {
    std::string report = "deadlock:";
    for (int r = 0; r < plan_.nranks; ++r) {
      if (!posted(r)) continue;
      std::vector<int> waiting;
      for (int p : peers(r)) {
        if (!ranks_[static_cast<size_t>(r)].met.contains(p)) waiting.push_back(p);
      }
      report += fmt::format(" {} waits for rank(s) {};", where(r), fmt::join(waiting, ", "));
    }
    return report;
  }

  const NcclPlan& plan_;
  const CollectiveSpec& spec_;
  const int64_t element_bytes_;
  std::vector<Rank> ranks_;
  SimulationStats stats_;
};

}  // namespace

SimulationStats simulate_plan(const NcclPlan& plan, const CollectiveSpec& spec, std::span<const RankBuffers> buffers) {
  return Simulator(plan, spec, buffers).run();
}

}  // namespace tandem::nccl::test
