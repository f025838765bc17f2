// The scenario loader: the shipped scenarios load, and every kind of mistake is rejected with a
// message that starts with file:line:column (table-driven from small YAML strings).
#include "app/scenario/scenario.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"

namespace tandem::app {
namespace {

// A valid scenario every rejection case below starts from (line numbers matter: keep it first).
constexpr const char* kMinimal = R"(tandem_scenario: 1
name: t
cluster: {preset: dgx-h100, nodes: 2}
workload:
  type: collective-sweep
  collectives: [all_reduce]
  sizes: [1M]
)";

TEST(Scenario, ShippedWhatIfLoads) {
  const Scenario scenario = load_scenario("scenarios/what-if-64xh100.yaml");
  EXPECT_EQ(scenario.name, "what-if-64xh100");
  EXPECT_EQ(scenario.file, "scenarios/what-if-64xh100.yaml");
  EXPECT_EQ(scenario.backend, ScenarioBackend::kSim);
  EXPECT_EQ(scenario.network, NetworkChoice::kFluid);
  ASSERT_EQ(scenario.variants.size(), 3u);
  EXPECT_EQ(scenario.variants[0].name, "base");
  EXPECT_EQ(scenario.variants[1].name, "800G");
  EXPECT_EQ(scenario.variants[2].name, "800G-gen6");
  for (const ClusterVariant& variant : scenario.variants) {
    EXPECT_EQ(variant.cluster.preset, "dgx-h100");
    EXPECT_EQ(variant.cluster.nodes, 8);  // the variant keeps the base's overrides
    EXPECT_EQ(variant.cluster.gpus_per_node, 8);
    EXPECT_EQ(variant.cluster.fabric, models::Fabric::kRailOptimized);
  }
  EXPECT_DOUBLE_EQ(scenario.variants[0].cluster.nic_Bps, 50e9);
  EXPECT_DOUBLE_EQ(scenario.variants[1].cluster.nic_Bps, 100e9);
  EXPECT_DOUBLE_EQ(scenario.variants[1].cluster.pcie_Bps, scenario.variants[0].cluster.pcie_Bps);
  EXPECT_DOUBLE_EQ(scenario.variants[2].cluster.nic_Bps, 100e9);
  EXPECT_DOUBLE_EQ(scenario.variants[2].cluster.pcie_Bps, 128e9);

  const auto& sweep = std::get<CollectiveSweep>(scenario.workload);
  EXPECT_EQ(sweep.collectives,
            (std::vector<Collective>{Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter}));
  ASSERT_EQ(sweep.sizes_bytes.size(), 32u);  // 8 B = 2^3 .. 16 GiB = 2^34
  EXPECT_EQ(sweep.sizes_bytes.front(), 8);
  EXPECT_EQ(sweep.sizes_bytes.back(), int64_t{16} << 30);
  EXPECT_EQ(sweep.algorithms, (std::vector<std::string>{"ring", "tree", "nvls", "auto"}));
  EXPECT_EQ(sweep.dtype, DataType::kBF16);
  EXPECT_EQ(sweep.op, ReduceOp::kSum);
  EXPECT_TRUE(scenario.outputs.json);
  EXPECT_TRUE(scenario.outputs.csv);
  EXPECT_FALSE(scenario.expectations.empty());
}

TEST(Scenario, ShippedSmokeLoads) {
  const Scenario scenario = load_scenario("scenarios/smoke-8xh100.yaml");
  EXPECT_EQ(scenario.name, "smoke-8xh100");
  ASSERT_EQ(scenario.variants.size(), 1u);
  EXPECT_EQ(scenario.variants[0].cluster.nodes, 1);
  const auto& sweep = std::get<CollectiveSweep>(scenario.workload);
  EXPECT_EQ(sweep.sizes_bytes, (std::vector<int64_t>{1 << 10, 1 << 15, 1 << 20, 1 << 25, 1 << 30}));
  EXPECT_FALSE(scenario.expectations.empty());
}

// The command line's overrides replace the file's cluster values in every variant, and the file's
// keys and the flags are one table: the same values give the same cluster either way.
TEST(Scenario, CommandLineOverridesReplaceTheClusterInEveryVariant) {
  const std::string yaml = R"(tandem_scenario: 1
name: overrides
cluster: {preset: dgx-h100, nodes: 2, nic_gbps: 400}
variants:
  - {name: 800G, cluster: {nic_gbps: 800}}
  - {name: four, cluster: {nodes: 4}}
workload: {type: collective-sweep, collectives: [all_reduce], sizes: [1M], algorithms: [ring]}
)";
  ClusterOverrides overrides;
  overrides.values.push_back({find_cluster_key("nodes"), "16", "--nodes"});
  overrides.values.push_back({find_cluster_key("gpus_per_node"), "4", "--gpus-per-node"});
  const Scenario scenario = parse_scenario(yaml, "t.yaml", overrides);
  ASSERT_EQ(scenario.variants.size(), 3u);
  for (const ClusterVariant& variant : scenario.variants) {
    EXPECT_EQ(variant.cluster.nodes, 16) << variant.name;
    EXPECT_EQ(variant.cluster.gpus_per_node, 4) << variant.name;
    EXPECT_EQ(variant.cluster.nics_per_node, 4) << variant.name;  // one NIC per GPU kept
  }
  EXPECT_DOUBLE_EQ(scenario.variants[1].cluster.nic_Bps, 800e9 / 8);  // the variant's own value stays
  EXPECT_DOUBLE_EQ(scenario.variants[0].cluster.nic_Bps, 400e9 / 8);

