#include "app/common/cluster_keys.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace tandem::app {
namespace {

using Kind = ClusterKey::Kind;
using models::ClusterSpec;

constexpr double kGbpsToBps = 1e9 / 8;  // Gb/s of a NIC to bytes per second
constexpr double kGBpsToBps = 1e9;
constexpr double kUsToS = 1e-6;
constexpr double kMinGpuPowerW = 100;
constexpr double kMaxGpuPowerW = 2000;  // the cap when the preset's GPU has no TDP
constexpr double kMinGpuMemoryGB = 1;
constexpr double kMaxGpuMemoryGB = 1024;

// clang-format off
const std::array<ClusterKey, 18> kKeys{{
    {"nodes", "--nodes", "number of nodes", Kind::kInteger, 1, models::kMaxNodes,
     [](ClusterSpec& s, double v) { s.nodes = static_cast<int>(v); }},
    {"gpus_per_node", "--gpus-per-node", "GPUs per node (default: the preset's)", Kind::kInteger, 1,
      models::kMaxGpusPerNode,
     [](ClusterSpec& s, double v) { s.gpus_per_node = static_cast<int>(v); }},
    {"fabric", "--fabric", "rail-optimized, fat-tree or single-switch (default: the preset's)", Kind::kText, 0, 0,
     nullptr},
    {"nic_gbps", "--nic-gbps", "NIC line rate in Gb/s, e.g. 400 or 800 (default: the preset's)", Kind::kNumber,
      models::kMinLinkGbps, models::kMaxLinkGbps,
     [](ClusterSpec& s, double v) { s.nic_Bps = v * kGbpsToBps; }},
    {"nics_per_node", "--nics-per-node", "NICs per node, dividing the GPUs per node (default: the preset's, one per GPU)",
      Kind::kInteger, 1, models::kMaxGpusPerNode,
     [](ClusterSpec& s, double v) { s.nics_per_node = static_cast<int>(v); }},
    {"spines", "--spines", "spine switches (0, the default: derived from the leaf ports)", Kind::kInteger, 0,
      models::kMaxSpines,
     [](ClusterSpec& s, double v) { s.spines = static_cast<int>(v); }},
    {"oversubscription", "--oversubscription", "leaf downlink : uplink bandwidth ratio, e.g. 2 for 2:1 (default 1)",
      Kind::kNumber, models::kMinOversubscription, models::kMaxOversubscription,
     [](ClusterSpec& s, double v) { s.oversubscription = v; }},
    {"nodes_per_leaf", "--nodes-per-leaf",
      "nodes under one leaf group (rail-optimized: a scalable unit; 0, the default: 32 leaf ports)", Kind::kInteger,
      0, models::kMaxNodes,
     [](ClusterSpec& s, double v) { s.nodes_per_leaf = static_cast<int>(v); }},
    {"nvlink_GBps", "--nvlink-GBps", "NVLink bandwidth per GPU in GB/s per direction", Kind::kNumber,
      models::kMinLinkGbps / 8, models::kMaxLinkGbps / 8,
     [](ClusterSpec& s, double v) { s.nvlink_Bps = v * kGBpsToBps; }},
    {"pcie_GBps", "--pcie-GBps", "GPU <-> NIC PCIe bandwidth in GB/s per direction", Kind::kNumber,
      models::kMinLinkGbps / 8, models::kMaxLinkGbps / 8,
     [](ClusterSpec& s, double v) { s.pcie_Bps = v * kGBpsToBps; }},
    {"nvls", "--nvls", "true or false: NVLink SHARP in the NVSwitches (default: the preset's)", Kind::kBoolean, 0, 1,
     [](ClusterSpec& s, double v) { s.gpu.nvls = v != 0; }},
    {"sharp", "--sharp", "the switches reduce in the network (InfiniBand SHARP: NCCL CollNet)", Kind::kBoolean, 0, 1,
     [](ClusterSpec& s, double v) { s.sharp = v != 0; }},
    {"nvlink_latency_us", "--nvlink-latency-us", "GPU <-> NVSwitch link latency", Kind::kNumber, 0,
      models::kMaxLatencyUs,
     [](ClusterSpec& s, double v) { s.nvlink_latency_s = v * kUsToS; }},
    {"pcie_latency_us", "--pcie-latency-us", "GPU <-> NIC link latency", Kind::kNumber, 0, models::kMaxLatencyUs,
     [](ClusterSpec& s, double v) { s.pcie_latency_s = v * kUsToS; }},
    {"nic_latency_us", "--nic-latency-us", "NIC <-> leaf link latency", Kind::kNumber, 0, models::kMaxLatencyUs,
     [](ClusterSpec& s, double v) { s.nic_latency_s = v * kUsToS; }},
    {"switch_latency_us", "--switch-latency-us", "leaf <-> spine link latency", Kind::kNumber, 0,
      models::kMaxLatencyUs,
     [](ClusterSpec& s, double v) { s.switch_latency_s = v * kUsToS; }},
    // The upper bound is the GPU's TDP where the preset knows it (set_cluster_value).
    {"gpu_power_w", "--gpu-power-w", "GPU power cap in W (at most the GPU's TDP; default: the TDP)", Kind::kNumber,
      kMinGpuPowerW, kMaxGpuPowerW,
     [](ClusterSpec& s, double v) { s.gpu.power_limit_w = v; }},
    {"gpu_memory_GB", "--gpu-memory-GB", "GPU memory in GB (default: the preset's)", Kind::kNumber, kMinGpuMemoryGB,
      kMaxGpuMemoryGB,
     [](ClusterSpec& s, double v) { s.gpu.memory_bytes = v * 1e9; }},
}};
// clang-format on

// The keys that describe switches above the leaves: a single-switch fabric has none.
constexpr std::array<std::string_view, 3> kSwitchFabricKeys{"spines", "oversubscription", "nodes_per_leaf"};

double parse_value(const ClusterKey& key, const ClusterSpec& spec, const std::string& text, const std::string& what) {
  double max = key.max;
  if (key.key == "gpu_power_w" && spec.gpu.tdp_w > 0) max = spec.gpu.tdp_w;
  switch (key.kind) {
    case Kind::kBoolean:
      if (text == "true") return 1;
      if (text == "false") return 0;
      fail(ErrorCode::kInvalidArgument, "{} must be true or false (got '{}')", what, text);
    case Kind::kInteger: {
      int64_t value = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error != std::errc() || end != text.data() + text.size() || value < key.min || value > max) {
        fail(ErrorCode::kInvalidArgument, "{} must be an integer from {} to {} (got '{}')", what,
             static_cast<int64_t>(key.min), static_cast<int64_t>(max), text);
      }
      return static_cast<double>(value);
    }
    case Kind::kNumber: {
      double value = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || value < key.min ||
          value > max) {
        fail(ErrorCode::kInvalidArgument, "{} must be a number >= {:g} and at most {:g} (got '{}')", what, key.min, max,
             text);
      }
      return value;
    }
    case Kind::kText:
      break;
  }
  return 0;
}

}  // namespace

