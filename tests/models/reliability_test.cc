// Reliability and goodput math against the published figures it is built from
// (shared/docs/workloads-reliability.md sections 2 and 3; docs/reliability.md).
#include "models/reliability.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace tandem::models {
namespace {

constexpr double kMinute = 60;
constexpr double kHour = 3600;

int total_llama3_count(const FailureRates& rates) {
  // Back from rates to counts: per-GPU causes over 16,384 x 54 x 24 GPU-hours, per-node over 2,048 x 54 x 24.
  double count = 0;
  for (const FailureCause& cause : rates.causes) {
    count += cause.rate_per_hour * (cause.unit == RateUnit::kPerGpuHour ? 16384.0 : 2048.0) * 54 * 24;
  }
  return static_cast<int>(std::lround(count));
}

TEST(FailureRates, Llama3TableAndJobMtbf) {
  const FailureRates rates = failure_rates("llama3");
  EXPECT_EQ(rates.causes.size(), 18u);
  EXPECT_EQ(total_llama3_count(rates), 419);
  EXPECT_EQ(rates.causes[0].name, "faulty_gpu");
  EXPECT_NEAR(rates.causes[0].rate_per_hour * 16384 * 54 * 24, 148, 1e-9);
  // The run itself: 54 x 24 / 419 = 3.09 h on 16,384 GPUs of 8 per node.
  EXPECT_NEAR(job_mtbf_hours(rates, 16384, 8), 54.0 * 24 / 419, 1e-9);
  EXPECT_NEAR(job_mtbf_hours(rates, 16384, 8), 3.093, 0.001);
  // One GPU of a full node (per-node causes count 1/8 each): ~50,700 GPU-hours per interruption.
  EXPECT_NEAR(job_mtbf_hours(rates, 8, 8) * 8, 50677, 1);
  // 64 GPUs: 792 h (section 3's example); per node 3.79 failures per 1000 node-days.
  EXPECT_NEAR(job_mtbf_hours(rates, 64, 8), 791.8, 0.1);
  EXPECT_NEAR(24 / job_mtbf_hours(rates, 8, 8) * 1000, 3.789, 0.001);
}

TEST(FailureRates, PerNodeCausesCountNodes) {
  const FailureRates rates = failure_rates("llama3");
  const FailureCause* host = nullptr;
  for (const FailureCause& c : rates.causes) host = c.name == "host_maintenance" ? &c : host;
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->unit, RateUnit::kPerNodeHour);
  // 4 GPUs of an 8-GPU node are one node; 12 GPUs are two.
  EXPECT_DOUBLE_EQ(job_failure_rate_per_hour(*host, 4, 8), host->rate_per_hour);
  EXPECT_DOUBLE_EQ(job_failure_rate_per_hour(*host, 12, 8), 2 * host->rate_per_hour);
  // Nodes of 4 GPUs double the per-node share of a 16-GPU job.
  EXPECT_GT(job_failure_rate_per_hour(rates, 16, 4), job_failure_rate_per_hour(rates, 16, 8));
  EXPECT_THROW(job_mtbf_hours(rates, 0, 8), Error);
  EXPECT_THROW(job_mtbf_hours(rates, 8, 0), Error);
}

TEST(FailureRates, RscPresetsFollowTheNodeDayModel) {
  // MTTF = 1 / (N_nodes x r_f): RSC-1 1.8 h at 16,384 GPUs, 28.8 h at 1,024, 462 h at 64.
  const FailureRates rsc1 = failure_rates("rsc1");
  EXPECT_NEAR(job_mtbf_hours(rsc1, 16384, 8), 24 / (2048 * 6.5e-3), 1e-9);
  EXPECT_NEAR(job_mtbf_hours(rsc1, 16384, 8), 1.80, 0.01);
  EXPECT_NEAR(job_mtbf_hours(rsc1, 1024, 8), 28.8, 0.1);
  EXPECT_NEAR(job_mtbf_hours(rsc1, 64, 8), 461.5, 0.1);
  EXPECT_NEAR(job_mtbf_hours(failure_rates("rsc2"), 64, 8), 24 / (8 * 2.34e-3), 1e-9);
  for (const FailureCause& cause : rsc1.causes) {
    EXPECT_EQ(cause.unit, RateUnit::kPerNodeHour) << cause.name;
    EXPECT_NE(cause.name, "software_bug");  // hardware causes only
  }
  EXPECT_EQ(rsc1.causes.size(), 14u);
  EXPECT_THROW(failure_rates("rsc3"), Error);
}

