// Reliability and goodput of a training job: component failure rates -> job MTBF; the checkpoint
// interval (Young, Daly); restart cost; ETTR and goodput; recovery in place (retry, reroute,
// shrink) versus a job restart. Pure arithmetic, no I/O. Formulas, the default rate table and
// where it comes from: docs/reliability.md.
//
// Units: rates are failures per GPU-hour or per node-hour (FailureCause::unit), MTBF in hours
// where the name says _hours, every duration otherwise in seconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::models {

// Ranges of the inputs, checked where they are read (command line): beyond them a number is a typo
// and the arithmetic loses its meaning (a rate scale of 1e308 gave infinite rates).
inline constexpr double kMaxRateScale = 1e6;              // x every failure rate
inline constexpr double kMaxCauseRatePerMillion = 1e9;    // failures per 10^6 unit-hours, one cause
inline constexpr double kMaxDuration_s = 365.0 * 86400;   // any one time: a checkpoint, a restart, ...

// What could recover an interruption in place, without restarting the job from its checkpoint.
enum class RecoveryPolicy : uint8_t {
  kNone,     // only a job restart helps (host maintenance, software bug, silent data corruption...)
  kRetry,    // the failed operation is retried (a transient network fault)
  kReroute,  // the communicator routes around a dead link or NIC (another rail, PXN)
  kShrink,   // the job drops the failed GPU's ranks and goes on (ncclCommShrink)
};
std::string_view name(RecoveryPolicy policy);
// "none", "retry", "reroute", "shrink". Throws Error(kInvalidArgument) listing them.
RecoveryPolicy parse_recovery_policy(std::string_view text);

// Whether a failure's rate counts per GPU or per node (host parts: PSU, SSD, CPU, chassis...).
enum class RateUnit : uint8_t { kPerGpuHour, kPerNodeHour };
std::string_view name(RateUnit unit);  // "GPU-h", "node-h"

struct FailureCause {
  std::string name;          // a key: "faulty_gpu"
  std::string description;   // "Faulty GPU (incl. NVLink)"
  double rate_per_hour = 0;  // failures per GPU-hour or per node-hour (unit), >= 0
  RateUnit unit = RateUnit::kPerGpuHour;
  RecoveryPolicy recoverable_by = RecoveryPolicy::kNone;
  double in_place_share = 0;  // share of this cause's failures that recoverable_by recovers in place, [0, 1]
};

struct FailureRates {
  std::string preset;  // "llama3", "rsc1", "rsc2"
  std::string source;  // where the figures come from, one line
  std::vector<FailureCause> causes;
};

// The named rate tables (docs/reliability.md): "llama3" (the Llama 3 405B run's 419 unexpected
// interruptions in 54 days on 16,384 H100s, by cause), "rsc1" and "rsc2" (Meta's research
// clusters' hardware failure rates per node-day, split over Llama 3's hardware causes in Llama 3's
// proportions). Throws Error(kInvalidArgument) listing the names.
FailureRates failure_rates(std::string_view preset);
std::vector<std::string> failure_rate_preset_names();

// Multiplies every rate by `factor` (>= 0). Throws Error(kInvalidArgument) for a negative factor.
void scale_rates(FailureRates& rates, double factor);
// Sets one cause's rate (in its own unit); '-' is accepted for '_' in the name. Throws
// Error(kInvalidArgument) for an unknown cause (listing the known ones) or a negative rate.
void set_cause_rate(FailureRates& rates, std::string_view cause, double rate_per_hour);

// One cause's failures per hour for a job of `gpus` GPUs on nodes of `gpus_per_node`: per-GPU
// rates times gpus, per-node rates times ceil(gpus / gpus_per_node). Preconditions: gpus >= 1,
// gpus_per_node >= 1 (else Error(kInvalidArgument)).
double job_failure_rate_per_hour(const FailureCause& cause, int gpus, int gpus_per_node);
double job_failure_rate_per_hour(const FailureRates& rates, int gpus, int gpus_per_node);

// M = 1 / (sum of the job's failure rates), in hours; +infinity when every rate is 0.
double job_mtbf_hours(const FailureRates& rates, int gpus, int gpus_per_node);

// Young (CACM 1974): sqrt(2 delta M). delta = checkpoint write time, M = MTBF, both in seconds, > 0.
double young_interval_s(double checkpoint_write_s, double mtbf_s);
// Daly (FGCS 2006), the higher-order optimum:
//   sqrt(2 delta M) [1 + 1/3 sqrt(delta / 2M) + 1/9 (delta / 2M)] - delta   for delta < 2M, else M.
// Throws Error(kInvalidArgument) unless both are > 0; M may be +infinity (then +infinity).
double daly_interval_s(double checkpoint_write_s, double mtbf_s);

// What a job restart costs beyond the lost work: detection, then u0 = rendezvous + communicator
// initialisation + checkpoint load. Seconds, each >= 0.
struct RestartCost {
  double detection_s = 0;          // from the failure until the job is known to be down
  double rendezvous_s = 0;         // rescheduling, replacement nodes, the launcher's rendezvous
  double communicator_init_s = 0;  // NCCL bootstrap and connection setup (sim/startup.h)
  double checkpoint_load_s = 0;    // reading the checkpoint back
  double restart_s() const { return rendezvous_s + communicator_init_s + checkpoint_load_s; }  // u0
  double total_s() const { return detection_s + restart_s(); }
};

