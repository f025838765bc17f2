#include "app/scenario/training_rehearsal.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/sizes.h"
#include "core/torch_names.h"
#include "core/types.h"

namespace tandem::app {
namespace {

// One collective of the step on one communicator instance: a task of a stage and the instance of
// its group that the stage's ranks are in.
struct Occurrence {
  size_t task = 0;
  size_t group = 0;
  size_t instance = 0;
  double start_s = 0;
  double end_s = 0;
};

// An instance's members in the order its group lists them, and its name on every member.
struct Instance {
  std::vector<int> ranks;
  std::string name;  // job-wide creation counter, as PyTorch names groups
};

int64_t to_ns(double seconds) { return std::llround(seconds * 1e9); }

// Which ranks run stage s: ranks are stage-major (models/workload.cc's rank(stage, data, tp)).
bool on_stage(int rank, int stage, int per_stage) { return rank / per_stage == stage; }

// What one rank records for its part of an occurrence: one entry, or a p2p op (a pipeline pair's
// send or receive; a context-parallel ring's send and receive).
struct Part {
  std::string profiling_name;
  bool p2p = false;
};

std::vector<Part> parts_of(const models::CommOp& op, const std::string& kind, const std::vector<int>& ranks, int rank,
                           int sender) {
  const auto local = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
  const int n = static_cast<int>(ranks.size());
  if (op.collective != Collective::kSendRecv) return {{fmt::format("nccl:{}", name(op.collective)), false}};
  if (kind.rfind("pp", 0) == 0 && n == 2) {
    const int from = static_cast<int>(std::find(ranks.begin(), ranks.end(), sender) - ranks.begin());
    if (rank == sender) return {{fmt::format("nccl:send {}->{}", from, 1 - from), true}};
    return {{fmt::format("nccl:recv {}<-{}", local, from), true}};
  }
  // A ring exchange: send to the next, receive from the previous.
  return {{fmt::format("nccl:send {}->{}", local, (local + 1) % n), true},
          {fmt::format("nccl:recv {}<-{}", local, (local + n - 1) % n), true}};
}

class Rehearsal {
 public:
  Rehearsal(const models::StepProgram& program, const std::vector<sim::TimelineSlice>& timeline, int gpus,
            const std::vector<Fault>& faults, size_t capacity, double watchdog_s)
      : program_(program), timeline_(timeline), gpus_(gpus), faults_(faults), timeout_ms_(std::llround(watchdog_s * 1e3)) {
    if (timeline.size() != program.tasks.size()) {
      fail(ErrorCode::kInvalidArgument, "rehearsal: {} timeline slices for {} tasks", timeline.size(),
           program.tasks.size());
    }
    per_stage_ = std::max(1, gpus / std::max(1, program.stages));
    name_instances();
    for (int r = 0; r < gpus; ++r) {
      auto recorder = std::make_unique<FlightRecorder>(r, capacity, "tandem sim (training rehearsal)");
      FrGroup world;
      world.name = "0";
      world.desc = "default_pg";
      for (int k = 0; k < gpus; ++k) world.ranks.push_back(k);
      recorder->add_group(world);
      recorders_.push_back(std::move(recorder));
    }
    for (size_t g = 0; g < instances_.size(); ++g) {
      for (size_t i = 0; i < instances_[g].size(); ++i) {
        const Instance& instance = instances_[g][i];
        FrGroup group;
        group.name = instance.name;
        group.desc = program.groups[g].name;
        group.ranks = instance.ranks;
        for (int r : instance.ranks) {
          recorders_[static_cast<size_t>(r)]->add_group(group);
          pg_id_[{r, instance.name}] = static_cast<int>(pg_count_[r]++) + 1;
        }
      }
    }
    halted_.assign(static_cast<size_t>(gpus), false);
    dead_.assign(static_cast<size_t>(gpus), false);
    waiting_.assign(static_cast<size_t>(gpus), false);
    lag_s_.assign(static_cast<size_t>(gpus), 0.0);
    slowdown_.assign(static_cast<size_t>(gpus), 1.0);
    previous_end_s_.assign(static_cast<size_t>(gpus), 0.0);
    counted_.assign(faults.size(), 0);
  }