TEST(FailureRates, ScaleAndOverride) {
  FailureRates rates = failure_rates("llama3");
  const double base = job_mtbf_hours(rates, 1024, 8);
  scale_rates(rates, 2);
  EXPECT_NEAR(job_mtbf_hours(rates, 1024, 8), base / 2, 1e-9);
  scale_rates(rates, 0);
  EXPECT_TRUE(std::isinf(job_mtbf_hours(rates, 1024, 8)));
  set_cause_rate(rates, "faulty-gpu", 1e-5);  // '-' for '_'
  EXPECT_NEAR(job_mtbf_hours(rates, 1000, 8), 100, 1e-9);
  EXPECT_THROW(set_cause_rate(rates, "cosmic_rays", 1), Error);
  EXPECT_THROW(set_cause_rate(rates, "faulty_gpu", -1), Error);
  EXPECT_THROW(scale_rates(rates, -1), Error);
}

TEST(CheckpointInterval, DalyExamples) {
  // Daly (FGCS 2006), R = 10 min, delta = 5 min; the restart time does not enter the optimum.
  const double delta = 5 * kMinute;
  EXPECT_NEAR(daly_interval_s(delta, 24 * kHour) / kMinute, 117, 0.5);
  EXPECT_NEAR(daly_interval_s(delta, 6 * kHour) / kMinute, 57, 0.5);
  EXPECT_NEAR(daly_interval_s(delta, 15 * kMinute) / kMinute, 9.1, 0.05);
  // delta >= 2M: the interval is M.
  EXPECT_DOUBLE_EQ(daly_interval_s(10 * kMinute, 5 * kMinute), 5 * kMinute);
  EXPECT_DOUBLE_EQ(daly_interval_s(10 * kMinute, 4 * kMinute), 4 * kMinute);
  EXPECT_TRUE(std::isinf(daly_interval_s(delta, std::numeric_limits<double>::infinity())));
  EXPECT_THROW(daly_interval_s(0, kHour), Error);
  EXPECT_THROW(daly_interval_s(delta, 0), Error);
}

TEST(CheckpointInterval, Young) {
  const double delta = 5 * kMinute;
  EXPECT_DOUBLE_EQ(young_interval_s(delta, 24 * kHour), 120 * kMinute);  // sqrt(2 x 5 x 1440) min
  EXPECT_DOUBLE_EQ(young_interval_s(delta, 6 * kHour), 60 * kMinute);
  // Daly = Young + higher-order terms - delta, close to Young - delta for delta << M.
  EXPECT_NEAR(daly_interval_s(1, 1e8), young_interval_s(1, 1e8) - 1, 1);
  // Section 3's 64-GPU example: 226 s to write, M = 792 h -> ~10 h.
  EXPECT_NEAR(young_interval_s(226, 792 * kHour) / kHour, 10.0, 0.1);
  EXPECT_THROW(young_interval_s(-1, kHour), Error);
}

