#include "app/plan/plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/common/common.h"
#include "app/scenario/scenario_report.h"
#include "app/scenario/startup_text.h"
#include "app/scenario/training_run.h"
#include "app/scenario/scenario_yaml.h"
#include "core/error.h"
#include "sim/isolated.h"

namespace tandem::app {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 9> kPlanKeys{"tandem_plan", "name",     "description", "cluster", "network",
                                                    "sweep",       "workload", "reliability", "outputs"};
constexpr std::array<std::string_view, 7> kSweepKeys{"preset",     "gpus",  "nic_gbps", "oversubscription",
                                                     "algorithms", "rates", "recovery"};
constexpr std::array<std::string_view, 9> kReliabilityKeys{"rate_scale",
                                                           "checkpoint_bytes_per_param",
                                                           "checkpoint_write_GBps",
                                                           "checkpoint_read_GBps",
                                                           "checkpoint_blocking",
                                                           "interval",
                                                           "detection_s",
                                                           "rendezvous_s",
                                                           "in_place_recovery_s"};
constexpr std::array<std::string_view, 2> kPlanOutputKeys{"csv", "json"};

NetworkChoice parse_plan_network(std::string_view text) {
  if (text == "fluid") return NetworkChoice::kFluid;
  if (text == "ideal") return NetworkChoice::kIdeal;
  fail(ErrorCode::kInvalidArgument, "unknown network model '{}' for a plan (expected: fluid, ideal)", text);
}

// A list axis: each entry parsed by `parse`, no duplicates, at most kMaxPlanAxisValues.
template <typename T, typename Parse>
std::vector<T> read_axis(const Reader& reader, const YAML::Node& node, const std::string& path, Parse&& parse) {
  std::vector<YAML::Node> entries;
  if (node.IsSequence()) {
    entries = reader.list(node, path);
  } else {
    entries.push_back(node);  // one value: an axis of one
  }
  if (entries.size() > kMaxPlanAxisValues) {
    reader.fail_at(node, "{} has {} values, above the limit of {}", path, entries.size(), kMaxPlanAxisValues);
  }
  std::vector<T> values;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string at = node.IsSequence() ? fmt::format("{}[{}]", path, i) : path;
    T value = parse(entries[i], at);
    if (std::find(values.begin(), values.end(), value) != values.end()) {
      reader.fail_at(entries[i], "{}: the value is listed twice", at);
    }
    values.push_back(std::move(value));
  }
  return values;
}

// "none" or policies joined by '+', checked, in a canonical order.
std::string canonical_recovery(std::string_view text) {
  if (text == "none") return "none";
  models::RecoveryPolicies policies = {};
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find('+', begin), text.size());
    const models::RecoveryPolicy p = models::parse_recovery_policy(text.substr(begin, end - begin));
    if (p == models::RecoveryPolicy::kRetry) policies.retry = true;
    if (p == models::RecoveryPolicy::kReroute) policies.reroute = true;
    if (p == models::RecoveryPolicy::kShrink) policies.shrink = true;
    begin = end + 1;
  }
  std::vector<std::string> parts;
  if (policies.retry) parts.emplace_back("retry");
  if (policies.reroute) parts.emplace_back("reroute");
  if (policies.shrink) parts.emplace_back("shrink");
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, "+"));
}

models::RecoveryPolicies policies_of(std::string_view recovery) {
  models::RecoveryPolicies p = {};
  p.retry = recovery.find("retry") != std::string_view::npos;
  p.reroute = recovery.find("reroute") != std::string_view::npos;
  p.shrink = recovery.find("shrink") != std::string_view::npos;
  return p;
}

