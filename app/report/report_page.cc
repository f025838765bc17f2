#include "app/report/report_page.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "app/replay/replay.h"
#include "core/error.h"
#include "core/fr_analysis.h"
#include "core/sizes.h"

namespace tandem::app {
namespace {

using nlohmann::json;

constexpr const char* kStyle = R"(
body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#1d2430;margin:0;background:#f4f6f9}
header{background:#1d2430;color:#fff;padding:18px 28px}
header h1{margin:0;font-size:22px;font-weight:600}
header p{margin:6px 0 0;color:#c9d1dc}
main{padding:8px 28px 28px}
section{background:#fff;border:1px solid #dde3ea;border-radius:6px;margin:16px 0;padding:14px 18px}
h2{font-size:16px;margin:0 0 10px}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;font-weight:600;font-size:13px;margin-left:10px}
.pass{background:#2ca02c;color:#fff}.fail{background:#d62728;color:#fff}.warn{background:#ff7f0e;color:#fff}
.incident{background:#fdecea;color:#a31d1d;border:1px solid #d62728}.neutral{background:#e8edf3;color:#1d2430}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eef1f4}
th{background:#f7f9fb;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
#blocked td.num,#recoveries td.num,#recoveries td:first-child{white-space:nowrap}
tr.aborted td,tr.culprit td{background:#fdecea}
tr.recovered td{background:#fff4e5}
dl{display:grid;grid-template-columns:max-content auto;gap:4px 16px;margin:0}
dt{color:#5b6675}dd{margin:0}
.legend span{display:inline-block;margin-right:16px}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-1px;margin-right:4px}
svg text{font:11px -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;fill:#1d2430}
footer{color:#5b6675;font-size:12px;padding:0 28px 24px}
)";

constexpr const char* kCompleted = "#4c78a8";
constexpr const char* kFailed = "#d62728";
constexpr const char* kFault = "#d62728";
constexpr const char* kRecovery = "#ff7f0e";
constexpr const char* kCompare = "#59a14f";
// The colours of a plot's series, in order (Tableau 10's first seven).
constexpr const char* kPalette[] = {"#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#9d755d"};

// A plot's opening <svg> tag, `id` for the tests to find it by.
std::string svg_open(const char* id, int width, int height) {
  return fmt::format(
      "<svg id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\">\n",
      id, width, height, width, height);
}

std::string num(double v, int digits = 1) { return fmt::format("{:.{}f}", v, digits); }

std::string text_of(const json& j, const char* key, const std::string& fallback = "") {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  return j.at(key).is_string() ? j.at(key).get<std::string>() : j.at(key).dump();
}

const json& need(const json& j, const char* key, const char* what) {
  if (!j.contains(key)) fail(ErrorCode::kFormat, "results.json ({}) has no '{}'", what, key);
  return j.at(key);
}

std::string badge(bool pass, const std::string& label) {
  return fmt::format("<span class=\"badge {}\">{}</span>", pass ? "pass" : "fail", html_escape(label));
}

// The page's verdict (the test finds it by its id).
std::string verdict_badge(bool pass, const std::string& label) {
  return fmt::format("<span class=\"badge {}\" id=\"verdict\">{}</span>", pass ? "pass" : "fail", html_escape(label));
}

std::string expectations_section(const json& results) {
  if (!results.contains("expectations") || results.at("expectations").empty()) return "";
  std::string rows;
  for (const json& e : results.at("expectations")) {
    const bool pass = e.contains("pass") ? e.at("pass").get<bool>() : text_of(e, "verdict") == "PASS";
    const std::string line = e.contains("line") ? text_of(e, "line") : text_of(e, "detail");
    rows += fmt::format("<tr class=\"expectation\"><td>{}</td><td>{}</td></tr>\n", badge(pass, pass ? "PASS" : "FAIL"),
                        html_escape(line));
  }
  return "<section><h2>Expectations</h2><table><tr><th>verdict</th><th>expectation</th></tr>\n" + rows +
         "</table></section>\n";
}

// `source`: the file the page was written from, for its footer.
std::string page(const std::string& title, const std::string& subtitle, const std::string& body,
                 const std::string& source = "results.json") {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>{}</title>\n<style>{}</style></head>\n"
      "<body>\n<header><h1>{}</h1><p>{}</p></header>\n<main>\n{}</main>\n"
      "<footer>Written by tandem report from {}. Self-contained: no scripts, nothing loaded from the "
      "network.</footer>\n</body></html>\n",
      html_escape(title), kStyle, html_escape(title), html_escape(subtitle), body, html_escape(source));
}

// ---- collective loop ------------------------------------------------------------------------------

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

std::string loop_timeline(const json& results, const std::vector<int>& culprits) {
  const int ranks = need(results, "ranks", "collective loop").get<int>();
  const json& iterations = need(results, "iterations", "collective loop");
  const std::vector<Slice> slices = slices_of(results);
  double total = results.value("total_seconds", 0.0);
  for (const Slice& s : slices) total = std::max(total, s.end);
  if (total <= 0) total = 1e-6;
  const int row = ranks > 32 ? 10 : 16, left = 124, band = 34, width = 1120, plot = width - left - 40;
  const int height = band + ranks * row + 34;
  auto x = [&](double t) { return left + t / total * plot; };
  std::string svg = fmt::format(
      "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "role=\"img\" aria-label=\"timeline per rank\">\n",
      width, height, width, height);
  // The iterations band.
  svg += fmt::format("<text x=\"4\" y=\"{}\">iterations</text>\n", band / 2 + 4);
  for (const json& it : iterations) {
    const std::string outcome = text_of(it, "outcome");
    const double start = it.value("start_s", 0.0), seconds = it.value("seconds", 0.0);
    const char* colour = outcome == "aborted" ? kFailed : outcome == "completed" ? kCompleted : kRecovery;
    svg += fmt::format(
        "<g class=\"iteration\" data-outcome=\"{}\"><rect x=\"{:.2f}\" y=\"6\" width=\"{:.2f}\" height=\"{}\" "
        "fill=\"{}\" opacity=\"0.85\"><title>iteration {}: {} in {} us</title></rect></g>\n",
        html_escape(outcome), x(start), std::max(1.0, x(start + seconds) - x(start)), band - 14, colour,
        it.value("iteration", 0), html_escape(outcome), num(seconds * 1e6));
  }
  // Rank rows.
  std::map<int, std::vector<const Slice*>> by_rank;
  for (const Slice& s : slices) by_rank[s.rank].push_back(&s);
  for (int r = 0; r < ranks; ++r) {
    const bool culprit = std::find(culprits.begin(), culprits.end(), r) != culprits.end();
    const int y = band + r * row;
    svg += fmt::format("<g class=\"rank-row{}\" data-rank=\"{}\">", culprit ? " culprit" : "", r);
    if (culprit) {
      svg += fmt::format("<rect x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" opacity=\"0.14\"/>", y, width,
                         row, kFault);
    } else if (r % 2 == 1) {
      svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f2f4f7\"/>", left, y, plot, row);
    }
    if (ranks <= 32 || r % 8 == 0 || culprit) {
      svg += fmt::format("<text x=\"4\" y=\"{}\"{}>rank {}{}</text>", y + row - 2,
                         culprit ? " style=\"fill:#d62728;font-weight:700\"" : "", r, culprit ? " (culprit)" : "");
    }
    for (const Slice* s : by_rank[r]) {
      svg += fmt::format(
          "<rect class=\"slice {}\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"><title>rank {} "
          "iteration {} attempt {}: {} us{}</title></rect>",
          s->ok ? "completed" : "failed", x(s->start), y + 1, std::max(0.8, x(s->end) - x(s->start)), row - 2,
          s->ok ? kCompleted : kFailed, r, s->iteration, s->attempt, num((s->end - s->start) * 1e6),
          s->ok ? "" : " (failed)");
    }
    svg += "</g>\n";
  }
  // Faults where they hit, recovery where it acted.
  const int bottom = band + ranks * row;
  for (const json& it : iterations) {
    const double start = it.value("start_s", 0.0), end = start + it.value("seconds", 0.0);
    if (!it.value("faults", json::array()).empty()) {
      svg += fmt::format(
          "<g class=\"fault-marker\"><line x1=\"{0:.2f}\" y1=\"4\" x2=\"{0:.2f}\" y2=\"{1}\" stroke=\"{2}\" "
          "stroke-width=\"2\" stroke-dasharray=\"4 3\"/><polygon points=\"{3:.2f},2 {4:.2f},2 {0:.2f},10\" "
          "fill=\"{2}\"/><title>fault in iteration {5}</title></g>\n",
          x(start), bottom, kFault, x(start) - 6, x(start) + 6, it.value("iteration", 0));
    }
    const std::string outcome = text_of(it, "outcome");
    if (outcome != "completed") {
      svg += fmt::format(
          "<g class=\"recovery-marker\" data-outcome=\"{0}\"><line x1=\"{1:.2f}\" y1=\"4\" x2=\"{1:.2f}\" y2=\"{2}\" "
          "stroke=\"{3}\" stroke-width=\"2\"/><circle cx=\"{1:.2f}\" cy=\"8\" r=\"5\" fill=\"{3}\"/>"
          "<title>recovery: {0}</title></g>\n",
          html_escape(outcome), x(end), bottom, kRecovery);
    }
  }
  // The time axis.
  for (int i = 0; i <= 5; ++i) {
    const double t = total * i / 5;
    svg += fmt::format(
        "<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"#8a94a3\"/>"
        "<text x=\"{0:.2f}\" y=\"{3}\" text-anchor=\"{5}\">{4} ms</text>\n",
        x(t), bottom, bottom + 5, bottom + 18, num(t * 1e3, 2), i == 5 ? "end" : "middle");
  }
  svg += "</svg>\n";
  const std::string legend = fmt::format(
      "<p class=\"legend\"><span><i class=\"swatch\" style=\"background:{}\"></i>completed attempt</span>"
      "<span><i class=\"swatch\" style=\"background:{}\"></i>failed attempt (a stuck one: waiting until the "
      "watchdog fires) / fault</span>"
      "<span><i class=\"swatch\" style=\"background:{}\"></i>recovery action</span>"
      "<span>a rank with no slice in an attempt never arrived (hung or crashed)</span></p>",
      kCompleted, kFailed, kRecovery);
  return "<section><h2>Timeline per rank</h2>" + legend + svg + "</section>\n";
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
      fmt::format("{} us (fault-free {} us; faults cost {} us)", num(results.value("total_seconds", 0.0) * 1e6),
                  num(results.value("fault_free_seconds", 0.0) * 1e6),
                  num(std::max(0.0, results.value("total_seconds", 0.0) - results.value("fault_free_seconds", 0.0)) *
                      1e6)));
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

// ---- collective sweep -------------------------------------------------------------------------------

std::string sweep_page(const json& results, const std::optional<json>& compare) {
  const json& scenario = need(results, "scenario", "sweep");
  const json& points = need(results, "points", "sweep");
  const bool pass = results.value("passed", false);
  std::string body = "<section><h2>Outcome" + verdict_badge(pass, pass ? "PASS" : "FAIL") + "</h2><dl>";
  body += fmt::format("<dt>backend</dt><dd>{}</dd><dt>points</dt><dd>{}</dd></dl></section>\n",
                      html_escape(text_of(results, "backend")), points.size());
  // busbw against size, one line per (variant, collective, algorithm); the other run dashed.
  struct Line {
    std::vector<std::pair<double, double>> xy;
    bool other = false;
  };
  std::map<std::string, Line> lines;
  auto add = [&](const json& run, bool other) {
    for (const json& p : run.at("points")) {
      if (text_of(p, "status") != "ok") continue;
      const std::string key = fmt::format("{}{} {} {}", other ? "other: " : "", text_of(p, "variant"),
                                          text_of(p, "collective"), text_of(p, "algorithm"));
      lines[key].xy.push_back({p.value("size_bytes", 0.0), p.value("busbw_GBps", 0.0)});
      lines[key].other = other;
    }
  };
  add(results, false);
  if (compare && compare->contains("points")) add(*compare, true);
  double xmin = 1e300, xmax = 0, ymax = 0;
  for (const auto& [key, line] : lines) {
    for (const auto& [size, bw] : line.xy) {
      xmin = std::min(xmin, size);
      xmax = std::max(xmax, size);
      ymax = std::max(ymax, bw);
    }
  }
  if (!lines.empty() && xmax > 0) {
    const int width = 1120, height = 340, left = 70, bottom = 300, plot_w = 1000, plot_h = 270;
    const double lx0 = std::log2(std::max(1.0, xmin)), lx1 = std::max(lx0 + 1, std::log2(xmax));
    auto px = [&](double size) { return left + (std::log2(std::max(1.0, size)) - lx0) / (lx1 - lx0) * plot_w; };
    auto py = [&](double bw) { return bottom - bw / std::max(ymax, 1e-9) * plot_h; };
    std::string svg = svg_open("busbw", width, height);
    std::string legend;
    size_t i = 0;
    for (const auto& [key, line] : lines) {
      const char* colour = kPalette[i++ % std::size(kPalette)];
      std::string path;
      for (const auto& [size, bw] : line.xy) path += fmt::format("{:.1f},{:.1f} ", px(size), py(bw));
      svg += fmt::format(
          "<polyline class=\"series{}\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}>"
          "<title>{}</title></polyline>\n",
          line.other ? " other" : "", path, colour, line.other ? " stroke-dasharray=\"6 4\"" : "", html_escape(key));
      legend +=
          fmt::format("<span><i class=\"swatch\" style=\"background:{}\"></i>{}</span>", colour, html_escape(key));
    }
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#8a94a3\"/><text x=\"{3}\" "
        "y=\"{4}\" text-anchor=\"end\">size (bytes, log scale) {5} .. {6}</text><text x=\"4\" y=\"24\">"
        "{7} GB/s</text><text x=\"4\" y=\"{1}\">0</text></svg>\n",
        left, bottom, left + plot_w, left + plot_w, bottom + 24, num(xmin, 0), num(xmax, 0), num(ymax));
    body += "<section><h2>Bus bandwidth against size" +
            std::string(compare ? " (prediction vs measurement: the other run dashed)" : "") +
            "</h2><p class=\"legend\">" + legend + "</p>" + svg + "</section>\n";
  }
  std::string rows;
  for (const json& p : points) {
    rows += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td>{}</td></tr>\n",
        html_escape(text_of(p, "variant")), html_escape(text_of(p, "collective")),
        html_escape(text_of(p, "algorithm_used", text_of(p, "algorithm"))), p.value("size_bytes", int64_t{0}),
        num(p.value("time_us", 0.0)), num(p.value("busbw_GBps", 0.0)), html_escape(text_of(p, "status")));
  }
  body +=
      "<section><h2>Points</h2><table id=\"collectives\"><tr><th>variant</th><th>collective</th><th>algorithm"
      "</th><th class=\"num\">size (B)</th><th class=\"num\">time (us)</th><th class=\"num\">busbw (GB/s)</th>"
      "<th>status</th></tr>\n" +
      rows + "</table></section>\n";
  body += expectations_section(results);
  return page("tandem report: " + text_of(scenario, "name", "sweep"), text_of(scenario, "description"), body);
}

// ---- training ---------------------------------------------------------------------------------------

std::string training_page(const json& results) {
  const json& scenario = need(results, "scenario", "training");
  const bool pass = results.value("passed", false);
  std::string body = "<section><h2>Outcome" + verdict_badge(pass, pass ? "PASS" : "FAIL") + "</h2><dl>";
  const json workload = results.value("workload", json::object());
  body += fmt::format("<dt>model</dt><dd>{}</dd><dt>precision</dt><dd>{}</dd></dl></section>\n",
                      html_escape(text_of(workload, "model")), html_escape(text_of(workload, "precision")));
  std::string rows;
  for (const json& variant : need(results, "variants", "training")) {
    for (const json& layout : variant.value("layouts", json::array())) {
      const std::string variant_name = html_escape(text_of(variant, "variant", text_of(variant, "name")));
      if (!layout.value("ok", true)) {  // does not fit or does not split: the reason instead of numbers
        rows += fmt::format(
            "<tr class=\"does-not-run\"><td>{}</td><td>{}</td><td>does not run</td><td colspan=\"5\">"
            "{}</td></tr>\n",
            variant_name, html_escape(text_of(layout, "layout")), html_escape(text_of(layout, "error")));
        continue;
      }
      rows += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>runs</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
          "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
          variant_name, html_escape(text_of(layout, "layout")), num(layout.value("step_s", 0.0), 2),
          num(layout.value("compute_s", 0.0), 2), num(layout.value("exposed_comm_s", 0.0), 3),
          num(layout.value("bubble_s", 0.0), 3), num(100 * layout.value("achieved_mfu", 0.0), 1));
    }
  }
  body +=
      "<section><h2>Step per layout</h2><table id=\"collectives\"><tr><th>variant</th><th>layout</th><th>status"
      "</th><th class=\"num\">step (s)</th><th class=\"num\">compute (s)</th><th class=\"num\">exposed comm (s)"
      "</th><th class=\"num\">bubble (s)</th><th class=\"num\">MFU (%)</th></tr>\n" +
      rows + "</table></section>\n";
  body += expectations_section(results);
  return page("tandem report: " + text_of(scenario, "name", "training"), text_of(scenario, "description"), body);
}

// ---- start-up -------------------------------------------------------------------------------------

// A number the page reads where a hand-edited file may hold anything else.
double number_at(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_number()) {
    fail(ErrorCode::kFormat, "{}.{}: expected a number{}", where, key,
         j.contains(key) ? ", got " + std::string(j.at(key).type_name()) : "");
  }
  return j.at(key).get<double>();
}

std::string scenario_name(const json& results, const char* fallback) {
  const json& scenario = results.value("scenario", json());
  return scenario.is_object() ? text_of(scenario, "name", fallback) : text_of(results, "scenario", fallback);
}

std::string startup_page(const json& results) {
  const bool pass = results.value("passed", false);
  std::string body = "<section><h2>Outcome" + verdict_badge(pass, pass ? "PASS" : "FAIL") + "</h2></section>\n";
  for (const json& variant : need(results, "variants", "start-up")) {
    // Every phase any lever set has (the 2023 stack has group barriers, today's first collectives),
    // then one row per set with a cell under each: a phase a set lacks is 0 s.
    const json configs = variant.value("configs", json::array());
    std::vector<std::string> phase_names;
    for (const json& config : configs) {
      for (const json& phase : need(config, "startup", "start-up").value("phases", json::array())) {
        const std::string phase_name = text_of(phase, "name");
        if (std::find(phase_names.begin(), phase_names.end(), phase_name) == phase_names.end()) {
          phase_names.push_back(phase_name);
        }
      }
    }
    std::string rows;
    for (const json& config : configs) {
      const json& startup = config.at("startup");
      rows += fmt::format("<tr><td>{}</td>", html_escape(text_of(config, "name")));
      for (const std::string& phase_name : phase_names) {
        double seconds = 0;
        for (const json& phase : startup.value("phases", json::array())) {
          if (text_of(phase, "name") == phase_name) seconds = number_at(phase, "seconds", "phases[]");
        }
        rows += fmt::format("<td class=\"num\">{}</td>", num(seconds, 2));
      }
      rows += fmt::format("<td class=\"num\">{}</td></tr>\n", num(number_at(startup, "total_s", "startup"), 2));
    }
    std::string head = "<tr><th>config</th>";
    for (const std::string& phase_name : phase_names)
      head += "<th class=\"num\">" + html_escape(phase_name) + " (s)</th>";
    body += fmt::format(
        "<section><h2>Start-up on {}</h2><table id=\"startup\">{}<th class=\"num\">total (s)</th></tr>\n{}"
        "</table></section>\n",
        html_escape(text_of(variant, "name")), head, rows);
  }
  body += expectations_section(results);
  return page("tandem report: " + scenario_name(results, "start-up"), "job start-up per lever set (docs/startup.md)",
              body);
}

// ---- claims ---------------------------------------------------------------------------------------

std::string claims_page(const json& results) {
  const bool pass = results.value("passed", false);
  std::string body = "<section><h2>Outcome" + verdict_badge(pass, pass ? "PASS" : "FAIL") + "</h2></section>\n";
  std::string rows;
  for (const json& claim : need(results, "claims", "claims")) {
    const std::string verdict = text_of(claim, "verdict");
    const std::string css = verdict == "plausible" ? "pass" : verdict == "impossible" ? "fail" : "warn";
    const std::string unit = text_of(claim, "unit");
    const json& claimed = need(claim, "claimed", "claims");
    const json& before = need(claim, "before", "claims");
    double nearest = 0;
    for (const json& after : claim.value("after", json::array())) {
      const double value = number_at(after, "value", "after[]");  // every one checked, the nearest shown
      if (text_of(after, "setting") == text_of(claim, "nearest")) nearest = value;
    }
    std::string reasons;
    for (const json& reason : claim.value("reasons", json::array()))
      reasons += "<li>" + html_escape(reason.is_string() ? reason.get<std::string>() : reason.dump()) + "</li>";
    if (claim.contains("other_reading")) reasons += "<li>" + html_escape(text_of(claim, "other_reading")) + "</li>";
    rows += fmt::format(
        "<tr><td>{}</td><td>{}</td><td class=\"num\">{} &rarr; {} {}</td><td class=\"num\">{} &rarr; {} {} ({})</td>"
        "<td>{}</td><td><span class=\"badge {}\">{}</span></td><td><ul>{}</ul></td></tr>\n",
        html_escape(text_of(claim, "name")), html_escape(text_of(claim, "says")),
        fmt::format("{:.3g}", number_at(claimed, "before", "claimed")),
        fmt::format("{:.3g}", number_at(claimed, "after", "claimed")), html_escape(unit),
        fmt::format("{:.3g}", number_at(before, "value", "before")), fmt::format("{:.3g}", nearest), html_escape(unit),
        html_escape(text_of(claim, "nearest")),
        claim.contains("bound") ? html_escape(text_of(claim.at("bound"), "detail")) : "-", css, html_escape(verdict),
        reasons);
  }
  body +=
      "<section><h2>Claims</h2><table id=\"claims\"><tr><th>claim</th><th>the note says</th><th class=\"num\">"
      "claimed</th><th class=\"num\">tandem (nearest candidate)</th><th>bound</th><th>verdict</th><th>why</th>"
      "</tr>\n" +
      rows + "</table></section>\n";
  body += expectations_section(results);
  return page("tandem report: " + scenario_name(results, "claims"),
              "a release note's claims against tandem's models (docs/claims.md)", body);
}

// ---- memory (tandem memory --out) ------------------------------------------------------------------

// One setting's series of memory_over_time.csv, reduced to at most kMemoryPlotPoints buckets, each
// the maximum of its trace entries (so that no peak is lost).
struct MemorySeries {
  std::string label;
  std::vector<int64_t> index;  // the bucket's first trace index
  std::vector<double> allocated, reserved;
  int64_t entries = 0;
};
constexpr size_t kMemoryPlotPoints = 1500;

// memory_over_time.csv as `tandem memory --out` writes it: setting (quoted, quotes doubled),
// trace_index, action, allocated_bytes, reserved_bytes.
std::vector<MemorySeries> read_memory_over_time(std::string_view csv, const std::string& file) {
  struct Row {
    int64_t index;
    double allocated, reserved;
  };
  std::vector<std::pair<std::string, std::vector<Row>>> raw;
  size_t line_no = 0;
  size_t at = 0;
  while (at < csv.size()) {
    const size_t end = std::min(csv.find('\n', at), csv.size());
    const std::string_view line = csv.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (line_no == 1) {
      if (line != "setting,trace_index,action,allocated_bytes,reserved_bytes") {
        fail(ErrorCode::kFormat, "{}:1: not a memory_over_time.csv header (written by tandem memory --out)", file);
      }
      continue;
    }
    if (line.empty()) continue;
    std::string label;
    size_t i = 0;
    if (line[0] != '"') fail(ErrorCode::kFormat, "{}:{}: the setting must be quoted", file, line_no);
    for (i = 1; i < line.size(); ++i) {
      if (line[i] == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          label += '"';
          ++i;
        } else {
          break;
        }
      } else {
        label += line[i];
      }
    }
    if (i + 1 >= line.size() || line[i + 1] != ',')
      fail(ErrorCode::kFormat, "{}:{}: a bad setting field", file, line_no);
    std::vector<std::string_view> fields;
    for (size_t from = i + 2;;) {
      const size_t comma = line.find(',', from);
      fields.push_back(line.substr(from, comma == std::string_view::npos ? std::string_view::npos : comma - from));
      if (comma == std::string_view::npos) break;
      from = comma + 1;
    }
    if (fields.size() != 4)
      fail(ErrorCode::kFormat, "{}:{}: expected 5 fields, got {}", file, line_no, fields.size() + 1);
    int64_t values[3] = {};
    for (int k = 0; k < 3; ++k) {
      const std::string_view f = fields[k == 0 ? 0 : k + 1];
      const auto [end_ptr, error] = std::from_chars(f.data(), f.data() + f.size(), values[k]);
      if (error != std::errc() || end_ptr != f.data() + f.size() || values[k] < 0) {
        fail(ErrorCode::kFormat, "{}:{}: '{}' is not a count", file, line_no, f);
      }
    }
    if (raw.empty() || raw.back().first != label) raw.emplace_back(label, std::vector<Row>{});
    raw.back().second.push_back({values[0], static_cast<double>(values[1]), static_cast<double>(values[2])});
  }
  std::vector<MemorySeries> series;
  for (const auto& [label, rows] : raw) {
    MemorySeries s{label, {}, {}, {}, static_cast<int64_t>(rows.size())};
    const size_t bucket = std::max<size_t>(1, (rows.size() + kMemoryPlotPoints - 1) / kMemoryPlotPoints);
    for (size_t b = 0; b < rows.size(); b += bucket) {
      double allocated = 0, reserved = 0;
      for (size_t r = b; r < std::min(rows.size(), b + bucket); ++r) {
        allocated = std::max(allocated, rows[r].allocated);
        reserved = std::max(reserved, rows[r].reserved);
      }
      s.index.push_back(rows[b].index);
      s.allocated.push_back(allocated);
      s.reserved.push_back(reserved);
    }
    series.push_back(std::move(s));
  }
  return series;
}

std::string memory_plot(const std::vector<MemorySeries>& series) {
  double top = 0;
  int64_t last = 1;
  for (const MemorySeries& s : series) {
    for (double v : s.reserved) top = std::max(top, v);
    for (double v : s.allocated) top = std::max(top, v);
    if (!s.index.empty()) last = std::max(last, s.index.back());
  }
  if (top <= 0) top = 1;
  const int width = 1120, height = 300, left = 80, bottom = 260, plot_h = 230, plot_w = width - left - 20;
  std::string svg = svg_open("memory", width, height);
  std::string legend;
  for (size_t k = 0; k < series.size(); ++k) {
    const MemorySeries& s = series[k];
    const char* color = kPalette[k % std::size(kPalette)];
    for (const bool reserved : {true, false}) {
      std::string points;
      for (size_t i = 0; i < s.index.size(); ++i) {
        const double v = reserved ? s.reserved[i] : s.allocated[i];
        points += fmt::format("{:.1f},{:.1f} ", left + plot_w * static_cast<double>(s.index[i]) / last,
                              bottom - plot_h * v / top);
      }
      svg += fmt::format(
          "<polyline class=\"series\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{} points=\"{}\">"
          "<title>{} {}</title></polyline>\n",
          color, reserved ? "" : " stroke-dasharray=\"4 3\"", points, html_escape(s.label),
          reserved ? "reserved" : "allocated");
    }
    legend +=
        fmt::format("<span><i class=\"swatch\" style=\"background:{}\"></i>{}</span>", color, html_escape(s.label));
  }
  svg += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#8a94a3\"/>"
      "<text x=\"4\" y=\"{3}\">{4} MiB</text><text x=\"4\" y=\"{1}\">0</text>"
      "<text x=\"{2}\" y=\"{5}\" text-anchor=\"end\">trace entry {6}</text></svg>\n",
      left, bottom, width - 10, bottom - plot_h + 4, num(top / (1 << 20), 1), bottom + 18, last);
  return fmt::format(
      "<section><h2>Memory over the trace</h2><p class=\"legend\">{}<span>solid: reserved, dashed: "
      "allocated</span></p>{}</section>\n",
      legend, svg);
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// ---- checking a results.json ----------------------------------------------------------------------

// What a value of results.json must be where the page reads it.
enum class Kind { kBool, kInt, kNumber, kString, kObject, kObjects, kStrings, kInts, kSlices };

struct FieldRule {
  const char* key;
  Kind kind;
};

// The fields the page reads, as tandem run writes them (app/scenario/scenario_report.cc): top level,
// and inside each element of the arrays of objects.
constexpr FieldRule kTopRules[] = {
    {"passed", Kind::kBool},      {"aborted", Kind::kBool},         {"backend", Kind::kString},
    {"ranks", Kind::kInt},        {"total_seconds", Kind::kNumber}, {"fault_free_seconds", Kind::kNumber},
    {"analysis", Kind::kObject},  {"faults", Kind::kStrings},       {"dump_reasons", Kind::kStrings},
    {"slices", Kind::kSlices},    {"iterations", Kind::kObjects},   {"points", Kind::kObjects},
    {"variants", Kind::kObjects}, {"expectations", Kind::kObjects},
};
constexpr FieldRule kElementRules[] = {
    // iterations
    {"iteration", Kind::kInt},
    {"outcome", Kind::kString},
    {"start_s", Kind::kNumber},
    {"seconds", Kind::kNumber},
    {"fault_free_seconds", Kind::kNumber},
    {"attempts", Kind::kInt},
    {"faults", Kind::kInts},
    // points
    {"status", Kind::kString},
    {"variant", Kind::kString},
    {"collective", Kind::kString},
    {"algorithm", Kind::kString},
    {"size_bytes", Kind::kInt},
    {"time_us", Kind::kNumber},
    {"busbw_GBps", Kind::kNumber},
    // variants and their layouts
    {"layouts", Kind::kObjects},
    {"ok", Kind::kBool},
    {"layout", Kind::kString},
    {"step_s", Kind::kNumber},
    {"compute_s", Kind::kNumber},
    {"exposed_comm_s", Kind::kNumber},
    {"bubble_s", Kind::kNumber},
    {"achieved_mfu", Kind::kNumber},
    // expectations
    {"pass", Kind::kBool},
    {"verdict", Kind::kString},
    {"line", Kind::kString},
    {"detail", Kind::kString},
};
constexpr FieldRule kAnalysisRules[] = {{"culprit_ranks", Kind::kInts}, {"verdict", Kind::kString}};

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kBool:
      return "true or false";
    case Kind::kInt:
      return "an integer";
    case Kind::kNumber:
      return "a number";
    case Kind::kString:
      return "a string";
    case Kind::kObject:
      return "an object";
    case Kind::kObjects:
      return "a list of objects";
    case Kind::kStrings:
      return "a list of strings";
    case Kind::kInts:
      return "a list of integers";
    case Kind::kSlices:
      return "a list of [rank, iteration, attempt, start_s, end_s, ok]";
  }
  return "?";
}

bool fits_int(const json& v) {
  return v.is_number_integer() && v.get<int64_t>() >= std::numeric_limits<int>::min() &&
         v.get<int64_t>() <= std::numeric_limits<int>::max();
}

bool has_kind(const json& v, Kind kind) {
  const auto all = [&](auto&& each) { return v.is_array() && std::all_of(v.begin(), v.end(), each); };
  switch (kind) {
    case Kind::kBool:
      return v.is_boolean();
    case Kind::kInt:
      return v.is_number_integer();
    case Kind::kNumber:
      return v.is_number();
    case Kind::kString:
      return v.is_string();
    case Kind::kObject:
      return v.is_object();
    case Kind::kObjects:
      return all([](const json& e) { return e.is_object(); });
    case Kind::kStrings:
      return all([](const json& e) { return e.is_string(); });
    case Kind::kInts:
      return all(fits_int);
    case Kind::kSlices:
      return all([](const json& s) {
        return s.is_array() && s.size() == 6 && fits_int(s[0]) && fits_int(s[1]) && fits_int(s[2]) &&
               s[3].is_number() && s[4].is_number() && s[5].is_boolean();
      });
  }
  return false;
}

void check_fields(const json& object, const std::string& path, std::span<const FieldRule> rules) {
  for (const FieldRule& rule : rules) {
    const auto found = object.find(rule.key);
    if (found == object.end()) continue;
    const std::string where = path.empty() ? rule.key : path + "." + rule.key;
    if (!has_kind(*found, rule.kind)) {
      fail(ErrorCode::kFormat, "{}: expected {}, got {}", where, kind_name(rule.kind), found->type_name());
    }
    if (rule.kind == Kind::kObjects) {
      for (size_t i = 0; i < found->size(); ++i) {
        check_fields((*found)[i], fmt::format("{}[{}]", where, i), kElementRules);
      }
    }
  }
}

// Every value the page reads has the type tandem writes, or the error names it: "iterations[3].seconds:
// expected a number, got string" (a hand-edited or foreign file), never a JSON library's exception.
void check_results(const json& results) {
  if (!results.is_object()) fail(ErrorCode::kFormat, "results.json is not a JSON object");
  check_fields(results, "", kTopRules);
  // A collective loop names its scenario and workload; sweeps and training runs describe them.
  const bool loop = results.contains("slices") && results.contains("iterations");
  const Kind described = loop ? Kind::kString : Kind::kObject;
  const FieldRule kind_rules[] = {{"scenario", described}, {"workload", described}};
  check_fields(results, "", kind_rules);
  if (const auto analysis = results.find("analysis"); analysis != results.end() && analysis->is_object()) {
    check_fields(*analysis, "analysis", kAnalysisRules);
  }
}

std::string memory_report_html(const json& memory, std::string_view over_time_csv, const std::string& csv_file) {
  if (!memory.is_object() || !memory.contains("settings") || !memory.at("settings").is_array()) {
    fail(ErrorCode::kFormat, "memory.json has no 'settings' list: was it written by tandem memory --out?");
  }
  const std::vector<MemorySeries> series = read_memory_over_time(over_time_csv, csv_file);
  std::string rows;
  for (const json& setting : memory.at("settings")) {
    if (!setting.is_object()) fail(ErrorCode::kFormat, "memory.json: settings[] must be objects");
    rows += fmt::format(
        "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
        html_escape(text_of(setting, "label")),
        num(number_at(setting, "peak_allocated_bytes", "settings[]") / (1 << 20), 1),
        num(number_at(setting, "peak_reserved_bytes", "settings[]") / (1 << 20), 1),
        num(100 * number_at(setting, "fragmentation_at_peak", "settings[]"), 1),
        num(number_at(setting, "num_device_alloc", "settings[]"), 0),
        num(number_at(setting, "num_ooms", "settings[]"), 0));
  }
  const json consistency = memory.value("consistency", json::object());
  const bool matches = consistency.is_object() && consistency.value("matches", false);
  std::string body =
      "<section><h2>Consistency" +
      verdict_badge(matches, matches ? "OK" : (consistency.value("checked", false) ? "MISMATCH" : "NOT CHECKED")) +
      "</h2><p>" + html_escape(text_of(consistency, "detail")) + "</p></section>\n";
  body +=
      "<section><h2>Settings side by side</h2><table id=\"settings\"><tr><th>setting</th><th class=\"num\">peak "
      "allocated (MiB)</th><th class=\"num\">peak reserved (MiB)</th><th class=\"num\">fragmentation at peak (%)"
      "</th><th class=\"num\">cudaMalloc + maps</th><th class=\"num\">OOMs</th></tr>\n" +
      rows + "</table></section>\n";
  body += memory_plot(series);
  return page("tandem report: memory snapshot", "PyTorch's caching allocator replayed (docs/memory.md)", body);
}

// ---- replay (tandem replay DUMPS_DIR --out DIR) -----------------------------------------------------

namespace {

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

struct ReplayPageOp {
  std::string label, group_desc, profiling_name, state, detail, algorithm;
  int64_t sequence = 0, bytes = 0;
  bool p2p = false;
  std::vector<int> ranks, waiting, missing;
  double start_us = 0, end_us = 0, predicted_us = 0;
  std::optional<double> recorded_us;
  double watchdog_fires_us = 0;  // blocked ops: the latest end of its waiting ranks' slices
};

struct ReplayPageSlice {
  int rank = 0;
  size_t op = 0;
  double start_us = 0, end_us = 0;
};

struct ReplayPageRecovery {
  std::string action, outcome, detail;
  int attempts = 0;
  double watchdog_s = 0, detected_us = 0, end_us = 0, rerun_us = 0;
  std::vector<int> dropped_ranks;
};

// The fields of replay.json as app/replay/replay.cc's to_json writes them, each with its type:
// missing, unknown or mistyped ones are errors naming the field (docs/report.md).
enum class ReplayKind { kInt, kInt64, kNumber, kString, kBool, kInts, kIntOrNull, kNumberOrNull, kObject, kList };

struct ReplayField {
  const char* key;
  ReplayKind kind;
};

constexpr ReplayField kReplayTop[] = {
    {"kind", ReplayKind::kString},
    {"format_version", ReplayKind::kInt},
    {"ranks", ReplayKind::kInt},
    {"groups", ReplayKind::kInt},
    {"entries", ReplayKind::kInt64},
    {"version", ReplayKind::kString},
    {"comm_lib_version", ReplayKind::kString},
    {"cluster", ReplayKind::kString},
    {"verdict", ReplayKind::kString},
    {"culprit_ranks", ReplayKind::kInts},
    {"first_divergence", ReplayKind::kIntOrNull},
    {"end_us", ReplayKind::kNumber},
    {"predicted_comm_us", ReplayKind::kNumber},
    {"recorded_comm_us", ReplayKind::kNumber},
    {"ops_with_recorded", ReplayKind::kInt},
    {"ops", ReplayKind::kList},
    {"slices", ReplayKind::kList},
    {"recoveries", ReplayKind::kList},
    {"analysis", ReplayKind::kObject},
};
constexpr ReplayField kReplayOp[] = {
    {"group", ReplayKind::kString},
    {"label", ReplayKind::kString},
    {"group_desc", ReplayKind::kString},
    {"p2p", ReplayKind::kBool},
    {"sequence", ReplayKind::kInt64},
    {"profiling_name", ReplayKind::kString},
    {"dtype", ReplayKind::kString},
    {"bytes", ReplayKind::kInt64},
    {"ranks", ReplayKind::kInts},
    {"joined", ReplayKind::kInt64},
    {"state", ReplayKind::kString},
    {"simulated", ReplayKind::kBool},
    {"note", ReplayKind::kString},
    {"predicted_us", ReplayKind::kNumber},
    {"recorded_us", ReplayKind::kNumberOrNull},
    {"algorithm", ReplayKind::kString},
    {"busbw_GBps", ReplayKind::kNumber},
    {"start_us", ReplayKind::kNumber},
    {"end_us", ReplayKind::kNumber},
    {"waiting", ReplayKind::kInts},
    {"missing", ReplayKind::kInts},
    {"detail", ReplayKind::kString},
};
constexpr ReplayField kReplayRecovery[] = {
    {"action", ReplayKind::kString},      {"outcome", ReplayKind::kString},     {"attempts", ReplayKind::kInt},
    {"watchdog_s", ReplayKind::kNumber},  {"detected_us", ReplayKind::kNumber}, {"end_us", ReplayKind::kNumber},
    {"dropped_ranks", ReplayKind::kInts}, {"rerun_us", ReplayKind::kNumber},    {"detail", ReplayKind::kString},
};
// The flight-recorder analysis is `tandem fr analyze --json`'s format (core/fr_analysis.h): the
// page reads these two of it.
constexpr ReplayField kReplayAnalysis[] = {{"verdict", ReplayKind::kString}, {"culprit_ranks", ReplayKind::kInts}};

const char* replay_kind_name(ReplayKind kind) {
  switch (kind) {
    case ReplayKind::kInt:
    case ReplayKind::kInt64:
      return "an integer";
    case ReplayKind::kNumber:
      return "a number";
    case ReplayKind::kString:
      return "a string";
    case ReplayKind::kBool:
      return "true or false";
    case ReplayKind::kInts:
      return "a list of integers";
    case ReplayKind::kIntOrNull:
      return "an integer or null";
    case ReplayKind::kNumberOrNull:
      return "a number or null";
    case ReplayKind::kObject:
      return "an object";
    case ReplayKind::kList:
      return "a list";
  }
  return "?";
}

bool replay_has_kind(const json& v, ReplayKind kind) {
  switch (kind) {
    case ReplayKind::kInt:
      return fits_int(v);
    case ReplayKind::kInt64:
      return v.is_number_integer();
    case ReplayKind::kNumber:
      return v.is_number();
    case ReplayKind::kString:
      return v.is_string();
    case ReplayKind::kBool:
      return v.is_boolean();
    case ReplayKind::kInts:
      return v.is_array() && std::all_of(v.begin(), v.end(), fits_int);
    case ReplayKind::kIntOrNull:
      return v.is_null() || fits_int(v);
    case ReplayKind::kNumberOrNull:
      return v.is_null() || v.is_number();
    case ReplayKind::kObject:
      return v.is_object();
    case ReplayKind::kList:
      return v.is_array();
  }
  return false;
}

// `exact`: a key outside `fields` is an error too (replay.json's own objects; not the analysis,
// whose other fields belong to fr analyze's format).
void check_replay_fields(const json& object, const std::string& where, std::span<const ReplayField> fields,
                         bool exact) {
  if (!object.is_object()) fail(ErrorCode::kFormat, "{}: expected an object, got {}", where, object.type_name());
  for (const ReplayField& field : fields) {
    const std::string path = where.empty() ? field.key : where + "." + field.key;
    const auto found = object.find(field.key);
    if (found == object.end()) fail(ErrorCode::kFormat, "{}: missing", path);
    if (!replay_has_kind(*found, field.kind)) {
      fail(ErrorCode::kFormat, "{}: expected {}, got {}", path, replay_kind_name(field.kind), found->type_name());
    }
  }
  if (!exact) return;
  for (const auto& item : object.items()) {
    // Not a structured binding: clang 14 (bench/fuzz.sh's compiler) cannot capture one in a lambda.
    const std::string& key = item.key();
    const bool known =
        std::any_of(fields.begin(), fields.end(), [&](const ReplayField& field) { return key == field.key; });
    if (!known) fail(ErrorCode::kFormat, "{}: unknown field '{}'", where.empty() ? "(top level)" : where, key);
  }
}

std::vector<int> ints_of(const json& list) { return list.get<std::vector<int>>(); }

// The waiting ranks' slices end when the watchdog fires: the page draws a blocked op up to there.
struct ReplayPageData {
  std::vector<ReplayPageOp> ops;
  std::vector<ReplayPageSlice> slices;
  std::vector<ReplayPageRecovery> recoveries;
  std::optional<size_t> first_divergence;
};

ReplayPageData read_replay_page_data(const json& replay) {
  check_replay_fields(replay, "", kReplayTop, true);
  if (replay.at("kind") != "replay") {
    fail(ErrorCode::kFormat, "kind: expected \"replay\", got \"{}\"", replay.at("kind").get<std::string>());
  }
  if (replay.at("format_version") != kReplayFormatVersion) {
    fail(ErrorCode::kFormat, "format_version {} is not supported (this tandem reads version {})",
         replay.at("format_version").get<int>(), kReplayFormatVersion);
  }
  check_replay_fields(replay.at("analysis"), "analysis", kReplayAnalysis, false);
  ReplayPageData data;
  const json& ops = replay.at("ops");
  for (size_t i = 0; i < ops.size(); ++i) {
    const json& o = ops[i];
    check_replay_fields(o, fmt::format("ops[{}]", i), kReplayOp, true);
    ReplayPageOp op;
    op.label = o.at("label").get<std::string>();
    op.group_desc = o.at("group_desc").get<std::string>();
    op.profiling_name = o.at("profiling_name").get<std::string>();
    op.state = o.at("state").get<std::string>();
    op.detail = o.at("detail").get<std::string>();
    op.algorithm = o.at("algorithm").get<std::string>();
    op.sequence = o.at("sequence").get<int64_t>();
    op.bytes = o.at("bytes").get<int64_t>();
    op.p2p = o.at("p2p").get<bool>();
    op.ranks = ints_of(o.at("ranks"));
    op.waiting = ints_of(o.at("waiting"));
    op.missing = ints_of(o.at("missing"));
    op.start_us = o.at("start_us").get<double>();
    op.end_us = o.at("end_us").get<double>();
    op.predicted_us = o.at("predicted_us").get<double>();
    if (!o.at("recorded_us").is_null()) op.recorded_us = o.at("recorded_us").get<double>();
    data.ops.push_back(std::move(op));
  }
  const json& slices = replay.at("slices");
  for (size_t i = 0; i < slices.size(); ++i) {
    const json& s = slices[i];
    if (!s.is_array() || s.size() != 4 || !fits_int(s[0]) || !s[1].is_number_unsigned() || !s[2].is_number() ||
        !s[3].is_number()) {
      fail(ErrorCode::kFormat, "slices[{}]: expected [rank, op index, start_us, end_us], got {}", i,
           s.dump().substr(0, 80));
    }
    ReplayPageSlice slice{s[0].get<int>(), s[1].get<size_t>(), s[2].get<double>(), s[3].get<double>()};
    if (slice.op >= data.ops.size()) {
      fail(ErrorCode::kFormat, "slices[{}]: op {} is not in ops (it has {})", i, slice.op, data.ops.size());
    }
    ReplayPageOp& op = data.ops[slice.op];
    if (op.state != "completed") op.watchdog_fires_us = std::max(op.watchdog_fires_us, slice.end_us);
    data.slices.push_back(slice);
  }
  const json& recoveries = replay.at("recoveries");
  for (size_t i = 0; i < recoveries.size(); ++i) {
    const json& r = recoveries[i];
    check_replay_fields(r, fmt::format("recoveries[{}]", i), kReplayRecovery, true);
    data.recoveries.push_back(
        {r.at("action").get<std::string>(), r.at("outcome").get<std::string>(), r.at("detail").get<std::string>(),
         r.at("attempts").get<int>(), r.at("watchdog_s").get<double>(), r.at("detected_us").get<double>(),
         r.at("end_us").get<double>(), r.at("rerun_us").get<double>(), ints_of(r.at("dropped_ranks"))});
  }
  if (!replay.at("first_divergence").is_null()) {
    const int64_t first = replay.at("first_divergence").get<int64_t>();
    if (first < 0 || static_cast<size_t>(first) >= data.ops.size()) {
      fail(ErrorCode::kFormat, "first_divergence: op {} is not in ops (it has {})", first, data.ops.size());
    }
    data.first_divergence = static_cast<size_t>(first);
  }
  return data;
}

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

std::string replay_timeline(const ReplayPageData& data, int ranks, const std::vector<int>& culprits) {
  // Groups, in the order their first op appears; those with a blocked op are always drawn.
  std::vector<std::string> groups;
  std::map<std::string, std::vector<size_t>> ops_of;
  std::set<std::string> blocked_groups;
  std::map<std::string, std::string> desc_of;
  for (size_t i = 0; i < data.ops.size(); ++i) {
    const ReplayPageOp& op = data.ops[i];
    if (!ops_of.contains(op.label)) groups.push_back(op.label);
    ops_of[op.label].push_back(i);
    desc_of.emplace(op.label, op.group_desc);
    if (op.state != "completed" && op.state != "not_reached") blocked_groups.insert(op.label);
  }
  std::vector<std::string> drawn;
  for (const std::string& g : groups) {
    if (drawn.size() < kMaxReplayGroupRows && blocked_groups.contains(g)) drawn.push_back(g);
  }
  for (const std::string& g : groups) {
    if (drawn.size() >= kMaxReplayGroupRows) break;
    if (!blocked_groups.contains(g)) drawn.push_back(g);
  }
  std::stable_sort(drawn.begin(), drawn.end(), [&](const std::string& a, const std::string& b) {
    return std::find(groups.begin(), groups.end(), a) < std::find(groups.begin(), groups.end(), b);
  });
  const bool rank_rows = ranks <= kMaxReplayRankRows;
  std::set<int> missing, waiting;
  if (data.first_divergence) {
    for (const ReplayPageOp& op : data.ops) {
      if (op.state == "completed" || op.state == "not_reached") continue;
      missing.insert(op.missing.begin(), op.missing.end());
      waiting.insert(op.waiting.begin(), op.waiting.end());
    }
  }

  const int width = 1120, left = 150, right = 24, top = 8, group_row = 20, rank_row = ranks > 32 ? 10 : 16;
  const int group_rows_h = static_cast<int>(drawn.size()) * group_row;
  const int ranks_top = top + group_rows_h + (rank_rows ? 10 : 0);
  const int bottom = ranks_top + (rank_rows ? ranks * rank_row : 0);
  const int height = bottom + 8 + static_cast<int>(data.recoveries.size()) * kPolicyRow + 6 + 28;
  const ReplayAxis axis = replay_axis(data, left, width - left - right);
  std::string svg = svg_open("replay-timeline", width, height);

  auto op_title = [&](const ReplayPageOp& op) {
    std::string title =
        fmt::format("group {} #{}{}: {}", op.label, op.p2p ? "p2p " : "", op.sequence, op.profiling_name);
    if (op.bytes > 0) title += ", " + compact_size_text(op.bytes);
    title += fmt::format(" ({}) at {}", op.state, replay_time_text(op.start_us));
    if (op.state == "completed") {
      title += fmt::format(", predicted {} us", num(op.predicted_us));
      if (op.recorded_us) title += fmt::format(", recorded {} us", num(*op.recorded_us));
    } else if (!op.detail.empty()) {
      title += ": " + op.detail;
    }
    return html_escape(title);
  };

  // Group rows: the completed ops as bars; a blocked op from its last arrival to the watchdog.
  for (size_t g = 0; g < drawn.size(); ++g) {
    const std::string& label = drawn[g];
    const int y = top + static_cast<int>(g) * group_row;
    const bool blocked = blocked_groups.contains(label);
    svg += fmt::format("<g class=\"group-row{}\" data-group=\"{}\">", blocked ? " blocked" : "", html_escape(label));
    if (g % 2 == 1) {
      svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.0f}\" height=\"{}\" fill=\"#f2f4f7\"/>", left, y,
                         axis.plot, group_row);
    }
    const std::string desc = desc_of[label].empty() ? "" : " (" + desc_of[label] + ")";
    svg += fmt::format("<text x=\"4\" y=\"{}\"{}>group {}</text>", y + group_row - 6,
                       blocked ? " style=\"font-weight:700\"" : "", html_escape((label + desc).substr(0, 22)));
    for (size_t i : ops_of[label]) {
      const ReplayPageOp& op = data.ops[i];
      if (op.state == "not_reached") continue;
      if (op.state == "completed") {
        svg += fmt::format(
            "<rect class=\"op completed\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" "
            "stroke=\"#fff\" stroke-width=\"0.5\">"
            "<title>{}</title></rect>",
            axis.x(op.start_us), y + 3, std::max(1.0, axis.x(op.end_us) - axis.x(op.start_us)), group_row - 6,
            kCompleted, op_title(op));
        continue;
      }
      const double x0 = axis.x(op.start_us), x1 = std::max(x0 + 2, axis.x(std::max(op.watchdog_fires_us, op.start_us)));
      svg += fmt::format(
          "<g class=\"op blocked\" data-state=\"{0}\"><rect x=\"{1:.2f}\" y=\"{2}\" width=\"{3:.2f}\" height=\"{4}\" "
          "fill=\"{5}\" opacity=\"0.85\"/><polygon points=\"{6:.2f},{7} {8:.2f},{7} {1:.2f},{9}\" fill=\"{5}\"/>"
          "<title>{10}</title></g>",
          html_escape(op.state), x0, y + 3, x1 - x0, group_row - 6, kFailed, x0 - 5, y - 2, x0 + 5, y + 5,
          op_title(op));
      if (x1 - x0 > 140) {
        svg += fmt::format("<text x=\"{:.2f}\" y=\"{}\" style=\"fill:#fff;font-weight:600\">{} #{} {}</text>",
                           std::max(x0 + 6, axis.broken ? axis.late_x0() + 4 : x0 + 6), y + group_row - 6,
                           html_escape(op.state), op.sequence, html_escape(std::string(fr_op_type(op.profiling_name))));
      }
    }
    svg += "</g>\n";
  }

