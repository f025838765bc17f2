#include "app/calibrate/calibration.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/calibrate/least_squares.h"
#include "app/common/common.h"
#include "app/common/yaml_reader.h"
#include "core/error.h"
#include "core/sizes.h"
#include "core/text.h"
#include "sim/isolated.h"
#include "sim/sweep.h"

namespace tandem::app {

using nlohmann::json;

// ---- The fit ----

namespace {

// A threshold on d log(time) / d log(parameter): below it on every row, the logs do not inform the
// parameter (a doubling would move no row by 0.7%, less than published rows' own spread: such a
// parameter would be fitted to the noise, to a bound).
constexpr double kMinSensitivity = 1e-2;
// A row off by more than this after the fit gets a warning.
constexpr double kRowWarning = 0.10;
// A parameter whose standard error is larger than this (relative) gets a warning.
constexpr double kParameterWarning = 0.10;

// The preset a published row's system names (as bench/accuracy.cc reads them).
std::string preset_of_system(const std::string& system) {
  if (system.find("A100") != std::string::npos) return "hgx-a100";
  if (system.find("H200") != std::string::npos) return "dgx-h200";
  if (system.find("H100") != std::string::npos) return "dgx-h100";
  return "";
}

struct FitRow {
  MeasuredRow row;
  bool held_out = false;
  int gpus_per_node = 0;
  size_t file = 0;  // index in request.files
  int samples = 1;  // rows of the logs it stands for (repeats merged)
};

// Rows that repeat one measurement (collective, size, type, algorithm, protocol, GPUs, held out or
// not) become one row with their mean time: a log that repeats its sweep says the same thing many
// times, and the simulator needs to run it once. The first row's label and place stand for all.
// Returns how many rows were merged away.
int merge_repeated_rows(std::vector<FitRow>& rows) {
  using Key = std::tuple<Collective, int64_t, DataType, std::string, std::string, int, bool>;
  std::map<Key, size_t> first;
  std::vector<FitRow> merged;
  std::vector<double> time_sum;
  for (FitRow& row : rows) {
    const Key key{row.row.collective, row.row.bytes,     row.row.dtype, row.row.algorithm,
                  row.row.protocol,   row.gpus_per_node, row.held_out};
    const auto [at, added] = first.try_emplace(key, merged.size());
    if (added) {
      time_sum.push_back(row.row.time_us);
      merged.push_back(std::move(row));
    } else {
      time_sum[at->second] += row.row.time_us;
      ++merged[at->second].samples;
    }
  }
  const int removed = static_cast<int>(rows.size() - merged.size());
  for (size_t i = 0; i < merged.size(); ++i) merged[i].row.time_us = time_sum[i] / merged[i].samples;
  rows = std::move(merged);
  return removed;
}

// One run of every row under one network model: what each row took (s), in row order.
struct Evaluation {
  std::vector<double> seconds;
  std::vector<std::string> ran;
};

class RowSimulator {
 public:
  RowSimulator(const CalibrationRequest& request, const std::vector<FitRow>& rows) : request_(request), rows_(rows) {
    for (size_t i = 0; i < rows.size(); ++i) groups_[rows[i].gpus_per_node].push_back(i);
  }