  // The same values from the file: the same cluster.
  const Scenario from_file = parse_scenario(
      "tandem_scenario: 1\nname: f\ncluster: {preset: dgx-h100, nodes: 16, gpus_per_node: 4}\n"
      "workload: {type: collective-sweep, collectives: [all_reduce], sizes: [1M], algorithms: [ring]}\n",
      "f.yaml");
  const models::ClusterSpec& a = from_file.variants[0].cluster;
  const models::ClusterSpec& b = scenario.variants[0].cluster;
  EXPECT_EQ(a.nodes, b.nodes);
  EXPECT_EQ(a.gpus_per_node, b.gpus_per_node);
  EXPECT_EQ(a.nics_per_node, b.nics_per_node);

  // A preset override starts every variant from that preset.
  ClusterOverrides h200;
  h200.preset = "dgx-h200";
  EXPECT_EQ(parse_scenario(yaml, "t.yaml", h200).variants[2].cluster.preset, "dgx-h200");
}

TEST(Scenario, ClusterKeysAreOneTable) {
  // Every key a cluster mapping takes is a flag, and the range is the table's on both sides.
  ASSERT_NE(find_cluster_key("nvlink_GBps"), nullptr);
  EXPECT_EQ(find_cluster_key("nvlink_GBps")->flag, "--nvlink-GBps");
  EXPECT_EQ(find_cluster_key("gpu_memory_GB")->flag, "--gpu-memory-GB");
  EXPECT_EQ(find_cluster_key("nodes")->max, models::kMaxNodes);
  EXPECT_EQ(find_cluster_key("preset"), nullptr);  // the preset is --cluster / preset:, not a value
  models::ClusterSpec spec = models::cluster_preset("dgx-h100");
  EXPECT_THROW(set_cluster_value(spec, {find_cluster_key("gpu_power_w"), "900", "--gpu-power-w"}), Error);  // TDP 700
  set_cluster_value(spec, {find_cluster_key("nvls"), "false", "--nvls"});
  EXPECT_FALSE(spec.gpu.nvls);
  try {
    resolve_cluster_spec("dgx-h100", {{find_cluster_key("fabric"), "single-switch", "--fabric"},
                                      {find_cluster_key("oversubscription"), "1", "--oversubscription"}});
    ADD_FAILURE() << "a single switch took --oversubscription";
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()), "--oversubscription does not apply to a single-switch fabric");
  }
}

TEST(Scenario, DefaultsAndOverrides) {
  const Scenario scenario = parse_scenario(R"(tandem_scenario: 1
name: defaults
cluster:
  preset: dgx-h100
  nodes: 4
  fabric: fat-tree
  nic_gbps: 200
  nics_per_node: 4
  spines: 2
  oversubscription: 2
  nvlink_GBps: 300
  pcie_GBps: 32
  nvls: false
  nic_latency_us: 1.5
variants:
  - name: big
    cluster: {nodes: 16, preset: dgx-h200}
workload:
  type: collective-sweep
  collectives: [all-reduce, allgather]
  sizes: {min: 1K, max: 4K}
)",
                                           "d.yaml");
  EXPECT_EQ(scenario.description, "");
  EXPECT_EQ(scenario.backend, ScenarioBackend::kSim);
  EXPECT_EQ(scenario.network, NetworkChoice::kFluid);
  ASSERT_EQ(scenario.variants.size(), 2u);
  const models::ClusterSpec& base = scenario.variants[0].cluster;
  EXPECT_EQ(base.nodes, 4);
  EXPECT_EQ(base.fabric, models::Fabric::kFatTree);
  EXPECT_DOUBLE_EQ(base.nic_Bps, 25e9);
  EXPECT_EQ(base.nics_per_node, 4);
  EXPECT_EQ(base.spines, 2);
  EXPECT_DOUBLE_EQ(base.oversubscription, 2);
  EXPECT_DOUBLE_EQ(base.nvlink_Bps, 300e9);
  EXPECT_DOUBLE_EQ(base.pcie_Bps, 32e9);
  EXPECT_FALSE(base.gpu.nvls);
  EXPECT_DOUBLE_EQ(base.nic_latency_s, 1.5e-6);
  // The variant: another preset, every base override kept unless replaced.
  const models::ClusterSpec& big = scenario.variants[1].cluster;
  EXPECT_EQ(big.preset, "dgx-h200");
  EXPECT_EQ(big.nodes, 16);
  EXPECT_DOUBLE_EQ(big.nic_Bps, 25e9);
  EXPECT_EQ(big.fabric, models::Fabric::kFatTree);

  const auto& sweep = std::get<CollectiveSweep>(scenario.workload);
  EXPECT_EQ(sweep.sizes_bytes, (std::vector<int64_t>{1024, 2048, 4096}));  // factor 2 by default
  EXPECT_EQ(sweep.algorithms, std::vector<std::string>{"auto"});
  EXPECT_EQ(sweep.dtype, DataType::kBF16);
  EXPECT_EQ(sweep.op, ReduceOp::kSum);
  EXPECT_EQ(sweep.gpus_per_node, 0);
  EXPECT_TRUE(scenario.outputs.json);
  EXPECT_TRUE(scenario.outputs.csv);
  EXPECT_TRUE(scenario.expectations.empty());
}