// The `sweep:` axes: presets, GPU counts, NIC speeds, oversubscription, algorithms, failure
// rates and recovery policies.
void read_sweep(const Reader& reader, const YAML::Node& node, Plan& plan) {
  Mapping sweep(reader, node, "sweep", kSweepKeys);
  const int per_node = plan.cluster.gpus_per_node;
  if (const YAML::Node* v = sweep.find("preset")) {
    plan.presets =
        read_axis<std::string>(reader, *v, sweep.path("preset"), [&](const YAML::Node& n, const std::string& at) {
          const std::string text = reader.text(n, at);
          const models::ClusterSpec spec = reader.at(n, at, [&] { return models::cluster_preset(text); });
          if (spec.gpus_per_node != per_node)
            reader.fail_at(n, "{}: {} has {} GPUs per node, the cluster {}", at, text, spec.gpus_per_node, per_node);
          return spec.preset;
        });
  } else {
    plan.presets = {plan.cluster.preset};
  }
  plan.gpus = read_axis<int>(
      reader, sweep.require("gpus"), sweep.path("gpus"), [&](const YAML::Node& n, const std::string& at) {
        const auto gpus = static_cast<int>(reader.integer(n, at, 1, kMaxScenarioGpus));
        if (gpus % per_node != 0) {
          reader.fail_at(n, "{}: {} GPUs do not fill nodes of {} GPUs", at, gpus, per_node);
        }
        if (gpus / per_node > models::kMaxNodes)
          reader.fail_at(n, "{}: {} nodes, above the limit of {}", at, gpus / per_node, models::kMaxNodes);
        return gpus;
      });
  auto numbers = [&](const char* key, double min, double max, double fallback) {
    const YAML::Node* v = sweep.find(key);
    if (v == nullptr) return std::vector<double>{fallback};
    return read_axis<double>(reader, *v, sweep.path(key), [&](const YAML::Node& n, const std::string& at) {
      return reader.number(n, at, min, max, false);
    });
  };
  plan.nic_gbps = numbers("nic_gbps", models::kMinLinkGbps, models::kMaxLinkGbps, plan.cluster.nic_Bps * 8 / 1e9);
  plan.oversubscription = numbers("oversubscription", models::kMinOversubscription, models::kMaxOversubscription,
                                  plan.cluster.oversubscription);
  const auto named = [&](const char* key, const auto& canonical) {
    return read_axis<std::string>(reader, *sweep.find(key), sweep.path(key),
                                  [&](const YAML::Node& n, const std::string& at) {
                                    const std::string text = reader.text(n, at);
                                    return reader.at(n, at, [&] { return canonical(text); });
                                  });
  };
  plan.algorithms = sweep.find("algorithms") ? named("algorithms", parse_training_algorithm)
                                             : std::vector<std::string>{plan.workload.base.algorithm};
  if (sweep.find("rates")) {
    plan.reliability.rates = named("rates", [](const std::string& text) { return models::failure_rates(text).preset; });
  }
  if (sweep.find("recovery")) plan.reliability.recovery = named("recovery", canonical_recovery);
}

// The `reliability:` section: the reliability model's settings.
void read_reliability(const Reader& reader, const YAML::Node& node, PlanReliability& rel) {
  Mapping m(reader, node, "reliability", kReliabilityKeys);
  auto number = [&](const char* key, double& out, double min, double max, bool exclusive) {
    if (const YAML::Node* v = m.find(key)) out = reader.number(*v, m.path(key), min, max, exclusive);
  };
  number("rate_scale", rel.rate_scale, 0, 1e6, false);
  number("checkpoint_bytes_per_param", rel.checkpoint_bytes_per_param, 0, 1024, false);
  number("checkpoint_write_GBps", rel.checkpoint_write_GBps, 0, 1e7, true);
  number("checkpoint_read_GBps", rel.checkpoint_read_GBps, 0, 1e7, true);
  number("checkpoint_blocking", rel.checkpoint_blocking, 0, 1, false);
  number("detection_s", rel.detection_s, 0, 1e7, false);
  number("rendezvous_s", rel.rendezvous_s, 0, 1e7, false);
  number("in_place_recovery_s", rel.in_place_recovery_s, 0, 1e7, false);
  if (const YAML::Node* v = m.find("interval")) {
    const std::string text = reader.scalar(*v, m.path("interval"));
    if (text != "daly" && text != "young") {
      rel.interval_s = reader.number(*v, m.path("interval") + " (daly, young or seconds)", 0, 1e9, true);
    }
    rel.interval = text;
  }
}

