// The page of a `tandem replay --out` folder's replay.json (replay_report_html): the incident (the
// culprit ranks and verdict next to the flight-recorder analysis' own), a timeline per group and per
// rank on the replayed clock, its time axis broken where the watchdog's wait dwarfs the ops, the
// blocked ops and the recovery policies side by side.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/report/replay_page_data.h"
#include "app/report/report_html.h"
#include "app/report/report_page.h"
#include "core/fr_analysis.h"
#include "core/sizes.h"

namespace tandem::app {
namespace report {
namespace {

using nlohmann::json;

// The page of an incident: what broke, not whether expectations held, so it carries an "incident"
// label (or "no divergence" for clean dumps) and never a PASS / FAIL verdict badge.

// Timeline rows: one per group; one per rank as well up to this many ranks (a 16,384-rank job
// gets its waiting and missing ranks as ranges in the tables instead).
constexpr int kMaxReplayRankRows = 64;
// Groups drawn; the groups holding a blocked op first. The rest are in replay.csv.
constexpr size_t kMaxReplayGroupRows = 40;
// The time axis breaks where a linear one would squeeze the ops before the watchdog into less
// than 1 / kReplayBreakFactor of the plot (a 600 s watchdog after microsecond collectives).
constexpr double kReplayBreakFactor = 4;
constexpr int kPolicyRow = 16;  // px: a policy's line under the timeline's rows

// A policy's colour on the timeline and in its table: the palette after the completed ops' blue.
const char* policy_colour(size_t index) { return kPalette[1 + index % (std::size(kPalette) - 1)]; }

// A time on the replayed clock for a label: "12.3 us", "4.56 ms", "600.00 s".
std::string replay_time_text(double us) {
  if (std::abs(us) < 1e3) return num(us, 1) + " us";
  if (std::abs(us) < 1e6) return num(us / 1e3, 2) + " ms";
  return num(us / 1e6, 2) + " s";
}

std::string ranks_text(const std::vector<int>& ranks) { return ranks.empty() ? "-" : rank_ranges(ranks); }

// The replayed clock on x, broken in two where the watchdog's wait dwarfs the ops before it:
//
//   left                 early_end            late_lo            late_hi
//    |=====ops (us)=========|   //  gap  //   |==watchdog, recovery (s)==|
//    <------ kEarlyShare of the plot ------>  <--- the rest less the gap --->
//
// A bar that starts before the break and ends after it (a rank waiting in a stuck op) crosses it.
struct ReplayAxis {
  double left = 0, plot = 0;
  double early_end = 1;  // us: the early segment is [0, early_end]
  bool broken = false;
  double late_lo = 0, late_hi = 0;  // us: the late segment, when broken
  static constexpr double kEarlyShare = 0.68;
  static constexpr double kGap = 26;

