#include "core/algorithms.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/algorithms/internal.h"
#include "core/error.h"
#include "core/validate.h"

namespace tandem {

// The builders, one file each under core/algorithms/ (the build compiles every file there).
namespace algorithms {
Schedule build_ring(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params,
                    ScheduleForm form);
Schedule build_tree(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params);
Schedule build_recursive_doubling(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params);
Schedule build_halving_doubling(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params);
Schedule build_direct(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params);
Schedule build_hierarchical(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params);
// NCCL's PAT (all_gather, reduce_scatter): one lane, whole blocks; channels and pipeline_chunks do not apply.
Schedule build_pat(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params);
}  // namespace algorithms

namespace {

using C = Collective;

// The registry. Each builder is a pure function from a spec and a layout to an unvalidated
// schedule; build_schedule checks the arguments every builder shares before calling it, so the
// builders check only what is theirs (ring orders, inter-node algorithm).
using Builder = Schedule (*)(const CollectiveSpec&, const RankLayout&, const AlgoParams&, ScheduleForm);

template <Schedule (*build)(const CollectiveSpec&, const RankLayout&, const AlgoParams&)>
Schedule explicit_only(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params, ScheduleForm) {
  return build(spec, layout, params);
}

constexpr std::array kRingCollectives = {C::kAllReduce, C::kReduceScatter, C::kAllGather, C::kBroadcast, C::kReduce};
constexpr std::array kTreeCollectives = {C::kAllReduce};
constexpr std::array kDoublingCollectives = {C::kAllReduce, C::kAllGather, C::kBroadcast, C::kReduce};
constexpr std::array kHalvingCollectives = {C::kAllReduce, C::kReduceScatter};
constexpr std::array kDirectCollectives = {C::kAllReduce, C::kReduceScatter, C::kAllGather, C::kBroadcast,
                                           C::kReduce,    C::kAllToAll,      C::kSendRecv};
constexpr std::array kHierarchicalCollectives = {C::kAllReduce, C::kAllGather};
constexpr std::array kPatCollectives = {C::kAllGather, C::kReduceScatter};

struct Entry {
  AlgorithmInfo info;
  Builder build;
};

// The table: an algorithm is its enum value (core/types.h), its entry here and its builder.
std::span<const Entry> entries() {
  static const auto kEntries = std::to_array<Entry>({
      {{.algorithm = Algorithm::kRing,
        .name = "ring",
        .summary = "NCCL's ring: one ring per channel over the layout's channel rings, pipelined steps",
        .collectives = kRingCollectives,
        .uses_channels = true,
        .uses_pipeline_chunks = true,
        .has_symmetric_form = true},
       algorithms::build_ring},
      {{.algorithm = Algorithm::kTree,
        .name = "tree",
        .summary =
            "NCCL's double binary tree over nodes, a chain inside each node, two mirrored trees per channel pair",
        .collectives = kTreeCollectives,
        .uses_channels = true,
        .uses_pipeline_chunks = true},
       explicit_only<algorithms::build_tree>},
      {{.algorithm = Algorithm::kRecursiveDoubling,
        .name = "recursive_doubling",
        .summary = "recursive doubling (binomial trees for broadcast / reduce): log2(n) latency-bound steps",
        .collectives = kDoublingCollectives,
        .uses_pipeline_chunks = true},
       explicit_only<algorithms::build_recursive_doubling>},
      {{.algorithm = Algorithm::kHalvingDoubling,
        .name = "halving_doubling",
        .summary = "Rabenseifner's recursive halving (reduce_scatter) then doubling (all_gather)",
        .collectives = kHalvingCollectives,
        .uses_pipeline_chunks = true},
       explicit_only<algorithms::build_halving_doubling>},
      {{.algorithm = Algorithm::kDirect,
        .name = "direct",
        .summary = "every rank exchanges with every peer directly (NCCL's p2p all_to_all and send/recv)",
        .collectives = kDirectCollectives},
       explicit_only<algorithms::build_direct>},
      {{.algorithm = Algorithm::kHierarchical,
        .name = "hierarchical",
        .summary = "reduce_scatter inside each node, rings between nodes per local rank, all_gather inside",
        .collectives = kHierarchicalCollectives,
        .uses_channels = true,
        .needs_whole_nodes = true},
       explicit_only<algorithms::build_hierarchical>},
      {{.algorithm = Algorithm::kPat,
        .name = "pat",
        .summary = "NCCL's PAT: log2(n) aggregated binomial-tree steps (NCCL uses it with one GPU per node)",
        .collectives = kPatCollectives},
       explicit_only<algorithms::build_pat>},
  });
  return kEntries;
}

const Entry& entry(Algorithm algorithm) {
  for (const Entry& e : entries()) {
    if (e.info.algorithm == algorithm) return e;
  }
  if (algorithm == Algorithm::kAuto) {
    fail(ErrorCode::kInvalidArgument, "algorithm 'auto' has no schedule of its own (it is resolved per call)");
  }
  fail(ErrorCode::kInvalidArgument, "algorithm #{} is not in the registry (core/algorithms.cc)",
       static_cast<int>(algorithm));
}

// The arguments every builder shares, checked against the entry's limits.
void check_arguments(const AlgorithmInfo& info, const CollectiveSpec& spec, const RankLayout& layout,
                     const AlgoParams& params) {
  const std::string_view algorithm = name(info.algorithm);
  if (spec.nranks < 1) fail(ErrorCode::kInvalidArgument, "{}: need at least 1 rank, got {}", algorithm, spec.nranks);
  if (layout.nranks != spec.nranks) {
    fail(ErrorCode::kInvalidArgument, "{}: layout has {} ranks but the collective has {}", algorithm, layout.nranks,
         spec.nranks);
  }
  if (layout.ranks_per_node < 1) {
    fail(ErrorCode::kInvalidArgument, "{}: ranks_per_node must be at least 1, got {}", algorithm,
         layout.ranks_per_node);
  }
  if (spec.root < 0 || spec.root >= spec.nranks) {
    fail(ErrorCode::kInvalidArgument, "{}: root {} is not a rank of {}", algorithm, spec.root, spec.nranks);
  }
  if (info.uses_channels && (params.channels < 1 || params.channels > kMaxAlgorithmChannels)) {
    fail(ErrorCode::kInvalidArgument, "{}: channels must be in [1, {}], got {}", algorithm, kMaxAlgorithmChannels,
         params.channels);
  }
  if (info.uses_pipeline_chunks && (params.pipeline_chunks < 1 || params.pipeline_chunks > kMaxPipelineChunks)) {
    fail(ErrorCode::kInvalidArgument, "{}: pipeline_chunks must be in [1, {}], got {}", algorithm, kMaxPipelineChunks,
         params.pipeline_chunks);
  }
  if (info.needs_whole_nodes && spec.nranks % layout.ranks_per_node != 0) {
    fail(ErrorCode::kInvalidArgument, "{} needs whole nodes: {} ranks are not a multiple of {} per node", algorithm,
         spec.nranks, layout.ranks_per_node);
  }
}

// Above this many ranks, build_schedule estimates the explicit form's op count before building it,
// so that a schedule too large for memory is refused at once rather than after minutes of building
// (the builders' own running count, core/schedule.h require_schedule_memory, is the guarantee).
constexpr int kEstimateOpsAboveRanks = 4096;

// The op count of `e`'s schedule for `spec` on `layout`, extrapolated from three probes of the same
// shape: 16, 32 and 64 nodes (or, with fewer than 128 nodes, 64, 128 and 256 ranks a node). Ops per
// rank grow linearly in the ranks (rings, direct all_to_all, PAT) or with their logarithm (trees,
// recursive doubling): the model whose doubling steps match the probes' is extended. Empty when a
// probe cannot be built.
std::optional<int64_t> estimated_ops(const Entry& e, const CollectiveSpec& spec, const RankLayout& layout,
                                     const AlgoParams& params, ScheduleForm form) {
  const int per_node = layout.ranks_per_node;
  const int nodes = layout.node_count();
  if (spec.nranks % per_node != 0) return std::nullopt;
  const bool scale_nodes = nodes >= 128;
  if (!scale_nodes && per_node < 512) return std::nullopt;
  double per_rank[3] = {};
  double ranks[3] = {};
  for (int i = 0; i < 3; ++i) {
    const int probe_nodes = scale_nodes ? 16 << i : nodes;
    const int probe_per_node = scale_nodes ? per_node : 64 << i;
    RankLayout probe = layout.rings.empty() ? RankLayout::nodes(probe_nodes, probe_per_node)
                                            : RankLayout::nccl(probe_nodes, probe_per_node);
    CollectiveSpec probe_spec = spec;
    probe_spec.nranks = probe.nranks;
    probe_spec.root = 0;
    try {
      check_arguments(e.info, probe_spec, probe, params);
      ranks[i] = probe.nranks;
      per_rank[i] = static_cast<double>(e.build(probe_spec, probe, params, form).op_count()) / ranks[i];
    } catch (const Error&) {
      return std::nullopt;
    }
  }
  const double step1 = per_rank[1] - per_rank[0], step2 = per_rank[2] - per_rank[1];
  const double n = spec.nranks;
  const bool linear = step2 > 1.5 * step1 && step2 > 0;  // a doubling doubles the growth: ops per rank ~ n
  const double ops_per_rank = linear ? per_rank[2] + step2 / (ranks[2] - ranks[1]) * (n - ranks[2])
                                     : per_rank[2] + std::max(0.0, step2) * std::log2(n / ranks[2]);
  return static_cast<int64_t>(std::min(ops_per_rank * n, 9e18));
}

}  // namespace

std::string_view name(Algorithm a) { return a == Algorithm::kAuto ? "auto" : entry(a).info.name; }

std::span<const Algorithm> all_algorithms() {
  static const std::vector<Algorithm> kAlgorithms = [] {
    std::vector<Algorithm> all;
    for (const Entry& e : entries()) all.push_back(e.info.algorithm);
    return all;
  }();
  return kAlgorithms;
}

Algorithm parse_algorithm(std::string_view text) {
  if (text == "auto") return Algorithm::kAuto;
  std::string accepted;
  for (const Entry& e : entries()) {
    if (e.info.name == text) return e.info.algorithm;
    accepted += fmt::format("{}, ", e.info.name);
  }
  fail(ErrorCode::kInvalidArgument, "unknown algorithm '{}' (expected one of: {}auto)", text, accepted);
}

bool AlgorithmInfo::implements(Collective collective) const {
  return std::find(collectives.begin(), collectives.end(), collective) != collectives.end();
}

std::span<const AlgorithmInfo> algorithm_registry() {
  static const std::vector<AlgorithmInfo> kInfos = [] {
    std::vector<AlgorithmInfo> infos;
    for (const Entry& e : entries()) infos.push_back(e.info);
    return infos;
  }();
  return kInfos;
}

const AlgorithmInfo& algorithm_info(Algorithm algorithm) {
  const size_t index = static_cast<size_t>(&entry(algorithm) - entries().data());
  return algorithm_registry()[index];
}

bool implements(Algorithm algorithm, Collective collective) {
  return algorithm == Algorithm::kAuto || algorithm_info(algorithm).implements(collective);
}

std::string unsupported_message(Algorithm algorithm, Collective collective) {
  std::string choices;
  for (const AlgorithmInfo& info : algorithm_registry()) {
    if (info.implements(collective)) choices += (choices.empty() ? "" : ", ") + std::string(name(info.algorithm));
  }
  return fmt::format("algorithm '{}' does not implement {}; algorithms for {}: {}", name(algorithm), name(collective),
                     name(collective), choices);
}

Schedule build_schedule(const CollectiveSpec& spec, const RankLayout& layout, Algorithm algorithm,
                        const AlgoParams& params, ScheduleForm form) {
  if (algorithm == Algorithm::kAuto) algorithm = default_algorithm(spec, layout);
  const Entry& e = entry(algorithm);
  if (!e.info.implements(spec.collective)) {
    fail(ErrorCode::kUnsupported, "{}", unsupported_message(algorithm, spec.collective));
  }
  check_arguments(e.info, spec, layout, params);
  const bool explicit_form = form == ScheduleForm::kExplicit || !e.info.has_symmetric_form;
  if (explicit_form && spec.nranks > kEstimateOpsAboveRanks) {
    if (const std::optional<int64_t> ops = estimated_ops(e, spec, layout, params, form)) {
      require_schedule_memory(*ops, spec.collective, algorithm, spec.nranks, /*estimated=*/true);
    }
  }
  return e.build(spec, layout, params, form);
}

std::optional<int64_t> estimate_schedule_ops(const CollectiveSpec& spec, const RankLayout& layout, Algorithm algorithm,
                                             const AlgoParams& params) {
  if (algorithm == Algorithm::kAuto) algorithm = default_algorithm(spec, layout);
  const Entry& e = entry(algorithm);
  if (!e.info.implements(spec.collective)) return std::nullopt;
  return estimated_ops(e, spec, layout, params, ScheduleForm::kExplicit);
}

Schedule build_checked_schedule(const CollectiveSpec& spec, const RankLayout& layout, Algorithm algorithm,
                                const AlgoParams& params, ScheduleForm form) {
  Schedule schedule = build_schedule(spec, layout, algorithm, params, form);
  validate(schedule);
  symbolic_check(schedule);
  return schedule;
}

Algorithm default_algorithm(const CollectiveSpec& spec, const RankLayout& layout) {
  // Bytes per rank below which a message is latency-bound on any fabric tandem models (NCCL's
  // tuner moves from LL to Simple protocols around this size on H100 systems).
  constexpr int64_t kLatencyBoundBytes = 64 * 1024;
  const int64_t bytes = spec.count * static_cast<int64_t>(size_bytes(spec.dtype));
  const bool small = bytes <= kLatencyBoundBytes;
  switch (spec.collective) {
    case Collective::kAllToAll:
    case Collective::kSendRecv:
      return Algorithm::kDirect;
    case Collective::kAllReduce:
      if (small) return Algorithm::kRecursiveDoubling;
      if (layout.ranks_per_node > 1 && layout.node_count() > 1 && layout.nranks % layout.ranks_per_node == 0) {
        return Algorithm::kHierarchical;
      }
      return Algorithm::kRing;
    case Collective::kBroadcast:
    case Collective::kReduce:
      return small ? Algorithm::kRecursiveDoubling : Algorithm::kRing;
    case Collective::kReduceScatter:
      return small ? Algorithm::kHalvingDoubling : Algorithm::kRing;
    case Collective::kAllGather:
      return small ? Algorithm::kRecursiveDoubling : Algorithm::kRing;
  }
  return Algorithm::kRing;
}

}  // namespace tandem
