// Reading a scenario's `cluster` (a preset plus overrides), its `allocator` and its `variants`: each
// variant's cluster is the base's values with the variant's replacing them, resolved and checked as a
// whole, so that an error points at whichever file position set the value at fault.
#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "app/common/cluster_keys.h"
#include "app/scenario/scenario_internal.h"
#include "core/error.h"

namespace tandem::app {
namespace {

// The keys of a `variants` entry, in the order docs/scenarios.md lists them.
constexpr std::array<std::string_view, 3> kVariantKeys{"name", "cluster", "allocator"};

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

// `allocator:` at `node`: PyTorch's conf string, checked by the allocator model's own parser.
void read_allocator(const Reader& reader, const YAML::Node& node, const std::string& path, ClusterVariant& variant) {
  variant.alloc_conf = reader.text(node, path);
  variant.allocator = reader.at(node, path, [&] { return models::parse_alloc_conf(variant.alloc_conf); });
}

}  // namespace

bool valid_variant_name(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '+';
  });
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

models::ClusterSpec read_cluster_spec(const Reader& reader, const YAML::Node& node, const std::string& path) {
  return resolve_cluster(reader, read_cluster_values(reader, node, path), node, path, ClusterOverrides{});
}

}  // namespace tandem::app
