#include "app/scenario/scenario.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "app/common/cluster_keys.h"
#include "app/common/common.h"
#include "app/common/nccl_tests_table.h"
#include "app/scenario/training_rehearsal.h"
#include "app/scenario/scenario_yaml.h"
#include "core/algorithms.h"
#include "core/error.h"
#include "sim/tuner.h"

namespace tandem::app {

std::string_view name(ScenarioBackend backend) {
  switch (backend) {
    case ScenarioBackend::kSim:
      return "sim";
    case ScenarioBackend::kHost:
      return "host";
    case ScenarioBackend::kCuda:
      return "cuda";
    case ScenarioBackend::kNccl:
      return "nccl";
  }
  return "?";
}

ScenarioBackend parse_backend(std::string_view text) {
  if (text == "sim") return ScenarioBackend::kSim;
  if (text == "host") return ScenarioBackend::kHost;
  if (text == "cuda") return ScenarioBackend::kCuda;
  if (text == "nccl") return ScenarioBackend::kNccl;
  fail(ErrorCode::kInvalidArgument, "unknown backend '{}' (expected: sim, host, cuda, nccl)", text);
}

std::string_view name(NetworkChoice network) {
  switch (network) {
    case NetworkChoice::kFluid:
      return "fluid";
    case NetworkChoice::kPacket:
      return "packet";
    case NetworkChoice::kIdeal:
      return "ideal";
  }
  return "?";
}

sim::NetworkModel network_model(const Scenario& scenario) {
  const sim::NetworkModel model = network_model(scenario.network);
  return scenario.calibration ? apply_profile(*scenario.calibration, model) : model;
}

sim::NetworkModel network_model(NetworkChoice network) {
  switch (network) {
    case NetworkChoice::kFluid:
      return sim::NetworkModel{};
    case NetworkChoice::kPacket: {
      sim::NetworkModel model;
      model.fidelity = sim::Fidelity::kPacket;
      return model;
    }
    case NetworkChoice::kIdeal:
      return sim::NetworkModel::ideal();
  }
  return sim::NetworkModel{};
}

const ClusterVariant* Scenario::find_variant(std::string_view variant_name) const {
  for (const ClusterVariant& variant : variants) {
    if (variant.name == variant_name) return &variant;
  }
  return nullptr;
}

bool algorithm_applies(std::string_view algorithm, Collective collective) {
  if (algorithm == "auto") return true;
  if (const std::optional<sim::SimAlgorithm> known = sim::find_sim_algorithm(algorithm)) {
    return sim::applies(*known, collective);
  }
  return implements(parse_algorithm_name(algorithm), collective);  // throws, naming the algorithms
}

std::string parse_training_algorithm(std::string_view text) {
  if (text == "auto" || text == "ring" || text == "tree") return std::string(text);
  fail(ErrorCode::kInvalidArgument,
       "'{}': a training step's collectives run with auto (NCCL's tuner), ring or tree (all_reduce; NCCL's pick "
       "for the others)",
       text);
}

std::string not_applicable_reason(std::string_view algorithm, Collective collective) {
  return fmt::format("{} does not implement {}", algorithm, name(collective));
}

namespace {

// The keys each section accepts, in the order docs/scenarios.md lists them.
constexpr std::array<std::string_view, 15> kTopKeys{
    "tandem_scenario", "name",     "description", "cluster",    "variants", "backend", "network",
    "calibration",     "workload", "faults",      "fault_seed", "recovery", "outputs", "allocator", "expect"};
constexpr std::array<std::string_view, 3> kVariantKeys{"name", "cluster", "allocator"};
constexpr std::array<std::string_view, 7> kCollectiveSweepKeys{"type",  "collectives", "sizes",        "algorithms",
                                                               "dtype", "op",          "gpus_per_node"};
constexpr std::array<std::string_view, 8> kCollectiveLoopKeys{"type",       "collective", "size", "algorithm",
                                                              "iterations", "dtype",      "op",   "gpus_per_node"};
constexpr std::array<std::string_view, 4> kSizeRangeKeys{"min", "max", "factor", "step"};
constexpr std::array<std::string_view, 5> kOutputKeys{"json", "csv", "dumps", "dump_format", "fr_buffer_size"};
constexpr std::array<std::string_view, 13> kFaultKeys{
    "kind",          "rank",       "link",  "node",        "nic",   "factor", "recover_after_us",
    "at_collective", "at_time_us", "at_op", "probability", "issue", "group"};
constexpr std::array<std::string_view, 3> kIssueKeys{"collective", "count", "dtype"};
constexpr std::array<std::string_view, 5> kRecoveryKeys{"retry_max", "backoff_us", "watchdog_ms", "action", "verify"};
constexpr std::array<std::string_view, 7> kLoopExpectKeys{"iteration", "outcome", "culprit_ranks", "backend",
                                                          "time_us",   "cost_us", "variant"};
constexpr std::array<std::string_view, 8> kExpectKeys{"variant", "collective", "algorithm",  "size",
                                                      "backend", "time_us",    "algbw_GBps", "busbw_GBps"};
constexpr std::array<std::string_view, 2> kBoundKeys{"min", "max"};
constexpr std::array<std::string_view, 14> kTrainingKeys{
    "type", "model",   "seq_len",   "global_batch",      "batch_per_gpu", "micro_batch",     "precision",
    "mfu",  "kernels", "recompute", "grad_reduce_dtype", "algorithm",     "capacity_factor", "layouts"};
constexpr std::array<std::string_view, 13> kModelKeys{
    "name",  "layers",  "d_model",        "ffn",         "heads", "kv_heads", "vocab", "tied_embeddings", "experts",
    "top_k", "moe_ffn", "shared_experts", "dense_layers"};
constexpr std::array<std::string_view, 11> kTrainingLayoutKeys{
    "name", "tp", "pp", "vp", "cp", "ep", "sharding", "shard_group", "recompute", "micro_batch", "tp_overlap"};
constexpr std::array<std::string_view, 13> kTrainingExpectKeys{
    "variant",      "layout",         "backend",  "fits",      "step_time_s",
    "achieved_mfu", "exposed_comm_s", "bubble_s", "memory_GB", "tokens_per_s_per_gpu",
    "relative_to",  "speedup",        "culprit_ranks"};
constexpr std::array<std::string_view, 4> kStartupKeys{"type", "gpus", "layout", "configs"};
constexpr std::array<std::string_view, 4> kStartupLayoutKeys{"tp", "cp", "ep", "pp"};
constexpr std::array<std::string_view, 8> kStartupConfigKeys{
    "name", "store", "eager_init", "ranks_per_root", "runtime_connect", "oob_net", "init_barriers", "topo_cache"};
constexpr std::array<std::string_view, 5> kStartupExpectKeys{"variant", "config", "total_s", "relative_to", "speedup"};
constexpr size_t kMaxStartupConfigs = 32;
// Limits of a training workload.
constexpr size_t kMaxTrainingLayouts = 32;
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 24;

// A sweep by factor stops here: factor 2 from 1 byte reaches 1 TiB in 40 steps.
constexpr int64_t kMaxSizeFactor = 1 << 20;

// ---- cluster -----------------------------------------------------------------------------------

// A cluster mapping's values, each with the node it came from (a variant's cluster is the base's
// values with the variant's replacing them, so errors point at whichever file position set a value).
struct ClusterValue {
  std::string key;
  YAML::Node node;
  std::string path;
};
using ClusterValues = std::vector<ClusterValue>;

// A cluster mapping's keys: the preset, then app/common/cluster_keys.h's table.
const std::vector<std::string_view>& cluster_mapping_keys() {
  static const std::vector<std::string_view> keys = [] {
    std::vector<std::string_view> out{"preset"};
    for (const ClusterKey& key : cluster_keys()) out.push_back(key.key);
    return out;
  }();
  return keys;
}

ClusterValues read_cluster_values(const Reader& reader, const YAML::Node& node, const std::string& path) {
  Mapping mapping(reader, node, path, cluster_mapping_keys());
  ClusterValues values;
  for (const auto& [key, value] : mapping.entries()) values.push_back({key, value, mapping.path(key)});
  return values;
}

// Builds a new list rather than assigning: assigning a YAML::Node rebinds the node it refers to,
// which would change the base's values.
ClusterValues merge_cluster_values(const ClusterValues& base, const ClusterValues& overrides) {
  auto find_in = [](const ClusterValues& values, const std::string& key) {
    return std::find_if(values.begin(), values.end(), [&](const ClusterValue& v) { return v.key == key; });
  };
  ClusterValues merged;
  for (const ClusterValue& value : base) {
    auto replacement = find_in(overrides, value.key);
    merged.push_back(replacement != overrides.end() ? *replacement : value);
  }
  for (const ClusterValue& value : overrides) {
    if (find_in(base, value.key) == base.end()) merged.push_back(value);
  }
  return merged;
}

// The preset with every value applied, then the command line's overrides (they replace the file's
// in every variant), checked as a whole.
models::ClusterSpec resolve_cluster(const Reader& reader, const ClusterValues& values, const YAML::Node& cluster_node,
                                    const std::string& what, const ClusterOverrides& overrides) {
  auto preset = std::find_if(values.begin(), values.end(), [](const ClusterValue& v) { return v.key == "preset"; });
  if (preset == values.end()) reader.fail_at(cluster_node, "missing required key 'preset' in {}", what);
  const std::string preset_name =
      overrides.preset.empty() ? reader.text(preset->node, preset->path) : overrides.preset;
  models::ClusterSpec spec = reader.at(preset->node, preset->path, [&] { return models::cluster_preset(preset_name); });
  std::vector<ClusterValueText> given;
  for (const ClusterValue& v : values) {
    if (v.key == "preset") continue;
    const ClusterKey* key = find_cluster_key(v.key);
    ClusterValueText value{key, key->kind == ClusterKey::Kind::kText ? reader.text(v.node, v.path)
                                                                     : reader.scalar(v.node, v.path),
                           v.path};
    try {
      set_cluster_value(spec, value);
    } catch (const Error& error) {
      reader.fail_at(v.node, "{}", error.what());
    }
    given.push_back(std::move(value));
  }
  for (const ClusterValueText& value : overrides.values) {
    set_cluster_value(spec, value);
    given.push_back(value);
  }
  if (int64_t{spec.nodes} * spec.gpus_per_node > kMaxScenarioGpus) {
    reader.fail_at(cluster_node, "{} has {} nodes x {} GPUs = {} GPUs, above the limit of {}", what, spec.nodes,
                   spec.gpus_per_node, int64_t{spec.nodes} * spec.gpus_per_node, kMaxScenarioGpus);
  }
  // What only the whole spec can tell (NICs that do not divide the GPUs, spines on a single switch).
  reader.at(cluster_node, what, [&] { finish_cluster_spec(spec, given); });
  return spec;
}

bool valid_variant_name(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '+';
  });
}

