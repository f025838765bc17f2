// The page of a collective loop's results.json (the fault scenarios): the outcome, a timeline per
// rank with the faults, the recovery actions and the culprit ranks marked, the per-iteration table
// and, with --compare, each iteration's time next to the other run's.
#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/report/report_html.h"
#include "app/report/report_page.h"
#include "app/report/report_pages.h"

namespace tandem::app::report {
namespace {

using nlohmann::json;

struct Slice {
  int rank, iteration, attempt;
  double start, end;
  bool ok;
};

std::vector<Slice> slices_of(const json& results) {
  std::vector<Slice> out;
  for (const json& s : need(results, "slices", "collective loop")) {
    out.push_back({s.at(0).get<int>(), s.at(1).get<int>(), s.at(2).get<int>(), s.at(3).get<double>(),
                   s.at(4).get<double>(), s.at(5).get<bool>()});
  }
  return out;
}

// The timeline's layout: the iterations band on top, a row per rank under it, then the time axis;
// time runs from 0 to `total_s` over the `plot` pixels right of the rank labels.
struct LoopLayout {
  int ranks = 0, row = 16;
  double total_s = 1e-6;
  static constexpr int kLeft = 124, kBand = 34, kWidth = 1120, kPlot = kWidth - kLeft - 40;

  double x(double t) const { return kLeft + t / total_s * kPlot; }
  int bottom() const { return kBand + ranks * row; }
  int height() const { return kBand + ranks * row + 34; }
};

// The iterations band: one bar per iteration, coloured by its outcome.
std::string loop_iterations_band(const json& iterations, const LoopLayout& layout) {
  const int band = LoopLayout::kBand;
  std::string svg = fmt::format("<text x=\"4\" y=\"{}\">iterations</text>\n", band / 2 + 4);
  for (const json& it : iterations) {
    const std::string outcome = text_of(it, "outcome");
    const double start = it.value("start_s", 0.0), seconds = it.value("seconds", 0.0);
    const char* colour = outcome == "aborted" ? kFailed : outcome == "completed" ? kCompleted : kRecovery;
    svg += fmt::format(
        "<g class=\"iteration\" data-outcome=\"{}\"><rect x=\"{:.2f}\" y=\"6\" width=\"{:.2f}\" height=\"{}\" "
        "fill=\"{}\" opacity=\"0.85\"><title>iteration {}: {} in {} us</title></rect></g>\n",
        html_escape(outcome), layout.x(start), std::max(1.0, layout.x(start + seconds) - layout.x(start)), band - 14,
        colour, it.value("iteration", 0), html_escape(outcome), num(seconds * 1e6));
  }
  return svg;
}

// A row per rank: its attempts as slices, completed or failed; the culprits tinted and labelled.
std::string loop_rank_rows(const std::vector<Slice>& slices, const std::vector<int>& culprits,
                           const LoopLayout& layout) {
  const int ranks = layout.ranks, row = layout.row, left = LoopLayout::kLeft;
  std::map<int, std::vector<const Slice*>> by_rank;
  for (const Slice& s : slices) by_rank[s.rank].push_back(&s);
  std::string svg;
  for (int r = 0; r < ranks; ++r) {
    const bool culprit = std::find(culprits.begin(), culprits.end(), r) != culprits.end();
    const int y = LoopLayout::kBand + r * row;
    svg += fmt::format("<g class=\"rank-row{}\" data-rank=\"{}\">", culprit ? " culprit" : "", r);
    if (culprit) {
      svg += fmt::format("<rect x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" opacity=\"0.14\"/>", y,
                         LoopLayout::kWidth, row, kFault);
    } else if (r % 2 == 1) {
      svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f2f4f7\"/>", left, y,
                         LoopLayout::kPlot, row);
    }
    if (ranks <= 32 || r % 8 == 0 || culprit) {
      svg += fmt::format("<text x=\"4\" y=\"{}\"{}>rank {}{}</text>", y + row - 2,
                         culprit ? " style=\"fill:#d62728;font-weight:700\"" : "", r, culprit ? " (culprit)" : "");
    }
    for (const Slice* s : by_rank[r]) {
      svg += fmt::format(
          "<rect class=\"slice {}\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"><title>rank {} "
          "iteration {} attempt {}: {} us{}</title></rect>",
          s->ok ? "completed" : "failed", layout.x(s->start), y + 1,
          std::max(0.8, layout.x(s->end) - layout.x(s->start)), row - 2, s->ok ? kCompleted : kFailed, r, s->iteration,
          s->attempt, num((s->end - s->start) * 1e6), s->ok ? "" : " (failed)");
    }
    svg += "</g>\n";
  }
  return svg;
}

// Faults where they hit (an iteration's start), recovery where it acted (the iteration's end).
std::string loop_fault_and_recovery_markers(const json& iterations, const LoopLayout& layout) {
  const int bottom = layout.bottom();
  std::string svg;
  for (const json& it : iterations) {
    const double start = it.value("start_s", 0.0), end = start + it.value("seconds", 0.0);
    if (!it.value("faults", json::array()).empty()) {
      svg += fmt::format(
          "<g class=\"fault-marker\"><line x1=\"{0:.2f}\" y1=\"4\" x2=\"{0:.2f}\" y2=\"{1}\" stroke=\"{2}\" "
          "stroke-width=\"2\" stroke-dasharray=\"4 3\"/><polygon points=\"{3:.2f},2 {4:.2f},2 {0:.2f},10\" "
          "fill=\"{2}\"/><title>fault in iteration {5}</title></g>\n",
          layout.x(start), bottom, kFault, layout.x(start) - 6, layout.x(start) + 6, it.value("iteration", 0));
    }
    const std::string outcome = text_of(it, "outcome");
    if (outcome != "completed") {
      svg += fmt::format(
          "<g class=\"recovery-marker\" data-outcome=\"{0}\"><line x1=\"{1:.2f}\" y1=\"4\" x2=\"{1:.2f}\" y2=\"{2}\" "
          "stroke=\"{3}\" stroke-width=\"2\"/><circle cx=\"{1:.2f}\" cy=\"8\" r=\"5\" fill=\"{3}\"/>"
          "<title>recovery: {0}</title></g>\n",
          html_escape(outcome), layout.x(end), bottom, kRecovery);
    }
  }
  return svg;
}

// The time axis under the rows: six ticks in ms.
std::string loop_time_axis(const LoopLayout& layout) {
  const int bottom = layout.bottom();
  std::string svg;
  for (int i = 0; i <= 5; ++i) {
    const double t = layout.total_s * i / 5;
    svg += fmt::format(
        "<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"#8a94a3\"/>"
        "<text x=\"{0:.2f}\" y=\"{3}\" text-anchor=\"{5}\">{4} ms</text>\n",
        layout.x(t), bottom, bottom + 5, bottom + 18, num(t * 1e3, 2), i == 5 ? "end" : "middle");
  }
  return svg;
}

std::string loop_timeline_legend() {
  return fmt::format(
      "<p class=\"legend\"><span><i class=\"swatch\" style=\"background:{}\"></i>completed attempt</span>"
      "<span><i class=\"swatch\" style=\"background:{}\"></i>failed attempt (a stuck one: waiting until the "
      "watchdog fires) / fault</span>"
      "<span><i class=\"swatch\" style=\"background:{}\"></i>recovery action</span>"
      "<span>a rank with no slice in an attempt never arrived (hung or crashed)</span></p>",
      kCompleted, kFailed, kRecovery);
}

std::string loop_timeline(const json& results, const std::vector<int>& culprits) {
  LoopLayout layout;
  layout.ranks = need(results, "ranks", "collective loop").get<int>();
  const json& iterations = need(results, "iterations", "collective loop");
  const std::vector<Slice> slices = slices_of(results);
  double total = results.value("total_seconds", 0.0);
  for (const Slice& s : slices) total = std::max(total, s.end);
  if (total <= 0) total = 1e-6;
  layout.total_s = total;
  layout.row = layout.ranks > 32 ? 10 : 16;
  const int width = LoopLayout::kWidth, height = layout.height();
  std::string svg = fmt::format(
      "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "role=\"img\" aria-label=\"timeline per rank\">\n",
      width, height, width, height);
  svg += loop_iterations_band(iterations, layout);
  svg += loop_rank_rows(slices, culprits, layout);
  svg += loop_fault_and_recovery_markers(iterations, layout);
  svg += loop_time_axis(layout);
  svg += "</svg>\n";
  return "<section><h2>Timeline per rank</h2>" + loop_timeline_legend() + svg + "</section>\n";
}

std::string loop_table(const json& results, const json* compare) {
  std::string out =
      "<section><h2>Collectives</h2><table id=\"collectives\"><tr><th>iteration</th><th>outcome</th>"
      "<th>attempts</th><th class=\"num\">time (us)</th><th class=\"num\">fault-free (us)</th>"
      "<th class=\"num\">cost (us)</th>";
  if (compare) out += "<th class=\"num\">other run (us)</th>";
  out += "<th>detail</th></tr>\n";
  const json& iterations = need(results, "iterations", "collective loop");
  for (size_t i = 0; i < iterations.size(); ++i) {
    const json& it = iterations[i];
    const std::string outcome = text_of(it, "outcome");
    const double seconds = it.value("seconds", 0.0), free = it.value("fault_free_seconds", 0.0);
    out += fmt::format(
        "<tr class=\"iteration {}\"><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}"
        "</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
        outcome == "completed" ? "ok"
        : outcome == "aborted" ? "aborted"
                               : "recovered",
        it.value("iteration", 0), html_escape(outcome), it.value("attempts", 0), num(seconds * 1e6), num(free * 1e6),
        num(std::max(0.0, seconds - free) * 1e6));
    if (compare) {
      const json& other = compare->at("iterations");
      out += fmt::format("<td class=\"num\">{}</td>",
                         i < other.size() ? num(other[i].value("seconds", 0.0) * 1e6) : std::string("-"));
    }
    out += fmt::format("<td>{}</td></tr>\n", html_escape(text_of(it, "detail")));
  }
  return out + "</table></section>\n";
}

// Bars per iteration: this run against the other (prediction vs measurement).
std::string compare_plot(const std::vector<std::pair<std::string, std::pair<double, double>>>& bars,
                         const std::string& mine, const std::string& theirs, const std::string& unit) {
  double top = 0;
  for (const auto& [label, v] : bars) top = std::max({top, v.first, v.second});
  if (top <= 0) top = 1;
  const int width = 1120, height = 260, left = 70, bottom = 220, plot_h = 190;
  const double slot = (width - left - 20.0) / std::max<size_t>(1, bars.size());
  std::string svg = svg_open("comparison", width, height);
  for (size_t i = 0; i < bars.size(); ++i) {
    const double x0 = left + i * slot;
    const auto& [a, b] = bars[i].second;
    const double ha = a / top * plot_h, hb = b / top * plot_h, w = std::max(2.0, slot * 0.35);
    svg += fmt::format(
        "<rect class=\"bar mine\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
        "fill=\"{}\"><title>{}: {} {}</title></rect>",
        x0 + slot * 0.12, bottom - ha, w, ha, kCompleted, html_escape(mine), num(a), unit);
    svg += fmt::format(
        "<rect class=\"bar theirs\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
        "fill=\"{}\"><title>{}: {} {}</title></rect>",
        x0 + slot * 0.12 + w, bottom - hb, w, hb, kCompare, html_escape(theirs), num(b), unit);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x0 + slot / 2, bottom + 16,
                       html_escape(bars[i].first));
  }
  svg += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#8a94a3\"/>"
      "<text x=\"4\" y=\"{3}\">{4} {5}</text><text x=\"4\" y=\"{1}\">0</text></svg>\n",
      left, bottom, width - 10, bottom - plot_h + 4, num(top), html_escape(unit));
  return fmt::format(
      "<section><h2>Prediction vs measurement</h2><p class=\"legend\"><span><i class=\"swatch\" "
      "style=\"background:{}\"></i>{}</span><span><i class=\"swatch\" style=\"background:{}\"></i>{}"
      "</span></p>{}</section>\n",
      kCompleted, html_escape(mine), kCompare, html_escape(theirs), svg);
}

}  // namespace

