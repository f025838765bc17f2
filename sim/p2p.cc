#include "sim/p2p.h"

#include <algorithm>
#include <numeric>

#include "models/cost_model.h"

namespace tandem::sim {
namespace {

int pow2_up(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

int log2_up(int x) {
  int bits = 0;
  while ((1 << bits) < x) ++bits;
  return bits;
}

// NCCL's reverseBits(x, bits): the low `bits` bits of x in reverse order.
int reverse_bits(int x, int bits) {
  int out = 0;
  for (int b = 0; b < bits; ++b) out |= ((x >> b) & 1) << (bits - 1 - b);
  return out;
}

int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool P2pPlan::uses_ll(int64_t bytes) const {
  return bytes <= static_cast<int64_t>(channels_per_peer) * kP2pLlThresholdBytes;
}

// addP2pToPlan: start from nChannelsMin parts of at least minPartSize, double the parts while one
// exceeds maxPartSize and the doubling stays within nChannelsMax. Across nodes parts are half a
// step to a step; on one node an eighth of a step to 32 steps.
int P2pPlan::peer_channels(int64_t bytes) const {
  if (bytes <= 0) return 1;
  const int64_t step = uses_ll(bytes) ? kP2pLlStepBytes : step_bytes;
  const int64_t min_part = nodes > 1 ? step / 2 : step / 8;
  const int64_t max_part = nodes > 1 ? step : step * 32;
  int n = static_cast<int>(std::min<int64_t>(min_channels, div_up(bytes, min_part)));
  int64_t part = std::max(min_part, div_up(bytes, n));
  while (part > max_part && n <= channels_per_peer / 2) {
    n *= 2;
    part = div_up(bytes, n);
  }
  return n;
}

int P2pPlan::channel_base(int round) const {
  int base = round;
  if (nodes > 1) {
    const int group_delta = round / group_size;
    const int local_delta = round % group_size;
    base = group_delta * static_cast<int>(div_up(group_size, kP2pWorksPerBatch)) + local_delta / kP2pWorksPerBatch;
  }
  return reverse_bits(base, log2_up(channels));
}

// ncclP2pSchedule with node-major ranks: groups of group_size ranks; group deltas come in the
// order (x^2 + x) / 2 mod pow2Up(groups), skipping those beyond the last group, and within a group
// delta the local deltas 0, 1, ... in turn.
std::vector<int> P2pPlan::group_deltas() const {
  const int groups = nranks / group_size;
  const int groups_pow2 = pow2_up(groups);
  std::vector<int> deltas;
  int delta = 0;
  for (int group_round = 0; group_round < groups_pow2; ++group_round) {
    if (delta < groups) deltas.push_back(delta);
    delta = (delta + group_round + 1) & (groups_pow2 - 1);
  }
  return deltas;
}

int P2pPlan::send_peer(int rank, int round, const std::vector<int>& deltas) const {
  const int groups = nranks / group_size;
  const int send_group = (rank / group_size + deltas[static_cast<size_t>(round / group_size)]) % groups;
  return send_group * group_size + (rank % group_size + round % group_size) % group_size;
}

P2pPlan nccl_p2p_plan(const models::ClusterSpec& cluster) {
  const models::NcclCostModel model(cluster);
  P2pPlan plan;
  plan.nodes = cluster.nodes;
  plan.per_node = cluster.gpus_per_node;
  plan.nranks = plan.nodes * plan.per_node;
  // ncclTopoComputeP2pChannels: the communicator's channels (at most MAXCHANNELS), a power of two.
  plan.channels = pow2_up(std::clamp(model.comm_channels(), 1, kP2pMaxChannels));
  // ncclTopoGetNchannels over every peer, the least: an NVLink peer 2 per NVLink of the path, a
  // PCIe peer 2, a network peer 2 halved while 2 x ranks > 4 x p2p channels.
  int least = plan.channels;
  if (plan.per_node > 1) least = std::min(least, cluster.gpu.nvlinks > 0 ? 2 * std::max(1, cluster.gpu.nvlinks) : 2);
  if (plan.nodes > 1) {
    int net = 2;
    while (net * plan.nranks > plan.channels * 4 && net > 1) net /= 2;
    least = std::min(least, net);
  }
  plan.channels_per_peer = std::min(pow2_up(least), plan.channels);
  plan.min_channels = plan.channels_per_peer;
  while (plan.min_channels * plan.nranks > plan.channels && plan.min_channels > 1) plan.min_channels /= 2;
  // ncclP2pSchedule: groups of 8 ranks across nodes (NCCL_P2P_SCHEDULE_GROUP_SIZE), of a node's
  // ranks on one node; narrowed to a divisor of the ranks per node.
  plan.group_size = plan.nodes > 1 ? std::gcd(kP2pWorksPerBatch, plan.per_node) : plan.per_node;
  const bool all_nvlink = plan.per_node == 1 || cluster.gpu.nvlinks > 0;
  plan.step_bytes = plan.nodes > 1 ? kP2pNetChunkBytes : all_nvlink ? kP2pNvlChunkBytes : kP2pPciChunkBytes;
  if (plan.nodes > 1) {
    const models::NcclGraph& ring = model.graph(models::NcclAlgorithm::kRing);
    const int runtime = std::max(1, model.comm_channels());
    plan.channel_Bps = ring.bw_inter_GBps * ring.channels / runtime * 1e9;
  }
  return plan;
}

}  // namespace tandem::sim