  double early_width() const { return broken ? plot * kEarlyShare : plot; }
  double late_x0() const { return left + early_width() + kGap; }
  double x(double us) const {
    if (!broken) return left + std::clamp(us / early_end, 0.0, 1.0) * plot;
    if (us <= early_end) return left + std::max(0.0, us / early_end) * early_width();
    if (us < late_lo) return left + early_width() + kGap / 2;  // inside the break
    const double late_width = plot - early_width() - kGap;
    return late_x0() + std::min(1.0, (us - late_lo) / (late_hi - late_lo)) * late_width;
  }
};

ReplayAxis replay_axis(const ReplayPageData& data, double left, double plot) {
  ReplayAxis axis;
  axis.left = left;
  axis.plot = plot;
  double early = 0, late_min = std::numeric_limits<double>::infinity(), late_max = 0;
  for (const ReplayPageOp& op : data.ops) {
    if (op.state == "completed") early = std::max(early, op.end_us);
    if (op.state != "completed" && op.state != "not_reached") early = std::max(early, op.start_us);
  }
  for (const ReplayPageSlice& s : data.slices) {
    early = std::max(early, s.start_us);
    if (data.ops[s.op].state == "completed") early = std::max(early, s.end_us);
  }
  auto late = [&](double us) {
    late_min = std::min(late_min, us);
    late_max = std::max(late_max, us);
  };
  for (const ReplayPageOp& op : data.ops) {
    if (op.watchdog_fires_us > 0) late(op.watchdog_fires_us);
  }
  for (const ReplayPageRecovery& r : data.recoveries) {
    late(r.detected_us);
    late(r.end_us);
  }
  if (early <= 0) early = 1;
  if (late_max > 0 && late_min > kReplayBreakFactor * early) {
    axis.broken = true;
    axis.early_end = early * 1.04;
    // A margin either side: a tenth of the late span, or 1% of where it starts when the watchdog
    // and the policies' ends coincide.
    const double margin = std::max(late_max - late_min, late_min * 0.01) * 0.1 + 1;
    axis.late_lo = std::max(axis.early_end, late_min - margin);
    axis.late_hi = late_max + margin;
  } else {
    axis.early_end = std::max(early, late_max) * 1.04;
  }
  return axis;
}

// The ops' groups: all of them in the order their first op appears, and those drawn (up to
// kMaxReplayGroupRows, those with a blocked op always) in that order too.
struct ReplayGroups {
  std::vector<std::string> all, drawn;
  std::map<std::string, std::vector<size_t>> ops_of;  // indices into ReplayPageData::ops
  std::set<std::string> blocked;
  std::map<std::string, std::string> desc_of;
};

ReplayGroups replay_groups(const ReplayPageData& data) {
  ReplayGroups groups;
  for (size_t i = 0; i < data.ops.size(); ++i) {
    const ReplayPageOp& op = data.ops[i];
    if (!groups.ops_of.contains(op.label)) groups.all.push_back(op.label);
    groups.ops_of[op.label].push_back(i);
    groups.desc_of.emplace(op.label, op.group_desc);
    if (op.state != "completed" && op.state != "not_reached") groups.blocked.insert(op.label);
  }
  std::vector<std::string>& drawn = groups.drawn;
  for (const std::string& g : groups.all) {
    if (drawn.size() < kMaxReplayGroupRows && groups.blocked.contains(g)) drawn.push_back(g);
  }
  for (const std::string& g : groups.all) {
    if (drawn.size() >= kMaxReplayGroupRows) break;
    if (!groups.blocked.contains(g)) drawn.push_back(g);
  }
  const std::vector<std::string>& all = groups.all;
  std::stable_sort(drawn.begin(), drawn.end(), [&](const std::string& a, const std::string& b) {
    return std::find(all.begin(), all.end(), a) < std::find(all.begin(), all.end(), b);
  });
  return groups;
}

// The timeline's layout, top to bottom: a row per drawn group; a row per rank (up to
// kMaxReplayRankRows ranks) from ranks_top; from `bottom`, a line per recovery policy; the axis.
struct ReplayLayout {
  static constexpr int kWidth = 1120, kLeft = 150, kRight = 24, kTop = 8, kGroupRow = 20;
  int ranks = 0, rank_row = 16;
  bool rank_rows = false;
  int ranks_top = 0, bottom = 0, axis_y = 0, height = 0;
  ReplayAxis axis;
};

ReplayLayout replay_layout(const ReplayPageData& data, int ranks, size_t drawn_groups) {
  ReplayLayout layout;
  layout.ranks = ranks;
  layout.rank_row = ranks > 32 ? 10 : 16;
  layout.rank_rows = ranks <= kMaxReplayRankRows;
  const int group_rows_h = static_cast<int>(drawn_groups) * ReplayLayout::kGroupRow;
  layout.ranks_top = ReplayLayout::kTop + group_rows_h + (layout.rank_rows ? 10 : 0);
  layout.bottom = layout.ranks_top + (layout.rank_rows ? ranks * layout.rank_row : 0);
  layout.axis_y = layout.bottom + 8 + static_cast<int>(data.recoveries.size()) * kPolicyRow + 6;
  layout.height = layout.axis_y + 28;
  layout.axis =
      replay_axis(data, ReplayLayout::kLeft, ReplayLayout::kWidth - ReplayLayout::kLeft - ReplayLayout::kRight);
  return layout;
}

// An op's tooltip: its group, sequence, kind, size, state and time; the prediction (and the
// recording) of a completed op, the detail of a blocked one.
std::string replay_op_title(const ReplayPageOp& op) {
  std::string title = fmt::format("group {} #{}{}: {}", op.label, op.p2p ? "p2p " : "", op.sequence, op.profiling_name);
  if (op.bytes > 0) title += ", " + compact_size_text(op.bytes);
  title += fmt::format(" ({}) at {}", op.state, replay_time_text(op.start_us));
  if (op.state == "completed") {
    title += fmt::format(", predicted {} us", num(op.predicted_us));
    if (op.recorded_us) title += fmt::format(", recorded {} us", num(*op.recorded_us));
  } else if (!op.detail.empty()) {
    title += ": " + op.detail;
  }
  return html_escape(title);
}

// A blocked op on its group's row: from its last arrival to the watchdog, a marker where it starts,
// and its state written on it where the bar is wide enough.
std::string replay_blocked_op(const ReplayPageOp& op, int y, const ReplayAxis& axis) {
  const int group_row = ReplayLayout::kGroupRow;
  const double x0 = axis.x(op.start_us), x1 = std::max(x0 + 2, axis.x(std::max(op.watchdog_fires_us, op.start_us)));
  std::string svg = fmt::format(
      "<g class=\"op blocked\" data-state=\"{0}\"><rect x=\"{1:.2f}\" y=\"{2}\" width=\"{3:.2f}\" height=\"{4}\" "
      "fill=\"{5}\" opacity=\"0.85\"/><polygon points=\"{6:.2f},{7} {8:.2f},{7} {1:.2f},{9}\" fill=\"{5}\"/>"
      "<title>{10}</title></g>",
      html_escape(op.state), x0, y + 3, x1 - x0, group_row - 6, kFailed, x0 - 5, y - 2, x0 + 5, y + 5,
      replay_op_title(op));
  if (x1 - x0 > 140) {
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{}\" style=\"fill:#fff;font-weight:600\">{} #{} {}</text>",
                       std::max(x0 + 6, axis.broken ? axis.late_x0() + 4 : x0 + 6), y + group_row - 6,
                       html_escape(op.state), op.sequence, html_escape(std::string(fr_op_type(op.profiling_name))));
  }
  return svg;
}

// Group rows: the completed ops as bars; a blocked op from its last arrival to the watchdog.
std::string replay_group_rows(const ReplayPageData& data, const ReplayGroups& groups, const ReplayLayout& layout) {
  const int group_row = ReplayLayout::kGroupRow;
  const ReplayAxis& axis = layout.axis;
  std::string svg;
  for (size_t g = 0; g < groups.drawn.size(); ++g) {
    const std::string& label = groups.drawn[g];
    const int y = ReplayLayout::kTop + static_cast<int>(g) * group_row;
    const bool blocked = groups.blocked.contains(label);
    svg += fmt::format("<g class=\"group-row{}\" data-group=\"{}\">", blocked ? " blocked" : "", html_escape(label));
    if (g % 2 == 1) {
      svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.0f}\" height=\"{}\" fill=\"#f2f4f7\"/>",
                         ReplayLayout::kLeft, y, axis.plot, group_row);
    }
    const std::string& group_desc = groups.desc_of.at(label);
    const std::string desc = group_desc.empty() ? "" : " (" + group_desc + ")";
    svg += fmt::format("<text x=\"4\" y=\"{}\"{}>group {}</text>", y + group_row - 6,
                       blocked ? " style=\"font-weight:700\"" : "", html_escape((label + desc).substr(0, 22)));
    for (size_t i : groups.ops_of.at(label)) {
      const ReplayPageOp& op = data.ops[i];
      if (op.state == "not_reached") continue;
      if (op.state != "completed") {
        svg += replay_blocked_op(op, y, axis);
        continue;
      }
      svg += fmt::format(
          "<rect class=\"op completed\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" "
          "stroke=\"#fff\" stroke-width=\"0.5\">"
          "<title>{}</title></rect>",
          axis.x(op.start_us), y + 3, std::max(1.0, axis.x(op.end_us) - axis.x(op.start_us)), group_row - 6, kCompleted,
          replay_op_title(op));
    }
    svg += "</g>\n";
  }
  return svg;
}