  // Rank rows: each rank's part in each op; the culprits tinted, the missing ranks' absence outlined.
  if (rank_rows) {
    std::map<int, std::vector<const ReplayPageSlice*>> by_rank;
    for (const ReplayPageSlice& s : data.slices) by_rank[s.rank].push_back(&s);
    svg += fmt::format("<line x1=\"0\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"#c9d1dc\"/>\n", ranks_top - 5, width);
    for (int r = 0; r < ranks; ++r) {
      const bool culprit = std::find(culprits.begin(), culprits.end(), r) != culprits.end();
      const bool absent = missing.contains(r);
      const int y = ranks_top + r * rank_row;
      svg += fmt::format("<g class=\"rank-row{}{}{}\" data-rank=\"{}\">", culprit ? " culprit" : "",
                         absent ? " missing" : "", waiting.contains(r) ? " waiting" : "", r);
      if (culprit) {
        svg += fmt::format("<rect x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" opacity=\"0.14\"/>", y, width,
                           rank_row, kFault);
      } else if (r % 2 == 1) {
        svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.0f}\" height=\"{}\" fill=\"#f2f4f7\"/>", left, y,
                           axis.plot, rank_row);
      }
      // A missing rank that waits in another blocked op did arrive somewhere: only its outline says so.
      const bool never_arrived = absent && !waiting.contains(r);
      if (ranks <= 32 || r % 8 == 0 || culprit || never_arrived) {
        svg += fmt::format("<text x=\"4\" y=\"{}\"{}>rank {}{}</text>", y + rank_row - 2,
                           culprit || never_arrived ? " style=\"fill:#d62728;font-weight:700\"" : "", r,
                           culprit         ? " (culprit)"
                           : never_arrived ? " (never arrived)"
                                           : "");
      }
      for (const ReplayPageSlice* s : by_rank[r]) {
        const ReplayPageOp& op = data.ops[s->op];
        const bool ok = op.state == "completed";
        svg += fmt::format(
            "<rect class=\"slice {}\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"{}><title>rank "
            "{}: {} us in {}</title></rect>",
            ok ? "completed" : "waiting", axis.x(s->start_us), y + 1,
            std::max(0.8, axis.x(s->end_us) - axis.x(s->start_us)), rank_row - 2, ok ? kCompleted : kFailed,
            ok ? "" : " opacity=\"0.85\"", r, num(s->end_us - s->start_us), op_title(op));
      }
      // A missing rank: an outline where the others wait for it.
      for (const ReplayPageOp& op : data.ops) {
        if (op.state != "stuck" || std::find(op.missing.begin(), op.missing.end(), r) == op.missing.end()) continue;
        const double x0 = axis.x(op.start_us), x1 = std::max(x0 + 2, axis.x(op.watchdog_fires_us));
        svg += fmt::format(
            "<rect class=\"absent\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"none\" stroke=\"{}\" "
            "stroke-dasharray=\"4 3\"><title>rank {} never reached {}</title></rect>",
            x0, y + 1, x1 - x0, rank_row - 2, kFault, r, op_title(op));
      }
      svg += "</g>\n";
    }
  }

  // The first divergence, the watchdog and each policy's end, over every row.
  if (data.first_divergence) {
    const ReplayPageOp& first = data.ops[*data.first_divergence];
    svg += fmt::format(
        "<g class=\"divergence-marker\"><line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"{3}\" "
        "stroke-width=\"2\" stroke-dasharray=\"4 3\"/><title>the ranks stop agreeing: {4}</title></g>\n",
        axis.x(first.start_us), top, bottom, kFault, html_escape(first.detail));
  }
  std::set<double> watchdogs;
  for (const ReplayPageRecovery& r : data.recoveries) watchdogs.insert(r.detected_us);
  for (double at : watchdogs) {
    svg += fmt::format(
        "<g class=\"watchdog-marker\"><line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"#1d2430\" "
        "stroke-width=\"1.5\"/><title>the watchdog fires at {3}</title></g>\n",
        axis.x(at), top, bottom, replay_time_text(at));
  }
  // Each policy on its own line under the rows: from the watchdog firing to where it ends.
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

  // The axis: ticks on each segment, and the break drawn over the rows it cuts.
  const int axis_y = bottom + 8 + static_cast<int>(data.recoveries.size()) * kPolicyRow + 6;
  svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{:.2f}\" y2=\"{}\" stroke=\"#8a94a3\"/>\n", left, axis_y,
                     left + axis.early_width(), axis_y);
  auto tick = [&](double us, const char* anchor) {
    svg += fmt::format(
        "<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"#8a94a3\"/>"
        "<text x=\"{0:.2f}\" y=\"{3}\" text-anchor=\"{4}\">{5}</text>\n",
        axis.x(us), axis_y, axis_y + 5, axis_y + 18, anchor, replay_time_text(us));
  };
  const double early_last = axis.broken ? axis.early_end / 1.04 : axis.early_end;
  for (int i = 0; i <= 4; ++i) tick(early_last * i / 4, i == 0 ? "start" : "middle");
  if (axis.broken) {
    const double x0 = left + axis.early_width();
    svg +=
        fmt::format("<line class=\"late-axis\" x1=\"{:.2f}\" y1=\"{}\" x2=\"{:.2f}\" y2=\"{}\" stroke=\"#8a94a3\"/>\n",
                    axis.late_x0(), axis_y, axis.x(axis.late_hi), axis_y);
    svg += fmt::format(
        "<g class=\"axis-break\"><rect x=\"{0:.2f}\" y=\"{1}\" width=\"{2:.2f}\" height=\"{3}\" fill=\"#fff\" "
        "opacity=\"0.9\"/><path d=\"M{4:.2f},{5} l8,-10 M{6:.2f},{5} l8,-10\" stroke=\"#1d2430\" stroke-width=\"1.5\"/>"
        "<text x=\"{7:.2f}\" y=\"{8}\" text-anchor=\"middle\">...</text><title>the time axis is broken: {9} to {10} "
        "left out</title></g>\n",
        x0 + 6, top, ReplayAxis::kGap - 12, bottom - top, x0 + 4, axis_y + 5, x0 + ReplayAxis::kGap - 12,
        x0 + ReplayAxis::kGap / 2, axis_y + 18, replay_time_text(early_last), replay_time_text(axis.late_lo));
    std::set<double> late_ticks(watchdogs.begin(), watchdogs.end());
    for (const ReplayPageRecovery& r : data.recoveries) late_ticks.insert(r.end_us);
    double shown = -1e300;
    for (double us : late_ticks) {
      if (axis.x(us) - shown < 70) continue;  // labels closer than that would overlap
      tick(us, "middle");
      shown = axis.x(us);
    }
  }
  svg += "</svg>\n";
  std::string legend = fmt::format(
      "<p class=\"legend\"><span><i class=\"swatch\" style=\"background:{}\"></i>completed op</span>"
      "<span><i class=\"swatch\" style=\"background:{}\"></i>stuck / desync / stalled: the ranks in it wait until "
      "the watchdog fires</span><span><i class=\"swatch\" style=\"border:1px dashed {};width:10px;height:10px\">"
      "</i>a rank that never reached the op</span><span>black line: the watchdog fires; below the rows, each policy "
      "from there to where it ends"
      "</span></p>",
      kCompleted, kFailed, kFault);
  if (axis.broken) {
    legend += fmt::format(
        "<p>The time axis is broken between {} and {}: the watchdog's wait would squeeze every op before it into a "
        "sliver of a linear axis.</p>",
        replay_time_text(axis.early_end / 1.04), replay_time_text(axis.late_lo));
  }
  if (drawn.size() < groups.size()) {
    legend += fmt::format("<p>{} of {} groups drawn (those with a blocked op first); every op is in replay.csv.</p>",
                          drawn.size(), groups.size());
  }
  if (!rank_rows) {
    legend += fmt::format(
        "<p>{} ranks: one row per group; the waiting and missing ranks are listed under Blocked ops.</p>", ranks);
  }
  return "<section><h2>Timeline on the replayed clock</h2>" + legend + svg + "</section>\n";
}

