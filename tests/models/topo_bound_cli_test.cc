// `tandem topo` and `tandem bound` as a user sees them: run the built binary (TANDEM_BINARY) and
// check stdout, stderr and the exit code.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/cli_runner.h"

namespace {

using tandem::testing::contains;
using tandem::testing::expect_usage_error;
using tandem::testing::lines_of;
using tandem::testing::Outcome;
using tandem::testing::run_tandem;

TEST(TopoCli, TextSummary) {
  const Outcome o = run_tandem("topo --cluster dgx-h100 --nodes 8");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.err, "");
  EXPECT_TRUE(contains(o.out, "dgx-h100: 8 nodes x 8 H100-SXM (64 GPUs)")) << o.out;
  EXPECT_TRUE(contains(o.out, "vertices: 152 (64 gpu, 8 nvswitch, 64 nic, 8 leaf, 8 spine)")) << o.out;
  EXPECT_TRUE(contains(o.out, "0 -> 8: n0-gpu0 > n0-nic0 > leaf-rail0 > n1-nic0 > n1-gpu0  (4 hops, 1.6 us, 50 GB/s)"))
      << o.out;
}

TEST(TopoCli, DotAndOverrides) {
  const Outcome o = run_tandem("topo --nodes 2 --nic-gbps 800 --spines 4 --format dot");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const std::vector<std::string> lines = lines_of(o.out);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front(), "graph tandem {");
  int edges = 0;
  for (const std::string& line : lines) edges += contains(line, "\" -- \"") ? 1 : 0;
  EXPECT_EQ(edges, 16 + 16 + 16 + 8 * 4);  // NVLink, PCIe, NIC uplinks, leaf x spine
  EXPECT_TRUE(contains(o.out, R"("n1-nic7" -- "leaf-rail7" [id=47, name="n1-nic7-uplink", kind=network, label="100 GB/s")")) << o.out;
  // An 800G NIC behind PCIe Gen5 gets a note in the text summary.
  EXPECT_TRUE(contains(run_tandem("topo --nodes 2 --nic-gbps 800").out, "note: a 100 GB/s NIC is fed by 1 x 64 GB/s"));
}

TEST(TopoCli, UsageErrors) {
  expect_usage_error(run_tandem("topo --fabric torus"), "torus");
  expect_usage_error(run_tandem("topo --nics-per-node 3"), "--nics-per-node 3");
  expect_usage_error(run_tandem("topo --fabric single-switch --spines 2"), "--spines");
  expect_usage_error(run_tandem("topo --cluster dgx-b300"), "dgx-h100, dgx-h200, hgx-a100");
  expect_usage_error(run_tandem("topo --nodes 0"), "--nodes");
}

TEST(BoundCli, AllReduceOnEightNodes) {
  const Outcome o = run_tandem("bound all_reduce 1G --cluster dgx-h100 --nodes 8");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_TRUE(contains(o.out, "all_reduce, 1 GiB (1073741824 B) per rank")) << o.out;
  // ring: 8 channels x 48 GB/s; Simple latency 1.4 x (8.4 + 112 x 3.4 + 14 x 14) + S / (384 x 64/126 GB/s).
  EXPECT_TRUE(contains(o.out, "  ring            8 ch x 48/48       103780.38    7482.83    6324.30   Simple"))
      << o.out;
  EXPECT_TRUE(contains(o.out, "skipped: NVLS across nodes needs CollNet (SHARP)")) << o.out;
  EXPECT_TRUE(contains(o.out, "NCCL picks nvls_tree/Simple: 5957.90 us")) << o.out;
  // Bound: 2 x 7/8 GiB per node over 8 x 50 GB/s, plus the 0.5 us first-byte latency.
  EXPECT_TRUE(contains(o.out, "without in-network reduction                       4698.12 us")) << o.out;
  EXPECT_TRUE(contains(o.out,
                       "node NICs                8 parts:  1.879 GB each way per part over     400 GB/s =    "
                       "4697.62 us  (binds)"))
      << o.out;
}

TEST(BoundCli, TinyAndPointToPoint) {
  const Outcome tiny = run_tandem("bound allreduce 8 --nodes 1");
  ASSERT_EQ(tiny.exit_code, 0) << tiny.err;
  EXPECT_TRUE(contains(tiny.out, "NCCL picks ring/LL: 15.00 us")) << tiny.out;
  const Outcome a2a = run_tandem("bound all_to_all 1M --nodes 2");
  ASSERT_EQ(a2a.exit_code, 0) << a2a.err;
  EXPECT_TRUE(contains(a2a.out, "NCCL runs all_to_all as point-to-point sends")) << a2a.out;
  EXPECT_TRUE(contains(a2a.out, "(binds)")) << a2a.out;
  expect_usage_error(run_tandem("bound all_reduce 1X"), "1X");
  expect_usage_error(run_tandem("bound all_reduce"), "size");
}

}  // namespace