TEST(Scenario, SizesByStepAndExpectations) {
  const Scenario scenario = parse_scenario(R"(tandem_scenario: 1
name: step
cluster: {preset: hgx-a100}
backend: host
network: ideal
workload:
  type: collective-sweep
  collectives: [reduce_scatter]
  sizes: {min: 0, max: 3K, step: 1K}
  algorithms: [ring, halving-doubling, auto]
  dtype: float
  op: max
  gpus_per_node: 4
outputs: {json: false, csv: true}
expect:
  - {collective: reduce_scatter, algorithm: halving_doubling, size: 2K, time_us: {min: 1, max: 2e3}}
  - {variant: base, collective: reduce_scatter, algorithm: auto, size: 3072, busbw_GBps: {min: 0.5}, backend: sim}
)",
                                           "s.yaml");
  EXPECT_EQ(scenario.backend, ScenarioBackend::kHost);
  EXPECT_EQ(scenario.network, NetworkChoice::kIdeal);
  const auto& sweep = std::get<CollectiveSweep>(scenario.workload);
  EXPECT_EQ(sweep.sizes_bytes, (std::vector<int64_t>{0, 1024, 2048, 3072}));
  EXPECT_EQ(sweep.algorithms, (std::vector<std::string>{"ring", "halving_doubling", "auto"}));
  EXPECT_EQ(sweep.dtype, DataType::kF32);
  EXPECT_EQ(sweep.op, ReduceOp::kMax);
  EXPECT_EQ(sweep.gpus_per_node, 4);
  EXPECT_FALSE(scenario.outputs.json);
  const std::vector<Expectation> expectations = scenario.expectations_of<Expectation>();
  ASSERT_EQ(expectations.size(), 2u);
  ASSERT_EQ(scenario.expectations.size(), 2u);  // nothing of another kind
  const Expectation& first = expectations[0];
  EXPECT_EQ(first.variant, "base");
  EXPECT_EQ(first.algorithm, "halving_doubling");
  EXPECT_EQ(first.size_bytes, 2048);
  EXPECT_EQ(first.time_us.min, 1.0);
  EXPECT_EQ(first.time_us.max, 2000.0);
  EXPECT_FALSE(first.busbw_GBps.set());
  EXPECT_FALSE(first.backend.has_value());
  EXPECT_EQ(first.mark.line, 16);
  EXPECT_EQ(first.mark.column, 5);
  const Expectation& second = expectations[1];
  EXPECT_EQ(second.busbw_GBps.min, 0.5);
  EXPECT_FALSE(second.busbw_GBps.max.has_value());
  EXPECT_EQ(second.backend, ScenarioBackend::kSim);
}

struct Rejection {
  const char* what;
  std::string yaml;
  std::string message;  // a part of the error, "t.yaml:L:C: ..." included
};

// kMinimal with `line` appended (a new top-level key or section).
std::string minimal_plus(const std::string& lines) { return std::string(kMinimal) + lines; }

// kMinimal with its workload replaced (lines 4.. of the file).
std::string with_workload(const std::string& workload) {
  return "tandem_scenario: 1\nname: t\ncluster: {preset: dgx-h100, nodes: 2}\n" + workload;
}

std::string with_cluster(const std::string& cluster) {
  return "tandem_scenario: 1\nname: t\n" + cluster +
         "workload: {type: collective-sweep, collectives: [all_reduce], sizes: [1M]}\n";
}

const std::string kSweep =
    "workload: {type: collective-sweep, collectives: [all_reduce, all_gather], sizes: [1K, 1M], "
    "algorithms: [ring, tree]}\n";

std::string with_expect(const std::string& entry) {
  return "tandem_scenario: 1\nname: t\ncluster: {preset: dgx-h100}\n" + kSweep + "expect:\n  - " + entry + "\n";
}