// The sweep's size within the limit, and every cluster it makes a valid one: a bad combination is
// a load error, not a failed point.
void check_sweep(const Reader& reader, const YAML::Node& sweep_node, const Plan& plan) {
  const PlanReliability& rel = plan.reliability;
  const size_t points = plan.presets.size() * plan.gpus.size() * plan.nic_gbps.size() * plan.oversubscription.size() *
                        plan.algorithms.size() * plan.workload.layouts.size() * rel.rates.size() * rel.recovery.size();
  if (points > kMaxPlanPoints)
    reader.fail_at(sweep_node, "the sweep has {} points, above the limit of {}", points, kMaxPlanPoints);
  for (const std::string& preset : plan.presets) {
    for (int gpus : plan.gpus) {
      for (double nic : plan.nic_gbps) {
        for (double over : plan.oversubscription) {
          models::ClusterSpec spec = models::cluster_preset(preset);
          spec.fabric = plan.cluster.fabric;
          spec.nodes = gpus / plan.cluster.gpus_per_node;
          spec.nic_Bps = nic * 1e9 / 8;
          spec.oversubscription = over;
          reader.at(sweep_node, "sweep", [&] { models::validate(spec); });
        }
      }
    }
  }
}

Plan read_plan(const Reader& reader, const YAML::Node& root) {
  if (!root.IsMap()) reader.fail_at(root, "a plan is a mapping that starts with 'tandem_plan: {}'", kPlanFormatVersion);
  const YAML::Node version = root["tandem_plan"];
  if (!version) reader.fail_at(root, "missing required key 'tandem_plan' (a plan starts with 'tandem_plan: 1')");
  if (reader.scalar(version, "tandem_plan") != std::to_string(kPlanFormatVersion)) {
    reader.fail_at(version, "unsupported plan format version '{}' (this tandem reads version {})", version.Scalar(),
                   kPlanFormatVersion);
  }
  Mapping top(reader, root, "", kPlanKeys);
  Plan plan;
  plan.file = reader.file();
  plan.name = reader.text(top.require("name"), "name");
  if (const YAML::Node* d = top.find("description")) plan.description = reader.scalar(*d, "description");
  plan.cluster = read_cluster_spec(reader, top.require("cluster"), "cluster");
  if (const YAML::Node* n = top.find("network")) {
    const std::string text = reader.scalar(*n, "network");
    plan.network = reader.at(*n, "network", [&] { return parse_plan_network(text); });
  }
  plan.workload = read_training_workload(reader, top.require("workload"), "workload");
  const YAML::Node& sweep_node = top.require("sweep");
  read_sweep(reader, sweep_node, plan);
  if (const YAML::Node* node = top.find("reliability")) read_reliability(reader, *node, plan.reliability);
  if (const YAML::Node* node = top.find("outputs")) {
    Mapping m(reader, *node, "outputs", kPlanOutputKeys);
    if (const YAML::Node* v = m.find("csv")) plan.csv = reader.boolean(*v, m.path("csv"));
    if (const YAML::Node* v = m.find("json")) plan.json = reader.boolean(*v, m.path("json"));
  }
  check_sweep(reader, sweep_node, plan);
  return plan;
}

}  // namespace

Plan parse_plan(std::string_view yaml_text, const std::string& file) {
  const Reader reader(file, "plan");
  const YAML::Node root = load_one_document(reader, yaml_text);
  if (!root || root.IsNull()) reader.fail_at_mark({1, 1}, "the plan is empty (it starts with 'tandem_plan: 1')");
  try {
    return read_plan(reader, root);
  } catch (const YAML::Exception& error) {
    reader.fail_at_mark(source_mark(error.mark), error.msg);
  }
}

Plan load_plan(const std::string& path) { return parse_plan(read_text_file(path, "plan", kMaxPlanFileBytes), path); }

// ---- points and jobs ---------------------------------------------------------------------------