// The ranks of the blocked ops, once the ranks have diverged: those that never arrived, and those
// that wait for them.
struct BlockedRanks {
  std::set<int> missing, waiting;
};

BlockedRanks blocked_ranks(const ReplayPageData& data) {
  BlockedRanks ranks;
  if (!data.first_divergence) return ranks;
  for (const ReplayPageOp& op : data.ops) {
    if (op.state == "completed" || op.state == "not_reached") continue;
    ranks.missing.insert(op.missing.begin(), op.missing.end());
    ranks.waiting.insert(op.waiting.begin(), op.waiting.end());
  }
  return ranks;
}

// Rank `r`'s row: a stripe (the culprits tinted), its label, its part in each op, and an outline
// where the others wait for it in a stuck op it never reached.
std::string replay_rank_row(const ReplayPageData& data, int r, const std::vector<const ReplayPageSlice*>& slices,
                            bool culprit, const BlockedRanks& blocked, const ReplayLayout& layout) {
  const int rank_row = layout.rank_row;
  const ReplayAxis& axis = layout.axis;
  const bool absent = blocked.missing.contains(r);
  const int y = layout.ranks_top + r * rank_row;
  std::string svg = fmt::format("<g class=\"rank-row{}{}{}\" data-rank=\"{}\">", culprit ? " culprit" : "",
                                absent ? " missing" : "", blocked.waiting.contains(r) ? " waiting" : "", r);
  if (culprit) {
    svg += fmt::format("<rect x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" opacity=\"0.14\"/>", y,
                       ReplayLayout::kWidth, rank_row, kFault);
  } else if (r % 2 == 1) {
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.0f}\" height=\"{}\" fill=\"#f2f4f7\"/>", ReplayLayout::kLeft,
                       y, axis.plot, rank_row);
  }
  // A missing rank that waits in another blocked op did arrive somewhere: only its outline says so.
  const bool never_arrived = absent && !blocked.waiting.contains(r);
  if (layout.ranks <= 32 || r % 8 == 0 || culprit || never_arrived) {
    svg += fmt::format("<text x=\"4\" y=\"{}\"{}>rank {}{}</text>", y + rank_row - 2,
                       culprit || never_arrived ? " style=\"fill:#d62728;font-weight:700\"" : "", r,
                       culprit         ? " (culprit)"
                       : never_arrived ? " (never arrived)"
                                       : "");
  }
  for (const ReplayPageSlice* s : slices) {
    const ReplayPageOp& op = data.ops[s->op];
    const bool ok = op.state == "completed";
    svg += fmt::format(
        "<rect class=\"slice {}\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"{}><title>rank "
        "{}: {} us in {}</title></rect>",
        ok ? "completed" : "waiting", axis.x(s->start_us), y + 1,
        std::max(0.8, axis.x(s->end_us) - axis.x(s->start_us)), rank_row - 2, ok ? kCompleted : kFailed,
        ok ? "" : " opacity=\"0.85\"", r, num(s->end_us - s->start_us), replay_op_title(op));
  }
  for (const ReplayPageOp& op : data.ops) {
    if (op.state != "stuck" || std::find(op.missing.begin(), op.missing.end(), r) == op.missing.end()) continue;
    const double x0 = axis.x(op.start_us), x1 = std::max(x0 + 2, axis.x(op.watchdog_fires_us));
    svg += fmt::format(
        "<rect class=\"absent\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"none\" stroke=\"{}\" "
        "stroke-dasharray=\"4 3\"><title>rank {} never reached {}</title></rect>",
        x0, y + 1, x1 - x0, rank_row - 2, kFault, r, replay_op_title(op));
  }
  return svg + "</g>\n";
}

