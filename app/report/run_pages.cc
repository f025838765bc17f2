// The pages of the results.json of a collective sweep (busbw against size, with --compare the other
// run's dashed, and the points), a training run (the step per layout and its breakdown), a start-up
// run (each lever set's phases per variant) and a claims run (each claim's values, bound and
// verdict): mostly tables.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
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

using nlohmann::json;

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

}  // namespace tandem::app::report
