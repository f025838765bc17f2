// The sections of tandem's YAML files that scenarios and plan sweeps share (clusters, training
// workloads, bounds, start-up levers and layouts, claims), read with app/common/yaml_reader.h's
// strict reader. Internal to app/.
#pragma once

#include <string>
#include <vector>

#include "app/common/yaml_reader.h"
#include "app/scenario/scenario.h"

namespace tandem::app {

// Sections that scenarios and plan sweeps share.

// A cluster mapping (preset + overrides) at `node`, resolved and validated (scenario_cluster.cc).
models::ClusterSpec read_cluster_spec(const Reader& reader, const YAML::Node& node, const std::string& path);
// `workload: {type: training, ...}` at `node` (scenario_training.cc).
TrainingWorkload read_training_workload(const Reader& reader, const YAML::Node& node, const std::string& path);
// {min, max} at `node` (scenario.cc).
Bound read_bound(const Reader& reader, const YAML::Node& node, const std::string& path);

// Defined in scenario_startup.cc: a start-up workload's levers and layout.
// The start-up lever keys of `m` (store, eager_init, ranks_per_root, runtime_connect, oob_net,
// init_barriers, topo_cache) into `levers`; keys absent keep their values.
void read_startup_levers(const Reader& reader, const Mapping& m, sim::StartupLevers& levers);
// A start-up layout mapping {tp, cp, ep, pp} at `node`; its groups must fit each variant's job of
// `gpus` GPUs (0: the variant's whole cluster), or the error names the file, line and variant.
models::ParallelLayout read_startup_layout(const Reader& reader, const YAML::Node& node, const std::string& path,
                                           const std::vector<ClusterVariant>& variants, int gpus);

// Defined in claims.cc: `workload: {type: claims}` and its `expect` entries.
Workload read_claims(const Reader& reader, const YAML::Node& node, const std::vector<ClusterVariant>& variants);
ClaimExpectation read_claim_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                                        const ClaimsWorkload& claims);

}  // namespace tandem::app