// Rank rows (up to kMaxReplayRankRows ranks): each rank's part in each op; the culprits tinted, the
// missing ranks' absence outlined.
std::string replay_rank_rows(const ReplayPageData& data, const std::vector<int>& culprits, const ReplayLayout& layout) {
  std::map<int, std::vector<const ReplayPageSlice*>> by_rank;
  for (const ReplayPageSlice& s : data.slices) by_rank[s.rank].push_back(&s);
  const BlockedRanks blocked = blocked_ranks(data);
  std::string svg = fmt::format("<line x1=\"0\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"#c9d1dc\"/>\n",
                                layout.ranks_top - 5, ReplayLayout::kWidth);
  for (int r = 0; r < layout.ranks; ++r) {
    const bool culprit = std::find(culprits.begin(), culprits.end(), r) != culprits.end();
    svg += replay_rank_row(data, r, by_rank[r], culprit, blocked, layout);
  }
  return svg;
}

// When the watchdog fires: once per distinct time the policies detect the hang.
std::set<double> watchdog_times(const ReplayPageData& data) {
  std::set<double> watchdogs;
  for (const ReplayPageRecovery& r : data.recoveries) watchdogs.insert(r.detected_us);
  return watchdogs;
}

// The first divergence and the watchdog over every row; each policy on its own line under the rows,
// from the watchdog firing to where it ends.
std::string replay_markers(const ReplayPageData& data, const ReplayLayout& layout) {
  const ReplayAxis& axis = layout.axis;
  const int top = ReplayLayout::kTop, bottom = layout.bottom;
  std::string svg;
  if (data.first_divergence) {
    const ReplayPageOp& first = data.ops[*data.first_divergence];
    svg += fmt::format(
        "<g class=\"divergence-marker\"><line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"{3}\" "
        "stroke-width=\"2\" stroke-dasharray=\"4 3\"/><title>the ranks stop agreeing: {4}</title></g>\n",
        axis.x(first.start_us), top, bottom, kFault, html_escape(first.detail));
  }
  for (double at : watchdog_times(data)) {
    svg += fmt::format(
        "<g class=\"watchdog-marker\"><line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"#1d2430\" "
        "stroke-width=\"1.5\"/><title>the watchdog fires at {3}</title></g>\n",
        axis.x(at), top, bottom, replay_time_text(at));
  }
  for (size_t i = 0; i < data.recoveries.size(); ++i) {
    const ReplayPageRecovery& r = data.recoveries[i];
    const int y = bottom + 8 + static_cast<int>(i) * kPolicyRow;
    const char* colour = policy_colour(i);
    const double x0 = axis.x(r.detected_us), x1 = std::max(x0, axis.x(r.end_us));
    svg += fmt::format(
        "<g class=\"recovery-marker\" data-action=\"{0}\" data-outcome=\"{1}\"><line x1=\"{2:.2f}\" y1=\"{3}\" "
        "x2=\"{4:.2f}\" y2=\"{3}\" stroke=\"{5}\" stroke-width=\"3\"/><circle cx=\"{4:.2f}\" cy=\"{3}\" r=\"5\" "
        "fill=\"{5}\"/><text x=\"{6:.2f}\" y=\"{7}\" text-anchor=\"end\">{0}: {1}</text><title>{0}: {1} at {8}"
        "</title></g>\n",
        html_escape(r.action), html_escape(r.outcome), x0, y, x1, colour, x0 - 8, y + 4, replay_time_text(r.end_us));
  }
  return svg;
}

