// The report page (`tandem report RUN_DIR`): one self-contained HTML file, inline CSS and SVG, no
// script and nothing fetched, that an engineer opens from disk or attaches to an incident. It reads
// the results.json that `tandem run --out` writes, of any workload:
//   collective loop (the fault scenarios): the scenario, the outcome, a timeline per rank (SVG)
//     with faults, recovery actions and the culprit rank marked, the per-iteration table;
//   collective sweep: busbw against size per collective (SVG), the points table;
//   training: the per-layout step table and its breakdown;
//   start-up: each lever set's phases per variant; claims: each claim's values, bound and verdict;
// or the folder `tandem memory --out` writes (memory_report_html), or the one `tandem replay --out`
// writes (replay_report_html);
// and, given a second run of the same scenario (`--compare`, e.g. sim next to host), a
// prediction-vs-measurement plot. docs/report.md describes the page.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace tandem::app {

// A results.json `tandem report` reads: a sweep of kMaxScenarioPoints points on kMaxScenarioVariants
// clusters writes tens of MiB; the shipped scenarios' are under 1 MiB.
inline constexpr uint64_t kMaxResultsFileBytes = uint64_t{256} << 20;  // 256 MiB

// `results` is a results.json; `compare` another one (the measurement to `results`' prediction, or
// the other way round), or none. Throws Error(kFormat) for a results.json of no known kind or
// missing what the page needs.
std::string report_html(const nlohmann::json& results, const std::optional<nlohmann::json>& compare);

// The page of a `tandem memory --out` folder: memory.json's settings side by side and the
// consistency check, and memory over the trace (allocated and reserved per setting) from
// memory_over_time.csv (`csv_file` names it in errors). Throws Error(kFormat) naming the file and line.
std::string memory_report_html(const nlohmann::json& memory, std::string_view over_time_csv,
                               const std::string& csv_file);

// The page of a `tandem replay --out` folder's replay.json (an incident): the culprit ranks and
// verdict, the flight-recorder analysis' own, a timeline per group (and per rank up to 64 ranks)
// on the replayed clock with the blocked ops, the waiting and missing ranks and the watchdog
// marked, its time axis broken where the watchdog's wait dwarfs the ops, and the recovery policies
// side by side. An "incident" label, never a PASS / FAIL badge. Throws Error(kFormat) naming the
// field for a replay.json of another kind or version, or with a field missing, unknown or mistyped.
std::string replay_report_html(const nlohmann::json& replay);

// Text as HTML text or attribute: & < > " ' escaped.
std::string html_escape(std::string_view text);

}  // namespace tandem::app
