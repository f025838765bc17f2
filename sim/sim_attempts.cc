#include "sim/sim_attempts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>

#include "core/algorithms.h"
#include "sim/collective_timer.h"
#include "sim/sweep.h"

namespace tandem::sim {

SimAttempts::SimAttempts(const Session& session, SimPlacement placement)
    : session_(session),
      placement_(std::move(placement)),
      sim_(*placement_.topology, placement_.cluster, placement_.network),
      plans_(sim_, placement_.network) {}

AttemptResult SimAttempts::attempt(const AttemptPlan& plan, const std::vector<int>& active) {
  // What the attempt came to goes through attempt_outcome as on every backend: the error a fault
  // raises (a report without an op: the simulator times the whole collective on a platform with
  // the faults applied, it does not run ops), and the time until it shows.
  const RankFaults faults = session_.rank_faults(active, plan.ranks);
  const auto outcome = [&](std::optional<FaultReport> report, double seconds) {
    std::vector<std::optional<Error>> errors(1);
    if (report) errors[0] = fault_error(std::move(*report));
    return attempt_outcome(session_, active, faults, errors, seconds, "sim");
  };
  // A desync is caught when the ranks launch (as the host backend's signature check does); ranks
  // that never arrive leave the others waiting for the watchdog.
  if (faults.desync || !faults.missing.empty()) return outcome(std::nullopt, 0.0);
  sim_.set_dead_links(plan.rerouted ? dead_links() : std::vector<uint32_t>{});
  const Prepared& prepared = prepare(plan.ranks);
  const std::vector<Fault>& plan_faults = session_.injector().plan().faults;
  // Dead links the schedule crosses: a flap errors out (noticed after the attempt's time), a
  // permanent failure stalls until the watchdog fires.
  for (int i : active) {
    const Fault& fault = plan_faults[static_cast<size_t>(i)];
    if (fault.kind != FaultKind::kLinkDown && fault.kind != FaultKind::kNicDown) continue;
    if (!crosses(prepared, placement_.fault_links.at(i))) continue;
    FaultReport report{.backend = "sim", .fault = i, .note = fmt::format("{} carries this collective's traffic", fault.describe())};
    if (fault.recover_after_s) {
      report.kind = FaultReport::Kind::kSendFailed;
      return outcome(std::move(report), fault_free_seconds(plan.ranks));
    }
    report.kind = FaultReport::Kind::kStalled;
    return outcome(std::move(report), session_.config().recovery.watchdog_s);
  }
  for (int i : active) {
    const Fault& fault = plan_faults[static_cast<size_t>(i)];
    const bool here = std::find(plan.ranks.begin(), plan.ranks.end(), fault.rank) != plan.ranks.end();
    if ((fault.kind == FaultKind::kTransient || fault.kind == FaultKind::kCorrupt) && here) {
      // No data in the simulator: the failure (or the checksum mismatch) shows at the end.
      if (fault.kind == FaultKind::kCorrupt && !session_.config().recovery.verify) continue;
      return outcome(FaultReport{.kind = fault.kind == FaultKind::kTransient ? FaultReport::Kind::kSendFailed
                                                                             : FaultReport::Kind::kCorrupt,
                                 .backend = "sim",
                                 .fault = i,
                                 .note = fault.describe()},
                     fault_free_seconds(plan.ranks));
    }
  }
  set_slowdowns(active, true);
  // Nothing slows or reroutes this attempt: it is the fault-free collective, simulated once per
  // set of ranks, not again (op by op, a 16-channel ring simulated again differs by up to ~2%,
  // docs/simulator.md, which would show as a cost where no fault hit).
  const double seconds = sim_.faults_active() ? simulate(prepared) : fault_free_seconds(plan.ranks);
  set_slowdowns(active, false);
  return outcome(std::nullopt, seconds);
}

double SimAttempts::fault_free_seconds(const std::vector<int>& ranks) {
  auto it = fault_free_.find(ranks);
  if (it == fault_free_.end()) {
    sim_.set_dead_links({});
    it = fault_free_.emplace(ranks, simulate(prepare(ranks))).first;
  }
  return it->second;
}

const SimAttempts::Prepared& SimAttempts::prepare(const std::vector<int>& ranks) {
  auto it = prepared_.find(ranks);
  if (it != prepared_.end()) return it->second;
  const SessionConfig& config = session_.config();
  const int nodes = placement_.topology->node_count();
  Prepared p;
  const auto m = static_cast<int>(ranks.size());
  p.spec = session_.spec(m);
  for (int r : ranks) p.gpus.push_back(placement_.gpu_of_rank[static_cast<size_t>(r)]);
  // The survivors of a shrink keep the full ring's (rail-aligned) order, minus the dropped ranks,
  // as a topology-aware rebuild would: hops stay on NVLink or on one rail.
  const RankLayout full = sweep_layout(nodes, placement_.per_node, true);
  RankLayout layout = full;
  if (m != config.nranks) {
    layout = RankLayout::flat(m);
    for (const std::vector<int>& order : full.rings) {
      std::vector<int> ring;
      for (int r : order) {
        const auto at = std::find(ranks.begin(), ranks.end(), r);
        if (at != ranks.end()) ring.push_back(static_cast<int>(at - ranks.begin()));
      }
      layout.rings.push_back(std::move(ring));
    }
  }
  const Algorithm algorithm = config.work.algorithm;
  const Tuner tuner(placement_.cluster, nodes, placement_.per_node);
  // Loops simulate every rank's own ops (the explicit form, op by op), as replay does, so that a
  // replay of a loop's dumps gives back its times, for groups of up to kMaxOpByOpRanks. Larger ones
  // take the rank-symmetric form where the algorithm has one, simulated round by round, as replay
  // does too: a 1,024-rank 16-channel ring is 67 M explicit ops (over 10 GB, minutes) but one
  // representative rank's. Faults that act on some ops keep the explicit form at any size: a link
  // fault (which transfers cross it), a straggler (the op-by-op simulation).
  const std::vector<Fault>& faults = session_.injector().plan().faults;
  const bool per_op = std::any_of(faults.begin(), faults.end(), [](const Fault& f) {
    return f.is_link_fault() || f.kind == FaultKind::kStraggler;
  });
  CollectiveQuery query;
  query.spec = p.spec;
  query.bytes = config.work.size_bytes;
  // NCCL's protocol and channels for the named algorithm: ring and tree channels together use
  // every NIC of a node.
  query.choice = tuner.choose_for(p.spec.collective, config.work.size_bytes, algorithm);
  query.layout = std::move(layout);
  query.instances = {p.gpus};
  query.per_node = placement_.per_node;
  query.form = m == config.nranks && m > kMaxOpByOpRanks && !per_op ? ScheduleForm::kSymmetric
                                                                     : ScheduleForm::kExplicit;
  p.plan = plans_.plan(query);
  const Schedule& schedule = *p.plan.schedule;
  if (schedule.symmetric()) return prepared_.emplace(ranks, std::move(p)).first->second;  // no link fault to cross
  for (int r = 0; r < m; ++r) {
    for (const Lane& lane : schedule.ranks[static_cast<size_t>(r)].lanes) {
      for (const Op& op : lane.ops) {
        if (op.kind == OpKind::kSend) p.pairs.emplace(p.gpus[static_cast<size_t>(r)], p.gpus[static_cast<size_t>(op.peer)]);
      }
    }
  }
  return prepared_.emplace(ranks, std::move(p)).first->second;
}

bool SimAttempts::crosses(const Prepared& p, const std::vector<uint32_t>& links) const {
  for (const auto& [a, b] : p.pairs) {
    for (uint32_t link : links) {
      if (sim_.crosses(a, b, link)) return true;
    }
  }
  return false;
}

double SimAttempts::simulate(const Prepared& p) { return plans_.run(p.plan).seconds; }

std::vector<uint32_t> SimAttempts::dead_links() const {
  std::vector<uint32_t> links;
  for (const auto& [index, ids] : placement_.fault_links) {
    const FaultKind kind = session_.injector().plan().faults[static_cast<size_t>(index)].kind;
    if (kind == FaultKind::kLinkDown || kind == FaultKind::kNicDown) links.insert(links.end(), ids.begin(), ids.end());
  }
  return links;
}

void SimAttempts::set_slowdowns(const std::vector<int>& active, bool on) {
  for (int i : active) {
    const Fault& fault = session_.injector().plan().faults[static_cast<size_t>(i)];
    const double factor = on ? fault.factor : 1.0;
    if (fault.kind == FaultKind::kLinkDegrade) {
      for (uint32_t link : placement_.fault_links.at(i)) sim_.set_link_factor(link, factor);
    } else if (fault.kind == FaultKind::kStraggler) {
      sim_.set_gpu_slowdown(placement_.gpu_of_rank[static_cast<size_t>(fault.rank)], factor);
    }
  }
}

}  // namespace tandem::sim