std::string replay_page(const json& replay) {
  const ReplayPageData data = read_replay_page_data(replay);
  const std::vector<int> culprits = ints_of(replay.at("culprit_ranks"));
  const json& analysis = replay.at("analysis");
  const std::vector<int> fr_culprits = ints_of(analysis.at("culprit_ranks"));
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
  body += "</dl></section>\n";

  body += replay_timeline(data, ranks, culprits);

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
  if (!blocked.empty()) {
    body +=
        "<section><h2>Blocked ops</h2><table id=\"blocked\"><tr><th>state</th><th>group</th><th class=\"num\">seq"
        "</th><th>op</th><th class=\"num\">size</th><th>waiting ranks</th><th>missing ranks</th><th class=\"num\">"
        "last arrival</th><th>detail</th></tr>\n" +
        blocked + "</table></section>\n";
  }

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
  if (!policies.empty()) {
    body +=
        "<section><h2>Recovery policies side by side</h2><table id=\"recoveries\"><tr><th>policy</th><th>outcome"
        "</th><th class=\"num\">attempts</th><th class=\"num\">watchdog (s)</th><th class=\"num\">watchdog fires"
        "</th><th class=\"num\">ends</th><th class=\"num\">after the watchdog</th><th>dropped ranks</th><th "
        "class=\"num\">re-run (us)</th><th>detail</th>"
        "</tr>\n" +
        policies + "</table></section>\n";
  }
  return page(fmt::format("tandem report: replay of {} dumps", ranks), replay.at("verdict").get<std::string>(), body,
              "replay.json");
}

}  // namespace

