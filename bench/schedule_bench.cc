// Schedule build, validate() and symbolic_check() time for large all_reduce schedules (the
// simulator needs big schedules fast). Ring is measured in its rank-symmetric form (one program
// for all positions, what large simulations use) and, at 1,024 ranks, in its explicit form.
//
//   build/release/bench/tandem_schedule_bench                       # everything
//   build/release/bench/tandem_schedule_bench --benchmark_filter=16384
#include <benchmark/benchmark.h>

#include "core/algorithms.h"
#include "core/validate.h"

namespace tandem {
namespace {

enum class Phase { kBuild, kValidate, kSymbolicCheck, kAll };

void run(benchmark::State& state, Algorithm algorithm, ScheduleForm form, Phase phase) {
  const int n = static_cast<int>(state.range(0));
  const CollectiveSpec spec{Collective::kAllReduce, 0, DataType::kF32, ReduceOp::kSum, 0, n};
  const RankLayout layout = RankLayout::flat(n);
  Schedule prepared = build_schedule(spec, layout, algorithm, {}, form);
  if (phase == Phase::kSymbolicCheck) validate(prepared);
  for (auto _ : state) {
    switch (phase) {
      case Phase::kBuild: benchmark::DoNotOptimize(build_schedule(spec, layout, algorithm, {}, form).ranks.data()); break;
      case Phase::kValidate: validate(prepared); break;
      case Phase::kSymbolicCheck: symbolic_check(prepared); break;
      case Phase::kAll: benchmark::DoNotOptimize(build_checked_schedule(spec, layout, algorithm, {}, form).num_rounds);
    }
  }
  state.counters["ops"] = static_cast<double>(prepared.op_count());
}

#define TANDEM_PHASES(label, algorithm, form, ...)                                                           \
  BENCHMARK_CAPTURE(run, label/build, algorithm, form, Phase::kBuild)->__VA_ARGS__;                          \
  BENCHMARK_CAPTURE(run, label/validate, algorithm, form, Phase::kValidate)->__VA_ARGS__;                    \
  BENCHMARK_CAPTURE(run, label/symbolic_check, algorithm, form, Phase::kSymbolicCheck)->__VA_ARGS__;        \
  BENCHMARK_CAPTURE(run, label/build+validate+check, algorithm, form, Phase::kAll)->__VA_ARGS__

TANDEM_PHASES(ring_symmetric, Algorithm::kRing, ScheduleForm::kSymmetric,
              Arg(1024)->Arg(16384)->Unit(benchmark::kMillisecond)->MinTime(1.0));
TANDEM_PHASES(ring_explicit, Algorithm::kRing, ScheduleForm::kExplicit,
              Arg(1024)->Unit(benchmark::kMillisecond)->Iterations(3));
TANDEM_PHASES(tree, Algorithm::kTree, ScheduleForm::kExplicit,
              Arg(1024)->Arg(16384)->Unit(benchmark::kMillisecond)->MinTime(1.0));

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
