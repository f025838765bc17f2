// The page `tandem report RUN_DIR` writes of a results.json (report_html): the run's kind picks the
// page (report_pages.h), after every value the pages read is checked to have the type tandem run
// writes, and a --compare run to be of the same experiment.
#include "app/report/report_page.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/report/report_html.h"
#include "app/report/report_pages.h"
#include "core/error.h"

namespace tandem::app {
namespace report {
namespace {

using nlohmann::json;

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

// The page of `results`, picked by its kind.
std::string results_page(const json& results, const std::optional<json>& compare) {
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

}  // namespace
}  // namespace report

std::string report_html(const nlohmann::json& results, const std::optional<nlohmann::json>& compare) {
  return report::results_page(results, compare);
}

}  // namespace tandem::app
