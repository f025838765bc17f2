// Scenarios: the YAML files `tandem run` reads (docs/scenarios.md has every key). A scenario names
// a cluster (a preset plus overrides) and variants of it, a backend, a network model, a workload,
// the outputs and the expectations that decide whether the run passes.
//
// The format is versioned (`tandem_scenario: 1`) and strict: an unknown key, a missing required
// key, a value of the wrong kind or out of range, or a reference to something the scenario does not
// define is an Error(kFormat) whose message starts with "FILE:LINE:COLUMN: " (1-based, from the
// YAML node the problem is in) and names the key's place in the file ("workload.sizes.min").
//
// Layout for what comes next: each section is parsed by its own function, in scenario.cc or in a
// scenario_*.cc file of its own (scenario_internal.h lists them); a new top-level section (faults,
// recovery) adds a key, a member here and a parser; a new workload type adds an alternative to
// Workload, a reader in a file of its own and a row to scenario.cc's workload-type table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "app/calibrate/calibration.h"
#include "app/common/cluster_keys.h"
#include "app/common/common.h"
#include "core/faults.h"
#include "core/flight_recorder.h"
#include "core/recovery.h"
#include "core/types.h"
#include "models/caching_allocator.h"
#include "models/cluster.h"
#include "models/reliability.h"
#include "models/workload.h"
#include "sim/simulator.h"
#include "sim/startup.h"

namespace tandem::app {

// The version this tandem reads and writes.
inline constexpr int kScenarioFormatVersion = 1;

// Limits checked at load. Beyond them a value is a typo rather than a plan, or more than the
// simulator is meant for.
inline constexpr int kMaxScenarioGpusPerNode = 64;
inline constexpr int kMaxScenarioGpus = 32768;                      // nodes * gpus_per_node
inline constexpr size_t kMaxScenarioVariants = 32;                  // the base cluster included
inline constexpr size_t kMaxScenarioPoints = 20000;                 // collectives x sizes x algorithms
inline constexpr size_t kMaxScenarioExpectations = 1000;
// The cluster's physical ranges (link rates, latencies, oversubscription): models/cluster.h.
// A scenario file: the shipped ones are under 4 KiB, and every list in one is capped above (points,
// variants, expectations, faults). A file a thousand times larger is not a scenario.
inline constexpr uint64_t kMaxScenarioFileBytes = uint64_t{4} << 20;  // 4 MiB

// The name the scenario's own cluster goes by in results and expectations.
inline constexpr std::string_view kBaseVariantName = "base";

// sim: the simulator; host: CPU threads; cuda: every rank on one GPU; nccl: tandem's schedules on
// NCCL (cuda and nccl need a build with CUDA and a GPU: docs/real-hardware.md).
enum class ScenarioBackend : uint8_t { kSim, kHost, kCuda, kNccl };
std::string_view name(ScenarioBackend backend);
// "sim", "host", "cuda", "nccl"; throws Error(kInvalidArgument) naming the accepted ones.
ScenarioBackend parse_backend(std::string_view text);

// sim's network models: fluid (calibrated max-min sharing), packet (ns-3), ideal (alpha-beta exact).
enum class NetworkChoice : uint8_t { kFluid, kPacket, kIdeal };
std::string_view name(NetworkChoice network);
sim::NetworkModel network_model(NetworkChoice network);
struct Scenario;
// The scenario's network model: its `network:` choice with its `calibration:` profile applied.
sim::NetworkModel network_model(const Scenario& scenario);

// One cluster the workload runs on: the scenario's own ("base") or a variant of it.
struct ClusterVariant {
  std::string name;
  models::ClusterSpec cluster;  // the preset with every override applied
  SourceMark mark;              // where its cluster mapping is
  // `allocator:` (PyTorch's PYTORCH_CUDA_ALLOC_CONF string), the variant's or the scenario's: what
  // a training step's memory timeline runs under. "" and the defaults when neither sets it.
  std::string alloc_conf;
  models::AllocatorSettings allocator;
};

// workload: {type: collective-sweep}: every collective x size x algorithm, on every variant.
struct CollectiveSweep {
  std::vector<Collective> collectives;
  std::vector<int64_t> sizes_bytes;     // nccl-tests sizes (all_gather / reduce_scatter: the total)
  std::vector<std::string> algorithms;  // core algorithm names, "nvls", "auto"
  DataType dtype = DataType::kBF16;
  ReduceOp op = ReduceOp::kSum;
  int gpus_per_node = 0;  // GPUs of each node taking part; 0 = all of them
};

// workload: {type: collective-loop}: one collective run `iterations` times in a row, as a training
// step issues them; faults and recovery act on this sequence (docs/faults.md).
struct CollectiveLoop {
  Collective collective = Collective::kAllReduce;
  int64_t size_bytes = 0;  // nccl-tests' size
  Algorithm algorithm = Algorithm::kRing;
  int iterations = 4;
  DataType dtype = DataType::kBF16;
  ReduceOp op = ReduceOp::kSum;
  int gpus_per_node = 0;  // 0 = all of them
};

// One layout of a training workload, with what it overrides of the workload's settings.
struct TrainingLayoutEntry {
  models::ParallelLayout layout;
  std::optional<models::Recompute> recompute;
  std::optional<int> micro_batch;
  SourceMark mark;
};

// workload: {type: training}: one training step of a dense transformer, per layout, on every
// variant; simulated (models/workload.h, sim/training.h).
struct TrainingWorkload {
  models::TrainingConfig base;          // model, sequence, batch, precision, MFU, algorithm, recompute
  std::optional<double> batch_per_gpu;  // instead of a fixed global_batch: sequences per GPU
  std::vector<TrainingLayoutEntry> layouts;