std::vector<Rejection> rejections() {
  return {
      // The file as a whole.
      {"empty file", "", "t.yaml:1:1: the scenario is empty"},
      {"not YAML", "name: [unclosed\n", "t.yaml:2:1: invalid YAML"},
      {"a list at the top", "- 1\n- 2\n", "t.yaml:1:1: a scenario is a mapping that starts with 'tandem_scenario: 1'"},
      {"no version", "name: t\n", "t.yaml:1:1: missing required key 'tandem_scenario'"},
      {"future version", "tandem_scenario: 2\nname: t\n",
       "t.yaml:1:18: unsupported scenario format version '2' (this tandem reads version 1)"},
      {"unknown top-level key", minimal_plus("colour: blue\n"),
       "t.yaml:8:1: unknown key 'colour' in the scenario (expected: tandem_scenario, name, description, cluster, "
       "variants, backend, network, calibration, workload, faults, fault_seed, recovery, outputs, allocator, expect)"},
      {"duplicate key", minimal_plus("name: again\n"), "t.yaml:8:1: duplicate key 'name' in the scenario"},
      {"missing name", "tandem_scenario: 1\ncluster: {preset: dgx-h100}\n",
       "t.yaml:1:1: missing required key 'name' in the scenario"},
      {"name as a list", "tandem_scenario: 1\nname: [a]\n", "t.yaml:2:7: name must be a single value (got a list)"},
      {"unknown backend", minimal_plus("backend: gpu\n"),
       "t.yaml:8:10: backend: unknown backend 'gpu' (expected: sim, host, cuda, nccl)"},
      {"unknown network", minimal_plus("network: fast\n"),
       "t.yaml:8:10: network: unknown network model 'fast' (expected: fluid, packet, ideal)"},
      {"outputs not boolean", minimal_plus("outputs: {json: yes}\n"),
       "t.yaml:8:17: outputs.json must be true or false (got 'yes')"},
      {"unknown output", minimal_plus("outputs: {trace: true}\n"),
       "t.yaml:8:11: unknown key 'trace' in outputs (expected: json, csv, dumps, dump_format, fr_buffer_size)"},

      // cluster
      {"missing cluster", "tandem_scenario: 1\nname: t\n",
       "t.yaml:1:1: missing required key 'cluster' in the scenario"},
      {"missing preset", with_cluster("cluster: {nodes: 2}\n"),
       "t.yaml:3:10: missing required key 'preset' in cluster"},
      {"unknown preset", with_cluster("cluster: {preset: dgx-h900}\n"),
       "t.yaml:3:19: cluster.preset: unknown cluster preset 'dgx-h900'"},
      {"unknown cluster key", with_cluster("cluster:\n  preset: dgx-h100\n  nic_gbs: 800\n"),
       "t.yaml:5:3: unknown key 'nic_gbs' in cluster (did you mean 'nic_gbps'?) (expected: preset, nodes, gpus_per_node, fabric, nic_gbps"},
      {"zero nodes", with_cluster("cluster: {preset: dgx-h100, nodes: 0}\n"),
       "t.yaml:3:36: cluster.nodes must be an integer from 1 to 16384 (got '0')"},
      {"too many nodes", with_cluster("cluster: {preset: dgx-h100, nodes: 20000}\n"),
       "t.yaml:3:36: cluster.nodes must be an integer from 1 to 16384 (got '20000')"},
      {"fractional nodes", with_cluster("cluster: {preset: dgx-h100, nodes: 2.5}\n"),
       "cluster.nodes must be an integer from 1 to 16384 (got '2.5')"},
      {"too many GPUs",
       with_cluster("cluster: {preset: dgx-h100, nodes: 4096, gpus_per_node: 16, nics_per_node: 16}\n"),
       "t.yaml:3:10: cluster has 4096 nodes x 16 GPUs = 65536 GPUs, above the limit of 32768"},
      {"negative NIC speed", with_cluster("cluster: {preset: dgx-h100, nic_gbps: -400}\n"),
       "t.yaml:3:39: cluster.nic_gbps must be a number >= 0.01 and at most 100000 (got '-400')"},
      {"NIC speed not a number", with_cluster("cluster: {preset: dgx-h100, nic_gbps: 400G}\n"),
       "cluster.nic_gbps must be a number >= 0.01 and at most 100000 (got '400G')"},
      {"unknown fabric", with_cluster("cluster: {preset: dgx-h100, fabric: torus}\n"),
       "t.yaml:3:37: cluster.fabric: unknown fabric 'torus'"},
      {"NICs that do not divide the GPUs", with_cluster("cluster: {preset: dgx-h100, nics_per_node: 3}\n"),
       "t.yaml:3:10: cluster: cluster.nics_per_node 3 must divide the 8 GPUs per node"},

      // variants
      {"variant without name", minimal_plus("variants:\n  - cluster: {nodes: 4}\n"),
       "t.yaml:9:5: missing required key 'name' in variants[0]"},
      {"variant named base", minimal_plus("variants:\n  - {name: base, cluster: {nodes: 4}}\n"),
       "t.yaml:9:12: variants[0].name: a variant named 'base' is the scenario's own cluster"},
      {"variant twice",
       minimal_plus("variants:\n  - {name: a, cluster: {nodes: 4}}\n  - {name: a, cluster: {nodes: 8}}\n"),
       "t.yaml:10:12: variants[1].name: a variant named 'a' comes earlier"},
      {"variant name with a comma", minimal_plus("variants:\n  - {name: 'a,b', cluster: {nodes: 4}}\n"),
       "t.yaml:9:12: variants[0].name 'a,b' may hold only letters, digits and - _ . +"},
      {"unknown key in a variant's cluster", minimal_plus("variants:\n  - name: 800G\n    cluster: {nic_gbs: 800}\n"),
       "t.yaml:10:15: unknown key 'nic_gbs' in variants[0].cluster"},
      {"bad value in a variant", minimal_plus("variants:\n  - name: 800G\n    cluster: {nic_gbps: 0}\n"),
       "t.yaml:10:25: variants[0].cluster.nic_gbps must be a number >= 0.01"},
      {"variants empty", minimal_plus("variants: []\n"), "t.yaml:8:11: variants must not be empty"},
      {"variant with neither cluster nor allocator", minimal_plus("variants:\n  - {name: es}\n"),
       "t.yaml:9:5: variants[0] needs cluster, allocator or both"},

      // allocator: PyTorch's PYTORCH_CUDA_ALLOC_CONF, checked by the allocator model's parser
      {"allocator below the minimum split", minimal_plus("allocator: 'max_split_size_mb:10'\n"),
       "allocator: alloc conf 'max_split_size_mb:10': max_split_size_mb must be at least 20"},
      {"allocator with an unknown key", minimal_plus("allocator: 'expandable:True'\n"),
       "allocator: alloc conf 'expandable:True'"},
      {"variant allocator not a boolean",
       minimal_plus("variants:\n  - {name: es, allocator: 'expandable_segments:Maybe'}\n"),
       "variants[0].allocator: alloc conf 'expandable_segments:Maybe'"},
      {"allocator not a string", minimal_plus("allocator: [expandable_segments]\n"), "allocator"},

      // workload
      {"missing workload", "tandem_scenario: 1\nname: t\ncluster: {preset: dgx-h100}\n",
       "t.yaml:1:1: missing required key 'workload' in the scenario"},
      {"missing type", with_workload("workload:\n  collectives: [all_reduce]\n"),
       "t.yaml:5:3: missing required key 'type' in workload"},
      {"unknown workload type", with_workload("workload:\n  type: inference\n"),
       "t.yaml:5:9: unknown workload type 'inference' (expected: collective-sweep, collective-loop, training, "
       "startup, claims)"},
      {"training without a model", with_workload("workload:\n  type: training\n"),
       "t.yaml:5:3: missing required key 'model' in workload"},
      {"unknown workload key",
       with_workload("workload:\n  type: collective-sweep\n  colectives: [all_reduce]\n  sizes: [1M]\n"),
       "t.yaml:6:3: unknown key 'colectives' in workload (did you mean 'collectives'?) (expected: type, collectives, sizes, algorithms, dtype, op, "
       "gpus_per_node)"},
      {"missing collectives", with_workload("workload:\n  type: collective-sweep\n  sizes: [1M]\n"),
       "t.yaml:5:3: missing required key 'collectives' in workload"},
      {"missing sizes", with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n"),
       "t.yaml:5:3: missing required key 'sizes' in workload"},
      {"unknown collective",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce, allreduse]\n  sizes: [1M]\n"),
       "t.yaml:6:29: workload.collectives[1]: unknown collective 'allreduse'"},
      {"collective twice",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce, allreduce]\n  sizes: [1M]\n"),
       "t.yaml:6:29: workload.collectives[1]: 'allreduce' is listed twice"},
      {"collectives empty", with_workload("workload:\n  type: collective-sweep\n  collectives: []\n  sizes: [1M]\n"),
       "t.yaml:6:16: workload.collectives must not be empty"},
      {"unknown algorithm",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: [1M]\n  algorithms: "
                     "[ring, trees]\n"),
       "t.yaml:8:22: workload.algorithms[1]: unknown algorithm 'trees' (expected one of: ring, tree, "
       "recursive_doubling, halving_doubling, direct, hierarchical, pat, nvls, auto)"},
      {"unknown dtype",
       with_workload(
           "workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: [1M]\n  dtype: bf17\n"),
       "t.yaml:8:10: workload.dtype: unknown"},
      {"unknown op",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: [1M]\n  op: mean\n"),
       "t.yaml:8:7: workload.op: unknown"},
      {"negative size",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: [-8]\n"),
       "t.yaml:7:11: workload.sizes[0]: invalid size '-8' for workload.sizes[0]"},
      {"size with a bad unit",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: [1X]\n"),
       "t.yaml:7:11: workload.sizes[0]: invalid size '1X'"},
      {"size above the limit",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: [2048G]\n"),
       "t.yaml:7:11: workload.sizes[0] is 2199023255552 bytes, above the limit of 1099511627776 (1 TiB)"},
      {"size twice",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: [1K, 1024]\n"),
       "t.yaml:7:15: workload.sizes[1]: 1 KiB is listed twice"},
      {"min above max",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: {min: 1G, max: 1M}\n"),
       "t.yaml:7:10: workload.sizes: min (1 GiB) is larger than max (1 MiB)"},
      {"missing max",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: {min: 1K}\n"),
       "t.yaml:7:10: missing required key 'max' in workload.sizes"},
      {"factor and step",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: {min: 1K, max: 1M, "
                     "factor: 2, step: 1K}\n"),
       "t.yaml:7:46: workload.sizes takes either factor or step, not both"},
      {"factor 1",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: {min: 1K, "
                     "max: 1M, factor: 1}\n"),
       "t.yaml:7:37: workload.sizes.factor must be an integer from 2 to 1048576 (got '1')"},
      {"too many sizes",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: {min: 1, max: 1M, "
                     "step: 1}\n"),
       "t.yaml:7:10: workload.sizes from 1 B to 1 MiB has more than 4096 sizes"},
      {"sizes a number",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: 8\n"),
       "t.yaml:7:10: workload.sizes must be a mapping {min, max, factor} or a list of sizes (got '8')"},
      {"more GPUs per node than the cluster",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce]\n  sizes: [1M]\n  "
                     "gpus_per_node: 9\n"),
       "t.yaml:8:18: workload.gpus_per_node is 9, but the cluster of 'base' has 8 GPUs per node"},
      {"too many points",
       with_workload("workload:\n  type: collective-sweep\n  collectives: [all_reduce, all_gather, reduce_scatter]\n  "
                     "sizes: {min: 1, max: 4096, step: 1}\n  algorithms: [ring, direct]\n"),
       "t.yaml:5:3: workload has 3 collectives x 4096 sizes x 2 algorithms = 24576 points, above the limit of 20000"},

      // expect
      {"expect unknown key", with_expect("{collective: all_reduce, algorithm: ring, size: 1M, busbw: {min: 1}}"),
       "t.yaml:6:57: unknown key 'busbw' in expect[0] (expected: variant, collective, algorithm, size, backend, "
       "time_us, algbw_GBps, busbw_GBps)"},
      {"expect without bound", with_expect("{collective: all_reduce, algorithm: ring, size: 1M}"),
       "t.yaml:6:5: expect[0] sets no bound (expected at least one of time_us, algbw_GBps, busbw_GBps)"},
      {"expect missing size", with_expect("{collective: all_reduce, algorithm: ring, busbw_GBps: {min: 1}}"),
       "t.yaml:6:5: missing required key 'size' in expect[0]"},
      {"expect unknown variant",
       with_expect("{variant: 800G, collective: all_reduce, algorithm: ring, size: 1M, busbw_GBps: {min: 1}}"),
       "t.yaml:6:15: expect[0].variant: no variant named '800G' (variants: base)"},
      {"expect collective not swept",
       with_expect("{collective: reduce_scatter, algorithm: ring, size: 1M, busbw_GBps: {min: 1}}"),
       "t.yaml:6:18: expect[0].collective: reduce_scatter is not one of workload.collectives"},
      {"expect algorithm not swept",
       with_expect("{collective: all_reduce, algorithm: auto, size: 1M, time_us: {max: 1}}"),
       "t.yaml:6:41: expect[0].algorithm: auto is not one of workload.algorithms (ring, tree)"},
      {"expect an n/a point", with_expect("{collective: all_gather, algorithm: tree, size: 1M, time_us: {max: 1}}"),
       "t.yaml:6:41: expect[0].algorithm: tree does not implement all_gather, so this point never runs"},
      {"expect a size not swept", with_expect("{collective: all_reduce, algorithm: ring, size: 2M, time_us: {max: 1}}"),
       "t.yaml:6:53: expect[0].size: 2 MiB is not one of the workload's sizes"},
      {"expect min above max",
       with_expect("{collective: all_reduce, algorithm: ring, size: 1M, time_us: {min: 10, max: 1}}"),
       "t.yaml:6:66: expect[0].time_us: min (10) is larger than max (1)"},
      {"expect negative bound", with_expect("{collective: all_reduce, algorithm: ring, size: 1M, time_us: {max: -1}}"),
       "t.yaml:6:72: expect[0].time_us.max must be a number >= 0"},
      {"expect empty bound", with_expect("{collective: all_reduce, algorithm: ring, size: 1M, time_us: {}}"),
       "t.yaml:6:66: expect[0].time_us needs min, max or both"},
      {"expect unknown backend",
       with_expect("{collective: all_reduce, algorithm: ring, size: 1M, time_us: {max: 1}, backend: gpu}"),
       "expect[0].backend: unknown backend 'gpu' (expected: sim, host, cuda, nccl)"},
      {"expect not a list", minimal_plus("expect: {collective: all_reduce}\n"),
       "t.yaml:8:9: expect must be a list (got a mapping)"},
      // A second document was silently ignored; a NUL byte and deep nesting gave yaml-cpp's own words.
      {"second document", minimal_plus("---\nname: other\n"),
       "t.yaml:8:1: a second YAML document: a scenario is one document"},
      // yaml-cpp's LoadAll never returned on a lone ',' (it yields empty documents without end;
      // found by fuzz_scenario_yaml): refused at once.
      {"a lone comma", ",", "t.yaml:1:1: a second YAML document"},
      {"NUL byte", minimal_plus(std::string("description: \"a\0b\"\n", 19)), "t.yaml:8:16: a NUL byte"},
      // Names are printed on terminals: an escape sequence in one could retitle or clear the screen.
      {"control character in a name",
       "tandem_scenario: 1\nname: \"t\\e]0;x\\a\"\n" +
           std::string(kMinimal).substr(std::string(kMinimal).find("cluster:")),
       "t.yaml:2:7: name has a control character (byte 0x1b at position 1)"},
      {"deep nesting", minimal_plus("description: " + std::string(100, '[') + std::string(100, ']') + "\n"),
       "t.yaml:8:78: nested deeper than 64 levels"},
  };
}

