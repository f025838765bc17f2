// The page of a `tandem memory --out` folder (memory_report_html): memory.json's settings side by
// side with the consistency check, and memory over the trace, allocated and reserved per setting,
// from memory_over_time.csv.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <iterator>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/report/report_html.h"
#include "app/report/report_page.h"
#include "core/error.h"

namespace tandem::app {
namespace report {
namespace {

using nlohmann::json;

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

// memory_report_html's page (report_page.h).
std::string memory_page(const json& memory, std::string_view over_time_csv, const std::string& csv_file) {
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

}  // namespace
}  // namespace report

std::string memory_report_html(const nlohmann::json& memory, std::string_view over_time_csv,
                               const std::string& csv_file) {
  return report::memory_page(memory, over_time_csv, csv_file);
}

}  // namespace tandem::app
