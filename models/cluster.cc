#include "models/cluster.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "models/topology_graph.h"

namespace tandem::models {

namespace {

// ---------------------------------------------------------------------------------------------
// Published figures (docs/topologies.md has the sources). Bandwidths are per direction.
// ---------------------------------------------------------------------------------------------

// NVLink per GPU to the NVSwitches: NVLink4 (H100/H200) 18 links x 25 GB/s = 450 GB/s
// ("900 GB/s bidirectional", DGX H100 user guide); NVLink3 (A100) 12 links x 25 GB/s = 300 GB/s.
constexpr double kNvLink4_Bps = 450e9;
constexpr int kNvLink4Links = 18;
constexpr double kNvLink3_Bps = 300e9;
constexpr int kNvLink3Links = 12;
// NVLink5 (B200, GB200): 18 links x 50 GB/s = 900 GB/s per direction ("1.8 TB/s" per GPU, DGX
// B200 and GB200 NVL72 datasheets).
constexpr double kNvLink5_Bps = 900e9;
constexpr int kNvLink5Links = 18;

// PCIe between a GPU and its NIC (through the node's PCIe switch), raw per direction:
// Gen5 x16 = 32 GT/s x 16 lanes x 128/130 ~ 63 GB/s; Gen4 x16 ~ 31.5 GB/s.
constexpr double kPcieGen5x16_Bps = 64e9;
constexpr double kPcieGen4x16_Bps = 32e9;

// NICs: ConnectX-7 NDR 400 Gb/s = 50 GB/s (DGX H100: 8, one per GPU, each on its own rail);
// ConnectX-6 HDR 200 Gb/s = 25 GB/s (DGX/HGX A100: 8).
constexpr double kNdr400_Bps = 400e9 / 8;
constexpr double kHdr200_Bps = 200e9 / 8;

// Hardware latency of one link, one way. The simulator adds NCCL's protocol latencies (µs: LL
// ~0.6 per NVLink step, Simple 3.4 ...) separately, so these are wire + switch figures only:
// - NVLink GPU <-> NVSwitch: a few hundred ns each way through the switch ASIC; 0.25 µs per link
//   makes GPU -> GPU 0.5 µs, below the ~1-2 µs seen with software (fridayswithfaraday.com).
// - PCIe GPU <-> NIC through one PCIe switch: ~0.1-0.15 µs per switch plus the root ports.
// - NIC <-> leaf: NIC processing, cable and the leaf ASIC; NIC to NIC through one switch is
//   ~1 µs one way (one-switch RDMA RTT ~2 µs, kentino.com), i.e. 0.5 µs per NIC link.
// - leaf <-> spine: leaf-spine adds ~1 µs (kentino.com) over two switch-to-switch links.
constexpr double kNvLinkLatency_s = 0.25e-6;
constexpr double kPcieLatency_s = 0.3e-6;
constexpr double kNicLatency_s = 0.5e-6;
constexpr double kSwitchLatency_s = 0.5e-6;

// GPUs. H100 SXM: 3.35 TB/s HBM3, 989 TFLOP/s dense bf16, 80 GB (NVIDIA H100 datasheet).
// H200 SXM: 4.8 TB/s HBM3e, 141 GB, same compute. fp8 dense: 1,978.9 TFLOP/s on both (Hopper). A100 SXM 80 GB: 2.039 TB/s, 312 TFLOP/s bf16.
// TDP: 700 W for H100 and H200 SXM, 400 W for A100 SXM (datasheets).
GpuSpec h100() {
  return {"H100-SXM", GpuArch::kHopper, 3.35e12, 989e12, 80e9, kNvLink4Links, true, 1978.9e12, 700, 0};
}
GpuSpec h200() {
  return {"H200-SXM", GpuArch::kHopper, 4.8e12, 989e12, 141e9, kNvLink4Links, true, 1978.9e12, 700, 0};
}
GpuSpec a100() { return {"A100-SXM-80GB", GpuArch::kAmpere, 2.039e12, 312e12, 80e9, kNvLink3Links, false, 0, 400, 0}; }
// B200 SXM (DGX / HGX B200): 8 TB/s HBM3e, 180 GB usable, 2,250 TFLOP/s dense bf16 and 4,500 fp8,
// 1,000 W (DGX B200 datasheet). The B200 of a GB200 superchip (GB200 NVL72): 186 GB (13.4 TB over
// 72 GPUs), 8 TB/s, 2,500 TFLOP/s dense bf16 and 5,000 fp8 at 1,200 W (GB200 NVL72 datasheet;
// stas00/ml-engineering's accelerator table).
GpuSpec b200() {
  return {"B200-SXM", GpuArch::kBlackwell, 8.0e12, 2250e12, 180e9, kNvLink5Links, true, 4500e12, 1000, 0};
}
GpuSpec gb200() { return {"GB200", GpuArch::kBlackwell, 8.0e12, 2500e12, 186e9, kNvLink5Links, true, 5000e12, 1200, 0}; }

ClusterSpec dgx(std::string preset, GpuSpec gpu) {
  ClusterSpec spec;
  spec.preset = std::move(preset);
  spec.gpu = std::move(gpu);
  spec.cpu = CpuVendor::kIntel;  // DGX H100/H200: 2x Xeon Platinum 8480C
  spec.nodes = 1;
  spec.gpus_per_node = 8;
  spec.nvlink_Bps = kNvLink4_Bps;
  spec.nvlink_latency_s = kNvLinkLatency_s;
  spec.pcie_Bps = kPcieGen5x16_Bps;
  spec.pcie_latency_s = kPcieLatency_s;
  spec.nics_per_node = 8;
  spec.nic_Bps = kNdr400_Bps;
  spec.nic_latency_s = kNicLatency_s;
  spec.switch_latency_s = kSwitchLatency_s;
  return spec;
}

ClusterSpec hgx_a100() {
  ClusterSpec spec = dgx("hgx-a100", a100());
  spec.cpu = CpuVendor::kAmd;  // the reference DGX A100: 2x AMD EPYC 7742
  spec.nvlink_Bps = kNvLink3_Bps;
  spec.pcie_Bps = kPcieGen4x16_Bps;
  spec.nic_Bps = kHdr200_Bps;
  return spec;
}

// DGX B200: eight B200 on NVLink5 switches, eight ConnectX-7 at 400 Gb/s on PCIe Gen5, 2x Xeon
// Platinum 8570 (DGX B200 user guide).
ClusterSpec dgx_b200() {
  ClusterSpec spec = dgx("dgx-b200", b200());
  spec.nvlink_Bps = kNvLink5_Bps;
  return spec;
}

// GB200 NVL72: one NVLink domain of 72 GPUs (18 compute trays of 4 B200 and 2 Grace, 9 NVLink
// switch trays) is one node here; one ConnectX-7 at 400 Gb/s per GPU to the scale-out fabric. The
// Grace hosts are ARM: NCCL's tuner treats them as it does Intel hosts (the network overhead and the
// LL row are x86-AMD-only changes), so the preset keeps kIntel.
ClusterSpec gb200_nvl72() {
  ClusterSpec spec = dgx("gb200-nvl72", gb200());
  spec.gpus_per_node = 72;
  spec.nics_per_node = 72;
  spec.nvlink_Bps = kNvLink5_Bps;
  return spec;
}

constexpr std::array<std::string_view, 5> kClusterPresetNames = {"dgx-h100", "dgx-h200", "hgx-a100", "dgx-b200",
                                                                 "gb200-nvl72"};

// Lower case, '_' read as '-'.
std::string normalized(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool positive(double x) { return x > 0 && std::isfinite(x); }
bool not_negative(double x) { return x >= 0 && std::isfinite(x); }

int div_ceil(int a, int b) { return (a + b - 1) / b; }

}  // namespace

std::string_view name(Fabric fabric) {
  switch (fabric) {
    case Fabric::kRailOptimized:
      return "rail-optimized";
    case Fabric::kFatTree:
      return "fat-tree";
    case Fabric::kSingleSwitch:
      return "single-switch";
  }
  return "?";
}

Fabric parse_fabric(std::string_view text) {
  const std::string name_text = normalized(text);
  for (Fabric fabric : {Fabric::kRailOptimized, Fabric::kFatTree, Fabric::kSingleSwitch}) {
    if (name(fabric) == name_text) return fabric;
  }
  fail(ErrorCode::kInvalidArgument, "unknown fabric '{}' (expected one of: rail-optimized, fat-tree, single-switch)",
       text);
}

std::string_view name(GpuArch arch) {
  switch (arch) {
    case GpuArch::kVolta:
      return "volta";
    case GpuArch::kAmpere:
      return "ampere";
    case GpuArch::kHopper:
      return "hopper";
    case GpuArch::kBlackwell:
      return "blackwell";
  }
  return "?";
}

std::string_view name(CpuVendor vendor) {
  switch (vendor) {
    case CpuVendor::kIntel:
      return "intel";
    case CpuVendor::kAmd:
      return "amd";
  }
  return "?";
}

ClusterSpec cluster_preset(std::string_view preset) {
  const std::string key = normalized(preset);
  if (key == "dgx-h100") return dgx("dgx-h100", h100());
  if (key == "dgx-h200") return dgx("dgx-h200", h200());
  if (key == "hgx-a100") return hgx_a100();
  if (key == "dgx-b200") return dgx_b200();
  if (key == "gb200-nvl72") return gb200_nvl72();
  std::string known;
  for (std::string_view name : kClusterPresetNames) known += (known.empty() ? "" : ", ") + std::string(name);
  fail(ErrorCode::kInvalidArgument, "unknown cluster preset '{}' (expected one of: {})", preset, known);
}

std::vector<std::string> cluster_preset_names() { return {kClusterPresetNames.begin(), kClusterPresetNames.end()}; }

void validate(const ClusterSpec& spec) {
  auto bad = [](std::string_view field, auto value, std::string_view rule) {
    fail(ErrorCode::kInvalidArgument, "cluster {} = {}: {}", field, value, rule);
  };
  if (spec.nodes < 1 || spec.nodes > kMaxNodes) bad("nodes", spec.nodes, fmt::format("must be 1..{}", kMaxNodes));
  if (spec.gpus_per_node < 1 || spec.gpus_per_node > kMaxGpusPerNode) {
    bad("gpus_per_node", spec.gpus_per_node, fmt::format("must be 1..{}", kMaxGpusPerNode));
  }
  if (spec.nics_per_node < 1 || spec.nics_per_node > spec.gpus_per_node ||
      spec.gpus_per_node % spec.nics_per_node != 0) {
    bad("nics_per_node", spec.nics_per_node,
        fmt::format("must divide gpus_per_node ({}) so that each NIC serves as many GPUs", spec.gpus_per_node));
  }
  if (!positive(spec.nvlink_Bps)) bad("nvlink_Bps", spec.nvlink_Bps, "must be positive");
  if (!positive(spec.pcie_Bps)) bad("pcie_Bps", spec.pcie_Bps, "must be positive");
  if (!positive(spec.nic_Bps)) bad("nic_Bps", spec.nic_Bps, "must be positive");
  if (!not_negative(spec.nvlink_latency_s)) bad("nvlink_latency_s", spec.nvlink_latency_s, "must not be negative");
  if (!not_negative(spec.pcie_latency_s)) bad("pcie_latency_s", spec.pcie_latency_s, "must not be negative");
  if (!not_negative(spec.nic_latency_s)) bad("nic_latency_s", spec.nic_latency_s, "must not be negative");
  if (!not_negative(spec.switch_latency_s)) bad("switch_latency_s", spec.switch_latency_s, "must not be negative");
  if (!positive(spec.oversubscription)) bad("oversubscription", spec.oversubscription, "must be positive");
  if (spec.spines < 0 || spec.spines > kMaxSpines) bad("spines", spec.spines, fmt::format("must be 0..{}", kMaxSpines));
  if (spec.nodes_per_leaf < 0) bad("nodes_per_leaf", spec.nodes_per_leaf, "must not be negative (0: derived)");
  if (spec.fabric == Fabric::kSingleSwitch) {
    if (spec.spines != 0) bad("spines", spec.spines, "a single-switch fabric has no spines");
    if (spec.oversubscription != 1.0) {
      bad("oversubscription", spec.oversubscription, "a single-switch fabric has no uplinks to oversubscribe");
    }
    if (spec.nodes_per_leaf != 0) bad("nodes_per_leaf", spec.nodes_per_leaf, "a single-switch fabric has one leaf");
  }
  if (!positive(spec.gpu.hbm_Bps)) bad("gpu.hbm_Bps", spec.gpu.hbm_Bps, "must be positive");
  if (!positive(spec.gpu.bf16_flops)) bad("gpu.bf16_flops", spec.gpu.bf16_flops, "must be positive");
  if (spec.gpu.nvlinks < 0) bad("gpu.nvlinks", spec.gpu.nvlinks, "must not be negative");
  const FabricShape shape = fabric_shape(spec);
  if (shape.spines > kMaxSpines) bad("spines (derived)", shape.spines, fmt::format("exceeds {}", kMaxSpines));
}

// Leaf groups and spines. A leaf's uplink capacity is its downlink capacity / oversubscription,
// spread evenly over the spines (one link to each). Derived spine count: one spine per uplink port
// of the NIC speed, ceil(downlinks / oversubscription), the textbook two-tier folded Clos in which
// every leaf reaches every spine once. (At SuperPOD scale NVIDIA adds a core tier; two tiers with
// wide spines carry the same bisection bandwidth, which is what a flow-level model sees.)
FabricShape fabric_shape(const ClusterSpec& spec) {
  FabricShape shape;
  switch (spec.fabric) {
    case Fabric::kRailOptimized:
      shape.nodes_per_leaf = spec.nodes_per_leaf > 0 ? spec.nodes_per_leaf : kLeafDownlinkPorts;
      shape.leaf_groups = div_ceil(spec.nodes, shape.nodes_per_leaf);
      shape.leaves = shape.leaf_groups * spec.nics_per_node;
      shape.leaf_downlinks = std::min(shape.nodes_per_leaf, spec.nodes);
      break;
    case Fabric::kFatTree:
      shape.nodes_per_leaf =
          spec.nodes_per_leaf > 0 ? spec.nodes_per_leaf : std::max(1, kLeafDownlinkPorts / spec.nics_per_node);
      shape.leaf_groups = div_ceil(spec.nodes, shape.nodes_per_leaf);
      shape.leaves = shape.leaf_groups;
      shape.leaf_downlinks = std::min(shape.nodes_per_leaf, spec.nodes) * spec.nics_per_node;
      break;
    case Fabric::kSingleSwitch:
      shape.nodes_per_leaf = spec.nodes;
      shape.leaf_groups = 1;
      shape.leaves = 1;
      shape.leaf_downlinks = spec.nodes * spec.nics_per_node;
      break;
  }
  if (shape.leaves >= 2) {
    shape.leaf_uplink_Bps = shape.leaf_downlinks * spec.nic_Bps / spec.oversubscription;
    shape.spines = spec.spines > 0 ? spec.spines
                                   : static_cast<int>(std::ceil(shape.leaf_downlinks / spec.oversubscription - 1e-9));
    shape.spines = std::max(shape.spines, 1);
    shape.uplink_Bps = shape.leaf_uplink_Bps / shape.spines;
  }
  return shape;
}

std::string describe(const ClusterSpec& spec) {
  const FabricShape shape = fabric_shape(spec);
  std::string fabric = std::string(name(spec.fabric)) + " fabric";
  if (spec.fabric != Fabric::kSingleSwitch) {
    fabric += fmt::format(" ({} lea{}", shape.leaves, shape.leaves == 1 ? "f" : "ves");
    if (shape.spines > 0) {
      fabric += fmt::format(", {} spine{}, {:g}:1", shape.spines, shape.spines == 1 ? "" : "s", spec.oversubscription);
    }
    fabric += ")";
  }
  if (spec.sharp) fabric += " with SHARP";
  return fmt::format("{}: {} node{} x {} {} ({} GPUs), NVLink {:g} GB/s, {}x {:g} Gb/s NIC{} per node, {}",
                     spec.preset.empty() ? "custom" : spec.preset, spec.nodes, spec.nodes == 1 ? "" : "s",
                     spec.gpus_per_node, spec.gpu.name, spec.nodes * spec.gpus_per_node, spec.nvlink_Bps / 1e9,
                     spec.nics_per_node, spec.nic_Bps * 8 / 1e9, spec.nics_per_node == 1 ? "" : "s", fabric);
}

namespace {

// Adds vertices and links to a graph, giving the links dense ids in the order they are added.
class GraphBuilder {
 public:
  explicit GraphBuilder(Graph& graph) : graph_(graph) {}