TEST(Scenario, RejectsWithFileLineColumn) {
  for (const Rejection& rejection : rejections()) {
    SCOPED_TRACE(rejection.what);
    try {
      parse_scenario(rejection.yaml, "t.yaml");
      ADD_FAILURE() << "accepted:\n" << rejection.yaml;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kFormat);
      const std::string message = error.what();
      EXPECT_NE(message.find(rejection.message), std::string::npos)
          << "message: " << message << "\nexpected to contain: " << rejection.message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
    }
  }
}

constexpr const char* kStartup = R"(tandem_scenario: 1
name: s
cluster: {preset: dgx-h100, nodes: 8}
workload:
  type: startup
  layout: {tp: 8, pp: 2}
  configs:
    - {name: old, store: legacy, init_barriers: true, ranks_per_root: 0, runtime_connect: false, topo_cache: false}
    - {name: new, eager_init: true, oob_net: true}
expect:
  - {config: new, relative_to: old, speedup: {min: 1}}
)";

TEST(Scenario, StartupWorkloadReadsLevers) {
  const Scenario scenario = parse_scenario(kStartup, "t.yaml");
  const auto& startup = std::get<StartupWorkload>(scenario.workload);
  EXPECT_EQ(startup.layout.tp, 8);
  EXPECT_EQ(startup.layout.pp, 2);
  ASSERT_EQ(startup.configs.size(), 2u);
  const sim::StartupLevers& old = startup.configs[0].levers;
  EXPECT_EQ(old.store, sim::StoreBackend::kLegacy);
  EXPECT_TRUE(old.init_barriers);
  EXPECT_EQ(old.ranks_per_root, 0);
  EXPECT_FALSE(old.runtime_connect);
  EXPECT_FALSE(old.topo_cache);
  EXPECT_TRUE(startup.configs[1].levers.eager_init);
  EXPECT_TRUE(startup.configs[1].levers.oob_net);
  ASSERT_EQ(scenario.expectations_of<StartupExpectation>().size(), 1u);
  EXPECT_EQ(scenario.expectations_of<StartupExpectation>()[0].relative_to, "old");
  // Without configs: one set of today's defaults.
  const std::string plain = std::string(kStartup).substr(0, std::string(kStartup).find("  configs:"));
  const Scenario defaults = parse_scenario(plain, "t.yaml");
  const auto& only = std::get<StartupWorkload>(defaults.workload);
  ASSERT_EQ(only.configs.size(), 1u);
  EXPECT_EQ(only.configs[0].levers, sim::StartupLevers{});
}

