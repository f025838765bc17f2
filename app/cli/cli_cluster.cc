#include "app/cli/cli_cluster.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "app/cli/cli_paths.h"
#include "core/error.h"

namespace tandem::app {

namespace {

size_t index_of(std::string_view key) {
  const ClusterKey* found = find_cluster_key(key);
  if (found == nullptr) fail(ErrorCode::kInvalidArgument, "'{}' is not one of the cluster's keys", key);
  return static_cast<size_t>(found - cluster_keys().data());
}

// The values given, in the table's order, each named by its flag.
std::vector<ClusterValueText> given_values(const ClusterOptions& options) {
  std::vector<ClusterValueText> given;
  const std::span<const ClusterKey> keys = cluster_keys();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (options.values[i]) given.push_back({&keys[i], *options.values[i], std::string(keys[i].flag)});
  }
  return given;
}

}  // namespace

std::optional<std::string>& ClusterOptions::value(std::string_view key) { return values[index_of(key)]; }

const std::optional<std::string>& ClusterOptions::value(std::string_view key) const {
  return values[index_of(key)];
}

void add_cluster_options(CLI::App& command, ClusterOptions& options, ClusterDefaults defaults) {
  const bool scenario = defaults == ClusterDefaults::kScenario;
  std::string presets;
  for (const std::string& name : models::cluster_preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  CLI::Option* preset =
      command
          .add_option("--cluster", options.preset,
                      "cluster preset: " + presets + (scenario ? " (default: the scenario's)" : ""))
          ->each([&options](const std::string&) { options.preset_given = true; });
  if (!scenario) preset->capture_default_str();
  const std::span<const ClusterKey> keys = cluster_keys();
  for (size_t i = 0; i < keys.size(); ++i) {
    const ClusterKey& key = keys[i];
    std::string help(key.help);
    if (key.key == "nodes") help += scenario ? " (default: the scenario's)" : " (default 1)";
    if (key.kind == ClusterKey::Kind::kInteger || key.kind == ClusterKey::Kind::kNumber) {
      help += fmt::format(" [{:g} .. {:g}]", key.min, key.max);
    }
    if (key.kind == ClusterKey::Kind::kBoolean) {
      // --sharp alone means true; --sharp=false turns off what the preset has.
      command.add_flag(fmt::format("{}{{true}}", key.flag), options.values[i], help + " (--flag or --flag=false)");
    } else {
      command.add_option(std::string(key.flag), options.values[i], help)
          ->type_name(key.kind == ClusterKey::Kind::kInteger  ? "INT"
                      : key.kind == ClusterKey::Kind::kNumber ? "NUM"
                                                              : "TEXT");
    }
  }
}

models::ClusterSpec cluster_spec(const ClusterOptions& options) {
  std::vector<ClusterValueText> given = given_values(options);
  // A command's cluster is one node unless told: not the preset's size.
  if (!options.value("nodes")) given.insert(given.begin(), {find_cluster_key("nodes"), "1", "--nodes"});
  return resolve_cluster_spec(options.preset, given);
}

ClusterOverrides cluster_overrides(const ClusterOptions& options) {
  ClusterOverrides overrides;
  if (options.preset_given) overrides.preset = options.preset;
  overrides.values = given_values(options);
  models::ClusterSpec scratch = models::cluster_preset(options.preset);
  for (const ClusterValueText& value : overrides.values) set_cluster_value(scratch, value);
  return overrides;
}

std::vector<std::string> cluster_notes(const models::ClusterSpec& spec) {
  std::vector<std::string> notes;
  const int gpus_per_nic = spec.gpus_per_node / spec.nics_per_node;
  if (spec.nodes > 1 && spec.nic_Bps > gpus_per_nic * spec.pcie_Bps) {
    notes.push_back(
        fmt::format("a {:g} GB/s NIC is fed by {} x {:g} GB/s of PCIe: PCIe is the bottleneck "
                    "(--pcie-GBps raises it)",
                    spec.nic_Bps / 1e9, gpus_per_nic, spec.pcie_Bps / 1e9));
  }
  return notes;
}

}  // namespace tandem::app