  // Every row under each model: one child process per model and GPUs-per-node group.
  std::vector<Evaluation> run(const std::vector<sim::NetworkModel>& models) const {
    std::vector<std::pair<size_t, int>> work;  // (model, group key)
    for (size_t m = 0; m < models.size(); ++m) {
      for (const auto& [per_node, indices] : groups_) work.emplace_back(m, per_node);
    }
    std::vector<Evaluation> out(models.size());
    for (Evaluation& e : out) {
      e.seconds.assign(rows_.size(), 0.0);
      e.ran.assign(rows_.size(), "");
    }
    std::string first_error;
    sim::run_isolated_parallel(
        work.size(),
        [&](size_t w) {
          const auto [m, per_node] = work[w];
          sim::SweepRequest sweep;
          sweep.cluster = request_.cluster;
          sweep.gpus_per_node = per_node;
          sweep.network = models[m];
          for (size_t i : groups_.at(per_node)) {
            sim::SweepPoint point;
            point.collective = rows_[i].row.collective;
            point.bytes = rows_[i].row.bytes;
            const bool p2p = point.collective == Collective::kAllToAll || point.collective == Collective::kSendRecv;
            if (!p2p) point.algorithm = sim::parse_sim_algorithm_or_auto(rows_[i].row.algorithm);
            point.protocol = sim::parse_protocol_or_auto(rows_[i].row.protocol);
            point.dtype = rows_[i].row.dtype;
            sweep.points.push_back(point);
          }
          return sim::run_sweep(sweep, /*isolated=*/false);
        },
        std::max(1, request_.jobs),
        [&](size_t w, const sim::Isolated<std::vector<sim::SweepPointResult>>& result) {
          const auto [m, per_node] = work[w];
          if (!result.reply) {
            if (first_error.empty()) first_error = result.error;
            return;
          }
          const std::vector<size_t>& indices = groups_.at(per_node);
          for (size_t k = 0; k < indices.size(); ++k) {
            const sim::SweepPointResult& r = result.reply->at(k);
            if (!r.ok) {
              if (first_error.empty()) {
                first_error =
                    fmt::format("{}: the simulator cannot run this row: {}", rows_[indices[k]].row.label, r.error);
              }
              continue;
            }
            out[m].seconds[indices[k]] = r.seconds;
            out[m].ran[indices[k]] = fmt::format("{}/{}", sim::name_or_auto(r.algorithm), name(r.protocol));
          }
        });
    if (!first_error.empty()) fail(ErrorCode::kUnsupported, "{}", first_error);
    return out;
  }

 private:
  const CalibrationRequest& request_;
  const std::vector<FitRow>& rows_;
  std::map<int, std::vector<size_t>> groups_;
};

double rms_log_error(const std::vector<FitRow>& rows, const std::vector<double>& seconds, bool held_out) {
  double sum = 0;
  int count = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].held_out != held_out) continue;
    const double e = std::log(seconds[i] * 1e6 / rows[i].row.time_us);
    sum += e * e;
    ++count;
  }
  return count > 0 ? std::sqrt(sum / count) : 0.0;
}

std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  return fmt::format("{:04}-{:02}-{:02}", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday);
}

// Whether `row` (of `file`) is one of `names`: its label, its file, or (a CSV row) its id alone.
bool held_out_by(const std::vector<std::string>& names, const MeasuredRow& row, const std::string& file) {
  for (const std::string& h : names) {
    if (h == row.label || h == file) return true;
    const size_t hash = row.label.rfind('#');
    if (hash != std::string::npos && row.label.substr(hash + 1) == h) return true;
  }
  return false;
}

// A log that does not say how many GPUs ran it must fit the cluster given; one that does must
// have run on it.
void check_file_scale(const MeasurementFile& file, const models::ClusterSpec& cluster, int per_node,
                      CalibrationResult& result) {
  const int cluster_gpus = cluster.nodes * per_node;
  const std::string shown_path = printable(file.path);
  if (!file.published && file.nranks == 0) {
    // The log does not say how many GPUs ran: the cluster given says it, as long as the log's Rank
    // lines fit in it.
    if (file.least_ranks > cluster_gpus) {
      fail(ErrorCode::kInvalidArgument,
           "{}: the log names rank {} and the cluster given has {} GPUs ({} node{} x {} GPUs)", shown_path,
           file.least_ranks - 1, cluster_gpus, cluster.nodes, cluster.nodes == 1 ? "" : "s", per_node);
    }
    result.warnings.push_back(fmt::format(
        "warning: {} does not say how many GPUs ran it (no '# nThread' header, no full list of '#  Rank' lines): "
        "taken as the cluster given's {} ({} node{} x {} GPUs)",
        shown_path, cluster_gpus, cluster.nodes, cluster.nodes == 1 ? "" : "s", per_node));
  }
  if (file.nranks > 0) {
    if (file.nranks != cluster_gpus) {
      fail(ErrorCode::kInvalidArgument,
           "{}: the log ran on {} GPUs and the cluster given has {} ({} node{} x {} GPUs): give the cluster it ran "
           "on (--nodes, --gpus-per-node, or -g for some GPUs of each node)",
           shown_path, file.nranks, cluster_gpus, cluster.nodes, cluster.nodes == 1 ? "" : "s", per_node);
    }
    if (file.nodes > 0 && file.nodes != cluster.nodes) {
      fail(ErrorCode::kInvalidArgument,
           "{}: the log ran on {} nodes (hosts of its Rank lines) and the cluster given has {}", shown_path,
           file.nodes, cluster.nodes);
    }
  }
}