TEST(Scenario, StartupMistakesAreFileLineColumnErrors) {
  const std::string base(kStartup);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string yaml = base;
    yaml.replace(yaml.find(from), from.size(), to);
    return yaml;
  };
  const std::vector<std::pair<std::string, std::string>> cases{
      {with("store: legacy", "store: redis"), "t.yaml:8:26: workload.configs[0].store: unknown store 'redis'"},
      {with("name: new", "name: old"), "a second config named 'old'"},
      {with("config: new", "config: newer"), "no config named 'newer' (configs: old, new)"},
      {with("relative_to: old, speedup: {min: 1}", "total_s: {}"), "expect[0].total_s"},
      {with("layout: {tp: 8, pp: 2}", "layout: {tp: 8, dp: 2}"), "unknown key 'dp'"},
      {with("type: startup", "type: startup\n  gpus: 12"), "12 GPUs do not fill nodes of 8 GPUs"},
  };
  for (const auto& [yaml, message] : cases) {
    SCOPED_TRACE(message);
    try {
      parse_scenario(yaml, "t.yaml");
      ADD_FAILURE() << "accepted:\n" << yaml;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kFormat);
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
    }
  }
}

TEST(Scenario, AllocatorPerVariantAndDefault) {
  const Scenario scenario =
      parse_scenario(minimal_plus("allocator: 'max_split_size_mb:128'\nvariants:\n  - {name: es, allocator: "
                                  "'expandable_segments:True'}\n  - {name: big, cluster: {nodes: 4}}\n"),
                     "t.yaml");
  ASSERT_EQ(scenario.variants.size(), 3u);
  EXPECT_EQ(scenario.variants[0].alloc_conf, "max_split_size_mb:128");
  EXPECT_EQ(scenario.variants[0].allocator.max_split_size_bytes, 128 * models::kMiB);
  // A variant's allocator replaces the scenario's; its cluster is the base's.
  EXPECT_TRUE(scenario.variants[1].allocator.expandable_segments);
  EXPECT_EQ(scenario.variants[1].allocator.max_split_size_bytes, models::kNoMaxSplitSize);
  EXPECT_EQ(scenario.variants[1].cluster.nodes, scenario.variants[0].cluster.nodes);
  // A variant without one keeps the scenario's.
  EXPECT_EQ(scenario.variants[2].allocator, scenario.variants[0].allocator);
  EXPECT_EQ(scenario.variants[2].cluster.nodes, 4);
}

