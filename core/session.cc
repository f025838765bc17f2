#include "core/session.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/algorithms.h"
#include "core/data_check.h"
#include "core/run_memory.h"
#include "core/sizes.h"
#include "core/torch_names.h"

namespace tandem {

using Status = AttemptResult::Status;

CollectiveSpec SessionWork::spec(int nranks) const {
  const SizeCounts counts = nccl_tests_counts(collective, size_bytes, dtype, nranks);
  return CollectiveSpec{collective, counts.count, dtype, op, 0, nranks};
}

std::chrono::milliseconds watchdog_timeout(const RecoveryPolicy& policy) {
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(policy.watchdog_s * 1e3)));
}

// ---- the recorders -------------------------------------------------------------------------------

class Session::Recorders {
 public:
  Recorders(const Session& session) : session_(session), config_(session.config().recorder) {
    // A run owns its dumps: an earlier run's at the same prefix would be read as this job's ranks.
    if (config_.capacity > 0) remove_dumps(config_.prefix);
    const int n = session.config().nranks;
    std::vector<int> all;
    for (int r = 0; r < n; ++r) {
      all.push_back(r);
      recorders_.push_back(std::make_unique<FlightRecorder>(r, config_.capacity, session.config().comm_lib));
    }
    new_group(all, "default_pg");
    alive_.assign(static_cast<size_t>(n), true);
  }

  const FrConfig& config() const { return config_; }

  void new_group(const std::vector<int>& ranks, const std::string& desc) {
    group_ = FrGroup{std::to_string(groups_), desc, ranks, -1, -1, -1, groups_};
    ++groups_;
    for (int r : ranks) recorders_[static_cast<size_t>(r)]->add_group(group_);
    seq_.assign(static_cast<size_t>(session_.config().nranks), 0);
  }

