// Reading `workload: {type: collective-sweep}` and `{type: collective-loop}` and their `expect`
// entries: the sizes (a list, or a range by factor or step), the collectives and algorithms, and what
// an expectation may name (only points the sweep runs; a loop's iterations).
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "app/common/nccl_tests_table.h"
#include "app/scenario/scenario_internal.h"
#include "core/algorithms.h"
#include "core/error.h"

namespace tandem::app {
namespace {

// The keys each section accepts, in the order docs/scenarios.md lists them.
constexpr std::array<std::string_view, 7> kCollectiveSweepKeys{"type",  "collectives", "sizes",        "algorithms",
                                                               "dtype", "op",          "gpus_per_node"};
constexpr std::array<std::string_view, 8> kCollectiveLoopKeys{"type",       "collective", "size", "algorithm",
                                                              "iterations", "dtype",      "op",   "gpus_per_node"};
constexpr std::array<std::string_view, 4> kSizeRangeKeys{"min", "max", "factor", "step"};
constexpr std::array<std::string_view, 8> kExpectKeys{"variant", "collective", "algorithm",  "size",
                                                      "backend", "time_us",    "algbw_GBps", "busbw_GBps"};
constexpr std::array<std::string_view, 7> kLoopExpectKeys{"iteration", "outcome", "culprit_ranks", "backend",
                                                          "time_us",   "cost_us", "variant"};

// A sweep by factor stops here: factor 2 from 1 byte reaches 1 TiB in 40 steps.
constexpr int64_t kMaxSizeFactor = 1 << 20;

std::vector<int64_t> read_sizes(const Reader& reader, const YAML::Node& node, const std::string& path) {
  std::vector<int64_t> sizes;
  if (node.IsSequence()) {
    const std::vector<YAML::Node> entries = reader.list(node, path);
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string entry_path = fmt::format("{}[{}]", path, i);
      const int64_t bytes = reader.size(entries[i], entry_path);
      if (std::find(sizes.begin(), sizes.end(), bytes) != sizes.end()) {
        reader.fail_at(entries[i], "{}: {} is listed twice", entry_path, format_size(bytes));
      }
      sizes.push_back(bytes);
    }
    if (sizes.size() > kMaxSweepSizes) reader.fail_at(node, "{} lists more than {} sizes", path, kMaxSweepSizes);
    return sizes;
  }
  if (!node.IsMap()) {
    reader.fail_at(node, "{} must be a mapping {{min, max, factor}} or a list of sizes (got {})", path,
                   node_kind(node));
  }
  Mapping range(reader, node, path, kSizeRangeKeys);
  const int64_t min_bytes = reader.size(range.require("min"), range.path("min"));
  const int64_t max_bytes = reader.size(range.require("max"), range.path("max"));
  if (min_bytes > max_bytes) {
    reader.fail_at(node, "{}: min ({}) is larger than max ({})", path, format_size(min_bytes), format_size(max_bytes));
  }
  const YAML::Node* factor_node = range.find("factor");
  const YAML::Node* step_node = range.find("step");
  if (factor_node != nullptr && step_node != nullptr) {
    reader.fail_at(*step_node, "{} takes either factor or step, not both", path);
  }
  int64_t factor = 2, step = 0;
  if (step_node != nullptr) {
    factor = 1;
    step = reader.size(*step_node, range.path("step"));
    if (step < 1) reader.fail_at(*step_node, "{} must be at least 1 byte", range.path("step"));
  } else if (factor_node != nullptr) {
    factor = reader.integer(*factor_node, range.path("factor"), 2, kMaxSizeFactor);
  }
  if (factor > 1 && min_bytes == 0 && max_bytes > 0) {
    reader.fail_at(node, "{}: a sweep by factor cannot start at 0 bytes (min: 0)", path);
  }
  for (int64_t bytes = min_bytes;;) {
    if (sizes.size() == kMaxSweepSizes) {
      reader.fail_at(node, "{} from {} to {} has more than {} sizes; use a larger factor or step", path,
                     format_size(min_bytes), format_size(max_bytes), kMaxSweepSizes);
    }
    sizes.push_back(bytes);
    // max_bytes <= kMaxScenarioSizeBytes (2^40), so neither product nor sum overflows.
    const int64_t next = factor > 1 ? bytes * factor : bytes + step;
    if (next > max_bytes || next == bytes) break;
    bytes = next;
  }
  return sizes;
}

template <typename T, typename Parse>
std::vector<T> read_names(const Reader& reader, const YAML::Node& node, const std::string& path, Parse parse) {
  std::vector<T> values;
  const std::vector<YAML::Node> entries = reader.list(node, path);
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string entry_path = fmt::format("{}[{}]", path, i);
    const std::string text = reader.scalar(entries[i], entry_path);
    T value = reader.at(entries[i], entry_path, [&] { return parse(text); });
    if (std::find(values.begin(), values.end(), value) != values.end()) {
      reader.fail_at(entries[i], "{}: '{}' is listed twice", entry_path, text);
    }
    values.push_back(std::move(value));
  }
  return values;
}