// `allocator:` at `node`: PyTorch's conf string, checked by the allocator model's own parser.
void read_allocator(const Reader& reader, const YAML::Node& node, const std::string& path, ClusterVariant& variant) {
  variant.alloc_conf = reader.text(node, path);
  variant.allocator = reader.at(node, path, [&] { return models::parse_alloc_conf(variant.alloc_conf); });
}

std::vector<ClusterVariant> read_clusters(const Reader& reader, const Mapping& top, const ClusterOverrides& overrides) {
  const YAML::Node& base_node = top.require("cluster");
  const ClusterValues base_values = read_cluster_values(reader, base_node, "cluster");
  std::vector<ClusterVariant> variants;
  variants.push_back({std::string(kBaseVariantName), resolve_cluster(reader, base_values, base_node, "cluster", overrides),
                      source_mark(base_node.Mark())});
  if (const YAML::Node* allocator = top.find("allocator")) read_allocator(reader, *allocator, "allocator", variants[0]);
  const ClusterVariant base = variants[0];

  const YAML::Node* list = top.find("variants");
  if (list == nullptr) return variants;
  const std::vector<YAML::Node> entries = reader.list(*list, "variants");
  if (entries.size() + 1 > kMaxScenarioVariants) {
    reader.fail_at(*list, "variants has {} entries, above the limit of {}", entries.size(), kMaxScenarioVariants - 1);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    Mapping variant(reader, entries[i], fmt::format("variants[{}]", i), kVariantKeys);
    const YAML::Node& name_node = variant.require("name");
    std::string variant_name = reader.text(name_node, variant.path("name"));
    if (!valid_variant_name(variant_name)) {
      reader.fail_at(name_node, "{} '{}' may hold only letters, digits and - _ . +", variant.path("name"),
                     variant_name);
    }
    for (const ClusterVariant& earlier : variants) {
      if (earlier.name == variant_name) {
        reader.fail_at(name_node, "{}: a variant named '{}' {}", variant.path("name"), variant_name,
                       variant_name == kBaseVariantName ? "is the scenario's own cluster; pick another name"
                                                        : "comes earlier; variant names must be unique");
      }
    }
    // A variant changes the cluster, the allocator, or both.
    const YAML::Node* allocator = variant.find("allocator");
    const YAML::Node* cluster_node = variant.find("cluster");
    if (cluster_node == nullptr && allocator == nullptr) {
      reader.fail_at(entries[i], "{} needs cluster, allocator or both", variant.where());
    }
    ClusterVariant out{variant_name, base.cluster, base.mark, base.alloc_conf, base.allocator};
    if (cluster_node != nullptr) {
      const ClusterValues values =
          merge_cluster_values(base_values, read_cluster_values(reader, *cluster_node, variant.path("cluster")));
      out.cluster =
          resolve_cluster(reader, values, *cluster_node, fmt::format("cluster of variant '{}'", variant_name), overrides);
      out.mark = source_mark(cluster_node->Mark());
    }
    if (allocator != nullptr) read_allocator(reader, *allocator, variant.path("allocator"), out);
    variants.push_back(std::move(out));
  }
  return variants;
}

// ---- workload ----------------------------------------------------------------------------------

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

int read_gpus_per_node(const Reader& reader, const Mapping& workload, const std::vector<ClusterVariant>& variants);

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
  if (const YAML::Node* dtype = workload.find("dtype")) {
    const std::string text = reader.scalar(*dtype, workload.path("dtype"));
    sweep.dtype = reader.at(*dtype, workload.path("dtype"), [&] { return parse_data_type(text); });
  }
  if (const YAML::Node* op = workload.find("op")) {
    const std::string text = reader.scalar(*op, workload.path("op"));
    sweep.op = reader.at(*op, workload.path("op"), [&] { return parse_reduce_op(text); });
  }
  sweep.gpus_per_node = read_gpus_per_node(reader, workload, variants);
  const size_t points = sweep.collectives.size() * sweep.sizes_bytes.size() * sweep.algorithms.size();
  if (points > kMaxScenarioPoints) {
    reader.fail_at(node, "workload has {} collectives x {} sizes x {} algorithms = {} points, above the limit of {}",
                   sweep.collectives.size(), sweep.sizes_bytes.size(), sweep.algorithms.size(), points,
                   kMaxScenarioPoints);
  }
  return sweep;
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
  if (const YAML::Node* dtype = workload.find("dtype")) {
    const std::string text = reader.scalar(*dtype, workload.path("dtype"));
    loop.dtype = reader.at(*dtype, workload.path("dtype"), [&] { return parse_data_type(text); });
  }
  if (const YAML::Node* op = workload.find("op")) {
    const std::string text = reader.scalar(*op, workload.path("op"));
    loop.op = reader.at(*op, workload.path("op"), [&] { return parse_reduce_op(text); });
  }
  loop.gpus_per_node = read_gpus_per_node(reader, workload, variants);
  return loop;
}