std::string replay_report_html(const json& replay) { return replay_page(replay); }

// ---- calibration (tandem calibrate --out DIR) ---------------------------------------------------

// Measured time against size per collective, with the default and the calibrated prediction: the
// measurement as dots, the default dashed, the calibration solid; then every row and parameter.
std::string calibration_page(const json& results) {
  const json& rows = need(results, "rows", "calibration");
  const json& parameters = need(results, "parameters", "calibration");
  std::string body = fmt::format(
      "<section><h2>Fit</h2><dl><dt>cluster</dt><dd>{}</dd><dt>rows</dt><dd>{}</dd><dt>rms log error</dt>"
      "<dd>{:.2f}% with the defaults, {:.2f}% calibrated (fitted rows)</dd></dl></section>\n",
      html_escape(text_of(results, "cluster")), rows.size(), results.value("rms_log_error_before", 0.0) * 100,
      results.value("rms_log_error_after", 0.0) * 100);
  double xmin = 1e300, xmax = 0, ymin = 1e300, ymax = 0;
  std::map<std::string, std::vector<const json*>> by_collective;
  for (const json& r : rows) {
    by_collective[text_of(r, "collective")].push_back(&r);
    xmin = std::min(xmin, r.value("size_bytes", 1.0));
    xmax = std::max(xmax, r.value("size_bytes", 1.0));
    for (const char* key : {"measured_us", "default_us", "calibrated_us"}) {
      ymin = std::min(ymin, r.value(key, 1.0));
      ymax = std::max(ymax, r.value(key, 1.0));
    }
  }
  if (!rows.empty() && xmax > 0 && ymax > 0) {
    const int width = 1120, height = 340, left = 70, bottom = 300, plot_w = 1000, plot_h = 270;
    const double lx0 = std::log2(std::max(1.0, xmin)), lx1 = std::max(lx0 + 1, std::log2(std::max(1.0, xmax)));
    const double ly0 = std::log10(std::max(1e-3, ymin)), ly1 = std::max(ly0 + 0.1, std::log10(ymax));
    auto px = [&](double size) { return left + (std::log2(std::max(1.0, size)) - lx0) / (lx1 - lx0) * plot_w; };
    auto py = [&](double us) { return bottom - (std::log10(std::max(1e-3, us)) - ly0) / (ly1 - ly0) * plot_h; };
    std::string svg = svg_open("calibration", width, height);
    std::string legend;
    size_t i = 0;
    for (const auto& [collective, list] : by_collective) {
      const char* colour = kPalette[i++ % std::size(kPalette)];
      std::vector<const json*> sorted = list;
      std::sort(sorted.begin(), sorted.end(),
                [](const json* a, const json* b) { return a->value("size_bytes", 0.0) < b->value("size_bytes", 0.0); });
      std::string default_path, calibrated_path;
      for (const json* r : sorted) {
        const double x = px(r->value("size_bytes", 1.0));
        default_path += fmt::format("{:.1f},{:.1f} ", x, py(r->value("default_us", 1.0)));
        calibrated_path += fmt::format("{:.1f},{:.1f} ", x, py(r->value("calibrated_us", 1.0)));
        svg += fmt::format(
            "<circle class=\"measured\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"><title>{}: "
            "measured {} us</title></circle>\n",
            x, py(r->value("measured_us", 1.0)), colour, html_escape(text_of(*r, "label")),
            num(r->value("measured_us", 0.0)));
      }
      svg += fmt::format(
          "<polyline class=\"series default\" points=\"{}\" fill=\"none\" stroke=\"{}\" "
          "stroke-width=\"1.5\" stroke-dasharray=\"6 4\"><title>{} default</title></polyline>\n",
          default_path, colour, html_escape(collective));
      svg += fmt::format(
          "<polyline class=\"series calibrated\" points=\"{}\" fill=\"none\" stroke=\"{}\" "
          "stroke-width=\"2\"><title>{} calibrated</title></polyline>\n",
          calibrated_path, colour, html_escape(collective));
      legend += fmt::format("<span><i class=\"swatch\" style=\"background:{}\"></i>{}</span>", colour,
                            html_escape(collective));
    }
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#8a94a3\"/><text x=\"{3}\" "
        "y=\"{4}\" text-anchor=\"end\">size (bytes, log scale) {5} .. {6}</text><text x=\"4\" "
        "y=\"24\">{7} us</text><text x=\"4\" y=\"{1}\">{8} us</text></svg>\n",
        left, bottom, left + plot_w, left + plot_w, bottom + 24, num(xmin, 0), num(xmax, 0), num(ymax), num(ymin));
    body +=
        "<section><h2>Time against size: measured (dots), default prediction (dashed), calibrated (solid)</h2>"
        "<p class=\"legend\">" +
        legend + "</p>" + svg + "</section>\n";
  }
  std::string table;
  for (const json& r : rows) {
    const double measured = r.value("measured_us", 0.0);
    auto error = [&](const char* key) {
      return measured > 0 ? fmt::format("{:+.1f}%", (r.value(key, 0.0) / measured - 1) * 100) : std::string("-");
    };
    table += fmt::format(
        "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td>{}</td></tr>\n",
        html_escape(text_of(r, "label")), html_escape(text_of(r, "collective")), r.value("size_bytes", int64_t{0}),
        num(measured), num(r.value("default_us", 0.0)), num(r.value("calibrated_us", 0.0)), error("default_us"),
        error("calibrated_us"), r.value("held_out", false) ? "held out" : "fitted");
  }
  body +=
      "<section><h2>Rows</h2><table id=\"rows\"><tr><th>row</th><th>collective</th><th class=\"num\">size (B)"
      "</th><th class=\"num\">measured (us)</th><th class=\"num\">default (us)</th><th class=\"num\">"
      "calibrated (us)</th><th class=\"num\">error default</th><th class=\"num\">error calibrated</th>"
      "<th>use</th></tr>\n" +
      table + "</table></section>\n";
  std::string params;
  for (const json& p : parameters) {
    const bool informed = p.value("informed", false);
    params += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
                          html_escape(text_of(p, "name")), num(p.value("default", 0.0), 4),
                          informed ? num(p.value("value", 0.0), 4) : std::string("-"),
                          informed ? "fitted" : "not informed by these logs");
  }
  body +=
      "<section><h2>Parameters</h2><table id=\"parameters\"><tr><th>parameter</th><th class=\"num\">default"
      "</th><th class=\"num\">fitted</th><th></th></tr>\n" +
      params + "</table></section>\n";
  return page("tandem calibrate: " + text_of(results, "preset"), "measured logs against the simulator", body);
}

