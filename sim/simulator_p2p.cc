// sim::Simulator's model of NCCL's point-to-point path (all_to_all and send_recv on the channels
// of a sim/p2p.h plan), in one pipelined round where the most loaded link or channel sets the time.
#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "sim/p2p.h"
#include "sim/protocol.h"
#include "sim/simulator.h"
#include "sim/simulator_internal.h"

namespace tandem::sim {
namespace {

void check_p2p_request(const P2pRequest& request, int gpu_count) {
  if (request.collective != Collective::kAllToAll && request.collective != Collective::kSendRecv) {
    fail(ErrorCode::kInvalidArgument, "p2p runs all_to_all and send_recv, not {}", name(request.collective));
  }
  const P2pPlan& plan = request.plan;
  if (request.instances.empty() || plan.nranks < 1 || plan.group_size < 1 || plan.nranks % plan.group_size != 0 ||
      plan.channels < 1) {
    fail(ErrorCode::kInvalidArgument, "p2p: no instances, or a plan of {} ranks in groups of {}", plan.nranks,
         plan.group_size);
  }
  for (const std::vector<int>& gpus : request.instances) {
    if (gpus.size() != static_cast<size_t>(plan.nranks)) {
      fail(ErrorCode::kInvalidArgument, "p2p: the plan has {} ranks but an instance {} GPUs", plan.nranks,
           gpus.size());
    }
    for (int g : gpus) {
      if (g < 0 || g >= gpu_count)
        fail(ErrorCode::kInvalidArgument, "p2p: GPU {} out of range ({} GPUs)", g, gpu_count);
    }
  }
}

// What each peer transfer of a request moves: bytes to one peer, whether NCCL sends them with LL,
// the wire bytes per payload byte, and the parts (channels) they are split into.
struct P2pMessage {
  int64_t peer_bytes = 0;
  bool ll = false;
  double wire = 1.0;
  int parts = 1;
  double part_bytes = 0;  // wire bytes of one part
};

// Where a request's bytes go: per GPU and channel the seconds of copying, bytes per route leg, the
// epochs each channel runs, and the point-to-point transfers.
struct P2pTraffic {
  std::vector<double> channel_seconds;             // [(gpu * channels + channel) * 2 + (0 send, 1 receive)]
  std::unordered_map<uint64_t, double> leg_bytes;  // (from GPU << 32 | to GPU) -> bytes
  // Epochs (8 rounds each) per channel: the same for every rank, as the channels depend on the round only.
  std::vector<std::vector<int>> epochs_of_channel;
  uint64_t transfers = 0;
};

// The copying of one send from GPU a to GPU b in round `round`: its parts on their channels, each
// at its GPU's channel rate (bytes per second, by GPU) on the sending and the receiving side.
// `first` records the channels' epochs (the first rank of the first instance stands for all).
void add_p2p_parts(P2pTraffic& traffic, const P2pPlan& plan, const P2pMessage& message, int a, int b, int round,
                   bool first, const std::vector<double>& channel_rate) {
  const auto channels = static_cast<size_t>(plan.channels);
  const int base = plan.channel_base(round);
  for (int part = 0; part < message.parts; ++part) {
    const auto channel = static_cast<size_t>((base + part) % plan.channels);
    traffic.channel_seconds[(static_cast<size_t>(a) * channels + channel) * 2] +=
        message.part_bytes / channel_rate[static_cast<size_t>(a)];
    traffic.channel_seconds[(static_cast<size_t>(b) * channels + channel) * 2 + 1] +=
        message.part_bytes / channel_rate[static_cast<size_t>(b)];
    if (first) {
      std::vector<int>& epochs = traffic.epochs_of_channel[channel];
      if (std::find(epochs.begin(), epochs.end(), round / kP2pWorksPerBatch) == epochs.end()) {
        epochs.push_back(round / kP2pWorksPerBatch);
      }
    }
  }
}

// Every send of every instance: its copying on the channels and its bytes on its route legs
// (across nodes through PXN's relay when the relay is one of the instance's GPUs).
P2pTraffic p2p_traffic(const P2pRequest& request, const P2pMessage& message, int gpus_per_node,
                       const std::vector<double>& channel_rate) {
  const auto gpu_count = static_cast<int>(channel_rate.size());
  const P2pPlan& plan = request.plan;
  const int n = plan.nranks;
  const bool all_to_all = request.collective == Collective::kAllToAll;
  const std::vector<int> deltas = plan.group_deltas();
  P2pTraffic traffic;
  traffic.channel_seconds.assign(static_cast<size_t>(gpu_count) * static_cast<size_t>(plan.channels) * 2, 0.0);
  traffic.epochs_of_channel.resize(static_cast<size_t>(plan.channels));
  auto leg = [&](int from, int to, double bytes) {
    traffic.leg_bytes[(static_cast<uint64_t>(from) << 32) | static_cast<uint32_t>(to)] += bytes;
  };
  std::vector<char> member(static_cast<size_t>(gpu_count), 0);
  for (const std::vector<int>& gpus : request.instances) {
    std::fill(member.begin(), member.end(), 0);
    for (int g : gpus) member[static_cast<size_t>(g)] = 1;
    for (int r = 0; r < n; ++r) {
      for (int round = 1; round < n; ++round) {
        const int peer = plan.send_peer(r, round, deltas);
        if (peer == r || (!all_to_all && peer != (r + 1) % n)) continue;
        const int a = gpus[static_cast<size_t>(r)];
        const int b = gpus[static_cast<size_t>(peer)];
        ++traffic.transfers;
        const bool first = r == 0 && &gpus == &request.instances.front();
        add_p2p_parts(traffic, plan, message, a, b, round, first, channel_rate);
        const double bytes = static_cast<double>(message.peer_bytes) * message.wire;
        const int node_a = a / gpus_per_node;
        const int relay = node_a * gpus_per_node + b % gpus_per_node;
        if (plan.pxn && node_a != b / gpus_per_node && relay != a && member[static_cast<size_t>(relay)]) {
          leg(a, relay, bytes);
          leg(relay, b, bytes);
        } else {
          leg(a, b, bytes);
        }
      }
    }
  }
  return traffic;
}

}  // namespace

// NCCL's point-to-point transfers (sim/p2p.h). Every rank's sends are split into parts on the
// plan's channels (round k of rank r: send to peer(r, k), parts on channels base(k), base(k) + 1,
// ... mod p2p channels); a channel is one CTA per GPU that copies its parts one after the other
// and at most channel_Bps, for the sending and for the receiving side. The bytes take their route:
//
//     one node         a --NVLink--> NVSwitch --NVLink--> b
//     across nodes     a --NVLink--> relay (a's node, b's local index) --PCIe--> NIC --rail--> ... --> b
//                      (PXN; the relay is a itself when a already sits on b's rail)
//
// In steady state every channel and link is busy at once (all_to_all keeps them all loaded alike),
// so the most loaded one sets the time: links at their fluid-model capacity, channels at their
// rate (divided by a straggler's slowdown). Flows are summed per route leg, not per pair: 512 GPUs
// are 261,632 pairs but 36,000 legs. NCCL's latencies add on: the base latency once, then one
// step per epoch a channel runs (8 rounds share an epoch; epochs on a channel go in turn).
SimResult Simulator::run_p2p(const P2pRequest& request) {
  Impl& s = *impl_;
  if (s.zone == nullptr) fail(ErrorCode::kUnsupported, "p2p is a fluid-model simulation; the packet model runs direct");
  check_p2p_request(request, s.topology.gpu_count());
  const P2pPlan& plan = request.plan;
  const int n = plan.nranks;
  SimResult result;
  result.compressed = true;
  if (n == 1 || request.bytes <= 0) return result;

  P2pMessage message;
  message.peer_bytes = request.collective == Collective::kAllToAll ? request.bytes / n : request.bytes;
  message.ll = plan.uses_ll(message.peer_bytes);
  message.wire = s.model.protocol_effects && message.ll ? protocol_wire_factor(models::NcclProtocol::kLL) : 1.0;
  message.parts = plan.peer_channels(message.peer_bytes);
  message.part_bytes = static_cast<double>(message.peer_bytes) * message.wire / message.parts;
  // What one channel of each GPU copies a second (a straggler's slower).
  std::vector<double> channel_rate(static_cast<size_t>(s.topology.gpu_count()));
  for (size_t g = 0; g < channel_rate.size(); ++g) {
    channel_rate[g] = plan.channel_Bps * s.model.p2p_channel_scale / s.gpu_slowdown[g];
  }
  const P2pTraffic traffic = p2p_traffic(request, message, s.topology.gpus_per_node(), channel_rate);

  // Link loads, one direction each, over every leg's route (around dead links when there are any).
  std::vector<double> link_bytes(s.topology.link_count() * 2, 0.0);
  for (const auto& [key, bytes] : traffic.leg_bytes) {
    const int from = static_cast<int>(key >> 32);
    const int to = static_cast<int>(key & 0xffffffffu);
    const models::Route route =
        s.dead_links.empty() ? s.topology.route(from, to) : s.topology.route_avoiding(from, to, s.dead_links);
    for (const models::Hop& hop : route.hops) link_bytes[2 * hop.link + (hop.forward ? 1 : 0)] += bytes;
  }
  double seconds = *std::max_element(traffic.channel_seconds.begin(), traffic.channel_seconds.end());
  for (size_t l = 0; l < link_bytes.size(); ++l) {
    if (link_bytes[l] > 0) seconds = std::max(seconds, link_bytes[l] / s.link_capacity(static_cast<uint32_t>(l / 2)));
  }
  size_t epochs = 1;
  for (const std::vector<int>& e : traffic.epochs_of_channel) epochs = std::max(epochs, e.size());
  double latency = 0;
  if (s.model.protocol_effects) {
    const models::NcclProtocol protocol = message.ll ? models::NcclProtocol::kLL : models::NcclProtocol::kSimple;
    latency = s.model.base_latency_s(protocol, Algorithm::kDirect) +
              static_cast<double>(epochs) * s.model.hop_latency_s(protocol, Algorithm::kDirect, plan.nodes > 1);
  }
  result.seconds = seconds + latency;
  result.transfers = traffic.transfers;
  result.simulated_transfers = traffic.leg_bytes.size();
  return result;
}

}  // namespace tandem::sim