// Why a published row (its own system and GPU count) cannot be fitted on `cluster`; "" when it can.
std::string published_row_misfit(const MeasuredRow& row, const models::ClusterSpec& cluster) {
  const std::string preset = preset_of_system(row.system);
  if (preset != cluster.preset) return fmt::format("{}: system '{}' is not a {} cluster", row.label, row.system, cluster.preset);
  if (row.nodes != cluster.nodes || row.gpus % row.nodes != 0 || row.gpus / row.nodes > cluster.gpus_per_node) {
    return fmt::format("{}: {} GPUs on {} node{}, the cluster given has {} node{} of {} GPUs", row.label, row.gpus,
                       row.nodes, row.nodes == 1 ? "" : "s", cluster.nodes, cluster.nodes == 1 ? "" : "s",
                       cluster.gpus_per_node);
  }
  const auto differs = [](std::optional<double> stated, double cluster_value) {
    return stated && std::abs(*stated - cluster_value) > 1e-9;
  };
  if (row.nodes > 1 &&
      (differs(row.nics_per_node, cluster.nics_per_node) || differs(row.nic_gbps, cluster.nic_Bps * 8 / 1e9))) {
    return fmt::format("{}: {} NICs of {} Gb/s a node, the cluster given has {} of {}", row.label,
                       row.nics_per_node.value_or(0), row.nic_gbps.value_or(0), cluster.nics_per_node,
                       cluster.nic_Bps * 8 / 1e9);
  }
  return "";
}

// The rows of every file that can be fitted (the others go to result.skipped, with why), and the
// files' sources in the profile.
std::vector<FitRow> fit_rows(const CalibrationRequest& request, int per_node, CalibrationResult& result) {
  std::vector<FitRow> rows;
  for (size_t file_index = 0; file_index < request.files.size(); ++file_index) {
    const MeasurementFile& file = request.files[file_index];
    for (const std::string& line : file.skipped) result.skipped.push_back(line);
    check_file_scale(file, request.cluster, per_node, result);
    int used = 0;
    for (const MeasuredRow& row : file.rows) {
      FitRow fit{row, held_out_by(request.hold_out, row, file.path), per_node, file_index};
      if (file.published) {
        if (std::string misfit = published_row_misfit(row, request.cluster); !misfit.empty()) {
          result.skipped.push_back(std::move(misfit));
          continue;
        }
        fit.gpus_per_node = row.gpus / row.nodes;
      }
      if (row.time_us <= 0) {
        result.skipped.push_back(fmt::format("{}: a time of 0 us carries nothing to fit", printable(row.label)));
        continue;
      }
      if (row.bytes == 0) {
        // NCCL returns at once for a count of 0: the time is nccl-tests' own overhead, no collective.
        result.skipped.push_back(
            fmt::format("{}: 0 B moves nothing (the time is nccl-tests' own)", printable(row.label)));
        continue;
      }
      rows.push_back(fit);
      ++used;
    }
    result.profile.sources.push_back({file.path, used});
  }
  if (std::none_of(rows.begin(), rows.end(), [](const FitRow& r) { return !r.held_out; }))
    fail(ErrorCode::kInvalidArgument, "no rows to fit (every row was skipped or held out)");
  // A --hold-out name that matches nothing is a typo, not a wish.
  for (const std::string& h : request.hold_out) {
    const bool a_file =
        std::any_of(request.files.begin(), request.files.end(), [&](const MeasurementFile& f) { return f.path == h; });
    const bool a_row =
        std::any_of(rows.begin(), rows.end(), [&](const FitRow& r) { return held_out_by({h}, r.row, ""); });
    if (!a_file && !a_row)
      fail(ErrorCode::kInvalidArgument, "--hold-out {}: no row (not skipped) or file of that name", printable(h));
  }
  return rows;
}