  // Layout `index` on `gpus` GPUs: the base with the layout's overrides (and the global batch
  // from batch_per_gpu when set).
  models::TrainingConfig config_for(size_t index, int gpus) const;
};

// One set of start-up levers of a start-up workload, named.
struct StartupConfig {
  std::string name;
  sim::StartupLevers levers;
  SourceMark mark;
};

// workload: {type: startup}: the job's start-up (sim/startup.h) under each lever set, on every
// variant (docs/startup.md).
struct StartupWorkload {
  int gpus = 0;                        // 0: every GPU of the variant's cluster
  models::ParallelLayout layout;       // its process groups (tp, cp, ep, pp; dp is the rest)
  std::vector<StartupConfig> configs;  // the first is the baseline
  const StartupConfig* find_config(std::string_view config_name) const;
};

// workload: {type: claims}: a release note's claims ("16 GB all_reduce 12.4 -> 10.1 ms"), each
// set against what tandem's models predict for its baseline and for the changes that could produce
// it, with a verdict: plausible, needs conditions, or physically impossible (docs/claims.md).
enum class ClaimKind : uint8_t {
  kCollective,  // one collective's time (ms) on the scenario's cluster: simulated, and the physical bound
  kMemory,      // fragmentation (%) at the peak of one training step, under PyTorch's caching allocator
  kMtbf,        // mean time between job restarts (h): failure rates and in-place recovery
  kStartup,     // the job's start-up (s): sim/startup.h under a set of levers
};
std::string_view name(ClaimKind kind);        // "collective", "memory", "mtbf", "startup"
std::string_view claim_unit(ClaimKind kind);  // "ms", "%", "h", "s"
// Whether a larger value is the better one (MTBF) or a smaller (times, fragmentation).
bool claim_higher_is_better(ClaimKind kind);

// One configuration a claim is evaluated under: its baseline, or one candidate for its "after".
// Each kind reads the fields it needs and refuses the others.
struct ClaimSetting {
  std::string name;
  std::string variant{kBaseVariantName};  // collective: the cluster
  std::string algorithm = "auto";         // collective: a sweep algorithm name
  std::string allocator;                  // memory: PyTorch's PYTORCH_CUDA_ALLOC_CONF string ("" = defaults)
  models::RecoveryPolicies recovery;      // mtbf: the in-place recovery policies
  sim::StartupLevers levers;              // startup
  SourceMark mark;
};

// What the release note says the value was and is.
struct ClaimedValues {
  double before = 0;
  double after = 0;
  bool after_or_better = false;  // "160+ h": the after value is a floor (a ceiling for times)
};

inline constexpr double kDefaultClaimTolerance = 0.25;

struct Claim {
  std::string name;
  std::string says;  // the release note's words, quoted in the report
  ClaimKind kind = ClaimKind::kCollective;
  ClaimedValues claimed;
  double tolerance = kDefaultClaimTolerance;  // relative: within it, tandem's value agrees with the claim
  // collective
  Collective collective = Collective::kAllReduce;
  int64_t size_bytes = 0;  // nccl-tests' size as the note states it (the per-rank buffer for all_reduce)
  // memory: one layout of a training workload (its first)
  std::optional<TrainingWorkload> training;
  // mtbf
  std::string rates = "llama3";  // models/reliability.h's rate tables
  // startup
  models::ParallelLayout layout;
  // every kind
  ClaimSetting before;
  std::vector<ClaimSetting> after;  // candidates: the report names the one nearest the claim
  SourceMark mark;
};

struct ClaimsWorkload {
  std::vector<Claim> claims;
  const Claim* find(std::string_view claim_name) const;
};
inline constexpr size_t kMaxClaims = 32;
inline constexpr size_t kMaxClaimCandidates = 16;

// One alternative per workload type.
using Workload = std::variant<CollectiveSweep, CollectiveLoop, TrainingWorkload, StartupWorkload, ClaimsWorkload>;

// Limits of the loop workload and the fault sections.
inline constexpr int kMaxLoopIterations = 10000;
inline constexpr size_t kMaxScenarioFaults = 100;

// Accepted bounds of one measured value; at least one side is set.
struct Bound {
  std::optional<double> min;
  std::optional<double> max;
  bool set() const { return min.has_value() || max.has_value(); }
};

// One entry of `expect`: bounds on one point of the sweep.
struct Expectation {
  std::string variant{kBaseVariantName};
  Collective collective = Collective::kAllReduce;
  std::string algorithm;
  int64_t size_bytes = 0;
  std::optional<ScenarioBackend> backend;  // only checked on this backend; empty: on every backend
  Bound time_us;
  Bound algbw_GBps;
  Bound busbw_GBps;
  SourceMark mark;
};

// Which files `tandem run --out DIR` writes.
struct Outputs {
  bool json = true;
  bool csv = true;
  // Flight-recorder dumps under DIR/fr/: always when the watchdog or an error triggers them (unless
  // the recorder is off); `dumps: true` also writes them at the end of the run (--dump-on-exit).
  bool dumps = false;
  std::optional<FrFormat> dump_format;   // pickle (default) or json
  std::optional<size_t> fr_buffer_size;  // overrides TORCH_FR_BUFFER_SIZE; 0 = recorder off
};

// One entry of `expect` for a collective-loop: what one iteration (or the whole loop) must end in.
struct LoopExpectation {
  std::optional<int64_t> iteration;  // empty: every iteration (outcome) / the whole loop (time)
  std::optional<Outcome> outcome;
  std::optional<std::vector<int>> culprit_ranks;  // the flight-recorder analysis of the dumps
  std::optional<ScenarioBackend> backend;
  Bound time_us;  // the iteration's time (or the loop's)
  Bound cost_us;  // time minus its fault-free time
  SourceMark mark;
};

// One entry of `expect` for a training workload: bounds on one layout's step on one variant.
struct TrainingExpectation {
  std::string variant{kBaseVariantName};
  std::string layout;
  std::optional<ScenarioBackend> backend;
  std::optional<bool> fits;  // whether the layout fits in the GPU's memory
  Bound step_time_s;
  Bound achieved_mfu;
  Bound exposed_comm_s;
  Bound bubble_s;
  Bound memory_GB;
  Bound tokens_per_s_per_gpu;
  // The step time relative to the same layout on another variant ("speedup over base").
  std::optional<std::string> relative_to;
  Bound speedup;  // other variant's step time / this one's
  // The flight-recorder analysis of the dumps the scenario's faults left (a rehearsal).
  std::optional<std::vector<int>> culprit_ranks;
  SourceMark mark;
};

// One entry of `expect` for a start-up workload: bounds on one lever set's start-up on one variant.
struct StartupExpectation {
  std::string variant{kBaseVariantName};
  std::string config;
  Bound total_s;
  // The start-up relative to another lever set on the same variant ("speedup over the baseline").
  std::optional<std::string> relative_to;
  Bound speedup;  // other config's total / this one's
  SourceMark mark;
};

// A claim's verdict: tandem's predictions agree with both values; they would with the conditions
// the report lists; or a claimed value beats a bound that no configuration can beat.
enum class ClaimVerdict : uint8_t { kPlausible, kNeedsConditions, kImpossible };
std::string_view name(ClaimVerdict verdict);  // "plausible", "needs-conditions", "impossible"
ClaimVerdict parse_claim_verdict(std::string_view text);

// One entry of `expect` for a claims workload.
struct ClaimExpectation {
  std::string claim;
  std::optional<ClaimVerdict> verdict;
  Bound tandem_before;  // tandem's value for the baseline, in the claim's unit
  Bound tandem_after;   // tandem's value for the candidate nearest the claim
  SourceMark mark;
};

// One entry of `expect:`.
using ScenarioExpectation =
    std::variant<Expectation, LoopExpectation, TrainingExpectation, StartupExpectation, ClaimExpectation>;

struct Scenario {
  std::string file;  // the path it was loaded from, as given (for messages and results)
  std::string name;
  std::string description;
  std::vector<ClusterVariant> variants;  // variants[0] is the base cluster
  ScenarioBackend backend = ScenarioBackend::kSim;
  NetworkChoice network = NetworkChoice::kFluid;
  // `calibration: FILE` (relative to the scenario file): a profile from `tandem calibrate` applied
  // to the network model of every simulation (docs/calibrate.md).
  std::optional<CalibrationProfile> calibration;
  Workload workload;
  Outputs outputs;
  // `expect:`, in file order; each entry of the kind its workload checks (a collective-sweep's
  // Expectation, a loop's, a training step's, a start-up's, a claim's).
  std::vector<ScenarioExpectation> expectations;
  FaultPlan faults;                                        // `faults:` and `fault_seed:`
  std::vector<SourceMark> fault_marks;                     // where each fault is, for messages
  RecoveryPolicy recovery;