std::string loop_page(const json& results, const std::optional<json>& compare) {
  const bool aborted = results.value("aborted", false);
  bool expectations_pass = true;
  for (const json& e : results.value("expectations", json::array())) expectations_pass &= e.value("pass", false);
  std::vector<int> culprits;
  if (results.contains("analysis")) culprits = results.at("analysis").value("culprit_ranks", std::vector<int>{});
  const std::string name = text_of(results, "scenario", "scenario");
  std::string body = "<section><h2>Outcome" +
                     verdict_badge(expectations_pass, expectations_pass ? "expectations PASS" : "expectations FAIL") +
                     badge(!aborted, aborted ? "the loop ABORTED" : "the loop completed") + "</h2><dl>";
  auto row = [&](const std::string& key, const std::string& value) {
    if (!value.empty()) body += fmt::format("<dt>{}</dt><dd>{}</dd>", html_escape(key), html_escape(value));
  };
  row("backend", text_of(results, "backend"));
  row("workload", text_of(results, "workload"));
  row("recovery", text_of(results, "recovery"));
  row("total",
      fmt::format(
          "{} us (fault-free {} us; faults cost {} us)", num(results.value("total_seconds", 0.0) * 1e6),
          num(results.value("fault_free_seconds", 0.0) * 1e6),
          num(std::max(0.0, results.value("total_seconds", 0.0) - results.value("fault_free_seconds", 0.0)) * 1e6)));
  for (const json& f : results.value("faults", json::array())) row("fault", f.get<std::string>());
  for (const json& d : results.value("dump_reasons", json::array())) row("dumps", d.get<std::string>());
  if (results.contains("analysis")) {
    body += fmt::format("<dt>flight recorder</dt><dd id=\"analysis\"><strong>{}</strong></dd>",
                        html_escape(text_of(results.at("analysis"), "verdict")));
  }
  body += "</dl></section>\n";
  body += loop_timeline(results, culprits);
  const json* other = compare && compare->contains("iterations") ? &*compare : nullptr;
  body += loop_table(results, other);
  if (other) {
    std::vector<std::pair<std::string, std::pair<double, double>>> bars;
    const json& mine = results.at("iterations");
    const json& theirs = other->at("iterations");
    for (size_t i = 0; i < std::min(mine.size(), theirs.size()); ++i) {
      bars.push_back(
          {fmt::format("#{}", i), {mine[i].value("seconds", 0.0) * 1e6, theirs[i].value("seconds", 0.0) * 1e6}});
    }
    body += compare_plot(bars, fmt::format("this run ({})", text_of(results, "backend")),
                         fmt::format("other run ({})", text_of(*other, "backend")), "us");
  }
  body += expectations_section(results);
  return page("tandem report: " + name, text_of(results, "description"), body);
}

}  // namespace tandem::app::report