// Every workload type: its name in `type:` and its reader.
using WorkloadReader = Workload (*)(const Reader&, const YAML::Node&, const std::vector<ClusterVariant>&);
Workload read_training(const Reader& reader, const YAML::Node& node, const std::vector<ClusterVariant>&) {
  return read_training_workload(reader, node, "workload");
}

// workload: {type: startup}: the layout's groups and the lever sets (sim/startup.h).
Workload read_startup(const Reader& reader, const YAML::Node& node, const std::vector<ClusterVariant>& variants) {
  Mapping workload(reader, node, "workload", kStartupKeys);
  StartupWorkload startup;
  if (const YAML::Node* v = workload.find("gpus")) {
    startup.gpus = static_cast<int>(reader.integer(*v, workload.path("gpus"), 1, models::kMaxNodes * 8));
    for (const ClusterVariant& variant : variants) {
      const int per_node = variant.cluster.gpus_per_node;
      if (startup.gpus >= per_node && startup.gpus % per_node != 0) {
        reader.fail_at(*v, "{}: {} GPUs do not fill nodes of {} GPUs (variant {})", workload.path("gpus"), startup.gpus,
                       per_node, variant.name);
      }
    }
  }
  if (const YAML::Node* v = workload.find("layout")) {
    startup.layout = read_startup_layout(reader, *v, workload.path("layout"), variants, startup.gpus);
  }
  const YAML::Node* configs = workload.find("configs");
  if (configs == nullptr) {
    startup.configs.push_back({"defaults", sim::StartupLevers{}, source_mark(node.Mark())});
    return startup;
  }
  const std::vector<YAML::Node> entries = reader.list(*configs, workload.path("configs"));
  if (entries.empty()) reader.fail_at(*configs, "{} is empty", workload.path("configs"));
  if (entries.size() > kMaxStartupConfigs) {
    reader.fail_at(*configs, "{} has {} entries, above the limit of {}", workload.path("configs"), entries.size(),
                   kMaxStartupConfigs);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    Mapping m(reader, entries[i], fmt::format("{}[{}]", workload.path("configs"), i), kStartupConfigKeys);
    StartupConfig config;
    config.mark = source_mark(entries[i].Mark());
    const YAML::Node& name_node = m.require("name");
    config.name = reader.text(name_node, m.path("name"));
    if (startup.find_config(config.name) != nullptr) {
      reader.fail_at(name_node, "{}: a second config named '{}'", m.path("name"), config.name);
    }
    read_startup_levers(reader, m, config.levers);
    startup.configs.push_back(std::move(config));
  }
  return startup;
}

constexpr std::array<std::pair<std::string_view, WorkloadReader>, 5> kWorkloadTypes{{
    {"collective-sweep", read_collective_sweep},
    {"collective-loop", read_collective_loop},
    {"training", read_training},
    {"startup", read_startup},
    {"claims", read_claims},
}};

Workload read_workload(const Reader& reader, const Mapping& top, const std::vector<ClusterVariant>& variants) {
  const YAML::Node& node = top.require("workload");
  if (!node.IsMap()) reader.fail_at(node, "workload must be a mapping of keys to values (got {})", node_kind(node));
  const YAML::Node type_node = node["type"];
  if (!type_node) reader.fail_at(node, "missing required key 'type' in workload");
  const std::string type = reader.text(type_node, "workload.type");
  for (const auto& [type_name, read] : kWorkloadTypes) {
    if (type == type_name) return read(reader, node, variants);
  }
  std::vector<std::string_view> names;
  for (const auto& entry : kWorkloadTypes) names.push_back(entry.first);
  reader.fail_at(type_node, "unknown workload type '{}' (expected: {})", type, fmt::join(names, ", "));
}

// ---- outputs, expectations ---------------------------------------------------------------------

Outputs read_outputs(const Reader& reader, const Mapping& top) {
  Outputs outputs;
  const YAML::Node* node = top.find("outputs");
  if (node == nullptr) return outputs;
  Mapping mapping(reader, *node, "outputs", kOutputKeys);
  if (const YAML::Node* json = mapping.find("json")) outputs.json = reader.boolean(*json, mapping.path("json"));
  if (const YAML::Node* csv = mapping.find("csv")) outputs.csv = reader.boolean(*csv, mapping.path("csv"));
  if (const YAML::Node* dumps = mapping.find("dumps")) outputs.dumps = reader.boolean(*dumps, mapping.path("dumps"));
  if (const YAML::Node* format = mapping.find("dump_format")) {
    const std::string text = reader.scalar(*format, mapping.path("dump_format"));
    outputs.dump_format = reader.at(*format, mapping.path("dump_format"), [&] { return parse_fr_format(text); });
  }
  if (const YAML::Node* size = mapping.find("fr_buffer_size")) {
    outputs.fr_buffer_size = static_cast<size_t>(
        reader.integer(*size, mapping.path("fr_buffer_size"), 0, static_cast<int64_t>(kMaxFrCapacity)));
  }
  return outputs;
}

NetworkChoice parse_network(std::string_view text) {
  if (text == "fluid") return NetworkChoice::kFluid;
  if (text == "packet") return NetworkChoice::kPacket;
  if (text == "ideal") return NetworkChoice::kIdeal;
  fail(ErrorCode::kInvalidArgument, "unknown network model '{}' (expected: fluid, packet, ideal)", text);
}

Bound read_bound_at(const Reader& reader, const YAML::Node& node, const std::string& path) {
  Mapping mapping(reader, node, path, kBoundKeys);
  Bound bound;
  constexpr double kMaxBound = 1e300;
  if (const YAML::Node* min = mapping.find("min"))
    bound.min = reader.number(*min, mapping.path("min"), 0, kMaxBound, false);
  if (const YAML::Node* max = mapping.find("max"))
    bound.max = reader.number(*max, mapping.path("max"), 0, kMaxBound, false);
  if (!bound.set()) reader.fail_at(node, "{} needs min, max or both", path);
  if (bound.min && bound.max && *bound.min > *bound.max) {
    reader.fail_at(node, "{}: min ({:g}) is larger than max ({:g})", path, *bound.min, *bound.max);
  }
  return bound;
}