  // Records the launch on every rank of `ranks` that enters; returns (rank, record id) pairs.
  std::vector<std::pair<int, uint64_t>> launch(const std::vector<int>& ranks, const std::vector<int>& active,
                                               int64_t now_ns) {
    std::vector<std::pair<int, uint64_t>> ids;
    const int m = static_cast<int>(ranks.size());
    const CollectiveSpec spec = session_.spec(m);
    const FaultInjector& injector = session_.injector();
    for (int r : ranks) {
      if (injector.rank_action(active, r) != RankAction::kEnter) continue;
      const CollectiveSpec issued = injector.desync(active, r, spec).value_or(spec);
      const SizeCounts counts =
          nccl_tests_counts(issued.collective, session_.config().work.size_bytes, issued.dtype, m);
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
      entry.timeout_ms = std::llround(session_.config().recovery.watchdog_s * 1e3);
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
  bool any_alive() const { return std::find(alive_.begin(), alive_.end(), true) != alive_.end(); }

  // Every live rank's dump; the prefix, or "" when recording is off or no rank is alive.
  std::string dump() {
    if (config_.capacity == 0 || !any_alive()) return "";
    std::vector<FrDump> dumps;
    for (size_t r = 0; r < recorders_.size(); ++r) {
      if (!alive_[r]) continue;
      FrDump d = recorders_[r]->dump();
      d.rank = static_cast<int>(r);
      dumps.push_back(std::move(d));
    }
    write_dumps(dumps, config_.prefix, config_.format);
    return config_.prefix;
  }

 private:
  const Session& session_;
  FrConfig config_;
  std::vector<std::unique_ptr<FlightRecorder>> recorders_;
  std::vector<bool> alive_;
  FrGroup group_;
  int groups_ = 0;
  std::vector<int64_t> seq_;
};

// ---- the session ---------------------------------------------------------------------------------

Session::Session(SessionConfig config, const FaultInjector& injector)
    : config_(std::move(config)), injector_(injector) {
  if (config_.nranks < 1) fail(ErrorCode::kInvalidArgument, "a session needs at least one rank");
  recorders_ = std::make_unique<Recorders>(*this);
  for (int r = 0; r < config_.nranks; ++r) ranks_.push_back(r);
}

Session::~Session() = default;

RankFaults Session::rank_faults(const std::vector<int>& active, const std::vector<int>& ranks) const {
  RankFaults out;
  const CollectiveSpec expected = spec(static_cast<int>(ranks.size()));
  for (int r : ranks) {
    const RankAction action = injector_.rank_action(active, r);
    if (action != RankAction::kEnter) out.missing.push_back(r);
    if (action == RankAction::kCrash) out.crashed.push_back(r);
    if (auto other = injector_.desync(active, r, expected)) {
      out.desync = fmt::format("rank {} issued {} of {} {} elements", r, name(other->collective), other->count,
                               name(other->dtype));
    }
  }
  return out;
}

bool Session::any_link_fault(const std::vector<int>& active) const {
  return std::any_of(active.begin(), active.end(),
                     [&](int i) { return injector_.plan().faults[static_cast<size_t>(i)].is_link_fault(); });
}

AttemptResult Session::run_attempt(AttemptRunner& runner, int k, double began, const AttemptPlan& plan) {
  AttemptPlan p = plan;
  p.rerouted = plan.rerouted || rerouted_;
  if (p.ranks.size() < ranks_.size() && last_.ranks.size() != p.ranks.size()) recorders_->new_group(p.ranks, "shrunk");
  last_ = p;
  auto ns = [&](double s) { return config_.epoch_ns + static_cast<int64_t>(s * 1e9); };
  const std::vector<int> active = injector_.active(k, p.attempt, p.start_s, began, p.rerouted);
  const RankFaults faults = rank_faults(active, p.ranks);
  for (int r : faults.crashed) recorders_->crashed(r);
  const auto ids = recorders_->launch(p.ranks, active, ns(p.start_s));
  AttemptResult result = runner.attempt(p, active);
  if (result.fault) {
    result.fault->sequence = k;
    result.fault->bytes = config_.work.size_bytes;
    result.fault->seconds = result.seconds;
  }
  // The ranks in a stuck attempt wait in it until the watchdog fires (run_resilient adds that wait
  // after the attempt).
  const double waited = result.status == Status::kStuck ? config_.recovery.watchdog_s : 0.0;
  for (int r : p.ranks) {
    if (std::find(faults.missing.begin(), faults.missing.end(), r) != faults.missing.end()) continue;
    slices_.push_back({r, k, p.attempt, p.start_s, p.start_s + result.seconds + waited, result.status == Status::kOk});
  }
  if (result.status == Status::kOk) {
    recorders_->completed(ids, ns(p.start_s + result.seconds));
  } else if (result.status == Status::kFailed || result.status == Status::kCorrupt) {
    // Any backend error dumps, as PyTorch's watchdog does (later dumps overwrite earlier ones).
    dump_after(fmt::format("iteration {} attempt {}: error: {}", k, p.attempt, result.message));
  }
  return result;
}

void Session::dump_after(const std::string& reason) {
  if (!recorders_->config().dump_on_timeout) return;  // TORCH_NCCL_DUMP_ON_TIMEOUT=0
  dump(reason);
}

void Session::dump(const std::string& reason) {
  const std::string prefix = recorders_->dump();
  if (!prefix.empty()) {
    dump_prefix_ = prefix;
    dump_reasons_.push_back(reason);
  } else if (recorders_->config().capacity > 0 && !recorders_->any_alive()) {
    dump_note_ = "none written: every rank had crashed, no survivor could write one";
  }
}

bool Session::run_next(AttemptRunner& runner) {
  const int k = static_cast<int>(iterations_.size());
  if (aborted_ || k >= config_.iterations) return false;
  IterationResult it;
  it.iteration = k;
  const double began = now_s_;
  it.start_s = began;
  it.faults = injector_.active(k, 0, now_s_, began, rerouted_);
  it.fault_free_seconds = runner.fault_free_seconds(ranks_);
  last_ = AttemptPlan{};
  const CollectiveOutcome outcome = run_resilient(
      config_.recovery, ranks_, now_s_, [&](const AttemptPlan& plan) { return run_attempt(runner, k, began, plan); },
      [&](const std::string& reason) { dump_after(fmt::format("iteration {}: {}", k, reason)); });
  it.outcome = outcome.outcome;
  it.seconds = outcome.seconds;
  it.attempts = outcome.attempts;
  it.dropped_ranks = outcome.dropped_ranks;
  it.rerouted = last_.rerouted && !rerouted_;
  it.detail = outcome.detail;
  now_s_ += outcome.seconds;
  rerouted_ = rerouted_ || last_.rerouted;
  if (!outcome.dropped_ranks.empty()) ranks_ = last_.ranks;
  iterations_.push_back(std::move(it));
  aborted_ = outcome.outcome == Outcome::kAborted;
  return !aborted_ && k + 1 < config_.iterations;
}

// ---- how an attempt ended ------------------------------------------------------------------------

namespace {

// The report an attempt's error carries, or one made from its code and words (a backend error
// without a report: a device timeout, a failed kernel).
FaultReport report_of(const Error& error, const std::string& backend) {
  if (error.report() != nullptr) return *error.report();
  FaultReport report{.backend = backend, .note = error.what()};
  switch (error.code()) {
    case ErrorCode::kFault: report.kind = FaultReport::Kind::kSendFailed; break;
    case ErrorCode::kCorrupt: report.kind = FaultReport::Kind::kCorrupt; break;
    case ErrorCode::kDesync: report.kind = FaultReport::Kind::kDesync; break;
    default: report.kind = FaultReport::Kind::kStalled; break;
  }
  return report;
}

}  // namespace

AttemptResult attempt_outcome(const Session& session, const std::vector<int>& active, const RankFaults& faults,
                              const std::vector<std::optional<Error>>& errors, double seconds,
                              const std::string& backend) {
  AttemptResult result;
  result.seconds = seconds;
  const auto first = [&](std::optional<ErrorCode> code) -> const Error* {
    for (const auto& e : errors) {
      if (e && (!code || e->code() == *code)) return &*e;
    }
    return nullptr;
  };
  if (faults.desync || first(ErrorCode::kDesync)) {
    result.status = Status::kDesync;
    result.fault = faults.desync ? FaultReport{.kind = FaultReport::Kind::kDesync, .backend = backend,
                                               .note = *faults.desync}
                                 : report_of(*first(ErrorCode::kDesync), backend);
  } else if (!faults.missing.empty() || first(ErrorCode::kTimeout)) {
    result.status = Status::kStuck;
    result.failed_ranks = faults.missing;
    result.link_fault = faults.missing.empty() && session.any_link_fault(active);
    result.seconds = std::max(0.0, seconds - session.config().recovery.watchdog_s);
    result.fault = faults.missing.empty()
                       ? report_of(*first(ErrorCode::kTimeout), backend)
                       : FaultReport{.kind = FaultReport::Kind::kAbsent, .backend = backend, .absent = faults.missing};
  } else if (const Error* fault = first(ErrorCode::kFault)) {
    result.status = Status::kFailed;
    result.link_fault = session.any_link_fault(active);
    result.fault = report_of(*fault, backend);
  } else if (const Error* corrupt = first(ErrorCode::kCorrupt)) {
    result.status = Status::kCorrupt;
    result.fault = report_of(*corrupt, backend);
  } else if (const Error* other = first(std::nullopt)) {
    fail(ErrorCode::kBackend, "{} attempt failed: {}", backend, other->what());
  }
  if (result.fault) result.message = result.fault->text();
  return result;
}

// ---- what an attempt runs with -------------------------------------------------------------------

AttemptSetup::AttemptSetup(const Session& session, const std::vector<int>& ranks, const std::vector<int>& active,
                           int attempt, bool clean)
    : spec(session.spec(static_cast<int>(ranks.size()))),
      faults(clean ? RankFaults{} : session.rank_faults(active, ranks)),
      schedule(build_checked_schedule(spec, RankLayout::flat(spec.nranks), session.config().work.algorithm)),
      check{spec.collective, spec.dtype, spec.op, 0, spec.nranks, spec.count, static_cast<uint64_t>(attempt) + 1},
      verify(session.config().recovery.verify) {
  context.timeout = watchdog_timeout(session.config().recovery);
  context.checksums = verify;
  if (clean) return;
  std::vector<bool> missing(ranks.size(), false);
  for (int r : faults.missing) {
    missing[static_cast<size_t>(std::find(ranks.begin(), ranks.end(), r) - ranks.begin())] = true;
  }
  const FaultInjector& injector = session.injector();
  context.on_send = [&injector, ranks, active, missing](int src, int dst, int64_t op) {
    if (missing[static_cast<size_t>(src)]) return TransferEffect{.stall = true};
    return injector.transfer(active, ranks[static_cast<size_t>(src)], ranks[static_cast<size_t>(dst)], op);
  };
}

void AttemptSetup::prepare(std::span<const RankBuffers> host_buffers) const {
  fill_inputs(check, host_buffers);
  poison_outputs(check, host_buffers);
}

void AttemptSetup::check_outputs(AttemptResult& result, std::span<const RankBuffers> host_buffers,
                                 const std::string& backend) const {
  if (result.status != Status::kOk || !verify) return;
  if (const int64_t wrong = count_wrong(check, host_buffers); wrong > 0) {
    result.status = Status::kCorrupt;
    result.fault = FaultReport{.kind = FaultReport::Kind::kCorrupt,
                               .backend = backend,
                               .note = fmt::format("{} wrong elements", wrong)};
    result.message = result.fault->text();
  }
}

// ---- any executor ----------------------------------------------------------------------------------

ExecutorAttempts::ExecutorAttempts(const Session& session, Executor& executor)
    : session_(session), executor_(executor) {
  const int n = session.config().nranks;
  if (executor_.local_ranks(n).size() < static_cast<size_t>(n)) {
    fail(ErrorCode::kUnsupported,
         "tandem run drives every rank from one process; under mpirun / srun use tandem "
         "bench (docs/real-hardware.md)");
  }
}

AttemptResult ExecutorAttempts::attempt(const AttemptPlan& plan, const std::vector<int>& active) {
  return run(plan.ranks, active, plan.attempt, false);
}

double ExecutorAttempts::fault_free_seconds(const std::vector<int>& ranks) {
  return fault_free_.get(ranks, [&] { return run(ranks, {}, 0, true).seconds; });
}

AttemptResult ExecutorAttempts::run(const std::vector<int>& ranks, const std::vector<int>& active, int attempt,
                                    bool clean) {
  const AttemptSetup setup(session_, ranks, active, attempt, clean);
  const CollectiveSpec& spec = setup.spec;
  const SessionConfig& config = session_.config();
  if (setup.faults.desync) return attempt_outcome(session_, active, setup.faults, {}, 0.0, executor_.name());
  // Buffers, inputs and the reference check for an executor that moves data; none for one that
  // only times the schedule (sim).
  const bool data = executor_.moves_data();
  const int m = spec.nranks;
  const SizeCounts counts = nccl_tests_counts(spec.collective, config.work.size_bytes, spec.dtype, m);
  const int64_t element_bytes = static_cast<int64_t>(size_bytes(spec.dtype));
  std::optional<RunMemory> memory;
  std::vector<RankBuffers> buffers(static_cast<size_t>(m));
  if (data) {
    memory.emplace(executor_, m, static_cast<size_t>(counts.input_elements * element_bytes),
                   static_cast<size_t>(counts.output_elements * element_bytes));
    buffers = memory->host(spec.collective, spec.count, spec.dtype, false);
    setup.prepare(buffers);
    memory->upload();
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::optional<Error>> errors(1);
  double seconds = 0;
  try {
    const std::vector<RankBuffers> run_buffers =
        data ? memory->run(spec.collective, spec.count, spec.dtype, false) : buffers;
    seconds = executor_.run(setup.schedule, spec, run_buffers, setup.context).seconds;
  } catch (const Error& e) {
    errors[0] = e;
    if (executor_.wall_clock()) {
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } else {
      // A simulated backend replays a failure's outcome, not its time, and its clock is not the
      // host's: a stuck attempt lasts until the watchdog fires (attempt_outcome takes the watchdog
      // off again); a failed or corrupt one shows at the end of the collective, as SimAttempts
      // times it (sim/sim_attempts.cc): its fault-free simulated time.
      seconds = clean ? 0.0 : e.code() == ErrorCode::kTimeout ? config.recovery.watchdog_s : fault_free_seconds(ranks);
    }
  }
  AttemptResult result = attempt_outcome(session_, active, setup.faults, errors, seconds, executor_.name());
  if (result.status == Status::kOk && data && setup.verify) {
    memory->download();
    setup.check_outputs(result, buffers, executor_.name());
  }
  return result;
}

}  // namespace tandem