std::vector<PlanJob> plan_jobs(const Plan& plan) {
  std::vector<PlanJob> jobs;
  for (const std::string& preset : plan.presets) {
    for (int gpus : plan.gpus) {
      for (double nic : plan.nic_gbps) {
        for (double over : plan.oversubscription) {
          for (const std::string& algorithm : plan.algorithms) {
            PlanJob job;
            job.cluster = plan.cluster;
            const models::ClusterSpec preset_spec = models::cluster_preset(preset);
            job.cluster.preset = preset_spec.preset;
            job.cluster.gpu = preset_spec.gpu;
            job.cluster.nodes = gpus / plan.cluster.gpus_per_node;
            job.cluster.nic_Bps = nic * 1e9 / 8;
            job.cluster.oversubscription = over;
            job.preset = preset;
            job.gpus = gpus;
            job.nic_gbps = nic;
            job.oversubscription = over;
            job.algorithm = algorithm;
            for (size_t l = 0; l < plan.workload.layouts.size(); ++l) {
              models::TrainingConfig config = plan.workload.config_for(l, gpus);
              config.algorithm = algorithm;
              job.configs.push_back(std::move(config));
            }
            // Simulation effort, for the time-left estimate: it grows with the GPUs, but less than
            // linearly (rings run round by round; large jobs have few microbatches to lay out).
            job.cost = static_cast<double>(job.configs.size()) * (16.0 + std::sqrt(static_cast<double>(gpus)));
            jobs.push_back(std::move(job));
          }
        }
      }
    }
  }
  return jobs;
}

std::vector<PlanPoint> plan_points(const Plan& plan) {
  std::vector<PlanPoint> points;
  const size_t jobs = plan.presets.size() * plan.gpus.size() * plan.nic_gbps.size() * plan.oversubscription.size() *
                      plan.algorithms.size();
  for (size_t job = 0; job < jobs; ++job) {
    for (size_t layout = 0; layout < plan.workload.layouts.size(); ++layout) {
      for (const std::string& rates : plan.reliability.rates) {
        for (const std::string& recovery : plan.reliability.recovery) {
          points.push_back({points.size(), job, layout, rates, recovery});
        }
      }
    }
  }
  return points;
}

// ---- running -----------------------------------------------------------------------------------

void to_json(json& j, const JobOutcome& outcome) {
  j = {{"ok", outcome.ok},
       {"error", outcome.error},
       {"startup", sim::startup_to_json(outcome.startup)},
       {"steps", outcome.steps}};
}

void from_json(const json& j, JobOutcome& outcome) {
  outcome.ok = j.at("ok").get<bool>();
  outcome.error = j.at("error").get<std::string>();
  outcome.startup = sim::startup_from_json(j.at("startup"));
  outcome.steps = j.at("steps").get<std::vector<sim::TrainingStepResult>>();
}

JobOutcome run_plan_job(const Plan& plan, const PlanJob& job) {
  JobOutcome outcome;
  // The start-up forks its own child: done before this process builds a platform of its own.
  outcome.startup = sim::simulate_startup(job.cluster, job.gpus);
  sim::TrainingRequest request;
  request.cluster = job.cluster;
  request.network = network_model(plan.network);
  if (plan.calibration) request.network = apply_profile(*plan.calibration, request.network);
  request.configs = job.configs;
  request.memory_all_microbatches = false;  // hundreds of points: the memory timeline's cheap path
  outcome.steps = sim::simulate_training(request, /*isolated=*/false);
  outcome.ok = true;
  return outcome;
}

std::vector<size_t> shard_jobs(size_t job_count, int shard_index, int shard_count) {
  if (shard_count < 1 || shard_index < 0 || shard_index >= shard_count) {
    fail(ErrorCode::kInvalidArgument, "shard {}/{}: the index must be 0..{}", shard_index, shard_count,
         shard_count - 1);
  }
  std::vector<size_t> mine;
  for (size_t j = 0; j < job_count; ++j) {
    if (j % static_cast<size_t>(shard_count) == static_cast<size_t>(shard_index)) mine.push_back(j);
  }
  return mine;
}