// The parameters to fit (all, or --fit's), checked by name.
std::vector<const sim::NetworkParameter*> candidate_parameters(const std::vector<std::string>& only) {
  std::vector<const sim::NetworkParameter*> candidates;
  for (const sim::NetworkParameter& p : sim::network_parameters()) {
    if (only.empty() || std::find(only.begin(), only.end(), p.name) != only.end()) candidates.push_back(&p);
  }
  for (const std::string& name : only) {
    if (sim::find_network_parameter(name) == nullptr)
      fail(ErrorCode::kInvalidArgument, "--fit {}: no such parameter", name);
  }
  return candidates;
}

// The fit in log space over the rows: the model at a point, and each fitted row's log error.
class Fit {
 public:
  Fit(const CalibrationRequest& request, const std::vector<FitRow>& rows) : rows_(rows), simulator_(request, rows) {}

  sim::NetworkModel model_at(const std::vector<const sim::NetworkParameter*>& params,
                             const std::vector<double>& x) const {
    sim::NetworkModel model = defaults_;
    for (size_t j = 0; j < params.size(); ++j) model.*(params[j]->field) = std::exp(x[j]);
    return model;
  }
  std::vector<double> residuals_of(const Evaluation& e) const {
    std::vector<double> r;
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (!rows_[i].held_out) r.push_back(std::log(e.seconds[i] * 1e6 / rows_[i].row.time_us));
    }
    return r;
  }
  std::vector<Evaluation> run(const std::vector<sim::NetworkModel>& models) const { return simulator_.run(models); }
  const sim::NetworkModel& defaults() const { return defaults_; }

 private:
  const std::vector<FitRow>& rows_;
  const sim::NetworkModel defaults_;
  const RowSimulator simulator_;
};

// The parameters the rows inform (the sensitivity of every row to each at the defaults) with their
// start and bounds in log space, and the rows at the defaults (probed.front()).
struct Informed {
  std::vector<const sim::NetworkParameter*> params;
  std::vector<double> x, lower, upper;
  Evaluation before;
  int probes = 0;
};

Informed informed_parameters(const Fit& fit, const std::vector<const sim::NetworkParameter*>& candidates) {
  std::vector<double> x0, lower, upper;
  for (const sim::NetworkParameter* p : candidates) {
    x0.push_back(std::log(fit.defaults().*(p->field)));
    lower.push_back(std::log(p->lower));
    upper.push_back(std::log(p->upper));
  }
  std::vector<sim::NetworkModel> probes = {fit.defaults()};
  const double probe_step = std::log(1.05);
  for (size_t j = 0; j < candidates.size(); ++j) {
    std::vector<double> x = x0;
    x[j] = x[j] + probe_step <= upper[j] ? x[j] + probe_step : x[j] - probe_step;
    probes.push_back(fit.model_at(candidates, x));
  }
  const std::vector<Evaluation> probed = fit.run(probes);
  Informed out;
  out.before = probed.front();
  out.probes = static_cast<int>(probes.size());
  const std::vector<double> r0 = fit.residuals_of(out.before);
  for (size_t j = 0; j < candidates.size(); ++j) {
    const std::vector<double> rj = fit.residuals_of(probed[j + 1]);
    double sensitivity = 0;
    for (size_t i = 0; i < r0.size(); ++i) sensitivity = std::max(sensitivity, std::abs(rj[i] - r0[i]) / probe_step);
    if (sensitivity >= kMinSensitivity) {
      out.params.push_back(candidates[j]);
      out.x.push_back(x0[j]);
      out.lower.push_back(lower[j]);
      out.upper.push_back(upper[j]);
    }
  }
  return out;
}

