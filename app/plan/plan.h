// Capacity planning: `tandem plan SWEEP.yaml` sweeps the product of clusters (GPU preset, GPU
// count, NIC speed, oversubscription), training layouts, collective algorithms, failure-rate
// tables and recovery policies; simulates every training step (sim/training.h) and every cluster's
// communicator start-up (sim/startup.h); and adds reliability (models/reliability.h): job MTBF,
// the checkpoint interval, ETTR, goodput and the cost in GPU-hours per 1T tokens. docs/plan.md
// has the file format, the outputs and the formulas.
//
// A sweep is split into jobs, one per (cluster, algorithm): a job simulates every layout on one
// platform, in its own process. Jobs run in parallel on local cores (--jobs), in shards
// (--shard i/N: job j belongs to shard j mod N), or over MPI ranks (each rank a shard, results
// gathered on rank 0); the results are the same whichever way a sweep was split.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "app/scenario/scenario.h"
#include "models/reliability.h"
#include "sim/startup.h"
#include "sim/training.h"

namespace tandem::app {

inline constexpr int kPlanFormatVersion = 1;
inline constexpr size_t kMaxPlanPoints = 100000;
inline constexpr size_t kMaxPlanAxisValues = 64;
// A plan file: a few axes of at most kMaxPlanAxisValues values each, a few KiB.
inline constexpr uint64_t kMaxPlanFileBytes = uint64_t{4} << 20;  // 4 MiB

// How reliability is modelled for every point (docs/plan.md, docs/reliability.md).
struct PlanReliability {
  std::vector<std::string> rates{"llama3"};   // axis: failure-rate tables (models::failure_rates)
  std::vector<std::string> recovery{"none"};  // axis: "none" or policies joined by '+': "retry+reroute+shrink"
  double rate_scale = 1;                      // every rate times this
  double checkpoint_bytes_per_param = 14;     // bf16 weights + fp32 master weights and Adam moments
  double checkpoint_write_GBps = 50;          // the job's aggregate write bandwidth to storage
  double checkpoint_read_GBps = 50;
  double checkpoint_blocking = 1;   // share of the write that stalls training (1: synchronous)
  std::string interval = "daly";    // "daly", "young", or a number of seconds
  double interval_s = 0;            // that number of seconds, when interval is one
  double detection_s = 300;         // failure -> job known to be down (watchdog, health checks)
  double rendezvous_s = 300;        // rescheduling and the launcher's rendezvous
  double in_place_recovery_s = 60;  // one in-place recovery (detection, communicator rebuild)
};

struct Plan {
  std::string file;
  std::string name;
  std::string description;
  models::ClusterSpec cluster;  // the base the axes modify
  NetworkChoice network = NetworkChoice::kFluid;
  // `tandem plan --calibration FILE`: applied to every simulated cluster (each must be of its preset).
  std::optional<CalibrationProfile> calibration;
  // Axes (each non-empty): the product is swept.
  std::vector<std::string> presets;
  std::vector<int> gpus;
  std::vector<double> nic_gbps;
  std::vector<double> oversubscription;
  std::vector<std::string> algorithms;
  TrainingWorkload workload;  // its layouts are an axis too
  PlanReliability reliability;
  bool csv = true;
  bool json = true;
};

// Strict like scenarios (app/scenario/scenario.h): Error(kFormat) "file:line:column: ..." for anything the
// file gets wrong, Error(kIo) when it cannot be read.
Plan load_plan(const std::string& path);
Plan parse_plan(std::string_view yaml_text, const std::string& file);

// One simulation job: a cluster and an algorithm, every layout on it.
struct PlanJob {
  models::ClusterSpec cluster;
  std::string preset;
  int gpus = 0;
  double nic_gbps = 0;
  double oversubscription = 1;
  std::string algorithm;
  std::vector<models::TrainingConfig> configs;  // one per layout
  double cost = 0;                              // relative effort, for the time-left estimate
};

// One point of the product, in a fixed order: presets, gpus, nic_gbps, oversubscription,
// algorithms, layouts, rates, recovery (the last varying fastest).
struct PlanPoint {
  size_t index = 0;
  size_t job = 0;
  size_t layout = 0;
  std::string rates;
  std::string recovery;
};

std::vector<PlanJob> plan_jobs(const Plan& plan);
std::vector<PlanPoint> plan_points(const Plan& plan);

// What one job produced (shipped between processes as JSON).
struct JobOutcome {
  bool ok = false;
  std::string error;  // the job as a whole failed (its process died)
  sim::StartupResult startup;
  std::vector<sim::TrainingStepResult> steps;
};
void to_json(nlohmann::json& j, const JobOutcome& outcome);
void from_json(const nlohmann::json& j, JobOutcome& outcome);
// Runs one job here (startup in a child, then the steps in this process).
JobOutcome run_plan_job(const Plan& plan, const PlanJob& job);

// One row of the results.
struct PlanRow {
  PlanPoint point;
  const PlanJob* job = nullptr;
  std::string layout;
  bool ok = false;
  std::string error;
  sim::TrainingStepResult step;
  double startup_s = 0;
  double mtbf_hours = 0;
  double effective_mtbf_hours = 0;
  double in_place_fraction = 0;
  double checkpoint_write_s = 0;
  double checkpoint_interval_s = 0;
  double restart_s = 0;  // detection + rendezvous + communicator init + checkpoint load
  double ettr = 0;
  double goodput = 0;  // ETTR x achieved MFU
  double gpu_hours_per_1T_tokens = 0;
};

// Reliability for one point from its job's outcome (pure arithmetic).
PlanRow make_row(const Plan& plan, const PlanJob& job, const PlanPoint& point, const JobOutcome& outcome);

struct PlanRunOptions {
  int jobs = 1;         // local processes at once
  int shard_index = 0;  // this shard, of shard_count
  int shard_count = 1;
  // Called after each job ends: jobs done, of jobs in this shard, and the estimated seconds left.
  std::function<void(size_t, size_t, double)> progress;
};

// The jobs of this shard, in job order (others are left out).
std::vector<size_t> shard_jobs(size_t job_count, int shard_index, int shard_count);
// Runs the shard's jobs (in parallel child processes); outcomes by job index (empty for other shards).
std::vector<std::optional<JobOutcome>> run_plan_jobs(const Plan& plan, const std::vector<PlanJob>& jobs,
                                                     const PlanRunOptions& options);
// The rows of every point whose job has an outcome, in point order.
std::vector<PlanRow> plan_rows(const Plan& plan, const std::vector<PlanJob>& jobs,
                               const std::vector<std::optional<JobOutcome>>& outcomes);

std::vector<std::string> plan_csv_columns();
std::string plan_csv(const std::vector<PlanRow>& rows);
nlohmann::json plan_json(const Plan& plan, const std::vector<PlanRow>& rows,
                         const std::vector<std::optional<JobOutcome>>& outcomes, const std::vector<PlanJob>& jobs);
// The printed summary: best configuration per cluster size, the Pareto front of step time vs GPU
// count, start-up time per cluster size, and what did not run.
std::string format_plan_summary(const Plan& plan, const std::vector<PlanRow>& rows,
                                const std::vector<std::optional<JobOutcome>>& outcomes,
                                const std::vector<PlanJob>& jobs);

}  // namespace tandem::app