Expectation read_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                             const std::vector<ClusterVariant>& variants, const CollectiveSweep& sweep) {
  Mapping mapping(reader, node, path, kExpectKeys);
  Expectation expectation;
  expectation.mark = source_mark(node.Mark());

  if (const YAML::Node* variant = mapping.find("variant")) {
    expectation.variant = reader.text(*variant, mapping.path("variant"));
    bool known = false;
    std::vector<std::string_view> names;
    for (const ClusterVariant& v : variants) {
      known = known || v.name == expectation.variant;
      names.push_back(v.name);
    }
    if (!known) {
      reader.fail_at(*variant, "{}: no variant named '{}' (variants: {})", mapping.path("variant"), expectation.variant,
                     fmt::join(names, ", "));
    }
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
    expectation.time_us = read_bound_at(reader, *bound, mapping.path("time_us"));
  }
  if (const YAML::Node* bound = mapping.find("algbw_GBps")) {
    expectation.algbw_GBps = read_bound_at(reader, *bound, mapping.path("algbw_GBps"));
  }
  if (const YAML::Node* bound = mapping.find("busbw_GBps")) {
    expectation.busbw_GBps = read_bound_at(reader, *bound, mapping.path("busbw_GBps"));
  }
  if (!expectation.time_us.set() && !expectation.algbw_GBps.set() && !expectation.busbw_GBps.set()) {
    reader.fail_at(node, "{} sets no bound (expected at least one of time_us, algbw_GBps, busbw_GBps)", path);
  }
  return expectation;
}

// The `expect` list when the workload is a W (else nothing): each entry read by
// read_one(node, "expect[i]", workload), at most kMaxScenarioExpectations of them.
template <typename W, typename ReadOne>
auto read_expect_list(const Reader& reader, const Mapping& top, const Scenario& scenario, ReadOne read_one) {
  using E = decltype(read_one(std::declval<const YAML::Node&>(), std::string(), std::declval<const W&>()));
  std::vector<E> expectations;
  const YAML::Node* node = top.find("expect");
  const auto* workload = std::get_if<W>(&scenario.workload);
  if (node == nullptr || workload == nullptr) return expectations;
  const std::vector<YAML::Node> entries = reader.list(*node, "expect");
  if (entries.size() > kMaxScenarioExpectations) {
    reader.fail_at(*node, "expect has {} entries, above the limit of {}", entries.size(), kMaxScenarioExpectations);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    expectations.push_back(read_one(entries[i], fmt::format("expect[{}]", i), *workload));
  }
  return expectations;
}

std::vector<Expectation> read_expectations(const Reader& reader, const Mapping& top, const Scenario& scenario) {
  return read_expect_list<CollectiveSweep>(
      reader, top, scenario, [&](const YAML::Node& n, const std::string& at, const CollectiveSweep& sweep) {
        return read_expectation(reader, n, at, scenario.variants, sweep);
      });
}