TEST(Scenario, MinimalIsValid) { EXPECT_NO_THROW(parse_scenario(kMinimal, "t.yaml")); }

// Brackets in comments are no nesting: 100 comments with an unclosed '[' still load.
TEST(Scenario, BracketsInCommentsAreNotNesting) {
  std::string yaml = kMinimal;
  for (int i = 0; i < 100; ++i) yaml += "# a range [0, 1)\n";
  EXPECT_NO_THROW(parse_scenario(yaml, "t.yaml"));
}

// The collective-loop workload with faults and recovery: what loads, and what is refused where.
const std::string kLoop = with_workload(
    "workload: {type: collective-loop, collective: all_reduce, size: 1M, algorithm: ring, iterations: 4}\n");

TEST(Scenario, LoopWithFaultsAndRecovery) {
  const Scenario s =
      parse_scenario(kLoop +
                         "faults:\n"
                         "  - {kind: link_down, link: n0-nic7-uplink, at_collective: 1, recover_after_us: 500}\n"
                         "  - {kind: rank_hang, rank: 5, at_collective: 2}\n"
                         "  - {kind: desync, rank: 1, issue: {dtype: f16}}\n"
                         "fault_seed: 9\n"
                         "recovery: {retry_max: 2, backoff_us: 100, watchdog_ms: 50, action: shrink}\n"
                         "outputs: {dumps: true, dump_format: json, fr_buffer_size: 10}\n"
                         "expect:\n  - {iteration: 1, outcome: completed_after_retry}\n"
                         "  - {culprit_ranks: [5]}\n",
                     "t.yaml");
  const auto& loop = std::get<CollectiveLoop>(s.workload);
  EXPECT_EQ(loop.iterations, 4);
  ASSERT_EQ(s.faults.faults.size(), 3u);
  EXPECT_EQ(s.faults.seed, 9u);
  EXPECT_EQ(s.faults.faults[0].kind, FaultKind::kLinkDown);
  EXPECT_DOUBLE_EQ(*s.faults.faults[0].recover_after_s, 500e-6);
  EXPECT_EQ(s.faults.faults[1].rank, 5);
  EXPECT_EQ(*s.faults.faults[2].desync_dtype, DataType::kF16);
  EXPECT_EQ(s.recovery.retry_max, 2);
  EXPECT_DOUBLE_EQ(s.recovery.watchdog_s, 0.05);
  EXPECT_EQ(s.recovery.action, RecoveryAction::kShrink);
  EXPECT_TRUE(s.outputs.dumps);
  EXPECT_EQ(*s.outputs.dump_format, FrFormat::kJson);
  const std::vector<LoopExpectation> loop_expect = s.expectations_of<LoopExpectation>();
  ASSERT_EQ(loop_expect.size(), 2u);
  EXPECT_EQ(*loop_expect[0].outcome, Outcome::kCompletedAfterRetry);
  EXPECT_EQ(*loop_expect[1].culprit_ranks, std::vector<int>{5});
}