  StepRehearsal run(double watchdog_s) {
    StepRehearsal out;
    for (const Fault& f : faults_) out.faults.push_back(describe(f));
    for (const Occurrence& o : occurrences()) play(o, out);
    for (size_t f = 0; f < faults_.size(); ++f) {
      if (!fired_.count(f)) {
        fail(ErrorCode::kInvalidArgument,
             "fault {}: rank {} takes part in {} {} collective{} of the step, so its collective #{} never comes "
             "(at_collective counts from 0)",
             describe(faults_[f]), faults_[f].rank, counted_[f], faults_[f].group, counted_[f] == 1 ? "" : "s",
             faults_[f].trigger.collective.value_or(0));
      }
    }
    for (int r = 0; r < gpus_; ++r) {
      if (dead_[static_cast<size_t>(r)]) {
        out.dead_ranks.push_back(r);
        continue;
      }
      if (waiting_[static_cast<size_t>(r)]) out.waiting_ranks.push_back(r);
      FrDump dump = recorders_[static_cast<size_t>(r)]->dump();
      dump.rank = r;
      out.dumps.push_back(std::move(dump));
    }
    if (out.first_wait_s >= 0) out.watchdog_fires_s = out.first_wait_s + watchdog_s;
    for (const sim::TimelineSlice& slice : timeline_) out.fault_free_end_s = std::max(out.fault_free_end_s, slice.end_s);
    out.end_s = out.fault_free_end_s + *std::max_element(lag_s_.begin(), lag_s_.end());
    out.analysis = analyze(out.dumps);
    return out;
  }

 private:
  static std::string describe(const Fault& f) { return f.describe(); }

  void name_instances() {
    int next = 1;  // "0" is the default group
    instances_.resize(program_.groups.size());
    for (size_t g = 0; g < program_.groups.size(); ++g) {
      for (const std::vector<int>& ranks : program_.groups[g].instances) {
        instances_[g].push_back({ranks, std::to_string(next++)});
      }
    }
  }

  // Every communicator instance's part in every collective task, in the order the fault-free
  // timeline starts them (ties: task order, then instance order).
  std::vector<Occurrence> occurrences() const {
    std::vector<Occurrence> out;
    for (size_t t = 0; t < program_.tasks.size(); ++t) {
      const models::StepTask& task = program_.tasks[t];
      if (task.kind != models::TaskKind::kComm) continue;
      const auto g = static_cast<size_t>(program_.comms[static_cast<size_t>(task.comm)].group);
      for (size_t i = 0; i < instances_[g].size(); ++i) {
        const std::vector<int>& ranks = instances_[g][i].ranks;
        if (std::none_of(ranks.begin(), ranks.end(), [&](int r) { return on_stage(r, task.stage, per_stage_); }))
          continue;
        out.push_back({t, g, i, timeline_[t].start_s, timeline_[t].end_s});
      }
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const Occurrence& a, const Occurrence& b) { return a.start_s < b.start_s; });
    return out;
  }

  // The fault that strikes `rank` at this occurrence, if one does (counting the rank's collectives
  // in the fault's group as it reaches them).
  std::optional<size_t> strikes(int rank, const std::string& kind) {
    std::optional<size_t> hit;
    for (size_t f = 0; f < faults_.size(); ++f) {
      const Fault& fault = faults_[f];
      if (fault.rank != rank || !fault_group_matches(fault.group, kind)) continue;
      if (counted_[f]++ == fault.trigger.collective.value_or(0) && !hit) hit = f;
    }
    return hit;
  }

  // The members that enter an occurrence, after the faults that strike them there: a hang or a
  // crash halts its rank before it enters, a straggler enters slowed down from then on, a desync
  // enters with another element count.
  struct Entering {
    std::vector<int> ranks;
    std::map<int, int64_t> desync_count;  // rank -> the element count it issues instead
  };