// `culprit_ranks: [3, 5]`, sorted (the analysis reports them in ascending order).
std::vector<int> read_rank_list(const Reader& reader, const YAML::Node& node, const std::string& path) {
  std::vector<int> ranks;
  if (!node.IsSequence()) reader.fail_at(node, "{} must be a list of ranks (may be empty)", path);
  for (size_t i = 0; i < node.size(); ++i) {
    ranks.push_back(static_cast<int>(reader.integer(node[i], fmt::format("{}[{}]", path, i), 0, kMaxScenarioGpus - 1)));
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

LoopExpectation read_loop_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                                      const CollectiveLoop& loop);

std::vector<LoopExpectation> read_loop_expectations(const Reader& reader, const Mapping& top,
                                                    const Scenario& scenario) {
  return read_expect_list<CollectiveLoop>(reader, top, scenario,
                                          [&](const YAML::Node& n, const std::string& at, const CollectiveLoop& loop) {
                                            return read_loop_expectation(reader, n, at, loop);
                                          });
}

// ---- faults, recovery -------------------------------------------------------------------------

// The fewest ranks any variant runs the workload on: a fault's rank must exist on every variant.
int fewest_ranks(const Scenario& scenario) {
  const auto* loop = std::get_if<CollectiveLoop>(&scenario.workload);
  int fewest = std::numeric_limits<int>::max();
  for (const ClusterVariant& v : scenario.variants) {
    const int per_node = loop != nullptr && loop->gpus_per_node > 0 ? loop->gpus_per_node : v.cluster.gpus_per_node;
    fewest = std::min(fewest, v.cluster.nodes * per_node);
  }
  return fewest;
}

void check_fault_target(const Reader& reader, const YAML::Node& node, const Mapping& mapping, Fault& fault,
                        const std::vector<ClusterVariant>& variants, int fewest) {
  const bool rank_fault = fault.kind == FaultKind::kRankCrash || fault.kind == FaultKind::kRankHang ||
                          fault.kind == FaultKind::kStraggler || fault.kind == FaultKind::kTransient ||
                          fault.kind == FaultKind::kDesync || fault.kind == FaultKind::kCorrupt;
  if (rank_fault) {
    const YAML::Node& rank = mapping.require("rank");
    fault.rank = static_cast<int>(reader.integer(rank, mapping.path("rank"), 0, fewest - 1));
  }
  if (fault.kind == FaultKind::kLinkDown || fault.kind == FaultKind::kLinkDegrade) {
    const YAML::Node& link = mapping.require("link");
    fault.link = reader.text(link, mapping.path("link"));
    for (const ClusterVariant& v : variants) {
      if (!models::build_cluster(v.cluster).find_link(fault.link)) {
        reader.fail_at(link, "{}: the cluster of '{}' has no link named '{}' (tandem topo --format text lists them)",
                       mapping.path("link"), v.name, fault.link);
      }
    }
  }
  if (fault.kind == FaultKind::kNicDown) {
    int nodes = std::numeric_limits<int>::max();
    int nics = std::numeric_limits<int>::max();
    for (const ClusterVariant& v : variants) {
      nodes = std::min(nodes, v.cluster.nodes);
      nics = std::min(nics, v.cluster.nics_per_node);
    }
    fault.node = static_cast<int>(reader.integer(mapping.require("node"), mapping.path("node"), 0, nodes - 1));
    fault.nic = static_cast<int>(reader.integer(mapping.require("nic"), mapping.path("nic"), 0, nics - 1));
  }
  if (fault.kind == FaultKind::kLinkDegrade) {
    fault.factor = reader.number(mapping.require("factor"), mapping.path("factor"), 0, 1, true);
    if (fault.factor >= 1)
      reader.fail_at(node, "{}: a degraded link runs below full speed (factor < 1)", mapping.where());
  }
  if (fault.kind == FaultKind::kStraggler) {
    fault.factor = reader.number(mapping.require("factor"), mapping.path("factor"), 1, 1000, true);
  }
}

// `loop`: the collective loop the faults act on; none: a training step's (Fault::group).
Fault read_fault(const Reader& reader, const YAML::Node& node, const std::string& path, const Scenario& scenario,
                 const CollectiveLoop* loop) {
  Mapping mapping(reader, node, path, kFaultKeys);
  Fault fault;
  const YAML::Node& kind = mapping.require("kind");
  const std::string kind_text = reader.scalar(kind, mapping.path("kind"));
  fault.kind = reader.at(kind, mapping.path("kind"), [&] { return parse_fault_kind(kind_text); });
  // Only the keys a kind uses: a stray key is a typo or a misunderstanding.
  auto allowed = [&](std::string_view key, bool ok) {
    if (const YAML::Node* value = mapping.find(key); value != nullptr && !ok) {
      reader.fail_at(*value, "{}: a {} fault takes no '{}'", mapping.path(key), name(fault.kind), key);
    }
  };
  const bool link_fault = fault.is_link_fault();
  allowed("link", fault.kind == FaultKind::kLinkDown || fault.kind == FaultKind::kLinkDegrade);
  allowed("node", fault.kind == FaultKind::kNicDown);
  allowed("nic", fault.kind == FaultKind::kNicDown);
  allowed("rank", !link_fault);
  allowed("factor", fault.kind == FaultKind::kLinkDegrade || fault.kind == FaultKind::kStraggler);
  allowed("recover_after_us", fault.kind == FaultKind::kLinkDown || fault.kind == FaultKind::kNicDown);
  allowed("issue", fault.kind == FaultKind::kDesync);
  allowed("at_op", fault.kind == FaultKind::kTransient || fault.kind == FaultKind::kCorrupt);
  allowed("group", loop == nullptr);
  if (loop == nullptr) {
    // A training step: the fault strikes a rank at its k-th collective in one communicator kind.
    if (!rehearsed_in_training(fault.kind)) {
      reader.fail_at(kind, "{}: a {} fault is not rehearsed in a training step ({} are)", mapping.path("kind"),
                     name(fault.kind), kRehearsedInTraining);
    }
    for (std::string_view key : {"at_time_us", "probability"}) {
      if (const YAML::Node* value = mapping.find(key)) {
        reader.fail_at(*value, "{}: a training step's fault strikes at a collective (group, at_collective)",
                       mapping.path(key));
      }
    }
    fault.group = reader.text(mapping.require("group"), mapping.path("group"));
    mapping.require("at_collective");
  }
  check_fault_target(reader, node, mapping, fault, scenario.variants, fewest_ranks(scenario));

  if (const YAML::Node* value = mapping.find("recover_after_us")) {
    fault.recover_after_s = reader.number(*value, mapping.path("recover_after_us"), 0, 1e12, true) * 1e-6;
  }
  if (const YAML::Node* value = mapping.find("at_collective")) {
    fault.trigger.collective = reader.integer(*value, mapping.path("at_collective"), 0,
                                              loop != nullptr ? loop->iterations - 1 : int64_t{1} << 40);
  }
  if (const YAML::Node* value = mapping.find("at_time_us")) {
    fault.trigger.at_s = reader.number(*value, mapping.path("at_time_us"), 0, 1e15, false) * 1e-6;
  }
  if (const YAML::Node* value = mapping.find("at_op")) {
    fault.trigger.op = reader.integer(*value, mapping.path("at_op"), 0, std::numeric_limits<int32_t>::max());
  }
  if (const YAML::Node* value = mapping.find("probability")) {
    fault.trigger.probability = reader.number(*value, mapping.path("probability"), 0, 1, true);
  }
  if (fault.kind == FaultKind::kDesync) {
    const YAML::Node& issue_node = mapping.require("issue");
    Mapping issue(reader, issue_node, mapping.path("issue"), kIssueKeys);
    if (const YAML::Node* c = issue.find("collective")) {
      const std::string text = reader.scalar(*c, issue.path("collective"));
      fault.desync_collective = reader.at(*c, issue.path("collective"), [&] { return parse_collective_name(text); });
    }
    if (const YAML::Node* c = issue.find("count")) {
      fault.desync_count = reader.integer(*c, issue.path("count"), 0, kMaxScenarioSizeBytes);
    }
    if (const YAML::Node* d = issue.find("dtype")) {
      const std::string text = reader.scalar(*d, issue.path("dtype"));
      fault.desync_dtype = reader.at(*d, issue.path("dtype"), [&] { return parse_data_type(text); });
    }
    if (!fault.desync_collective && !fault.desync_count && !fault.desync_dtype) {
      reader.fail_at(issue_node, "{} needs collective, count or dtype: what the rank issues instead",
                     mapping.path("issue"));
    }
  }
  return fault;
}

void read_faults(const Reader& reader, const Mapping& top, Scenario& scenario) {
  const YAML::Node* node = top.find("faults");
  const YAML::Node* seed = top.find("fault_seed");
  const auto* loop = std::get_if<CollectiveLoop>(&scenario.workload);
  const bool training = std::holds_alternative<TrainingWorkload>(scenario.workload);
  for (const YAML::Node* given : {node, seed}) {
    if (given != nullptr && loop == nullptr && !training) {
      reader.fail_at(*given,
                     "faults act on a sequence of collectives: they need workload type collective-loop or training");
    }
  }
  if (seed != nullptr) {
    scenario.faults.seed =
        static_cast<uint64_t>(reader.integer(*seed, "fault_seed", 0, std::numeric_limits<int64_t>::max()));
  }
  if (node == nullptr) return;
  const std::vector<YAML::Node> entries = reader.list(*node, "faults");
  if (entries.size() > kMaxScenarioFaults) {
    reader.fail_at(*node, "faults has {} entries, above the limit of {}", entries.size(), kMaxScenarioFaults);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    scenario.faults.faults.push_back(
        read_fault(reader, entries[i], fmt::format("faults[{}]", i), scenario, loop));
    scenario.fault_marks.push_back(source_mark(entries[i].Mark()));
  }
}

RecoveryPolicy read_recovery(const Reader& reader, const Mapping& top) {
  RecoveryPolicy policy;
  const YAML::Node* node = top.find("recovery");
  if (node == nullptr) return policy;
  Mapping mapping(reader, *node, "recovery", kRecoveryKeys);
  if (const YAML::Node* v = mapping.find("retry_max")) {
    policy.retry_max = static_cast<int>(reader.integer(*v, mapping.path("retry_max"), 0, 100));
  }
  if (const YAML::Node* v = mapping.find("backoff_us")) {
    policy.backoff_s = reader.number(*v, mapping.path("backoff_us"), 0, 1e9, false) * 1e-6;
  }
  if (const YAML::Node* v = mapping.find("watchdog_ms")) {
    policy.watchdog_s = reader.number(*v, mapping.path("watchdog_ms"), 0, 1e8, true) * 1e-3;
  }
  if (const YAML::Node* v = mapping.find("action")) {
    const std::string text = reader.scalar(*v, mapping.path("action"));
    policy.action = reader.at(*v, mapping.path("action"), [&] { return parse_recovery_action(text); });
  }
  if (const YAML::Node* v = mapping.find("verify")) policy.verify = reader.boolean(*v, mapping.path("verify"));
  return policy;
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
  if (const YAML::Node* v = mapping.find("time_us")) e.time_us = read_bound_at(reader, *v, mapping.path("time_us"));
  if (const YAML::Node* v = mapping.find("cost_us")) e.cost_us = read_bound_at(reader, *v, mapping.path("cost_us"));
  if (!e.outcome && !e.culprit_ranks && !e.time_us.set() && !e.cost_us.set()) {
    reader.fail_at(node, "{} checks nothing (expected outcome, culprit_ranks, time_us or cost_us)", path);
  }
  return e;
}

// ---- training ----------------------------------------------------------------------------------

const std::string* find_layout(const TrainingWorkload& training, const std::string& layout_name) {
  for (const TrainingLayoutEntry& entry : training.layouts) {
    if (entry.layout.name == layout_name) return &entry.layout.name;
  }
  return nullptr;
}

TrainingExpectation read_training_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                                              const Scenario& scenario, const TrainingWorkload& training) {
  Mapping mapping(reader, node, path, kTrainingExpectKeys);
  TrainingExpectation e;
  e.mark = source_mark(node.Mark());
  auto check_variant = [&](const YAML::Node& v, const std::string& at) {
    std::string text = reader.text(v, at);
    if (scenario.find_variant(text) == nullptr) {
      std::vector<std::string_view> names;
      for (const ClusterVariant& variant : scenario.variants) names.push_back(variant.name);
      reader.fail_at(v, "{}: no variant named '{}' (variants: {})", at, text, fmt::join(names, ", "));
    }
    return text;
  };
  if (const YAML::Node* v = mapping.find("variant")) e.variant = check_variant(*v, mapping.path("variant"));
  const YAML::Node& layout = mapping.require("layout");
  e.layout = reader.text(layout, mapping.path("layout"));
  if (find_layout(training, e.layout) == nullptr) {
    std::vector<std::string_view> names;
    for (const TrainingLayoutEntry& entry : training.layouts) names.push_back(entry.layout.name);
    reader.fail_at(layout, "{}: no layout named '{}' (layouts: {})", mapping.path("layout"), e.layout,
                   fmt::join(names, ", "));
  }
  if (const YAML::Node* v = mapping.find("backend")) {
    const std::string text = reader.scalar(*v, mapping.path("backend"));
    e.backend = reader.at(*v, mapping.path("backend"), [&] { return parse_backend(text); });
  }
  if (const YAML::Node* v = mapping.find("fits")) e.fits = reader.boolean(*v, mapping.path("fits"));
  if (const YAML::Node* v = mapping.find("culprit_ranks")) {
    if (scenario.faults.empty()) {
      reader.fail_at(*v, "{}: culprit_ranks needs faults: to rehearse", mapping.path("culprit_ranks"));
    }
    e.culprit_ranks = read_rank_list(reader, *v, mapping.path("culprit_ranks"));
  }
  const std::array<std::pair<std::string_view, Bound*>, 7> bounds{{{"step_time_s", &e.step_time_s},
                                                                   {"achieved_mfu", &e.achieved_mfu},
                                                                   {"exposed_comm_s", &e.exposed_comm_s},
                                                                   {"bubble_s", &e.bubble_s},
                                                                   {"memory_GB", &e.memory_GB},
                                                                   {"tokens_per_s_per_gpu", &e.tokens_per_s_per_gpu},
                                                                   {"speedup", &e.speedup}}};
  bool any = e.fits.has_value() || e.culprit_ranks.has_value();
  for (const auto& [key, bound] : bounds) {
    if (const YAML::Node* v = mapping.find(key)) {
      *bound = read_bound_at(reader, *v, mapping.path(key));
      any = true;
    }
  }
  if (const YAML::Node* v = mapping.find("relative_to")) {
    e.relative_to = check_variant(*v, mapping.path("relative_to"));
    if (!e.speedup.set()) reader.fail_at(*v, "{} needs a speedup bound", mapping.path("relative_to"));
  } else if (e.speedup.set()) {
    reader.fail_at(node, "{}.speedup needs relative_to: the variant it is measured against", path);
  }
  if (!any) {
    reader.fail_at(node,
                   "{} checks nothing (expected fits, step_time_s, achieved_mfu, exposed_comm_s, bubble_s, "
                   "memory_GB, tokens_per_s_per_gpu, speedup or culprit_ranks)",
                   path);
  }
  return e;
}

