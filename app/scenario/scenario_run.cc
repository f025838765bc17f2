#include "app/scenario/scenario_run.h"

#include "core/host_memory.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>

#include <fmt/format.h>

#include "app/run/backends.h"
#include "core/data_check.h"
#include "app/common/common.h"
#include "core/host_memory.h"
#include "app/common/nccl_tests_table.h"
#include "core/run_memory.h"
#include "core/communicator.h"
#include "core/error.h"
#include "models/nccl_protocol.h"

namespace tandem::app {

std::string_view name(PointStatus status) {
  switch (status) {
    case PointStatus::kOk:
      return "ok";
    case PointStatus::kNotApplicable:
      return "n/a";
    case PointStatus::kSkipped:
      return "skipped";
    case PointStatus::kWrongData:
      return "wrong";
  }
  return "?";
}

std::string_view name(ExpectationVerdict verdict) {
  switch (verdict) {
    case ExpectationVerdict::kPass:
      return "PASS";
    case ExpectationVerdict::kFail:
      return "FAIL";
    case ExpectationVerdict::kSkip:
      return "SKIP";
  }
  return "?";
}

const PointResult* ScenarioResults::find(std::string_view variant, Collective collective, std::string_view algorithm,
                                         int64_t size_bytes) const {
  for (const PointResult& point : points) {
    if (point.variant == variant && point.collective == collective && point.algorithm == algorithm &&
        point.size_bytes == size_bytes) {
      return &point;
    }
  }
  return nullptr;
}

int sweep_ranks(const ClusterVariant& variant, const CollectiveSweep& sweep) {
  const int per_node = sweep.gpus_per_node > 0 ? sweep.gpus_per_node : variant.cluster.gpus_per_node;
  return variant.cluster.nodes * per_node;
}

namespace {

// Rooted collectives run with root 0 in a sweep.
constexpr int kSweepRoot = 0;

PointResult base_point(const ClusterVariant& variant, Collective collective, const std::string& algorithm,
                       int64_t size_bytes) {
  PointResult point;
  point.variant = variant.name;
  point.collective = collective;
  point.algorithm = algorithm;
  point.size_bytes = size_bytes;
  return point;
}

// Calls `visit(collective, algorithm, size)` for every point of the sweep, in the results' order.
template <typename Visit>
void for_each_point(const CollectiveSweep& sweep, Visit&& visit) {
  for (Collective collective : sweep.collectives) {
    for (const std::string& algorithm : sweep.algorithms) {
      for (int64_t bytes : sweep.sizes_bytes) visit(collective, algorithm, bytes);
    }
  }
}

// ---- real data: host, cuda, nccl -----------------------------------------------------------------

int64_t per_rank_bytes(const SizeCounts& counts, DataType dtype) {
  return (counts.input_elements + counts.output_elements) * static_cast<int64_t>(size_bytes(dtype));
}

// The per-rank input and output bytes of the largest points the host runs (it skips those over its limit).
struct HostPointBytes {
  int64_t input = 0;
  int64_t output = 0;
};

HostPointBytes largest_host_point(const CollectiveSweep& sweep, int nranks) {
  const int64_t element_bytes = static_cast<int64_t>(size_bytes(sweep.dtype));
  HostPointBytes largest;
  for (Collective collective : sweep.collectives) {
    for (int64_t bytes : sweep.sizes_bytes) {
      const SizeCounts counts = nccl_tests_counts(collective, bytes, sweep.dtype, nranks);
      if (per_rank_bytes(counts, sweep.dtype) > kHostMaxBytesPerRank) continue;
      largest.input = std::max(largest.input, counts.input_elements * element_bytes);
      largest.output = std::max(largest.output, counts.output_elements * element_bytes);
    }
  }
  return largest;
}

// Runs one point: warm-up, timed runs, then the data check on fresh inputs; fills the point's times and verdict.
void measure_data_point(Communicator& communicator, const RunMemory& memory, const CollectiveSweep& sweep,
                        Collective collective, const std::string& algorithm, const SizeCounts& counts, int nranks,
                        PointResult& point) {
  const Algorithm requested = parse_algorithm_name(algorithm);
  CollectiveSpec spec;
  spec.collective = collective;
  spec.count = counts.count;
  spec.dtype = sweep.dtype;
  spec.op = sweep.op;
  spec.root = kSweepRoot;
  spec.nranks = nranks;
  const std::vector<RankBuffers> buffers = memory.host(collective, counts.count, sweep.dtype, false);
  const std::vector<RankBuffers> run_buffers = memory.run(collective, counts.count, sweep.dtype, false);
  CheckSpec check{collective, sweep.dtype, sweep.op, kSweepRoot, nranks, counts.count, 0};
  fill_inputs(check, buffers);
  memory.upload();
  for (int i = 0; i < kHostWarmupRuns; ++i) communicator.run(spec, run_buffers, requested);
  double seconds = 0;
  for (int i = 0; i < kHostTimedRuns; ++i) seconds += communicator.run(spec, run_buffers, requested).seconds;
  seconds /= kHostTimedRuns;
  int64_t wrong = 0;
  for (int c = 0; c < kHostCheckRuns && wrong == 0; ++c) {
    check.seed = static_cast<uint64_t>(c) + 1;
    poison_outputs(check, buffers);
    fill_inputs(check, buffers);
    memory.upload();
    communicator.run(spec, run_buffers, requested);
    memory.download();
    wrong = count_wrong(check, buffers);
  }
  const BenchResult measured = make_result(seconds, counts, collective, nranks, wrong);
  point.algorithm_used = name(communicator.choose(spec, requested));
  point.time_us = measured.time_us;
  point.algbw_GBps = measured.algbw_GBps;
  point.busbw_GBps = measured.busbw_GBps;
  point.wrong_elements = wrong;
  if (wrong > 0) {
    point.status = PointStatus::kWrongData;
    point.reason = fmt::format("{} wrong elements", wrong);
  }
}

std::vector<PointResult> run_data_variant(const Scenario& scenario, const ClusterVariant& variant,
                                          ScenarioBackend backend, const ProgressFn& progress, size_t variant_index) {
  const CollectiveSweep& sweep = std::get<CollectiveSweep>(scenario.workload);
  const int nranks = sweep_ranks(variant, sweep);
  const int per_node = nranks / variant.cluster.nodes;

  // Memory for the largest point the host runs, per rank.
  const HostPointBytes largest = largest_host_point(sweep, nranks);
  const double needed = double(nranks) * double(largest.input + largest.output);
  require_host_memory(needed,
                      fmt::format("the {} backend for {} ranks of variant '{}'", name(backend), nranks, variant.name));
  std::unique_ptr<Executor> executor = make_executor(name(backend));
  if (executor->local_ranks(nranks).size() < static_cast<size_t>(nranks)) {
    fail(ErrorCode::kUnsupported,
         "tandem run drives every rank from one process; under mpirun / srun use tandem bench (docs/real-hardware.md)");
  }
  const RunMemory memory(*executor, nranks, static_cast<size_t>(largest.input), static_cast<size_t>(largest.output));
  Communicator communicator(*executor, RankLayout::nodes(variant.cluster.nodes, per_node));
  const size_t total = sweep.collectives.size() * sweep.algorithms.size() * sweep.sizes_bytes.size();
  size_t done = 0;
  std::vector<PointResult> points;
  for_each_point(sweep, [&](Collective collective, const std::string& algorithm, int64_t bytes) {
    PointResult point = base_point(variant, collective, algorithm, bytes);
    ++done;
    const SizeCounts counts = nccl_tests_counts(collective, bytes, sweep.dtype, nranks);
    if (!algorithm_applies(algorithm, collective)) {
      point.status = PointStatus::kNotApplicable;
      point.reason = not_applicable_reason(algorithm, collective);
    } else if (const std::optional<sim::SimAlgorithm> model = sim::find_sim_algorithm(algorithm);
               model && model->is_model()) {
      point.status = PointStatus::kSkipped;
      point.reason = fmt::format("{} is {}: simulator only", algorithm,
                                 *model == sim::SimAlgorithm::Model::kP2p ? "NCCL's point-to-point model"
                                                                          : "an in-switch reduction");
    } else if (per_rank_bytes(counts, sweep.dtype) > kHostMaxBytesPerRank) {
      point.status = PointStatus::kSkipped;
      point.reason = fmt::format("host limit: {} per rank", format_size(kHostMaxBytesPerRank));
    } else {
      if (progress) {
        progress(fmt::format("variant {}/{} ({}): {} {} {} ({}/{})", variant_index + 1, scenario.variants.size(),
                             variant.name, name(collective), algorithm, format_size(bytes), done, total));
      }
      measure_data_point(communicator, memory, sweep, collective, algorithm, counts, nranks, point);
    }
    points.push_back(std::move(point));
  });
  return points;
}

}  // namespace

// ---- sim ---------------------------------------------------------------------------------------

sim::SweepRequest make_sweep_request(const Scenario& scenario, const ClusterVariant& variant) {
  const CollectiveSweep& sweep = std::get<CollectiveSweep>(scenario.workload);
  sim::SweepRequest request;
  request.cluster = variant.cluster;
  request.gpus_per_node = sweep.gpus_per_node;
  request.network = network_model(scenario);
  for_each_point(sweep, [&](Collective collective, const std::string& algorithm, int64_t bytes) {
    if (!algorithm_applies(algorithm, collective)) return;
    sim::SweepPoint point;
    point.collective = collective;
    point.bytes = bytes;
    point.algorithm = sim::parse_sim_algorithm_or_auto(algorithm);
    point.dtype = sweep.dtype;
    point.op = sweep.op;
    point.root = kSweepRoot;
    request.points.push_back(point);
  });
  return request;
}

std::vector<PointResult> collect_sim_results(const Scenario& scenario, const ClusterVariant& variant,
                                             const std::vector<sim::SweepPointResult>& results) {
  const CollectiveSweep& sweep = std::get<CollectiveSweep>(scenario.workload);
  std::vector<PointResult> points;
  size_t next = 0;
  for_each_point(sweep, [&](Collective collective, const std::string& algorithm, int64_t bytes) {
    PointResult point = base_point(variant, collective, algorithm, bytes);
    if (!algorithm_applies(algorithm, collective)) {
      point.status = PointStatus::kNotApplicable;
      point.reason = not_applicable_reason(algorithm, collective);
    } else {
      if (next >= results.size()) {
        fail(ErrorCode::kBackend, "the simulator returned {} results for variant '{}'; more points were asked for",
             results.size(), variant.name);
      }
      const sim::SweepPointResult& result = results[next++];
      if (result.ok) {
        point.algorithm_used = std::string(sim::name_or_auto(result.algorithm));
        point.protocol = models::name(result.protocol);
        point.channels = result.channels;
        point.time_us = result.seconds * 1e6;
        point.algbw_GBps = result.algbw_GBps;
        point.busbw_GBps = result.busbw_GBps;
      } else {
        point.status = PointStatus::kNotApplicable;
        point.reason = result.error;
      }
    }
    points.push_back(std::move(point));
  });
  if (next != results.size()) {
    fail(ErrorCode::kBackend, "the simulator returned {} results for variant '{}'; {} points were asked for",
         results.size(), variant.name, next);
  }
  return points;
}

ScenarioResults run_scenario(const Scenario& scenario, ScenarioBackend backend, const ProgressFn& progress) {
  ScenarioResults results;
  results.backend = backend;
  for (size_t v = 0; v < scenario.variants.size(); ++v) {
    const ClusterVariant& variant = scenario.variants[v];
    std::vector<PointResult> points;
    if (backend == ScenarioBackend::kSim) {
      const sim::SweepRequest request = make_sweep_request(scenario, variant);
      if (progress) {
        progress(fmt::format("variant {}/{} ({}): simulating {} points", v + 1, scenario.variants.size(), variant.name,
                             request.points.size()));
      }
      points = collect_sim_results(scenario, variant, sim::run_sweep(request, /*isolated=*/true));
    } else {
      points = run_data_variant(scenario, variant, backend, progress, v);
    }
    results.points.insert(results.points.end(), points.begin(), points.end());
  }
  return results;
}

// ---- expectations ------------------------------------------------------------------------------

bool check_bound(const Bound& bound, double value, std::string_view what, std::string_view unit, std::string& detail) {
  if (!bound.set()) return true;
  if (!detail.empty()) detail += "; ";
  if (bound.min && value < *bound.min) {
    detail += fmt::format("{} {:.4g} {} is below the minimum {:g}", what, value, unit, *bound.min);
    return false;
  }
  if (bound.max && value > *bound.max) {
    detail += fmt::format("{} {:.4g} {} is above the maximum {:g}", what, value, unit, *bound.max);
    return false;
  }
  if (bound.min && bound.max) {
    detail += fmt::format("{} {:.4g} {} in [{:g}, {:g}]", what, value, unit, *bound.min, *bound.max);
  } else if (bound.min) {
    detail += fmt::format("{} {:.4g} {} >= {:g}", what, value, unit, *bound.min);
  } else {
    detail += fmt::format("{} {:.4g} {} <= {:g}", what, value, unit, *bound.max);
  }
  return true;
}

std::vector<ExpectationOutcome> evaluate_expectations(const Scenario& scenario, const ScenarioResults& results) {
  std::vector<ExpectationOutcome> outcomes;
  for (const Expectation& expectation : scenario.expectations_of<Expectation>()) {
    ExpectationOutcome outcome;
    outcome.expectation = expectation;
    const PointResult* point =
        results.find(expectation.variant, expectation.collective, expectation.algorithm, expectation.size_bytes);
    if (expectation.backend && *expectation.backend != results.backend) {
      outcome.verdict = ExpectationVerdict::kSkip;
      outcome.detail = fmt::format("checked on the {} backend only", name(*expectation.backend));
    } else if (point == nullptr) {
      outcome.verdict = ExpectationVerdict::kFail;
      outcome.detail = "the sweep has no such point";
    } else if (point->status == PointStatus::kSkipped) {
      outcome.verdict = ExpectationVerdict::kSkip;
      outcome.detail = fmt::format("not run on {}: {}", name(results.backend), point->reason);
    } else if (point->status != PointStatus::kOk) {
      outcome.verdict = ExpectationVerdict::kFail;
      outcome.detail = fmt::format("the point is {}: {}", name(point->status), point->reason);
    } else {
      bool holds = true;
      holds = check_bound(expectation.time_us, point->time_us, "time", "us", outcome.detail) && holds;
      holds = check_bound(expectation.algbw_GBps, point->algbw_GBps, "algbw", "GB/s", outcome.detail) && holds;
      holds = check_bound(expectation.busbw_GBps, point->busbw_GBps, "busbw", "GB/s", outcome.detail) && holds;
      outcome.verdict = holds ? ExpectationVerdict::kPass : ExpectationVerdict::kFail;
    }
    outcomes.push_back(std::move(outcome));
  }
  return outcomes;
}

bool run_passed(const ScenarioResults& results, const std::vector<ExpectationOutcome>& outcomes) {
  for (const PointResult& point : results.points) {
    if (point.status == PointStatus::kWrongData) return false;
  }
  for (const ExpectationOutcome& outcome : outcomes) {
    if (outcome.verdict == ExpectationVerdict::kFail) return false;
  }
  return true;
}

}  // namespace tandem::app
