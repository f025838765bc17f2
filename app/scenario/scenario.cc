// Reading a scenario file: its version, name, backend, network and calibration, then each section
// by its own reader (scenario_cluster.cc, scenario_faults.cc, one file per workload type) and the
// `expect` list of the workload's type; the names of the scenario's enums.
#include "app/scenario/scenario.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "app/scenario/scenario_internal.h"
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

std::string not_applicable_reason(std::string_view algorithm, Collective collective) {
  return fmt::format("{} does not implement {}", algorithm, name(collective));
}

namespace {

// The keys each section accepts, in the order docs/scenarios.md lists them.
constexpr std::array<std::string_view, 15> kTopKeys{
    "tandem_scenario", "name",     "description", "cluster",    "variants", "backend", "network",
    "calibration",     "workload", "faults",      "fault_seed", "recovery", "outputs", "allocator", "expect"};
constexpr std::array<std::string_view, 5> kOutputKeys{"json", "csv", "dumps", "dump_format", "fr_buffer_size"};
constexpr std::array<std::string_view, 2> kBoundKeys{"min", "max"};

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

std::vector<LoopExpectation> read_loop_expectations(const Reader& reader, const Mapping& top,
                                                    const Scenario& scenario) {
  return read_expect_list<CollectiveLoop>(reader, top, scenario,
                                          [&](const YAML::Node& n, const std::string& at, const CollectiveLoop& loop) {
                                            return read_loop_expectation(reader, n, at, loop);
                                          });
}

std::vector<TrainingExpectation> read_training_expectations(const Reader& reader, const Mapping& top,
                                                            const Scenario& scenario) {
  return read_expect_list<TrainingWorkload>(
      reader, top, scenario, [&](const YAML::Node& n, const std::string& at, const TrainingWorkload& training) {
        return read_training_expectation(reader, n, at, scenario, training);
      });
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

// Every workload type: its name in `type:` and its reader.
using WorkloadReader = Workload (*)(const Reader&, const YAML::Node&, const std::vector<ClusterVariant>&);
Workload read_training(const Reader& reader, const YAML::Node& node, const std::vector<ClusterVariant>&) {
  return read_training_workload(reader, node, "workload");
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

std::vector<int> read_rank_list(const Reader& reader, const YAML::Node& node, const std::string& path) {
  std::vector<int> ranks;
  if (!node.IsSequence()) reader.fail_at(node, "{} must be a list of ranks (may be empty)", path);
  for (size_t i = 0; i < node.size(); ++i) {
    ranks.push_back(static_cast<int>(reader.integer(node[i], fmt::format("{}[{}]", path, i), 0, kMaxScenarioGpus - 1)));
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

std::string read_variant_name(const Reader& reader, const YAML::Node& node, const std::string& path,
                              const std::vector<ClusterVariant>& variants) {
  std::string variant_name = reader.text(node, path);
  const bool known = std::any_of(variants.begin(), variants.end(),
                                 [&](const ClusterVariant& v) { return v.name == variant_name; });
  if (!known) {
    std::vector<std::string_view> names;
    for (const ClusterVariant& v : variants) names.push_back(v.name);
    reader.fail_at(node, "{}: no variant named '{}' (variants: {})", path, variant_name, fmt::join(names, ", "));
  }
  return variant_name;
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