// The inputs of the goodput model: independent of the step time. Durations in seconds.
struct GoodputInputs {
  double mtbf_s = 0;                 // M: all interruptions, > 0 (+infinity allowed)
  double checkpoint_interval_s = 0;  // delta_t, > 0
  double checkpoint_blocking_s = 0;  // delta_block: training stalls this long per checkpoint, >= 0
  RestartCost restart;               // a job restart from the checkpoint
  double in_place_fraction = 0;      // f: interruptions recovered in place, [0, 1]
  double in_place_recovery_s = 0;    // cost of one in-place recovery (detection included), >= 0
  double program_goodput = 1;        // the useful fraction of running time, e.g. MFU, (0, 1]
};

struct GoodputResult {
  double effective_mtbf_s = 0;       // M / (1 - f): mean time between the restarts that remain
  double lost_work_s = 0;            // delta_t / 2: work lost per restart, on average
  double restart_loss_s = 0;         // lost work + u0 + detection: wall time one restart costs
  double checkpoint_efficiency = 0;  // 1 - delta_block / delta_t
  double failure_efficiency = 0;     // 1 - restart_loss / M_eff - f x in-place cost / M
  double ettr = 0;                   // effective training time ratio, the product, clamped to [0, 1]
  double goodput = 0;                // ettr x program_goodput
};

// The first-order ETTR (docs/reliability.md):
//   ETTR = (1 - delta_block / delta_t) (1 - (delta_t/2 + u0 + t_detect) / M_eff - f c / M)
// each factor and the product clamped to [0, 1]; with f = 0 this is
//   (1 - delta_block / delta_t) (1 - (delta_t/2 + u0 + t_detect) / M).
// Throws Error(kInvalidArgument) naming the field for an input out of its range.
GoodputResult goodput(const GoodputInputs& inputs);

struct RecoveryPolicies {
  bool retry = false;
  bool reroute = false;
  bool shrink = false;
  bool enabled(RecoveryPolicy policy) const;
};

// f: the share of the job's interruptions that the enabled policies recover in place, each cause
// weighted by its rate (per-node rates converted with gpus_per_node >= 1). 0 when every rate is 0.
double in_place_fraction(const FailureRates& rates, const RecoveryPolicies& policies, int gpus_per_node);

// The f that raises the MTBF between restarts from `mtbf` to `target` (any one unit, both > 0):
// 1 - mtbf / target, or 0 when target <= mtbf.
double required_in_place_fraction(double mtbf, double target);

// ---- One job: everything above together (what `tandem reliability` prints) --------------------

// delta from the checkpoint's size and the storage's write bandwidth for the whole job:
// bytes_per_gpu x gpus / (write_GBps x 10^9), in seconds. Throws Error(kInvalidArgument) unless
// bytes_per_gpu > 0, gpus >= 1 and write_GBps > 0.
double checkpoint_write_s(int64_t bytes_per_gpu, int gpus, double write_GBps);

// How the checkpoint interval is chosen: Daly's or Young's optimum at the MTBF between restarts,
// or a fixed interval.
enum class CheckpointIntervalRule : uint8_t { kDaly, kYoung, kFixed };

// What one job is, for the reliability model. Durations in seconds.
struct JobReliabilityInputs {
  FailureRates rates;  // at least one rate > 0
  int gpus = 1;        // >= 1
  int gpus_per_node = 1;
  RecoveryPolicies policies;         // what recovers in place
  double checkpoint_write_s = 0;     // delta, > 0
  double checkpoint_blocking_s = 0;  // delta_block, [0, delta]
  CheckpointIntervalRule interval_rule = CheckpointIntervalRule::kDaly;
  double fixed_interval_s = 0;              // kFixed: the interval, > 0
  RestartCost restart;                      // its checkpoint_load_s is the checkpoint's load time
  double in_place_recovery_s = 0;           // cost of one in-place recovery, >= 0
  double program_goodput = 1;               // e.g. MFU, (0, 1]
  std::optional<double> target_mtbf_hours;  // an MTBF between restarts to reach, > 0
};

// goodput() at one in-place fraction f, with the checkpoint interval the rule gives at the MTBF
// between restarts, M / (1 - f) (at M when f = 1: with no restarts left it would be unbounded).
struct GoodputAtInterval {
  double checkpoint_interval_s = 0;
  GoodputResult result;
};

// One cause's part in the job's failures.
struct CauseFailures {
  double failures_per_hour = 0;  // job_failure_rate_per_hour for this cause
  double share = 0;              // of the job's failures, [0, 1]
};

struct JobReliability {
  double mtbf_hours = 0;                             // M (job_mtbf_hours)
  double failures_per_hour = 0;                      // 1 / M
  std::vector<CauseFailures> causes;                 // per cause of the inputs' rates, in their order
  double gpu_hours_per_interruption = 0;             // M x gpus
  double young_interval_s = 0;                       // at M
  double daly_interval_s = 0;                        // at M
  double in_place_fraction = 0;                      // f (in_place_fraction)
  GoodputAtInterval restart_only;                    // f = 0: every interruption restarts the job
  GoodputAtInterval with_in_place;                   // the policies' f
  std::optional<double> required_in_place_fraction;  // for target_mtbf_hours, when given
};

// The job's MTBF, its failures by cause, the checkpoint intervals, and goodput with and without
// recovery in place. Throws Error(kInvalidArgument) when every rate is 0, or from the functions
// above for an input out of its range.
JobReliability assess_job_reliability(const JobReliabilityInputs& inputs);

}  // namespace tandem::models
