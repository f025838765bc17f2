// Calibration profiles and the fit behind `tandem calibrate` (docs/calibrate.md).
//
// A profile is a strict, versioned YAML file: the cluster it was fitted on (preset, nodes, GPUs
// per node, as given on the command line), the network model's fittable parameters
// (sim::network_parameters(): default and fitted value each) and where they came from (files, row
// counts, date, fit residual). `--calibration FILE` and a scenario's `calibration:` key apply its
// values to the simulator's NetworkModel.
//
// The fit: every measured row is run through sim::run_sweep on the cluster given, and the
// parameters the rows inform are moved, within their physical bounds, to minimise the sum of
// squares of log(predicted time / measured time) (bounded_least_squares on log(parameter)).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "app/calibrate/nccl_tests_log.h"
#include "models/cluster.h"
#include "sim/simulator.h"

namespace tandem::app {

inline constexpr int kCalibrationProfileVersion = 1;
// A profile file larger than this is not a profile.
inline constexpr uint64_t kMaxProfileBytes = 1 << 20;
// More simulations at once than this is a typo: each is a child process.
inline constexpr int kMaxCalibrationJobs = 1024;

struct CalibrationProfile {
  std::string path;  // the file it was read from (not written)
  // The cluster it was fitted on.
  std::string preset;
  int nodes = 1;
  int gpus_per_node = 0;
  std::string description;  // models::describe of the cluster; empty in a hand-written profile
  struct Parameter {
    std::string name;
    double default_value = 0;
    double value = 0;
    bool informed = true;  // false: the logs did not inform it (value = default)
    // One standard error of the fitted value, relative (0.02 = +-2%), from the residuals' spread
    // and the Jacobian at the fit; 0 when not computed (not informed, or no more rows than
    // parameters).
    double uncertainty = 0;
  };
  std::vector<Parameter> parameters;  // only the parameters the file sets; others stay at default
  // Where the values came from (absent in a hand-written profile).
  struct Source {
    std::string file;
    int rows = 0;
  };
  std::vector<Source> sources;
  std::string date;  // UTC, YYYY-MM-DD
  int rows_fitted = 0;
  int rows_held_out = 0;
  double rms_log_error_before = 0;  // sqrt(mean(log(pred/meas)^2)) over the fitted rows
  double rms_log_error_after = 0;
};

std::string profile_yaml(const CalibrationProfile& profile);
// Throws Error(kFormat) "FILE:LINE:COL: ..." for an unknown key, a wrong version, an unknown
// parameter, a value outside its bounds.
CalibrationProfile parse_profile(std::string_view text, const std::string& path);
CalibrationProfile read_profile(const std::string& path);

// The network model with the profile's values set (those marked `informed: false` left as they are).
sim::NetworkModel apply_profile(const CalibrationProfile& profile, sim::NetworkModel model);
// Throws Error(kInvalidArgument) when the profile was fitted on another preset than `cluster`'s
// (its efficiencies describe other links). Other node counts are the point: no error.
void check_profile_cluster(const CalibrationProfile& profile, const models::ClusterSpec& cluster);
// "cluster.yaml (fitted 2026-12-04 from 3 logs, dgx-h100)" or "changed.yaml (hand-written, dgx-h100)".
std::string profile_summary(const CalibrationProfile& profile);

// ---- The fit ----

struct CalibrationRequest {
  models::ClusterSpec cluster;
  int gpus_per_node = 0;  // the cluster's
  std::vector<MeasurementFile> files;
  std::vector<std::string> hold_out;                 // row labels or file paths kept out of the fit
  std::vector<std::string> only;                     // parameter names to fit; empty: all
  int jobs = 2;                                      // simulations at once
  std::function<void(const std::string&)> progress;  // one line per iteration; may be empty
};

struct CalibratedRow {
  MeasuredRow row;  // a merged row: the first's label, the mean time
  bool held_out = false;
  int samples = 1;       // rows of the logs it stands for: repeats of one measurement are merged
  double before_us = 0;  // predicted with the defaults
  double after_us = 0;   // predicted with the fitted parameters
  std::string ran;       // algorithm/protocol the simulator ran
};

struct CalibrationResult {
  CalibrationProfile profile;  // every parameter, informed or not
  std::vector<CalibratedRow> rows;
  std::vector<std::string> skipped;   // lines and rows not fitted (CSV rows of other systems, elided rows), with why
  std::vector<std::string> warnings;  // "warning: ..." lines for the report: what was assumed
  int rows_merged = 0;                // rows that repeated a measurement, merged into another
  int iterations = 0;
  int evaluations = 0;
  bool converged = true;  // false: the fit stopped at its iteration limit
};

// Throws Error(kInvalidArgument) for a log whose GPU count (or node count) differs from the
// cluster's, for no rows to fit, and Error(kUnsupported) for a row the simulator cannot run.
CalibrationResult calibrate(const CalibrationRequest& request);

// The printed report: rows, parameters, warnings.
std::string calibration_report(const CalibrationResult& result);
// The rows as JSON (DIR/results.json of `tandem calibrate --out DIR`).
std::string calibration_json(const CalibrationResult& result);

}  // namespace tandem::app
