// The algorithm registry: which algorithm builds which collective, and the one entry point that
// builds, validates and symbolically checks a schedule.
#pragma once

#include <string>

#include "core/schedule.h"

namespace tandem {

bool supports(Algorithm algorithm, Collective collective);

// "ring does not implement all_to_all; algorithms for all_to_all: direct" (for error messages).
std::string unsupported_message(Algorithm algorithm, Collective collective);

// Builds the schedule of `algorithm` for `spec` on `layout`. Throws Error(kUnsupported) for an
// unsupported pair and Error(kInvalidArgument) for bad parameters. Does not validate.
// `form` asks for the rank-symmetric form where the algorithm has one (see Symmetry).
Schedule build_schedule(const CollectiveSpec& spec, const RankLayout& layout, Algorithm algorithm,
                        const AlgoParams& params = {}, ScheduleForm form = ScheduleForm::kExplicit);

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
