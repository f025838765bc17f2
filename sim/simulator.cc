// sim::Simulator's front: NetworkModel and its fittable parameters, run()'s choice of how to time
// a schedule (the compressed rings or the analytic replay of simulator_replay.cc, else the op-by-op
// simulation of simulator_op_by_op.cc) and the fault controls. The platform is built in
// simulator_platform.cc; the models with no schedule live in simulator_in_network.cc (NVLS,
// CollNet) and simulator_p2p.cc.
#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/error.h"
#include "sim/protocol.h"
#include "sim/simulator_internal.h"

namespace tandem::sim {

std::string_view name(Fidelity fidelity) { return fidelity == Fidelity::kFluid ? "fluid" : "packet"; }

Fidelity parse_fidelity(std::string_view text) {
  if (text == "fluid") return Fidelity::kFluid;
  if (text == "packet") return Fidelity::kPacket;
  fail(ErrorCode::kInvalidArgument, "unknown network fidelity '{}' (expected fluid or packet)", text);
}

NetworkModel NetworkModel::ideal() {
  NetworkModel model;
  model.nvlink_efficiency = 1.0;
  model.pcie_efficiency = 1.0;
  model.network_efficiency = 1.0;
  model.nvls_efficiency = 1.0;
  model.tree_efficiency = 1.0;
  model.protocol_effects = false;
  return model;
}

double NetworkModel::base_latency_s(models::NcclProtocol protocol, Algorithm algorithm) const {
  return protocol_effects ? protocol_base_latency_s(protocol, algorithm) * base_latency_scale : 0.0;
}

double NetworkModel::hop_latency_s(models::NcclProtocol protocol, Algorithm algorithm, bool network_hop) const {
  if (!protocol_effects) return 0.0;
  return protocol_hop_latency_s(protocol, algorithm, network_hop) *
         (network_hop ? net_hop_latency_scale : nvlink_hop_latency_scale);
}

const std::vector<NetworkParameter>& network_parameters() {
  static const std::vector<NetworkParameter> parameters = {
      {"nvlink_efficiency", &NetworkModel::nvlink_efficiency, kMinEfficiency, kMaxEfficiency,
       "a share of the NVLink line rate"},
      {"pcie_efficiency", &NetworkModel::pcie_efficiency, kMinEfficiency, kMaxEfficiency,
       "a share of the PCIe line rate"},
      {"network_efficiency", &NetworkModel::network_efficiency, kMinEfficiency, kMaxEfficiency,
       "a share of the NIC line rate"},
      {"nvls_efficiency", &NetworkModel::nvls_efficiency, kMinEfficiency, kMaxEfficiency,
       "a share of the NVLink line rate"},
      {"tree_efficiency", &NetworkModel::tree_efficiency, kMinEfficiency, kMaxEfficiency, "a share of a ring's rate"},
      {"base_latency_scale", &NetworkModel::base_latency_scale, kMinLatencyScale, kMaxLatencyScale,
       "a multiple of NCCL's baseLat"},
      {"nvlink_hop_latency_scale", &NetworkModel::nvlink_hop_latency_scale, kMinLatencyScale, kMaxLatencyScale,
       "a multiple of NCCL's NVLink hwLat"},
      {"net_hop_latency_scale", &NetworkModel::net_hop_latency_scale, kMinLatencyScale, kMaxLatencyScale,
       "a multiple of NCCL's NET hwLat"},
      {"p2p_channel_scale", &NetworkModel::p2p_channel_scale, kMinChannelScale, kMaxChannelScale,
       "a multiple of NCCL's per-CTA p2p rate"},
  };
  return parameters;
}

const NetworkParameter* find_network_parameter(std::string_view name) {
  for (const NetworkParameter& parameter : network_parameters()) {
    if (parameter.name == name) return &parameter;
  }
  return nullptr;
}

namespace {

// A rank-symmetric template whose every lane is (send to +o, receive from -o) repeated: a ring.
bool ring_shaped(const Schedule& schedule) {
  for (const Lane& lane : schedule.ranks[0].lanes) {
    if (lane.ops.size() % 2 != 0) return false;
    for (size_t i = 0; i < lane.ops.size(); i += 2) {
      const Op& send = lane.ops[i];
      const Op& recv = lane.ops[i + 1];
      if (send.kind != OpKind::kSend || !recv.is_recv() || send.peer != lane.ops[0].peer ||
          (send.peer + recv.peer) % schedule.nranks != 0) {
        return false;
      }
    }
  }
  return true;
}

// The sends of one run: every rank's (a rank-symmetric template's n times), in every tile and group.
uint64_t count_transfers(const Schedule& schedule, uint32_t tiles, int groups) {
  uint64_t transfers = 0;
  for (const RankProgram& rank : schedule.ranks) {
    for (const Lane& lane : rank.lanes) {
      for (const Op& op : lane.ops) transfers += op.kind == OpKind::kSend;
    }
  }
  if (schedule.symmetric()) transfers *= static_cast<uint64_t>(schedule.nranks);
  transfers *= tiles * static_cast<uint64_t>(groups);
  return transfers;
}

}  // namespace

// Every group's placement, checked: request.gpu_of_rank (rank r on GPU r when empty), then the
// concurrent groups', each n GPUs of the cluster, no GPU in two groups.
std::vector<std::vector<int>> Simulator::Impl::placements_of(const SimRequest& request, int n) const {
  std::vector<int> gpu_of_rank = request.gpu_of_rank;
  if (gpu_of_rank.empty()) {
    for (int r = 0; r < n; ++r) gpu_of_rank.push_back(r);
  }
  if (gpu_of_rank.size() != static_cast<size_t>(n)) {
    fail(ErrorCode::kInvalidArgument, "simulator: {} ranks but {} GPU placements", n, gpu_of_rank.size());
  }
  // Every group's placement; a global rank is group * n + rank.
  std::vector<std::vector<int>> placements{gpu_of_rank};
  for (const std::vector<int>& more : request.concurrent) placements.push_back(more);
  std::vector<char> used(static_cast<size_t>(topology.gpu_count()), 0);
  for (const std::vector<int>& placement : placements) {
    if (placement.size() != static_cast<size_t>(n)) {
      fail(ErrorCode::kInvalidArgument, "simulator: {} ranks but a concurrent group of {} GPUs", n, placement.size());
    }
    for (int g : placement) {
      if (g < 0 || g >= topology.gpu_count()) {
        fail(ErrorCode::kInvalidArgument, "simulator: GPU {} out of range (the cluster has {})", g,
             topology.gpu_count());
      }
      if (placements.size() > 1 && used[static_cast<size_t>(g)]++) {
        fail(ErrorCode::kInvalidArgument, "simulator: GPU {} is in two concurrent groups", g);
      }
    }
  }
  return placements;
}

SimResult Simulator::run(const SimRequest& request) {
  Impl& s = *impl_;
  if (request.schedule == nullptr) fail(ErrorCode::kInvalidArgument, "simulator: no schedule");
  const Schedule& schedule = *request.schedule;
  const int n = schedule.nranks;
  const std::vector<std::vector<int>> placements = s.placements_of(request, n);
  const std::vector<int>& gpu_of_rank = placements.front();
  if (request.send_slowdown && !request.concurrent.empty()) {
    fail(ErrorCode::kInvalidArgument, "simulator: slowed sends with concurrent groups");
  }
  const int groups = static_cast<int>(placements.size());
  const uint32_t tiles = std::max<uint32_t>(1, request.tiles);
  const Sizer sizer{ChunkMap(request.spec.count, schedule.chunks_per_block, tiles), static_cast<int64_t>(size_bytes(request.spec.dtype)),
                    schedule.chunks_per_block};
  const double wire = s.model.protocol_effects ? protocol_wire_factor(request.protocol) /
                                                     (schedule.algorithm == Algorithm::kTree ? s.model.tree_efficiency : 1.0)
                                               : 1.0;
  const bool latencies = s.model.protocol_effects;
  auto hop_latency = [&](int a, int b) {
    return latencies ? s.model.hop_latency_s(request.protocol, schedule.algorithm,
                                             s.network_hop(gpu_of_rank[a], gpu_of_rank[b]))
                     : 0.0;
  };
  const double base_latency = latencies ? s.model.base_latency_s(request.protocol, schedule.algorithm) : 0.0;

  SimResult result;
  result.transfers = count_transfers(schedule, tiles, groups);

  // The compressed rounds replay one round per position with the normal routes: faults (a slow
  // link on some positions' routes, detours, a straggler) need the op-by-op simulation.
  if (s.zone != nullptr && schedule.symmetric() && ring_shaped(schedule) && !s.faults_active() &&
      !request.send_slowdown) {
    result.compressed = true;
    result.seconds = base_latency + s.run_compressed(
                                        schedule, placements,
                                        [&](const SlotRange& range, uint32_t tile) { return sizer.bytes(range, tile); },
                                        tiles, wire, hop_latency, result);
    return result;
  }
  // Trees (every edge busy at once in steady state) replay analytically after one contention
  // round, degraded links included (the round runs on SimGrid's links at their set bandwidth);
  // PAT likewise after one contention round per step (its O(n) packing copies per rank would make
  // the op-by-op simulation quadratic in the ranks); detours around dead links and stragglers need
  // the op-by-op simulation.
  const bool stragglers = std::any_of(s.gpu_slowdown.begin(), s.gpu_slowdown.end(), [](double f) { return f != 1.0; });
  const bool replayable =
      schedule.algorithm == Algorithm::kTree || schedule.algorithm == Algorithm::kPat || request.analytic;
  if (s.zone != nullptr && !schedule.symmetric() && replayable && s.dead_links.empty() && !stragglers &&
      !request.send_slowdown) {
    result.compressed = true;
    result.seconds = s.run_replayed(
        schedule, placements, [&](const SlotRange& range, uint32_t tile) { return sizer.bytes(range, tile); }, tiles,
        wire, hop_latency, base_latency, result, schedule.algorithm == Algorithm::kPat, request.replay_cache);
    return result;
  }
  result.seconds = s.run_op_by_op(schedule, request, placements, sizer, tiles, wire, base_latency);
  result.simulated_transfers = result.transfers;
  return result;
}

void Simulator::set_link_factor(uint32_t link, double factor) {
  Impl& s = *impl_;
  s.require_fluid("set_link_factor");
  if (link >= s.topology.link_count()) {
    fail(ErrorCode::kInvalidArgument, "set_link_factor: link {} out of range (the topology has {})", link,
         s.topology.link_count());
  }
  if (!(factor > 0) || !std::isfinite(factor)) {
    fail(ErrorCode::kInvalidArgument,
         "set_link_factor: factor {} for link '{}' must be positive (a dead link is set_dead_links')", factor,
         s.topology.link(link).name);
  }
  // The same product as at construction times the factor: factor 1 gives back the exact bandwidth.
  const models::Link& spec = s.topology.link(link);
  const double bandwidth = spec.bandwidth_Bps * s.link_efficiency(spec.kind) * factor;
  s.links[link]->get_link_up()->set_bandwidth(bandwidth);
  s.links[link]->get_link_down()->set_bandwidth(bandwidth);
  s.link_factor[link] = factor;
}

void Simulator::set_dead_links(std::vector<uint32_t> links) {
  Impl& s = *impl_;
  s.require_fluid("set_dead_links");
  for (uint32_t link : links) {
    if (link >= s.topology.link_count()) {
      fail(ErrorCode::kInvalidArgument, "set_dead_links: link {} out of range (the topology has {})", link,
           s.topology.link_count());
    }
  }
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
  s.dead_links = std::move(links);
  s.zone->clear_routes();
}

void Simulator::set_gpu_slowdown(int gpu, double factor) {
  Impl& s = *impl_;
  s.require_fluid("set_gpu_slowdown");
  if (gpu < 0 || gpu >= s.topology.gpu_count()) {
    fail(ErrorCode::kInvalidArgument, "set_gpu_slowdown: GPU {} out of range (the cluster has {})", gpu,
         s.topology.gpu_count());
  }
  if (!(factor >= 1) || !std::isfinite(factor)) {
    fail(ErrorCode::kInvalidArgument, "set_gpu_slowdown: factor {} for GPU {} must be at least 1", factor, gpu);
  }
  s.gpu_slowdown[static_cast<size_t>(gpu)] = factor;
}

bool Simulator::crosses(int gpu_a, int gpu_b, uint32_t link) const {
  const Impl& s = *impl_;
  const models::Route route =
      s.dead_links.empty() ? s.topology.route(gpu_a, gpu_b) : s.topology.route_avoiding(gpu_a, gpu_b, s.dead_links);
  return models::Topology::crosses(route, link);
}

std::vector<uint32_t> Simulator::links_of_nic(int node, int nic) const { return impl_->topology.nic_links(node, nic); }

bool Simulator::faults_active() const { return impl_->faults_active(); }

}  // namespace tandem::sim
