#include "app/scenario/loop_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "app/run/backends.h"
#include "app/run/bench_check.h"
#include "app/run/host_memory.h"
#include "app/report/nccl_tests_table.h"
#include "app/run/run_memory.h"
#include "app/report/scenario_report.h"
#include "backend/host/host_executor.h"
#include "core/algorithms.h"
#include "core/error.h"
#include "core/flight_recorder.h"
#include "core/torch_names.h"
#include "models/cluster.h"
#include "sim/simulator.h"
#include "sim/sweep.h"
#include "sim/tuner.h"

namespace tandem::app {
namespace {

using nlohmann::json;
using Status = AttemptResult::Status;

// What every backend shares: the cluster, the ranks' GPUs, the fault injector.
struct LoopSetup {
  const Scenario& scenario;
  const CollectiveLoop& loop;
  models::Topology topology;
  int per_node = 0;
  int nranks = 0;
  std::vector<int> gpu_of_rank;
  std::map<int, std::vector<uint32_t>> fault_links;  // fault index -> the topology links it kills or slows
  std::unique_ptr<FaultInjector> injector;

  explicit LoopSetup(const Scenario& s)
      : scenario(s),
        loop(std::get<CollectiveLoop>(s.workload)),
        topology(models::build_cluster(s.variants[0].cluster)) {
    const int total_per_node = topology.gpus_per_node();
    per_node = loop.gpus_per_node > 0 ? loop.gpus_per_node : total_per_node;
    for (int v = 0; v < topology.node_count(); ++v) {
      for (int i = 0; i < per_node; ++i) gpu_of_rank.push_back(v * total_per_node + i);
    }
    nranks = static_cast<int>(gpu_of_rank.size());
    for (size_t i = 0; i < s.faults.faults.size(); ++i) {
      const Fault& fault = s.faults.faults[i];
      if (fault.kind == FaultKind::kNicDown) {
        fault_links[static_cast<int>(i)] = topology.nic_links(fault.node, fault.nic);
      } else if (fault.is_link_fault()) {
        fault_links[static_cast<int>(i)] = {topology.find_link(fault.link).value()};
      }
    }
    injector = std::make_unique<FaultInjector>(s.faults, [this](const Fault& fault, int src, int dst) {
      // `fault` lives in the injector's copy of the plan.
      const auto it = fault_links.find(static_cast<int>(&fault - injector->plan().faults.data()));
      if (it == fault_links.end()) return false;
      const models::Route route =
          topology.route(gpu_of_rank[static_cast<size_t>(src)], gpu_of_rank[static_cast<size_t>(dst)]);
      for (uint32_t link : it->second) {
        if (models::Topology::crosses(route, link)) return true;
      }
      return false;
    });
  }

  CollectiveSpec spec(int ranks) const {
    const SizeCounts counts = nccl_tests_counts(loop.collective, loop.size_bytes, loop.dtype, ranks);
    return CollectiveSpec{loop.collective, counts.count, loop.dtype, loop.op, 0, ranks};
  }

  // Every link a dead-link fault of the plan names: what a reroute goes around.
  std::vector<uint32_t> dead_links() const {
    std::vector<uint32_t> links;
    for (const auto& [index, ids] : fault_links) {
      const FaultKind kind = scenario.faults.faults[static_cast<size_t>(index)].kind;
      if (kind == FaultKind::kLinkDown || kind == FaultKind::kNicDown)
        links.insert(links.end(), ids.begin(), ids.end());
    }
    return links;
  }
};

// One backend's attempts; the driver below does the rest.
class LoopBackend {
 public:
  virtual ~LoopBackend() = default;
  virtual AttemptResult attempt(const AttemptPlan& plan, const std::vector<int>& active) = 0;
  virtual double fault_free_seconds(const std::vector<int>& ranks) = 0;
};

// Which plan faults a backend cannot run past: ranks that do not arrive, and desyncs.
struct RankFaults {
  std::vector<int> missing;  // hang or crash
  std::vector<int> crashed;
  std::optional<std::string> desync;
};

RankFaults rank_faults(const LoopSetup& setup, const std::vector<int>& active, const std::vector<int>& ranks) {
  RankFaults out;
  for (int r : ranks) {
    const RankAction action = setup.injector->rank_action(active, r);
    if (action != RankAction::kEnter) out.missing.push_back(r);
    if (action == RankAction::kCrash) out.crashed.push_back(r);
    if (auto other = setup.injector->desync(active, r, setup.spec(static_cast<int>(ranks.size())))) {
      out.desync = fmt::format("rank {} issued {} of {} {} elements", r, name(other->collective), other->count,
                               name(other->dtype));
    }
  }
  return out;
}

bool any_link_fault(const LoopSetup& setup, const std::vector<int>& active) {
  return std::any_of(active.begin(), active.end(),
                     [&](int i) { return setup.scenario.faults.faults[static_cast<size_t>(i)].is_link_fault(); });
}

// The fault-free time of a rank set on a real backend, cached in `cache`: the fastest of a few
// clean runs after a warm-up, as the first run of a rank set pays for page faults and cold caches,
// which are not the faults' cost.
template <typename CleanRun>
double best_clean_seconds(std::map<std::vector<int>, double>& cache, const std::vector<int>& ranks,
                          CleanRun&& clean_run) {
  auto it = cache.find(ranks);
  if (it == cache.end()) {
    clean_run();
    double best = std::numeric_limits<double>::infinity();
    for (int i = 0; i < 3; ++i) best = std::min(best, clean_run());
    it = cache.emplace(ranks, best).first;
  }
  return it->second;
}

// ---- host --------------------------------------------------------------------------------------

class HostLoop : public LoopBackend {
 public:
  explicit HostLoop(const LoopSetup& setup) : setup_(setup) {}

