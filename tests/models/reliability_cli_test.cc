// `tandem reliability` as a user sees it: run the built binary (TANDEM_BINARY) and check stdout,
// stderr and the exit code.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"

namespace {

using tandem::testing::contains;
using tandem::testing::expect_usage_error;
using tandem::testing::fields_of;
using tandem::testing::lines_of;
using tandem::testing::Outcome;
using tandem::testing::run_tandem;

// The start-up table's rows: GPUs and the total column's text.
std::vector<std::vector<std::string>> startup_rows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  bool in_table = false;
  for (const std::string& line : lines_of(out)) {
    if (contains(line, "launch") && contains(line, "first collectives")) {
      in_table = true;
      continue;
    }
    if (in_table && !line.empty()) rows.push_back(fields_of(line));
  }
  return rows;
}

TEST(ReliabilityCli, SixtyFourGpus) {
  const Outcome o = run_tandem("reliability --cluster dgx-h100 --gpus 64 --target-mtbf-hours 2000");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.err, "");
  EXPECT_TRUE(contains(o.out, "64 GPUs on dgx-h100: 8 nodes x 8 H100-SXM (64 GPUs)")) << o.out;
  // 148 faulty GPUs in 16,384 x 54 x 24 GPU-hours: 6.97 per 10^6 GPU-hours, 35.32% of 419.
  EXPECT_TRUE(contains(
      o.out, "  Faulty GPU (incl. NVLink)                6.97 GPU-h      0.01071          2242  35.32%  shrink"))
      << o.out;
  EXPECT_TRUE(contains(o.out, "NCCL watchdog timeout") && contains(o.out, "retry (50%)")) << o.out;
  // 50,677 GPU-hours per interruption / 64 GPUs; Young sqrt(2 x 60 s x M), Daly slightly below.
  EXPECT_TRUE(contains(o.out, "job MTBF: 791.8 h (50677 GPU-hours per interruption)")) << o.out;
  EXPECT_TRUE(contains(o.out, "checkpoint interval at the job MTBF: Young 5.138 h, Daly 5.126 h")) << o.out;
  // The job's start-up at 64 GPUs: launch 4.5 s + store 65 ms + the world's NCCL init + first connections.
  EXPECT_TRUE(contains(o.out, "  job start-up                      5.491 s  (simulated, below)")) << o.out;
  // Shrink 262 + reroute 42 + retry 3.5 of 419: M / (1 - f) = 2976 h.
  EXPECT_TRUE(contains(o.out, "in-place recovery (retry,reroute,shrink): 73.39% of interruptions, 60 s each")) << o.out;
  EXPECT_TRUE(contains(o.out, "  MTBF between restarts               791.8 h                   2976 h")) << o.out;
  EXPECT_TRUE(contains(o.out, "  ETTR                                 99.34%                   99.66%")) << o.out;
  // 1 - 791.8 / 2000.
  EXPECT_TRUE(contains(o.out,
                       "target MTBF between restarts 2000 h: 60.41% of interruptions must be recovered in "
                       "place; retry,reroute,shrink recovers 73.39%: reached"))
      << o.out;
  const auto rows = startup_rows(o.out);
  ASSERT_EQ(rows.size(), 3u) << o.out;
  EXPECT_EQ(rows[0][0], "8");
  EXPECT_EQ(rows[1][0], "32");
  EXPECT_EQ(rows[2][0], "64");
}

TEST(ReliabilityCli, SixteenThousandGpus) {
  const Outcome o = run_tandem("reliability --cluster dgx-h100 --gpus 16384 --mfu 0.4 --recovery reroute");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  // The Llama 3 run itself: 54 x 24 / 419.
  EXPECT_TRUE(contains(o.out, "job MTBF: 3.093 h (50677 GPU-hours per interruption)")) << o.out;
  EXPECT_TRUE(contains(o.out, "in-place recovery (reroute): 10.02% of interruptions")) << o.out;
  EXPECT_TRUE(contains(o.out, "goodput (ETTR x MFU 0.4)")) << o.out;
  const auto rows = startup_rows(o.out);
  ASSERT_EQ(rows.size(), 7u) << o.out;  // 8, 32, ..., 8192, 16384
  EXPECT_EQ(rows.back()[0], "16384");
  EXPECT_TRUE(contains(o.out, "(ring steps scaled from 1024 GPUs)")) << o.out;
}

TEST(ReliabilityCli, JsonAndCheckpointBandwidth) {
  // 1.13 TB of checkpoint on 64 GPUs at 5 GB/s: ~226 s (shared/docs section 3's example).
  const Outcome o = run_tandem(
      "reliability --gpus 64 --rates rsc1 --checkpoint-GBps 5 --checkpoint-bytes-per-gpu 16.44G --recovery none "
      "--checkpoint-interval 2h --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out);
  EXPECT_NEAR(j.at("job_mtbf_hours").get<double>(), 461.5, 0.1);  // 1 / (8 nodes x 6.5 / 1000 node-days)
  EXPECT_NEAR(j.at("checkpoint").at("write_s").get<double>(), 226, 0.5);
  EXPECT_DOUBLE_EQ(j.at("recovery").at("in_place_fraction").get<double>(), 0);
  const nlohmann::json& column = j.at("restart_only");
  EXPECT_DOUBLE_EQ(column.at("checkpoint_interval_s").get<double>(), 7200);
  // (1 - 226/7200) (1 - (3600 + restart) / M)
  const double restart_s = j.at("restart").at("total_s").get<double>();
  EXPECT_NEAR(column.at("ettr").get<double>(), (1 - 226.0 / 7200) * (1 - (3600 + restart_s) / (461.5 * 3600)), 1e-4);
  EXPECT_EQ(j.at("startup").size(), 3u);
  EXPECT_GT(j.at("startup")[2].at("total_s").get<double>(), j.at("startup")[0].at("total_s").get<double>());
}

TEST(ReliabilityCli, UsageErrors) {
  expect_usage_error(run_tandem("reliability --gpus 12"), "--gpus 12 is not a multiple of the 8 GPUs per node");
  expect_usage_error(run_tandem("reliability"), "--gpus");
  expect_usage_error(run_tandem("reliability --gpus 64 --rates rsc9"), "llama3, rsc1, rsc2");
  expect_usage_error(run_tandem("reliability --gpus 64 --checkpoint-interval 5x"), "5x");
  expect_usage_error(run_tandem("reliability --gpus 64 --recovery pray"), "pray");
  expect_usage_error(run_tandem("reliability --gpus 64 --cause-rate cosmic_rays=1"), "cosmic_rays");
  expect_usage_error(run_tandem("reliability --gpus 64 --checkpoint-GBps 5"), "--checkpoint-bytes-per-gpu");
  expect_usage_error(run_tandem("reliability --gpus 64 --nodes 4"), "--nodes 4");
  expect_usage_error(run_tandem("reliability --gpus 64 --rate-scale 0"), "never fails");
}

}  // namespace