  Entering enter(const Instance& instance, const std::string& kind) {
    Entering entering;
    for (int r : instance.ranks) {
      if (halted_[static_cast<size_t>(r)]) continue;
      if (const std::optional<size_t> f = strikes(r, kind)) {
        fired_.insert(*f);
        const Fault& fault = faults_[*f];
        if (fault.kind == FaultKind::kStraggler) {
          slowdown_[static_cast<size_t>(r)] = fault.factor;
        } else if (fault.kind == FaultKind::kRankHang || fault.kind == FaultKind::kRankCrash) {
          halted_[static_cast<size_t>(r)] = true;
          dead_[static_cast<size_t>(r)] = fault.kind == FaultKind::kRankCrash;
          continue;
        } else {
          entering.desync_count[r] = fault.desync_count.value_or(0);
        }
      }
      entering.ranks.push_back(r);
    }
    return entering;
  }

  struct Timing {
    std::map<int, double> arrival_s;  // per entering rank
    double last_arrival_s = 0;        // the op starts: the last member is there
    double end_s = 0;                 // every member leaves it
  };

  // When each member reaches the op: its fault-free start, plus how late the rank already runs,
  // plus what a straggler loses on its own work since its previous op (that work takes `factor`
  // times as long). The op starts when the last member is there and runs at the pace of its
  // slowest member; every member leaves it together, as late as that.
  Timing arrive(const Occurrence& o, const std::vector<int>& entering) {
    Timing timing;
    timing.last_arrival_s = o.start_s;
    double pace = 1.0;
    for (int r : entering) {
      const auto i = static_cast<size_t>(r);
      lag_s_[i] += (slowdown_[i] - 1.0) * std::max(0.0, o.start_s - previous_end_s_[i]);
      timing.arrival_s[r] = o.start_s + lag_s_[i];
      timing.last_arrival_s = std::max(timing.last_arrival_s, timing.arrival_s[r]);
      pace = std::max(pace, slowdown_[i]);
      previous_end_s_[i] = o.end_s;
    }
    timing.end_s = timing.last_arrival_s + pace * (o.end_s - o.start_s);
    return timing;
  }

  // Rank r's flight-recorder entry for one part of an occurrence, numbered in its process group.
  FrEntry entry(int r, const Part& part, const Instance& instance, const std::string& kind, const SizeCounts& issued,
                double arrival_s) {
    FrEntry e;
    e.pg_id = pg_id_.at({r, instance.name});
    e.pg_name = instance.name;
    e.pg_desc = kind;
    int64_t& seq = (part.p2p ? p2p_seq_ : collective_seq_)[{r, instance.name}];
    ++seq;
    (part.p2p ? e.p2p_seq_id : e.collective_seq_id) = seq;
    e.op_id = ++op_id_[{r, instance.name}];
    e.is_p2p = part.p2p;
    e.profiling_name = part.profiling_name;
    e.input_sizes = {{issued.input_elements}};
    e.output_sizes = {{issued.output_elements}};
    e.input_dtypes = {std::string(torch_dtype_name(DataType::kBF16))};
    e.output_dtypes = e.input_dtypes;
    e.time_created_ns = to_ns(arrival_s);
    e.timeout_ms = timeout_ms_;
    e.thread_id = std::to_string(r);
    e.thread_name = fmt::format("tandem rank {}", r);
    return e;
  }