std::vector<std::optional<JobOutcome>> run_plan_jobs(const Plan& plan, const std::vector<PlanJob>& jobs,
                                                     const PlanRunOptions& options) {
  const std::vector<size_t> mine = shard_jobs(jobs.size(), options.shard_index, options.shard_count);
  std::vector<std::optional<JobOutcome>> outcomes(jobs.size());
  double total_cost = 0, done_cost = 0;
  for (size_t j : mine) total_cost += jobs[j].cost;
  size_t done = 0;
  const auto start = std::chrono::steady_clock::now();
  // Largest jobs first, so that the last ones to finish are short (and the estimate settles early).
  std::vector<size_t> order = mine;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return jobs[a].cost > jobs[b].cost; });
  sim::run_isolated_parallel(
      order.size(), [&](size_t i) { return run_plan_job(plan, jobs[order[i]]); }, options.jobs,
      [&](size_t i, const sim::Isolated<JobOutcome>& result) {
        const size_t j = order[i];
        if (result.reply) {
          outcomes[j] = *result.reply;
        } else {
          JobOutcome failed;
          failed.error = result.error;
          outcomes[j] = failed;
        }
        ++done;
        done_cost += jobs[j].cost;
        if (options.progress) {
          const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          const double left = done_cost > 0 ? elapsed * (total_cost - done_cost) / done_cost : 0;
          options.progress(done, mine.size(), left);
        }
      });
  return outcomes;
}

// ---- rows --------------------------------------------------------------------------------------

PlanRow make_row(const Plan& plan, const PlanJob& job, const PlanPoint& point, const JobOutcome& outcome) {
  PlanRow row;
  row.point = point;
  row.job = &job;
  row.layout = plan.workload.layouts[point.layout].layout.name;
  if (!outcome.ok) {
    row.error = outcome.error;
    return row;
  }
  row.step = outcome.steps.at(point.layout);
  row.startup_s = outcome.startup.total_s;
  if (!row.step.ok) {
    row.error = row.step.error;
    return row;
  }
  const PlanReliability& rel = plan.reliability;
  models::FailureRates rates = models::failure_rates(point.rates);
  models::scale_rates(rates, rel.rate_scale);
  const int per_node = job.cluster.gpus_per_node;
  row.mtbf_hours = models::job_mtbf_hours(rates, job.gpus, per_node);
  row.in_place_fraction = models::in_place_fraction(rates, policies_of(point.recovery), per_node);
  const double checkpoint_bytes =
      static_cast<double>(job.configs[point.layout].model.parameters()) * rel.checkpoint_bytes_per_param;
  row.checkpoint_write_s = checkpoint_bytes / (rel.checkpoint_write_GBps * 1e9);
  const double load_s = checkpoint_bytes / (rel.checkpoint_read_GBps * 1e9);
  models::GoodputInputs in;
  in.mtbf_s = row.mtbf_hours * 3600;
  const double effective_mtbf_s =
      row.in_place_fraction < 1 ? in.mtbf_s / (1 - row.in_place_fraction) : std::numeric_limits<double>::infinity();
  const double write_s = std::max(row.checkpoint_write_s, 1e-9);
  if (rel.interval == "young") {
    in.checkpoint_interval_s = models::young_interval_s(write_s, effective_mtbf_s);
  } else if (rel.interval == "daly") {
    in.checkpoint_interval_s = models::daly_interval_s(write_s, effective_mtbf_s);
  } else {
    in.checkpoint_interval_s = rel.interval_s;
  }
  // A checkpoint cannot come more often than once per step.
  in.checkpoint_interval_s = std::max(in.checkpoint_interval_s, row.step.step_s);
  if (!std::isfinite(in.checkpoint_interval_s)) in.checkpoint_interval_s = 1e12;
  row.checkpoint_interval_s = in.checkpoint_interval_s;
  in.checkpoint_blocking_s = rel.checkpoint_blocking * row.checkpoint_write_s;
  in.restart = {rel.detection_s, rel.rendezvous_s, outcome.startup.total_s, load_s};
  in.in_place_fraction = row.in_place_fraction;
  in.in_place_recovery_s = rel.in_place_recovery_s;
  in.program_goodput = std::clamp(row.step.achieved_mfu, 1e-9, 1.0);
  const models::GoodputResult g = models::goodput(in);
  row.effective_mtbf_hours = g.effective_mtbf_s / 3600;
  row.restart_s = in.restart.total_s();
  row.ettr = g.ettr;
  row.goodput = g.goodput;
  const double tokens_per_step = row.step.tokens_per_s_per_gpu * row.step.step_s * job.gpus;
  row.gpu_hours_per_1T_tokens = g.ettr > 0 ? job.gpus * row.step.step_s * (1e12 / tokens_per_step) / 3600 / g.ettr
                                           : std::numeric_limits<double>::infinity();
  row.ok = true;
  return row;
}