// The axis: ticks on each segment, and the break drawn over the rows it cuts; on the late segment a
// tick at each watchdog and each policy's end, where its label has room.
std::string replay_time_axis(const ReplayPageData& data, const ReplayLayout& layout) {
  const ReplayAxis& axis = layout.axis;
  const int left = ReplayLayout::kLeft, top = ReplayLayout::kTop, bottom = layout.bottom, axis_y = layout.axis_y;
  std::string svg = fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{:.2f}\" y2=\"{}\" stroke=\"#8a94a3\"/>\n", left,
                                axis_y, left + axis.early_width(), axis_y);
  auto tick = [&](double us, const char* anchor) {
    svg += fmt::format(
        "<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"#8a94a3\"/>"
        "<text x=\"{0:.2f}\" y=\"{3}\" text-anchor=\"{4}\">{5}</text>\n",
        axis.x(us), axis_y, axis_y + 5, axis_y + 18, anchor, replay_time_text(us));
  };
  const double early_last = axis.broken ? axis.early_end / 1.04 : axis.early_end;
  for (int i = 0; i <= 4; ++i) tick(early_last * i / 4, i == 0 ? "start" : "middle");
  if (!axis.broken) return svg;
  const double x0 = left + axis.early_width();
  svg += fmt::format("<line class=\"late-axis\" x1=\"{:.2f}\" y1=\"{}\" x2=\"{:.2f}\" y2=\"{}\" stroke=\"#8a94a3\"/>\n",
                     axis.late_x0(), axis_y, axis.x(axis.late_hi), axis_y);
  svg += fmt::format(
      "<g class=\"axis-break\"><rect x=\"{0:.2f}\" y=\"{1}\" width=\"{2:.2f}\" height=\"{3}\" fill=\"#fff\" "
      "opacity=\"0.9\"/><path d=\"M{4:.2f},{5} l8,-10 M{6:.2f},{5} l8,-10\" stroke=\"#1d2430\" stroke-width=\"1.5\"/>"
      "<text x=\"{7:.2f}\" y=\"{8}\" text-anchor=\"middle\">...</text><title>the time axis is broken: {9} to {10} "
      "left out</title></g>\n",
      x0 + 6, top, ReplayAxis::kGap - 12, bottom - top, x0 + 4, axis_y + 5, x0 + ReplayAxis::kGap - 12,
      x0 + ReplayAxis::kGap / 2, axis_y + 18, replay_time_text(early_last), replay_time_text(axis.late_lo));
  std::set<double> late_ticks = watchdog_times(data);
  for (const ReplayPageRecovery& r : data.recoveries) late_ticks.insert(r.end_us);
  double shown = -1e300;
  for (double us : late_ticks) {
    if (axis.x(us) - shown < 70) continue;  // labels closer than that would overlap
    tick(us, "middle");
    shown = axis.x(us);
  }
  return svg;
}

