// The page of a `tandem calibrate --out` folder's results.json: the fit's error before and after,
// measured time against size per collective with the default and the calibrated prediction (the
// measurement as dots, the default dashed, the calibration solid), then every row and parameter.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/report/report_html.h"
#include "app/report/report_page.h"
#include "app/report/report_pages.h"

namespace tandem::app::report {
namespace {

using nlohmann::json;

// The plot's log-log scale: size (bytes) on x, time (us) on y, over the range of the rows.
struct CalibrationScale {
  static constexpr int kWidth = 1120, kHeight = 340, kLeft = 70, kBottom = 300, kPlotW = 1000, kPlotH = 270;
  double xmin = 1e300, xmax = 0, ymin = 1e300, ymax = 0;
  double lx0 = 0, lx1 = 1, ly0 = 0, ly1 = 1;  // log2 of the sizes, log10 of the times

  double px(double size) const { return kLeft + (std::log2(std::max(1.0, size)) - lx0) / (lx1 - lx0) * kPlotW; }
  double py(double us) const { return kBottom - (std::log10(std::max(1e-3, us)) - ly0) / (ly1 - ly0) * kPlotH; }
};

// One collective: its rows' measurements as dots, its default prediction dashed and its calibrated
// one solid, by size.
std::string calibration_series(const std::string& collective, std::vector<const json*> rows, const char* colour,
                               const CalibrationScale& scale) {
  std::sort(rows.begin(), rows.end(),
            [](const json* a, const json* b) { return a->value("size_bytes", 0.0) < b->value("size_bytes", 0.0); });
  std::string svg, default_path, calibrated_path;
  for (const json* r : rows) {
    const double x = scale.px(r->value("size_bytes", 1.0));
    default_path += fmt::format("{:.1f},{:.1f} ", x, scale.py(r->value("default_us", 1.0)));
    calibrated_path += fmt::format("{:.1f},{:.1f} ", x, scale.py(r->value("calibrated_us", 1.0)));
    svg += fmt::format(
        "<circle class=\"measured\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"><title>{}: "
        "measured {} us</title></circle>\n",
        x, scale.py(r->value("measured_us", 1.0)), colour, html_escape(text_of(*r, "label")),
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
  return svg;
}

// Time against size, one colour per collective; "" where the rows give nothing to draw.
std::string calibration_plot(const json& rows) {
  CalibrationScale scale;
  std::map<std::string, std::vector<const json*>> by_collective;
  for (const json& r : rows) {
    by_collective[text_of(r, "collective")].push_back(&r);
    scale.xmin = std::min(scale.xmin, r.value("size_bytes", 1.0));
    scale.xmax = std::max(scale.xmax, r.value("size_bytes", 1.0));
    for (const char* key : {"measured_us", "default_us", "calibrated_us"}) {
      scale.ymin = std::min(scale.ymin, r.value(key, 1.0));
      scale.ymax = std::max(scale.ymax, r.value(key, 1.0));
    }
  }
  const bool drawable = !rows.empty() && scale.xmax > 0 && scale.ymax > 0;
  if (!drawable) return "";
  scale.lx0 = std::log2(std::max(1.0, scale.xmin));
  scale.lx1 = std::max(scale.lx0 + 1, std::log2(std::max(1.0, scale.xmax)));
  scale.ly0 = std::log10(std::max(1e-3, scale.ymin));
  scale.ly1 = std::max(scale.ly0 + 0.1, std::log10(scale.ymax));
  std::string svg = svg_open("calibration", CalibrationScale::kWidth, CalibrationScale::kHeight);
  std::string legend;
  size_t i = 0;
  for (const auto& [collective, list] : by_collective) {
    const char* colour = kPalette[i++ % std::size(kPalette)];
    svg += calibration_series(collective, list, colour, scale);
    legend +=
        fmt::format("<span><i class=\"swatch\" style=\"background:{}\"></i>{}</span>", colour, html_escape(collective));
  }
  const int left = CalibrationScale::kLeft, bottom = CalibrationScale::kBottom, plot_w = CalibrationScale::kPlotW;
  svg += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#8a94a3\"/><text x=\"{3}\" "
      "y=\"{4}\" text-anchor=\"end\">size (bytes, log scale) {5} .. {6}</text><text x=\"4\" "
      "y=\"24\">{7} us</text><text x=\"4\" y=\"{1}\">{8} us</text></svg>\n",
      left, bottom, left + plot_w, left + plot_w, bottom + 24, num(scale.xmin, 0), num(scale.xmax, 0), num(scale.ymax),
      num(scale.ymin));
  return "<section><h2>Time against size: measured (dots), default prediction (dashed), calibrated (solid)</h2>"
         "<p class=\"legend\">" +
         legend + "</p>" + svg + "</section>\n";
}

// Every row: measured, both predictions and their errors, and whether the fit used it.
std::string calibration_rows_table(const json& rows) {
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
  return "<section><h2>Rows</h2><table id=\"rows\"><tr><th>row</th><th>collective</th><th class=\"num\">size (B)"
         "</th><th class=\"num\">measured (us)</th><th class=\"num\">default (us)</th><th class=\"num\">"
         "calibrated (us)</th><th class=\"num\">error default</th><th class=\"num\">error calibrated</th>"
         "<th>use</th></tr>\n" +
         table + "</table></section>\n";
}

// Every parameter: its default and, where these logs inform it, its fitted value.
std::string calibration_parameters_table(const json& parameters) {
  std::string params;
  for (const json& p : parameters) {
    const bool informed = p.value("informed", false);
    params += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
                          html_escape(text_of(p, "name")), num(p.value("default", 0.0), 4),
                          informed ? num(p.value("value", 0.0), 4) : std::string("-"),
                          informed ? "fitted" : "not informed by these logs");
  }
  return "<section><h2>Parameters</h2><table id=\"parameters\"><tr><th>parameter</th><th class=\"num\">default"
         "</th><th class=\"num\">fitted</th><th></th></tr>\n" +
         params + "</table></section>\n";
}

}  // namespace

std::string calibration_page(const json& results) {
  const json& rows = need(results, "rows", "calibration");
  const json& parameters = need(results, "parameters", "calibration");
  std::string body = fmt::format(
      "<section><h2>Fit</h2><dl><dt>cluster</dt><dd>{}</dd><dt>rows</dt><dd>{}</dd><dt>rms log error</dt>"
      "<dd>{:.2f}% with the defaults, {:.2f}% calibrated (fitted rows)</dd></dl></section>\n",
      html_escape(text_of(results, "cluster")), rows.size(), results.value("rms_log_error_before", 0.0) * 100,
      results.value("rms_log_error_after", 0.0) * 100);
  body += calibration_plot(rows);
  body += calibration_rows_table(rows);
  body += calibration_parameters_table(parameters);
  return page("tandem calibrate: " + text_of(results, "preset"), "measured logs against the simulator", body);
}

}  // namespace tandem::app::report
