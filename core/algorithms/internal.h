// Builders of the individual algorithms (registered in core/algorithms.cc, which is the only
// caller). Each is a pure function from a spec and a layout to an unvalidated schedule. The
// registry's build_schedule has already checked what every builder shares (rank counts, root,
// channels and pipeline chunks in range, whole nodes where the entry needs them, a collective the
// entry lists); a builder checks only arguments of its own.
#pragma once

#include "core/builder.h"
#include "core/schedule.h"

namespace tandem::algorithms {

Schedule build_ring(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params,
                    ScheduleForm form = ScheduleForm::kExplicit);
Schedule build_tree(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params);
Schedule build_recursive_doubling(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params);
Schedule build_halving_doubling(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params);
Schedule build_direct(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params);
Schedule build_hierarchical(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params);
// NCCL's PAT (all_gather, reduce_scatter): one lane, whole blocks; channels and pipeline_chunks do not apply.
Schedule build_pat(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params);

// A range of chunk slots (shorthand used by every builder).
inline SlotRange slots(BufferKind buffer, uint32_t first, uint32_t count = 1) { return {buffer, first, count}; }

}  // namespace tandem::algorithms
