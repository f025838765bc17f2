// Reading `workload: {type: startup}` and its `expect` entries: the job's GPUs, its layout's
// process groups, the lever sets to compare (sim/startup.h) and what each expectation bounds. Plan
// sweeps read the same layouts and levers (scenario_yaml.h).
#include <array>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "app/scenario/scenario_internal.h"
#include "core/error.h"

namespace tandem::app {
namespace {

// The keys each section accepts, in the order docs/scenarios.md lists them.
constexpr std::array<std::string_view, 4> kStartupKeys{"type", "gpus", "layout", "configs"};
constexpr std::array<std::string_view, 4> kStartupLayoutKeys{"tp", "cp", "ep", "pp"};
constexpr std::array<std::string_view, 8> kStartupConfigKeys{
    "name", "store", "eager_init", "ranks_per_root", "runtime_connect", "oob_net", "init_barriers", "topo_cache"};
constexpr std::array<std::string_view, 5> kStartupExpectKeys{"variant", "config", "total_s", "relative_to", "speedup"};

// At most this many lever sets in `configs`.
constexpr size_t kMaxStartupConfigs = 32;

}  // namespace

const StartupConfig* StartupWorkload::find_config(std::string_view config_name) const {
  for (const StartupConfig& config : configs) {
    if (config.name == config_name) return &config;
  }
  return nullptr;
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

StartupExpectation read_startup_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                                            const Scenario& scenario, const StartupWorkload& startup) {
  Mapping mapping(reader, node, path, kStartupExpectKeys);
  StartupExpectation e;
  e.mark = source_mark(node.Mark());
  if (const YAML::Node* v = mapping.find("variant")) {
    e.variant = read_variant_name(reader, *v, mapping.path("variant"), scenario.variants);
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
  if (const YAML::Node* v = mapping.find("total_s")) e.total_s = read_bound(reader, *v, mapping.path("total_s"));
  if (const YAML::Node* v = mapping.find("speedup")) e.speedup = read_bound(reader, *v, mapping.path("speedup"));
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

}  // namespace tandem::app
