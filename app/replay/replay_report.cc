// The replay's reports: the text a user reads (format_text), replay.json (to_json) and one CSV row
// per op (ops_csv).
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/replay/replay.h"
#include "app/scenario/scenario_report.h"
#include "core/fr_analysis.h"
#include "core/text.h"

namespace tandem::app {

using nlohmann::json;

namespace {

std::string us_text(double seconds) { return fmt::format("{:.1f}", seconds * 1e6); }

std::string op_row(const ReplayOp& op) {
  const std::string recorded = op.recorded_s ? us_text(*op.recorded_s) : "-";
  const std::string predicted = op.simulated ? us_text(op.predicted_s) : "-";
  const std::string ratio = op.recorded_s && op.simulated && *op.recorded_s > 0
                                ? fmt::format("{:.2f}", op.predicted_s / *op.recorded_s)
                                : "-";
  return fmt::format("{:>10} {:>5} {:<28} {:>10} {:>6} {:<11} {:>13} {:>13} {:>6}  {}\n", op.label, op.sequence,
                     op.profiling_name.substr(0, 28), op.bytes > 0 ? format_size(op.bytes) : "-", op.ranks.size(),
                     name(op.state), predicted, recorded, ratio,
                     op.algorithm.empty() ? op.note
                                          : fmt::format("{} {:.1f} GB/s{}", op.algorithm, op.busbw_GBps,
                                                        op.note.empty() ? "" : "; " + op.note));
}

}  // namespace

std::string format_text(const ReplayResult& r, size_t max_ops) {
  std::string out;
  out += fmt::format("Replay of {} dumps (flight recorder {}, {}): {} group{}, {} entries, rank r on GPU r of {}\n",
                     r.ranks, r.version, r.comm_lib_version.empty() ? "library unknown" : r.comm_lib_version, r.groups,
                     r.groups == 1 ? "" : "s", r.entries, r.cluster);
  out += fmt::format("Verdict: {}\n\n", r.verdict);
  // The ops shown: the last `max_ops` up to the first divergence, and every blocked one.
  const size_t stop = r.first_divergence.value_or(r.ops.size());
  size_t completed = 0;
  for (const ReplayOp& op : r.ops) completed += op.state == ReplayState::kCompleted ? 1 : 0;
  out += fmt::format("{:>10} {:>5} {:<28} {:>10} {:>6} {:<11} {:>13} {:>13} {:>6}  {}\n", "group", "seq", "op", "size",
                     "ranks", "state", "predicted us", "recorded us", "ratio", "simulated as");
  const size_t first_shown = completed > max_ops ? completed - max_ops : 0;
  if (first_shown > 0) out += fmt::format("   ... {} earlier ops (all in --json / --out)\n", first_shown);
  for (size_t i = first_shown; i < r.ops.size(); ++i) {
    const ReplayOp& op = r.ops[i];
    if (op.state == ReplayState::kNotReached) continue;
    out += op_row(op);
  }
  size_t not_reached = r.ops.size() - stop;
  for (size_t i = stop; i < r.ops.size(); ++i) not_reached -= r.ops[i].state != ReplayState::kNotReached ? 1 : 0;
  if (not_reached > 0) out += fmt::format("   ... {} ops behind the stuck ones, not reached\n", not_reached);
  out += fmt::format("\nCommunication, completed ops: predicted {}", duration_text(r.predicted_comm_s));
  if (r.ops_with_recorded > 0) {
    out += fmt::format(", recorded {} over the {} ops that carry a duration", duration_text(r.recorded_comm_s),
                       r.ops_with_recorded);
  }
  out += fmt::format("; replayed clock at the last completed op: {}\n", duration_text(r.end_s));
  for (size_t i = stop; i < r.ops.size(); ++i) {
    const ReplayOp& op = r.ops[i];
    if (op.state == ReplayState::kNotReached || op.state == ReplayState::kCompleted) continue;
    out += fmt::format("{} at {}: {}\n", name(op.state), duration_text(op.start_s), op.detail);
  }
  if (!r.recoveries.empty()) {
    out += "\nWhat a recovery policy would have done there:\n";
    for (const ReplayRecovery& rec : r.recoveries) {
      out += fmt::format("  {:<8} {:<18} at {:>10}: {}\n", name(rec.action), name(rec.outcome),
                         duration_text(rec.end_s), rec.detail);
    }
  }
  const std::vector<int>& fr = r.analysis.culprit_ranks;
  if (fr != r.culprit_ranks) {
    out += fmt::format("\nNote: the flight-recorder analysis names {}: {}\n",
                       fr.empty() ? std::string("no rank") : ranks_phrase(fr), r.analysis.verdict);
  } else {
    out += fmt::format("\nThe flight-recorder analysis agrees: {}\n", r.analysis.verdict);
  }
  return out;
}

json to_json(const ReplayResult& r) {
  json ops = json::array();
  for (const ReplayOp& op : r.ops) {
    ops.push_back({{"group", op.group},
                   {"label", op.label},
                   {"group_desc", op.group_desc},
                   {"p2p", op.p2p},
                   {"sequence", op.sequence},
                   {"profiling_name", op.profiling_name},
                   {"dtype", op.dtype},
                   {"bytes", op.bytes},
                   {"ranks", op.ranks},
                   {"joined", op.joined.size()},
                   {"state", std::string(name(op.state))},
                   {"simulated", op.simulated},
                   {"note", op.note},
                   {"predicted_us", op.predicted_s * 1e6},
                   {"recorded_us", op.recorded_s ? json(*op.recorded_s * 1e6) : json(nullptr)},
                   {"algorithm", op.algorithm},
                   {"busbw_GBps", op.busbw_GBps},
                   {"start_us", op.start_s * 1e6},
                   {"end_us", op.end_s * 1e6},
                   {"waiting", op.waiting},
                   {"missing", op.missing},
                   {"detail", op.detail}});
  }
  json recoveries = json::array();
  for (const ReplayRecovery& rec : r.recoveries) {
    recoveries.push_back({{"action", std::string(name(rec.action))},
                          {"outcome", std::string(name(rec.outcome))},
                          {"attempts", rec.attempts},
                          {"watchdog_s", rec.watchdog_s},
                          {"detected_us", rec.detected_s * 1e6},
                          {"end_us", rec.end_s * 1e6},
                          {"dropped_ranks", rec.dropped_ranks},
                          {"rerun_us", rec.rerun_s * 1e6},
                          {"detail", rec.detail}});
  }
  json slices = json::array();
  for (const ReplaySlice& s : r.slices) slices.push_back({s.rank, s.op, s.start_s * 1e6, s.end_s * 1e6});
  return {{"kind", "replay"},
          {"format_version", kReplayFormatVersion},
          {"ranks", r.ranks},
          {"groups", r.groups},
          {"entries", r.entries},
          {"version", r.version},
          {"comm_lib_version", r.comm_lib_version},
          {"cluster", r.cluster},
          {"verdict", r.verdict},
          {"culprit_ranks", r.culprit_ranks},
          {"first_divergence", r.first_divergence ? json(*r.first_divergence) : json(nullptr)},
          {"end_us", r.end_s * 1e6},
          {"predicted_comm_us", r.predicted_comm_s * 1e6},
          {"recorded_comm_us", r.recorded_comm_s * 1e6},
          {"ops_with_recorded", r.ops_with_recorded},
          {"ops", ops},
          {"slices", slices},
          {"recoveries", recoveries},
          {"analysis", json::parse(format_json(r.analysis))}};
}

std::string ops_csv(const ReplayResult& r) {
  std::string out =
      "group,sequence,p2p,op,dtype,bytes,ranks,state,predicted_us,recorded_us,algorithm,busbw_GBps,start_us\n";
  for (const ReplayOp& op : r.ops) {
    out +=
        fmt::format("{},{},{},{},{},{},{},{},{:.3f},{},{},{:.2f},{:.3f}\n", csv_field(op.group), op.sequence,
                    op.p2p ? 1 : 0, csv_field(op.profiling_name), op.dtype, op.bytes, op.ranks.size(), name(op.state),
                    op.predicted_s * 1e6, op.recorded_s ? fmt::format("{:.3f}", *op.recorded_s * 1e6) : "",
                    op.algorithm, op.busbw_GBps, op.start_s * 1e6);
  }
  return out;
}

}  // namespace tandem::app