TEST(Scenario, FaultMistakesAreFileLineColumnErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {kLoop + "faults:\n  - {kind: link_flap, link: x}\n",
       "t.yaml:6:12: faults[0].kind: unknown fault kind 'link_flap'"},
      {kLoop + "faults:\n  - {kind: link_down, link: n0-nic9-uplink}\n",
       "t.yaml:6:29: faults[0].link: the cluster of 'base' has no link named 'n0-nic9-uplink'"},
      {kLoop + "faults:\n  - {kind: rank_hang, rank: 16}\n",
       "t.yaml:6:29: faults[0].rank must be an integer from 0 to 15"},
      {kLoop + "faults:\n  - {kind: rank_hang, rank: 1, factor: 2}\n",
       "faults[0].factor: a rank_hang fault takes no 'factor'"},
      {kLoop + "faults:\n  - {kind: desync, rank: 1}\n", "missing required key 'issue' in faults[0]"},
      {kLoop + "faults:\n  - {kind: straggler, rank: 1, factor: 0.5}\n", "faults[0].factor must be a number > 1"},
      {kLoop + "recovery: {action: restart}\n", "recovery.action: unknown recovery action 'restart'"},
      {kLoop + "expect:\n  - {iteration: 9, outcome: completed}\n",
       "expect[0].iteration must be an integer from 0 to 3"},
      {kLoop + "expect:\n  - {outcome: finished}\n", "unknown outcome 'finished'"},
      {minimal_plus("faults:\n  - {kind: rank_hang, rank: 1}\n"), "faults act on a sequence of collectives"},
  };
  for (const auto& [text, expected] : cases) {
    try {
      parse_scenario(text, "t.yaml");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kFormat);
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what() << "\nexpected: " << expected;
    }
  }
}

TEST(Scenario, UnreadableFileIsAnIoError) {
  try {
    load_scenario("scenarios/does-not-exist.yaml");
    FAIL() << "loaded a missing file";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kIo);
    EXPECT_EQ(std::string(error.what()),
              "cannot read scenario 'scenarios/does-not-exist.yaml': No such file or directory");
  }
}

TEST(Scenario, AlgorithmApplies) {
  EXPECT_TRUE(algorithm_applies("ring", Collective::kAllGather));
  EXPECT_TRUE(algorithm_applies("tree", Collective::kAllReduce));
  EXPECT_FALSE(algorithm_applies("tree", Collective::kAllGather));
  EXPECT_FALSE(algorithm_applies("tree", Collective::kReduceScatter));
  EXPECT_TRUE(algorithm_applies("nvls", Collective::kAllReduce));
  EXPECT_FALSE(algorithm_applies("nvls", Collective::kAllGather));
  EXPECT_TRUE(algorithm_applies("auto", Collective::kAllToAll));
  EXPECT_FALSE(algorithm_applies("ring", Collective::kAllToAll));
  EXPECT_EQ(not_applicable_reason("nvls", Collective::kReduceScatter), "nvls does not implement reduce_scatter");
}

TEST(Scenario, FormatSize) {
  EXPECT_EQ(format_size(0), "0 B");
  EXPECT_EQ(format_size(8), "8 B");
  EXPECT_EQ(format_size(1000), "1000 B");
  EXPECT_EQ(format_size(1024), "1 KiB");
  EXPECT_EQ(format_size(1536), "1536 B");
  EXPECT_EQ(format_size(3 << 20), "3 MiB");
  EXPECT_EQ(format_size(int64_t{16} << 30), "16 GiB");
  EXPECT_EQ(format_size(int64_t{1} << 40), "1 TiB");
  EXPECT_EQ(format_size((int64_t{1} << 30) + 1024), "1048577 KiB");
}

TEST(Scenario, NetworkModels) {
  EXPECT_EQ(network_model(NetworkChoice::kFluid).fidelity, sim::Fidelity::kFluid);
  EXPECT_EQ(network_model(NetworkChoice::kPacket).fidelity, sim::Fidelity::kPacket);
  EXPECT_EQ(network_model(NetworkChoice::kIdeal).nvlink_efficiency, 1.0);
  EXPECT_FALSE(network_model(NetworkChoice::kIdeal).protocol_effects);
}

}  // namespace
}  // namespace tandem::app