  VertexId add_vertex(VertexKind kind, std::string name, int node, int local, int rail, int rank) {
    return boost::add_vertex(Vertex{kind, std::move(name), node, local, rail, rank}, graph_);
  }
  void add_link(VertexId a, VertexId b, LinkKind kind, std::string name, double bandwidth_Bps, double latency_s) {
    boost::add_edge(a, b, Link{kind, std::move(name), bandwidth_Bps, latency_s, next_link_++}, graph_);
  }
  const Vertex& vertex(VertexId v) const { return graph_[v]; }

 private:
  Graph& graph_;
  uint32_t next_link_ = 0;
};

// One node: its GPUs, the NVSwitch (with two GPUs or more) and its NICs, appended to `nic_vertex`;
// GPU <-> NVSwitch, GPU <-> its NIC.
void add_node(const ClusterSpec& spec, int node, GraphBuilder& builder, std::vector<VertexId>& nic_vertex) {
  const int gpus = spec.gpus_per_node;
  const int nics = spec.nics_per_node;
  const int gpus_per_nic = gpus / nics;
  const std::string prefix = fmt::format("n{}", node);
  std::vector<VertexId> gpu(static_cast<size_t>(gpus));
  for (int local = 0; local < gpus; ++local) {
    gpu[static_cast<size_t>(local)] = builder.add_vertex(VertexKind::kGpu, fmt::format("{}-gpu{}", prefix, local), node,
                                                         local, local / gpus_per_nic, node * gpus + local);
  }
  if (gpus > 1) {
    const VertexId nvswitch = builder.add_vertex(VertexKind::kNvSwitch, prefix + "-nvswitch", node, -1, -1, -1);
    for (int local = 0; local < gpus; ++local) {
      builder.add_link(gpu[static_cast<size_t>(local)], nvswitch, LinkKind::kNvLink,
                       fmt::format("{}-gpu{}-nvlink", prefix, local), spec.nvlink_Bps, spec.nvlink_latency_s);
    }
  }
  const size_t first_nic = nic_vertex.size();
  for (int i = 0; i < nics; ++i) {
    nic_vertex.push_back(builder.add_vertex(VertexKind::kNic, fmt::format("{}-nic{}", prefix, i), node, i, i, -1));
  }
  for (int local = 0; local < gpus; ++local) {
    builder.add_link(gpu[static_cast<size_t>(local)], nic_vertex[first_nic + static_cast<size_t>(local / gpus_per_nic)],
                     LinkKind::kPcie, fmt::format("{}-gpu{}-pcie", prefix, local), spec.pcie_Bps, spec.pcie_latency_s);
  }
}

// The leaves, and each NIC's uplink to its leaf (`nic_vertex`: node * nics_per_node + NIC). Returns
// the leaves.
std::vector<VertexId> add_leaves(const ClusterSpec& spec, const FabricShape& shape,
                                 const std::vector<VertexId>& nic_vertex, GraphBuilder& builder) {
  const int nics = spec.nics_per_node;
  std::vector<VertexId> leaves;
  auto nic_uplink = [&](int node, int i, VertexId leaf) {
    builder.add_link(nic_vertex[static_cast<size_t>(node * nics + i)], leaf, LinkKind::kNetwork,
                     fmt::format("n{}-nic{}-uplink", node, i), spec.nic_Bps, spec.nic_latency_s);
  };
  switch (spec.fabric) {
    case Fabric::kRailOptimized:
      for (int group = 0; group < shape.leaf_groups; ++group) {
        for (int rail = 0; rail < nics; ++rail) {
          const std::string leaf_name =
              shape.leaf_groups == 1 ? fmt::format("leaf-rail{}", rail) : fmt::format("su{}-leaf-rail{}", group, rail);
          leaves.push_back(builder.add_vertex(VertexKind::kLeaf, leaf_name, -1, -1, rail, -1));
        }
      }
      for (int node = 0; node < spec.nodes; ++node) {
        for (int i = 0; i < nics; ++i) {
          nic_uplink(node, i, leaves[static_cast<size_t>(node / shape.nodes_per_leaf * nics + i)]);
        }
      }
      break;
    case Fabric::kFatTree:
      for (int group = 0; group < shape.leaf_groups; ++group) {
        leaves.push_back(builder.add_vertex(VertexKind::kLeaf, fmt::format("leaf{}", group), -1, -1, -1, -1));
      }
      for (int node = 0; node < spec.nodes; ++node) {
        for (int i = 0; i < nics; ++i) nic_uplink(node, i, leaves[static_cast<size_t>(node / shape.nodes_per_leaf)]);
      }
      break;
    case Fabric::kSingleSwitch:
      leaves.push_back(builder.add_vertex(VertexKind::kLeaf, "switch", -1, -1, -1, -1));
      for (int node = 0; node < spec.nodes; ++node) {
        for (int i = 0; i < nics; ++i) nic_uplink(node, i, leaves[0]);
      }
      break;
  }
  return leaves;
}

// The spines, every leaf joined to every spine once.
void add_spines(const ClusterSpec& spec, const FabricShape& shape, const std::vector<VertexId>& leaves,
                GraphBuilder& builder) {
  std::vector<VertexId> spines;
  for (int s = 0; s < shape.spines; ++s) {
    spines.push_back(builder.add_vertex(VertexKind::kSpine, fmt::format("spine{}", s), -1, -1, -1, -1));
  }
  for (VertexId leaf : leaves) {
    for (int s = 0; s < shape.spines; ++s) {
      builder.add_link(leaf, spines[static_cast<size_t>(s)], LinkKind::kNetwork,
                       fmt::format("{}-spine{}", builder.vertex(leaf).name, s), shape.uplink_Bps,
                       spec.switch_latency_s);
    }
  }
}

// Vertices: per node its GPUs, NVSwitch and NICs; then leaves; then spines. Links: per node its
// NVLinks and PCIe links; then the NIC uplinks; then leaf <-> spine links. Ids in that order.
void build_graph(const ClusterSpec& spec, const FabricShape& shape, Graph& graph) {
  GraphBuilder builder(graph);
  std::vector<VertexId> nic_vertex;  // node * nics_per_node + NIC
  nic_vertex.reserve(static_cast<size_t>(spec.nodes * spec.nics_per_node));
  for (int node = 0; node < spec.nodes; ++node) add_node(spec, node, builder, nic_vertex);
  const std::vector<VertexId> leaves = add_leaves(spec, shape, nic_vertex, builder);
  add_spines(spec, shape, leaves, builder);
}

}  // namespace

Topology build_cluster(const ClusterSpec& spec) {
  validate(spec);
  const FabricShape shape = fabric_shape(spec);
  return Topology([&](Graph& graph) { build_graph(spec, shape, graph); }, spec.gpus_per_node, describe(spec));
}

}  // namespace tandem::models