TEST(Goodput, FirstOrderEttr) {
  GoodputInputs in;
  in.mtbf_s = 10 * kHour;
  in.checkpoint_interval_s = kHour;
  in.checkpoint_blocking_s = 36;
  in.restart = {300, 120, 60, 120};  // detection, rendezvous, init, load
  const GoodputResult r = goodput(in);
  // (1 - 36/3600) (1 - (1800 + 300 + 600) / 36000)
  EXPECT_DOUBLE_EQ(in.restart.restart_s(), 300);
  EXPECT_DOUBLE_EQ(r.checkpoint_efficiency, 0.99);
  EXPECT_DOUBLE_EQ(r.lost_work_s, 1800);
  EXPECT_DOUBLE_EQ(r.restart_loss_s, 2400);
  EXPECT_NEAR(r.failure_efficiency, 1 - 2400.0 / 36000, 1e-12);
  EXPECT_NEAR(r.ettr, 0.99 * (1 - 2400.0 / 36000), 1e-12);
  EXPECT_DOUBLE_EQ(r.effective_mtbf_s, in.mtbf_s);
  EXPECT_DOUBLE_EQ(r.goodput, r.ettr);
  in.program_goodput = 0.4;
  EXPECT_NEAR(goodput(in).goodput, 0.4 * r.ettr, 1e-12);
}

TEST(Goodput, ClampsAndRejects) {
  GoodputInputs in;
  in.mtbf_s = 600;  // failures every 10 minutes, an hour between checkpoints: nothing gets done
  in.checkpoint_interval_s = kHour;
  in.checkpoint_blocking_s = 10;
  EXPECT_DOUBLE_EQ(goodput(in).ettr, 0);
  in.mtbf_s = std::numeric_limits<double>::infinity();
  EXPECT_NEAR(goodput(in).ettr, 1 - 10.0 / 3600, 1e-12);
  in.checkpoint_blocking_s = 2 * kHour;  // blocking longer than the interval
  EXPECT_DOUBLE_EQ(goodput(in).ettr, 0);
  in.checkpoint_blocking_s = 0;
  for (auto bad :
       {+[](GoodputInputs& g) { g.mtbf_s = 0; }, +[](GoodputInputs& g) { g.checkpoint_interval_s = 0; },
        +[](GoodputInputs& g) { g.in_place_fraction = 1.5; }, +[](GoodputInputs& g) { g.program_goodput = 0; },
        +[](GoodputInputs& g) { g.restart.detection_s = -1; },
        +[](GoodputInputs& g) { g.checkpoint_blocking_s = -1; }}) {
    GoodputInputs copy = in;
    bad(copy);
    EXPECT_THROW(goodput(copy), Error);
  }
}

TEST(Goodput, InPlaceRecovery) {
  GoodputInputs in;
  in.mtbf_s = 10 * kHour;
  in.checkpoint_interval_s = kHour;
  in.restart = {300, 300, 0, 0};
  in.in_place_fraction = 0.75;
  in.in_place_recovery_s = 60;
  const GoodputResult r = goodput(in);
  EXPECT_DOUBLE_EQ(r.effective_mtbf_s, 40 * kHour);
  // 1 - (1800 + 600) / 144000 - 0.75 x 60 / 36000
  EXPECT_NEAR(r.ettr, 1 - 2400.0 / 144000 - 45.0 / 36000, 1e-12);
  EXPECT_GT(r.ettr, goodput(GoodputInputs{in.mtbf_s, in.checkpoint_interval_s, 0, in.restart, 0, 0, 1}).ettr);
  in.in_place_fraction = 1;  // every interruption recovered in place: no restart left
  EXPECT_TRUE(std::isinf(goodput(in).effective_mtbf_s));
  EXPECT_NEAR(goodput(in).ettr, 1 - 60.0 / 36000, 1e-12);
}

TEST(Recovery, InPlaceFractionFromTheCauseTable) {
  const FailureRates rates = failure_rates("llama3");
  EXPECT_DOUBLE_EQ(in_place_fraction(rates, {}, 8), 0);
  // Shrink: faulty GPU, HBM3, SRAM, GSP, thermal = 148 + 72 + 19 + 17 + 6 = 262 of 419.
  EXPECT_NEAR(in_place_fraction(rates, {.shrink = true}, 8), 262.0 / 419, 1e-12);
  // Reroute: network switch/cable and NIC = 42; retry: half of the 7 watchdog timeouts.
  EXPECT_NEAR(in_place_fraction(rates, {.reroute = true}, 8), 42.0 / 419, 1e-12);
  EXPECT_NEAR(in_place_fraction(rates, {.retry = true}, 8), 3.5 / 419, 1e-12);
  EXPECT_NEAR(in_place_fraction(rates, {true, true, true}, 8), 307.5 / 419, 1e-12);
  // RSC: hardware causes only (324 of Llama 3's), shrink 262 and reroute 42 of them.
  EXPECT_NEAR(in_place_fraction(failure_rates("rsc1"), {true, true, true}, 8), 304.0 / 324, 1e-12);
  EXPECT_EQ(parse_recovery_policy("shrink"), RecoveryPolicy::kShrink);
  EXPECT_THROW(parse_recovery_policy("pray"), Error);
}

