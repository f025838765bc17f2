#include "core/faults.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "core/hash.h"

namespace tandem {
namespace {

constexpr std::array<std::pair<FaultKind, std::string_view>, 9> kKinds{{
    {FaultKind::kLinkDown, "link_down"},
    {FaultKind::kLinkDegrade, "link_degrade"},
    {FaultKind::kNicDown, "nic_down"},
    {FaultKind::kRankCrash, "rank_crash"},
    {FaultKind::kRankHang, "rank_hang"},
    {FaultKind::kStraggler, "straggler"},
    {FaultKind::kTransient, "transient"},
    {FaultKind::kDesync, "desync"},
    {FaultKind::kCorrupt, "corrupt"},
}};

// A seeded draw depends on (seed, fault, collective) only, never on the order in which threads ask.
uint64_t mix(uint64_t x) { return splitmix64(x); }

double uniform(uint64_t seed, uint64_t a, uint64_t b) {
  return static_cast<double>(mix(mix(seed ^ mix(a)) ^ mix(b)) >> 11) * 0x1.0p-53;
}

// "500 us", "2.5 ms", "3 s": the unit that keeps the number readable.
std::string format_duration(double seconds) {
  if (seconds < 1e-3) return fmt::format("{:g} us", seconds * 1e6);
  if (seconds < 1) return fmt::format("{:g} ms", seconds * 1e3);
  return fmt::format("{:g} s", seconds);
}

bool is_rank_fault(FaultKind kind) {
  return kind == FaultKind::kRankCrash || kind == FaultKind::kRankHang || kind == FaultKind::kStraggler ||
         kind == FaultKind::kDesync || kind == FaultKind::kCorrupt || kind == FaultKind::kTransient;
}

// One-shot faults hit their collective only; persistent ones (a dead link or NIC, a degraded
// link, a crashed, hung or slow rank) stay from their collective on. A flap is persistent until
// it comes back.
bool persistent(FaultKind kind) {
  return kind != FaultKind::kTransient && kind != FaultKind::kCorrupt && kind != FaultKind::kDesync;
}

}  // namespace

std::string_view name(FaultKind kind) {
  for (const auto& [k, text] : kKinds) {
    if (k == kind) return text;
  }
  return "?";
}

FaultKind parse_fault_kind(std::string_view text) {
  for (const auto& [k, name] : kKinds) {
    if (name == text) return k;
  }
  fail(ErrorCode::kInvalidArgument,
       "unknown fault kind '{}' (expected link_down, link_degrade, nic_down, rank_crash, rank_hang, straggler, "
       "transient, desync or corrupt)",
       text);
}

std::string Fault::describe() const {
  std::string text(name(kind));
  if (!link.empty()) text += " " + link;
  if (kind == FaultKind::kNicDown) text += fmt::format(" node {} nic {}", node, nic);
  if (is_rank_fault(kind) && rank >= 0) text += fmt::format(" rank {}", rank);
  if (kind == FaultKind::kLinkDegrade) text += fmt::format(" to {:g}x bandwidth", factor);
  if (kind == FaultKind::kStraggler) text += fmt::format(" {:g}x slower", factor);
  if (kind == FaultKind::kDesync) {
    std::string instead;
    if (desync_collective) instead += fmt::format(" {}", name(*desync_collective));
    if (desync_count) instead += fmt::format(" count {}", *desync_count);
    if (desync_dtype) instead += fmt::format(" {}", name(*desync_dtype));
    text += " issuing" + instead;
  }
  if (trigger.collective && !group.empty()) text += fmt::format(" at its {} collective {}", group, *trigger.collective);
  if (trigger.collective && group.empty()) text += fmt::format(" at collective {}", *trigger.collective);
  if (trigger.at_s) text += fmt::format(" at {}", format_duration(*trigger.at_s));
  if (trigger.op) text += fmt::format(" at op {}", *trigger.op);
  if (trigger.probability) text += fmt::format(" with probability {:g}", *trigger.probability);
  if (recover_after_s) text += fmt::format(", back after {}", format_duration(*recover_after_s));
  return text;
}

FaultInjector::FaultInjector(FaultPlan plan, RouteCrossesFn crosses)
    : plan_(std::move(plan)), crosses_(std::move(crosses)), down_since_(plan_.faults.size()) {}

bool FaultInjector::triggered(const Fault& fault, int64_t sequence, double now_s) const {
  const FaultTrigger& t = fault.trigger;
  if (t.collective && (persistent(fault.kind) ? sequence < *t.collective : sequence != *t.collective)) return false;
  if (t.at_s && now_s < *t.at_s) return false;
  if (t.probability) {
    const auto index = static_cast<uint64_t>(&fault - plan_.faults.data());
    if (uniform(plan_.seed, index, static_cast<uint64_t>(sequence)) >= *t.probability) return false;
  }
  return true;
}

std::vector<int> FaultInjector::active(int64_t sequence, int attempt, double now_s, double began_s,
                                       bool rerouted) const {
  std::vector<int> result;
  for (size_t i = 0; i < plan_.faults.size(); ++i) {
    const Fault& fault = plan_.faults[i];
    if (fault.is_link_fault() && rerouted) continue;
    if (!triggered(fault, sequence, now_s)) continue;
    if (!persistent(fault.kind) && attempt > 0) continue;  // fails once; the retry succeeds
    if (fault.recover_after_s) {
      // Down from when it hit: its time trigger, else the start of the first collective it hit
      // (remembered, so later collectives find it back up).
      std::optional<double>& since = down_since_[i];
      if (!since) since = fault.trigger.at_s.value_or(began_s);
      if (now_s >= *since + *fault.recover_after_s) continue;
    }
    result.push_back(static_cast<int>(i));
  }
  return result;
}

RankAction FaultInjector::rank_action(const std::vector<int>& active, int rank) const {
  for (int i : active) {
    const Fault& fault = plan_.faults[static_cast<size_t>(i)];
    if (fault.rank != rank) continue;
    if (fault.kind == FaultKind::kRankCrash) return RankAction::kCrash;
    if (fault.kind == FaultKind::kRankHang) return RankAction::kHang;
  }
  return RankAction::kEnter;
}

std::optional<CollectiveSpec> FaultInjector::desync(const std::vector<int>& active, int rank,
                                                    const CollectiveSpec& spec) const {
  for (int i : active) {
    const Fault& fault = plan_.faults[static_cast<size_t>(i)];
    if (fault.kind != FaultKind::kDesync || fault.rank != rank) continue;
    CollectiveSpec other = spec;
    if (fault.desync_collective) other.collective = *fault.desync_collective;
    if (fault.desync_count) other.count = *fault.desync_count;
    if (fault.desync_dtype) other.dtype = *fault.desync_dtype;
    return other;
  }
  return std::nullopt;
}

double FaultInjector::straggle(const std::vector<int>& active, int rank) const {
  double factor = 1.0;
  for (int i : active) {
    const Fault& fault = plan_.faults[static_cast<size_t>(i)];
    if (fault.kind == FaultKind::kStraggler && fault.rank == rank) factor = std::max(factor, fault.factor);
  }
  return factor;
}

TransferEffect FaultInjector::transfer(const std::vector<int>& active, int src, int dst, int64_t op_index) const {
  TransferEffect effect;
  auto blame = [&](int i) {
    if (effect.fault_index < 0) effect.fault_index = i;
  };
  for (int i : active) {
    const Fault& fault = plan_.faults[static_cast<size_t>(i)];
    const bool at_op = !fault.trigger.op || *fault.trigger.op == op_index;
    switch (fault.kind) {
      case FaultKind::kLinkDown:
      case FaultKind::kNicDown:
        if (crosses_ && crosses_(fault, src, dst)) {
          // A flap is noticed (the transfer errors out and can be retried); a permanent failure
          // looks like silence: the transfer stalls until the watchdog fires.
          (fault.recover_after_s ? effect.fail : effect.stall) = true;
          blame(i);
        }
        break;
      case FaultKind::kLinkDegrade:
        if (crosses_ && crosses_(fault, src, dst)) {
          effect.bandwidth_factor = std::min(effect.bandwidth_factor, fault.factor);
          blame(i);
        }
        break;
      case FaultKind::kStraggler:
        if (fault.rank == src || fault.rank == dst) {
          effect.delay_factor = std::max(effect.delay_factor, fault.factor);
          blame(i);
        }
        break;
      case FaultKind::kTransient:
        if (fault.rank == src && at_op) {
          effect.fail = true;
          blame(i);
        }
        break;
      case FaultKind::kCorrupt:
        if (fault.rank == dst && at_op) {
          effect.corrupt = true;
          blame(i);
        }
        break;
      default: break;
    }
  }
  return effect;
}

}  // namespace tandem