  void play(const Occurrence& o, StepRehearsal& out) {
    const models::StepTask& task = program_.tasks[o.task];
    const models::CommOp& op = program_.comms[static_cast<size_t>(task.comm)];
    const std::string& kind = program_.groups[o.group].name;
    const Instance& instance = instances_[o.group][o.instance];
    int sender = -1;
    for (int r : instance.ranks) {
      if (on_stage(r, task.stage, per_stage_)) sender = sender < 0 ? r : sender;
    }
    const Entering entering = enter(instance, kind);
    const bool completes = entering.desync_count.empty() && entering.ranks.size() == instance.ranks.size();
    const Timing timing = arrive(o, entering.ranks);
    if (completes) {
      for (int r : entering.ranks) lag_s_[static_cast<size_t>(r)] = timing.end_s - o.end_s;
    }
    const int n = static_cast<int>(instance.ranks.size());
    const SizeCounts counts = nccl_tests_counts(op.collective, op.bytes, DataType::kBF16, n);
    for (int r : entering.ranks) {
      SizeCounts issued = counts;
      if (const auto desync = entering.desync_count.find(r); desync != entering.desync_count.end()) {
        issued.input_elements = issued.output_elements = desync->second;
      }
      const double arrival_s = timing.arrival_s.at(r);
      FlightRecorder& recorder = *recorders_[static_cast<size_t>(r)];
      for (const Part& part : parts_of(op, kind, instance.ranks, r, sender)) {
        const uint64_t id = recorder.record(entry(r, part, instance, kind, issued, arrival_s));
        recorder.started(id, to_ns(completes ? timing.last_arrival_s : arrival_s));
        if (completes) {
          recorder.completed(id, to_ns(timing.end_s));
          recorder.retire(id);
        }
      }
      if (!completes) {
        halted_[static_cast<size_t>(r)] = true;
        waiting_[static_cast<size_t>(r)] = true;
        if (out.first_wait_s < 0 || arrival_s < out.first_wait_s) {
          out.first_wait_s = arrival_s;
          out.first_stuck = fmt::format("{} (nccl:{} of group {}, {})", program_.labels[static_cast<size_t>(task.label)],
                                        name(op.collective), instance.name, kind);
        }
      }
    }
  }

  const models::StepProgram& program_;
  const std::vector<sim::TimelineSlice>& timeline_;
  const int gpus_;
  const std::vector<Fault>& faults_;
  const int64_t timeout_ms_;
  int per_stage_ = 1;
  std::vector<std::vector<Instance>> instances_;  // per group
  std::vector<std::unique_ptr<FlightRecorder>> recorders_;
  std::map<std::pair<int, std::string>, int> pg_id_;  // (rank, group name) -> its pg_id on that rank
  std::map<int, size_t> pg_count_;
  std::map<std::pair<int, std::string>, int64_t> collective_seq_, p2p_seq_, op_id_;
  std::vector<bool> halted_, dead_, waiting_;
  std::vector<double> lag_s_;           // per rank: how much later than the fault-free timeline it runs
  std::vector<double> slowdown_;        // per rank: a straggler's factor from its trigger on (1: none)
  std::vector<double> previous_end_s_;  // per rank: the fault-free end of its previous op
  std::vector<int64_t> counted_;  // per fault: the rank's collectives of its group so far
  std::set<size_t> fired_;
};

}  // namespace

bool rehearsed_in_training(FaultKind kind) {
  return kind == FaultKind::kRankHang || kind == FaultKind::kRankCrash || kind == FaultKind::kDesync ||
         kind == FaultKind::kStraggler;
}

bool fault_group_matches(const std::string& selector, const std::string& group_kind) {
  if (selector == "pp") return group_kind.rfind("pp", 0) == 0 && group_kind.size() > 2;
  return selector == group_kind;
}

StepRehearsal rehearse_step(const models::StepProgram& program, const std::vector<sim::TimelineSlice>& timeline,
                            int gpus, const std::vector<Fault>& faults, double watchdog_s, size_t capacity) {
  for (const Fault& f : faults) {
    if (!rehearsed_in_training(f.kind)) {
      fail(ErrorCode::kUnsupported, "a {} fault is not rehearsed in a training step ({} are)", name(f.kind),
           kRehearsedInTraining);
    }
    if (f.rank < 0 || f.rank >= gpus) {
      fail(ErrorCode::kInvalidArgument, "fault on rank {}: the step runs on ranks 0-{}", f.rank, gpus - 1);
    }
    const bool known = std::any_of(program.groups.begin(), program.groups.end(), [&](const models::CommGroup& g) {
      return fault_group_matches(f.group, g.name);
    });
    if (!known) {
      std::vector<std::string> kinds;
      for (const models::CommGroup& g : program.groups) kinds.push_back(g.name);
      fail(ErrorCode::kInvalidArgument, "fault on rank {}: this layout has no '{}' communicator (it has: {})", f.rank,
           f.group, fmt::join(kinds, ", "));
    }
  }
  return Rehearsal(program, timeline, gpus, faults, capacity, watchdog_s).run(watchdog_s);
}

}  // namespace tandem::app