namespace {

// --compare sets two runs of one experiment side by side (a prediction and a measurement, two
// backends): the same kind of workload, and something in common to compare. Runs of different
// experiments are refused, naming the difference, rather than drawn over each other.
void check_comparable(const json& results, const json& other) {
  auto kind = [](const json& run) {
    if (run.contains("slices") && run.contains("iterations")) return "collective loop";
    if (run.contains("points")) return "collective sweep";
    return "run of another kind";
  };
  const std::string mine = kind(results), theirs = kind(other);
  if (mine == "run of another kind") {
    fail(ErrorCode::kFormat, "--compare is for collective loops and sweeps, not a training run");
  }
  if (mine != theirs) fail(ErrorCode::kFormat, "--compare: this run is a {} and the other a {}", mine, theirs);
  if (mine == "collective loop") {
    const std::string a = text_of(results, "workload"), b = text_of(other, "workload");
    if (a != b) fail(ErrorCode::kFormat, "--compare: the runs loop different collectives ('{}' and '{}')", a, b);
    if (results.value("ranks", 0) != other.value("ranks", 0)) {
      fail(ErrorCode::kFormat, "--compare: the runs have {} and {} ranks", results.value("ranks", 0),
           other.value("ranks", 0));
    }
    return;
  }
  std::set<std::pair<std::string, double>> points;
  for (const json& p : results.at("points")) points.insert({text_of(p, "collective"), p.value("size_bytes", 0.0)});
  for (const json& p : other.at("points")) {
    if (points.count({text_of(p, "collective"), p.value("size_bytes", 0.0)})) return;
  }
  fail(ErrorCode::kFormat, "--compare: the sweeps have no (collective, size) point in common");
}

}  // namespace