std::span<const ClusterKey> cluster_keys() { return kKeys; }

const ClusterKey* find_cluster_key(std::string_view key) {
  for (const ClusterKey& k : kKeys) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

void set_cluster_value(models::ClusterSpec& spec, const ClusterValueText& value) {
  if (value.key->set == nullptr) {
    try {
      spec.fabric = models::parse_fabric(value.text);
    } catch (const Error& error) {
      fail(ErrorCode::kInvalidArgument, "{}: {}", value.what, error.what());
    }
    return;
  }
  value.key->set(spec, parse_value(*value.key, spec, value.text, value.what));
}

void finish_cluster_spec(models::ClusterSpec& spec, const std::vector<ClusterValueText>& given) {
  auto find = [&](std::string_view key) {
    return std::find_if(given.begin(), given.end(), [&](const ClusterValueText& v) { return v.key->key == key; });
  };
  const auto nics = find("nics_per_node");
  if (find("gpus_per_node") != given.end() && nics == given.end()) {
    spec.nics_per_node = std::min(spec.nics_per_node, spec.gpus_per_node);
  }
  if (nics != given.end() && spec.gpus_per_node % spec.nics_per_node != 0) {
    fail(ErrorCode::kInvalidArgument, "{} {} must divide the {} GPUs per node", nics->what, nics->text,
         spec.gpus_per_node);
  }
  if (spec.fabric == models::Fabric::kSingleSwitch) {
    for (std::string_view key : kSwitchFabricKeys) {
      if (auto it = find(key); it != given.end()) {
        fail(ErrorCode::kInvalidArgument, "{} does not apply to a single-switch fabric", it->what);
      }
    }
  }
  models::validate(spec);
}

models::ClusterSpec resolve_cluster_spec(const std::string& preset, const std::vector<ClusterValueText>& values) {
  models::ClusterSpec spec = models::cluster_preset(preset);
  for (const ClusterValueText& value : values) set_cluster_value(spec, value);
  finish_cluster_spec(spec, values);
  return spec;
}

}  // namespace tandem::app
