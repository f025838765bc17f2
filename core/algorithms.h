// The algorithm registry: one entry per algorithm saying which collectives it builds and what it
// needs of its arguments, and the one entry point that builds, validates and symbolically checks a
// schedule. The registry (core/algorithms.cc) is the only place that says what an algorithm
// implements: the command line, the scenario loader, the simulator's tuner and the test sweeps
// all ask it.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/schedule.h"

namespace tandem {

// Bounds every builder shares, checked once by build_schedule. NCCL's MAXCHANNELS
// (src/include/device.h) bounds AlgoParams::channels; a pipeline of more than 1,024 chunks is a
// caller's mistake (each chunk is a few ops per rank and lane), not a useful pipeline.
inline constexpr int kMaxAlgorithmChannels = 64;
inline constexpr int kMaxPipelineChunks = 1024;

struct AlgorithmInfo {
  Algorithm algorithm;
  std::string_view name;                    // its spelling on the command line and in files (name(Algorithm))
  std::string_view summary;                 // one line: what it does and where it comes from
  std::span<const Collective> collectives;  // the collectives it builds
  bool uses_channels = false;               // AlgoParams::channels: parallel rings / tree pairs
  bool uses_pipeline_chunks = false;        // AlgoParams::pipeline_chunks
  bool needs_whole_nodes = false;           // nranks a multiple of ranks_per_node
  bool has_symmetric_form = false;          // ScheduleForm::kSymmetric gives a rank-symmetric schedule

  bool implements(Collective collective) const;
};

// Every algorithm that builds schedules, in all_algorithms() order (kAuto is not one).
std::span<const AlgorithmInfo> algorithm_registry();
// The entry of `algorithm`; throws Error(kInvalidArgument) for kAuto.
const AlgorithmInfo& algorithm_info(Algorithm algorithm);

// Whether `algorithm` builds `collective` (kAuto builds every collective).
bool implements(Algorithm algorithm, Collective collective);

// "algorithm 'ring' does not implement all_to_all; algorithms for all_to_all: direct" (for error
// messages).
std::string unsupported_message(Algorithm algorithm, Collective collective);

// Builds the schedule of `algorithm` for `spec` on `layout`. Throws Error(kUnsupported) for a pair
// the registry does not list and Error(kInvalidArgument) for arguments outside the entry's limits
// (rank counts, root, channels, pipeline chunks, whole nodes). Parameters an algorithm does not
// use are ignored. Does not validate.
// `form` asks for the rank-symmetric form where the algorithm has one (see Symmetry).
Schedule build_schedule(const CollectiveSpec& spec, const RankLayout& layout, Algorithm algorithm,
                        const AlgoParams& params = {}, ScheduleForm form = ScheduleForm::kExplicit);

// The explicit form's op count of `algorithm`'s schedule for `spec` on `layout` (kAuto resolved),
// extrapolated from three small probes of the same shape, without building it. Empty where the
// layout is too small to probe (under 512 ranks a node and 128 nodes: build it, it is cheap) or a
// probe cannot be built. For refusing a run up front (the host backend's kMaxHostOpsPerRun).
std::optional<int64_t> estimate_schedule_ops(const CollectiveSpec& spec, const RankLayout& layout, Algorithm algorithm,
                                             const AlgoParams& params = {});

// build_schedule + validate + symbolic_check: what every caller that runs a schedule uses.
Schedule build_checked_schedule(const CollectiveSpec& spec, const RankLayout& layout, Algorithm algorithm,
                                const AlgoParams& params = {}, ScheduleForm form = ScheduleForm::kExplicit);

// NCCL's double binary tree over n members (graph/trees.cc ncclGetBtree / ncclGetDtree): the
// parent of member r in tree 0 or tree 1 (-1 for the root). The tree algorithm runs it over nodes;
// the simulator's NVLS Tree model runs it over each rail's heads.
int nccl_tree_parent(int n, int r, int tree);

// The default algorithm for a collective when none is given and no cost model is at hand:
// latency-bound sizes take logarithmic algorithms, bandwidth-bound sizes take rings.
Algorithm default_algorithm(const CollectiveSpec& spec, const RankLayout& layout);

}  // namespace tandem
