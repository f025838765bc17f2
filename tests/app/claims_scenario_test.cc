// Claims workloads: the loader (every mistake an error at its file:line:column) and the verdicts,
// each derived by hand from the models' own arithmetic: a collective below its physical bound is
// impossible, an MTBF that matches the failure table is plausible, one that needs 16x the rates or
// a gain above 1 / (1 - f) is not.
#include <algorithm>
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "app/scenario/claims_run.h"
#include "app/scenario/scenario.h"
#include "core/error.h"
#include "models/reliability.h"

namespace tandem::app {
namespace {

std::string claims_yaml(const std::string& claims, const std::string& expect = "") {
  return "tandem_scenario: 1\n"
         "name: c\n"
         "cluster: {preset: dgx-h100, nodes: 2, nic_gbps: 400}\n"
         "variants:\n"
         "  - {name: sharp, cluster: {sharp: true}}\n"
         "workload:\n"
         "  type: claims\n"
         "  claims:\n" +
         claims + expect;
}

// 2 DGX-H100 nodes: 16 GPUs, 16 x 400 Gb/s NICs.
const std::string kMtbfClaim =
    "    - name: mtbf\n"
    "      kind: mtbf\n"
    "      claimed: {before: BEFORE, after: AFTER}\n"
    "      after:\n"
    "        - {name: in-place, recovery: [retry, reroute, shrink]}\n";

std::string mtbf_claim(double before, double after) {
  std::string text = kMtbfClaim;
  text.replace(text.find("BEFORE"), 6, std::to_string(before));
  text.replace(text.find("AFTER"), 5, std::to_string(after));
  return text;
}

void expect_error(const std::string& yaml, const std::string& message) {
  try {
    parse_scenario(yaml, "c.yaml");
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kFormat);
    EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
  }
}

TEST(ClaimsScenario, ShippedReleaseClaimsLoads) {
  const Scenario scenario = load_scenario("scenarios/release-claims-64xh100.yaml");
  const auto& claims = std::get<ClaimsWorkload>(scenario.workload);
  ASSERT_EQ(claims.claims.size(), 4u);
  EXPECT_EQ(claims.claims[0].kind, ClaimKind::kCollective);
  EXPECT_EQ(claims.claims[0].size_bytes, 16'000'000'000);
  EXPECT_EQ(claims.claims[0].after.size(), 3u);
  const Claim* mtbf = claims.find("mtbf");
  ASSERT_NE(mtbf, nullptr);
  EXPECT_TRUE(mtbf->claimed.after_or_better);
  EXPECT_TRUE(mtbf->after[0].recovery.shrink);
  EXPECT_FALSE(mtbf->after[1].recovery.shrink);
  EXPECT_TRUE(mtbf->after[1].recovery.retry);
  const Claim* memory = claims.find("fragmentation");
  ASSERT_NE(memory, nullptr);
  ASSERT_TRUE(memory->training.has_value());
  EXPECT_EQ(memory->training->base.model.name, "llama3-70b");
  EXPECT_EQ(memory->after[0].allocator, "expandable_segments:True");
  EXPECT_EQ(scenario.expectations_of<ClaimExpectation>().size(), claims.claims.size());
}

TEST(ClaimsScenario, MistakesAreErrorsAtTheirPlace) {
  expect_error(claims_yaml("    - {name: a, kind: speed, claimed: {before: 1, after: 2}, after: [{}]}\n"),
               "c.yaml:9:23: workload.claims[0].kind: unknown claim kind 'speed'");
  expect_error(claims_yaml("    - {name: a, kind: mtbf, size: 1G, claimed: {before: 1, after: 2}, after: [{}]}\n"),
               "workload.claims[0].size: only a collective claim has 'size' (this one is mtbf)");
  expect_error(claims_yaml("    - {name: a, kind: collective, collective: all_reduce, claimed: {before: 1, after: 2}, "
                           "after: [{}]}\n"),
               "a collective claim needs 'size'");
  expect_error(claims_yaml("    - {name: a, kind: mtbf, claimed: {before: 1, after: 2}, after: [{allocator: x}]}\n"),
               "unknown key 'allocator' in workload.claims[0].after[0] (expected: name, recovery)");
  expect_error(claims_yaml("    - {name: a, kind: mtbf, claimed: {before: 1, after: 2}, after: [{recovery: pray}]}\n"),
               "workload.claims[0].after[0].recovery");
  expect_error(claims_yaml("    - {name: a, kind: collective, collective: all_reduce, size: 1G, claimed: {before: 1, "
                           "after: 2}, after: [{variant: moon}]}\n"),
               "no variant named 'moon' (variants: base, sharp)");
  expect_error(claims_yaml("    - {name: a, kind: memory, claimed: {before: 1, after: 2}, after: [{}]}\n"),
               "a memory claim needs 'training'");
  expect_error(claims_yaml("    - {name: a, kind: memory, claimed: {before: 1, after: 200}, after: [{}]}\n"),
               "fragmentation is a percentage under 100");
  expect_error(claims_yaml("    - {name: a, kind: mtbf, claimed: {before: 0, after: 2}, after: [{}]}\n"),
               "workload.claims[0].claimed.before");
  expect_error(
      claims_yaml("    - {name: a, kind: mtbf, claimed: {before: 1, after: 2}, after: [{}, {name: after-1}]}\n"),
      "a second setting named 'after-1'");
  expect_error(claims_yaml("    - {name: a, kind: mtbf, claimed: {before: 1, after: 2}, after: [{}]}\n",
                           "expect:\n  - {claim: b, verdict: plausible}\n"),
               "expect[0].claim: no claim named 'b' (claims: a)");
  expect_error(claims_yaml("    - {name: a, kind: mtbf, claimed: {before: 1, after: 2}, after: [{}]}\n",
                           "expect:\n  - {claim: a, verdict: maybe}\n"),
               "unknown verdict 'maybe'");
  expect_error(claims_yaml("    - {name: a, kind: mtbf, claimed: {before: 1, after: 2}, after: [{}]}\n",
                           "expect:\n  - {claim: a}\n"),
               "expect[0] checks nothing");
}

TEST(ClaimsScenario, MtbfVerdictsFollowTheFailureTable) {
  // 16 GPUs with the llama3 rates: the job MTBF, and what retry + reroute + shrink recover.
  const models::FailureRates rates = models::failure_rates("llama3");
  const double mtbf = models::job_mtbf_hours(rates, 16, 8);
  const double f = models::in_place_fraction(rates, {.retry = true, .reroute = true, .shrink = true}, 8);
  ASSERT_GT(f, 0.5);
  ASSERT_LT(f, 0.9);
  struct Case {
    double before, after;
    ClaimVerdict verdict;
  };
  const Case cases[] = {
      {mtbf, mtbf / (1 - f), ClaimVerdict::kPlausible},                  // exactly the table
      {mtbf / 16, mtbf / 16 / (1 - f), ClaimVerdict::kNeedsConditions},  // 16x the rates
      {mtbf, mtbf / (1 - f) * 1.1, ClaimVerdict::kImpossible},           // above the largest gain
  };
  for (const Case& c : cases) {
    const Scenario scenario = parse_scenario(claims_yaml(mtbf_claim(c.before, c.after)), "c.yaml");
    const ClaimsResults results = run_claims(scenario, ScenarioBackend::kSim);
    ASSERT_EQ(results.claims.size(), 1u);
    const ClaimResult& r = results.claims[0];
    EXPECT_NEAR(r.before.value, mtbf, 1e-9 * mtbf);
    EXPECT_NEAR(r.after[0].value, mtbf / (1 - f), 1e-9 * mtbf);
    ASSERT_TRUE(r.limit.has_value());
    EXPECT_NEAR(*r.limit, 1 / (1 - f), 1e-12);
    EXPECT_EQ(r.verdict, c.verdict) << c.before << " -> " << c.after;
  }
}

TEST(ClaimsScenario, CollectiveBelowItsBoundIsImpossible) {
  // 1 GB (1e9 B) all_reduce on 2 nodes: even with SHARP each node's 8 NICs of 50 GB/s carry 1 GB
  // each way, 1e9 / 400e9 = 2.5 ms; without it 2 x 1/2 x 1e9 / 400e9 = 2.5 ms too (p = 2). A claim
  // of 2 -> 1 ms is impossible; one of tandem's own times is plausible.
  const std::string claim =
      "    - name: ar\n"
      "      kind: collective\n"
      "      collective: all_reduce\n"
      "      size: 1000000000\n"
      "      claimed: {before: BEFORE, after: AFTER}\n"
      "      after:\n"
      "        - {name: sharp, variant: sharp, algorithm: collnet_direct}\n"
      "        - {name: ring, algorithm: ring}\n";
  auto with = [&](double before, double after) {
    std::string text = claim;
    text.replace(text.find("BEFORE"), 6, std::to_string(before));
    text.replace(text.find("AFTER"), 5, std::to_string(after));
    return run_claims(parse_scenario(claims_yaml(text), "c.yaml"), ScenarioBackend::kSim);
  };
  const ClaimsResults impossible = with(2, 1);
  const ClaimResult& r = impossible.claims[0];
  ASSERT_TRUE(r.limit.has_value());
  EXPECT_NEAR(*r.limit, 2.5, 0.05);
  EXPECT_EQ(r.verdict, ClaimVerdict::kImpossible);
  EXPECT_GE(r.before.value, *r.limit);
  for (const ClaimValue& v : r.after) EXPECT_GE(v.value, *r.limit) << v.setting;
  ASSERT_TRUE(r.other_reading.has_value());  // 1 GB as the job's total: 62.5 MB per GPU
  EXPECT_NE(r.other_reading->find("62500 KB"), std::string::npos) << *r.other_reading;

  const ClaimsResults plausible = with(r.before.value, r.after[1].value);
  EXPECT_EQ(plausible.claims[0].verdict, ClaimVerdict::kPlausible);
  EXPECT_EQ(plausible.claims[0].best, 1u);
}

// A memory claim: the step's fragmentation under each allocator setting, judged like any other.
TEST(ClaimsScenario, MemoryClaimReplaysTheStepUnderEachAllocator) {
  const std::string claim =
      "    - name: frag\n"
      "      kind: memory\n"
      "      claimed: {before: BEFORE, after: AFTER}\n"
      "      training:\n"
      "        model: llama3-8b\n"
      "        seq_len: 4096\n"
      "        global_batch: 16\n"
      "        layouts: [{name: fsdp, sharding: fsdp}]\n"
      "      after:\n"
      "        - {name: es, allocator: \"expandable_segments:True\"}\n";
  auto with = [&](double before, double after) {
    std::string text = claim;
    text.replace(text.find("BEFORE"), 6, std::to_string(before));
    text.replace(text.find("AFTER"), 5, std::to_string(after));
    return run_claims(parse_scenario(claims_yaml(text), "c.yaml"), ScenarioBackend::kSim);
  };
  const ClaimsResults first = with(50, 40);
  const ClaimResult& r = first.claims.at(0);
  EXPECT_GE(r.before.value, 0);
  EXPECT_LT(r.before.value, 100);
  EXPECT_GE(r.after[0].value, 0);
  EXPECT_NE(r.before.detail.find("fsdp on 16 GPUs, default allocator: allocated"), std::string::npos)
      << r.before.detail;
  EXPECT_FALSE(r.limit.has_value());
  // Claimed exactly what tandem finds (or within a point): plausible.
  const ClaimsResults same = with(std::max(r.before.value, 0.5), std::max(r.after[0].value, 0.5));
  EXPECT_EQ(same.claims.at(0).verdict, ClaimVerdict::kPlausible);
}

TEST(ClaimsScenario, OtherBackendsAreRefused) {
  const Scenario scenario = parse_scenario(claims_yaml(mtbf_claim(100, 200)), "c.yaml");
  try {
    run_claims(scenario, ScenarioBackend::kHost);
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
  }
}

}  // namespace
}  // namespace tandem::app
