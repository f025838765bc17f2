#include "core/algorithms.h"

#include <string>

#include "core/algorithms/internal.h"
#include "core/error.h"
#include "core/validate.h"

namespace tandem {

bool supports(Algorithm algorithm, Collective collective) {
  using C = Collective;
  switch (algorithm) {
    case Algorithm::kRing:
      return collective == C::kAllReduce || collective == C::kReduceScatter || collective == C::kAllGather ||
             collective == C::kBroadcast || collective == C::kReduce;
    case Algorithm::kTree: return collective == C::kAllReduce;
    case Algorithm::kRecursiveDoubling:
      return collective == C::kAllReduce || collective == C::kAllGather || collective == C::kBroadcast ||
             collective == C::kReduce;
    case Algorithm::kHalvingDoubling: return collective == C::kAllReduce || collective == C::kReduceScatter;
    case Algorithm::kDirect: return true;
    case Algorithm::kHierarchical: return collective == C::kAllReduce || collective == C::kAllGather;
    case Algorithm::kPat: return collective == C::kAllGather || collective == C::kReduceScatter;
    case Algorithm::kAuto: return true;
  }
  return false;
}

std::string unsupported_message(Algorithm algorithm, Collective collective) {
  std::string choices;
  for (Algorithm a : all_algorithms()) {
    if (supports(a, collective)) choices += (choices.empty() ? "" : ", ") + std::string(name(a));
  }
  return fmt::format("algorithm '{}' does not implement {}; algorithms for {}: {}", name(algorithm), name(collective),
                     name(collective), choices);
}

Schedule build_schedule(const CollectiveSpec& spec, const RankLayout& layout, Algorithm algorithm,
                        const AlgoParams& params, ScheduleForm form) {
  if (spec.nranks < 1) fail(ErrorCode::kInvalidArgument, "need at least 1 rank, got {}", spec.nranks);
  if (layout.nranks != spec.nranks) {
    fail(ErrorCode::kInvalidArgument, "layout has {} ranks but the collective has {}", layout.nranks, spec.nranks);
  }
  if (spec.root < 0 || spec.root >= spec.nranks) {
    fail(ErrorCode::kInvalidArgument, "root {} out of range [0, {})", spec.root, spec.nranks);
  }
  if (algorithm == Algorithm::kAuto) algorithm = default_algorithm(spec, layout);
  if (!supports(algorithm, spec.collective)) fail(ErrorCode::kUnsupported, "{}", unsupported_message(algorithm, spec.collective));
  switch (algorithm) {
    case Algorithm::kRing: return algorithms::build_ring(spec, layout, params, form);
    case Algorithm::kTree: return algorithms::build_tree(spec, layout, params);
    case Algorithm::kRecursiveDoubling: return algorithms::build_recursive_doubling(spec, layout, params);
    case Algorithm::kHalvingDoubling: return algorithms::build_halving_doubling(spec, layout, params);
    case Algorithm::kDirect: return algorithms::build_direct(spec, layout, params);
    case Algorithm::kHierarchical: return algorithms::build_hierarchical(spec, layout, params);
    case Algorithm::kPat: return algorithms::build_pat(spec, layout, params);
    case Algorithm::kAuto: break;
  }
  fail(ErrorCode::kUnsupported, "no builder for algorithm '{}'", name(algorithm));
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
    case Collective::kSendRecv: return Algorithm::kDirect;
    case Collective::kAllReduce:
      if (small) return Algorithm::kRecursiveDoubling;
      if (layout.ranks_per_node > 1 && layout.node_count() > 1 && layout.nranks % layout.ranks_per_node == 0) {
        return Algorithm::kHierarchical;
      }
      return Algorithm::kRing;
    case Collective::kBroadcast:
    case Collective::kReduce: return small ? Algorithm::kRecursiveDoubling : Algorithm::kRing;
    case Collective::kReduceScatter: return small ? Algorithm::kHalvingDoubling : Algorithm::kRing;
    case Collective::kAllGather: return small ? Algorithm::kRecursiveDoubling : Algorithm::kRing;
  }
  return Algorithm::kRing;
}

}  // namespace tandem
