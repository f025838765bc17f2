// tandem reliability: a job's MTBF from per-cause failure rates, the checkpoint interval (Young,
// Daly), what a restart costs (with the simulated communicator start-up for this cluster size),
// ETTR and goodput with and without recovery in place, and the start-up time as the job grows.
// Formulas and defaults: docs/reliability.md.
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/cli/cli_cluster.h"
#include "app/cli/cli_paths.h"
#include "app/common/common.h"
#include "app/cli/commands.h"
#include "app/common/nccl_tests_table.h"
#include "app/scenario/startup_text.h"
#include "core/error.h"
#include "models/reliability.h"
#include "sim/startup.h"

namespace tandem::app {

namespace {

using nlohmann::json;

// Defaults of the options (docs/reliability.md says where they come from).
constexpr double kDefaultCheckpointWrite_s = 60;
constexpr double kDefaultDetection_s = 300;   // Meta RSC's health checks run every 5 minutes
constexpr double kDefaultRendezvous_s = 120;  // rescheduling and the launcher's rendezvous: assumed
constexpr double kDefaultInPlaceRecovery_s = 60;
constexpr double kRatePerMillion = 1e6;  // --cause-rate and the table count failures per 10^6 unit-hours
// The start-up table grows the job by this factor from one node up to --gpus.
constexpr int kStartupTableFactor = 4;

struct ReliabilityOptions {
  ClusterOptions cluster;
  int gpus = 0;
  std::string rates = "llama3";
  double rate_scale = 1;
  std::vector<std::string> cause_rates;
  std::optional<double> checkpoint_write_s;
  std::optional<double> checkpoint_GBps;
  std::optional<std::string> checkpoint_bytes_per_gpu;
  std::optional<double> checkpoint_blocking_s;
  std::optional<double> checkpoint_load_s;
  std::string checkpoint_interval = "auto";
  double detection_s = kDefaultDetection_s;
  double rendezvous_s = kDefaultRendezvous_s;
  std::optional<double> init_s;
  std::string recovery = "retry,reroute,shrink";
  double in_place_recovery_s = kDefaultInPlaceRecovery_s;
  std::optional<double> mfu;
  std::optional<double> target_mtbf_hours;
  bool json = false;
};

// "none" alone, or any of retry, reroute, shrink; "none,retry" contradicts itself and is refused.
models::RecoveryPolicies parse_policies(const std::string& text) {
  models::RecoveryPolicies policies;
  size_t begin = 0;
  int words = 0;
  bool none = false;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(begin, end - begin);
    ++words;
    switch (models::parse_recovery_policy(word)) {
      case models::RecoveryPolicy::kNone:
        none = true;
        break;
      case models::RecoveryPolicy::kRetry:
        policies.retry = true;
        break;
      case models::RecoveryPolicy::kReroute:
        policies.reroute = true;
        break;
      case models::RecoveryPolicy::kShrink:
        policies.shrink = true;
        break;
    }
    begin = end + 1;
  }
  if (none && words > 1) {
    fail(ErrorCode::kInvalidArgument, "--recovery {}: 'none' cannot be combined with other policies", text);
  }
  return policies;
}

std::string policies_text(const models::RecoveryPolicies& p) {
  std::string text;
  for (auto [on, word] :
       {std::pair{p.retry, "retry"}, std::pair{p.reroute, "reroute"}, std::pair{p.shrink, "shrink"}}) {
    if (on) text += (text.empty() ? "" : ",") + std::string(word);
  }
  return text.empty() ? "none" : text;
}

// Four significant digits, without an exponent from 1000 up.
std::string number(double value) {
  if (std::isinf(value)) return "inf";
  if (std::abs(value) >= 1000) return fmt::format("{:.0f}", value);
  return fmt::format("{:.4g}", value);
}

// Microseconds to hours, whichever reads best.
std::string duration(double seconds) {
  if (std::isinf(seconds)) return "inf";
  if (seconds == 0) return "0 s";
  if (seconds < 1e-3) return number(seconds * 1e6) + " us";
  if (seconds < 1) return number(seconds * 1e3) + " ms";
  if (seconds < 120) return number(seconds) + " s";
  if (seconds < 2 * 3600) return number(seconds / 60) + " min";
  return number(seconds / 3600) + " h";
}

std::string percent(double share) { return fmt::format("{:.2f}%", share * 100); }

// The job as the command line describes it: the model's inputs, its cluster and the simulated
// communicator start-up.
struct ReliabilityJob {
  models::ClusterSpec spec;
  models::JobReliabilityInputs job;
  double checkpoint_load_s = 0;
  sim::StartupResult startup;
};

// --checkpoint-interval: auto (Daly), young, daly or a positive duration.
void parse_interval(const std::string& text, models::JobReliabilityInputs& job) {
  if (text == "young") {
    job.interval_rule = models::CheckpointIntervalRule::kYoung;
    return;
  }
  if (text == "auto" || text == "daly") {
    job.interval_rule = models::CheckpointIntervalRule::kDaly;
    return;
  }
  const double interval = parse_duration_s(text, "--checkpoint-interval");
  if (!(interval > 0)) {
    fail(ErrorCode::kInvalidArgument, "--checkpoint-interval {}: expected auto, young, daly or a positive duration",
         text);
  }
  job.interval_rule = models::CheckpointIntervalRule::kFixed;
  job.fixed_interval_s = interval;
}

// The job's nodes from --gpus, checked against --nodes.
int job_nodes(const ReliabilityOptions& options, int gpus_per_node) {
  const int gpus = options.gpus;
  const int nodes = (gpus + gpus_per_node - 1) / gpus_per_node;
  if (gpus > gpus_per_node && gpus % gpus_per_node != 0) {
    fail(ErrorCode::kInvalidArgument, "--gpus {} is not a multiple of the {} GPUs per node", gpus, gpus_per_node);
  }
  if (nodes > models::kMaxNodes) {
    fail(ErrorCode::kInvalidArgument, "--gpus {} needs {} nodes, over the limit of {}", gpus, nodes, models::kMaxNodes);
  }
  if (const std::optional<std::string>& given = options.cluster.value("nodes");
      given && cluster_spec(options.cluster).nodes != nodes) {
    fail(ErrorCode::kInvalidArgument, "--nodes {} disagrees with --gpus {} ({} nodes of {} GPUs)", *given, gpus, nodes,
         gpus_per_node);
  }
  return nodes;
}

// --rates, --rate-scale and each --cause-rate CAUSE=RATE (per 10^6 unit-hours).
models::FailureRates parse_rates(const ReliabilityOptions& options) {
  models::FailureRates rates = models::failure_rates(options.rates);
  models::scale_rates(rates, options.rate_scale);
  for (const std::string& item : options.cause_rates) {
    const size_t eq = item.find('=');
    double rate = -1;
    if (eq != std::string::npos) {
      try {
        size_t used = 0;
        rate = std::stod(item.substr(eq + 1), &used);
        if (used != item.size() - eq - 1) rate = -1;
      } catch (const std::exception&) {
        rate = -1;
      }
    }
    if (!(rate >= 0 && rate <= models::kMaxCauseRatePerMillion)) {
      fail(ErrorCode::kInvalidArgument,
           "--cause-rate {}: expected CAUSE=RATE, RATE failures per 10^6 GPU-hours or "
           "node-hours (0 to {:g})",
           item, models::kMaxCauseRatePerMillion);
    }
    models::set_cause_rate(rates, item.substr(0, eq), rate / kRatePerMillion);
  }
  return rates;
}

// The checkpoint's write, blocking and load times from the --checkpoint-* options.
void parse_checkpoint(const ReliabilityOptions& options, ReliabilityJob& s) {
  models::JobReliabilityInputs& job = s.job;
  if (options.checkpoint_GBps) {
    const int64_t bytes = parse_size_bytes(*options.checkpoint_bytes_per_gpu, "--checkpoint-bytes-per-gpu");
    if (bytes <= 0) fail(ErrorCode::kInvalidArgument, "--checkpoint-bytes-per-gpu must be > 0");
    job.checkpoint_write_s = models::checkpoint_write_s(bytes, job.gpus, *options.checkpoint_GBps);
  } else {
    job.checkpoint_write_s = options.checkpoint_write_s.value_or(kDefaultCheckpointWrite_s);
  }
  job.checkpoint_blocking_s = options.checkpoint_blocking_s.value_or(job.checkpoint_write_s);
  s.checkpoint_load_s = options.checkpoint_load_s.value_or(job.checkpoint_write_s);
  if (job.checkpoint_blocking_s > job.checkpoint_write_s) {
    fail(ErrorCode::kInvalidArgument, "--checkpoint-blocking-s {} is longer than the checkpoint write ({} s)",
         job.checkpoint_blocking_s, job.checkpoint_write_s);
  }
}

// Reads and checks the options, then simulates the communicator start-up for the restart cost.
ReliabilityJob build_job(const ReliabilityOptions& options) {
  ReliabilityJob s;
  models::JobReliabilityInputs& job = s.job;
  s.spec = cluster_spec(options.cluster);
  job.gpus = options.gpus;
  job.gpus_per_node = s.spec.gpus_per_node;
  s.spec.nodes = job_nodes(options, job.gpus_per_node);
  job.rates = parse_rates(options);
  if (std::isinf(models::job_mtbf_hours(job.rates, job.gpus, job.gpus_per_node))) {
    fail(ErrorCode::kInvalidArgument,
         "every failure rate is 0: the job never fails (check --rate-scale, --cause-rate)");
  }
  job.policies = parse_policies(options.recovery);
  parse_checkpoint(options, s);
  parse_interval(options.checkpoint_interval, job);  // a bad --checkpoint-interval fails before any simulation
  job.in_place_recovery_s = options.in_place_recovery_s;
  job.program_goodput = options.mfu.value_or(1);
  job.target_mtbf_hours = options.target_mtbf_hours;

  s.startup = sim::simulate_startup(s.spec, job.gpus);
  job.restart = {options.detection_s, options.rendezvous_s, options.init_s.value_or(s.startup.total_s),
                 s.checkpoint_load_s};
  return s;
}

// 8, 32, 128, ... (one node, then x kStartupTableFactor) and --gpus itself.
std::vector<sim::StartupResult> startup_rows(const ReliabilityJob& s) {
  std::vector<sim::StartupResult> rows;
  for (int gpus = s.job.gpus_per_node; gpus < s.job.gpus; gpus *= kStartupTableFactor) {
    rows.push_back(sim::simulate_startup(s.spec, gpus));
  }
  rows.push_back(s.startup);
  return rows;
}


json column_json(const models::GoodputAtInterval& c) {
  return {{"mtbf_between_restarts_hours", c.result.effective_mtbf_s / 3600},
          {"checkpoint_interval_s", c.checkpoint_interval_s},
          {"lost_work_s", c.result.lost_work_s},
          {"restart_loss_s", c.result.restart_loss_s},
          {"checkpoint_efficiency", c.result.checkpoint_efficiency},
          {"failure_efficiency", c.result.failure_efficiency},
          {"ettr", c.result.ettr},
          {"goodput", c.result.goodput}};
}

// --json: the whole assessment as one JSON object.
void print_json(const ReliabilityOptions& options, const ReliabilityJob& s, const models::JobReliability& r,
                const std::vector<sim::StartupResult>& table) {
  const models::JobReliabilityInputs& job = s.job;
  json causes = json::array();
  for (size_t i = 0; i < job.rates.causes.size(); ++i) {
    const models::FailureCause& c = job.rates.causes[i];
    causes.push_back({{"name", c.name},
                      {"description", c.description},
                      {"rate_per_hour", c.rate_per_hour},
                      {"unit", models::name(c.unit)},
                      {"job_rate_per_hour", r.causes[i].failures_per_hour},
                      {"share", r.causes[i].share},
                      {"recoverable_by", models::name(c.recoverable_by)},
                      {"in_place_share", c.in_place_share}});
  }
  json out = {{"cluster", models::describe(s.spec)},
              {"gpus", job.gpus},
              {"nodes", s.spec.nodes},
              {"rates", job.rates.preset},
              {"rates_source", job.rates.source},
              {"causes", causes},
              {"job_mtbf_hours", r.mtbf_hours},
              {"gpu_hours_per_interruption", r.gpu_hours_per_interruption},
              {"checkpoint",
               {{"write_s", job.checkpoint_write_s},
                {"blocking_s", job.checkpoint_blocking_s},
                {"load_s", s.checkpoint_load_s},
                {"young_interval_s", r.young_interval_s},
                {"daly_interval_s", r.daly_interval_s}}},
              {"restart",
               {{"detection_s", job.restart.detection_s},
                {"rendezvous_s", job.restart.rendezvous_s},
                {"communicator_init_s", job.restart.communicator_init_s},
                {"checkpoint_load_s", job.restart.checkpoint_load_s},
                {"total_s", job.restart.total_s()}}},
              {"recovery",
               {{"policies", policies_text(job.policies)},
                {"in_place_fraction", r.in_place_fraction},
                {"in_place_recovery_s", options.in_place_recovery_s}}},
              {"restart_only", column_json(r.restart_only)},
              {"with_in_place_recovery", column_json(r.with_in_place)},
              {"startup", json::array()}};
  if (options.mfu) out["mfu"] = *options.mfu;
  if (r.required_in_place_fraction) {
    out["target"] = {{"mtbf_hours", *options.target_mtbf_hours},
                     {"required_in_place_fraction", *r.required_in_place_fraction},
                     {"reached", r.in_place_fraction >= *r.required_in_place_fraction}};
  }
  for (const sim::StartupResult& row : table) out["startup"].push_back(sim::startup_to_json(row));
  std::cout << out.dump(2) << "\n";
}

// The causes' table, the job MTBF, the checkpoint's times and intervals.
void print_failures(const ReliabilityJob& s, const models::JobReliability& r) {
  const models::JobReliabilityInputs& job = s.job;
  std::cout << fmt::format("{} GPUs on {}\n", job.gpus, models::describe(s.spec));
  std::cout << fmt::format("failure rates '{}': {}\n\n", job.rates.preset, job.rates.source);
  std::cout << fmt::format("  {:<32} {:>12} {:<6} {:>11} {:>13} {:>7}  {}\n", "cause", "per 10^6", "unit",
                           "job per day", "MTBF alone h", "share", "recoverable in place by");
  for (size_t i = 0; i < job.rates.causes.size(); ++i) {
    const models::FailureCause& c = job.rates.causes[i];
    const double rate = r.causes[i].failures_per_hour;
    const std::string policy =
        c.recoverable_by == models::RecoveryPolicy::kNone
            ? "none"
            : fmt::format("{}{}", models::name(c.recoverable_by),
                          c.in_place_share < 1 ? fmt::format(" ({:.0f}%)", c.in_place_share * 100) : "");
    std::cout << fmt::format("  {:<32} {:>12} {:<6} {:>11} {:>13} {:>7}  {}\n", c.description,
                             number(c.rate_per_hour * kRatePerMillion), models::name(c.unit), number(rate * 24),
                             rate > 0 ? number(1 / rate) : "inf", percent(r.causes[i].share), policy);
  }
  std::cout << fmt::format("  {:<32} {:>12} {:<6} {:>11} {:>13} {:>7}\n\n", "all causes", "", "",
                           number(24 * r.failures_per_hour), number(r.mtbf_hours), percent(1));
  std::cout << fmt::format("job MTBF: {} h ({} GPU-hours per interruption)\n", number(r.mtbf_hours),
                           number(r.gpu_hours_per_interruption));
  std::cout << fmt::format("checkpoint: write {}, blocking {}, load {}\n", duration(job.checkpoint_write_s),
                           duration(job.checkpoint_blocking_s), duration(s.checkpoint_load_s));
  std::cout << fmt::format("checkpoint interval at the job MTBF: Young {}, Daly {}\n\n", duration(r.young_interval_s),
                           duration(r.daly_interval_s));
}

// What one job restart costs, part by part.
void print_restart(const ReliabilityOptions& options, const models::RestartCost& restart) {
  std::cout << fmt::format("restart cost (one job restart)\n");
  std::cout << fmt::format("  {:<28} {:>12}\n", "detection", duration(restart.detection_s));
  std::cout << fmt::format("  {:<28} {:>12}\n", "rendezvous", duration(restart.rendezvous_s));
  std::cout << fmt::format("  {:<28} {:>12}  {}\n", "job start-up", duration(restart.communicator_init_s),
                           options.init_s ? "(--init-s)" : "(simulated, below)");
  std::cout << fmt::format("  {:<28} {:>12}\n", "checkpoint load", duration(restart.checkpoint_load_s));
  std::cout << fmt::format("  {:<28} {:>12}  (+ lost work: half the checkpoint interval)\n\n", "total",
                           duration(restart.total_s()));
}

// Goodput restarting on every interruption beside goodput with recovery in place, and the target.
void print_goodput(const ReliabilityOptions& options, const ReliabilityJob& s, const models::JobReliability& r) {
  const std::string policies = policies_text(s.job.policies);
  std::cout << fmt::format("in-place recovery ({}): {} of interruptions, {} each\n", policies,
                           percent(r.in_place_fraction), duration(options.in_place_recovery_s));
  std::cout << fmt::format("  {:<28} {:>14} {:>24}\n", "", "restart only", "with in-place recovery");
  auto row = [](const std::string& label, const std::string& a, const std::string& b) {
    std::cout << fmt::format("  {:<28} {:>14} {:>24}\n", label, a, b);
  };
  const models::GoodputResult& restart = r.restart_only.result;
  const models::GoodputResult& in_place = r.with_in_place.result;
  row("MTBF between restarts", duration(restart.effective_mtbf_s), duration(in_place.effective_mtbf_s));
  row(fmt::format("checkpoint interval ({})", options.checkpoint_interval),
      duration(r.restart_only.checkpoint_interval_s), duration(r.with_in_place.checkpoint_interval_s));
  row("lost work per restart", duration(restart.lost_work_s), duration(in_place.lost_work_s));
  row("checkpoint efficiency", percent(restart.checkpoint_efficiency), percent(in_place.checkpoint_efficiency));
  row("failure efficiency", percent(restart.failure_efficiency), percent(in_place.failure_efficiency));
  row("ETTR", percent(restart.ettr), percent(in_place.ettr));
  if (options.mfu) {
    row(fmt::format("goodput (ETTR x MFU {:g})", *options.mfu), percent(restart.goodput), percent(in_place.goodput));
  }
  if (r.required_in_place_fraction) {
    const double required = *r.required_in_place_fraction;
    std::cout << fmt::format(
        "\ntarget MTBF between restarts {} h: {} of interruptions must be recovered in place; {} "
        "recovers {}: {}\n",
        number(*options.target_mtbf_hours), percent(required), policies, percent(r.in_place_fraction),
        r.in_place_fraction >= required ? "reached" : "not reached");
  }
}

// The simulated start-up as the job grows.
void print_startup(const std::vector<sim::StartupResult>& table) {
  std::cout << "\nstart-up: a job's start-up, world communicator, today's defaults (sim/startup.h; docs/startup.md)\n";
  std::cout << startup_table(table);
}

void run_reliability(const ReliabilityOptions& options) {
  const ReliabilityJob s = build_job(options);
  const models::JobReliability r = models::assess_job_reliability(s.job);
  const std::vector<sim::StartupResult> table = startup_rows(s);
  if (options.json) {
    print_json(options, s, r, table);
    return;
  }
  print_failures(s, r);
  print_restart(options, s.job.restart);
  print_goodput(options, s, r);
  print_startup(table);
}

}  // namespace

