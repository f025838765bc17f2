// The workload kinds `tandem run` knows, behind one interface: each runs its part of a scenario and
// hands back everything the command writes (the report, results.json, results.csv, the trace) and
// its verdict, so that `tandem run` dispatches once and every kind gets every output. A new kind
// (start-up, memory) is one more WorkloadKind and one line in workload_kind_of().
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "app/scenario/scenario.h"
#include "app/scenario/scenario_run.h"

namespace tandem::app {

struct WorkloadRunOptions {
  ScenarioBackend backend = ScenarioBackend::kSim;
  std::string out_dir;        // "" : nothing is written (a kind may still need it, e.g. for dumps)
  bool quiet = false;         // the report keeps only the expectations and the verdict
  bool trace = false;         // fill WorkloadOutput::trace
  bool dump_on_exit = false;  // collective loops: every rank's flight-recorder dump at the end
  bool explain = false;       // training: each layout's activations tensor by tensor
  ProgressFn progress;        // long runs report here (may be empty)
};

struct WorkloadOutput {
  std::string report;                   // printed to stdout as is
  std::string results_json;             // results.json (when the scenario's outputs ask for it)
  std::string results_csv;              // results.csv (idem)
  std::optional<nlohmann::json> trace;  // with WorkloadRunOptions::trace
  bool pass = false;                    // every expectation holds (the exit code)
};

class WorkloadKind {
 public:
  virtual ~WorkloadKind() = default;
  // The scenario's `workload.type`: "collective-sweep", "collective-loop", "training".
  virtual std::string_view type() const = 0;
  virtual WorkloadOutput run(const Scenario& scenario, const WorkloadRunOptions& options) const = 0;
  // Whether it keeps a flight recorder and can honour --dump-on-exit.
  virtual bool writes_dumps() const { return false; }
};

// The kind that runs `scenario`'s workload.
const WorkloadKind& workload_kind_of(const Scenario& scenario);

}  // namespace tandem::app
