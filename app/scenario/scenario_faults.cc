// Reading a scenario's `faults`, `fault_seed` and `recovery`: each fault takes only the keys its
// kind uses and must strike something every variant has; a collective-loop's faults trigger at an
// iteration, a time, an op or by chance, a training step's at a collective of one group.
#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "app/scenario/scenario_internal.h"
#include "app/scenario/training_rehearsal.h"
#include "core/error.h"

namespace tandem::app {
namespace {

// The keys each section accepts, in the order docs/scenarios.md lists them.
constexpr std::array<std::string_view, 13> kFaultKeys{
    "kind",          "rank",       "link",  "node",        "nic",   "factor", "recover_after_us",
    "at_collective", "at_time_us", "at_op", "probability", "issue", "group"};
constexpr std::array<std::string_view, 3> kIssueKeys{"collective", "count", "dtype"};
constexpr std::array<std::string_view, 5> kRecoveryKeys{"retry_max", "backoff_us", "watchdog_ms", "action", "verify"};

// The fewest ranks any variant runs the workload on: a fault's rank must exist on every variant.
int fewest_ranks(const Scenario& scenario) {
  const auto* loop = std::get_if<CollectiveLoop>(&scenario.workload);
  int fewest = std::numeric_limits<int>::max();
  for (const ClusterVariant& v : scenario.variants) {
    const int per_node = loop != nullptr && loop->gpus_per_node > 0 ? loop->gpus_per_node : v.cluster.gpus_per_node;
    fewest = std::min(fewest, v.cluster.nodes * per_node);
  }
  return fewest;
}

void check_fault_target(const Reader& reader, const YAML::Node& node, const Mapping& mapping, Fault& fault,
                        const std::vector<ClusterVariant>& variants, int fewest) {
  const bool rank_fault = fault.kind == FaultKind::kRankCrash || fault.kind == FaultKind::kRankHang ||
                          fault.kind == FaultKind::kStraggler || fault.kind == FaultKind::kTransient ||
                          fault.kind == FaultKind::kDesync || fault.kind == FaultKind::kCorrupt;
  if (rank_fault) {
    const YAML::Node& rank = mapping.require("rank");
    fault.rank = static_cast<int>(reader.integer(rank, mapping.path("rank"), 0, fewest - 1));
  }
  if (fault.kind == FaultKind::kLinkDown || fault.kind == FaultKind::kLinkDegrade) {
    const YAML::Node& link = mapping.require("link");
    fault.link = reader.text(link, mapping.path("link"));
    for (const ClusterVariant& v : variants) {
      if (!models::build_cluster(v.cluster).find_link(fault.link)) {
        reader.fail_at(link, "{}: the cluster of '{}' has no link named '{}' (tandem topo --format text lists them)",
                       mapping.path("link"), v.name, fault.link);
      }
    }
  }
  if (fault.kind == FaultKind::kNicDown) {
    int nodes = std::numeric_limits<int>::max();
    int nics = std::numeric_limits<int>::max();
    for (const ClusterVariant& v : variants) {
      nodes = std::min(nodes, v.cluster.nodes);
      nics = std::min(nics, v.cluster.nics_per_node);
    }
    fault.node = static_cast<int>(reader.integer(mapping.require("node"), mapping.path("node"), 0, nodes - 1));
    fault.nic = static_cast<int>(reader.integer(mapping.require("nic"), mapping.path("nic"), 0, nics - 1));
  }
  if (fault.kind == FaultKind::kLinkDegrade) {
    fault.factor = reader.number(mapping.require("factor"), mapping.path("factor"), 0, 1, true);
    if (fault.factor >= 1)
      reader.fail_at(node, "{}: a degraded link runs below full speed (factor < 1)", mapping.where());
  }
  if (fault.kind == FaultKind::kStraggler) {
    fault.factor = reader.number(mapping.require("factor"), mapping.path("factor"), 1, 1000, true);
  }
}

// `loop`: the collective loop the faults act on; none: a training step's (Fault::group).
Fault read_fault(const Reader& reader, const YAML::Node& node, const std::string& path, const Scenario& scenario,
                 const CollectiveLoop* loop) {
  Mapping mapping(reader, node, path, kFaultKeys);
  Fault fault;
  const YAML::Node& kind = mapping.require("kind");
  const std::string kind_text = reader.scalar(kind, mapping.path("kind"));
  fault.kind = reader.at(kind, mapping.path("kind"), [&] { return parse_fault_kind(kind_text); });
  // Only the keys a kind uses: a stray key is a typo or a misunderstanding.
  auto allowed = [&](std::string_view key, bool ok) {
    if (const YAML::Node* value = mapping.find(key); value != nullptr && !ok) {
      reader.fail_at(*value, "{}: a {} fault takes no '{}'", mapping.path(key), name(fault.kind), key);
    }
  };
  const bool link_fault = fault.is_link_fault();
  allowed("link", fault.kind == FaultKind::kLinkDown || fault.kind == FaultKind::kLinkDegrade);
  allowed("node", fault.kind == FaultKind::kNicDown);
  allowed("nic", fault.kind == FaultKind::kNicDown);
  allowed("rank", !link_fault);
  allowed("factor", fault.kind == FaultKind::kLinkDegrade || fault.kind == FaultKind::kStraggler);
  allowed("recover_after_us", fault.kind == FaultKind::kLinkDown || fault.kind == FaultKind::kNicDown);
  allowed("issue", fault.kind == FaultKind::kDesync);
  allowed("at_op", fault.kind == FaultKind::kTransient || fault.kind == FaultKind::kCorrupt);
  allowed("group", loop == nullptr);
  if (loop == nullptr) {
    // A training step: the fault strikes a rank at its k-th collective in one communicator kind.
    if (!rehearsed_in_training(fault.kind)) {
      reader.fail_at(kind, "{}: a {} fault is not rehearsed in a training step ({} are)", mapping.path("kind"),
                     name(fault.kind), kRehearsedInTraining);
    }
    for (std::string_view key : {"at_time_us", "probability"}) {
      if (const YAML::Node* value = mapping.find(key)) {
        reader.fail_at(*value, "{}: a training step's fault strikes at a collective (group, at_collective)",
                       mapping.path(key));
      }
    }
    fault.group = reader.text(mapping.require("group"), mapping.path("group"));
    mapping.require("at_collective");
  }
  check_fault_target(reader, node, mapping, fault, scenario.variants, fewest_ranks(scenario));

  if (const YAML::Node* value = mapping.find("recover_after_us")) {
    fault.recover_after_s = reader.number(*value, mapping.path("recover_after_us"), 0, 1e12, true) * 1e-6;
  }
  if (const YAML::Node* value = mapping.find("at_collective")) {
    fault.trigger.collective = reader.integer(*value, mapping.path("at_collective"), 0,
                                              loop != nullptr ? loop->iterations - 1 : int64_t{1} << 40);
  }
  if (const YAML::Node* value = mapping.find("at_time_us")) {
    fault.trigger.at_s = reader.number(*value, mapping.path("at_time_us"), 0, 1e15, false) * 1e-6;
  }
  if (const YAML::Node* value = mapping.find("at_op")) {
    fault.trigger.op = reader.integer(*value, mapping.path("at_op"), 0, std::numeric_limits<int32_t>::max());
  }
  if (const YAML::Node* value = mapping.find("probability")) {
    fault.trigger.probability = reader.number(*value, mapping.path("probability"), 0, 1, true);
  }
  if (fault.kind == FaultKind::kDesync) {
    const YAML::Node& issue_node = mapping.require("issue");
    Mapping issue(reader, issue_node, mapping.path("issue"), kIssueKeys);
    if (const YAML::Node* c = issue.find("collective")) {
      const std::string text = reader.scalar(*c, issue.path("collective"));
      fault.desync_collective = reader.at(*c, issue.path("collective"), [&] { return parse_collective_name(text); });
    }
    if (const YAML::Node* c = issue.find("count")) {
      fault.desync_count = reader.integer(*c, issue.path("count"), 0, kMaxScenarioSizeBytes);
    }
    if (const YAML::Node* d = issue.find("dtype")) {
      const std::string text = reader.scalar(*d, issue.path("dtype"));
      fault.desync_dtype = reader.at(*d, issue.path("dtype"), [&] { return parse_data_type(text); });
    }
    if (!fault.desync_collective && !fault.desync_count && !fault.desync_dtype) {
      reader.fail_at(issue_node, "{} needs collective, count or dtype: what the rank issues instead",
                     mapping.path("issue"));
    }
  }
  return fault;
}

}  // namespace

void read_faults(const Reader& reader, const Mapping& top, Scenario& scenario) {
  const YAML::Node* node = top.find("faults");
  const YAML::Node* seed = top.find("fault_seed");
  const auto* loop = std::get_if<CollectiveLoop>(&scenario.workload);
  const bool training = std::holds_alternative<TrainingWorkload>(scenario.workload);
  for (const YAML::Node* given : {node, seed}) {
    if (given != nullptr && loop == nullptr && !training) {
      reader.fail_at(*given,
                     "faults act on a sequence of collectives: they need workload type collective-loop or training");
    }
  }
  if (seed != nullptr) {
    scenario.faults.seed =
        static_cast<uint64_t>(reader.integer(*seed, "fault_seed", 0, std::numeric_limits<int64_t>::max()));
  }
  if (node == nullptr) return;
  const std::vector<YAML::Node> entries = reader.list(*node, "faults");
  if (entries.size() > kMaxScenarioFaults) {
    reader.fail_at(*node, "faults has {} entries, above the limit of {}", entries.size(), kMaxScenarioFaults);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    scenario.faults.faults.push_back(
        read_fault(reader, entries[i], fmt::format("faults[{}]", i), scenario, loop));
    scenario.fault_marks.push_back(source_mark(entries[i].Mark()));
  }
}

RecoveryPolicy read_recovery(const Reader& reader, const Mapping& top) {
  RecoveryPolicy policy;
  const YAML::Node* node = top.find("recovery");
  if (node == nullptr) return policy;
  Mapping mapping(reader, *node, "recovery", kRecoveryKeys);
  if (const YAML::Node* v = mapping.find("retry_max")) {
    policy.retry_max = static_cast<int>(reader.integer(*v, mapping.path("retry_max"), 0, 100));
  }
  if (const YAML::Node* v = mapping.find("backoff_us")) {
    policy.backoff_s = reader.number(*v, mapping.path("backoff_us"), 0, 1e9, false) * 1e-6;
  }
  if (const YAML::Node* v = mapping.find("watchdog_ms")) {
    policy.watchdog_s = reader.number(*v, mapping.path("watchdog_ms"), 0, 1e8, true) * 1e-3;
  }
  if (const YAML::Node* v = mapping.find("action")) {
    const std::string text = reader.scalar(*v, mapping.path("action"));
    policy.action = reader.at(*v, mapping.path("action"), [&] { return parse_recovery_action(text); });
  }
  if (const YAML::Node* v = mapping.find("verify")) policy.verify = reader.boolean(*v, mapping.path("verify"));
  return policy;
}

}  // namespace tandem::app
