// The pieces every page of `tandem report` shares (app/report/report_page.h): the page frame with
// its inline style, the colours, badges, the expectations table, the opening of an SVG plot, number
// formatting, and reading a field of the JSON a page is written from. Internal to app/report.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tandem::app::report {

// Completed attempts and ops; failed ones; where a fault hit; where recovery acted; the other run of
// a --compare.
inline constexpr const char* kCompleted = "#4c78a8";
inline constexpr const char* kFailed = "#d62728";
inline constexpr const char* kFault = "#d62728";
inline constexpr const char* kRecovery = "#ff7f0e";
inline constexpr const char* kCompare = "#59a14f";
// The colours of a plot's series, in order (Tableau 10's first seven).
inline constexpr const char* kPalette[] = {"#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#9d755d"};

// The whole page: `title` in the tab and the header, `subtitle` under it, `body` (HTML sections) in
// main; `source`: the file the page was written from, for its footer.
std::string page(const std::string& title, const std::string& subtitle, const std::string& body,
                 const std::string& source = "results.json");

// A PASS / FAIL badge with its text escaped.
std::string badge(bool pass, const std::string& label);
// The page's verdict (the test finds it by its id).
std::string verdict_badge(bool pass, const std::string& label);
// The table of results.json's expectations, or "" where it has none.
std::string expectations_section(const nlohmann::json& results);

// A plot's opening <svg> tag, `id` for the tests to find it by.
std::string svg_open(const char* id, int width, int height);

// `v` with `digits` decimals.
std::string num(double v, int digits = 1);

// `j[key]` as text (a string as it is, anything else as JSON), `fallback` where it is absent or null.
std::string text_of(const nlohmann::json& j, const char* key, const std::string& fallback = "");
// `j[key]`, or Error(kFormat) naming `key` and `what` (the kind of results.json) where it is absent.
const nlohmann::json& need(const nlohmann::json& j, const char* key, const char* what);
// A number the page reads where a hand-edited file may hold anything else: Error(kFormat) naming
// `where`.`key` otherwise.
double number_at(const nlohmann::json& j, const char* key, const std::string& where);
// An integer that fits an int.
bool fits_int(const nlohmann::json& v);
// The scenario's name: results.json's scenario.name, or its scenario where that is a string.
std::string scenario_name(const nlohmann::json& results, const char* fallback);

}  // namespace tandem::app::report