// Standard errors of the fitted log(parameters): covariance s^2 (J^T J)^-1 with s^2 = sum r^2 /
// (m - p); infinite for a parameter the rows cannot tell from another (a singular J^T J).
std::vector<double> standard_errors(const std::vector<std::vector<double>>& jacobian, const std::vector<double>& r_fit,
                                    size_t p) {
  const size_t m = r_fit.size();
  std::vector<std::vector<double>> normal(p, std::vector<double>(p, 0.0));
  for (size_t a = 0; a < p; ++a) {
    for (size_t b = 0; b < p; ++b) {
      for (size_t i = 0; i < m; ++i) normal[a][b] += jacobian[i][a] * jacobian[i][b];
    }
  }
  double sum_squares = 0;
  for (double v : r_fit) sum_squares += v * v;
  const double variance = sum_squares / static_cast<double>(m - p);
  std::vector<double> uncertainty(p, 0.0);
  for (size_t j = 0; j < p; ++j) {
    std::vector<double> unit(p, 0.0);
    unit[j] = 1.0;
    const std::vector<double> column = solve_linear(normal, unit);
    uncertainty[j] =
        column.empty() ? std::numeric_limits<double>::infinity() : std::sqrt(std::max(0.0, variance * column[j]));
  }
  return uncertainty;
}

// Rows whose logs named no algorithm ran with NCCL's tuner's pick: say, per file, what that was.
void warn_tuner_picks(const CalibrationRequest& request, const std::vector<FitRow>& rows, const Evaluation& after,
                      CalibrationResult& result) {
  for (size_t f = 0; f < request.files.size(); ++f) {
    std::string picks;
    size_t guessed = 0;
    for (size_t begin = 0; begin < rows.size();) {
      const auto is_guess = [&](size_t i) {
        const Collective c = rows[i].row.collective;
        return rows[i].file == f && rows[i].row.algorithm == "auto" && c != Collective::kAllToAll &&
               c != Collective::kSendRecv;
      };
      if (!is_guess(begin)) {
        ++begin;
        continue;
      }
      size_t end = begin + 1;
      while (end < rows.size() && is_guess(end) && after.ran[end] == after.ran[begin] &&
             rows[end].row.collective == rows[begin].row.collective)
        ++end;
      picks += fmt::format("{}{} {} for {} .. {}", picks.empty() ? "" : ", ", name(rows[begin].row.collective),
                           after.ran[begin], compact_size_text(rows[begin].row.bytes),
                           compact_size_text(rows[end - 1].row.bytes));
      guessed += end - begin;
      begin = end;
    }
    if (guessed == 0) continue;
    result.warnings.push_back(fmt::format(
        "warning: {} names no algorithm for {} row{} (no NCCL_ALGO, no tandem bench header): guessed NCCL's tuner's "
        "pick: {}",
        printable(request.files[f].path), guessed, guessed == 1 ? "" : "s", picks));
  }
}

}  // namespace

