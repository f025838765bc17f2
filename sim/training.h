// Training steps on a simulated cluster: every collective of a step (models::build_step) simulated
// on its communicator groups, all instances of a group at once (so that groups sharing a link share
// it), each distinct collective once; then the step's timeline (models::run_timeline) with the
// compute between them. The unit of work behind `workload: training` scenarios and `tandem plan`.
// Like run_sweep, simulate_training runs in a child process by default (one SimGrid platform per
// process: sim/isolated.h), so one caller can simulate several clusters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/cluster.h"
#include "models/step_memory.h"
#include "models/workload.h"
#include "sim/collective_timer.h"
#include "sim/simulator.h"

namespace tandem::sim {

// One task of the step's timeline: on which stream, what, when.
struct TimelineSlice {
  int stream = 0;  // index into TrainingStepResult::streams
  int label = 0;   // index into TrainingStepResult::labels
  double start_s = 0;
  double end_s = 0;
  bool comm = false;
};

struct TrainingStepResult {
  bool ok = false;
  std::string error;  // why not (does not fit, bad layout): one line
  std::string layout;
  models::DerivedLayout derived;
  models::MemoryBreakdown memory;        // the analytic sum (allocated at the peak + runtime)
  models::StepMemoryResult step_memory;  // the step's memory timeline through the allocator model
  bool has_step_memory = false;          // false: the layout failed before its timeline ran
  double step_s = 0;
  int stage = 0;  // the pipeline stage the breakdown is of
  double compute_s = 0;
  double exposed_comm_s = 0;
  double bubble_s = 0;
  double achieved_mfu = 0;          // model FLOPs / (step time x GPUs x peak)
  double model_tflops_per_gpu = 0;  // model FLOPs / (step time x GPUs), in TFLOP/s
  double tokens_per_s_per_gpu = 0;
  std::vector<models::ExposedComm> top;  // the collectives by exposed time (at most kTopCollectives)
  std::vector<CollectiveTiming> collectives;
  // With TrainingRequest::keep_timeline: every task of the step, its stream and label by index.
  std::vector<std::string> streams;  // "s0/compute", "s0/dp", ...
  std::vector<std::string> labels;   // "fwd", "FSDP all_gather (fwd)", ...
  std::vector<TimelineSlice> timeline;
};

inline constexpr size_t kTopCollectives = 8;

// The memory a layout needs per GPU, as `fits`, `memory_GB` and the CSVs report it: the timeline's
// peak reserved plus the runtime outside the allocator; the analytic sum where the timeline did not
// run to the end (a layout that fails the analytic check, or runs out of memory).
double memory_needed_bytes(const TrainingStepResult& result);

struct TrainingRequest {
  models::ClusterSpec cluster;
  NetworkModel network;
  std::vector<models::TrainingConfig> configs;  // each simulated on the whole cluster
  bool keep_timeline = false;                   // fill TrainingStepResult::timeline (for traces)
  // The memory timeline over every microbatch (exact), or over the first pp + 2 (interleaved: 3 pp)
  // only: the cheap path `tandem plan` takes, whose peak allocated is the same and peak reserved
  // within 1% (models/step_memory.h).
  bool memory_all_microbatches = true;
};

// One result per config, in order; a config that cannot run (does not fit, bad layout) gets ok =
// false and its reason rather than an exception. Other errors (a bad cluster) throw.
std::vector<TrainingStepResult> simulate_training(const TrainingRequest& request, bool isolated = true);

// A result as JSON, its timeline included when it was kept: what a child process sends back
// (sim/isolated.h), and a step's entry in results.json and plan.json.
void to_json(nlohmann::json& j, const TrainingStepResult& result);
void from_json(const nlohmann::json& j, TrainingStepResult& result);

}  // namespace tandem::sim