std::string report_html(const json& results, const std::optional<json>& compare) {
  if (results.is_object() && text_of(results, "kind") == "calibration") {
    if (compare) fail(ErrorCode::kFormat, "a calibration's results.json already holds the measurement: no --compare");
    return calibration_page(results);
  }
  // Start-up and claims runs name their workload's type; the others are told apart by their fields.
  const json workload = results.is_object() ? results.value("workload", json()) : json();
  const std::string type = workload.is_object() ? text_of(workload, "type") : "";
  if (type == "startup" || type == "claims") {
    if (compare) fail(ErrorCode::kFormat, "--compare is for collective loops and sweeps, not a {} run", type);
    if (type == "startup") return startup_page(results);
    return claims_page(results);
  }
  check_results(results);
  if (compare) {
    try {
      check_results(*compare);
    } catch (const Error& error) {
      fail(ErrorCode::kFormat, "the --compare run's {}", error.what());
    }
    check_comparable(results, *compare);
  }
  if (results.contains("slices") && results.contains("iterations")) return loop_page(results, compare);
  if (results.contains("points")) return sweep_page(results, compare);
  if (results.contains("variants")) return training_page(results);
  fail(ErrorCode::kFormat,
       "results.json is of no kind the report knows (a collective loop has 'iterations' and 'slices', a sweep "
       "'points', a training run 'variants', a start-up or claims run its workload's type): was it written by "
       "tandem run --out?");
}

}  // namespace tandem::app