  AttemptResult attempt(const AttemptPlan& plan, const std::vector<int>& active) override {
    return run(plan.ranks, active, plan.attempt, false);
  }

  double fault_free_seconds(const std::vector<int>& ranks) override {
    return best_clean_seconds(fault_free_, ranks, [&] { return run(ranks, {}, 0, true).seconds; });
  }

 private:
  AttemptResult run(const std::vector<int>& ranks, const std::vector<int>& active, int attempt, bool clean) {
    const auto m = static_cast<int>(ranks.size());
    const CollectiveSpec spec = setup_.spec(m);
    const RankFaults faults = rank_faults(setup_, active, ranks);
    const RecoveryPolicy& policy = setup_.scenario.recovery;
    // Buffers large enough for any spec a desynced rank may use.
    const SizeCounts counts = nccl_tests_counts(spec.collective, setup_.loop.size_bytes, spec.dtype, m);
    int64_t elements = std::max(counts.input_elements, counts.output_elements);
    for (int r : ranks) {
      if (auto other = setup_.injector->desync(active, r, spec)) elements = std::max(elements, other->count * m);
    }
    const auto bytes = static_cast<size_t>(elements * 8);
    require_host_memory(2.0 * m * static_cast<double>(bytes), fmt::format("the host backend for {} ranks", m));
    std::vector<std::unique_ptr<AlignedBuffer>> memory;
    std::vector<RankBuffers> buffers;
    for (int i = 0; i < m; ++i) {
      memory.push_back(std::make_unique<AlignedBuffer>(bytes));
      memory.push_back(std::make_unique<AlignedBuffer>(bytes));
      buffers.push_back(place_buffers(spec.collective, i, spec.count, spec.dtype, false, memory[2 * i]->data(),
                                      memory[2 * i + 1]->data()));
    }
    const CheckSpec check{spec.collective, spec.dtype, spec.op, 0, m, spec.count, static_cast<uint64_t>(attempt) + 1};
    fill_inputs(check, buffers);
    poison_outputs(check, buffers);

    const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(m), setup_.loop.algorithm);
    RunContext context;
    context.timeout = std::chrono::milliseconds(std::max<int64_t>(1, std::llround(policy.watchdog_s * 1e3)));
    context.checksums = policy.verify;
    if (!clean) {
      context.on_send = [&](int src, int dst, int64_t op) {
        return setup_.injector->transfer(active, ranks[static_cast<size_t>(src)], ranks[static_cast<size_t>(dst)], op);
      };
    }
    HostWorld world(m);
    std::vector<std::optional<Error>> errors(static_cast<size_t>(m));
    std::vector<std::thread> threads;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < m; ++i) {
      const int global = ranks[static_cast<size_t>(i)];
      if (!clean && setup_.injector->rank_action(active, global) != RankAction::kEnter) continue;
      threads.emplace_back([&, i, global] {
        try {
          const std::optional<CollectiveSpec> other =
              clean ? std::nullopt : setup_.injector->desync(active, global, spec);
          if (other) {
            const Schedule theirs =
                build_checked_schedule(*other, RankLayout::flat(m), default_algorithm(*other, RankLayout::flat(m)));
            world.run_rank(i, theirs, *other, buffers[static_cast<size_t>(i)], context);
          } else {
            world.run_rank(i, schedule, spec, buffers[static_cast<size_t>(i)], context);
          }
        } catch (const Error& error) {
          errors[static_cast<size_t>(i)] = error;
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    AttemptResult result;
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto has = [&](ErrorCode code) {
      return std::any_of(errors.begin(), errors.end(), [&](const auto& e) { return e && e->code() == code; });
    };
    auto first_message = [&] {
      for (const auto& e : errors) {
        if (e) return std::string(e->what());
      }
      return std::string();
    };
    if (has(ErrorCode::kDesync)) {
      result.status = Status::kDesync;
      result.message = faults.desync.value_or(first_message());
    } else if (!faults.missing.empty() || has(ErrorCode::kTimeout)) {
      result.status = Status::kStuck;
      result.failed_ranks = faults.missing;
      result.link_fault = faults.missing.empty() && any_link_fault(setup_, active);
      result.seconds = std::max(0.0, result.seconds - policy.watchdog_s);  // the driver adds the watchdog's wait
      result.message = faults.missing.empty()
                           ? first_message()
                           : fmt::format("rank(s) {} never arrived", fmt::join(faults.missing, ", "));
    } else if (has(ErrorCode::kFault)) {
      result.status = Status::kFailed;
      result.link_fault = any_link_fault(setup_, active);
      result.message = first_message();
    } else if (has(ErrorCode::kCorrupt)) {
      result.status = Status::kCorrupt;
      result.message = first_message();
    } else if (const std::string message = first_message(); !message.empty()) {
      fail(ErrorCode::kBackend, "host attempt failed: {}", message);
    } else if (policy.verify) {
      if (const int64_t wrong = count_wrong(check, buffers); wrong > 0) {
        result.status = Status::kCorrupt;
        result.message = fmt::format("{} wrong elements", wrong);
      }
    }
    return result;
  }

  const LoopSetup& setup_;
  std::map<std::vector<int>, double> fault_free_;
};

// ---- cuda, nccl: one Executor::run per attempt ---------------------------------------------------
//
// The device backends run a whole collective in one call, so rank faults become transfer faults: a
// rank that hangs or crashed never sends (its peers wait for it until the watchdog), which is what a
// GPU job sees. A desync is caught before launch: the ranks' collectives disagree, and NCCL given
// mismatched calls would hang or corrupt memory rather than report it.
class ExecutorLoop : public LoopBackend {
 public:
  ExecutorLoop(const LoopSetup& setup, std::unique_ptr<Executor> executor)
      : setup_(setup), executor_(std::move(executor)) {
    if (executor_->local_ranks(setup.nranks).size() < static_cast<size_t>(setup.nranks)) {
      fail(ErrorCode::kUnsupported,
           "tandem run drives every rank from one process; under mpirun / srun use tandem "
           "bench (docs/real-hardware.md)");
    }
  }

  AttemptResult attempt(const AttemptPlan& plan, const std::vector<int>& active) override {
    return run(plan.ranks, active, plan.attempt, false);
  }

  double fault_free_seconds(const std::vector<int>& ranks) override {
    return best_clean_seconds(fault_free_, ranks, [&] { return run(ranks, {}, 0, true).seconds; });
  }

 private:
  AttemptResult run(const std::vector<int>& ranks, const std::vector<int>& active, int attempt, bool clean) {
    const auto m = static_cast<int>(ranks.size());
    const CollectiveSpec spec = setup_.spec(m);
    const RecoveryPolicy& policy = setup_.scenario.recovery;
    AttemptResult result;
    const RankFaults faults = clean ? RankFaults{} : rank_faults(setup_, active, ranks);
    if (faults.desync) {
      result.status = Status::kDesync;
      result.message = *faults.desync;
      return result;
    }
    const SizeCounts counts = nccl_tests_counts(spec.collective, setup_.loop.size_bytes, spec.dtype, m);
    const int64_t element_bytes = static_cast<int64_t>(size_bytes(spec.dtype));
    const RunMemory memory(*executor_, m, static_cast<size_t>(counts.input_elements * element_bytes),
                           static_cast<size_t>(counts.output_elements * element_bytes));
    const std::vector<RankBuffers> buffers = memory.host(spec.collective, spec.count, spec.dtype, false);
    const CheckSpec check{spec.collective, spec.dtype, spec.op, 0, m, spec.count, static_cast<uint64_t>(attempt) + 1};
    fill_inputs(check, buffers);
    poison_outputs(check, buffers);
    memory.upload();

    const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(m), setup_.loop.algorithm);
    RunContext context;
    context.timeout = std::chrono::milliseconds(std::max<int64_t>(1, std::llround(policy.watchdog_s * 1e3)));
    context.checksums = policy.verify;
    std::vector<bool> missing(static_cast<size_t>(m), false);
    for (int r : faults.missing) {
      missing[static_cast<size_t>(std::find(ranks.begin(), ranks.end(), r) - ranks.begin())] = true;
    }
    if (!clean) {
      context.on_send = [&](int src, int dst, int64_t op) {
        if (missing[static_cast<size_t>(src)]) return TransferEffect{.stall = true};
        return setup_.injector->transfer(active, ranks[static_cast<size_t>(src)], ranks[static_cast<size_t>(dst)], op);
      };
    }
    const auto start = std::chrono::steady_clock::now();
    std::optional<Error> error;
    try {
      result.seconds =
          executor_->run(schedule, spec, memory.run(spec.collective, spec.count, spec.dtype, false), context).seconds;
    } catch (const Error& e) {
      error = e;
      result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (!faults.missing.empty() || (error && error->code() == ErrorCode::kTimeout)) {
      result.status = Status::kStuck;
      result.failed_ranks = faults.missing;
      result.link_fault = faults.missing.empty() && any_link_fault(setup_, active);
      result.seconds = std::max(0.0, result.seconds - policy.watchdog_s);  // the driver adds the watchdog's wait
      result.message = faults.missing.empty()
                           ? std::string(error ? error->what() : "")
                           : fmt::format("rank(s) {} never arrived", fmt::join(faults.missing, ", "));
    } else if (error && error->code() == ErrorCode::kFault) {
      result.status = Status::kFailed;
      result.link_fault = any_link_fault(setup_, active);
      result.message = error->what();
    } else if (error && error->code() == ErrorCode::kCorrupt) {
      result.status = Status::kCorrupt;
      result.message = error->what();
    } else if (error) {
      fail(ErrorCode::kBackend, "{} attempt failed: {}", executor_->name(), error->what());
    } else if (policy.verify) {
      memory.download();
      if (const int64_t wrong = count_wrong(check, buffers); wrong > 0) {
        result.status = Status::kCorrupt;
        result.message = fmt::format("{} wrong elements", wrong);
      }
    }
    return result;
  }

  const LoopSetup& setup_;
  std::unique_ptr<Executor> executor_;
  std::map<std::vector<int>, double> fault_free_;
};

// ---- sim ---------------------------------------------------------------------------------------

class SimLoop : public LoopBackend {
 public:
  explicit SimLoop(const LoopSetup& setup)
      : setup_(setup),
        sim_(setup.topology, setup.scenario.variants[0].cluster, network_model(setup.scenario.network)) {}

  AttemptResult attempt(const AttemptPlan& plan, const std::vector<int>& active) override {
    AttemptResult result;
    const RankFaults faults = rank_faults(setup_, active, plan.ranks);
    // A desync is caught when the ranks launch (as the host backend's signature check does).
    if (faults.desync) {
      result.status = Status::kDesync;
      result.message = *faults.desync;
      return result;
    }
    if (!faults.missing.empty()) {
      result.status = Status::kStuck;
      result.failed_ranks = faults.missing;
      result.message = fmt::format("rank(s) {} never arrived", fmt::join(faults.missing, ", "));
      return result;
    }
    sim_.set_dead_links(plan.rerouted ? setup_.dead_links() : std::vector<uint32_t>{});
    const Prepared& prepared = prepare(plan.ranks);
    // Dead links the schedule crosses: a flap errors out (noticed after the attempt's time), a
    // permanent failure stalls until the watchdog fires.
    for (int i : active) {
      const Fault& fault = setup_.scenario.faults.faults[static_cast<size_t>(i)];
      if (fault.kind != FaultKind::kLinkDown && fault.kind != FaultKind::kNicDown) continue;
      if (!crosses(prepared, setup_.fault_links.at(i))) continue;
      result.link_fault = true;
      result.message = fmt::format("{} carries this collective's traffic", fault.describe());
      if (fault.recover_after_s) {
        result.status = Status::kFailed;
        result.seconds = fault_free_seconds(plan.ranks);
      } else {
        result.status = Status::kStuck;
      }
      return result;
    }
    for (int i : active) {
      const Fault& fault = setup_.scenario.faults.faults[static_cast<size_t>(i)];
      const bool here = std::find(plan.ranks.begin(), plan.ranks.end(), fault.rank) != plan.ranks.end();
      if ((fault.kind == FaultKind::kTransient || fault.kind == FaultKind::kCorrupt) && here) {
        // No data in the simulator: the failure (or the checksum mismatch) shows at the end.
        if (fault.kind == FaultKind::kCorrupt && !setup_.scenario.recovery.verify) continue;
        result.status = fault.kind == FaultKind::kTransient ? Status::kFailed : Status::kCorrupt;
        result.seconds = fault_free_seconds(plan.ranks);
        result.message = fault.describe();
        return result;
      }
    }
    apply_slowdowns(active);
    // Nothing slows or reroutes this attempt: it is the fault-free collective, simulated once per
    // set of ranks, not again (op by op, a 16-channel ring simulated again differs by up to ~2%,
    // docs/simulator.md, which would show as a cost where no fault hit).
    result.seconds = sim_.faults_active() ? simulate(prepared) : fault_free_seconds(plan.ranks);
    clear_slowdowns(active);
    return result;
  }

  double fault_free_seconds(const std::vector<int>& ranks) override {
    auto it = fault_free_.find(ranks);
    if (it == fault_free_.end()) {
      sim_.set_dead_links({});
      it = fault_free_.emplace(ranks, simulate(prepare(ranks))).first;
    }
    return it->second;
  }

 private:
  struct Prepared {
    Schedule schedule;
    CollectiveSpec spec;
    std::vector<int> gpus;
    sim::Choice choice;
    std::set<std::pair<int, int>> pairs;  // GPU pairs that exchange messages
  };

  const Prepared& prepare(const std::vector<int>& ranks) {
    auto it = prepared_.find(ranks);
    if (it != prepared_.end()) return it->second;
    Prepared p;
    const auto m = static_cast<int>(ranks.size());
    p.spec = setup_.spec(m);
    for (int r : ranks) p.gpus.push_back(setup_.gpu_of_rank[static_cast<size_t>(r)]);
    // The survivors of a shrink keep the full ring's (rail-aligned) order, minus the dropped ranks,
    // as a topology-aware rebuild would: hops stay on NVLink or on one rail.
    const RankLayout full = sim::sweep_layout(setup_.topology.node_count(), setup_.per_node, true);
    RankLayout layout = full;
    if (m != setup_.nranks) {
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
    const sim::Tuner tuner(setup_.scenario.variants[0].cluster, setup_.topology.node_count(), setup_.per_node);
    p.choice = tuner.choose_for(p.spec.collective, setup_.loop.size_bytes, std::string(name(setup_.loop.algorithm)));
    // NCCL's channels for ring and tree: together they use every NIC of a node.
    AlgoParams params;
    if (setup_.loop.algorithm == Algorithm::kRing || setup_.loop.algorithm == Algorithm::kTree) {
      params.channels = p.choice.channels;
    }
    p.schedule = build_checked_schedule(p.spec, layout, setup_.loop.algorithm, params, ScheduleForm::kExplicit);
    for (int r = 0; r < m; ++r) {
      for (const Lane& lane : p.schedule.ranks[static_cast<size_t>(r)].lanes) {
        for (const Op& op : lane.ops) {
          if (op.kind == OpKind::kSend)
            p.pairs.emplace(p.gpus[static_cast<size_t>(r)], p.gpus[static_cast<size_t>(op.peer)]);
        }
      }
    }
    return prepared_.emplace(ranks, std::move(p)).first->second;
  }

  bool crosses(const Prepared& p, const std::vector<uint32_t>& links) const {
    for (const auto& [a, b] : p.pairs) {
      for (uint32_t link : links) {
        if (sim_.crosses(a, b, link)) return true;
      }
    }
    return false;
  }

  double simulate(const Prepared& p) {
    sim::SimRequest request{&p.schedule, p.spec, p.gpus, p.choice.protocol, p.choice.tiles};
    return sim_.run(request).seconds;
  }

  void apply_slowdowns(const std::vector<int>& active) {
    for (int i : active) {
      const Fault& fault = setup_.scenario.faults.faults[static_cast<size_t>(i)];
      if (fault.kind == FaultKind::kLinkDegrade) {
        for (uint32_t link : setup_.fault_links.at(i)) sim_.set_link_factor(link, fault.factor);
      } else if (fault.kind == FaultKind::kStraggler) {
        sim_.set_gpu_slowdown(setup_.gpu_of_rank[static_cast<size_t>(fault.rank)], fault.factor);
      }
    }
  }

  void clear_slowdowns(const std::vector<int>& active) {
    for (int i : active) {
      const Fault& fault = setup_.scenario.faults.faults[static_cast<size_t>(i)];
      if (fault.kind == FaultKind::kLinkDegrade) {
        for (uint32_t link : setup_.fault_links.at(i)) sim_.set_link_factor(link, 1.0);
      } else if (fault.kind == FaultKind::kStraggler) {
        sim_.set_gpu_slowdown(setup_.gpu_of_rank[static_cast<size_t>(fault.rank)], 1.0);
      }
    }
  }

  const LoopSetup& setup_;
  sim::Simulator sim_;
  std::map<std::vector<int>, Prepared> prepared_;
  std::map<std::vector<int>, double> fault_free_;
};

// ---- the driver --------------------------------------------------------------------------------

// The flight recorders of every rank, written the way ProcessGroupNCCL would: one entry per launch
// (a retry is a new launch), a new group after a shrink (ncclCommShrink makes a new communicator).
class Recorders {
 public:
  Recorders(const LoopSetup& setup, const LoopOptions& options, std::string comm_lib)
      : setup_(setup), config_(FrConfig::from_env()) {
    const Outputs& outputs = setup.scenario.outputs;
    if (outputs.fr_buffer_size) config_.capacity = *outputs.fr_buffer_size;
    if (outputs.dump_format) config_.format = *outputs.dump_format;
    if (config_.prefix.empty()) {
      const std::filesystem::path dir =
          options.out_dir.empty() ? std::filesystem::temp_directory_path() / fmt::format("tandem-fr-{}", getpid())
                                  : std::filesystem::path(options.out_dir) / "fr";
      config_.prefix = (dir / "rank_").string();
    }
    std::vector<int> all;
    for (int r = 0; r < setup.nranks; ++r) all.push_back(r);
    for (int r = 0; r < setup.nranks; ++r) {
      recorders_.push_back(std::make_unique<FlightRecorder>(r, config_.capacity, comm_lib));
    }
    new_group(all, "default_pg");
    alive_.assign(static_cast<size_t>(setup.nranks), true);
  }

  const FrConfig& config() const { return config_; }

  void new_group(const std::vector<int>& ranks, const std::string& desc) {
    group_ = FrGroup{std::to_string(groups_++), desc, ranks, -1, -1, -1};
    for (int r : ranks) recorders_[static_cast<size_t>(r)]->add_group(group_);
    seq_.assign(static_cast<size_t>(setup_.nranks), 0);
  }

  // Records the launch of `spec` on every rank that enters; returns (rank, record id) pairs.
  std::vector<std::pair<int, uint64_t>> launch(const std::vector<int>& ranks, const std::vector<int>& active,
                                               int64_t now_ns) {
    std::vector<std::pair<int, uint64_t>> ids;
    const CollectiveSpec spec = setup_.spec(static_cast<int>(ranks.size()));
    for (int r : ranks) {
      if (setup_.injector->rank_action(active, r) != RankAction::kEnter) continue;
      const CollectiveSpec issued = setup_.injector->desync(active, r, spec).value_or(spec);
      const int m = static_cast<int>(ranks.size());
      const SizeCounts counts = nccl_tests_counts(issued.collective, setup_.loop.size_bytes, issued.dtype, m);
      FrEntry entry;
      entry.pg_id = groups_ - 1;
      entry.pg_name = group_.name;
      entry.pg_desc = group_.desc;
      entry.collective_seq_id = ++seq_[static_cast<size_t>(r)];
      entry.op_id = entry.collective_seq_id;
      entry.profiling_name = fmt::format("nccl:{}", name(issued.collective));
      const int64_t in = issued.count == spec.count ? counts.input_elements : issued.count;
      const int64_t out = issued.count == spec.count ? counts.output_elements : issued.count;
      entry.input_sizes = {{in}};
      entry.output_sizes = {{out}};
      entry.input_dtypes = {std::string(torch_dtype_name(issued.dtype))};
      entry.output_dtypes = {std::string(torch_dtype_name(issued.dtype))};
      entry.time_created_ns = now_ns;
      entry.timeout_ms = std::llround(setup_.scenario.recovery.watchdog_s * 1e3);
      entry.thread_id = std::to_string(r);
      entry.thread_name = fmt::format("tandem rank {}", r);
      const uint64_t id = recorders_[static_cast<size_t>(r)]->record(entry);
      recorders_[static_cast<size_t>(r)]->started(id, now_ns);
      ids.emplace_back(r, id);
    }
    return ids;
  }

  void completed(const std::vector<std::pair<int, uint64_t>>& ids, int64_t now_ns) {
    for (const auto& [r, id] : ids) {
      recorders_[static_cast<size_t>(r)]->completed(id, now_ns);
      recorders_[static_cast<size_t>(r)]->retire(id);
    }
  }

  void crashed(int rank) { alive_[static_cast<size_t>(rank)] = false; }

  // Every live rank's dump (a crashed rank cannot write one).
  std::string dump() {
    if (config_.capacity == 0) return "";
    std::vector<FrDump> dumps;
    for (int r = 0; r < setup_.nranks; ++r) {
      if (!alive_[static_cast<size_t>(r)]) continue;
      FrDump d = recorders_[static_cast<size_t>(r)]->dump();
      d.rank = r;
      dumps.push_back(std::move(d));
    }
    write_dumps(dumps, config_.prefix, config_.format);
    return config_.prefix;
  }

 private:
  const LoopSetup& setup_;
  FrConfig config_;
  std::vector<std::unique_ptr<FlightRecorder>> recorders_;
  std::vector<bool> alive_;
  FrGroup group_;
  int groups_ = 0;
  std::vector<int64_t> seq_;
};

LoopResults drive(const LoopSetup& setup, LoopBackend& backend, const LoopOptions& options, ScenarioBackend which,
                  int64_t epoch_ns) {
  const Scenario& scenario = setup.scenario;
  LoopResults results;
  results.backend = which;
  results.ranks = setup.nranks;
  Recorders recorders(setup, options, fmt::format("tandem-{} {}", TANDEM_VERSION, name(which)));
  std::vector<int> ranks;
  for (int r = 0; r < setup.nranks; ++r) ranks.push_back(r);
  bool rerouted = false;
  double now_s = 0;
  auto ns = [&](double s) { return epoch_ns + static_cast<int64_t>(s * 1e9); };
  for (int k = 0; k < setup.loop.iterations; ++k) {
    IterationResult it;
    it.iteration = k;
    const double began = now_s;
    it.start_s = began;
    it.faults = setup.injector->active(k, 0, now_s, began, rerouted);
    it.fault_free_seconds = backend.fault_free_seconds(ranks);
    AttemptPlan last;
    const CollectiveOutcome outcome = run_resilient(
        scenario.recovery, ranks, now_s,
        [&](const AttemptPlan& plan) {
          AttemptPlan p = plan;
          p.rerouted = plan.rerouted || rerouted;
          if (p.ranks.size() < ranks.size() && last.ranks.size() != p.ranks.size()) {
            recorders.new_group(p.ranks, "shrunk");
          }
          last = p;
          const std::vector<int> active = setup.injector->active(k, p.attempt, p.start_s, began, p.rerouted);
          for (int r : rank_faults(setup, active, p.ranks).crashed) recorders.crashed(r);
          const auto ids = recorders.launch(p.ranks, active, ns(p.start_s));
          AttemptResult result = backend.attempt(p, active);
          const std::vector<int> missing = rank_faults(setup, active, p.ranks).missing;
          // The ranks in a stuck attempt wait in it until the watchdog fires (run_resilient adds
          // that wait after the attempt).
          const double waited = result.status == Status::kStuck ? scenario.recovery.watchdog_s : 0.0;
          for (int r : p.ranks) {
            if (std::find(missing.begin(), missing.end(), r) != missing.end()) continue;
            results.slices.push_back(
                {r, k, p.attempt, p.start_s, p.start_s + result.seconds + waited, result.status == Status::kOk});
          }
          if (result.status == Status::kOk) {
            recorders.completed(ids, ns(p.start_s + result.seconds));
          } else if ((result.status == Status::kFailed || result.status == Status::kCorrupt) &&
                     recorders.config().dump_on_timeout) {
            // Any backend error dumps, as PyTorch's watchdog does (later dumps overwrite earlier ones).
            const std::string prefix = recorders.dump();
            if (!prefix.empty()) {
              results.dump_prefix = prefix;
              results.dump_reasons.push_back(
                  fmt::format("iteration {} attempt {}: error: {}", k, p.attempt, result.message));
            }
          }
          return result;
        },
        [&](const std::string& reason) {
          if (!recorders.config().dump_on_timeout) return;  // TORCH_NCCL_DUMP_ON_TIMEOUT=0
          const std::string prefix = recorders.dump();
          if (!prefix.empty()) results.dump_prefix = prefix;
          results.dump_reasons.push_back(fmt::format("iteration {}: {}", k, reason));
        });
    it.outcome = outcome.outcome;
    it.seconds = outcome.seconds;
    it.attempts = outcome.attempts;
    it.dropped_ranks = outcome.dropped_ranks;
    it.rerouted = last.rerouted && !rerouted;
    it.detail = outcome.detail;
    now_s += outcome.seconds;
    rerouted = rerouted || last.rerouted;
    if (!outcome.dropped_ranks.empty()) ranks = last.ranks;
    results.iterations.push_back(it);
    if (outcome.outcome == Outcome::kAborted) {
      results.aborted = true;
      break;
    }
  }
  if (options.dump_on_exit || scenario.outputs.dumps) {
    const std::string prefix = recorders.dump();
    if (!prefix.empty()) {
      results.dump_prefix = prefix;
      results.dump_reasons.push_back("end of the run");
    }
  }
  return results;
}

json to_json(const LoopResults& r) {
  json iterations = json::array();
  for (const IterationResult& it : r.iterations) {
    iterations.push_back({{"iteration", it.iteration},
                          {"outcome", name(it.outcome)},
                          {"seconds", it.seconds},
                          {"fault_free_seconds", it.fault_free_seconds},
                          {"attempts", it.attempts},
                          {"dropped_ranks", it.dropped_ranks},
                          {"rerouted", it.rerouted},
                          {"faults", it.faults},
                          {"detail", it.detail},
                          {"start_s", it.start_s}});
  }
  json slices = json::array();
  for (const RankSlice& x : r.slices) slices.push_back({x.rank, x.iteration, x.attempt, x.start_s, x.end_s, x.ok});
  return {{"backend", name(r.backend)},
          {"ranks", r.ranks},
          {"aborted", r.aborted},
          {"iterations", iterations},
          {"dump_prefix", r.dump_prefix},
          {"dump_reasons", r.dump_reasons},
          {"slices", slices}};
}

LoopResults loop_from_json(const json& j) {
  LoopResults r;
  r.backend = parse_backend(j.at("backend").get<std::string>());
  r.ranks = j.at("ranks");
  r.aborted = j.at("aborted");
  r.dump_prefix = j.at("dump_prefix");
  r.dump_reasons = j.at("dump_reasons").get<std::vector<std::string>>();
  for (const json& row : j.at("iterations")) {
    IterationResult it;
    it.iteration = row.at("iteration");
    it.outcome = parse_outcome(row.at("outcome").get<std::string>());
    it.seconds = row.at("seconds");
    it.fault_free_seconds = row.at("fault_free_seconds");
    it.attempts = row.at("attempts");
    it.dropped_ranks = row.at("dropped_ranks").get<std::vector<int>>();
    it.rerouted = row.at("rerouted");
    it.faults = row.at("faults").get<std::vector<int>>();
    it.detail = row.at("detail");
    it.start_s = row.at("start_s");
    r.iterations.push_back(std::move(it));
  }
  for (const json& x : j.at("slices")) {
    r.slices.push_back({x.at(0).get<int>(), x.at(1).get<int>(), x.at(2).get<int>(), x.at(3).get<double>(),
                        x.at(4).get<double>(), x.at(5).get<bool>()});
  }
  return r;
}

int severity(Outcome outcome) {
  switch (outcome) {
    case Outcome::kCompleted:
      return 0;
    case Outcome::kCompletedAfterRetry:
      return 1;
    case Outcome::kRecoveredReroute:
      return 2;
    case Outcome::kRecoveredShrink:
      return 3;
    case Outcome::kAborted:
      return 4;
  }
  return 4;
}

std::string ranks_text(const std::vector<int>& ranks) { return fmt::format("[{}]", fmt::join(ranks, ", ")); }

// Microseconds for the report: rounding noise (1e-11 s) is not a "-0.0" cost.
double report_us(double seconds) {
  const double us = seconds * 1e6;
  return std::abs(us) < 0.05 ? 0.0 : us;
}

}  // namespace

double LoopResults::total_seconds() const {
  double total = 0;
  for (const IterationResult& it : iterations) total += it.seconds;
  return total;
}

double LoopResults::fault_free_seconds() const {
  double total = 0;
  for (const IterationResult& it : iterations) total += it.fault_free_seconds;
  return total;
}

LoopResults run_loop(const Scenario& scenario, ScenarioBackend backend, const LoopOptions& options) {
  if (!std::holds_alternative<CollectiveLoop>(scenario.workload)) {
    fail(ErrorCode::kInvalidArgument, "run_loop: the workload is not a collective-loop");
  }
  LoopResults results;
  const int64_t epoch =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (backend == ScenarioBackend::kHost && !options.executor) {
    const LoopSetup setup(scenario);
    HostLoop host(setup);
    results = drive(setup, host, options, backend, epoch);
  } else if (backend != ScenarioBackend::kSim) {
    const LoopSetup setup(scenario);
    ExecutorLoop device(setup, options.executor ? options.executor() : make_executor(name(backend)));
    results = drive(setup, device, options, backend, epoch);
  } else {
    // SimGrid allows one platform per process: the loop runs in a child; dumps are files anyway.
    results = loop_from_json(json::parse(sim::run_isolated([&] {
      const LoopSetup setup(scenario);
      SimLoop sim(setup);
      return to_json(drive(setup, sim, options, backend, 0)).dump();
    })));
  }
  if (!results.dump_prefix.empty()) {
    const std::filesystem::path prefix(results.dump_prefix);
    results.analysis = analyze(read_dump_dir(prefix.parent_path(), prefix.filename().string()));
  }
  return results;
}

std::vector<LoopExpectationOutcome> evaluate_loop_expectations(const Scenario& scenario, const LoopResults& results) {
  std::vector<LoopExpectationOutcome> out;
  for (const LoopExpectation& e : scenario.loop_expectations) {
    if (e.backend && *e.backend != results.backend) continue;
    LoopExpectationOutcome o;
    o.pass = true;
    std::vector<std::string> parts;
    const IterationResult* it = nullptr;
    if (e.iteration) {
      for (const IterationResult& r : results.iterations) {
        if (r.iteration == *e.iteration) it = &r;
      }
    }
    const std::string where = e.iteration ? fmt::format("iteration {}", *e.iteration) : "the loop";
    if (e.iteration && it == nullptr) {
      o.pass = false;
      parts.push_back(fmt::format("{} never ran (the loop aborted before it)", where));
    }
    if (e.outcome && (it != nullptr || !e.iteration)) {
      Outcome got = Outcome::kCompleted;
      if (it != nullptr) {
        got = it->outcome;
      } else {
        for (const IterationResult& r : results.iterations) {
          if (severity(r.outcome) > severity(got)) got = r.outcome;
        }
      }
      const bool ok = got == *e.outcome;
      o.pass = o.pass && ok;
      parts.push_back(fmt::format("{} outcome {} (expected {})", where, name(got), name(*e.outcome)));
    }
    if (e.culprit_ranks) {
      std::vector<int> got = results.analysis ? results.analysis->culprit_ranks : std::vector<int>{};
      std::sort(got.begin(), got.end());
      std::vector<int> want = *e.culprit_ranks;
      std::sort(want.begin(), want.end());
      o.pass = o.pass && got == want;
      parts.push_back(fmt::format("flight-recorder culprit {} (expected {})", ranks_text(got), ranks_text(want)));
    }
    auto check = [&](const Bound& bound, double value, std::string_view what) {
      if (!bound.set()) return;
      const bool ok = (!bound.min || value >= *bound.min) && (!bound.max || value <= *bound.max);
      o.pass = o.pass && ok;
      parts.push_back(fmt::format("{} {} {:.1f} us (expected {}{})", where, what, value,
                                  bound.min ? fmt::format(">= {:g}", *bound.min) : "",
                                  bound.max ? fmt::format("{}<= {:g}", bound.min ? ", " : "", *bound.max) : ""));
    };
    const double time_s = it != nullptr ? it->seconds : results.total_seconds();
    const double free_s = it != nullptr ? it->fault_free_seconds : results.fault_free_seconds();
    check(e.time_us, time_s * 1e6, "time");
    check(e.cost_us, (time_s - free_s) * 1e6, "cost");
    o.line = fmt::format("{} line {}: {}", o.pass ? "PASS" : "FAIL", e.mark.line, fmt::join(parts, "; "));
    out.push_back(std::move(o));
  }
  return out;
}

std::string format_loop_report(const Scenario& scenario, const LoopResults& results,
                               const std::vector<LoopExpectationOutcome>& outcomes, bool quiet) {
  const CollectiveLoop& loop = std::get<CollectiveLoop>(scenario.workload);
  std::string text;
  if (quiet) {
    text += "Expectations:\n";
    for (const LoopExpectationOutcome& o : outcomes) text += "  " + o.line + "\n";
    if (outcomes.empty()) text += fmt::format("  none (the loop {})\n", results.aborted ? "ABORTED" : "completed");
    return text;
  }
  text += fmt::format("Workload: {} x {} {} {} on {} ranks ({} backend)\n", loop.iterations, name(loop.collective),
                      format_size(loop.size_bytes), name(loop.algorithm), results.ranks, name(results.backend));
  text +=
      fmt::format("Recovery: retry {} (backoff {:g} us), watchdog {:g} ms, then {}{}\n", scenario.recovery.retry_max,
                  scenario.recovery.backoff_s * 1e6, scenario.recovery.watchdog_s * 1e3, name(scenario.recovery.action),
                  scenario.recovery.verify ? ", checksums on" : "");
  if (scenario.faults.empty()) {
    text += "Faults: none\n";
  } else {
    text += "Faults:\n";
    for (size_t i = 0; i < scenario.faults.faults.size(); ++i) {
      std::vector<int> hit;
      for (const IterationResult& it : results.iterations) {
        if (std::find(it.faults.begin(), it.faults.end(), static_cast<int>(i)) != it.faults.end())
          hit.push_back(it.iteration);
      }
      text += fmt::format(
          "  #{} {}: {}\n", i, scenario.faults.faults[i].describe(),
          hit.empty() ? std::string("never hit") : fmt::format("hit iteration(s) {}", fmt::join(hit, ", ")));
    }
  }
  text += "\n iter  outcome                 attempts    time (us)  fault-free (us)    cost (us)  note\n";
  for (const IterationResult& it : results.iterations) {
    std::string note;
    if (!it.dropped_ranks.empty()) note += fmt::format("dropped rank(s) {} ", fmt::join(it.dropped_ranks, ", "));
    if (it.rerouted) note += "rerouted ";
    if (it.outcome != Outcome::kCompleted) note += it.detail;
    text += fmt::format(" {:>4}  {:<22} {:>9} {:>12.1f} {:>16.1f} {:>12.1f}  {}\n", it.iteration, name(it.outcome),
                        it.attempts, report_us(it.seconds), report_us(it.fault_free_seconds),
                        report_us(it.seconds - it.fault_free_seconds), note);
  }
  text += fmt::format("Total: {:.1f} us, fault-free {:.1f} us, faults cost {:.1f} us{}\n",
                      report_us(results.total_seconds()), report_us(results.fault_free_seconds()),
                      report_us(results.total_seconds() - results.fault_free_seconds()),
                      results.aborted ? "; the loop ABORTED" : "");
  if (!results.dump_prefix.empty()) {
    text += fmt::format("Flight-recorder dumps: {}<rank> ({})\n", results.dump_prefix,
                        fmt::join(results.dump_reasons, "; "));
  }
  if (results.analysis) text += fmt::format("Flight-recorder analysis: {}\n", results.analysis->verdict);
  if (!outcomes.empty()) {
    text += "\nExpectations:\n";
    for (const LoopExpectationOutcome& o : outcomes) text += "  " + o.line + "\n";
  }
  return text;
}

std::string loop_results_csv(const LoopResults& results) {
  std::string csv = "iteration,outcome,attempts,time_us,fault_free_us,cost_us,dropped_ranks,rerouted,faults,detail\n";
  for (const IterationResult& it : results.iterations) {
    csv += fmt::format("{},{},{},{:.3f},{:.3f},{:.3f},{},{},{},{}\n", it.iteration, name(it.outcome), it.attempts,
                       report_us(it.seconds), report_us(it.fault_free_seconds),
                       report_us(it.seconds - it.fault_free_seconds),
                       csv_field(fmt::format("{}", fmt::join(it.dropped_ranks, " "))), it.rerouted ? "true" : "false",
                       csv_field(fmt::format("{}", fmt::join(it.faults, " "))), csv_field(it.detail));
  }
  return csv;
}

std::string loop_results_json(const Scenario& scenario, const LoopResults& results,
                              const std::vector<LoopExpectationOutcome>& outcomes) {
  json j = to_json(results);
  j["scenario"] = scenario.name;
  j["description"] = scenario.description;
  const CollectiveLoop& loop = std::get<CollectiveLoop>(scenario.workload);
  j["workload"] = fmt::format("{} x {} {} {} on {} ranks", loop.iterations, name(loop.collective),
                              format_size(loop.size_bytes), name(loop.algorithm), results.ranks);
  j["recovery"] = fmt::format("retry {}, watchdog {:g} ms, then {}", scenario.recovery.retry_max,
                              scenario.recovery.watchdog_s * 1e3, name(scenario.recovery.action));
  j["total_seconds"] = results.total_seconds();
  j["fault_free_seconds"] = results.fault_free_seconds();
  json faults = json::array();
  for (const Fault& f : scenario.faults.faults) faults.push_back(f.describe());
  j["faults"] = faults;
  if (results.analysis) {
    j["analysis"] = json::parse(format_json(*results.analysis));
  }
  json expectations = json::array();
  for (const LoopExpectationOutcome& o : outcomes) expectations.push_back({{"pass", o.pass}, {"line", o.line}});
  j["expectations"] = expectations;
  return j.dump(2);
}

}  // namespace tandem::app
