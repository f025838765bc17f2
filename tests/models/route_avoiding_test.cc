// Routing around failed links (Topology::route_avoiding, nic_links, crosses): the normal route
// when nothing on it failed, detours through the fabric, PXN relays through a GPU of the same
// node when a NIC is dead, hops-then-latency among detours, and a clear error when nothing is left.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "models/cluster.h"
#include "models/topology.h"
#include "models/topology_graph.h"

namespace tandem::models {
namespace {

Topology dgx(int nodes) {
  ClusterSpec spec = cluster_preset("dgx-h100");
  spec.nodes = nodes;
  return build_cluster(spec);
}

uint32_t link_named(const Topology& topo, std::string_view name) {
  const std::optional<uint32_t> id = topo.find_link(name);
  if (!id) ADD_FAILURE() << "no link " << name;
  return id.value_or(0);
}

// The vertices a route visits, src first; fails the test if the hops do not chain from src to dst.
std::vector<VertexId> walk(const Topology& topo, int src, int dst, const Route& route) {
  std::vector<VertexId> path = {topo.gpu_vertex(src)};
  for (const Hop& hop : route.hops) {
    const auto [low, high] = topo.endpoints(hop.link);
    EXPECT_EQ(hop.forward ? low : high, path.back()) << "hop over " << topo.link(hop.link).name << " does not chain";
    path.push_back(hop.forward ? high : low);
  }
  EXPECT_EQ(path.back(), topo.gpu_vertex(dst));
  return path;
}

// The GPUs a route passes through, its ends excluded.
std::vector<std::string> relays(const Topology& topo, int src, int dst, const Route& route) {
  const std::vector<VertexId> path = walk(topo, src, dst, route);
  std::vector<std::string> names;
  for (size_t i = 1; i + 1 < path.size(); ++i) {
    if (topo.vertex(path[i]).kind == VertexKind::kGpu) names.push_back(topo.vertex(path[i]).name);
  }
  return names;
}

TEST(RouteAvoiding, EqualsRouteWhenNothingOnItFailed) {
  const Topology topo = dgx(4);
  const uint32_t dead_spine_link = link_named(topo, "leaf-rail3-spine1");
  for (int src = 0; src < topo.gpu_count(); ++src) {
    for (int dst = 0; dst < topo.gpu_count(); ++dst) {
      if (src == dst) continue;
      const Route normal = topo.route(src, dst);
      EXPECT_EQ(topo.route_avoiding(src, dst, {}).hops, normal.hops) << src << " -> " << dst;
      if (!Topology::crosses(normal, dead_spine_link)) {
        EXPECT_EQ(topo.route_avoiding(src, dst, {dead_spine_link}).hops, normal.hops) << src << " -> " << dst;
      }
    }
  }
}

TEST(RouteAvoiding, DetoursThroughTheFabricWithoutARelay) {
  // 4 nodes: rail 3 of node 0 reaches rail 0 of node 1 over a spine. Kill the uplink it uses: the
  // route takes the other spine, same length, no GPU in between.
  const Topology topo = dgx(4);
  const int src = 3, dst = 8;
  const Route normal = topo.route(src, dst);
  ASSERT_EQ(normal.hops.size(), 6u);
  uint32_t spine_link = ~0u;
  for (const Hop& hop : normal.hops) {
    if (topo.link(hop.link).name.find("spine") != std::string::npos) {
      spine_link = hop.link;
      break;
    }
  }
  ASSERT_NE(spine_link, ~0u);
  const Route detour = topo.route_avoiding(src, dst, {spine_link});
  EXPECT_FALSE(Topology::crosses(detour, spine_link));
  EXPECT_TRUE(Topology::crosses(normal, spine_link));
  EXPECT_EQ(detour.hops.size(), 6u);
  EXPECT_TRUE(relays(topo, src, dst, detour).empty());
  EXPECT_DOUBLE_EQ(detour.latency_s, normal.latency_s);
}

TEST(RouteAvoiding, RelaysThroughAGpuOfTheNodeWhenItsNicIsDead) {
  // NCCL's PXN: n0-gpu7's NIC is dead, so its data crosses NVLink to another GPU of node 0, whose
  // NIC carries it. Two 8-hop detours: over a spine to rail 7 at node 1, or along the relay's rail
  // to the same GPU of node 1 and over NVLink to n1-gpu7. The second has the lower latency (4
  // NVLink hops of 0.25 us instead of 2 NVLink and 2 switch hops of 0.5 us), as NCCL's rail-local
  // PXN: relays n0-gpuX and n1-gpuX, one rail.
  const Topology topo = dgx(2);
  const std::vector<uint32_t> dead = topo.nic_links(0, 7);
  const Route route = topo.route_avoiding(7, 15, dead);
  for (uint32_t link : dead) EXPECT_FALSE(Topology::crosses(route, link)) << topo.link(link).name;
  const std::vector<std::string> through = relays(topo, 7, 15, route);
  ASSERT_EQ(through.size(), 2u);
  EXPECT_EQ(through[0].rfind("n0-gpu", 0), 0u) << through[0];
  EXPECT_EQ(through[1], "n1-" + through[0].substr(3));
  EXPECT_NE(through[0], "n0-gpu7");
  EXPECT_EQ(topo.link(route.hops[0].link).kind, LinkKind::kNvLink);
  EXPECT_EQ(route.hops.size(), 8u);
  EXPECT_NEAR(route.latency_s, 4 * 0.25e-6 + 2 * 0.3e-6 + 2 * 0.5e-6, 1e-15);
  EXPECT_GT(route.latency_s, topo.route(7, 15).latency_s);
  // The way back avoids the dead NIC too; traffic inside the node does not care.
  const Route back = topo.route_avoiding(15, 7, dead);
  for (uint32_t link : dead) EXPECT_FALSE(Topology::crosses(back, link));
  EXPECT_EQ(relays(topo, 15, 7, back).size(), 2u);
  EXPECT_EQ(topo.route_avoiding(7, 3, dead).hops, topo.route(7, 3).hops);
  // Deterministic: the same relay every time.
  EXPECT_EQ(topo.route_avoiding(7, 15, dead).hops, route.hops);
}

TEST(RouteAvoiding, RelaysOnlyWhenNothingElseConnects) {
  // The same dead NIC, but a pair that a detour without relays can still join (rail 7 of node 1
  // to rail 0 of node 0 only needs n0-nic0): no relay, the normal route.
  const Topology topo = dgx(2);
  const std::vector<uint32_t> dead = topo.nic_links(0, 7);
  EXPECT_EQ(topo.route_avoiding(15, 0, dead).hops, topo.route(15, 0).hops);
  // Kill only n0-gpu7's PCIe link: its NIC still serves nobody else, and gpu7 must relay.
  const Route pcie_dead = topo.route_avoiding(7, 15, {dead[0]});
  EXPECT_EQ(relays(topo, 7, 15, pcie_dead).size(), 2u);
  // Kill a spine uplink of rail 7's leaf instead: the pair 7 -> 15 never used it.
  const uint32_t spine_link = link_named(topo, "leaf-rail7-spine0");
  EXPECT_EQ(topo.route_avoiding(7, 15, {spine_link}).hops, topo.route(7, 15).hops);
}

TEST(RouteAvoiding, FewerHopsFirstThenLowerLatency) {
  // Two GPUs with a 2-hop path (to be killed), two 3-hop detours of different latencies, and a
  // 4-hop one with the lowest latency of all: the fast 3-hop detour wins.
  Graph g;
  uint32_t next = 0;
  auto vertex = [&g](VertexKind kind, std::string name, int node, int rank) {
    return boost::add_vertex(Vertex{kind, std::move(name), node, 0, -1, rank}, g);
  };
  auto edge = [&](VertexId a, VertexId b, std::string name, double latency_s) {
    boost::add_edge(a, b, Link{LinkKind::kNetwork, std::move(name), 1e9, latency_s, next++}, g);
  };
  const VertexId a = vertex(VertexKind::kGpu, "a", 0, 0);
  const VertexId b = vertex(VertexKind::kGpu, "b", 1, 1);
  std::vector<VertexId> s;
  for (const char* name : {"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"}) {
    s.push_back(vertex(VertexKind::kLeaf, name, -1, -1));
  }
  edge(a, s[0], "short-in", 1e-6);
  edge(s[0], b, "short-out", 1e-6);
  edge(a, s[1], "slow-1", 5e-6);
  edge(s[1], s[2], "slow-2", 5e-6);
  edge(s[2], b, "slow-3", 5e-6);
  edge(a, s[3], "fast-1", 2e-6);
  edge(s[3], s[4], "fast-2", 2e-6);
  edge(s[4], b, "fast-3", 2e-6);
  edge(a, s[5], "long-1", 1e-9);
  edge(s[5], s[6], "long-2", 1e-9);
  edge(s[6], s[7], "long-3", 1e-9);
  edge(s[7], b, "long-4", 1e-9);
  const Topology topo(g, 1, "detours");
  ASSERT_EQ(topo.route(0, 1).hops.size(), 2u);
  const Route route = topo.route_avoiding(0, 1, {link_named(topo, "short-in")});
  ASSERT_EQ(route.hops.size(), 3u);
  EXPECT_EQ(topo.link(route.hops[0].link).name, "fast-1");
  EXPECT_DOUBLE_EQ(route.latency_s, 6e-6);
  EXPECT_DOUBLE_EQ(route.bottleneck_Bps, 1e9);
  const Route back = topo.route_avoiding(1, 0, {link_named(topo, "short-out"), link_named(topo, "fast-2")});
  EXPECT_EQ(topo.link(back.hops[0].link).name, "slow-3");
}

TEST(RouteAvoiding, ThrowsWhenTheFailedLinksDisconnectThePair) {
  const Topology topo = dgx(2);
  // Every NIC of node 0 dead: node 0 is cut off from node 1, though not from itself.
  std::vector<uint32_t> dead;
  for (int nic = 0; nic < 8; ++nic) {
    for (uint32_t link : topo.nic_links(0, nic)) dead.push_back(link);
  }
  EXPECT_EQ(topo.route_avoiding(0, 5, dead).hops, topo.route(0, 5).hops);
  try {
    topo.route_avoiding(2, 9, dead);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("no route from n0-gpu2 (rank 2) to n1-gpu1 (rank 9) around the failed links"),
              std::string::npos)
        << e.what();
  }
  // A GPU with its NVLink and its NIC dead talks to nobody.
  const std::vector<uint32_t> isolated = {link_named(topo, "n1-gpu4-nvlink"), link_named(topo, "n1-gpu4-pcie")};
  EXPECT_THROW(topo.route_avoiding(12, 13, isolated), Error);
  EXPECT_THROW(topo.route_avoiding(0, 12, isolated), Error);
  // Bad link ids are the caller's error.
  try {
    topo.route_avoiding(0, 1, {static_cast<uint32_t>(topo.link_count())});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

TEST(NicLinks, ArePcieAndUplinkOfThatNic) {
  const Topology topo = dgx(2);
  const std::vector<uint32_t> links = topo.nic_links(1, 5);
  ASSERT_EQ(links.size(), 2u);
  std::vector<std::string> names;
  for (uint32_t link : links) names.push_back(topo.link(link).name);
  EXPECT_EQ(names, (std::vector<std::string>{"n1-gpu5-pcie", "n1-nic5-uplink"}));
  EXPECT_TRUE(Topology::crosses(topo.route(5, 13), links[1]));
  EXPECT_FALSE(Topology::crosses(topo.route(4, 12), links[1]));
  EXPECT_THROW(topo.nic_links(2, 0), Error);
  EXPECT_THROW(topo.nic_links(0, 8), Error);
}

}  // namespace
}  // namespace tandem::models
