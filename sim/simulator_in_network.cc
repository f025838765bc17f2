// sim::Simulator's models of NCCL's in-network reductions, which have no point-to-point schedule
// to replay: NVLS (NVLink SHARP inside a node, run on SimGrid's links), NVLS Tree and CollNet
// (InfiniBand SHARP), both in one pipelined round where the most loaded link sets the time.
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/algorithms.h"
#include "core/error.h"
#include "sim/protocol.h"
#include "sim/simulator.h"
#include "sim/simulator_internal.h"

namespace tandem::sim {
namespace {

// A CollNet all_reduce's GPUs: node-major, per_node on each of `nodes` nodes.
struct CollnetGroup {
  const std::vector<int>& gpus;
  int per_node;
  int nodes;
  int gpu(int node, int i) const { return gpus[static_cast<size_t>(node * per_node + i)]; }
};

// Bytes per direction of the links CollNet loads: (link << 1 | forward) -> bytes. A link that
// carries nothing gets no entry.
using LinkLoads = std::unordered_map<uint64_t, double>;

void add_load(LinkLoads& load, uint32_t link, bool forward, double amount) {
  if (amount > 0) load[(uint64_t{link} << 1) | (forward ? 1 : 0)] += amount;
}

// GPU `gpu`'s NVLink to its NVSwitch: `up` bytes from the GPU, `down` bytes to it.
void add_nvlink_load(LinkLoads& load, const models::Topology& topology, const std::vector<uint32_t>& nvlink_of_gpu,
                     int gpu, double up, double down) {
  const uint32_t link = nvlink_of_gpu.at(static_cast<size_t>(gpu));
  const bool gpu_first = topology.endpoints(link).first == topology.gpu_vertex(gpu);
  add_load(load, link, gpu_first, up);
  add_load(load, link, !gpu_first, down);
}

// The heads of node `node`: the first GPU of the node on each rail, and their rails.
struct CollnetHeads {
  std::vector<int> gpus;
  std::vector<int> rails;
};

CollnetHeads collnet_heads(const models::Topology& topology, const CollnetGroup& group, int node) {
  CollnetHeads heads;
  for (int i = 0; i < group.per_node; ++i) {
    const int g = group.gpu(node, i);
    const int rail = topology.vertex(topology.gpu_vertex(g)).rail;
    if (std::find(heads.rails.begin(), heads.rails.end(), rail) == heads.rails.end()) {
      heads.rails.push_back(rail);
      heads.gpus.push_back(g);
    }
  }
  return heads;
}

// The NVLink traffic of node `node`'s GPUs, per direction (Direct and Chain: the table above
// Simulator::run_collnet_all_reduce). None on a node of one GPU.
void add_collnet_nvlink_loads(LinkLoads& load, const models::Topology& topology,
                              const std::vector<uint32_t>& nvlink_of_gpu, const CollnetGroup& group, int node,
                              const CollnetHeads& heads, double total, bool chain) {
  if (group.per_node == 1) return;
  const double h = static_cast<double>(heads.gpus.size());
  const double slice = total / h;
  for (int i = 0; i < group.per_node; ++i) {
    const int g = group.gpu(node, i);
    const bool head = std::find(heads.gpus.begin(), heads.gpus.end(), g) != heads.gpus.end();
    if (chain) {
      const double n = group.per_node;
      add_nvlink_load(load, topology, nvlink_of_gpu, g, 2 * total * (n - 1) / n, 2 * total * (n - 1) / n);
    } else {
      const double traffic = (h - (head ? 1 : 0)) * slice + (head ? (group.per_node - 1) * slice : 0.0);
      add_nvlink_load(load, topology, nvlink_of_gpu, g, traffic, traffic);
    }
  }
}

// Each head's slice up its PCIe and NIC link to the leaf, and the result back down: the hops of
// its routes to and from the GPU on its rail of the next node that lie on its NIC's links.
void add_collnet_nic_loads(LinkLoads& load, const models::Topology& topology, const CollnetGroup& group, int node,
                           const CollnetHeads& heads, double slice) {
  const int other_node = (node + 1) % group.nodes;
  for (size_t k = 0; k < heads.gpus.size(); ++k) {
    const int head = heads.gpus[k];
    int peer = group.gpu(other_node, 0);
    for (int i = 0; i < group.per_node; ++i) {
      const int g = group.gpu(other_node, i);
      if (topology.vertex(topology.gpu_vertex(g)).rail == heads.rails[k]) {
        peer = g;
        break;
      }
    }
    const std::vector<uint32_t> nic = topology.nic_links(topology.vertex(topology.gpu_vertex(head)).node, heads.rails[k]);
    auto on_nic = [&](uint32_t link) { return std::find(nic.begin(), nic.end(), link) != nic.end(); };
    for (const models::Hop& hop : topology.route(head, peer).hops) {
      if (on_nic(hop.link)) add_load(load, hop.link, hop.forward, slice);
    }
    for (const models::Hop& hop : topology.route(peer, head).hops) {
      if (on_nic(hop.link)) add_load(load, hop.link, hop.forward, slice);
    }
  }
}

}  // namespace

SimResult Simulator::run_nvls_all_reduce(int64_t bytes, const std::vector<int>& gpus) {
  Impl& s = *impl_;
  if (!s.cluster.gpu.nvls) {
    fail(ErrorCode::kUnsupported, "nvls: {} has no NVLink SHARP (NVSwitch multicast)", s.cluster.gpu.name);
  }
  if (gpus.size() < 2) fail(ErrorCode::kUnsupported, "nvls needs at least 2 GPUs");
  if (s.zone == nullptr) fail(ErrorCode::kUnsupported, "nvls is a fluid-model simulation; the packet model has no NVSwitch reduction");
  const int node = s.topology.vertex(s.topology.gpu_vertex(gpus[0])).node;
  for (int g : gpus) {
    if (s.topology.vertex(s.topology.gpu_vertex(g)).node != node) {
      fail(ErrorCode::kUnsupported, "nvls models all_reduce inside one node; these GPUs span nodes");
    }
  }
  const double n = static_cast<double>(gpus.size());
  // The links run at nvlink_efficiency; NVLS reaches nvls_efficiency of the line rate instead.
  const double scale = s.model.nvlink_efficiency / s.model.nvls_efficiency;
  const double latency = s.model.protocol_effects ? nvls_latency_s() * s.model.nvlink_hop_latency_scale : 0.0;
  const double start = sg4::Engine::get_clock();
  sg4::Actor::create("nvls", s.switch_hosts[static_cast<size_t>(node)], [&] {
    std::vector<sg4::CommPtr> comms;
    sg4::Host* nvswitch = s.switch_hosts[static_cast<size_t>(node)];
    for (int g : gpus) {
      sg4::Host* gpu = s.gpu_hosts[static_cast<size_t>(g)];
      // Up: the switch reads the GPU's whole buffer (every slice's multimem load-reduce).
      comms.push_back(sg4::Comm::sendto_async(gpu, nvswitch, static_cast<uint64_t>(static_cast<double>(bytes) * scale)));
      // Down: the multicast store of every reduced slice, plus the GPU's own slice's result.
      comms.push_back(sg4::Comm::sendto_async(
          nvswitch, gpu, static_cast<uint64_t>(static_cast<double>(bytes) * (1.0 + 1.0 / n) * scale)));
    }
    sg4::Comm::wait_all(comms);
    sg4::this_actor::sleep_for(latency);
  });
  s.engine->run();
  SimResult result;
  result.seconds = sg4::Engine::get_clock() - start;
  result.transfers = result.simulated_transfers = 2 * gpus.size();
  return result;
}

// NVLS Tree (NCCL 2.28 device/all_reduce.h runTreeSplit for NVLS_TREE, transport/nvls.cc): inside
// each node NVLink SHARP reduces the buffer into one slice per head GPU (head h = local GPU h, on
// NIC h); head h all-reduces its slice with the h-th heads of the other nodes over a double binary
// tree of nodes on its own rail (tree 0 on even channels, tree 1 on odd ones: half the slice each),
// and the switch multicasts the result back. The three phases run at once on different warps, so
// in steady state every link is busy together: the most loaded link (bytes over its fluid-model
// bandwidth) sets the time, plus NCCL's latencies (the NVLS hop once, the tree's network hop per
// level up and down).
SimResult Simulator::run_nvls_tree_all_reduce(int64_t bytes, const std::vector<int>& gpus, int per_node) {
  Impl& s = *impl_;
  if (!s.cluster.gpu.nvls) {
    fail(ErrorCode::kUnsupported, "nvls_tree: {} has no NVLink SHARP (NVSwitch multicast)", s.cluster.gpu.name);
  }
  if (s.zone == nullptr) fail(ErrorCode::kUnsupported, "nvls_tree is a fluid-model simulation");
  if (per_node < 2 || gpus.size() % static_cast<size_t>(per_node) != 0) {
    fail(ErrorCode::kUnsupported, "nvls_tree needs at least 2 GPUs on every node, the same number on each");
  }
  const int nodes = static_cast<int>(gpus.size()) / per_node;
  if (nodes < 2) fail(ErrorCode::kUnsupported, "nvls_tree runs across nodes; inside one node use nvls");
  const double n = per_node;
  // NVLS runs at nvls_efficiency of the line rate where the links run at nvlink_efficiency.
  const double scale = s.model.nvlink_efficiency / s.model.nvls_efficiency;
  // Bytes per direction of every link: each GPU's NVLink up (its whole buffer read by the switch's
  // multimem load-reduce) and down (every reduced slice multicast, plus its own result), and each
  // tree edge's half slice both ways along its route (PCIe, NIC, leaf, maybe spine).
  std::unordered_map<uint64_t, double> load;  // (link << 1 | forward) -> bytes
  auto add = [&](uint32_t link, bool forward, double amount) { load[(uint64_t{link} << 1) | (forward ? 1 : 0)] += amount; };
  for (int g : gpus) {
    const uint32_t link = s.nvlink_of_gpu.at(static_cast<size_t>(g));
    const bool gpu_first = s.topology.endpoints(link).first == s.topology.gpu_vertex(g);
    add(link, gpu_first, static_cast<double>(bytes) * scale);
    add(link, !gpu_first, static_cast<double>(bytes) * (1.0 + 1.0 / n) * scale);
  }
  const double half_slice = static_cast<double>(bytes) / n / 2.0;
  for (int tree = 0; tree < 2; ++tree) {
    for (int v = 0; v < nodes; ++v) {
      const int parent = nccl_tree_parent(nodes, v, tree);
      if (parent < 0) continue;
      for (int h = 0; h < per_node; ++h) {
        const int child_gpu = gpus[static_cast<size_t>(v * per_node + h)];
        const int parent_gpu = gpus[static_cast<size_t>(parent * per_node + h)];
        for (const models::Hop& hop : s.topology.route(child_gpu, parent_gpu).hops) add(hop.link, hop.forward, half_slice);
        for (const models::Hop& hop : s.topology.route(parent_gpu, child_gpu).hops) add(hop.link, hop.forward, half_slice);
      }
    }
  }
  // The phases run at once and every link stays busy: the most loaded link sets the time.
  double seconds = 0;
  for (const auto& [key, amount] : load) seconds = std::max(seconds, amount / s.link_capacity(static_cast<uint32_t>(key >> 1)));
  int depth = 0;
  for (int span = 1; span < nodes; span *= 2) ++depth;
  SimResult result;
  const double latency = s.model.protocol_effects
                             ? nvls_latency_s() * s.model.nvlink_hop_latency_scale +
                                   2.0 * depth * nvls_tree_network_hop_latency_s() * s.model.net_hop_latency_scale
                             : 0.0;
  result.seconds = seconds + latency;
  result.transfers = result.simulated_transfers = load.size();
  result.compressed = true;
  return result;
}

// CollNet (NCCL 2.28 transport/coll_net.cc, device/all_reduce.h runCollNetDirect / runCollNetChain;
// ../shared/docs/nccl-multinode-notes.md §4). One head per NIC taking part: head h is the first GPU
// of the node on rail h, and slice h (bytes / heads) goes through its NIC. Per node, per direction:
//
//   Direct  GPU g  NVLink up:   its other heads' slices, and (a head) its result to the node's other GPUs
//                  NVLink down: the same, mirrored
//   Chain   GPU g  NVLink up:   the reduce toward the head and the broadcast onward, except at the
//                               chain's ends: 2 (n - 1) / n of the buffer over the rotating heads
//   head h  PCIe + NIC link, up and down: slice h once each way (the switch reduces it over the nodes)
//
// The switch's aggregation tree sends one slice per rail up and down each switch-to-switch link,
// never more than a NIC link carries, so the model stops at the NIC's link to its leaf.
SimResult Simulator::run_collnet_all_reduce(int64_t bytes, const std::vector<int>& gpus, int per_node, bool chain) {
  Impl& s = *impl_;
  const char* label = chain ? "collnet_chain" : "collnet_direct";
  if (!s.cluster.sharp) {
    fail(ErrorCode::kUnsupported, "{}: the cluster has no in-network reduction (SHARP): add --sharp", label);
  }
  if (s.zone == nullptr) fail(ErrorCode::kUnsupported, "{} is a fluid-model simulation", label);
  if (per_node < 1 || gpus.empty() || gpus.size() % static_cast<size_t>(per_node) != 0) {
    fail(ErrorCode::kUnsupported, "{} needs the same number of GPUs on every node", label);
  }
  const int nodes = static_cast<int>(gpus.size()) / per_node;
  if (nodes < 2) fail(ErrorCode::kUnsupported, "{} runs across nodes (NCCL: COLLNET_NODE_THRESHOLD = 2)", label);
  const CollnetGroup group{gpus, per_node, nodes};
  LinkLoads load;
  const auto total = static_cast<double>(bytes);
  for (int v = 0; v < nodes; ++v) {
    const CollnetHeads heads = collnet_heads(s.topology, group, v);
    add_collnet_nvlink_loads(load, s.topology, s.nvlink_of_gpu, group, v, heads, total, chain);
    add_collnet_nic_loads(load, s.topology, group, v, heads, total / static_cast<double>(heads.gpus.size()));
  }
  double seconds = 0;
  for (const auto& [key, amount] : load) {
    seconds = std::max(seconds, amount / s.link_capacity(static_cast<uint32_t>(key >> 1)));
  }
  SimResult result;
  result.seconds =
      seconds + (s.model.protocol_effects ? collnet_latency_s(chain, per_node, s.model.nvlink_hop_latency_scale,
                                                              s.model.net_hop_latency_scale)
                                          : 0.0);
  result.transfers = result.simulated_transfers = load.size();
  result.compressed = true;
  return result;
}

}  // namespace tandem::sim
