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
  const AttemptSetup setup(session_, ranks, active, attempt, clean);
  const CollectiveSpec& spec = setup.spec;
  const int m = spec.nranks;
  const FaultInjector& injector = session_.injector();
  // Buffers large enough for any spec a desynced rank may use.
  const SizeCounts counts = nccl_tests_counts(spec.collective, session_.config().work.size_bytes, spec.dtype, m);
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
  setup.prepare(buffers);

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
          world.run_rank(i, theirs, *other, buffers[static_cast<size_t>(i)], setup.context);
        } else {
          world.run_rank(i, setup.schedule, spec, buffers[static_cast<size_t>(i)], setup.context);
        }
      } catch (const Error& error) {
        errors[static_cast<size_t>(i)] = error;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  AttemptResult result = attempt_outcome(session_, active, setup.faults, errors, seconds, "host");
  setup.check_outputs(result, buffers, "host");
  return result;
}

}  // namespace tandem