// What the colours mean; then, where they apply, the axis' break, the groups left out and why there
// are no rank rows.
std::string replay_timeline_legend(const ReplayGroups& groups, const ReplayLayout& layout) {
  std::string legend = fmt::format(
      "<p class=\"legend\"><span><i class=\"swatch\" style=\"background:{}\"></i>completed op</span>"
      "<span><i class=\"swatch\" style=\"background:{}\"></i>stuck / desync / stalled: the ranks in it wait until "
      "the watchdog fires</span><span><i class=\"swatch\" style=\"border:1px dashed {};width:10px;height:10px\">"
      "</i>a rank that never reached the op</span><span>black line: the watchdog fires; below the rows, each policy "
      "from there to where it ends"
      "</span></p>",
      kCompleted, kFailed, kFault);
  if (layout.axis.broken) {
    legend += fmt::format(
        "<p>The time axis is broken between {} and {}: the watchdog's wait would squeeze every op before it into a "
        "sliver of a linear axis.</p>",
        replay_time_text(layout.axis.early_end / 1.04), replay_time_text(layout.axis.late_lo));
  }
  if (groups.drawn.size() < groups.all.size()) {
    legend += fmt::format("<p>{} of {} groups drawn (those with a blocked op first); every op is in replay.csv.</p>",
                          groups.drawn.size(), groups.all.size());
  }
  if (!layout.rank_rows) {
    legend +=
        fmt::format("<p>{} ranks: one row per group; the waiting and missing ranks are listed under Blocked ops.</p>",
                    layout.ranks);
  }
  return legend;
}

