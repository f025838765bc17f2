// tandem bound <collective> <size>: what NCCL's own cost model predicts for each algorithm and
// protocol on a cluster, what NCCL would pick, and the physical lower bound no algorithm can beat
// (with and without in-network reduction). Formulas: docs/cost-model.md.
#include <algorithm>
#include <array>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "app/cli/cli_cluster.h"
#include "app/common/common.h"
#include "app/cli/commands.h"
#include "app/common/nccl_tests_table.h"
#include "core/error.h"
#include "models/bounds.h"
#include "models/cost_model.h"

namespace tandem::app {

namespace {

struct BoundOptions {
  std::string collective;
  std::string size;
  ClusterOptions cluster;
};

// The order a reader expects: the common algorithms first.
constexpr std::array kAlgorithmOrder = {
    models::NcclAlgorithm::kRing,     models::NcclAlgorithm::kTree,          models::NcclAlgorithm::kNvls,
    models::NcclAlgorithm::kNvlsTree, models::NcclAlgorithm::kCollNetDirect, models::NcclAlgorithm::kCollNetChain,
    models::NcclAlgorithm::kPat};

std::string size_text(int64_t bytes) {
  constexpr std::array<std::pair<int64_t, const char*>, 3> kUnits = {
      {{int64_t{1} << 30, "GiB"}, {int64_t{1} << 20, "MiB"}, {int64_t{1} << 10, "KiB"}}};
  for (const auto& [unit, suffix] : kUnits) {
    if (bytes >= unit) return fmt::format("{:g} {} ({} B)", static_cast<double>(bytes) / unit, suffix, bytes);
  }
  return fmt::format("{} B", bytes);
}

std::string size_meaning(Collective collective) {
  switch (collective) {
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return "in total, nccl-tests' size";
    case Collective::kAllToAll:
      return "sent per rank in total";
    default:
      return "per rank";
  }
}

// Two decimals where they mean something; significant digits for the tiny values of tiny sizes.
std::string number(double value) {
  if (value == 0) return "0";
  if (value >= 1e6) return fmt::format("{:.0f}", value);
  if (value >= 0.01) return fmt::format("{:.2f}", value);
  return fmt::format("{:.3g}", value);
}

std::string microseconds(double us) { return number(us); }

// Decimal units, like the GB/s beside them.
std::string bytes_text(double bytes) {
  constexpr std::array<std::pair<double, const char*>, 3> kUnits = {{{1e9, "GB"}, {1e6, "MB"}, {1e3, "kB"}}};
  for (const auto& [unit, suffix] : kUnits) {
    if (bytes >= unit) return fmt::format("{:.4g} {}", bytes / unit, suffix);
  }
  return fmt::format("{:.4g} B", bytes);
}

// algbw = S / t and busbw as nccl-tests computes them; "-" where t is 0.
std::string bandwidths(Collective collective, int64_t bytes, int nranks, double time_s) {
  if (time_s <= 0) return fmt::format("{:>11} {:>11}", "-", "-");
  const double algbw = static_cast<double>(bytes) / time_s / 1e9;
  return fmt::format("{:>11} {:>11}", number(algbw), number(algbw * bus_bandwidth_factor(collective, nranks)));
}

void print_nccl_model(Collective collective, int64_t bytes, const models::ClusterSpec& spec) {
  const models::NcclCostModel model(spec);
  const int nranks = model.nranks();
  std::cout << "NCCL 2.28 cost model: predicted time in us (docs/cost-model.md)\n";
  if (!model.select(collective, static_cast<uint64_t>(bytes))) {
    std::cout << "  "
              << model.unsupported_reason(collective, models::NcclAlgorithm::kRing, models::NcclProtocol::kSimple)
              << "\n\n";
    return;
  }
  std::cout << fmt::format("  {:<15} {:<17} {:>10} {:>10} {:>10}   {:<7} {:>11} {:>11}\n", "algorithm", "graph", "LL",
                           "LL128", "Simple", "best", "algbw GB/s", "busbw GB/s");
  for (models::NcclAlgorithm algorithm : kAlgorithmOrder) {
    const models::NcclGraph& graph = model.graph(algorithm);
    const std::string graph_text = graph.channels == 0 ? "-"
                                                       : fmt::format("{} ch x {:g}/{:g}", graph.channels,
                                                                     graph.bw_intra_GBps, graph.bw_inter_GBps);
    std::optional<models::NcclPrediction> best;
    std::string cells;
    std::string reason;
    for (models::NcclProtocol protocol : models::all_nccl_protocols()) {
      const std::optional<double> t = model.time_us(collective, static_cast<uint64_t>(bytes), algorithm, protocol);
      cells += fmt::format(" {:>10}", t ? microseconds(*t) : "-");
      if (t && (!best || *t < best->time_us)) best = models::NcclPrediction{algorithm, protocol, *t};
      if (!t && reason.empty()) reason = model.unsupported_reason(collective, algorithm, protocol);
    }
    if (!best) {
      std::cout << fmt::format("  {:<15} {:<17} skipped: {}\n", name(algorithm), graph_text, reason);
      continue;
    }
    std::cout << fmt::format("  {:<15} {:<17}{}   {:<7} {}\n", name(algorithm), graph_text, cells, name(best->protocol),
                             bandwidths(collective, bytes, nranks, best->time_us * 1e-6));
  }
  const models::NcclPrediction pick = *model.select(collective, static_cast<uint64_t>(bytes));
  std::cout << fmt::format("  NCCL picks {}/{}: {} us\n\n", name(pick.algorithm), name(pick.protocol),
                           microseconds(pick.time_us));
}

void print_bound(const std::string& title, Collective collective, int64_t bytes, int nranks,
                 const models::CollectiveBound& bound) {
  std::cout << fmt::format("  {:<47} {:>10} us {}\n", title, microseconds(bound.time_s * 1e6),
                           bandwidths(collective, bytes, nranks, bound.time_s));
  for (size_t i = 0; i < bound.cuts.size(); ++i) {
    const models::CutBound& cut = bound.cuts[i];
    std::cout << fmt::format("    {:<19} {:>6} parts: {:>9} each way per part over {:>7.4g} GB/s = {:>10} us{}\n",
                             cut.cut, cut.parts, bytes_text(cut.bytes), cut.capacity_Bps / 1e9,
                             microseconds(cut.time_s * 1e6), static_cast<int>(i) == bound.binding ? "  (binds)" : "");
  }
  std::cout << fmt::format(
      "    latency: first byte after {:.2f} us, the farthest GPU after {:.2f} us; algorithms that exchange with one "
      "peer per step: {} steps, >= {:.2f} us\n",
      bound.first_byte_s * 1e6, bound.dependency_s * 1e6, bound.pairwise_steps, bound.pairwise_latency_s * 1e6);
}

void print_bounds(Collective collective, int64_t bytes, const models::ClusterSpec& spec) {
  const int nranks = spec.nodes * spec.gpus_per_node;
  const models::CollectiveBounds bounds = models::collective_bounds(collective, static_cast<uint64_t>(bytes), spec);
  std::cout << "Physical lower bound (docs/cost-model.md)\n";
  if (nranks < 2) {
    std::cout << "  one GPU: nothing to communicate\n";
    return;
  }
  std::cout << fmt::format("  {:<47} {:>13} {:>11} {:>11}\n", "", "time", "algbw GB/s", "busbw GB/s");
  print_bound("without in-network reduction", collective, bytes, nranks, bounds.without_in_network_reduction);
  if (bounds.with_in_network_reduction) {
    print_bound(fmt::format("with in-network reduction (NVLS {}, SHARP {})", spec.gpu.nvls ? "yes" : "no",
                            spec.sharp ? "yes" : "no"),
                collective, bytes, nranks, *bounds.with_in_network_reduction);
  }
}

void run_bound(const BoundOptions& options) {
  const Collective collective = parse_collective_name(options.collective);
  const int64_t bytes = parse_size_bytes(options.size, "<size>");
  const models::ClusterSpec spec = cluster_spec(options.cluster);
  std::cout << fmt::format("{}, {} {}\n{}\n", name(collective), size_text(bytes), size_meaning(collective),
                           models::describe(spec));
  for (const std::string& note : cluster_notes(spec)) std::cout << "note: " << note << "\n";
  std::cout << "\n";
  print_nccl_model(collective, bytes, spec);
  print_bounds(collective, bytes, spec);

  const models::NcclCostModel model(spec);
  const std::optional<models::NcclPrediction> pick = model.select(collective, static_cast<uint64_t>(bytes));
  const models::CollectiveBounds bounds = models::collective_bounds(collective, static_cast<uint64_t>(bytes), spec);
  const double bound_s = bounds.without_in_network_reduction.time_s;
  if (pick && bound_s > 0) {
    std::cout << fmt::format("\nNCCL's pick takes {:.2f}x the bound without in-network reduction",
                             pick->time_us * 1e-6 / bound_s);
    if (bounds.with_in_network_reduction) {
      std::cout << fmt::format(", {:.2f}x the bound with it",
                               pick->time_us * 1e-6 / bounds.with_in_network_reduction->time_s);
    }
    std::cout << ".\n";
  }
}

}  // namespace

void add_bound_command(CLI::App& app, CommandStatus& status) {
  auto options = std::make_shared<BoundOptions>();
  CLI::App* command = app.add_subcommand(
      "bound",
      "For a collective of a given size on a cluster: NCCL's own predicted time per algorithm and protocol, the "
      "choice NCCL would make, and the physical lower bound (with and without in-network reduction).");
  command
      ->add_option("collective", options->collective,
                   "all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all or send_recv "
                   "(nccl-tests names such as allreduce also work)")
      ->required();
  command
      ->add_option("size", options->size,
                   "bytes, nccl-tests' size: 8, 64K, 1M, 1G (binary units); the total for all_gather and "
                   "reduce_scatter")
      ->required();
  add_cluster_options(*command, options->cluster);
  command->callback([options, &status] {
    run_bound(*options);
    status.exit_code = kExitSuccess;
  });
}

}  // namespace tandem::app
