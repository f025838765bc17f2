// The pages of a results.json that report_html (report_page.cc) picks between by the run's kind,
// one file each or a few to a file. Each throws Error(kFormat) where results.json lacks what it
// needs. Internal to app/report.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tandem::app::report {

// loop_page.cc: a collective loop (the fault scenarios): the outcome, the timeline per rank, the
// per-iteration table and, given `compare`, each iteration against the other run's.
std::string loop_page(const nlohmann::json& results, const std::optional<nlohmann::json>& compare);

// run_pages.cc: a collective sweep (busbw against size, the other run's dashed, and the points); a
// training run's step per layout; a start-up run's phases per lever set; a claims run's verdicts.
std::string sweep_page(const nlohmann::json& results, const std::optional<nlohmann::json>& compare);
std::string training_page(const nlohmann::json& results);
std::string startup_page(const nlohmann::json& results);
std::string claims_page(const nlohmann::json& results);

// calibration_page.cc: a `tandem calibrate --out` results.json: the fit, measured time against size
// with both predictions, every row and parameter.
std::string calibration_page(const nlohmann::json& results);

}  // namespace tandem::app::report