std::string replay_timeline(const ReplayPageData& data, int ranks, const std::vector<int>& culprits) {
  const ReplayGroups groups = replay_groups(data);
  const ReplayLayout layout = replay_layout(data, ranks, groups.drawn.size());
  std::string svg = svg_open("replay-timeline", ReplayLayout::kWidth, layout.height);
  svg += replay_group_rows(data, groups, layout);
  if (layout.rank_rows) svg += replay_rank_rows(data, culprits, layout);
  svg += replay_markers(data, layout);
  svg += replay_time_axis(data, layout);
  svg += "</svg>\n";
  return "<section><h2>Timeline on the replayed clock</h2>" + replay_timeline_legend(groups, layout) + svg +
         "</section>\n";
}

// The incident: its label (never a PASS / FAIL badge), the replay's verdict and culprit ranks
// next to the flight-recorder analysis' own, the first divergence, what the dumps hold, the cluster
// and the communication time of the completed ops.
std::string replay_incident_section(const json& replay, const ReplayPageData& data, const std::vector<int>& culprits) {
  const json& analysis = replay.at("analysis");
  const std::vector<int> fr_culprits = analysis.at("culprit_ranks").get<std::vector<int>>();
  const int ranks = replay.at("ranks").get<int>();
  std::string label = "no divergence";
  if (data.first_divergence) label = "incident: " + data.ops[*data.first_divergence].state;
  std::string body = fmt::format("<section><h2>Incident<span class=\"badge {}\" id=\"incident\">{}</span></h2><dl>",
                                 data.first_divergence ? "incident" : "neutral", html_escape(label));
  auto row = [&](const std::string& key, const std::string& value, const char* id = nullptr) {
    body += fmt::format("<dt>{}</dt><dd{}>{}</dd>", html_escape(key), id ? fmt::format(" id=\"{}\"", id) : "", value);
  };
  row("verdict", "<strong>" + html_escape(replay.at("verdict").get<std::string>()) + "</strong>", "replay-verdict");
  row("culprit ranks", "<strong>" + html_escape(ranks_text(culprits)) + "</strong>", "culprits");
  if (data.first_divergence) {
    const ReplayPageOp& first = data.ops[*data.first_divergence];
    // Its detail where it says more than the verdict (which is often the same sentence).
    std::string text = fmt::format("{} {} #{} of group {} at {}", first.state, first.profiling_name, first.sequence,
                                   first.label, replay_time_text(first.start_us));
    if (first.detail != replay.at("verdict").get<std::string>()) text += ": " + first.detail;
    row("first divergence", html_escape(text));
  }
  row("flight-recorder analysis", html_escape(analysis.at("verdict").get<std::string>()), "analysis");
  row("its culprit ranks",
      html_escape(ranks_text(fr_culprits)) + (fr_culprits == culprits
                                                  ? " (agrees with the replay)"
                                                  : " (not the replay's: it follows the waits from each "
                                                    "group's first mismatch, the replay over the replayed clock)"));
  const int groups = replay.at("groups").get<int>();
  row("dumps", html_escape(fmt::format("{} ranks, {} group{}, {} entries; flight recorder {}{}", ranks, groups,
                                       groups == 1 ? "" : "s", replay.at("entries").get<int64_t>(),
                                       replay.at("version").get<std::string>(),
                                       replay.at("comm_lib_version").get<std::string>().empty()
                                           ? std::string()
                                           : ", " + replay.at("comm_lib_version").get<std::string>())));
  row("cluster", html_escape(replay.at("cluster").get<std::string>()) + " (rank r on GPU r)");
  std::string comm = fmt::format("predicted {}", replay_time_text(replay.at("predicted_comm_us").get<double>()));
  if (replay.at("ops_with_recorded").get<int>() > 0) {
    comm += fmt::format(", recorded {} over the {} ops that carry a duration",
                        replay_time_text(replay.at("recorded_comm_us").get<double>()),
                        replay.at("ops_with_recorded").get<int>());
  }
  row("communication, completed ops", html_escape(comm));
  return body + "</dl></section>\n";
}

