// `tandem plan`, end to end: the shipped small sweep (96 points), its files, shards that add up to
// the whole, and bad sweep files as one clear error. (The same sweep under `mpirun -np 2` is
// compared with a single-process run by tests/app/plan_mpi_check.sh.)
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"

namespace {

using tandem::testing::contains;
using tandem::testing::expect_one_line_error;
using tandem::testing::lines_of;
using tandem::testing::Outcome;
using tandem::testing::read_text;
using tandem::testing::run_tandem;
using tandem::testing::temp_path;

constexpr const char* kSmallPlan = "scenarios/plans/llama3-8b-small.yaml";

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string field;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.push_back(field);
      field.clear();
    } else {
      field += c;
    }
  }
  out.push_back(field);
  return out;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = temp_path(name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(PlanCli, SmallSweepEndToEnd) {
  const std::string dir = fresh_dir("plan_small");
  const Outcome outcome = run_tandem(fmt::format("plan {} --out {} --jobs 2", kSmallPlan, dir));
  ASSERT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  EXPECT_EQ(outcome.err, "");  // no progress bar: stderr is not a terminal
  EXPECT_TRUE(contains(outcome.out, "tandem plan: llama3-8b-small")) << outcome.out;
  EXPECT_TRUE(contains(outcome.out, "96 points (96 ran, 0 did not fit or split), 8 simulated clusters")) << outcome.out;
  for (const char* section : {"== best configuration per cluster size", "== Pareto front", "== start-up"}) {
    EXPECT_TRUE(contains(outcome.out, section)) << section;
  }
  const std::vector<std::string> csv = lines_of(read_text(dir + "/plan.csv"));
  ASSERT_EQ(csv.size(), 97u);
  const std::vector<std::string> header = split(csv[0]);
  auto column = [&](const char* name) {
    return static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  ASSERT_LT(column("gpu_hours_per_1T_tokens"), header.size());
  // Every point ran, and the figures hang together.
  std::map<std::string, double> step_by_cluster;  // gpus/nic/layout -> step
  for (size_t i = 1; i < csv.size(); ++i) {
    const std::vector<std::string> row = split(csv[i]);
    ASSERT_EQ(row.size(), header.size()) << csv[i];
    EXPECT_EQ(row[column("point")], std::to_string(i - 1));
    EXPECT_EQ(row[column("fits")], "true") << csv[i];
    const double gpus = std::stod(row[column("gpus")]);
    const double step = std::stod(row[column("step_s")]);
    const double tokens = std::stod(row[column("tokens_per_s_per_gpu")]);
    const double ettr = std::stod(row[column("ettr")]);
    const double mfu = std::stod(row[column("achieved_mfu")]);
    EXPECT_NEAR(tokens * step * gpus / (128.0 * 8192), 1.0, 1e-5);  // CSV figures have 6 digits
    EXPECT_GT(ettr, 0.9);
    EXPECT_LE(ettr, 1.0);
    EXPECT_LE(mfu, 0.68);  // the sustained bf16 GEMM ceiling, 0.803 x 0.85 (docs/kernels.md)
    EXPECT_NEAR(std::stod(row[column("goodput")]), ettr * mfu, 1e-5);
    // GPU-hours per 1T tokens = GPUs x step / tokens per step x 1e12 / 3600 / ETTR.
    EXPECT_NEAR(std::stod(row[column("gpu_hours_per_1T_tokens")]) / (gpus * step / (128.0 * 8192) * 1e12 / 3600 / ettr),
                1.0, 1e-4);
    // The reliability axes do not change the simulated step.
    const std::string key = row[column("gpus")] + "/" + row[column("nic_gbps")] + "/" + row[column("layout")];
    if (step_by_cluster.count(key)) {
      EXPECT_DOUBLE_EQ(step_by_cluster[key], step);
    }
    step_by_cluster[key] = step;
    // In-place recovery never lowers the MTBF between restarts.
    if (row[column("recovery")] == "none") {
      EXPECT_DOUBLE_EQ(std::stod(row[column("in_place_fraction")]), 0);
    } else {
      EXPECT_GT(std::stod(row[column("effective_mtbf_h")]), std::stod(row[column("mtbf_h")]));
    }
  }
  // Twice the GPUs, the same global batch: a shorter step.
  EXPECT_LT(step_by_cluster["64/400/fsdp"], step_by_cluster["32/400/fsdp"]);
  const nlohmann::json json = nlohmann::json::parse(read_text(dir + "/plan.json"));
  EXPECT_EQ(json.at("points").size(), 96u);
  EXPECT_EQ(json.at("startup").size(), 4u);  // one per cluster size
}

TEST(PlanCli, ShardsAddUpToTheWholeSweep) {
  const std::string whole = fresh_dir("plan_whole"), a = fresh_dir("plan_a"), b = fresh_dir("plan_b");
  ASSERT_EQ(run_tandem(fmt::format("plan {} --out {} --quiet", kSmallPlan, whole)).exit_code, 0);
  ASSERT_EQ(run_tandem(fmt::format("plan {} --out {} --quiet --shard 0/2 -j 1", kSmallPlan, a)).exit_code, 0);
  ASSERT_EQ(run_tandem(fmt::format("plan {} --out {} --quiet --shard 1/2 -j 1", kSmallPlan, b)).exit_code, 0);
  const std::vector<std::string> all = lines_of(read_text(whole + "/plan.csv"));
  std::vector<std::string> merged = lines_of(read_text(a + "/plan.csv"));
  const std::vector<std::string> second = lines_of(read_text(b + "/plan.csv"));
  ASSERT_GT(merged.size(), 1u);
  ASSERT_GT(second.size(), 1u);
  EXPECT_EQ(merged[0], second[0]);
  merged.insert(merged.end(), second.begin() + 1, second.end());
  std::sort(merged.begin() + 1, merged.end(),
            [](const std::string& x, const std::string& y) { return std::stoi(split(x)[0]) < std::stoi(split(y)[0]); });
  EXPECT_EQ(merged, all);
}

TEST(PlanCli, BadSweepsAreOneLineErrors) {
  auto write = [](const std::string& name, const std::string& text) {
    const std::string path = temp_path(name);
    std::ofstream(path) << text;
    return path;
  };
  const std::string base = read_text(kSmallPlan);
  ASSERT_FALSE(base.empty());
  struct Case {
    std::string name, from, to, mentions;
  };
  const std::vector<Case> cases{
      {"gpus", "gpus: [8, 16, 32, 64]", "gpus: [8, 12]", "12 GPUs do not fill nodes of 8 GPUs"},
      {"key", "network: fluid", "network: fluid\nnetwrok: fluid", "unknown key 'netwrok' in the plan"},
      {"rates", "rates: [llama3, rsc1]", "rates: [llama3, rsc9]", "rsc9"},
      {"recovery", "recovery: [none, retry+reroute+shrink]", "recovery: [none, retry+pray]", "pray"},
      {"version", "tandem_plan: 1", "tandem_plan: 2", "unsupported plan format version '2'"},
      {"layout", "{name: fsdp, sharding: fsdp}", "{name: fsdp, sharding: zero9}", "zero9"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string text = base;
    ASSERT_NE(text.find(c.from), std::string::npos) << c.from;
    text.replace(text.find(c.from), c.from.size(), c.to);
    const Outcome outcome = run_tandem("plan " + write("plan_" + c.name + ".yaml", text));
    expect_one_line_error(outcome, 2, c.mentions);  // a malformed file, as for scenarios
    EXPECT_TRUE(contains(outcome.err, ".yaml:")) << "names the file and line: " << outcome.err;
  }
  EXPECT_EQ(run_tandem(fmt::format("plan {} --shard 2/2", kSmallPlan)).exit_code, 2);
  EXPECT_EQ(run_tandem("plan /nonexistent.yaml").exit_code, 2);
}

TEST(PlanCli, Help) {
  const Outcome help = run_tandem("plan --help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag : {"--out", "--jobs", "--shard", "--quiet", "mpirun"})
    EXPECT_TRUE(contains(help.out, flag)) << flag;
}

}  // namespace
