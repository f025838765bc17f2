#include "models/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace tandem::models {

namespace {

// =============================================================================================
// NCCL's constants, nccl@v2.28.9-1 (src/graph/tuning.cc ncclTunerConstantsDefaults unless noted).
// Indices: algorithm in NcclAlgorithm order, protocol in NcclProtocol order (LL, LL128, Simple),
// architecture in GpuArch order (Volta, Ampere, Hopper, Blackwell), node index [1, 2, >=3 nodes].
// =============================================================================================

constexpr int kTree = static_cast<int>(NcclAlgorithm::kTree);
constexpr int kRing = static_cast<int>(NcclAlgorithm::kRing);
constexpr int kCollNetDirect = static_cast<int>(NcclAlgorithm::kCollNetDirect);
constexpr int kCollNetChain = static_cast<int>(NcclAlgorithm::kCollNetChain);
constexpr int kNvls = static_cast<int>(NcclAlgorithm::kNvls);
constexpr int kNvlsTree = static_cast<int>(NcclAlgorithm::kNvlsTree);
constexpr int kPat = static_cast<int>(NcclAlgorithm::kPat);
constexpr int kLL = static_cast<int>(NcclProtocol::kLL);
constexpr int kLL128 = static_cast<int>(NcclProtocol::kLL128);
constexpr int kSimple = static_cast<int>(NcclProtocol::kSimple);

// Latency in µs, per algorithm x protocol.
constexpr double kBaseLatency_us[kNcclAlgorithmCount][kNcclProtocolCount] = {
    {6.8, 14.0, 8.4},  // Tree
    {6.6, 14.0, 8.4},  // Ring
    {0, 0, 0},         // CollNetDirect
    {0, 0, 0},         // CollNetChain
    {0, 0, 0},         // NVLS
    {0, 0, 0},         // NVLSTree
    {8.0, 8.0, 8.0},   // PAT
};

enum Hardware { kHwNvLink, kHwPci, kHwNet };
// Per-step latency in µs: [NVLINK, PCI, NET][algorithm][protocol].
constexpr double kHwLatency_us[3][kNcclAlgorithmCount][kNcclProtocolCount] = {
    {{.6, 1.25, 4.0}, {.6, 1.9, 3.4}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 25}, {0, 0, 25}, {0, 0, 4.0}},  // NVLINK
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 0}, {0, 0, 0}, {0, 0, 4.0}},   // PCI
    {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}, {0, 0, 31}, {0, 0, 30}, {0, 0, 18}, {0, 0, 20.9}, {0, 0, 14}},  // NET
};

// GB/s. llMaxBws rows: by architecture on one node; on several nodes row 0 = Intel, row 1 = AMD.
constexpr double kLlMaxBw_GBps[4][3] = {
    {39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
constexpr double kPerChannelMaxRingLL128_GBps[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 36.7}, {73.4, 34.6, 73.4}};
constexpr double kPerChannelMaxTreeLL128_GBps[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
constexpr double kPerChannelMaxTree_GBps[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
constexpr double kPerChannelMaxNvlsTree_GBps[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0.0, 57.7, 45.5}, {0.0, 96.0, 43.8}};
constexpr double kNvlsEfficiency[4] = {0.0, 0.0, 0.85, 0.74};

// Bus-bandwidth refinements of ncclTopoTuneModel.
constexpr double kRingLLFactor = 0.5;      // LL: 8-byte stores carry 4 bytes of data
constexpr double kRingLL128Factor = 0.92;  // LL128: 120 of 128 bytes
constexpr double kTreeFactor = 0.92;
constexpr double kTreeLLFactor = 1.0 / 3.8;
constexpr double kTreeLL128FactorOneNode = 7.0 / 9.0;
constexpr double kTreeLL128FactorMultiNode = 120.0 / 128.0;
constexpr double kPatFactor = 0.75;
constexpr double kCollNetDirectHopperFactor = 0.85;
constexpr double kCollNetInterFactor = 0.9;
constexpr double kCollNetArityLatency_us = 0.4;  // CollNetDirect: serialisation per local GPU

// NCCL_NET_OVERHEAD default by CPU vendor, µs; Simple pays it three times.
constexpr double kNetOverheadIntel_us = 1.0;
constexpr double kNetOverheadAmd_us = 2.0;
constexpr double kNetOverheadSimpleFactor = 3.0;

// ncclTopoGetAlgoTime: tree correction by log2(bytes / 64), 64 B .. 256 MiB.
constexpr int kTreeCorrectionSizes = 23;
constexpr double kTreeCorrection[kNcclProtocolCount][kTreeCorrectionSizes] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9},
};
// Multi-node ring Simple all_reduce: latency x1.4 (sm80+, 1.9 before) once each channel and rank
// moves at least 64 bytes ("plateau effect of ring").
constexpr uint64_t kRingPlateauMinBytes = 64;
constexpr double kRingPlateauFactor = 1.4;
constexpr double kRingPlateauFactorVolta = 1.9;