CalibrationResult calibrate(const CalibrationRequest& request) {
  const models::ClusterSpec& cluster = request.cluster;
  const int per_node = request.gpus_per_node > 0 ? request.gpus_per_node : cluster.gpus_per_node;
  CalibrationResult result;
  std::vector<FitRow> rows = fit_rows(request, per_node, result);
  result.rows_merged = merge_repeated_rows(rows);
  const auto fitted_count = std::count_if(rows.begin(), rows.end(), [](const FitRow& r) { return !r.held_out; });
  const std::vector<const sim::NetworkParameter*> candidates = candidate_parameters(request.only);
  const Fit fit(request, rows);
  auto progress = [&](const std::string& line) {
    if (request.progress) request.progress(line);
  };
  progress(fmt::format("calibrate: {} rows ({} fitted), {} candidate parameters", rows.size(), fitted_count,
                       candidates.size()));
  const Informed informed = informed_parameters(fit, candidates);
  progress(
      fmt::format("calibrate: {} of {} parameters informed by these rows", informed.params.size(), candidates.size()));

  LeastSquaresOptions options;
  options.progress = [&](int iteration, double cost) {
    progress(fmt::format("calibrate: iteration {}: rms log error {:.4f}", iteration,
                         std::sqrt(2 * cost / static_cast<double>(fitted_count))));
  };
  const BatchResiduals batch = [&](const std::vector<std::vector<double>>& points) {
    std::vector<sim::NetworkModel> models;
    for (const std::vector<double>& x : points) models.push_back(fit.model_at(informed.params, x));
    std::vector<std::vector<double>> out;
    for (const Evaluation& e : fit.run(models)) out.push_back(fit.residuals_of(e));
    return out;
  };
  const LeastSquaresResult solved = bounded_least_squares(batch, informed.x, informed.lower, informed.upper, options);
  result.iterations = solved.iterations;
  result.converged = solved.converged;
  result.evaluations = solved.evaluations + informed.probes;
  const sim::NetworkModel fitted = fit.model_at(informed.params, solved.x);
  const Evaluation after = fit.run({fitted}).front();
  std::vector<double> uncertainty(informed.params.size(), 0.0);
  if (!informed.params.empty() && static_cast<size_t>(fitted_count) > informed.params.size()) {
    const std::vector<double> r_fit = fit.residuals_of(after);
    const std::vector<std::vector<double>> jacobian =
        forward_jacobian(batch, solved.x, r_fit, informed.lower, informed.upper, LeastSquaresOptions{}.difference_step);
    result.evaluations += static_cast<int>(informed.params.size());
    uncertainty = standard_errors(jacobian, r_fit, informed.params.size());
  }

  CalibrationProfile& profile = result.profile;
  profile.preset = cluster.preset;
  profile.nodes = cluster.nodes;
  profile.gpus_per_node = per_node;
  profile.description = models::describe(cluster);
  for (const sim::NetworkParameter& p : sim::network_parameters()) {
    const auto at = std::find(informed.params.begin(), informed.params.end(), &p);
    const bool is_informed = at != informed.params.end();
    profile.parameters.push_back({std::string(p.name), fit.defaults().*(p.field), fitted.*(p.field), is_informed,
                                  is_informed ? uncertainty[static_cast<size_t>(at - informed.params.begin())] : 0.0});
  }
  profile.date = today_utc();
  profile.rows_fitted = static_cast<int>(fitted_count);
  profile.rows_held_out = static_cast<int>(rows.size()) - profile.rows_fitted;
  profile.rms_log_error_before = rms_log_error(rows, informed.before.seconds, false);
  profile.rms_log_error_after = rms_log_error(rows, after.seconds, false);
  for (size_t i = 0; i < rows.size(); ++i) {
    result.rows.push_back({rows[i].row, rows[i].held_out, rows[i].samples, informed.before.seconds[i] * 1e6,
                           after.seconds[i] * 1e6, after.ran[i]});
  }
  warn_tuner_picks(request, rows, after, result);
  return result;
}

namespace {

std::string signed_percent(double ratio) { return fmt::format("{:+.1f}%", (ratio - 1) * 100); }

}  // namespace