std::vector<TrainingExpectation> read_training_expectations(const Reader& reader, const Mapping& top,
                                                            const Scenario& scenario) {
  return read_expect_list<TrainingWorkload>(
      reader, top, scenario, [&](const YAML::Node& n, const std::string& at, const TrainingWorkload& training) {
        return read_training_expectation(reader, n, at, scenario, training);
      });
}

// ---- start-up -----------------------------------------------------------------------------------

StartupExpectation read_startup_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                                            const Scenario& scenario, const StartupWorkload& startup) {
  Mapping mapping(reader, node, path, kStartupExpectKeys);
  StartupExpectation e;
  e.mark = source_mark(node.Mark());
  if (const YAML::Node* v = mapping.find("variant")) {
    e.variant = reader.text(*v, mapping.path("variant"));
    if (scenario.find_variant(e.variant) == nullptr) {
      std::vector<std::string_view> names;
      for (const ClusterVariant& variant : scenario.variants) names.push_back(variant.name);
      reader.fail_at(*v, "{}: no variant named '{}' (variants: {})", mapping.path("variant"), e.variant,
                     fmt::join(names, ", "));
    }
  }
  auto check_config = [&](const YAML::Node& v, const std::string& at) {
    std::string text = reader.text(v, at);
    if (startup.find_config(text) == nullptr) {
      std::vector<std::string_view> names;
      for (const StartupConfig& config : startup.configs) names.push_back(config.name);
      reader.fail_at(v, "{}: no config named '{}' (configs: {})", at, text, fmt::join(names, ", "));
    }
    return text;
  };
  e.config = check_config(mapping.require("config"), mapping.path("config"));
  if (const YAML::Node* v = mapping.find("total_s")) e.total_s = read_bound_at(reader, *v, mapping.path("total_s"));
  if (const YAML::Node* v = mapping.find("speedup")) e.speedup = read_bound_at(reader, *v, mapping.path("speedup"));
  if (const YAML::Node* v = mapping.find("relative_to")) {
    e.relative_to = check_config(*v, mapping.path("relative_to"));
    if (!e.speedup.set()) reader.fail_at(*v, "{} needs a speedup bound", mapping.path("relative_to"));
  } else if (e.speedup.set()) {
    reader.fail_at(node, "{}.speedup needs relative_to: the config it is measured against", path);
  }
  if (!e.total_s.set() && !e.speedup.set())
    reader.fail_at(node, "{} checks nothing (expected total_s or speedup)", path);
  return e;
}

std::vector<StartupExpectation> read_startup_expectations(const Reader& reader, const Mapping& top,
                                                          const Scenario& scenario) {
  return read_expect_list<StartupWorkload>(
      reader, top, scenario, [&](const YAML::Node& n, const std::string& at, const StartupWorkload& startup) {
        return read_startup_expectation(reader, n, at, scenario, startup);
      });
}

std::vector<ClaimExpectation> read_claim_expectations(const Reader& reader, const Mapping& top,
                                                      const Scenario& scenario) {
  return read_expect_list<ClaimsWorkload>(
      reader, top, scenario, [&](const YAML::Node& n, const std::string& at, const ClaimsWorkload& claims) {
        return read_claim_expectation(reader, n, at, claims);
      });
}

// ---- the whole file ----------------------------------------------------------------------------

void check_version(const Reader& reader, const YAML::Node& root) {
  if (!root.IsMap()) {
    reader.fail_at(root, "a scenario is a mapping that starts with 'tandem_scenario: {}' (got {})",
                   kScenarioFormatVersion, node_kind(root));
  }
  const YAML::Node version = root["tandem_scenario"];
  if (!version) {
    reader.fail_at(root, "missing required key 'tandem_scenario' (a scenario starts with 'tandem_scenario: {}')",
                   kScenarioFormatVersion);
  }
  const std::string text = reader.scalar(version, "tandem_scenario");
  if (text != std::to_string(kScenarioFormatVersion)) {
    reader.fail_at(version, "unsupported scenario format version '{}' (this tandem reads version {})", text,
                   kScenarioFormatVersion);
  }
}