std::vector<PlanRow> plan_rows(const Plan& plan, const std::vector<PlanJob>& jobs,
                               const std::vector<std::optional<JobOutcome>>& outcomes) {
  std::vector<PlanRow> rows;
  for (const PlanPoint& point : plan_points(plan)) {
    if (!outcomes[point.job]) continue;
    rows.push_back(make_row(plan, jobs[point.job], point, *outcomes[point.job]));
  }
  return rows;
}

// ---- outputs -----------------------------------------------------------------------------------

std::vector<std::string> plan_csv_columns() {
  return {"point",
          "preset",
          "gpus",
          "nodes",
          "nic_gbps",
          "oversubscription",
          "algorithm",
          "layout",
          "rates",
          "recovery",
          "fits",
          "memory_GB",
          "step_s",
          "compute_s",
          "exposed_comm_s",
          "bubble_s",
          "achieved_mfu",
          "tokens_per_s_per_gpu",
          "startup_s",
          "mtbf_h",
          "in_place_fraction",
          "effective_mtbf_h",
          "checkpoint_write_s",
          "checkpoint_interval_s",
          "restart_s",
          "ettr",
          "goodput",
          "gpu_hours_per_1T_tokens",
          "error"};
}

std::string plan_csv(const std::vector<PlanRow>& rows) {
  std::string out = fmt::format("{}\n", fmt::join(plan_csv_columns(), ","));
  for (const PlanRow& r : rows) {
    const PlanJob& j = *r.job;
    out += fmt::format("{},{},{},{},{:g},{:g},{},{},{},{},{},{:.4f},", r.point.index, j.preset, j.gpus, j.cluster.nodes,
                       j.nic_gbps, j.oversubscription, j.algorithm, r.layout, r.point.rates, r.point.recovery,
                       r.step.ok, sim::memory_needed_bytes(r.step) / 1e9);
    if (r.ok) {
      out += fmt::format(
          "{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},"
          "{:.6g},{:.6g},",
          r.step.step_s, r.step.compute_s, r.step.exposed_comm_s, r.step.bubble_s, r.step.achieved_mfu,
          r.step.tokens_per_s_per_gpu, r.startup_s, r.mtbf_hours, r.in_place_fraction, r.effective_mtbf_hours,
          r.checkpoint_write_s, r.checkpoint_interval_s, r.restart_s, r.ettr, r.goodput, r.gpu_hours_per_1T_tokens);
    } else {
      out += std::string(16, ',');
    }
    out += csv_field(r.error) + "\n";
  }
  return out;
}

namespace {

// The start-up of the first job that ran at each cluster size, in job order.
std::vector<sim::StartupResult> startup_per_cluster_size(const std::vector<std::optional<JobOutcome>>& outcomes,
                                                         const std::vector<PlanJob>& jobs) {
  std::vector<sim::StartupResult> startups;
  std::set<int> seen;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (outcomes[j] && outcomes[j]->ok && seen.insert(jobs[j].gpus).second) startups.push_back(outcomes[j]->startup);
  }
  return startups;
}

}  // namespace