void add_reliability_command(CLI::App& app, CommandStatus& status) {
  auto options = std::make_shared<ReliabilityOptions>();
  CLI::App* command = app.add_subcommand(
      "reliability",
      "A job's MTBF from per-cause failure rates, the checkpoint interval (Young, Daly), the restart cost (with the "
      "simulated communicator start-up), ETTR and goodput with and without recovery in place (docs/reliability.md).");
  add_cluster_options(*command, options->cluster);
  command->add_option("--gpus", options->gpus, "GPUs of the job (its nodes: --gpus / --gpus-per-node)")
      ->required()
      ->check(CLI::Range(1, models::kMaxNodes * models::kMaxGpusPerNode));
  command->add_option("--rates", options->rates, "failure-rate table: llama3, rsc1 or rsc2")->capture_default_str();
  command->add_option("--rate-scale", options->rate_scale, "multiply every failure rate by this")
      ->capture_default_str()
      ->check(number_range(0.0, models::kMaxRateScale));
  command->add_option("--cause-rate", options->cause_rates,
                      "CAUSE=RATE: one cause's rate in failures per 10^6 GPU-hours (or node-hours), e.g. "
                      "faulty_gpu=5; repeatable");
  auto* write =
      command
          ->add_option("--checkpoint-write-s", options->checkpoint_write_s,
                       fmt::format("checkpoint write time delta in s (default {:g})", kDefaultCheckpointWrite_s))
          ->check(number_range(1e-6, models::kMaxDuration_s));
  auto* bandwidth =
      command
          ->add_option("--checkpoint-GBps", options->checkpoint_GBps,
                       "storage write bandwidth for the whole job, GB/s: delta = bytes per GPU x GPUs / bandwidth")
          ->check(number_range(1e-6, 1e9))
          ->excludes(write);
  auto* bytes = command->add_option("--checkpoint-bytes-per-gpu", options->checkpoint_bytes_per_gpu,
                                    "checkpoint bytes per GPU (16G, 1.5G: binary units); with --checkpoint-GBps");
  bandwidth->needs(bytes);
  bytes->needs(bandwidth);
  command
      ->add_option("--checkpoint-blocking-s", options->checkpoint_blocking_s,
                   "how long training stalls per checkpoint, s (default: the write time, a synchronous save)")
      ->check(number_range(0.0, models::kMaxDuration_s));
  command
      ->add_option("--checkpoint-load-s", options->checkpoint_load_s,
                   "checkpoint load time on restart, s (default: the write time)")
      ->check(number_range(0.0, models::kMaxDuration_s));
  command
      ->add_option("--checkpoint-interval", options->checkpoint_interval,
                   "auto (Daly at the MTBF between restarts), young, daly, or a duration: 90s, 30m, 2h")
      ->capture_default_str();
  command->add_option("--detect-s", options->detection_s, "failure detection time, s")
      ->capture_default_str()
      ->check(number_range(0.0, models::kMaxDuration_s));
  command->add_option("--rendezvous-s", options->rendezvous_s, "rescheduling and rendezvous time on restart, s")
      ->capture_default_str()
      ->check(number_range(0.0, models::kMaxDuration_s));
  command
      ->add_option("--init-s", options->init_s,
                   "the job's start-up on restart (launch, store, communicators), s (default: the simulated start-up)")
      ->check(number_range(0.0, models::kMaxDuration_s));
  command
      ->add_option("--recovery", options->recovery,
                   "in-place recovery policies, comma-separated: retry, reroute, shrink, or none")
      ->capture_default_str();
  command->add_option("--in-place-recovery-s", options->in_place_recovery_s, "cost of one in-place recovery, s")
      ->capture_default_str()
      ->check(number_range(0.0, models::kMaxDuration_s));
  command->add_option("--mfu", options->mfu, "program goodput (e.g. MFU, 0-1]: goodput = ETTR x MFU")
      ->check(number_range(0.0, 1.0));
  command
      ->add_option("--target-mtbf-hours", options->target_mtbf_hours,
                   "the MTBF between restarts to reach: the in-place fraction it needs")
      ->check(number_range(1e-6, models::kMaxDuration_s / 3600));
  command->add_flag("--json", options->json, "print JSON instead of tables");
  command->callback([options, command, &status] {
    if (options->mfu && *options->mfu <= 0) fail(ErrorCode::kInvalidArgument, "--mfu must be > 0");
    run_reliability(*options);
    status.exit_code = kExitSuccess;
  });
}

}  // namespace tandem::app