Scenario read_scenario(const Reader& reader, const YAML::Node& root, const ClusterOverrides& overrides) {
  check_version(reader, root);
  Mapping top(reader, root, "", kTopKeys);
  Scenario scenario;
  scenario.file = reader.file();

  const YAML::Node& name_node = top.require("name");
  scenario.name = reader.text(name_node, "name");
  if (scenario.name.find('\n') != std::string::npos) reader.fail_at(name_node, "name must be one line");
  if (const YAML::Node* description = top.find("description")) {
    scenario.description = reader.scalar(*description, "description");
  }
  scenario.variants = read_clusters(reader, top, overrides);
  if (const YAML::Node* backend = top.find("backend")) {
    const std::string text = reader.scalar(*backend, "backend");
    scenario.backend = reader.at(*backend, "backend", [&] { return parse_backend(text); });
  }
  if (const YAML::Node* network = top.find("network")) {
    const std::string text = reader.scalar(*network, "network");
    scenario.network = reader.at(*network, "network", [&] { return parse_network(text); });
  }
  if (const YAML::Node* calibration = top.find("calibration")) {
    const std::string text = reader.text(*calibration, "calibration");
    const std::filesystem::path relative =
        std::filesystem::path(reader.file()).parent_path() / std::filesystem::path(text);
    const std::string path = std::filesystem::path(text).is_absolute() ? text : relative.lexically_normal().string();
    if (scenario.network == NetworkChoice::kIdeal) {
      reader.fail_at(*calibration,
                     "calibration does not apply to network: ideal (the alpha-beta model has no efficiencies)");
    }
    scenario.calibration = reader.at(*calibration, "calibration", [&] { return read_profile(path); });
    for (const ClusterVariant& variant : scenario.variants) {
      reader.at(*calibration, "calibration", [&] {
        check_profile_cluster(*scenario.calibration, variant.cluster);
        return 0;
      });
    }
  }
  scenario.workload = read_workload(reader, top, scenario.variants);
  read_faults(reader, top, scenario);
  scenario.recovery = read_recovery(reader, top);
  scenario.outputs = read_outputs(reader, top);
  // Each reader reads `expect:` only for its own workload type (the others return nothing).
  auto add = [&](auto read) {
    for (auto& e : read(reader, top, scenario)) scenario.expectations.emplace_back(std::move(e));
  };
  add(read_expectations);
  add(read_loop_expectations);
  add(read_training_expectations);
  add(read_startup_expectations);
  add(read_claim_expectations);
  return scenario;
}

}  // namespace

Bound read_bound(const Reader& reader, const YAML::Node& node, const std::string& path) {
  return read_bound_at(reader, node, path);
}

models::ParallelLayout read_startup_layout(const Reader& reader, const YAML::Node& node, const std::string& path,
                                           const std::vector<ClusterVariant>& variants, int gpus) {
  Mapping m(reader, node, path, kStartupLayoutKeys);
  models::ParallelLayout layout;
  auto dim = [&](const char* key, int& out) {
    if (const YAML::Node* d = m.find(key)) out = static_cast<int>(reader.integer(*d, m.path(key), 1, 1 << 20));
  };
  dim("tp", layout.tp);
  dim("cp", layout.cp);
  dim("ep", layout.ep);
  dim("pp", layout.pp);
  for (const ClusterVariant& variant : variants) {
    const int job = gpus > 0 ? gpus : variant.cluster.nodes * variant.cluster.gpus_per_node;
    reader.at(node, path, [&] {
      try {
        sim::check_groups(sim::layout_groups(layout, job), job);
      } catch (const Error& error) {
        fail(ErrorCode::kInvalidArgument, "{} (variant {})", error.what(), variant.name);
      }
    });
  }
  return layout;
}

void read_startup_levers(const Reader& reader, const Mapping& m, sim::StartupLevers& levers) {
  if (const YAML::Node* v = m.find("store")) {
    const std::string text = reader.scalar(*v, m.path("store"));
    levers.store = reader.at(*v, m.path("store"), [&] { return sim::parse_store_backend(text); });
  }
  if (const YAML::Node* v = m.find("eager_init")) levers.eager_init = reader.boolean(*v, m.path("eager_init"));
  if (const YAML::Node* v = m.find("ranks_per_root")) {
    levers.ranks_per_root = static_cast<int>(reader.integer(*v, m.path("ranks_per_root"), 0, 1 << 20));
  }
  if (const YAML::Node* v = m.find("runtime_connect")) {
    levers.runtime_connect = reader.boolean(*v, m.path("runtime_connect"));
  }
  if (const YAML::Node* v = m.find("oob_net")) levers.oob_net = reader.boolean(*v, m.path("oob_net"));
  if (const YAML::Node* v = m.find("init_barriers")) levers.init_barriers = reader.boolean(*v, m.path("init_barriers"));
  if (const YAML::Node* v = m.find("topo_cache")) levers.topo_cache = reader.boolean(*v, m.path("topo_cache"));
}

models::ClusterSpec read_cluster_spec(const Reader& reader, const YAML::Node& node, const std::string& path) {
  return resolve_cluster(reader, read_cluster_values(reader, node, path), node, path, ClusterOverrides{});
}

// recompute: none | selective | full, or a boolean (true: full), as scenarios before selective had.
models::Recompute read_recompute(const Reader& reader, const YAML::Node& node, const std::string& path) {
  const std::string text = reader.scalar(node, path);
  return reader.at(node, path, [&] { return models::parse_recompute(text); });
}

// A workload's `model:`: a preset's name, or the architecture key by key.
models::TransformerSpec read_model(const Reader& reader, const YAML::Node& model, const std::string& path) {
  if (!model.IsMap()) {
    const std::string text = reader.text(model, path);
    return reader.at(model, path, [&] { return models::transformer_preset(text); });
  }
  models::TransformerSpec out;
  Mapping m(reader, model, path, kModelKeys);
  out.name = reader.text(m.require("name"), m.path("name"));
  out.layers = static_cast<int>(reader.integer(m.require("layers"), m.path("layers"), 1, 100000));
  out.d_model = reader.integer(m.require("d_model"), m.path("d_model"), 1, int64_t{1} << 20);
  out.ffn = reader.integer(m.require("ffn"), m.path("ffn"), 1, int64_t{1} << 24);
  out.heads = static_cast<int>(reader.integer(m.require("heads"), m.path("heads"), 1, 1 << 16));
  out.kv_heads = out.heads;
  if (const YAML::Node* v = m.find("kv_heads")) {
    out.kv_heads = static_cast<int>(reader.integer(*v, m.path("kv_heads"), 1, 1 << 16));
  }
  out.vocab = reader.integer(m.require("vocab"), m.path("vocab"), 1, int64_t{1} << 24);
  if (const YAML::Node* v = m.find("tied_embeddings"))
    out.tied_embeddings = reader.boolean(*v, m.path("tied_embeddings"));
  if (const YAML::Node* v = m.find("experts"))
    out.experts = static_cast<int>(reader.integer(*v, m.path("experts"), 0, 4096));
  if (const YAML::Node* v = m.find("top_k"))
    out.top_k = static_cast<int>(reader.integer(*v, m.path("top_k"), 1, 4096));
  if (const YAML::Node* v = m.find("moe_ffn"))
    out.moe_ffn = reader.integer(*v, m.path("moe_ffn"), 1, int64_t{1} << 24);
  if (const YAML::Node* v = m.find("shared_experts"))
    out.shared_experts = static_cast<int>(reader.integer(*v, m.path("shared_experts"), 0, 64));
  if (const YAML::Node* v = m.find("dense_layers"))
    out.dense_layers = static_cast<int>(reader.integer(*v, m.path("dense_layers"), 0, 100000));
  reader.at(model, path, [&] { models::validate(out); });
  return out;
}

