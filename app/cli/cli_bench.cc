// tandem bench <collective>: nccl-tests' sweep over message sizes, run through a Communicator on a
// backend, printed as nccl-tests' table. Conventions (sizes -> counts, busbw) in nccl_tests_table.h;
// the #wrong check in core/data_check.h.
//
// Per size and per placement (out-of-place, then in-place where the collective has one):
//   -w warmup runs, then -n timed runs (time = mean of the backend's own clock over the -n runs),
//   then up to -c check runs, each on fresh inputs with poisoned outputs, stopping at the first run
//   with wrong elements.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/calibrate/calibration.h"
#include "app/cli/cli_cluster.h"
#include "app/cli/cli_paths.h"
#include "app/cli/commands.h"
#include "app/common/common.h"
#include "app/common/nccl_tests_table.h"
#include "app/scenario/trace.h"
#include "app/run/backends.h"
#include "core/data_check.h"
#include "core/host_memory.h"
#include "core/run_memory.h"
#include "backend/host/host_executor.h"
#include "backend/launch/launch.h"
#include "core/algorithms.h"
#include "core/communicator.h"
#include "core/error.h"
#include "sim/sweep.h"
#include "sim/tuner.h"

namespace tandem::app {

namespace {

// One rank per thread on the host backend; beyond this a typo is likelier than a plan.
constexpr int kMaxBenchRanks = 4096;

struct BenchOptions {
  std::string collective;
  std::string backend = "host";
  std::string min_bytes = "32M";
  std::string max_bytes = "32M";
  std::string step_bytes = "1M";
  int64_t step_factor = 1;
  int nranks = 1;
  std::string algorithm = "auto";
  std::string dtype = "float";
  std::string op = "sum";
  int iters = 20;
  int warmup_iters = 1;
  int check_iters = 1;
  int root = 0;
  int ranks_per_node = 0;
  int channels = 0;          // 0: NCCL's (sim: its tuner's pick; others: 2 per rank of a node, see --channels)
  bool ngpus_given = false;  // -g on the command line (sim: GPUs per node; default all of them)
  std::string network = "fluid";
  bool node_major = false;  // sim: ring in rank order instead of rail-aligned
  ClusterOptions cluster;
  std::string trace;        // empty: no trace
  std::string calibration;  // sim: a calibration profile (docs/calibrate.md); empty: the defaults
};

// `--trace FILE`: the sweep as a Chrome / Perfetto trace.
void write_bench_trace(const BenchOptions& options, Collective collective, int nranks,
                       const std::vector<BenchRow>& rows, std::vector<std::string> algorithms) {
  if (options.trace.empty()) return;
  BenchTraceInfo info;
  info.title = fmt::format("tandem bench {} ({}, {} ranks)", name(collective), options.backend, nranks);
  info.backend = options.backend;
  info.collective = std::string(name(collective));
  info.ranks = nranks;
  info.algorithms = std::move(algorithms);
  write_text_file(options.trace, bench_trace(info, rows).dump() + "\n");
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// Everything the command line asks for, parsed and checked before any memory is touched.
struct BenchPlan {
  Collective collective = Collective::kAllReduce;
  Algorithm algorithm = Algorithm::kAuto;
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;  // 0 for collectives without a root (the table shows -1)
  bool rooted = false;
  RankLayout layout;
  std::vector<int64_t> sizes;
  int64_t min_bytes = 0, max_bytes = 0, step_bytes = 0;
};

// The channels a non-simulated backend runs: --channels, else NCCL's doubled search channels (2
// per rank of a node) on a layout with channel rings, else 1.
int channels_for(const BenchOptions& options, const RankLayout& layout) {
  if (options.channels > 0) return options.channels;
  return layout.rings.empty() ? 1 : std::min(2 * layout.ranks_per_node, 16);
}

BenchPlan make_plan(const BenchOptions& options) {
  BenchPlan plan;
  plan.collective = parse_collective_name(options.collective);
  plan.algorithm = parse_algorithm_name(options.algorithm);
  plan.dtype = parse_data_type(options.dtype);
  plan.op = parse_reduce_op(options.op);
  plan.layout = make_layout(options.nranks, options.ranks_per_node);
  plan.rooted = plan.collective == Collective::kBroadcast || plan.collective == Collective::kReduce;
  if (plan.rooted) {
    if (options.root < 0 || options.root >= options.nranks) {
      fail(ErrorCode::kInvalidArgument, "root {} (-r) is out of range for {} ranks (-g)", options.root, options.nranks);
    }
    plan.root = options.root;
  }
  if (plan.algorithm != Algorithm::kAuto && !implements(plan.algorithm, plan.collective)) {
    fail(ErrorCode::kUnsupported, "{}", unsupported_message(plan.algorithm, plan.collective));
  }
  plan.min_bytes = parse_size_bytes(options.min_bytes, "-b/--minbytes");
  plan.max_bytes = parse_size_bytes(options.max_bytes, "-e/--maxbytes");
  plan.step_bytes = parse_size_bytes(options.step_bytes, "-i/--stepbytes");
  plan.sizes = sweep_sizes(plan.min_bytes, plan.max_bytes, options.step_factor, plan.step_bytes);
  return plan;
}

// "tree for 8 .. 1024 B, ring for 4096 .. 67108864 B": what ran (an algorithm, a choice of the
// simulator) per run of sizes with the same choice; `choices` holds (size in bytes, what ran) by size.
std::string describe_size_runs(const std::vector<std::pair<int64_t, std::string>>& choices) {
  std::string out;
  size_t begin = 0;
  for (size_t i = 1; i <= choices.size(); ++i) {
    if (i < choices.size() && choices[i].second == choices[begin].second) continue;
    if (!out.empty()) out += ", ";
    out += fmt::format("{} for {} .. {} B", choices[begin].second, choices[begin].first, choices[i - 1].first);
    begin = i;
  }
  return out;
}

// A table row's first columns for one size: its counts, type, reduction and root.
BenchRow table_row(const BenchPlan& plan, const SizeCounts& counts) {
  BenchRow row;
  row.counts = counts;
  row.type_name = nccl_tests_type_name(plan.dtype);
  row.redop = is_reduction(plan.collective) ? name(plan.op) : std::string_view("none");
  row.root = plan.rooted ? plan.root : -1;
  return row;
}

// --backend sim's cluster, GPUs per node, ring order and network model, and the calibration profile
// applied to the model (--calibration).
struct SimBenchSetup {
  sim::SweepRequest request;  // without its points
  std::optional<CalibrationProfile> profile;
};

SimBenchSetup sim_bench_setup(const BenchOptions& options) {
  SimBenchSetup setup;
  sim::SweepRequest& request = setup.request;
  request.cluster = cluster_spec(options.cluster);
  request.gpus_per_node = options.ngpus_given ? options.nranks : request.cluster.gpus_per_node;
  if (request.gpus_per_node > request.cluster.gpus_per_node) {
    fail(ErrorCode::kInvalidArgument, "-g {}: a {} node has {} GPUs", request.gpus_per_node, request.cluster.preset,
         request.cluster.gpus_per_node);
  }
  request.rail_aligned = !options.node_major;
  if (options.network == "ideal") {
    request.network = sim::NetworkModel::ideal();
  } else {
    request.network.fidelity = sim::parse_fidelity(options.network);
  }
  if (!options.calibration.empty()) {
    if (options.network == "ideal")
      fail(ErrorCode::kInvalidArgument, "--calibration does not apply to --network ideal");
    setup.profile = read_profile(options.calibration);
    check_profile_cluster(*setup.profile, request.cluster);
    request.network = apply_profile(*setup.profile, request.network);
  }
  request.channels = options.channels;
  return setup;
}

// The simulated table's header: nccl-tests' lines, then the cluster, the model and the calibration.
void print_sim_bench_header(const BenchOptions& options, const BenchPlan& plan, const SimBenchSetup& setup) {
  fmt::print("# tandem {} bench {}: nccl-tests-style table from simulation\n", version_string(), name(plan.collective));
  fmt::print(
      "# nThread 1 nGpus {} minBytes {} maxBytes {} step: {}({}) warmup iters: 0 iters: 1 agg iters: 1 "
      "validation: 0 graph: 0\n",
      options.nranks, plan.min_bytes, plan.max_bytes, options.step_factor > 1 ? options.step_factor : plan.step_bytes,
      options.step_factor > 1 ? "factor" : "bytes");
  fmt::print("#\n# Cluster: {}\n", models::describe(setup.request.cluster));
  fmt::print("# Backend: sim ({} network), {} GPUs per node, {} ring order, algorithm: {}\n#\n", options.network,
             setup.request.gpus_per_node, setup.request.rail_aligned ? "rail-aligned" : "node-major",
             options.algorithm);
  if (setup.profile) fmt::print("# Calibration: {}\n#\n", profile_summary(*setup.profile));
  fmt::print("{}", format_column_header());
  std::fflush(stdout);
}

// What the simulator chose for one size: algorithm, protocol and channels. NCCL's p2p splits each
// peer's transfer over some of its channels: say how many.
std::string sim_choice(const sim::SweepPointResult& r) {
  return r.algorithm == sim::SimAlgorithm::Model::kP2p
             ? fmt::format("p2p/{} on {} channel{} a peer", name(r.protocol), r.channels, r.channels == 1 ? "" : "s")
             : fmt::format("{}/{} {}ch", sim::name_or_auto(r.algorithm), name(r.protocol), r.channels);
}

// --backend sim: the same table from simulation on a cluster. No data moves, so #wrong is N/A and
// the in-place columns repeat the out-of-place ones (placement does not change simulated time).
void run_sim_bench(BenchOptions options, CommandStatus& status) {
  SimBenchSetup setup = sim_bench_setup(options);
  sim::SweepRequest& request = setup.request;
  const int nranks = request.cluster.nodes * request.gpus_per_node;
  options.nranks = nranks;
  options.ranks_per_node = request.gpus_per_node;
  BenchOptions for_plan = options;
  const std::optional<sim::SimAlgorithm> algorithm = sim::parse_sim_algorithm_or_auto(options.algorithm);
  // Simulator models, not core algorithms.
  if (algorithm && algorithm->is_model()) for_plan.algorithm = "auto";
  const BenchPlan plan = make_plan(for_plan);
  for (int64_t bytes : plan.sizes) {
    sim::SweepPoint point;
    point.collective = plan.collective;
    point.bytes = nccl_tests_counts(plan.collective, bytes, plan.dtype, nranks).size_bytes;
    point.algorithm = algorithm;
    point.dtype = plan.dtype;
    point.op = plan.op;
    point.root = plan.root;
    request.points.push_back(point);
  }
  print_sim_bench_header(options, plan, setup);

  const std::vector<sim::SweepPointResult> results = sim::run_sweep(request, /*isolated=*/false);
  std::vector<BenchRow> rows;
  std::vector<std::string> notes;
  std::vector<std::pair<int64_t, std::string>> choices;
  for (size_t i = 0; i < results.size(); ++i) {
    const sim::SweepPointResult& r = results[i];
    if (!r.ok) fail(ErrorCode::kUnsupported, "{} B: {}", r.point.bytes, r.error);
    BenchRow row = table_row(plan, nccl_tests_counts(plan.collective, plan.sizes[i], plan.dtype, nranks));
    row.out_of_place = make_result(r.seconds, row.counts, plan.collective, nranks, std::nullopt);
    if (buffer_geometry(plan.collective, nranks).in_place_supported) row.in_place = row.out_of_place;
    fmt::print("{}", format_row(row));
    rows.push_back(row);
    notes.push_back(sim_choice(r));
    choices.emplace_back(row.counts.size_bytes, notes.back());
  }
  fmt::print("{}", format_footer(rows));
  // Which algorithm, protocol and channel count ran, per run of equal choices.
  fmt::print("# Simulated with: {}\n", describe_size_runs(choices));
  write_bench_trace(options, plan.collective, nranks, rows, notes);
  status.exit_code = kExitSuccess;
}

// The table's header, as nccl-tests prints it.
void print_bench_header(const BenchOptions& options, const BenchPlan& plan, const Executor& executor) {
  const int nranks = plan.layout.nranks;
  fmt::print("# tandem {} bench {}: nccl-tests-style table\n", version_string(), name(plan.collective));
  fmt::print(
      "# nThread 1 nGpus {} minBytes {} maxBytes {} step: {}({}) warmup iters: {} iters: {} agg iters: 1 "
      "validation: {} graph: 0\n",
      nranks, plan.min_bytes, plan.max_bytes, options.step_factor > 1 ? options.step_factor : plan.step_bytes,
      options.step_factor > 1 ? "factor" : "bytes", options.warmup_iters, options.iters, options.check_iters);
  fmt::print("#\n# Using devices\n");
  const std::string host = host_name();
  for (int rank = 0; rank < nranks; ++rank) {
    fmt::print("#  Rank {:2} Group  0 Pid {:6} on {:>10} device {:2} [{}] {} backend rank thread\n", rank,
               static_cast<long>(getpid()), host, rank, options.backend, executor.name());
  }
  fmt::print("#\n# Backend: {}, algorithm: {}, ranks per node: {}, channels: {}\n#\n", options.backend,
             plan.algorithm == Algorithm::kAuto ? "auto" : name(plan.algorithm), plan.layout.ranks_per_node,
             channels_for(options, plan.layout));
  fmt::print("{}", format_column_header());
  std::fflush(stdout);
}

// Under a process-per-rank launch: the slowest process's time and the sum of #wrong over processes
// (every process calls this at the same point).
std::pair<double, std::optional<int64_t>> combine_over_processes(double seconds, std::optional<int64_t> wrong) {
  struct Part {
    double seconds;
    int64_t wrong;  // -1: not checked
  };
  const Part mine{seconds, wrong.value_or(-1)};
  std::vector<std::byte> bytes(sizeof(Part));
  std::memcpy(bytes.data(), &mine, sizeof(Part));
  double slowest = 0;
  std::optional<int64_t> total;
  for (const std::vector<std::byte>& part_bytes : nccl::current_launch().all_gather(bytes)) {
    Part part{};
    std::memcpy(&part, part_bytes.data(), sizeof(Part));
    slowest = std::max(slowest, part.seconds);
    if (part.wrong >= 0) total = total.value_or(0) + part.wrong;
  }
  return {slowest, total};
}

// The largest size's buffers, per rank: what the sweep allocates.
struct BufferBytes {
  int64_t input = 0;
  int64_t output = 0;
};

BufferBytes largest_buffers(const BenchPlan& plan) {
  BufferBytes largest;
  const int64_t element_bytes = static_cast<int64_t>(size_bytes(plan.dtype));
  for (int64_t bytes : plan.sizes) {
    SizeCounts counts = nccl_tests_counts(plan.collective, bytes, plan.dtype, plan.layout.nranks);
    largest.input = std::max(largest.input, counts.input_elements * element_bytes);
    largest.output = std::max(largest.output, counts.output_elements * element_bytes);
  }
  return largest;
}

// Allocates every rank's buffers for the largest size, after checking them against the machine's memory.
RunMemory allocate_bench_memory(Executor& executor, const BenchPlan& plan) {
  const int nranks = plan.layout.nranks;
  const BufferBytes largest = largest_buffers(plan);
  const double needed = double(nranks) * double(largest.input + largest.output);
  require_host_memory(needed,
                      fmt::format("bench for {} ranks up to {} bytes (-e; lower -e or -g)", nranks, plan.max_bytes));
  return RunMemory(executor, nranks, static_cast<size_t>(largest.input), static_cast<size_t>(largest.output));
}

// What every size of the sweep runs with.
struct BenchContext {
  const BenchOptions& options;
  const BenchPlan& plan;
  Communicator& communicator;
  const RunMemory& memory;
  // Under a process-per-rank launch (nccl under mpirun) every process runs its own ranks; times and
  // #wrong are combined over the processes.
  bool per_process = false;
  Progress& progress;
};

// One size in one placement, on its buffers.
struct Placement {
  const CollectiveSpec& spec;
  const SizeCounts& counts;
  bool in_place = false;
  std::vector<RankBuffers> buffers;      // the host view
  std::vector<RankBuffers> run_buffers;  // what the backend runs on
};

// The mean time of -n timed runs after -w warm-up runs. They work on the pattern; in place, a
// reduction would compound it run after run (sums overflow), so those runs reduce zeros instead.
// `phase` shows which run is under way (a host run of thousands of ranks takes seconds each).
double timed_runs_s(const BenchContext& context, const Placement& placement, const CheckSpec& check,
                    const std::function<void(const std::string&)>& phase) {
  const BenchPlan& plan = context.plan;
  if (placement.in_place && is_reduction(plan.collective)) {
    const int64_t element_bytes = static_cast<int64_t>(size_bytes(plan.dtype));
    for (const RankBuffers& b : placement.buffers) {
      if (b.input != nullptr) {
        std::memset(b.input, 0, static_cast<size_t>(placement.counts.input_elements * element_bytes));
      }
    }
  } else {
    fill_inputs(check, placement.buffers);
  }
  context.memory.upload();
  for (int i = 0; i < context.options.warmup_iters; ++i) {
    phase(fmt::format("warm-up {}/{}", i + 1, context.options.warmup_iters));
    context.communicator.run(placement.spec, placement.run_buffers, plan.algorithm);
  }
  double seconds = 0;
  for (int i = 0; i < context.options.iters; ++i) {
    phase(fmt::format("timing {}/{}", i + 1, context.options.iters));
    seconds += context.communicator.run(placement.spec, placement.run_buffers, plan.algorithm).seconds;
  }
  return seconds / context.options.iters;
}

// #wrong over up to -c check runs, each on fresh inputs with poisoned outputs, stopping at the
// first run with wrong elements.
std::optional<int64_t> checked_runs_wrong(const BenchContext& context, const Placement& placement, CheckSpec check) {
  std::optional<int64_t> wrong = 0;
  for (int c = 0; c < context.options.check_iters && *wrong == 0; ++c) {
    check.seed = static_cast<uint64_t>(c) + 1;
    poison_outputs(check, placement.buffers);
    fill_inputs(check, placement.buffers);  // after the poison: in place, the input lives in the output
    context.memory.upload();
    context.communicator.run(placement.spec, placement.run_buffers, context.plan.algorithm);
    context.memory.download();
    wrong = count_wrong(check, placement.buffers);
    if (context.per_process) std::tie(std::ignore, wrong) = combine_over_processes(0, wrong);
  }
  return wrong;
}

// Times one size in one placement, then checks it (-c): one half of its table row.
BenchResult measure(const BenchContext& context, const CollectiveSpec& spec, const SizeCounts& counts,
                    size_t size_index, bool in_place) {
  const BenchPlan& plan = context.plan;
  const int nranks = plan.layout.nranks;
  auto phase = [&](const std::string& what) {
    context.progress.update(fmt::format("tandem bench: {} B ({}/{}), {}, {}", counts.size_bytes, size_index + 1,
                                        plan.sizes.size(), in_place ? "in-place" : "out-of-place", what));
  };
  const Placement placement{spec, counts, in_place,
                            context.memory.host(plan.collective, counts.count, plan.dtype, in_place),
                            context.memory.run(plan.collective, counts.count, plan.dtype, in_place)};
  const CheckSpec check{plan.collective, plan.dtype, plan.op, plan.root, nranks, counts.count, 0};
  double seconds = timed_runs_s(context, placement, check, phase);
  std::optional<int64_t> wrong;
  if (context.options.check_iters > 0) {
    phase("checking");
    wrong = checked_runs_wrong(context, placement, check);
  }
  if (context.per_process) std::tie(seconds, std::ignore) = combine_over_processes(seconds, std::nullopt);
  return make_result(seconds, counts, plan.collective, nranks, wrong);
}

// The sweep's rows, and which algorithm kAuto picked per size (empty unless --algo auto).
struct BenchSweep {
  std::vector<BenchRow> rows;
  std::vector<std::pair<int64_t, Algorithm>> auto_choices;
};

// Measures every size, out of place and then in place, printing each row as it comes.
BenchSweep measure_sizes(const BenchContext& context, bool printing) {
  const BenchPlan& plan = context.plan;
  const int nranks = plan.layout.nranks;
  const bool in_place_supported = buffer_geometry(plan.collective, nranks).in_place_supported;
  BenchSweep out;
  for (size_t size_index = 0; size_index < plan.sizes.size(); ++size_index) {
    const SizeCounts counts = nccl_tests_counts(plan.collective, plan.sizes[size_index], plan.dtype, nranks);
    CollectiveSpec spec;
    spec.collective = plan.collective;
    spec.count = counts.count;
    spec.dtype = plan.dtype;
    spec.op = plan.op;
    spec.root = plan.root;
    spec.nranks = nranks;
    if (plan.algorithm == Algorithm::kAuto) {
      out.auto_choices.emplace_back(counts.size_bytes, context.communicator.choose(spec));
    }
    BenchRow row = table_row(plan, counts);
    row.out_of_place = measure(context, spec, counts, size_index, false);
    if (in_place_supported) row.in_place = measure(context, spec, counts, size_index, true);
    context.progress.clear();
    if (printing) fmt::print("{}", format_row(row));
    std::fflush(stdout);
    out.rows.push_back(row);
  }
  return out;
}

// The table's footer, kAuto's choices, and the --trace file with the algorithm of each size.
void finish_bench_output(const BenchOptions& options, const BenchPlan& plan, const BenchSweep& sweep) {
  fmt::print("{}", format_footer(sweep.rows));
  if (!sweep.auto_choices.empty()) {
    std::vector<std::pair<int64_t, std::string>> choices;
    for (const auto& [bytes, chosen] : sweep.auto_choices) choices.emplace_back(bytes, name(chosen));
    fmt::print("# Algorithm (auto): {}\n", describe_size_runs(choices));
  }
  std::fflush(stdout);
  std::vector<std::string> algorithms;
  for (const BenchRow& row : sweep.rows) {
    std::string algorithm(name(plan.algorithm));
    for (const auto& [bytes, chosen] : sweep.auto_choices) {
      if (bytes == row.counts.size_bytes) algorithm = std::string(name(chosen));
    }
    algorithms.push_back(algorithm);
  }
  write_bench_trace(options, plan.collective, plan.layout.nranks, sweep.rows, algorithms);
}

// The host backend refuses a schedule above kMaxHostOpsPerRun; refuse here first, from an estimate
// for the largest size, before minutes of building it.
void check_host_ops(const BenchPlan& plan) {
  if (plan.sizes.empty()) return;
  const SizeCounts counts = nccl_tests_counts(plan.collective, plan.sizes.back(), plan.dtype, plan.layout.nranks);
  const CollectiveSpec spec{plan.collective, counts.count, plan.dtype, plan.op, plan.root, plan.layout.nranks};
  if (const std::optional<int64_t> ops = estimate_schedule_ops(spec, plan.layout, plan.algorithm)) {
    if (*ops > kMaxHostOpsPerRun) refuse_host_ops(*ops, plan.collective, plan.layout.nranks, /*estimated=*/true);
  }
}

void run_bench(const BenchOptions& options, CommandStatus& status) {
  if (options.backend == "sim") {
    run_sim_bench(options, status);
    return;
  }
  const BenchPlan plan = make_plan(options);
  if (options.backend == "host") check_host_ops(plan);
  std::unique_ptr<Executor> executor = make_executor(options.backend);
  CommunicatorOptions communicator_options;
  communicator_options.algorithm = plan.algorithm;
  communicator_options.params.channels = channels_for(options, plan.layout);
  Communicator communicator(*executor, plan.layout, communicator_options);
  const RunMemory memory = allocate_bench_memory(*executor, plan);
  const int nranks = plan.layout.nranks;
  const bool per_process = executor->local_ranks(nranks).size() < static_cast<size_t>(nranks);
  const bool printing = !per_process || nccl::current_launch().info().rank == 0;  // one process prints: rank 0's

  if (printing) print_bench_header(options, plan, *executor);
  Progress progress;
  const BenchSweep sweep = measure_sizes({options, plan, communicator, memory, per_process, progress}, printing);
  if (printing) {
    finish_bench_output(options, plan, sweep);
  } else {
    std::fflush(stdout);
  }

  const int64_t failed = failed_results(sweep.rows);
  if (failed > 0) {
    std::fprintf(stderr, "tandem: error: %lld of the results above have wrong elements (#wrong)\n",
                 static_cast<long long>(failed));
    status.exit_code = kExitFindings;
  } else {
    status.exit_code = kExitSuccess;
  }
}

// What to sweep and where: the collective, the backend, the sizes and the ranks.
void add_sweep_options(CLI::App& command, const std::shared_ptr<BenchOptions>& options) {
  command
      .add_option("collective", options->collective,
                  "all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all or send_recv "
                  "(also allreduce, allgather, reducescatter, alltoall, sendrecv)")
      ->required();
  command
      .add_option("--backend", options->backend,
                  "host (ranks as threads, real data), sim (simulated cluster: --cluster, --nodes, ...), cuda "
                  "(every rank on one GPU; TANDEM_CUDA_GRAPH=1 launches each run as one CUDA graph), nccl (tandem's "
                  "schedules on NCCL) or nccl-native (NCCL's own "
                  "collectives); cuda and nccl need GPUs")
      ->capture_default_str();
  command.add_option("-b,--minbytes", options->min_bytes, "smallest size in bytes")->capture_default_str();
  command.add_option("-e,--maxbytes", options->max_bytes, "largest size in bytes")->capture_default_str();
  command.add_option("-i,--stepbytes", options->step_bytes, "size increment when -f is 1")->capture_default_str();
  command.add_option("-f,--stepfactor", options->step_factor, "size multiplier (> 1 replaces -i)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  command
      .add_option("-g,--ngpus", options->nranks,
                  "host: number of ranks (one thread each); sim: GPUs of each node taking part (default: all)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxBenchRanks))
      ->each([options](const std::string&) { options->ngpus_given = true; });
}

// The simulator's own options (--backend sim): its network model, ring order, calibration and cluster.
void add_sim_options(CLI::App& command, BenchOptions& options) {
  command
      .add_option("--network", options.network,
                  "sim: fluid (default), ideal (alpha-beta), or packet (ns-3, <= 32 GPUs, experimental)")
      ->capture_default_str();
  command.add_flag("--node-major", options.node_major,
                   "sim: rings in rank order instead of the rail-aligned order (shows ECMP collisions)");
  command.add_option("--calibration", options.calibration,
                     "sim: apply this calibration profile (from `tandem calibrate`, docs/calibrate.md) to the "
                     "network model; its preset must be the cluster's");
  add_cluster_options(command, options.cluster);
}

// How each size runs: algorithm, data type and operation, run counts, root, layout, channels, and the trace.
void add_run_options(CLI::App& command, BenchOptions& options) {
  command
      .add_option("--algo", options.algorithm,
                  algorithm_names() + ", nvls, nvls_tree, collnet_direct, collnet_chain, p2p (sim) or auto")
      ->capture_default_str();
  command
      .add_option("-d,--datatype", options.dtype,
                  "float, half, bfloat16, double, int32, int64 (or f32, f16, bf16, f64, i32, i64)")
      ->capture_default_str();
  command.add_option("-o,--op", options.op, "sum, prod, min, max or avg")->capture_default_str();
  command.add_option("-n,--iters", options.iters, "timed runs per size")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  command.add_option("-w,--warmup_iters", options.warmup_iters, "untimed runs before the timed ones")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  command.add_option("-c,--check", options.check_iters, "data-check runs per size (0: no check, #wrong N/A)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  command.add_option("-r,--root", options.root, "root rank of broadcast / reduce")->capture_default_str();
  command
      .add_option("--ranks-per-node", options.ranks_per_node,
                  "ranks per node (hierarchical); default: 1, a flat layout")
      ->check(CLI::Range(1, kMaxBenchRanks));
  command
      .add_option("--trace", options.trace,
                  "write a Chrome / Perfetto trace (JSON) of the sweep to this file: per size a slice on a "
                  "'sizes' track and on every rank's track, on the run's clock (docs/traces.md)")
      ->check(output_file_path())
      ->type_name("FILE");
  command
      .add_option("--channels", options.channels,
                  "NCCL channels for ring and tree (each its own ring / tree pair half); default: NCCL's count "
                  "(sim: its tuner's for each size; other backends: 2 per rank of a node with --ranks-per-node, "
                  "NCCL's doubled search channels, else 1)")
      ->check(CLI::Range(1, 64));
}

}  // namespace

void add_bench_command(CLI::App& app, CommandStatus& status) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* command = app.add_subcommand(
      "bench",
      "Sweep message sizes of one collective like nccl-tests and print its table: time, algbw, busbw and "
      "#wrong (a real data check), out-of-place and in-place. Sizes: 8, 64K, 64M, 1G (K/M/G = 1024^1..3).");
  add_sweep_options(*command, options);
  add_sim_options(*command, *options);
  add_run_options(*command, *options);
  command->callback([options, command, &status] {
    // The simulator's own options mean nothing to a backend that runs the collective.
    if (options->backend != "sim") {
      for (const char* flag : {"--network", "--node-major", "--calibration"}) {
        if (command->count(flag) > 0) {
          fail(ErrorCode::kInvalidArgument, "{} applies to --backend sim only (this is --backend {})", flag,
               options->backend);
        }
      }
    }
    run_bench(*options, status);
  });
}

}  // namespace tandem::app