// Limits (src/include/device.h).
constexpr int kMaxChannels = 64;                      // MAXCHANNELS
constexpr int kMaxDirectLocalRanks = 8;               // NCCL_MAX_DIRECT_ARITY + 1
constexpr int kMaxNvlsArity = 32;                     // NCCL_MAX_NVLS_ARITY
constexpr int kSearchMaxChannels = kMaxChannels / 2;  // ringGraph->maxChannels

// =============================================================================================
// NCCL's topology inputs (src/graph/topo.h, search.cc) and our model of its search.
// =============================================================================================

// NVLink bandwidth per link NCCL assumes: SM70/SM80 20.0, SM90 20.6, SM100 40.1 GB/s. H100: 18 links
// x 20.6 = 370.8 GB/s (NCCL logs "NVL[370.8]"); A100: 12 x 20.0 = 240.
constexpr double kNcclNvLinkPerLink_GBps[4] = {20.0, 20.0, 20.6, 40.1};
// NCCL's PCIe model is width x speed / 80: Gen5 x16 = 48 GB/s, Gen4 x16 = 24, i.e. 3/4 of the raw
// rate our presets carry (64, 32).
constexpr double kNcclPcieFraction = 0.75;

// Speeds (GB/s per channel) the search tries, highest first.
constexpr double kSpeedsIntra[] = {40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0};
constexpr double kSpeedsInter[] = {48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0,
                                   7.0,  6.0,  5.0,  4.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr double kSpeedsIntraSm90[] = {60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0};
constexpr double kSpeedsInterSm90[] = {48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                                       15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr double kSpeedsIntraSm100[] = {90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0};
constexpr double kSpeedsInterSm100[] = {96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0,
                                        17.5, 15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
// The search stops lowering the speed once the next one is below 0.49x the best found.
constexpr double kSearchSpeedRatioStop = 0.49;
// ncclTopoDupChannels: doubles the channels (halving their speed) when a channel is at least this fast...
constexpr double kDupMinSpeed_GBps = 25.0;
// ...except on sm90+ with a channel slower than this and more than this many channels.
constexpr double kDupSm90MinSpeed_GBps = 50.0;
constexpr int kDupSm90MaxChannels = 4;
constexpr double kEpsilon = 1e-9;
// Runtime channel counts (enqueue.cc topoGetAlgoInfo, transport/nvls.cc, device.h): NVLS and NVLS
// Tree always run NVLS_NCHANNELS_SM90 channels; ring and tree shed channels for small messages by
// threads x threshold bytes per channel: NCCL_{LL,LL128,SIMPLE}_THREAD_THRESHOLD (8, 8, 64; LL x
// nranks on rings) and NCCL_SIMPLE_MAX_NTHREADS / NCCL_LL128_MAX_NTHREADS (512, 640).
constexpr int kNvlsChannelsSm90 = 16;
constexpr uint64_t kThreads = 512;
constexpr uint64_t kLL128Threads = 640;
constexpr uint64_t kLLThreadThreshold = 8;
constexpr uint64_t kLL128ThreadThreshold = 8;
constexpr uint64_t kSimpleThreadThreshold = 64;

std::span<const double> speeds(GpuArch arch, bool inter) {
  switch (arch) {
    case GpuArch::kVolta:
    case GpuArch::kAmpere:
      return inter ? std::span<const double>(kSpeedsInter) : std::span<const double>(kSpeedsIntra);
    case GpuArch::kHopper:
      return inter ? std::span<const double>(kSpeedsInterSm90) : std::span<const double>(kSpeedsIntraSm90);
    case GpuArch::kBlackwell:
      return inter ? std::span<const double>(kSpeedsInterSm100) : std::span<const double>(kSpeedsIntraSm100);
  }
  return kSpeedsIntra;
}

// What the search sees of the cluster, in NCCL's units.
struct SearchInput {
  GpuArch arch;
  int nodes;
  int gpus;            // per node
  int nics;            // per node
  double nvlink_GBps;  // per GPU, NCCL's model (0 without NVLink)
  double pcie_GBps;    // GPU <-> NIC, NCCL's model
  double nic_GBps;
};

int floor_channels(double capacity, double speed) { return static_cast<int>(std::floor(capacity / speed + kEpsilon)); }

// Ring (and tree) graph. Per speed s, highest first, as many channels as the links carry: inside a
// node every channel crosses each GPU's NVLink once each way; across nodes each channel also
// leaves and enters through one NIC (one channel per s of NIC and PCIe bandwidth). Keep the
// best channels x s (the first one on ties), stop as soon as it covers the GPU's bandwidth or the
// next speed falls below 0.49x the best, then duplicate channels as ncclTopoDupChannels does.
NcclGraph search_ring(const SearchInput& in) {
  const bool inter = in.nodes > 1;
  const std::span<const double> speed = speeds(in.arch, inter);
  const double gpu_total = in.gpus > 1 && in.nvlink_GBps > 0 ? in.nvlink_GBps : in.pcie_GBps;
  const double max_speed = inter ? std::min(in.pcie_GBps, in.nic_GBps) : gpu_total;
  auto channels_at = [&](double s) {
    int channels = kSearchMaxChannels;
    // A channel crosses every GPU's NVLink inside a node, except (across nodes) the GPU where it
    // leaves for the NIC: spread over the node's GPUs that is (g - 1) / g of the channels each.
    const double nvlink_share = inter ? (in.gpus - 1.0) / in.gpus : 1.0;
    if (in.gpus > 1) channels = std::min(channels, floor_channels(gpu_total / nvlink_share, s));
    if (inter) {
      const double per_nic = std::min(in.nic_GBps, in.pcie_GBps * (in.gpus / in.nics));
      channels = std::min(channels, in.nics * floor_channels(per_nic, s));
    }
    return channels;
  };
  size_t index = 0;
  while (index + 1 < speed.size() && speed[index] > max_speed + kEpsilon) ++index;
  NcclGraph best;
  for (; index < speed.size(); ++index) {
    const double s = speed[index];
    const int channels = channels_at(s);
    if (channels >= 1 && channels * s > best.channels * best.bw_intra_GBps + kEpsilon) best = {channels, s, s};
    if (best.channels > 0 && best.channels * best.bw_intra_GBps >= gpu_total - kEpsilon) break;
    if (best.channels > 0 && index + 1 < speed.size() &&
        speed[index + 1] / best.bw_intra_GBps <= kSearchSpeedRatioStop) {
      break;
    }
  }
  if (best.channels == 0) best = {1, speed.back(), speed.back()};
  const bool sm90_plus = in.arch == GpuArch::kHopper || in.arch == GpuArch::kBlackwell;
  const bool duplicate =
      best.bw_intra_GBps >= kDupMinSpeed_GBps &&
      !(sm90_plus && best.bw_intra_GBps < kDupSm90MinSpeed_GBps && best.channels > kDupSm90MaxChannels);
  if (duplicate) {
    const int doubled = std::min(best.channels * 2, kSearchMaxChannels);
    const int divisor = (doubled + best.channels - 1) / best.channels;
    best = {doubled, best.bw_intra_GBps / divisor, best.bw_inter_GBps / divisor};
  }
  return best;
}

// NVLS graph: one channel per head GPU (every GPU on one node; one per NIC across nodes). A head
// moves 2s through its NVLink in its own channel and s in each other one, so the intra speed is the
// highest s with (channels + 1) x s within the GPU's NVLink. The search then raises the inter
// speed while it is below twice the intra speed and (across nodes) a NIC and its PCIe carry it.
NcclGraph search_nvls(const SearchInput& in) {
  const bool inter = in.nodes > 1;
  const std::span<const double> speed = speeds(in.arch, inter);
  const int channels = std::min({inter ? std::min(in.gpus, in.nics) : in.gpus, kMaxNvlsArity});
  size_t index = 0;
  while (index < speed.size() && (channels + 1) * speed[index] > in.nvlink_GBps + kEpsilon) ++index;
  if (index == speed.size()) return {};
  const double intra = speed[index];
  double inter_speed = intra;
  const double net_limit = std::min(in.nic_GBps, in.pcie_GBps);
  while (index > 0 && inter_speed < 2 * intra - kEpsilon) {
    if (inter && speed[index - 1] > net_limit + kEpsilon) break;
    inter_speed = speed[--index];
  }
  return {channels, intra, inter_speed};
}

int log2_floor(uint64_t x) {  // NCCL's log2i: -1 for 0
  int result = -1;
  while (x != 0) {
    x >>= 1;
    ++result;
  }
  return result;
}

// NCCL's function order, the first index of the tables.
enum Function { kBroadcast, kReduce, kAllGather, kReduceScatter, kAllReduce, kFunctionCount };

std::optional<Function> nccl_function(Collective collective) {
  switch (collective) {
    case Collective::kBroadcast:
      return kBroadcast;
    case Collective::kReduce:
      return kReduce;
    case Collective::kAllGather:
      return kAllGather;
    case Collective::kReduceScatter:
      return kReduceScatter;
    case Collective::kAllReduce:
      return kAllReduce;
    case Collective::kAllToAll:
    case Collective::kSendRecv:
      return std::nullopt;
  }
  return std::nullopt;
}

constexpr std::array kAlgorithms = {NcclAlgorithm::kTree,         NcclAlgorithm::kRing, NcclAlgorithm::kCollNetDirect,
                                    NcclAlgorithm::kCollNetChain, NcclAlgorithm::kNvls, NcclAlgorithm::kNvlsTree,
                                    NcclAlgorithm::kPat};

}  // namespace

std::span<const NcclAlgorithm> all_nccl_algorithms() { return kAlgorithms; }

std::string_view name(NcclAlgorithm algorithm) {
  switch (algorithm) {
    case NcclAlgorithm::kTree:
      return "tree";
    case NcclAlgorithm::kRing:
      return "ring";
    case NcclAlgorithm::kCollNetDirect:
      return "collnet_direct";
    case NcclAlgorithm::kCollNetChain:
      return "collnet_chain";
    case NcclAlgorithm::kNvls:
      return "nvls";
    case NcclAlgorithm::kNvlsTree:
      return "nvls_tree";
    case NcclAlgorithm::kPat:
      return "pat";
  }
  return "?";
}

NcclCostModel::NcclCostModel(const ClusterSpec& spec) {
  validate(spec);
  const int gpus = spec.gpus_per_node;
  nodes_ = spec.nodes;
  nranks_ = spec.nodes * gpus;
  arch_ = spec.gpu.arch;
  const int arch = static_cast<int>(arch_);
  const bool nvlink = gpus > 1 && spec.gpu.nvlinks > 0;
  nvlink_ = nvlink;
  const SearchInput input{arch_,
                          nodes_,
                          gpus,
                          spec.nics_per_node,
                          nvlink ? spec.gpu.nvlinks * kNcclNvLinkPerLink_GBps[arch] : 0.0,
                          spec.pcie_Bps / 1e9 * kNcclPcieFraction,
                          spec.nic_Bps / 1e9};
  const bool hopper_plus = arch_ == GpuArch::kHopper || arch_ == GpuArch::kBlackwell;
  nvls_support_ = spec.gpu.nvls && hopper_plus && nvlink;
  collnet_support_ = spec.sharp && nodes_ > 1;
  pat_support_ = gpus == 1;  // ncclPatEnable: one GPU per node (and sm60+, host networking)

  // Graphs. Tree and PAT share the tree graph, which NCCL searches with the ring's channel count;
  // we give it the ring's speeds. CollNet Chain is searched like the ring; CollNet Direct has one
  // channel per head GPU that owns a NIC, at the ring's network speed.
  const NcclGraph ring = search_ring(input);
  graphs_[kRing] = ring;
  graphs_[kTree] = ring;
  graphs_[kPat] = ring;
  if (nvls_support_) graphs_[kNvls] = graphs_[kNvlsTree] = search_nvls(input);
  if (collnet_support_) {
    graphs_[kCollNetChain] = ring;
    graphs_[kCollNetDirect] = {std::min({gpus, spec.nics_per_node, kMaxDirectLocalRanks}), ring.bw_inter_GBps,
                               ring.bw_inter_GBps};
  }
  comm_channels_ = std::min(kMaxChannels, 2 * std::min(graphs_[kRing].channels, graphs_[kTree].channels));
  if (nranks_ == 1) return;

  const int n = nranks_;
  const double ppn = gpus;
  const int node_index = nodes_ <= 2 ? nodes_ - 1 : 2;
  const int ll_row = nodes_ == 1 ? arch : (spec.cpu == CpuVendor::kAmd ? 1 : 0);
  const double ll_max_bw = kLlMaxBw_GBps[ll_row][node_index];
  const double per_channel_max_tree = kPerChannelMaxTree_GBps[arch][node_index];
  const double per_channel_max_ring_ll128 = kPerChannelMaxRingLL128_GBps[arch][node_index];
  const double per_channel_max_tree_ll128 = kPerChannelMaxTreeLL128_GBps[arch][node_index];
  const double per_channel_max_nvls_tree = kPerChannelMaxNvlsTree_GBps[arch][node_index];
  const Hardware intra_hw = nvlink ? kHwNvLink : kHwPci;
  const Hardware ring_hw = nodes_ == 1 ? intra_hw : kHwNet;
  const double net_overhead_us = spec.cpu == CpuVendor::kAmd ? kNetOverheadAmd_us : kNetOverheadIntel_us;
  const int log2_nodes = log2_floor(static_cast<uint64_t>(nodes_));
  constexpr double kLatencyInter_us = 0;  // graph->latencyInter: 0 unless a net plugin reports one

  for (int f = 0; f < kFunctionCount; ++f) {
    const bool all_reduce = f == kAllReduce;
    const bool gather_scatter = f == kAllGather || f == kReduceScatter;
    const int steps = all_reduce ? 2 * (n - 1) : gather_scatter ? n - 1 : n;
    for (int a = 0; a < kNcclAlgorithmCount; ++a) {
      if ((f == kBroadcast || f == kReduce) && a != kRing) continue;
      if (gather_scatter && a != kPat && a != kRing && a != kNvls && a != kCollNetDirect) continue;
      if (all_reduce && a == kPat) continue;
      const NcclGraph& g = graphs_[a];
      if (g.channels == 0) continue;
      for (int p = 0; p < kNcclProtocolCount; ++p) {
        if ((a == kNvls || a == kNvlsTree) && p != kSimple) continue;
        if (gather_scatter && a == kPat && (p != kSimple || !pat_support_)) continue;
        const bool collnet = a == kCollNetDirect || a == kCollNetChain;
        double bw = nodes_ <= 2 || collnet ? g.bw_intra_GBps : g.bw_inter_GBps;
        if (a == kNvls || a == kNvlsTree) {
          if (g.channels < 2) continue;
          double intra = g.bw_intra_GBps * kNvlsEfficiency[arch] * (g.channels - 1) / g.channels;
          intra *= all_reduce ? 2.0 : (ppn - 1) / ppn;  // all_reduce pipelines the reduce and the broadcast
          const double inter = g.bw_inter_GBps * (nodes_ <= 2 && a == kNvlsTree ? 2 : 1);
          bw =
              std::min({intra, inter, a == kNvlsTree ? per_channel_max_nvls_tree : std::numeric_limits<double>::max()});
        }
        double bus_bw = g.channels * bw;
        if (a == kRing && p == kLL) bus_bw = std::min(ll_max_bw, bus_bw * kRingLLFactor);
        if (a == kRing && p == kLL128)
          bus_bw = std::min(bus_bw * kRingLL128Factor, g.channels * per_channel_max_ring_ll128);
        if (a == kTree && all_reduce) bus_bw = std::min(bus_bw * kTreeFactor, g.channels * per_channel_max_tree);
        if (a == kTree && p == kLL) bus_bw = std::min(bus_bw * kTreeLLFactor, ll_max_bw);
        if (a == kTree && p == kLL128) {
          bus_bw = std::min(bus_bw * (nodes_ == 1 ? kTreeLL128FactorOneNode : kTreeLL128FactorMultiNode),
                            g.channels * per_channel_max_tree_ll128);
        }
        // (NCCL also takes 0.85 when only the simpler TREE pattern was found; we assume the balanced one.)
        if (a == kPat) bus_bw *= kPatFactor;
        if (collnet && p != kSimple) bus_bw = 0;
        if (a == kCollNetDirect && p == kSimple) {
          if (gather_scatter) {
            bus_bw = ppn * std::min(g.bw_intra_GBps, g.bw_inter_GBps * kCollNetInterFactor);
          } else {
            double factor = ppn / g.channels;  // GPUs per NIC head
            factor -= (factor - 1) / 2;
            bus_bw /= factor;
            if (hopper_plus) bus_bw *= kCollNetDirectHopperFactor;
          }
        }
        // Multi-node NVLS / CollNet all_gather and reduce_scatter need a CollNet plugin with
        // iallgather / ireducescatter, which we do not model.
        if ((a == kNvls || a == kCollNetDirect) && p == kSimple && gather_scatter && nodes_ > 1) bus_bw = 0;
        if (!(a != kRing && gather_scatter)) {
          bus_bw *= a == kRing || a == kNvls || a == kNvlsTree ? static_cast<double>(n) / steps : 0.5;
        }
        bandwidth_GBps_[f][a][p] = bus_bw;

        double latency = kBaseLatency_us[a][p];
        double intra_latency = kHwLatency_us[intra_hw][a][p];
        // With one GPU per node every latency is exposed: NCCL uses the tree's network latency.
        double inter_latency = (gpus == 1 ? kHwLatency_us[kHwNet][kTree][p] : kHwLatency_us[kHwNet][a][p]) +
                               kLatencyInter_us + (p == kSimple ? kLatencyInter_us : 0);
        switch (a) {
          case kRing:
            if (f == kBroadcast || f == kReduce) {
              latency += kHwLatency_us[ring_hw][a][p];  // sameChannels graphs: one step's latency
            } else {
              if (nodes_ > 1) {
                intra_latency =
                    std::max(intra_latency, net_overhead_us * (p == kSimple ? kNetOverheadSimpleFactor : 1));
              }
              const int inter_steps = nodes_ == 1 ? 0 : all_reduce ? 2 * (nodes_ - 1) : nodes_ - 1;
              latency += (steps - inter_steps) * intra_latency + inter_steps * inter_latency;
            }
            break;
          case kTree:
            if (all_reduce) latency += 2 * ((gpus - 1) * intra_latency + log2_nodes * inter_latency);
            break;
          case kCollNetDirect:
            latency +=
                2 * (std::min(1, gpus - 1) * intra_latency + (gpus - 1) * kCollNetArityLatency_us) + inter_latency;
            break;
          case kCollNetChain:
            latency += 2 * (gpus - 1) * intra_latency + inter_latency;
            break;
          case kNvls:
            latency = intra_latency + (nodes_ > 1 ? inter_latency : 0);
            break;
          case kNvlsTree:
            latency += intra_latency + 2 * log2_nodes * inter_latency;
            break;
          case kPat:
            if (gather_scatter) latency += log2_nodes * (inter_latency / 3.5) + n * 2.8;
            break;
        }
        latency_us_[f][a][p] = latency;
      }
    }
  }
}

std::string NcclCostModel::unsupported_reason(Collective collective, NcclAlgorithm algorithm,
                                              NcclProtocol protocol) const {
  const std::optional<Function> function = nccl_function(collective);
  if (!function) return fmt::format("NCCL runs {} as point-to-point sends, outside its cost model", name(collective));
  const int f = *function;
  const int a = static_cast<int>(algorithm);
  const int p = static_cast<int>(protocol);
  const bool gather_scatter = f == kAllGather || f == kReduceScatter;
  const int gpus = nranks_ / nodes_;
  if (nranks_ == 1) {
    if (a == kRing && p == kSimple) return "";
    return "a single rank: NCCL only copies (ring/Simple, 0 us)";
  }
  if ((f == kBroadcast || f == kReduce) && a != kRing)
    return fmt::format("NCCL runs {} as a ring only", name(collective));
  if (gather_scatter && a != kPat && a != kRing && a != kNvls && a != kCollNetDirect) {
    return fmt::format("NCCL has no {} {}", name(algorithm), name(collective));
  }
  if (f == kAllReduce && a == kPat) return "PAT covers all_gather and reduce_scatter only";
  if (a == kPat && !pat_support_) return "PAT needs one GPU per node";
  if (a == kCollNetDirect || a == kCollNetChain) {
    if (nodes_ == 1) return "CollNet needs more than one node";
    if (!collnet_support_) return "CollNet needs in-network reduction (SHARP)";
    if (gpus > kMaxDirectLocalRanks) return fmt::format("CollNet takes at most {} GPUs per node", kMaxDirectLocalRanks);
    if (a == kCollNetDirect && !nvlink_) return "CollNet Direct needs NVSwitch";
  }
  if (a == kNvls || a == kNvlsTree) {
    if (!nvls_support_) return "NVLS needs NVSwitch multicast (Hopper or newer, NVLink, 2+ GPUs per node)";
    if (f != kAllReduce && gpus > kMaxNvlsArity)
      return fmt::format("NVLS takes at most {} GPUs per node", kMaxNvlsArity);
    if (graphs_[a].channels < 2) return "NVLS needs at least 2 channels";
  }
  if (a == kNvlsTree && nodes_ == 1) return "NVLS Tree needs more than one node";
  if (a == kNvls && nodes_ > 1 && !collnet_support_) return "NVLS across nodes needs CollNet (SHARP)";
  if ((a == kNvls || a == kCollNetDirect) && gather_scatter && nodes_ > 1) {
    return "across nodes it needs a CollNet plugin with iallgather / ireducescatter";
  }
  if (graphs_[a].channels == 0) return fmt::format("no {} graph", name(algorithm));
  // Protocols last, so that an algorithm NCCL skips altogether gives the same reason for each.
  if ((a == kNvls || a == kNvlsTree || a == kCollNetDirect || a == kCollNetChain || a == kPat) && p != kSimple) {
    return fmt::format("{} runs the Simple protocol only", name(algorithm));
  }
  // LL128 is on by default only where the intra-node path is NVLink (typeIntra <= PATH_NVB).
  if (p == kLL128 && gpus > 1 && !nvlink_) return "LL128 is off without NVLink inside the node";
  if (bandwidth_GBps_[f][a][p] <= 0) return "NCCL's model gives it no bandwidth";
  return "";
}

double NcclCostModel::latency_us(Collective collective, NcclAlgorithm algorithm, NcclProtocol protocol) const {
  const std::optional<Function> f = nccl_function(collective);
  return f ? latency_us_[*f][static_cast<int>(algorithm)][static_cast<int>(protocol)] : 0.0;
}

double NcclCostModel::bandwidth_GBps(Collective collective, NcclAlgorithm algorithm, NcclProtocol protocol) const {
  const std::optional<Function> f = nccl_function(collective);
  if (!f || !unsupported_reason(collective, algorithm, protocol).empty()) return 0.0;
  return bandwidth_GBps_[*f][static_cast<int>(algorithm)][static_cast<int>(protocol)];
}

std::optional<double> NcclCostModel::time_us(Collective collective, uint64_t bytes, NcclAlgorithm algorithm,
                                             NcclProtocol protocol) const {
  if (!unsupported_reason(collective, algorithm, protocol).empty()) return std::nullopt;
  if (nranks_ == 1) return 0.0;  // updateCollCostTable: ring/Simple costs nothing on one rank
  const int f = *nccl_function(collective);
  const int a = static_cast<int>(algorithm);
  const int p = static_cast<int>(protocol);
  double bw = bandwidth_GBps_[f][a][p];
  double latency = latency_us_[f][a][p];
  const int log_size = log2_floor(bytes >> 6);
  if (a == kTree && f == kAllReduce && log_size >= 0 && log_size < kTreeCorrectionSizes) {
    bw *= kTreeCorrection[p][log_size];
  }
  if (a == kRing && p == kSimple && nodes_ > 1 && f == kAllReduce &&
      bytes / (static_cast<uint64_t>(comm_channels_) * static_cast<uint64_t>(nranks_)) >= kRingPlateauMinBytes) {
    latency *= arch_ == GpuArch::kVolta ? kRingPlateauFactorVolta : kRingPlateauFactor;
  }
  return latency + static_cast<double>(bytes) / (1000.0 * bw);
}

int NcclCostModel::runtime_channels(NcclAlgorithm algorithm, NcclProtocol protocol, uint64_t bytes) const {
  const int a = static_cast<int>(algorithm);
  if (a == kNvls || a == kNvlsTree) return kNvlsChannelsSm90;
  if (a != kRing && a != kTree) return std::max(1, graphs_[a].channels);
  const int p = static_cast<int>(protocol);
  const uint64_t threads = p == kLL128 ? kLL128Threads : kThreads;
  uint64_t threshold = p == kLL ? kLLThreadThreshold : p == kLL128 ? kLL128ThreadThreshold : kSimpleThreadThreshold;
  if (a == kRing && p == kLL) threshold *= static_cast<uint64_t>(nranks_);
  int channels = std::max(1, comm_channels_);
  while (channels > 1 && bytes < static_cast<uint64_t>(channels) * threads * threshold) --channels;
  return channels;
}

std::optional<NcclPrediction> NcclCostModel::select(Collective collective, uint64_t bytes) const {
  if (!nccl_function(collective)) return std::nullopt;
  std::optional<NcclPrediction> best;
  for (NcclAlgorithm algorithm : kAlgorithms) {
    for (NcclProtocol protocol : all_nccl_protocols()) {
      const std::optional<double> t = time_us(collective, bytes, algorithm, protocol);
      if (t && (!best || *t < best->time_us)) best = NcclPrediction{algorithm, protocol, *t};
    }
  }
  return best;
}

std::optional<double> nccl_time_us(const ClusterSpec& spec, Collective collective, uint64_t bytes,
                                   NcclAlgorithm algorithm, NcclProtocol protocol) {
  return NcclCostModel(spec).time_us(collective, bytes, algorithm, protocol);
}

std::optional<NcclPrediction> nccl_select(const ClusterSpec& spec, Collective collective, uint64_t bytes) {
  return NcclCostModel(spec).select(collective, bytes);
}

double nccl_hop_latency_us(NcclLinkClass link, NcclAlgorithm algorithm, NcclProtocol protocol) {
  return kHwLatency_us[static_cast<int>(link)][static_cast<int>(algorithm)][static_cast<int>(protocol)];
}

double nccl_base_latency_us(NcclAlgorithm algorithm, NcclProtocol protocol) {
  return kBaseLatency_us[static_cast<int>(algorithm)][static_cast<int>(protocol)];
}

}  // namespace tandem::models