// The canonical spelling of a sweep algorithm: a core algorithm name, "nvls" or "auto".
std::string parse_sweep_algorithm(std::string_view text) {
  if (text == "auto" || text == "nvls") return std::string(text);
  try {
    return std::string(name(parse_algorithm_name(text)));
  } catch (const Error&) {
    std::vector<std::string_view> names;
    for (Algorithm a : all_algorithms()) names.push_back(name(a));
    names.push_back("nvls");
    names.push_back("auto");
    fail(ErrorCode::kInvalidArgument, "unknown algorithm '{}' (expected one of: {})", text, fmt::join(names, ", "));
  }
}

// `dtype` and `op` of a sweep or a loop; keys absent keep their values.
void read_dtype_and_op(const Reader& reader, const Mapping& workload, DataType& dtype, ReduceOp& op) {
  if (const YAML::Node* node = workload.find("dtype")) {
    const std::string text = reader.scalar(*node, workload.path("dtype"));
    dtype = reader.at(*node, workload.path("dtype"), [&] { return parse_data_type(text); });
  }
  if (const YAML::Node* node = workload.find("op")) {
    const std::string text = reader.scalar(*node, workload.path("op"));
    op = reader.at(*node, workload.path("op"), [&] { return parse_reduce_op(text); });
  }
}

int read_gpus_per_node(const Reader& reader, const Mapping& workload, const std::vector<ClusterVariant>& variants) {
  const YAML::Node* gpus = workload.find("gpus_per_node");
  if (gpus == nullptr) return 0;
  const auto value =
      static_cast<int>(reader.integer(*gpus, workload.path("gpus_per_node"), 1, kMaxScenarioGpusPerNode));
  for (const ClusterVariant& variant : variants) {
    if (value > variant.cluster.gpus_per_node) {
      reader.fail_at(*gpus, "{} is {}, but the cluster of '{}' has {} GPUs per node", workload.path("gpus_per_node"),
                     value, variant.name, variant.cluster.gpus_per_node);
    }
  }
  return value;
}

}  // namespace

Workload read_collective_sweep(const Reader& reader, const YAML::Node& node,
                               const std::vector<ClusterVariant>& variants) {
  Mapping workload(reader, node, "workload", kCollectiveSweepKeys);
  CollectiveSweep sweep;
  sweep.collectives = read_names<Collective>(reader, workload.require("collectives"), workload.path("collectives"),
                                             [](std::string_view text) { return parse_collective_name(text); });
  sweep.sizes_bytes = read_sizes(reader, workload.require("sizes"), workload.path("sizes"));
  if (const YAML::Node* algorithms = workload.find("algorithms")) {
    sweep.algorithms = read_names<std::string>(reader, *algorithms, workload.path("algorithms"), parse_sweep_algorithm);
  } else {
    sweep.algorithms = {"auto"};
  }
  read_dtype_and_op(reader, workload, sweep.dtype, sweep.op);
  sweep.gpus_per_node = read_gpus_per_node(reader, workload, variants);
  const size_t points = sweep.collectives.size() * sweep.sizes_bytes.size() * sweep.algorithms.size();
  if (points > kMaxScenarioPoints) {
    reader.fail_at(node, "workload has {} collectives x {} sizes x {} algorithms = {} points, above the limit of {}",
                   sweep.collectives.size(), sweep.sizes_bytes.size(), sweep.algorithms.size(), points,
                   kMaxScenarioPoints);
  }
  return sweep;
}

Workload read_collective_loop(const Reader& reader, const YAML::Node& node,
                              const std::vector<ClusterVariant>& variants) {
  Mapping workload(reader, node, "workload", kCollectiveLoopKeys);
  CollectiveLoop loop;
  const YAML::Node& collective = workload.require("collective");
  const std::string collective_text = reader.scalar(collective, workload.path("collective"));
  loop.collective =
      reader.at(collective, workload.path("collective"), [&] { return parse_collective_name(collective_text); });
  loop.size_bytes = reader.size(workload.require("size"), workload.path("size"));
  if (const YAML::Node* algorithm = workload.find("algorithm")) {
    const std::string text = reader.scalar(*algorithm, workload.path("algorithm"));
    loop.algorithm = reader.at(*algorithm, workload.path("algorithm"), [&] { return parse_algorithm_name(text); });
    if (!algorithm_applies(name(loop.algorithm), loop.collective)) {
      reader.fail_at(*algorithm, "{}: {}", workload.path("algorithm"),
                     not_applicable_reason(name(loop.algorithm), loop.collective));
    }
  }
  if (const YAML::Node* iterations = workload.find("iterations")) {
    loop.iterations = static_cast<int>(reader.integer(*iterations, workload.path("iterations"), 1, kMaxLoopIterations));
  }
  read_dtype_and_op(reader, workload, loop.dtype, loop.op);
  loop.gpus_per_node = read_gpus_per_node(reader, workload, variants);
  return loop;
}

