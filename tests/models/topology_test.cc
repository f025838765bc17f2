// Topology and cluster presets: vertex and link counts per preset and fabric, bandwidths, routes
// (connected, shortest, deterministic, spread over spines), rail-aligned ring orders, DOT output.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "models/cluster.h"
#include "models/topology.h"
#include "models/topology_graph.h"

namespace tandem::models {
namespace {

ClusterSpec spec_of(std::string_view preset, int nodes, Fabric fabric = Fabric::kRailOptimized) {
  ClusterSpec spec = cluster_preset(preset);
  spec.nodes = nodes;
  spec.fabric = fabric;
  return spec;
}

std::map<VertexKind, int> vertex_counts(const Topology& topo) {
  std::map<VertexKind, int> counts;
  for (VertexId v = 0; v < topo.vertex_count(); ++v) ++counts[topo.vertex(v).kind];
  return counts;
}

std::map<LinkKind, int> link_counts(const Topology& topo) {
  std::map<LinkKind, int> counts;
  for (uint32_t id = 0; id < topo.link_count(); ++id) ++counts[topo.link(id).kind];
  return counts;
}

// The vertices a route visits, src first; fails the test if the hops do not chain.
std::vector<VertexId> walk(const Topology& topo, int src, int dst, const Route& route) {
  std::vector<VertexId> path = {topo.gpu_vertex(src)};
  for (const Hop& hop : route.hops) {
    const auto [low, high] = topo.endpoints(hop.link);
    const VertexId from = hop.forward ? low : high;
    const VertexId to = hop.forward ? high : low;
    EXPECT_EQ(from, path.back()) << "hop over link " << topo.link(hop.link).name
                                 << " does not start where the last ended";
    path.push_back(to);
  }
  EXPECT_EQ(path.back(), topo.gpu_vertex(dst));
  return path;
}

// Every route of `topo` chains from src to dst, through no other GPU, with the latency and
// bottleneck of its links; returns the hop count histogram.
std::map<size_t, int> check_all_routes(const Topology& topo) {
  std::map<size_t, int> hop_counts;
  const int n = topo.gpu_count();
  for (int src = 0; src < n; ++src) {
    for (int dst = 0; dst < n; ++dst) {
      if (src == dst) continue;
      const Route route = topo.route(src, dst);
      const std::vector<VertexId> path = walk(topo, src, dst, route);
      double latency = 0, bottleneck = 1e300;
      for (const Hop& hop : route.hops) {
        latency += topo.link(hop.link).latency_s;
        bottleneck = std::min(bottleneck, topo.link(hop.link).bandwidth_Bps);
      }
      EXPECT_DOUBLE_EQ(route.latency_s, latency);
      EXPECT_DOUBLE_EQ(route.bottleneck_Bps, bottleneck);
      for (size_t i = 1; i + 1 < path.size(); ++i) {
        EXPECT_NE(topo.vertex(path[i]).kind, VertexKind::kGpu) << src << " -> " << dst << " passes a GPU";
      }
      ++hop_counts[route.hops.size()];
    }
  }
  return hop_counts;
}

TEST(ClusterPreset, FiguresOfThePresets) {
  const ClusterSpec h100 = cluster_preset("dgx-h100");
  EXPECT_EQ(h100.gpu.name, "H100-SXM");
  EXPECT_EQ(h100.gpu.arch, GpuArch::kHopper);
  EXPECT_DOUBLE_EQ(h100.gpu.hbm_Bps, 3.35e12);
  EXPECT_DOUBLE_EQ(h100.gpu.bf16_flops, 989e12);
  EXPECT_DOUBLE_EQ(h100.gpu.memory_bytes, 80e9);
  EXPECT_EQ(h100.gpu.nvlinks, 18);
  EXPECT_TRUE(h100.gpu.nvls);
  EXPECT_DOUBLE_EQ(h100.nvlink_Bps, 450e9);
  EXPECT_DOUBLE_EQ(h100.nic_Bps, 50e9);
  EXPECT_DOUBLE_EQ(h100.pcie_Bps, 64e9);
  EXPECT_EQ(h100.nics_per_node, 8);
  EXPECT_EQ(h100.gpus_per_node, 8);

  const ClusterSpec h200 = cluster_preset("dgx-h200");
  EXPECT_DOUBLE_EQ(h200.gpu.hbm_Bps, 4.8e12);
  EXPECT_DOUBLE_EQ(h200.gpu.memory_bytes, 141e9);
  EXPECT_DOUBLE_EQ(h200.nvlink_Bps, 450e9);

  const ClusterSpec a100 = cluster_preset("hgx-a100");
  EXPECT_EQ(a100.gpu.arch, GpuArch::kAmpere);
  EXPECT_DOUBLE_EQ(a100.gpu.hbm_Bps, 2.039e12);
  EXPECT_DOUBLE_EQ(a100.gpu.bf16_flops, 312e12);
  EXPECT_FALSE(a100.gpu.nvls);
  EXPECT_DOUBLE_EQ(a100.nvlink_Bps, 300e9);
  EXPECT_DOUBLE_EQ(a100.nic_Bps, 25e9);
  EXPECT_DOUBLE_EQ(a100.pcie_Bps, 32e9);

  const ClusterSpec b200 = cluster_preset("dgx-b200");
  EXPECT_EQ(b200.gpu.arch, GpuArch::kBlackwell);
  EXPECT_DOUBLE_EQ(b200.gpu.bf16_flops, 2250e12);
  EXPECT_DOUBLE_EQ(b200.gpu.fp8_flops, 4500e12);
  EXPECT_DOUBLE_EQ(b200.gpu.hbm_Bps, 8e12);
  EXPECT_DOUBLE_EQ(b200.gpu.memory_bytes, 180e9);
  EXPECT_DOUBLE_EQ(b200.nvlink_Bps, 900e9);
  EXPECT_EQ(b200.gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(b200.nic_Bps, 50e9);

  // GB200 NVL72: the NVLink domain of 72 GPUs is the node, a 400G NIC per GPU.
  const ClusterSpec nvl72 = cluster_preset("gb200-nvl72");
  EXPECT_EQ(nvl72.gpus_per_node, 72);
  EXPECT_EQ(nvl72.nics_per_node, 72);
  EXPECT_DOUBLE_EQ(nvl72.gpu.bf16_flops, 2500e12);
  EXPECT_DOUBLE_EQ(nvl72.gpu.memory_bytes, 186e9);
  EXPECT_DOUBLE_EQ(nvl72.gpu.tdp_w, 1200);
  ClusterSpec two_racks = nvl72;
  two_racks.nodes = 2;
  EXPECT_NO_THROW(validate(two_racks));
  EXPECT_EQ(build_cluster(two_racks).gpu_count(), 144);

  EXPECT_EQ(cluster_preset("DGX_H100").preset, "dgx-h100");  // '_' for '-'
  EXPECT_EQ(cluster_preset_names(),
            (std::vector<std::string>{"dgx-h100", "dgx-h200", "hgx-a100", "dgx-b200", "gb200-nvl72"}));
  try {
    cluster_preset("dgx-b300");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("dgx-h100, dgx-h200, hgx-a100, dgx-b200, gb200-nvl72"), std::string::npos)
        << e.what();
  }
}

TEST(BuildCluster, RailOptimizedDgxH100EightNodes) {
  const Topology topo = build_cluster(spec_of("dgx-h100", 8));
  EXPECT_EQ(topo.gpu_count(), 64);
  EXPECT_EQ(topo.node_count(), 8);
  EXPECT_EQ(topo.vertex_count(), 152u);
  EXPECT_EQ(vertex_counts(topo), (std::map<VertexKind, int>{{VertexKind::kGpu, 64},
                                                            {VertexKind::kNvSwitch, 8},
                                                            {VertexKind::kNic, 64},
                                                            {VertexKind::kLeaf, 8},
                                                            {VertexKind::kSpine, 8}}));
  EXPECT_EQ(topo.link_count(), 256u);
  EXPECT_EQ(link_counts(topo),
            (std::map<LinkKind, int>{{LinkKind::kNvLink, 64}, {LinkKind::kPcie, 64}, {LinkKind::kNetwork, 128}}));
  for (uint32_t id = 0; id < topo.link_count(); ++id) {
    const Link& link = topo.link(id);
    EXPECT_EQ(link.id, id);
    switch (link.kind) {
      case LinkKind::kNvLink:
        EXPECT_DOUBLE_EQ(link.bandwidth_Bps, 450e9);
        break;
      case LinkKind::kPcie:
        EXPECT_DOUBLE_EQ(link.bandwidth_Bps, 64e9);
        break;
      case LinkKind::kNetwork:
        EXPECT_DOUBLE_EQ(link.bandwidth_Bps, 50e9);
        break;  // 8 ports up at 50 = 8 down
    }
    EXPECT_GT(link.latency_s, 0);
  }
  // Names and the vertex fields the simulator reads.
  const VertexId gpu = topo.gpu_vertex(13);
  EXPECT_EQ(topo.vertex(gpu).name, "n1-gpu5");
  EXPECT_EQ(topo.vertex(gpu).node, 1);
  EXPECT_EQ(topo.vertex(gpu).local, 5);
  EXPECT_EQ(topo.vertex(gpu).rail, 5);
  const std::optional<VertexId> leaf = topo.find_vertex("leaf-rail5");
  ASSERT_TRUE(leaf.has_value());
  EXPECT_EQ(topo.vertex(*leaf).kind, VertexKind::kLeaf);
  EXPECT_EQ(topo.vertex(*leaf).rail, 5);
  size_t degree = 0;
  for (uint32_t id = 0; id < topo.link_count(); ++id) {
    const auto [a, b] = topo.endpoints(id);
    degree += a == *leaf || b == *leaf ? 1 : 0;
  }
  EXPECT_EQ(degree, 16u);  // 8 NICs + 8 spines
  const std::optional<uint32_t> uplink = topo.find_link("n1-nic5-uplink");
  ASSERT_TRUE(uplink.has_value());
  EXPECT_EQ(topo.link(*uplink).name, "n1-nic5-uplink");
  const auto [a, b] = topo.endpoints(*uplink);
  EXPECT_LT(a, b);
  EXPECT_EQ(topo.vertex(a).name, "n1-nic5");
  EXPECT_EQ(topo.vertex(b).name, "leaf-rail5");
  EXPECT_FALSE(topo.find_link("n9-nic0-uplink").has_value());
  EXPECT_FALSE(topo.find_vertex("spine8").has_value());
}

TEST(BuildCluster, FabricsAndOverrides) {
  {  // fat-tree: 4 nodes (32 NICs) per leaf, 32 spines of 50 GB/s per leaf.
    const Topology topo = build_cluster(spec_of("dgx-h100", 8, Fabric::kFatTree));
    EXPECT_EQ(vertex_counts(topo)[VertexKind::kLeaf], 2);
    EXPECT_EQ(vertex_counts(topo)[VertexKind::kSpine], 32);
    EXPECT_EQ(topo.vertex_count(), 64u + 8 + 64 + 2 + 32);
    EXPECT_EQ(topo.link_count(), 64u * 3 + 2 * 32);
    EXPECT_DOUBLE_EQ(topo.link(*topo.find_link("leaf1-spine31")).bandwidth_Bps, 50e9);
  }
  {  // single switch: no spines.
    const Topology topo = build_cluster(spec_of("dgx-h100", 8, Fabric::kSingleSwitch));
    EXPECT_EQ(vertex_counts(topo)[VertexKind::kLeaf], 1);
    EXPECT_EQ(vertex_counts(topo).count(VertexKind::kSpine), 0u);
    EXPECT_EQ(topo.link_count(), 64u * 3);
  }
  {  // 4 spines: each leaf's 400 GB/s of uplinks as 4 x 100 GB/s (the SimGrid notes' 8x8 setup).
    ClusterSpec spec = spec_of("dgx-h100", 8);
    spec.spines = 4;
    const Topology topo = build_cluster(spec);
    EXPECT_EQ(vertex_counts(topo)[VertexKind::kSpine], 4);
    EXPECT_DOUBLE_EQ(topo.link(*topo.find_link("leaf-rail7-spine3")).bandwidth_Bps, 100e9);
  }
  {  // 2:1 oversubscription: 200 GB/s up per leaf, derived 4 spines of 50 GB/s.
    ClusterSpec spec = spec_of("dgx-h100", 8);
    spec.oversubscription = 2;
    const Topology topo = build_cluster(spec);
    EXPECT_EQ(vertex_counts(topo)[VertexKind::kSpine], 4);
    EXPECT_DOUBLE_EQ(topo.link(*topo.find_link("leaf-rail0-spine0")).bandwidth_Bps, 50e9);
    const FabricShape shape = fabric_shape(spec);
    EXPECT_DOUBLE_EQ(shape.leaf_uplink_Bps, 200e9);
  }
  {  // 800G NICs, 4 NICs per node (each serving 2 GPUs).
    ClusterSpec spec = spec_of("dgx-h100", 2);
    spec.nic_Bps = 800e9 / 8;
    spec.nics_per_node = 4;
    const Topology topo = build_cluster(spec);
    EXPECT_EQ(vertex_counts(topo)[VertexKind::kNic], 8);
    EXPECT_EQ(vertex_counts(topo)[VertexKind::kLeaf], 4);
    EXPECT_DOUBLE_EQ(topo.link(*topo.find_link("n1-nic3-uplink")).bandwidth_Bps, 100e9);
    const auto [gpu, nic] = topo.endpoints(*topo.find_link("n1-gpu7-pcie"));
    EXPECT_EQ(topo.vertex(nic).name, "n1-nic3");
    EXPECT_EQ(topo.vertex(topo.gpu_vertex(15)).rail, 3);
  }
  {  // HGX A100, 2 nodes.
    const Topology topo = build_cluster(spec_of("hgx-a100", 2));
    EXPECT_EQ(topo.vertex_count(), 16u + 2 + 16 + 8 + 2);
    EXPECT_DOUBLE_EQ(topo.link(*topo.find_link("n0-gpu0-nvlink")).bandwidth_Bps, 300e9);
    EXPECT_DOUBLE_EQ(topo.link(*topo.find_link("n0-gpu0-pcie")).bandwidth_Bps, 32e9);
    EXPECT_DOUBLE_EQ(topo.link(*topo.find_link("n0-nic0-uplink")).bandwidth_Bps, 25e9);
    EXPECT_DOUBLE_EQ(topo.link(*topo.find_link("leaf-rail0-spine1")).bandwidth_Bps, 25e9);
  }
  {  // One GPU per node: no NVSwitch vertex.
    ClusterSpec spec = spec_of("dgx-h100", 4);
    spec.gpus_per_node = 1;
    spec.nics_per_node = 1;
    const Topology topo = build_cluster(spec);
    EXPECT_EQ(vertex_counts(topo).count(VertexKind::kNvSwitch), 0u);
    EXPECT_EQ(vertex_counts(topo)[VertexKind::kLeaf], 1);
    EXPECT_EQ(topo.route(0, 3).hops.size(), 4u);
  }
}

TEST(BuildCluster, ScalableUnitsAtSuperPodScale) {
  // 2,048 nodes: 64 SUs of 32 nodes, 8 rail leaves each (512), 32 spines.
  const Topology topo = build_cluster(spec_of("dgx-h100", 2048));
  EXPECT_EQ(topo.gpu_count(), 16384);
  EXPECT_EQ(vertex_counts(topo), (std::map<VertexKind, int>{{VertexKind::kGpu, 16384},
                                                            {VertexKind::kNvSwitch, 2048},
                                                            {VertexKind::kNic, 16384},
                                                            {VertexKind::kLeaf, 512},
                                                            {VertexKind::kSpine, 32}}));
  EXPECT_EQ(topo.link_count(), 16384u * 3 + 512 * 32);
  EXPECT_TRUE(topo.find_vertex("su63-leaf-rail7").has_value());

  // A rail-aligned ring: ~16k routes. Within an SU a hop stays on its rail leaf (4 hops); between
  // SUs it climbs to a spine (6).
  const RankLayout layout = topo.layout(true);
  const auto start = std::chrono::steady_clock::now();
  std::map<size_t, int> hops;
  const std::vector<int>& ring = layout.rings.at(0);
  for (size_t i = 0; i < ring.size(); ++i) {
    const int src = ring[i];
    const int dst = ring[(i + 1) % ring.size()];
    ++hops[topo.route(src, dst).hops.size()];
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("ring_routes_seconds", std::to_string(seconds));
  EXPECT_EQ(hops[2], 2048 * 7);
  EXPECT_EQ(hops[4], 2048 - 64);
  EXPECT_EQ(hops[6], 64);
  // Spot-check that routes chain.
  for (int dst : {1, 8, 255, 256, 8191, 16383}) walk(topo, 0, dst, topo.route(0, dst));
}

TEST(Route, EveryRouteIsAConnectedShortestPath) {
  {
    const Topology topo = build_cluster(spec_of("dgx-h100", 4));
    const std::map<size_t, int> hops = check_all_routes(topo);
    // Per source: 7 peers in its node (2 hops), 3 same-rail peers (4 hops), 21 others (6 hops).
    EXPECT_EQ(hops, (std::map<size_t, int>{{2, 32 * 7}, {4, 32 * 3}, {6, 32 * 21}}));
    const Route intra = topo.route(0, 1);
    EXPECT_DOUBLE_EQ(intra.latency_s, 0.5e-6);
    EXPECT_DOUBLE_EQ(intra.bottleneck_Bps, 450e9);
    const Route same_rail = topo.route(0, 8);
    EXPECT_DOUBLE_EQ(same_rail.latency_s, 1.6e-6);
    EXPECT_DOUBLE_EQ(same_rail.bottleneck_Bps, 50e9);
    const Route cross = topo.route(0, 9);
    EXPECT_DOUBLE_EQ(cross.latency_s, 2.6e-6);
    // The inter-node route leaves through the source's own NIC (no PXN) and ends at dst's.
    const std::vector<VertexId> path = walk(topo, 0, 9, cross);
    EXPECT_EQ(topo.vertex(path[1]).name, "n0-nic0");
    EXPECT_EQ(topo.vertex(path[2]).name, "leaf-rail0");
    EXPECT_EQ(topo.vertex(path[3]).kind, VertexKind::kSpine);
    EXPECT_EQ(topo.vertex(path[4]).name, "leaf-rail1");
    EXPECT_EQ(topo.vertex(path[5]).name, "n1-nic1");
  }
  {
    const std::map<size_t, int> hops = check_all_routes(build_cluster(spec_of("hgx-a100", 8, Fabric::kFatTree)));
    // 4 nodes per leaf: 7 local, 3 x 8 under the same leaf, 4 x 8 via a spine.
    EXPECT_EQ(hops, (std::map<size_t, int>{{2, 64 * 7}, {4, 64 * 24}, {6, 64 * 32}}));
  }
  {
    const std::map<size_t, int> hops = check_all_routes(build_cluster(spec_of("dgx-h200", 3, Fabric::kSingleSwitch)));
    EXPECT_EQ(hops, (std::map<size_t, int>{{2, 24 * 7}, {4, 24 * 16}}));
  }
  {  // 4 NICs per node: GPUs 0 and 1 share a NIC, yet talk over NVLink (wider than the PCIe detour).
    ClusterSpec spec = spec_of("dgx-h100", 2);
    spec.nics_per_node = 4;
    const Topology topo = build_cluster(spec);
    check_all_routes(topo);
    EXPECT_EQ(topo.link(topo.route(0, 1).hops[0].link).kind, LinkKind::kNvLink);
    EXPECT_EQ(topo.link(topo.route(1, 9).hops[0].link).name, "n0-gpu1-pcie");
  }
}

TEST(Route, DeterministicAcrossCallsAndCopies) {
  const Topology topo = build_cluster(spec_of("dgx-h100", 8));
  const Topology copy = topo;  // NOLINT: the copy must rebuild its own link index
  Topology moved = Topology(topo);
  for (int src = 0; src < 64; src += 7) {
    for (int dst = 0; dst < 64; dst += 5) {
      if (src == dst) continue;
      const Route r = topo.route(src, dst);
      EXPECT_EQ(r.hops, topo.route(src, dst).hops);
      EXPECT_EQ(r.hops, copy.route(src, dst).hops);
      EXPECT_EQ(r.hops, moved.route(src, dst).hops);
    }
  }
  try {
    topo.route(3, 3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_THROW(topo.route(0, 64), Error);
  EXPECT_THROW(topo.route(-1, 2), Error);
}

TEST(Route, ConcurrentCallersGetTheSameRoutes) {
  // Several threads fill the shared distance cache at once (run under TSan in the tsan preset).
  const Topology topo = build_cluster(spec_of("dgx-h100", 64));  // 2 SUs: routes through spines
  const Topology reference = build_cluster(spec_of("dgx-h100", 64));
  std::vector<std::vector<Hop>> expected;
  for (int dst = 1; dst < topo.gpu_count(); dst += 3) expected.push_back(reference.route(0, dst).hops);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      size_t i = 0;
      for (int dst = 1; dst < topo.gpu_count(); dst += 3, ++i) {
        if (topo.route(0, dst).hops != expected[i]) ++mismatches;
        topo.route((dst + t) % topo.gpu_count() == 0 ? 1 : (dst + t) % topo.gpu_count(), 0);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Route, EcmpSpreadsCrossRailFlowsOverSpines) {
  ClusterSpec spec = spec_of("dgx-h100", 8);
  spec.spines = 4;
  const Topology topo = build_cluster(spec);
  // Every cross-rail flow from node 0 to nodes 1..7: 8 x 7 x 7 = 392 flows.
  std::map<std::string, int> per_spine;
  for (int src = 0; src < 8; ++src) {
    for (int node = 1; node < 8; ++node) {
      for (int local = 0; local < 8; ++local) {
        if (local == src) continue;
        const Route r = topo.route(src, node * 8 + local);
        const std::vector<VertexId> path = walk(topo, src, node * 8 + local, r);
        ASSERT_EQ(path.size(), 7u);
        ++per_spine[topo.vertex(path[3]).name];
      }
    }
  }
  ASSERT_EQ(per_spine.size(), 4u);
  for (const auto& [spine, flows] : per_spine) {
    EXPECT_GT(flows, 392 / 4 * 3 / 4) << spine;  // within 25% of an even share
    EXPECT_LT(flows, 392 / 4 * 5 / 4) << spine;
  }
  // Same-rail flows never climb to a spine.
  EXPECT_EQ(topo.route(3, 3 + 8 * 5).hops.size(), 4u);
}

// A graph made by hand: 2 nodes x 2 GPUs, one NIC per node shared by both GPUs, and both NICs
// dual-homed to two leaves (no spines). Routing must find the NVLink inside a node and spread
// inter-node flows over both leaves.
Graph hand_made_graph() {
  Graph g;
  uint32_t link = 0;
  auto vertex = [&g](VertexKind kind, std::string name, int node, int local, int rank) {
    return boost::add_vertex(Vertex{kind, std::move(name), node, local, -1, rank}, g);
  };
  auto edge = [&](VertexId a, VertexId b, LinkKind kind, std::string name, double bw) {
    boost::add_edge(a, b, Link{kind, std::move(name), bw, 1e-6, link++}, g);
  };
  const VertexId leaf0 = vertex(VertexKind::kLeaf, "L0", -1, -1, -1);
  const VertexId leaf1 = vertex(VertexKind::kLeaf, "L1", -1, -1, -1);
  for (int node = 0; node < 2; ++node) {
    const VertexId sw = vertex(VertexKind::kNvSwitch, "sw" + std::to_string(node), node, -1, -1);
    const VertexId nic = vertex(VertexKind::kNic, "nic" + std::to_string(node), node, 0, -1);
    for (int local = 0; local < 2; ++local) {
      const std::string gpu_name = "g" + std::to_string(node * 2 + local);
      const VertexId gpu = vertex(VertexKind::kGpu, gpu_name, node, local, node * 2 + local);
      edge(gpu, sw, LinkKind::kNvLink, gpu_name + "-nvl", 100e9);
      edge(gpu, nic, LinkKind::kPcie, gpu_name + "-pcie", 10e9);
    }
    edge(nic, leaf0, LinkKind::kNetwork, "nic" + std::to_string(node) + "-L0", 5e9);
    edge(nic, leaf1, LinkKind::kNetwork, "nic" + std::to_string(node) + "-L1", 5e9);
  }
  return g;
}

TEST(Route, WorksOnAHandMadeGraph) {
  const Topology topo(hand_made_graph(), 2, "hand-made");
  EXPECT_EQ(topo.gpu_count(), 4);
  const std::map<size_t, int> hops = check_all_routes(topo);
  EXPECT_EQ(hops, (std::map<size_t, int>{{2, 4}, {4, 8}}));
  EXPECT_EQ(topo.link(topo.route(0, 1).hops[0].link).kind, LinkKind::kNvLink);
  std::set<std::string> leaves;
  for (int src : {0, 1}) {
    for (int dst : {2, 3}) {
      leaves.insert(topo.vertex(walk(topo, src, dst, topo.route(src, dst))[2]).name);
      leaves.insert(topo.vertex(walk(topo, dst, src, topo.route(dst, src))[2]).name);
    }
  }
  EXPECT_EQ(leaves, (std::set<std::string>{"L0", "L1"}));
}

TEST(Topology, RejectsBrokenGraphs) {
  auto expect_invalid = [](Graph g, int gpus_per_node, const char* fragment) {
    try {
      Topology topo(std::move(g), gpus_per_node, "broken");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  {
    Graph g = hand_made_graph();
    for (VertexId v = 0; v < boost::num_vertices(g); ++v) {
      if (g[v].name == "g3") g[v].rank = 2;
    }
    expect_invalid(std::move(g), 2, "both have rank 2");
  }
  {
    Graph g = hand_made_graph();
    for (auto [it, end] = boost::edges(g); it != end; ++it) {
      if (g[*it].name == "g0-pcie") g[*it].id = 0;
    }
    expect_invalid(std::move(g), 2, "ids must be");
  }
  {
    Graph g = hand_made_graph();
    expect_invalid(g, 3, "do not fill nodes");
  }
  {  // GPU 0 reaches the rest only through GPU 1: GPUs do not forward.
    Graph g;
    const VertexId a = boost::add_vertex(Vertex{VertexKind::kGpu, "a", 0, 0, -1, 0}, g);
    const VertexId b = boost::add_vertex(Vertex{VertexKind::kGpu, "b", 1, 0, -1, 1}, g);
    const VertexId c = boost::add_vertex(Vertex{VertexKind::kGpu, "c", 2, 0, -1, 2}, g);
    const VertexId s0 = boost::add_vertex(Vertex{VertexKind::kNvSwitch, "s0", 0, -1, -1, -1}, g);
    const VertexId s1 = boost::add_vertex(Vertex{VertexKind::kNvSwitch, "s1", 1, -1, -1, -1}, g);
    boost::add_edge(a, s0, Link{LinkKind::kNvLink, "a-s0", 1e9, 0, 0}, g);
    boost::add_edge(b, s0, Link{LinkKind::kNvLink, "b-s0", 1e9, 0, 1}, g);
    boost::add_edge(b, s1, Link{LinkKind::kNvLink, "b-s1", 1e9, 0, 2}, g);
    boost::add_edge(c, s1, Link{LinkKind::kNvLink, "c-s1", 1e9, 0, 3}, g);
    expect_invalid(std::move(g), 1, "cannot reach");
  }
}

TEST(ClusterSpec, ValidationNamesTheField) {
  auto expect_invalid = [](ClusterSpec spec, const char* fragment) {
    try {
      build_cluster(spec);
      ADD_FAILURE() << "no error for " << fragment;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  ClusterSpec spec = cluster_preset("dgx-h100");
  spec.nodes = 0;
  expect_invalid(spec, "nodes");
  spec = cluster_preset("dgx-h100");
  spec.nics_per_node = 3;
  expect_invalid(spec, "nics_per_node");
  spec = cluster_preset("dgx-h100");
  spec.nic_Bps = 0;
  expect_invalid(spec, "nic_Bps");
  spec = cluster_preset("dgx-h100");
  spec.fabric = Fabric::kSingleSwitch;
  spec.spines = 2;
  expect_invalid(spec, "single-switch");
  spec = cluster_preset("dgx-h100");
  spec.oversubscription = -1;
  expect_invalid(spec, "oversubscription");
  EXPECT_EQ(parse_fabric("fat_tree"), Fabric::kFatTree);
  EXPECT_EQ(parse_fabric("rail-optimized"), Fabric::kRailOptimized);
  EXPECT_THROW(parse_fabric("torus"), Error);
}

// The pairs of consecutive ranks of `ring` (the closing pair included) that cross nodes between
// GPUs of different local index, i.e. different rails.
int cross_rail_hops(const std::vector<int>& ring, int m) {
  const size_t n = ring.size();
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const int a = ring[i];
    const int b = ring[(i + 1) % n];
    if (a / m != b / m && a % m != b % m) ++bad;
  }
  return bad;
}

TEST(Layout, RailAlignedLayoutHasNcclsChannelRings) {
  for (int nodes : {1, 2, 3, 4, 5, 7, 8}) {
    for (int gpus : {1, 2, 3, 4, 8}) {
      ClusterSpec spec = spec_of("dgx-h100", nodes);
      spec.gpus_per_node = gpus;
      spec.nics_per_node = gpus;
      const Topology topo = build_cluster(spec);
      const RankLayout layout = topo.layout(true);
      EXPECT_EQ(layout.nranks, nodes * gpus);
      EXPECT_EQ(layout.ranks_per_node, gpus);
      if (nodes * gpus == 1) continue;
      ASSERT_EQ(layout.rings.size(), static_cast<size_t>(gpus));  // one per search channel
      for (size_t s = 0; s < layout.rings.size(); ++s) {
        const std::vector<int>& ring = layout.rings[s];
        ASSERT_EQ(ring.size(), static_cast<size_t>(nodes * gpus));
        std::vector<int> sorted = ring;
        std::sort(sorted.begin(), sorted.end());
        for (int r = 0; r < nodes * gpus; ++r) ASSERT_EQ(sorted[static_cast<size_t>(r)], r);
        // Each node's ranks are contiguous in the ring, in node order.
        for (int i = 0; i < nodes * gpus; ++i) EXPECT_EQ(ring[static_cast<size_t>(i)] / gpus, i / gpus);
        // A channel with a partner (s ^ 1) keeps every hop on one rail but, with an odd node count,
        // the hop back to node 0 (NCCL's rings do the same).
        if ((s ^ 1) >= static_cast<size_t>(gpus)) continue;
        const int expected_bad = nodes % 2 == 1 && nodes > 1 && gpus > 1 ? 1 : 0;
        EXPECT_EQ(cross_rail_hops(ring, gpus), expected_bad) << nodes << " nodes x " << gpus << ", channel " << s;
      }
    }
  }
  // 8 x 8: channel 0 as NCCL builds it; every inter-node hop of every channel stays under one rail
  // leaf (4 hops, no spine).
  const Topology topo = build_cluster(spec_of("dgx-h100", 8));
  const RankLayout layout = topo.layout(true);
  EXPECT_EQ(std::vector<int>(layout.rings[0].begin(), layout.rings[0].begin() + 17),
            (std::vector<int>{0, 7, 6, 5, 4, 3, 2, 1, 9, 10, 11, 12, 13, 14, 15, 8, 16}));
  for (const std::vector<int>& ring : layout.rings) {
    for (size_t i = 0; i < ring.size(); ++i) {
      const int a = ring[i];
      const int b = ring[(i + 1) % ring.size()];
      EXPECT_EQ(topo.route(a, b).hops.size(), a / 8 == b / 8 ? 2u : 4u) << a << " -> " << b;
    }
  }
  const RankLayout plain = topo.layout(false);
  EXPECT_TRUE(plain.rings.empty());
  EXPECT_EQ(plain.nranks, 64);
  EXPECT_EQ(plain.ranks_per_node, 8);
}

TEST(Topology, DotHasOneLinePerVertexAndLink) {
  const Topology topo = build_cluster(spec_of("dgx-h100", 2));
  const std::string dot = topo.to_dot();
  std::istringstream in(dot);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front(), "graph tandem {");
  EXPECT_EQ(lines.back(), "}");
  const std::regex vertex_line(
      R"re(^\s*"([^"]+)" \[kind=(gpu|nvswitch|nic|leaf|spine), shape=\w+, label="[^"]*"\];$)re");
  const std::regex edge_line(
      R"re(^  "([^"]+)" -- "([^"]+)" \[id=(\d+), name="([^"]+)", kind=(nvlink|pcie|network), label="[0-9.]+ GB/s", latency_us=[0-9.e-]+\];$)re");
  size_t vertices = 0, edges = 0, clusters = 0;
  std::set<uint32_t> ids;
  for (const std::string& line : lines) {
    std::smatch match;
    if (std::regex_match(line, match, vertex_line)) {
      ++vertices;
      EXPECT_TRUE(topo.find_vertex(match[1].str()).has_value()) << line;
    } else if (std::regex_match(line, match, edge_line)) {
      ++edges;
      const uint32_t id = static_cast<uint32_t>(std::stoul(match[3].str()));
      ids.insert(id);
      const auto [a, b] = topo.endpoints(id);
      EXPECT_EQ(match[1].str(), topo.vertex(a).name);
      EXPECT_EQ(match[2].str(), topo.vertex(b).name);
      EXPECT_EQ(match[4].str(), topo.link(id).name);
    } else if (line.rfind("  subgraph cluster_n", 0) == 0) {
      ++clusters;
    }
  }
  EXPECT_EQ(vertices, topo.vertex_count());
  EXPECT_EQ(edges, topo.link_count());
  EXPECT_EQ(ids.size(), topo.link_count());
  EXPECT_EQ(clusters, 2u);
  EXPECT_NE(dot.find(R"("n0-gpu0" -- "n0-nvswitch" [id=0, name="n0-gpu0-nvlink", kind=nvlink, label="450 GB/s", latency_us=0.25];)"),
            std::string::npos);
}

TEST(Topology, TextSummary) {
  const std::string text = build_cluster(spec_of("dgx-h100", 8)).to_text();
  EXPECT_NE(text.find("dgx-h100: 8 nodes x 8 H100-SXM (64 GPUs)"), std::string::npos) << text;
  EXPECT_NE(text.find("vertices: 152 (64 gpu, 8 nvswitch, 64 nic, 8 leaf, 8 spine)"), std::string::npos) << text;
  EXPECT_NE(text.find("links: 256"), std::string::npos) << text;
  EXPECT_NE(text.find("leaf-rail0"), std::string::npos) << text;
  EXPECT_NE(text.find("0 -> 9: n0-gpu0 > n0-nic0 > leaf-rail0 > spine"), std::string::npos) << text;
}

}  // namespace
}  // namespace tandem::models