std::string calibration_report(const CalibrationResult& result) {
  const CalibrationProfile& profile = result.profile;
  std::string out;
  out += fmt::format("# Calibration of {} ({} node{} x {} GPUs) on {} rows ({} fitted, {} held out)\n", profile.preset,
                     profile.nodes, profile.nodes == 1 ? "" : "s", profile.gpus_per_node, result.rows.size(),
                     profile.rows_fitted, profile.rows_held_out);
  out += fmt::format("# Cluster: {}\n", profile.description);
  for (const std::string& s : result.skipped) out += fmt::format("# skipped {}\n", s);
  if (result.rows_merged > 0) {
    out += fmt::format(
        "# merged {} rows that repeat a measurement (collective, size, type, algorithm, protocol) into the first of "
        "each: {} rows, times averaged\n",
        result.rows_merged, result.rows.size());
  }
  out += fmt::format("\n{:<34} {:<14} {:>8} {:>12} {:>12} {:>12} {:>8} {:>8}  {}\n", "row", "collective", "size",
                     "measured_us", "default_us", "fitted_us", "err_def", "err_fit", "ran");
  std::vector<std::string> warnings = result.warnings;
  for (const CalibratedRow& r : result.rows) {
    std::string label = printable(r.row.label);
    if (label.size() > 34) label = "..." + label.substr(label.size() - 31);
    out += fmt::format("{:<34} {:<14} {:>8} {:>12.2f} {:>12.2f} {:>12.2f} {:>8} {:>8}  {}{}{}\n", label,
                       name(r.row.collective), compact_size_text(r.row.bytes), r.row.time_us, r.before_us, r.after_us,
                       signed_percent(r.before_us / r.row.time_us), signed_percent(r.after_us / r.row.time_us), r.ran,
                       r.held_out ? " (held out)" : "", r.samples > 1 ? fmt::format(" (mean of {})", r.samples) : "");
    if (std::abs(r.after_us / r.row.time_us - 1) > kRowWarning) {
      warnings.push_back(fmt::format("warning: row {} is still off by {} after the fit", printable(r.row.label),
                                     signed_percent(r.after_us / r.row.time_us)));
    }
  }
  out += fmt::format("\n{:<26} {:>10} {:>10} {:>8} {:>9}\n", "parameter", "default", "fitted", "change", "+-1 s.e.");
  for (const CalibrationProfile::Parameter& p : profile.parameters) {
    if (!p.informed) {
      out += fmt::format("{:<26} {:>10.4g} {:>10} {:>8} {:>9}  not informed by these logs\n", p.name, p.default_value,
                         "-", "", "");
      continue;
    }
    const sim::NetworkParameter* known = sim::find_network_parameter(p.name);
    std::string note;
    if (known != nullptr && (p.value <= known->lower * (1 + 1e-9) || p.value >= known->upper * (1 - 1e-9))) {
      note = fmt::format("  at its bound [{}, {}] ({})", known->lower, known->upper, known->bounds_reason);
      warnings.push_back(
          fmt::format("warning: {} is at a bound ({}): the model cannot explain these logs within its "
                      "physical range",
                      p.name, p.value));
    }
    const std::string spread = p.uncertainty == 0          ? std::string("-")
                               : std::isinf(p.uncertainty) ? std::string("unknown")
                                                           : fmt::format("{:.2f}%", p.uncertainty * 100);
    if (p.uncertainty > kParameterWarning) {
      warnings.push_back(
          fmt::format("warning: {} is poorly determined by these logs (+-{}): too few rows depend on it, or it "
                      "trades off against another parameter; add logs where it binds",
                      p.name, spread));
    }
    out += fmt::format("{:<26} {:>10.4g} {:>10.4g} {:>8} {:>9}{}\n", p.name, p.default_value, p.value,
                       signed_percent(p.value / p.default_value), spread, note);
  }
  double held_before = 0, held_after = 0;
  int held = 0;
  for (const CalibratedRow& r : result.rows) {
    if (!r.held_out) continue;
    held_before += std::abs(r.before_us / r.row.time_us - 1);
    held_after += std::abs(r.after_us / r.row.time_us - 1);
    ++held;
  }
  out += fmt::format("\nfit: rms log error over the fitted rows {:.2f}% -> {:.2f}% ({} iterations{}, {} simulations)\n",
                     profile.rms_log_error_before * 100, profile.rms_log_error_after * 100, result.iterations,
                     result.converged ? "" : ", stopped at the limit before converging", result.evaluations);
  if (held > 0) {
    out += fmt::format("held-out rows: mean |error| {:.2f}% with the defaults -> {:.2f}% calibrated ({} rows)\n",
                       held_before / held * 100, held_after / held * 100, held);
  }
  for (const std::string& w : warnings) out += w + "\n";
  return out;
}

std::string calibration_json(const CalibrationResult& result) {
  json rows = json::array();
  for (const CalibratedRow& r : result.rows) {
    rows.push_back({{"label", r.row.label},
                    {"collective", name(r.row.collective)},
                    {"size_bytes", r.row.bytes},
                    {"measured_us", r.row.time_us},
                    {"default_us", r.before_us},
                    {"calibrated_us", r.after_us},
                    {"held_out", r.held_out},
                    {"samples", r.samples},
                    {"ran", r.ran}});
  }
  json parameters = json::array();
  for (const CalibrationProfile::Parameter& p : result.profile.parameters) {
    parameters.push_back({{"name", p.name},
                          {"default", p.default_value},
                          {"value", p.value},
                          {"informed", p.informed},
                          {"uncertainty", std::isinf(p.uncertainty) ? -1.0 : p.uncertainty}});
  }
  const json out = {{"kind", "calibration"},
                    {"version", kCalibrationProfileVersion},
                    {"cluster", result.profile.description},
                    {"preset", result.profile.preset},
                    {"rows", rows},
                    {"parameters", parameters},
                    {"rms_log_error_before", result.profile.rms_log_error_before},
                    {"rms_log_error_after", result.profile.rms_log_error_after}};
  // Labels hold file names as given, which need not be UTF-8.
  return out.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace tandem::app
