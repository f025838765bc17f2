#include "models/reliability.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace tandem::models {

namespace {

// The Llama 3 405B run (The Llama 3 Herd of Models, arXiv 2407.21783, section 3.3.4, Table 5):
// 419 unexpected interruptions in 54 days on 16,384 H100 GPUs in 2,048 nodes of 8.
// (Table 5 prints 30.1% beside "Faulty GPU" 148; 148 / 419 is 35.3%, and only with 35.3% do the
// percentages add up to 100: the counts are what this table uses.)
constexpr double kLlama3Days = 54;
constexpr int kLlama3Gpus = 16384;
constexpr int kLlama3GpusPerNode = 8;
constexpr double kLlama3GpuHours = kLlama3Gpus * kLlama3Days * 24;
constexpr double kLlama3NodeHours = kLlama3Gpus / kLlama3GpusPerNode * kLlama3Days * 24;

// Meta's research clusters (Kokolis et al., HPCA 2025, arXiv 2410.21680): hardware failures per
// node-day, 8 A100 per node.
constexpr double kRsc1FailuresPerNodeDay = 6.50e-3;
constexpr double kRsc2FailuresPerNodeDay = 2.34e-3;

// Share of NCCL watchdog timeouts assumed transient (a retry succeeds): the paper does not say;
// half is an assumption, documented in docs/reliability.md.
constexpr double kTransientWatchdogShare = 0.5;

struct Llama3Cause {
  const char* name;
  const char* description;
  int count;  // of the 419
  RateUnit unit;
  RecoveryPolicy recoverable_by;
  double in_place_share;
  bool hardware;  // counted in the hardware rate the RSC papers report
};

// Policy mapping (docs/reliability.md, "Which policy recovers what"): a failed GPU (any of its
// parts) is dropped by shrink; a dead switch, cable or NIC is routed around; a transient watchdog
// timeout is retried; a lost host, a bug, corrupted data or a failed dependency needs a restart.
constexpr std::array<Llama3Cause, 18> kLlama3Causes = {{
    {"faulty_gpu", "Faulty GPU (incl. NVLink)", 148, RateUnit::kPerGpuHour, RecoveryPolicy::kShrink, 1.0, true},
    {"gpu_hbm3", "GPU HBM3 memory", 72, RateUnit::kPerGpuHour, RecoveryPolicy::kShrink, 1.0, true},
    {"software_bug", "Software bug", 54, RateUnit::kPerGpuHour, RecoveryPolicy::kNone, 0.0, false},
    {"network", "Network switch/cable", 35, RateUnit::kPerGpuHour, RecoveryPolicy::kReroute, 1.0, true},
    {"host_maintenance", "Host maintenance (unplanned)", 32, RateUnit::kPerNodeHour, RecoveryPolicy::kNone, 0.0, false},
    {"gpu_sram", "GPU SRAM memory", 19, RateUnit::kPerGpuHour, RecoveryPolicy::kShrink, 1.0, true},
    {"gpu_gsp", "GPU system processor (GSP)", 17, RateUnit::kPerGpuHour, RecoveryPolicy::kShrink, 1.0, true},
    {"nic", "NIC", 7, RateUnit::kPerGpuHour, RecoveryPolicy::kReroute, 1.0, true},
    {"nccl_watchdog", "NCCL watchdog timeout", 7, RateUnit::kPerGpuHour, RecoveryPolicy::kRetry,
     kTransientWatchdogShare, false},
    {"silent_data_corruption", "Silent data corruption", 6, RateUnit::kPerGpuHour, RecoveryPolicy::kNone, 0.0, true},
    {"gpu_thermal", "GPU thermal interface / sensor", 6, RateUnit::kPerGpuHour, RecoveryPolicy::kShrink, 1.0, true},
    {"ssd", "SSD", 3, RateUnit::kPerNodeHour, RecoveryPolicy::kNone, 0.0, true},
    {"power_supply", "Power supply", 3, RateUnit::kPerNodeHour, RecoveryPolicy::kNone, 0.0, true},
    {"chassis", "Server chassis", 2, RateUnit::kPerNodeHour, RecoveryPolicy::kNone, 0.0, true},
    {"io_board", "IO expansion board", 2, RateUnit::kPerNodeHour, RecoveryPolicy::kNone, 0.0, true},
    {"dependency", "Dependency", 2, RateUnit::kPerGpuHour, RecoveryPolicy::kNone, 0.0, false},
    {"cpu", "CPU", 2, RateUnit::kPerNodeHour, RecoveryPolicy::kNone, 0.0, true},
    {"system_memory", "System memory", 2, RateUnit::kPerNodeHour, RecoveryPolicy::kNone, 0.0, true},
}};

constexpr std::array<const char*, 3> kReliabilityPresetNames = {"llama3", "rsc1", "rsc2"};

FailureRates llama3_rates() {
  FailureRates rates{
      "llama3", "Llama 3 405B: 419 unexpected interruptions in 54 days on 16,384 H100 (arXiv 2407.21783, Table 5)", {}};
  for (const Llama3Cause& c : kLlama3Causes) {
    const double exposure_hours = c.unit == RateUnit::kPerGpuHour ? kLlama3GpuHours : kLlama3NodeHours;
    rates.causes.push_back(
        {c.name, c.description, c.count / exposure_hours, c.unit, c.recoverable_by, c.in_place_share});
  }
  return rates;
}

// The RSC papers give one hardware rate per node-day; it is split over Llama 3's hardware causes in
// their Llama 3 proportions, so that the policy mapping carries over (an assumption).
FailureRates rsc_rates(const char* preset, const char* cluster, double failures_per_node_day) {
  FailureRates rates{preset,
                     fmt::format("Meta {}: {:g} hardware failures per 1000 node-days (arXiv 2410.21680), split over "
                                 "Llama 3's hardware causes",
                                 cluster, failures_per_node_day * 1000),
                     {}};
  int hardware_count = 0;
  for (const Llama3Cause& c : kLlama3Causes) hardware_count += c.hardware ? c.count : 0;
  for (const Llama3Cause& c : kLlama3Causes) {
    if (!c.hardware) continue;
    rates.causes.push_back({c.name, c.description, failures_per_node_day / 24 * c.count / hardware_count,
                            RateUnit::kPerNodeHour, c.recoverable_by, c.in_place_share});
  }
  return rates;
}

std::string normalized(std::string_view text) {
  std::string out(text);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

void require_positive(double value, const char* what) {
  if (!(value > 0)) fail(ErrorCode::kInvalidArgument, "{} must be > 0, not {}", what, value);
}

void require_non_negative(double value, const char* what) {
  if (!(value >= 0) || !std::isfinite(value)) {
    fail(ErrorCode::kInvalidArgument, "{} must be a finite number >= 0, not {}", what, value);
  }
}

}  // namespace

std::string_view name(RecoveryPolicy policy) {
  switch (policy) {
    case RecoveryPolicy::kNone:
      return "none";
    case RecoveryPolicy::kRetry:
      return "retry";
    case RecoveryPolicy::kReroute:
      return "reroute";
    case RecoveryPolicy::kShrink:
      return "shrink";
  }
  return "?";
}

RecoveryPolicy parse_recovery_policy(std::string_view text) {
  for (RecoveryPolicy policy :
       {RecoveryPolicy::kNone, RecoveryPolicy::kRetry, RecoveryPolicy::kReroute, RecoveryPolicy::kShrink}) {
    if (text == name(policy)) return policy;
  }
  fail(ErrorCode::kInvalidArgument, "unknown recovery policy '{}' (known: none, retry, reroute, shrink)", text);
}

std::string_view name(RateUnit unit) { return unit == RateUnit::kPerGpuHour ? "GPU-h" : "node-h"; }

FailureRates failure_rates(std::string_view preset) {
  if (preset == "llama3") return llama3_rates();
  if (preset == "rsc1") return rsc_rates("rsc1", "RSC-1 (16k A100)", kRsc1FailuresPerNodeDay);
  if (preset == "rsc2") return rsc_rates("rsc2", "RSC-2 (8k A100)", kRsc2FailuresPerNodeDay);
  fail(ErrorCode::kInvalidArgument, "unknown failure-rate preset '{}' (known: llama3, rsc1, rsc2)", preset);
}

std::vector<std::string> failure_rate_preset_names() { return {kReliabilityPresetNames.begin(), kReliabilityPresetNames.end()}; }

void scale_rates(FailureRates& rates, double factor) {
  require_non_negative(factor, "the rate scale");
  for (FailureCause& cause : rates.causes) cause.rate_per_hour *= factor;
}

void set_cause_rate(FailureRates& rates, std::string_view cause, double rate_per_hour) {
  require_non_negative(rate_per_hour, "a failure rate");
  const std::string key = normalized(cause);
  std::string known;
  for (FailureCause& c : rates.causes) {
    if (c.name == key) {
      c.rate_per_hour = rate_per_hour;
      return;
    }
    known += (known.empty() ? "" : ", ") + c.name;
  }
  fail(ErrorCode::kInvalidArgument, "unknown failure cause '{}' in the {} rates (known: {})", cause, rates.preset,
       known);
}

double job_failure_rate_per_hour(const FailureCause& cause, int gpus, int gpus_per_node) {
  if (gpus < 1) fail(ErrorCode::kInvalidArgument, "a job needs at least one GPU, not {}", gpus);
  if (gpus_per_node < 1) fail(ErrorCode::kInvalidArgument, "gpus_per_node must be >= 1, not {}", gpus_per_node);
  const int nodes = (gpus + gpus_per_node - 1) / gpus_per_node;
  return cause.rate_per_hour * (cause.unit == RateUnit::kPerGpuHour ? gpus : nodes);
}

double job_failure_rate_per_hour(const FailureRates& rates, int gpus, int gpus_per_node) {
  double total = 0;
  for (const FailureCause& cause : rates.causes) total += job_failure_rate_per_hour(cause, gpus, gpus_per_node);
  return total;
}

double job_mtbf_hours(const FailureRates& rates, int gpus, int gpus_per_node) {
  const double rate = job_failure_rate_per_hour(rates, gpus, gpus_per_node);
  return rate > 0 ? 1 / rate : std::numeric_limits<double>::infinity();
}

double young_interval_s(double checkpoint_write_s, double mtbf_s) {
  require_positive(checkpoint_write_s, "the checkpoint write time");
  require_positive(mtbf_s, "the MTBF");
  return std::sqrt(2 * checkpoint_write_s * mtbf_s);
}

// Daly's own examples (FGCS 2006, with R = 10 min, delta = 5 min) come out of this formula:
// M = 24 h -> 116.7 min, 6 h -> 56.7 min, 15 min -> 9.14 min. The restart time R does not enter the
// optimum interval (it only scales the total run time), so the examples hold with any R.
double daly_interval_s(double checkpoint_write_s, double mtbf_s) {
  require_positive(checkpoint_write_s, "the checkpoint write time");
  require_positive(mtbf_s, "the MTBF");
  if (std::isinf(mtbf_s)) return mtbf_s;
  const double delta = checkpoint_write_s;
  if (delta >= 2 * mtbf_s) return mtbf_s;
  const double ratio = delta / (2 * mtbf_s);
  return std::sqrt(2 * delta * mtbf_s) * (1 + std::sqrt(ratio) / 3 + ratio / 9) - delta;
}

GoodputResult goodput(const GoodputInputs& in) {
  require_positive(in.mtbf_s, "mtbf_s");
  require_positive(in.checkpoint_interval_s, "checkpoint_interval_s");
  if (std::isinf(in.checkpoint_interval_s)) {
    fail(ErrorCode::kInvalidArgument, "checkpoint_interval_s must be finite");
  }
  require_non_negative(in.checkpoint_blocking_s, "checkpoint_blocking_s");
  require_non_negative(in.restart.detection_s, "restart.detection_s");
  require_non_negative(in.restart.rendezvous_s, "restart.rendezvous_s");
  require_non_negative(in.restart.communicator_init_s, "restart.communicator_init_s");
  require_non_negative(in.restart.checkpoint_load_s, "restart.checkpoint_load_s");
  require_non_negative(in.in_place_recovery_s, "in_place_recovery_s");
  if (!(in.in_place_fraction >= 0 && in.in_place_fraction <= 1)) {
    fail(ErrorCode::kInvalidArgument, "in_place_fraction must be in [0, 1], not {}", in.in_place_fraction);
  }
  if (!(in.program_goodput > 0 && in.program_goodput <= 1)) {
    fail(ErrorCode::kInvalidArgument, "program_goodput must be in (0, 1], not {}", in.program_goodput);
  }
  auto clamp01 = [](double x) { return std::clamp(x, 0.0, 1.0); };
  GoodputResult out;
  const double restart_share = 1 - in.in_place_fraction;
  out.effective_mtbf_s = restart_share > 0 ? in.mtbf_s / restart_share : std::numeric_limits<double>::infinity();
  out.lost_work_s = in.checkpoint_interval_s / 2;
  out.restart_loss_s = out.lost_work_s + in.restart.total_s();
  out.checkpoint_efficiency = clamp01(1 - in.checkpoint_blocking_s / in.checkpoint_interval_s);
  // Interruptions arrive at 1/M; (1 - f) of them cost a restart, f of them an in-place recovery.
  out.failure_efficiency = clamp01(1 - out.restart_loss_s / out.effective_mtbf_s -
                                   in.in_place_fraction * in.in_place_recovery_s / in.mtbf_s);
  out.ettr = clamp01(out.checkpoint_efficiency * out.failure_efficiency);
  out.goodput = out.ettr * in.program_goodput;
  return out;
}

bool RecoveryPolicies::enabled(RecoveryPolicy policy) const {
  switch (policy) {
    case RecoveryPolicy::kNone:
      return false;
    case RecoveryPolicy::kRetry:
      return retry;
    case RecoveryPolicy::kReroute:
      return reroute;
    case RecoveryPolicy::kShrink:
      return shrink;
  }
  return false;
}

double in_place_fraction(const FailureRates& rates, const RecoveryPolicies& policies, int gpus_per_node) {
  // The share depends on the mix of per-GPU and per-node rates only: one node's worth of GPUs.
  double total = 0, in_place = 0;
  for (const FailureCause& cause : rates.causes) {
    const double rate = job_failure_rate_per_hour(cause, gpus_per_node, gpus_per_node);
    total += rate;
    if (policies.enabled(cause.recoverable_by)) in_place += rate * std::clamp(cause.in_place_share, 0.0, 1.0);
  }
  return total > 0 ? in_place / total : 0;
}

double required_in_place_fraction(double mtbf, double target) {
  require_positive(mtbf, "the MTBF");
  require_positive(target, "the target MTBF");
  return target <= mtbf ? 0 : 1 - mtbf / target;
}

double checkpoint_write_s(int64_t bytes_per_gpu, int gpus, double write_GBps) {
  if (bytes_per_gpu <= 0) {
    fail(ErrorCode::kInvalidArgument, "the checkpoint bytes per GPU must be > 0, not {}", bytes_per_gpu);
  }
  if (gpus < 1) fail(ErrorCode::kInvalidArgument, "a job needs at least one GPU, not {}", gpus);
  require_positive(write_GBps, "the checkpoint write bandwidth");
  return static_cast<double>(bytes_per_gpu) * gpus / (write_GBps * 1e9);
}

namespace {

// The interval the inputs' rule gives at MTBF `mtbf_s`.
double checkpoint_interval_s(const JobReliabilityInputs& in, double mtbf_s) {
  switch (in.interval_rule) {
    case CheckpointIntervalRule::kYoung:
      return young_interval_s(in.checkpoint_write_s, mtbf_s);
    case CheckpointIntervalRule::kDaly:
      return daly_interval_s(in.checkpoint_write_s, mtbf_s);
    case CheckpointIntervalRule::kFixed:
      require_positive(in.fixed_interval_s, "the fixed checkpoint interval");
      return in.fixed_interval_s;
  }
  return in.fixed_interval_s;
}

GoodputAtInterval goodput_at(const JobReliabilityInputs& in, double mtbf_s, double fraction) {
  GoodputAtInterval out;
  const double effective_s = fraction < 1 ? mtbf_s / (1 - fraction) : std::numeric_limits<double>::infinity();
  out.checkpoint_interval_s = checkpoint_interval_s(in, std::isinf(effective_s) ? mtbf_s : effective_s);
  GoodputInputs g;
  g.mtbf_s = mtbf_s;
  g.checkpoint_interval_s = out.checkpoint_interval_s;
  g.checkpoint_blocking_s = in.checkpoint_blocking_s;
  g.restart = in.restart;
  g.in_place_fraction = fraction;
  g.in_place_recovery_s = in.in_place_recovery_s;
  g.program_goodput = in.program_goodput;
  out.result = goodput(g);
  return out;
}

}  // namespace

JobReliability assess_job_reliability(const JobReliabilityInputs& in) {
  JobReliability out;
  out.mtbf_hours = job_mtbf_hours(in.rates, in.gpus, in.gpus_per_node);
  if (std::isinf(out.mtbf_hours)) fail(ErrorCode::kInvalidArgument, "every failure rate is 0: the job never fails");
  out.failures_per_hour = 1 / out.mtbf_hours;
  for (const FailureCause& cause : in.rates.causes) {
    const double rate = job_failure_rate_per_hour(cause, in.gpus, in.gpus_per_node);
    out.causes.push_back({rate, rate / out.failures_per_hour});
  }
  out.gpu_hours_per_interruption = out.mtbf_hours * in.gpus;
  const double mtbf_s = out.mtbf_hours * 3600;
  out.in_place_fraction = in_place_fraction(in.rates, in.policies, in.gpus_per_node);
  out.restart_only = goodput_at(in, mtbf_s, 0);
  out.with_in_place = goodput_at(in, mtbf_s, out.in_place_fraction);
  out.young_interval_s = young_interval_s(in.checkpoint_write_s, mtbf_s);
  out.daly_interval_s = daly_interval_s(in.checkpoint_write_s, mtbf_s);
  if (in.target_mtbf_hours) {
    out.required_in_place_fraction = required_in_place_fraction(out.mtbf_hours, *in.target_mtbf_hours);
  }
  return out;
}

}  // namespace tandem::models