json plan_json(const Plan& plan, const std::vector<PlanRow>& rows,
               const std::vector<std::optional<JobOutcome>>& outcomes, const std::vector<PlanJob>& jobs) {
  json points = json::array();
  for (const PlanRow& r : rows) {
    const PlanJob& j = *r.job;
    json entry = {{"point", r.point.index},
                  {"preset", j.preset},
                  {"gpus", j.gpus},
                  {"nic_gbps", j.nic_gbps},
                  {"oversubscription", j.oversubscription},
                  {"algorithm", j.algorithm},
                  {"layout", r.layout},
                  {"rates", r.point.rates},
                  {"recovery", r.point.recovery},
                  {"ok", r.ok},
                  {"error", r.error}};
    if (r.ok) {
      entry["step"] = r.step;
      entry["reliability"] = {{"startup_s", r.startup_s},
                              {"mtbf_h", r.mtbf_hours},
                              {"in_place_fraction", r.in_place_fraction},
                              {"effective_mtbf_h", r.effective_mtbf_hours},
                              {"checkpoint_write_s", r.checkpoint_write_s},
                              {"checkpoint_interval_s", r.checkpoint_interval_s},
                              {"restart_s", r.restart_s},
                              {"ettr", r.ettr},
                              {"goodput", r.goodput},
                              {"gpu_hours_per_1T_tokens", r.gpu_hours_per_1T_tokens}};
    }
    points.push_back(entry);
  }
  json startup = json::array();
  for (const sim::StartupResult& result : startup_per_cluster_size(outcomes, jobs)) {
    startup.push_back(sim::startup_to_json(result));
  }
  return {{"tandem_plan_results", kPlanFormatVersion},
          {"plan", {{"file", plan.file}, {"name", plan.name}, {"description", plan.description}}},
          {"points", points},
          {"startup", startup}};
}