// One entry of `layouts:` at `path`, its name unlike every earlier one's.
TrainingLayoutEntry read_layout_entry(const Reader& reader, const YAML::Node& node, const std::string& path,
                                      const std::vector<TrainingLayoutEntry>& earlier_entries) {
  Mapping m(reader, node, path, kTrainingLayoutKeys);
  TrainingLayoutEntry entry;
  entry.mark = source_mark(node.Mark());
  entry.layout.name = reader.text(m.require("name"), m.path("name"));
  if (!valid_variant_name(entry.layout.name)) {
    reader.fail_at(m.require("name"), "{} '{}' may hold only letters, digits and - _ . +", m.path("name"),
                   entry.layout.name);
  }
  for (const TrainingLayoutEntry& earlier : earlier_entries) {
    if (earlier.layout.name == entry.layout.name) {
      reader.fail_at(m.require("name"), "{}: a layout named '{}' comes earlier", m.path("name"), entry.layout.name);
    }
  }
  if (const YAML::Node* v = m.find("tp"))
    entry.layout.tp = static_cast<int>(reader.integer(*v, m.path("tp"), 1, 256));
  if (const YAML::Node* v = m.find("pp"))
    entry.layout.pp = static_cast<int>(reader.integer(*v, m.path("pp"), 1, 1024));
  if (const YAML::Node* v = m.find("sharding")) {
    const std::string text = reader.scalar(*v, m.path("sharding"));
    entry.layout.sharding = reader.at(*v, m.path("sharding"), [&] { return models::parse_sharding(text); });
  }
  if (const YAML::Node* v = m.find("shard_group")) {
    if (entry.layout.sharding != models::Sharding::kHsdp)
      reader.fail_at(*v, "{} goes with sharding: hsdp", m.path("shard_group"));
    entry.layout.shard_group = static_cast<int>(reader.integer(*v, m.path("shard_group"), 1, kMaxScenarioGpus));
  }
  if (const YAML::Node* v = m.find("vp"))
    entry.layout.vp = static_cast<int>(reader.integer(*v, m.path("vp"), 1, 1024));
  if (const YAML::Node* v = m.find("cp"))
    entry.layout.cp = static_cast<int>(reader.integer(*v, m.path("cp"), 1, 1024));
  if (const YAML::Node* v = m.find("ep"))
    entry.layout.ep = static_cast<int>(reader.integer(*v, m.path("ep"), 1, 4096));
  if (const YAML::Node* v = m.find("tp_overlap")) entry.layout.tp_overlap = reader.boolean(*v, m.path("tp_overlap"));
  if (const YAML::Node* v = m.find("recompute")) entry.recompute = read_recompute(reader, *v, m.path("recompute"));
  if (const YAML::Node* v = m.find("micro_batch")) {
    entry.micro_batch = static_cast<int>(reader.integer(*v, m.path("micro_batch"), 1, 4096));
  }
  return entry;
}

TrainingWorkload read_training_workload(const Reader& reader, const YAML::Node& node, const std::string& path) {
  Mapping workload(reader, node, path, kTrainingKeys);
  TrainingWorkload training;
  models::TrainingConfig& base = training.base;
  base.model = read_model(reader, workload.require("model"), workload.path("model"));
  if (const YAML::Node* v = workload.find("seq_len")) {
    base.seq_len = static_cast<int>(reader.integer(*v, workload.path("seq_len"), 1, models::kMaxSeqLen));
  }
  const YAML::Node* global = workload.find("global_batch");
  const YAML::Node* per_gpu = workload.find("batch_per_gpu");
  if (global != nullptr && per_gpu != nullptr) {
    reader.fail_at(*per_gpu, "{}: give global_batch or batch_per_gpu, not both", workload.path("batch_per_gpu"));
  }
  if (global != nullptr) {
    base.global_batch = static_cast<int>(reader.integer(*global, workload.path("global_batch"), 1, kMaxGlobalBatch));
  }
  if (per_gpu != nullptr)
    training.batch_per_gpu = reader.number(*per_gpu, workload.path("batch_per_gpu"), 0, 4096, true);
  if (const YAML::Node* v = workload.find("micro_batch")) {
    base.micro_batch = static_cast<int>(reader.integer(*v, workload.path("micro_batch"), 1, 4096));
  }
  if (const YAML::Node* v = workload.find("precision")) {
    const std::string text = reader.scalar(*v, workload.path("precision"));
    base.precision = reader.at(*v, workload.path("precision"), [&] { return models::parse_precision(text); });
  }
  if (const YAML::Node* v = workload.find("mfu")) base.mfu = reader.number(*v, workload.path("mfu"), 0, 1, true);
  if (const YAML::Node* v = workload.find("capacity_factor"))
    base.capacity_factor = reader.number(*v, workload.path("capacity_factor"), 1, 16, false);
  if (const YAML::Node* v = workload.find("kernels")) {
    const std::string text = reader.scalar(*v, workload.path("kernels"));
    base.kernels = reader.at(*v, workload.path("kernels"), [&] { return models::parse_kernel_stack(text); });
  }
  if (const YAML::Node* v = workload.find("recompute"))
    base.recompute = read_recompute(reader, *v, workload.path("recompute"));
  if (const YAML::Node* v = workload.find("grad_reduce_dtype")) {
    const std::string text = reader.scalar(*v, workload.path("grad_reduce_dtype"));
    base.grad_reduce_dtype = reader.at(*v, workload.path("grad_reduce_dtype"), [&] { return parse_data_type(text); });
    if (base.grad_reduce_dtype != DataType::kBF16 && base.grad_reduce_dtype != DataType::kF32) {
      reader.fail_at(*v, "{} must be bf16 or f32", workload.path("grad_reduce_dtype"));
    }
  }
  if (const YAML::Node* v = workload.find("algorithm")) {
    const std::string text = reader.scalar(*v, workload.path("algorithm"));
    base.algorithm = reader.at(*v, workload.path("algorithm"), [&] { return parse_training_algorithm(text); });
  }
  const YAML::Node& layouts = workload.require("layouts");
  const std::vector<YAML::Node> entries = reader.list(layouts, workload.path("layouts"));
  if (entries.size() > kMaxTrainingLayouts) {
    reader.fail_at(layouts, "{} has {} entries, above the limit of {}", workload.path("layouts"), entries.size(),
                   kMaxTrainingLayouts);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    training.layouts.push_back(read_layout_entry(reader, entries[i], fmt::format("{}[{}]", workload.path("layouts"), i),
                                                 training.layouts));
  }
  return training;
}

const StartupConfig* StartupWorkload::find_config(std::string_view config_name) const {
  for (const StartupConfig& config : configs) {
    if (config.name == config_name) return &config;
  }
  return nullptr;
}

models::TrainingConfig TrainingWorkload::config_for(size_t index, int gpus) const {
  const TrainingLayoutEntry& entry = layouts.at(index);
  models::TrainingConfig config = base;
  config.layout = entry.layout;
  if (entry.recompute) config.recompute = *entry.recompute;
  if (entry.micro_batch) config.micro_batch = *entry.micro_batch;
  if (batch_per_gpu) config.global_batch = std::max(1, static_cast<int>(std::llround(*batch_per_gpu * gpus)));
  return config;
}

Scenario parse_scenario(std::string_view yaml_text, const std::string& file, const ClusterOverrides& overrides) {
  const Reader reader(file);
  const YAML::Node root = load_one_document(reader, yaml_text);
  if (!root || root.IsNull()) {
    reader.fail_at_mark(
        {1, 1}, fmt::format("the scenario is empty (it starts with 'tandem_scenario: {}')", kScenarioFormatVersion));
  }
  try {
    return read_scenario(reader, root, overrides);
  } catch (const YAML::Exception& error) {
    // The readers above check every node's kind before using it; this is a last guard.
    reader.fail_at_mark(source_mark(error.mark), error.msg);
  }
}

Scenario load_scenario(const std::string& path, const ClusterOverrides& overrides) {
  return parse_scenario(read_text_file(path, "scenario", kMaxScenarioFileBytes), path, overrides);
}

}  // namespace tandem::app