// The blocked ops (stuck, desync, stalled), or "" where there are none: who waits, who is missing.
std::string replay_blocked_section(const ReplayPageData& data) {
  std::string blocked;
  for (const ReplayPageOp& op : data.ops) {
    if (op.state == "completed" || op.state == "not_reached") continue;
    blocked += fmt::format(
        "<tr class=\"blocked\"><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td>"
        "<td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
        html_escape(op.state), html_escape(op.label), op.sequence, html_escape(op.profiling_name),
        op.bytes > 0 ? compact_size_text(op.bytes) : std::string("-"), html_escape(ranks_text(op.waiting)),
        html_escape(ranks_text(op.missing)), replay_time_text(op.start_us), html_escape(op.detail));
  }
  if (blocked.empty()) return "";
  return "<section><h2>Blocked ops</h2><table id=\"blocked\"><tr><th>state</th><th>group</th><th class=\"num\">seq"
         "</th><th>op</th><th class=\"num\">size</th><th>waiting ranks</th><th>missing ranks</th><th class=\"num\">"
         "last arrival</th><th>detail</th></tr>\n" +
         blocked + "</table></section>\n";
}

// The recovery policies side by side, or "" where replay.json has none: each one's outcome, when
// the watchdog fires, when it ends, the ranks it drops and the re-run.
std::string replay_policies_section(const ReplayPageData& data) {
  std::string policies;
  for (size_t i = 0; i < data.recoveries.size(); ++i) {
    const ReplayPageRecovery& r = data.recoveries[i];
    const bool aborted = r.outcome == "aborted";
    policies += fmt::format(
        "<tr class=\"policy {}\"><td><i class=\"swatch\" style=\"background:{}\"></i>{}</td><td>{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">+{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
        aborted ? "aborted" : "recovered", policy_colour(i), html_escape(r.action), html_escape(r.outcome), r.attempts,
        num(r.watchdog_s, 1), replay_time_text(r.detected_us), replay_time_text(r.end_us),
        replay_time_text(r.end_us - r.detected_us), html_escape(ranks_text(r.dropped_ranks)), num(r.rerun_us),
        html_escape(r.detail));
  }
  if (policies.empty()) return "";
  return "<section><h2>Recovery policies side by side</h2><table id=\"recoveries\"><tr><th>policy</th><th>outcome"
         "</th><th class=\"num\">attempts</th><th class=\"num\">watchdog (s)</th><th class=\"num\">watchdog fires"
         "</th><th class=\"num\">ends</th><th class=\"num\">after the watchdog</th><th>dropped ranks</th><th "
         "class=\"num\">re-run (us)</th><th>detail</th>"
         "</tr>\n" +
         policies + "</table></section>\n";
}

std::string replay_page(const json& replay) {
  const ReplayPageData data = read_replay_page_data(replay);
  const std::vector<int> culprits = replay.at("culprit_ranks").get<std::vector<int>>();
  const int ranks = replay.at("ranks").get<int>();
  std::string body = replay_incident_section(replay, data, culprits);
  body += replay_timeline(data, ranks, culprits);
  body += replay_blocked_section(data);
  body += replay_policies_section(data);
  return page(fmt::format("tandem report: replay of {} dumps", ranks), replay.at("verdict").get<std::string>(), body,
              "replay.json");
}

}  // namespace
}  // namespace report

std::string replay_report_html(const nlohmann::json& replay) { return report::replay_page(replay); }

}  // namespace tandem::app
