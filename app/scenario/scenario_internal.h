// The pieces of the scenario loader, shared between scenario.cc (the whole file) and the files that
// read one section each: scenario_cluster.cc, scenario_faults.cc, scenario_collectives.cc,
// scenario_training.cc, scenario_startup.cc. Internal to app/scenario/.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "app/scenario/scenario.h"
#include "app/scenario/scenario_yaml.h"

namespace tandem::app {

// ---- scenario.cc: readers every section uses ----

// `culprit_ranks: [3, 5]` at `node`, sorted (the analysis reports them in ascending order).
std::vector<int> read_rank_list(const Reader& reader, const YAML::Node& node, const std::string& path);
// A variant's name at `node`, which must be one of `variants` (the error lists them).
std::string read_variant_name(const Reader& reader, const YAML::Node& node, const std::string& path,
                              const std::vector<ClusterVariant>& variants);

// ---- scenario_cluster.cc ----

// `cluster`, `allocator` and `variants` of `top`: the base cluster first, named kBaseVariantName,
// then each variant; the command line's `overrides` replace the file's values in every one.
std::vector<ClusterVariant> read_clusters(const Reader& reader, const Mapping& top, const ClusterOverrides& overrides);
// A variant's or layout's name: letters, digits and - _ . + only.
bool valid_variant_name(std::string_view text);

// ---- scenario_faults.cc ----

// `faults` and `fault_seed` of `top` into scenario.faults and scenario.fault_marks; the workload and
// the variants must be read already (a fault's rank must exist on every variant).
void read_faults(const Reader& reader, const Mapping& top, Scenario& scenario);
// `recovery` of `top` (the defaults when absent).
RecoveryPolicy read_recovery(const Reader& reader, const Mapping& top);

// ---- one file per workload type: the workload at `node` and one `expect` entry at `path` ----

// scenario_collectives.cc
Workload read_collective_sweep(const Reader& reader, const YAML::Node& node,
                               const std::vector<ClusterVariant>& variants);
Workload read_collective_loop(const Reader& reader, const YAML::Node& node,
                              const std::vector<ClusterVariant>& variants);
Expectation read_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                             const std::vector<ClusterVariant>& variants, const CollectiveSweep& sweep);
LoopExpectation read_loop_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                                      const CollectiveLoop& loop);

// scenario_training.cc (the workload itself: read_training_workload, scenario_yaml.h)
TrainingExpectation read_training_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                                              const Scenario& scenario, const TrainingWorkload& training);

// scenario_startup.cc
Workload read_startup(const Reader& reader, const YAML::Node& node, const std::vector<ClusterVariant>& variants);
StartupExpectation read_startup_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                                            const Scenario& scenario, const StartupWorkload& startup);

}  // namespace tandem::app