namespace {

std::string hours(double h) {
  if (!std::isfinite(h)) return "inf";
  return h >= 100 ? fmt::format("{:.0f}", h) : fmt::format("{:.2f}", h);
}

// The plan, its calibration and workload, and how many points ran.
std::string plan_header(const Plan& plan, const std::vector<PlanRow>& rows,
                        const std::vector<std::optional<JobOutcome>>& outcomes) {
  std::string out;
  const size_t ran =
      static_cast<size_t>(std::count_if(rows.begin(), rows.end(), [](const PlanRow& r) { return r.ok; }));
  out += fmt::format("tandem plan: {} ({})\n", plan.name, plan.file);
  if (!plan.description.empty()) out += plan.description + "\n";
  if (plan.calibration) out += fmt::format("calibration: {}\n", profile_summary(*plan.calibration));
  const models::TrainingConfig& base = plan.workload.base;
  out += fmt::format("workload: {} ({:.2f} B parameters), seq_len {}, {}, {}\n", base.model.name,
                     static_cast<double>(base.model.parameters()) / 1e9, base.seq_len,
                     plan.workload.batch_per_gpu ? fmt::format("{:g} sequences per GPU", *plan.workload.batch_per_gpu)
                                                 : fmt::format("global batch {}", base.global_batch),
                     models::describe_compute(base));
  out += fmt::format("{} points ({} ran, {} did not fit or split), {} simulated clusters\n", rows.size(), ran,
                     rows.size() - ran,
                     std::count_if(outcomes.begin(), outcomes.end(), [](const auto& o) { return o.has_value(); }));
  return out;
}

// Best per cluster size: the fewest GPU-hours per 1T tokens, goodput included.
std::string best_per_cluster_size(const Plan& plan, const std::vector<PlanRow>& rows) {
  std::string out = "\n== best configuration per cluster size (fewest GPU-hours per 1T tokens, ETTR included)\n";
  out += fmt::format("{:>7} {:<9} {:>5} {:>5} {:<14} {:<6} {:<8} {:<22} {:>9} {:>10} {:>7} {:>8} {:>7} {:>12}\n",
                     "GPUs", "preset", "NIC", "over", "layout", "algo", "rates", "recovery", "step (s)", "tok/s/GPU",
                     "MFU", "MTBF h", "ETTR", "GPU-h/1T tok");
  // Failure rates are an assumption about the fleet, not a choice: the best is per rate table.
  std::map<std::pair<int, std::string>, const PlanRow*> best;
  for (const PlanRow& r : rows) {
    if (!r.ok) continue;
    const PlanRow*& b = best[{r.job->gpus, r.point.rates}];
    if (b == nullptr || r.gpu_hours_per_1T_tokens < b->gpu_hours_per_1T_tokens) b = &r;
  }
  for (int gpus : plan.gpus) {
    for (const std::string& rates : plan.reliability.rates) {
      auto it = best.find({gpus, rates});
      if (it == best.end()) {
        out += fmt::format("{:>7} {:<9} {:>5} {:>5} {:<14} {:<6} {:<8} no configuration runs (see below)\n", gpus, "",
                           "", "", "", "", rates);
        continue;
      }
      const PlanRow& r = *it->second;
      out += fmt::format(
          "{:>7} {:<9} {:>5g} {:>5g} {:<14} {:<6} {:<8} {:<22} {:>9} {:>10.0f} {:>7} {:>8} {:>7} {:>12.0f}\n", gpus,
          r.job->preset, r.job->nic_gbps, r.job->oversubscription, r.layout, r.job->algorithm, r.point.rates,
          r.point.recovery, format_seconds(r.step.step_s), r.step.tokens_per_s_per_gpu,
          format_percent(r.step.achieved_mfu), hours(r.mtbf_hours), format_percent(r.ettr), r.gpu_hours_per_1T_tokens);
    }
  }
  return out;
}

// Pareto front: fewer GPUs or a shorter step, never both worse.
std::string pareto_front(const std::vector<PlanRow>& rows) {
  std::string out = "\n== Pareto front: step time against GPU count\n";
  std::vector<const PlanRow*> ok;
  for (const PlanRow& r : rows) {
    if (r.ok) ok.push_back(&r);
  }
  std::stable_sort(ok.begin(), ok.end(), [](const PlanRow* a, const PlanRow* b) {
    return a->job->gpus != b->job->gpus ? a->job->gpus < b->job->gpus : a->step.step_s < b->step.step_s;
  });
  double best_step = std::numeric_limits<double>::infinity();
  std::set<std::pair<int, std::string>> shown;
  for (const PlanRow* r : ok) {
    if (r->step.step_s >= best_step) continue;
    best_step = r->step.step_s;
    if (!shown.insert({r->job->gpus, r->layout}).second) continue;
    out += fmt::format("{:>7} GPUs  {:>9} s  {:<14} {:>5g}G NIC  oversubscription {:g}  {}  {:.0f} tok/s/GPU\n",
                       r->job->gpus, format_seconds(r->step.step_s), r->layout, r->job->nic_gbps,
                       r->job->oversubscription, r->job->algorithm, r->step.tokens_per_s_per_gpu);
  }
  return out;
}

// What did not run, by reason (the first clause of the message); empty when every point ran.
std::string did_not_run(const std::vector<PlanRow>& rows) {
  std::map<std::string, size_t> reasons;
  for (const PlanRow& r : rows) {
    if (r.ok) continue;
    std::string reason = r.error;
    if (const size_t cut = reason.find(" needs "); cut != std::string::npos) {
      reason = "does not fit in GPU memory";
    } else if (const size_t colon = reason.find(": "); colon != std::string::npos) {
      reason = reason.substr(colon + 2);
    }
    ++reasons[reason];
  }
  if (reasons.empty()) return "";
  std::string out = "\n== did not run\n";
  for (const auto& [reason, count] : reasons) out += fmt::format("  {:>6} points: {}\n", count, reason);
  return out;
}

}  // namespace

std::string format_plan_summary(const Plan& plan, const std::vector<PlanRow>& rows,
                                const std::vector<std::optional<JobOutcome>>& outcomes,
                                const std::vector<PlanJob>& jobs) {
  std::string out = plan_header(plan, rows, outcomes);
  out += best_per_cluster_size(plan, rows);
  out += pareto_front(rows);
  out += "\n== start-up: a job's start-up per cluster size, world communicator, today's defaults (sim/startup.h)\n";
  out += startup_table(startup_per_cluster_size(outcomes, jobs));
  out += did_not_run(rows);
  return out;
}

}  // namespace tandem::app