Expectation read_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                             const std::vector<ClusterVariant>& variants, const CollectiveSweep& sweep) {
  Mapping mapping(reader, node, path, kExpectKeys);
  Expectation expectation;
  expectation.mark = source_mark(node.Mark());

  if (const YAML::Node* variant = mapping.find("variant")) {
    expectation.variant = read_variant_name(reader, *variant, mapping.path("variant"), variants);
  }

  const YAML::Node& collective = mapping.require("collective");
  const std::string collective_text = reader.scalar(collective, mapping.path("collective"));
  expectation.collective =
      reader.at(collective, mapping.path("collective"), [&] { return parse_collective_name(collective_text); });
  if (std::find(sweep.collectives.begin(), sweep.collectives.end(), expectation.collective) ==
      sweep.collectives.end()) {
    reader.fail_at(collective, "{}: {} is not one of workload.collectives", mapping.path("collective"),
                   name(expectation.collective));
  }

  const YAML::Node& algorithm = mapping.require("algorithm");
  const std::string algorithm_text = reader.scalar(algorithm, mapping.path("algorithm"));
  expectation.algorithm =
      reader.at(algorithm, mapping.path("algorithm"), [&] { return parse_sweep_algorithm(algorithm_text); });
  if (std::find(sweep.algorithms.begin(), sweep.algorithms.end(), expectation.algorithm) == sweep.algorithms.end()) {
    reader.fail_at(algorithm, "{}: {} is not one of workload.algorithms ({})", mapping.path("algorithm"),
                   expectation.algorithm, fmt::join(sweep.algorithms, ", "));
  }
  if (!algorithm_applies(expectation.algorithm, expectation.collective)) {
    reader.fail_at(algorithm, "{}: {}, so this point never runs", mapping.path("algorithm"),
                   not_applicable_reason(expectation.algorithm, expectation.collective));
  }

  const YAML::Node& size = mapping.require("size");
  expectation.size_bytes = reader.size(size, mapping.path("size"));
  if (std::find(sweep.sizes_bytes.begin(), sweep.sizes_bytes.end(), expectation.size_bytes) ==
      sweep.sizes_bytes.end()) {
    reader.fail_at(size, "{}: {} is not one of the workload's sizes", mapping.path("size"),
                   format_size(expectation.size_bytes));
  }

  if (const YAML::Node* backend = mapping.find("backend")) {
    const std::string text = reader.scalar(*backend, mapping.path("backend"));
    expectation.backend = reader.at(*backend, mapping.path("backend"), [&] { return parse_backend(text); });
  }
  if (const YAML::Node* bound = mapping.find("time_us")) {
    expectation.time_us = read_bound(reader, *bound, mapping.path("time_us"));
  }
  if (const YAML::Node* bound = mapping.find("algbw_GBps")) {
    expectation.algbw_GBps = read_bound(reader, *bound, mapping.path("algbw_GBps"));
  }
  if (const YAML::Node* bound = mapping.find("busbw_GBps")) {
    expectation.busbw_GBps = read_bound(reader, *bound, mapping.path("busbw_GBps"));
  }
  if (!expectation.time_us.set() && !expectation.algbw_GBps.set() && !expectation.busbw_GBps.set()) {
    reader.fail_at(node, "{} sets no bound (expected at least one of time_us, algbw_GBps, busbw_GBps)", path);
  }
  return expectation;
}

LoopExpectation read_loop_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                                      const CollectiveLoop& loop) {
  Mapping mapping(reader, node, path, kLoopExpectKeys);
  LoopExpectation e;
  e.mark = source_mark(node.Mark());
  if (const YAML::Node* v = mapping.find("variant")) {
    reader.fail_at(*v, "{}: a collective-loop runs on the base cluster only", mapping.path("variant"));
  }
  if (const YAML::Node* v = mapping.find("iteration")) {
    e.iteration = reader.integer(*v, mapping.path("iteration"), 0, loop.iterations - 1);
  }
  if (const YAML::Node* v = mapping.find("outcome")) {
    const std::string text = reader.scalar(*v, mapping.path("outcome"));
    e.outcome = reader.at(*v, mapping.path("outcome"), [&] { return parse_outcome(text); });
  }
  if (const YAML::Node* v = mapping.find("culprit_ranks")) {
    e.culprit_ranks = read_rank_list(reader, *v, mapping.path("culprit_ranks"));
  }
  if (const YAML::Node* v = mapping.find("backend")) {
    const std::string text = reader.scalar(*v, mapping.path("backend"));
    e.backend = reader.at(*v, mapping.path("backend"), [&] { return parse_backend(text); });
  }
  if (const YAML::Node* v = mapping.find("time_us")) e.time_us = read_bound(reader, *v, mapping.path("time_us"));
  if (const YAML::Node* v = mapping.find("cost_us")) e.cost_us = read_bound(reader, *v, mapping.path("cost_us"));
  if (!e.outcome && !e.culprit_ranks && !e.time_us.set() && !e.cost_us.set()) {
    reader.fail_at(node, "{} checks nothing (expected outcome, culprit_ranks, time_us or cost_us)", path);
  }
  return e;
}

}  // namespace tandem::app
