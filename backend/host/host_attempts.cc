#include "backend/host/host_attempts.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "backend/host/host_executor.h"
#include "core/algorithms.h"
#include "core/data_check.h"
#include "core/host_memory.h"
#include "core/sizes.h"

namespace tandem {

AttemptResult HostAttempts::attempt(const AttemptPlan& plan, const std::vector<int>& active) {
  return run(plan.ranks, active, plan.attempt, false);
}

double HostAttempts::fault_free_seconds(const std::vector<int>& ranks) {
  return fault_free_.get(ranks, [&] { return run(ranks, {}, 0, true).seconds; });
}

AttemptResult HostAttempts::run(const std::vector<int>& ranks, const std::vector<int>& active, int attempt,
                                bool clean) {
  const auto m = static_cast<int>(ranks.size());
  const CollectiveSpec spec = session_.spec(m);
  const SessionConfig& config = session_.config();
  const FaultInjector& injector = session_.injector();
  const RankFaults faults = session_.rank_faults(active, ranks);
  // Buffers large enough for any spec a desynced rank may use.
  const SizeCounts counts = nccl_tests_counts(spec.collective, config.work.size_bytes, spec.dtype, m);
  int64_t elements = std::max(counts.input_elements, counts.output_elements);
  for (int r : ranks) {
    if (auto other = injector.desync(active, r, spec)) elements = std::max(elements, other->count * m);
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

  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(m), config.work.algorithm);
  RunContext context;
  context.timeout = watchdog_timeout(config.recovery);
  context.checksums = config.recovery.verify;
  if (!clean) {
    context.on_send = [&](int src, int dst, int64_t op) {
      return injector.transfer(active, ranks[static_cast<size_t>(src)], ranks[static_cast<size_t>(dst)], op);
    };
  }
  HostWorld world(m);
  std::vector<std::optional<Error>> errors(static_cast<size_t>(m));
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < m; ++i) {
    const int global = ranks[static_cast<size_t>(i)];
    if (!clean && injector.rank_action(active, global) != RankAction::kEnter) continue;
    threads.emplace_back([&, i, global] {
      try {
        const std::optional<CollectiveSpec> other = clean ? std::nullopt : injector.desync(active, global, spec);
        if (other) {
          const RankLayout flat = RankLayout::flat(m);
          const Schedule theirs = build_checked_schedule(*other, flat, default_algorithm(*other, flat));
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
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  AttemptResult result = attempt_outcome(session_, active, clean ? RankFaults{} : faults, errors, seconds, "host");
  if (result.status == AttemptResult::Status::kOk && config.recovery.verify) {
    if (const int64_t wrong = count_wrong(check, buffers); wrong > 0) {
      result.status = AttemptResult::Status::kCorrupt;
      result.message = fmt::format("{} wrong elements", wrong);
    }
  }
  return result;
}

}  // namespace tandem