TEST(Recovery, RequiredInPlaceFraction) {
  // A 64-GPU job from 48 h to 160 h: 1 - 48/160 = 70% recovered in place.
  EXPECT_NEAR(required_in_place_fraction(48, 160), 0.70, 1e-12);
  EXPECT_DOUBLE_EQ(required_in_place_fraction(48, 48), 0);
  EXPECT_DOUBLE_EQ(required_in_place_fraction(48, 10), 0);
  EXPECT_THROW(required_in_place_fraction(0, 10), Error);
  // And back: with f = 0.7, M / (1 - f) reaches the target.
  GoodputInputs in;
  in.mtbf_s = 48 * kHour;
  in.checkpoint_interval_s = kHour;
  in.in_place_fraction = required_in_place_fraction(48, 160);
  EXPECT_NEAR(goodput(in).effective_mtbf_s / kHour, 160, 1e-9);
}

TEST(JobReliability, CheckpointWriteTimeFromBytesAndBandwidth) {
  // 4 GiB per GPU on 16,384 GPUs to 2000 GB/s: 2^32 x 2^14 / 2e12 = 35.18 s.
  EXPECT_NEAR(checkpoint_write_s(int64_t{4} << 30, 16384, 2000), 35.184372088832, 1e-9);
  EXPECT_NEAR(checkpoint_write_s(1'000'000'000, 1, 1), 1.0, 1e-12);
  EXPECT_THROW(checkpoint_write_s(0, 8, 1), Error);
  EXPECT_THROW(checkpoint_write_s(1, 0, 1), Error);
  EXPECT_THROW(checkpoint_write_s(1, 8, 0), Error);
}

// Two causes, easy to follow by hand: per GPU 1e-5 / h (shrink recovers it), per node 4e-5 / h
// (only a restart). On 64 GPUs in 8 nodes: 6.4e-4 + 3.2e-4 = 9.6e-4 / h, M = 1041.67 h.
JobReliabilityInputs two_cause_job() {
  JobReliabilityInputs in;
  in.rates.preset = "test";
  in.rates.causes = {{"gpu", "GPU", 1e-5, RateUnit::kPerGpuHour, RecoveryPolicy::kShrink, 1.0},
                     {"host", "Host", 4e-5, RateUnit::kPerNodeHour, RecoveryPolicy::kNone, 0.0}};
  in.gpus = 64;
  in.gpus_per_node = 8;
  in.policies.shrink = true;
  in.checkpoint_write_s = 60;
  in.checkpoint_blocking_s = 60;
  in.restart = {300, 120, 30, 60};  // 510 s
  in.in_place_recovery_s = 45;
  in.program_goodput = 0.5;
  return in;
}

TEST(JobReliability, MtbfCausesAndIntervals) {
  const JobReliability r = assess_job_reliability(two_cause_job());
  EXPECT_NEAR(r.mtbf_hours, 1041.6666666666667, 1e-9);
  EXPECT_NEAR(r.failures_per_hour, 9.6e-4, 1e-15);
  ASSERT_EQ(r.causes.size(), 2u);
  EXPECT_NEAR(r.causes[0].failures_per_hour, 6.4e-4, 1e-15);
  EXPECT_NEAR(r.causes[1].failures_per_hour, 3.2e-4, 1e-15);
  EXPECT_NEAR(r.causes[0].share, 2.0 / 3, 1e-12);
  EXPECT_NEAR(r.causes[1].share, 1.0 / 3, 1e-12);
  EXPECT_NEAR(r.gpu_hours_per_interruption, 66666.666666666667, 1e-6);
  // At M = 3.75e6 s with delta = 60 s: Young sqrt(2 x 60 x 3.75e6); Daly a little shorter.
  EXPECT_NEAR(r.young_interval_s, 21213.203435596424, 1e-6);
  EXPECT_NEAR(r.daly_interval_s, 21173.22229177726, 1e-6);
  // Shrink recovers the per-GPU cause: per node 8e-5 of 1.2e-4.
  EXPECT_NEAR(r.in_place_fraction, 2.0 / 3, 1e-12);
  EXPECT_FALSE(r.required_in_place_fraction.has_value());
}

TEST(JobReliability, GoodputWithAndWithoutRecoveryInPlace) {
  const JobReliability r = assess_job_reliability(two_cause_job());
  // Restart only: Daly's interval at M; ETTR = (1 - 60 / dt) (1 - (dt / 2 + 510) / M).
  EXPECT_NEAR(r.restart_only.checkpoint_interval_s, 21173.22229177726, 1e-6);
  EXPECT_NEAR(r.restart_only.result.effective_mtbf_s, 3.75e6, 1e-6);
  EXPECT_NEAR(r.restart_only.result.ettr, 0.9942155210768345, 1e-12);
  EXPECT_NEAR(r.restart_only.result.goodput, 0.49710776053841726, 1e-12);
  // In place: a third of the interruptions restart, so Daly's interval at 3 M = 1.125e7 s.
  EXPECT_NEAR(r.with_in_place.checkpoint_interval_s, 36702.35702836875, 1e-6);
  EXPECT_NEAR(r.with_in_place.result.effective_mtbf_s, 1.125e7, 1e-6);
  EXPECT_NEAR(r.with_in_place.result.ettr, 0.9966834322610298, 1e-12);
  EXPECT_NEAR(r.with_in_place.result.goodput, 0.4983417161305149, 1e-12);
}

TEST(JobReliability, IntervalRulesTargetAndErrors) {
  JobReliabilityInputs in = two_cause_job();
  in.interval_rule = CheckpointIntervalRule::kYoung;
  EXPECT_NEAR(assess_job_reliability(in).restart_only.checkpoint_interval_s, 21213.203435596424, 1e-6);
  in.interval_rule = CheckpointIntervalRule::kFixed;
  in.fixed_interval_s = 1800;
  const JobReliability fixed = assess_job_reliability(in);
  EXPECT_DOUBLE_EQ(fixed.restart_only.checkpoint_interval_s, 1800);
  EXPECT_DOUBLE_EQ(fixed.with_in_place.checkpoint_interval_s, 1800);
  EXPECT_NEAR(fixed.restart_only.result.lost_work_s, 900, 1e-12);
  in.fixed_interval_s = 0;
  EXPECT_THROW(assess_job_reliability(in), Error);

  // To 3000 h between restarts: 1 - 1041.67 / 3000 = 65.3% in place, which shrink's 66.7% reaches.
  in = two_cause_job();
  in.target_mtbf_hours = 3000;
  EXPECT_NEAR(assess_job_reliability(in).required_in_place_fraction.value(), 0.6527777777777778, 1e-12);

  // Every interruption recovered in place: no restart left, the interval stays the one at M.
  in = two_cause_job();
  in.rates.causes[1].rate_per_hour = 0;
  const JobReliability all_in_place = assess_job_reliability(in);
  EXPECT_DOUBLE_EQ(all_in_place.in_place_fraction, 1);
  EXPECT_TRUE(std::isinf(all_in_place.with_in_place.result.effective_mtbf_s));
  EXPECT_DOUBLE_EQ(all_in_place.with_in_place.checkpoint_interval_s, all_in_place.daly_interval_s);

  in.rates.causes[0].rate_per_hour = 0;  // no failures at all
  EXPECT_THROW(assess_job_reliability(in), Error);
}

}  // namespace
}  // namespace tandem::models
