// The pieces every report page shares (report_html.h), and html_escape (report_page.h).
#include "app/report/report_html.h"

#include <cstdint>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/report/report_page.h"
#include "core/error.h"

namespace tandem::app {

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

namespace report {

using nlohmann::json;

namespace {

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

}  // namespace

std::string page(const std::string& title, const std::string& subtitle, const std::string& body,
                 const std::string& source) {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>{}</title>\n<style>{}</style></head>\n"
      "<body>\n<header><h1>{}</h1><p>{}</p></header>\n<main>\n{}</main>\n"
      "<footer>Written by tandem report from {}. Self-contained: no scripts, nothing loaded from the "
      "network.</footer>\n</body></html>\n",
      html_escape(title), kStyle, html_escape(title), html_escape(subtitle), body, html_escape(source));
}

std::string badge(bool pass, const std::string& label) {
  return fmt::format("<span class=\"badge {}\">{}</span>", pass ? "pass" : "fail", html_escape(label));
}

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

std::string svg_open(const char* id, int width, int height) {
  return fmt::format(
      "<svg id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\">\n",
      id, width, height, width, height);
}

std::string num(double v, int digits) { return fmt::format("{:.{}f}", v, digits); }

std::string text_of(const json& j, const char* key, const std::string& fallback) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  return j.at(key).is_string() ? j.at(key).get<std::string>() : j.at(key).dump();
}

const json& need(const json& j, const char* key, const char* what) {
  if (!j.contains(key)) fail(ErrorCode::kFormat, "results.json ({}) has no '{}'", what, key);
  return j.at(key);
}

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

bool fits_int(const json& v) {
  return v.is_number_integer() && v.get<int64_t>() >= std::numeric_limits<int>::min() &&
         v.get<int64_t>() <= std::numeric_limits<int>::max();
}

}  // namespace report
}  // namespace tandem::app