  const ClusterVariant* find_variant(std::string_view variant_name) const;

  // The expectations of kind E, in file order.
  template <typename E>
  std::vector<E> expectations_of() const {
    std::vector<E> out;
    for (const ScenarioExpectation& e : expectations) {
      if (const E* one = std::get_if<E>(&e)) out.push_back(*one);
    }
    return out;
  }
};

// Reads and checks `path`. Throws Error(kIo) when it cannot be read, Error(kFormat) for anything
// the file gets wrong (messages start with "path:line:column: "). `overrides` (the command line's
// cluster flags) replace the file's cluster values in every variant.
Scenario load_scenario(const std::string& path, const ClusterOverrides& overrides = {});

// The same for YAML text; `file` is what messages and Scenario::file call it.
Scenario parse_scenario(std::string_view yaml_text, const std::string& file, const ClusterOverrides& overrides = {});

// Whether the workload's algorithm name runs `collective` at all (the runner shows "n/a" where
// not): core algorithms as core/algorithms.h says, nvls for all_reduce only, auto for everything.
bool algorithm_applies(std::string_view algorithm, Collective collective);
// Why not, for the report: "tree does not implement all_gather".
std::string not_applicable_reason(std::string_view algorithm, Collective collective);
// A training step's collective algorithm (its `algorithm` key, a plan's `algorithms` axis): auto
// (NCCL's tuner), ring, or tree where it applies (all_reduce; NCCL's pick elsewhere). Throws
// Error(kInvalidArgument) naming what training steps run, for any other name.
std::string parse_training_algorithm(std::string_view text);

}  // namespace tandem::app
