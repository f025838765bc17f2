#include "app/calibrate/calibration.h"

// The calibration profile (docs/calibrate.md): its YAML, read and written, and how a run applies
// it. The fit that makes one is calibration.cc.

#include <cmath>

#include <fmt/format.h>

#include "app/common/common.h"
#include "app/common/yaml_reader.h"
#include "core/error.h"
#include "core/text.h"

namespace tandem::app {

namespace {

// `text` as one YAML double-quoted scalar, escaped by yaml-cpp's emitter (quotes, backslashes,
// line breaks). Control bytes are written as the text \xNN first (core/text.h): the profile reader
// refuses them in names, and a file name with one is still told apart.
std::string yaml_quoted(std::string_view text) {
  YAML::Emitter emitter;
  emitter.SetOutputCharset(YAML::EmitNonAscii);
  emitter << YAML::DoubleQuoted << printable(text);
  return emitter.c_str();
}

// The `parameters:` mapping: each a known parameter's value, or {default, value, informed, uncertainty}.
std::vector<CalibrationProfile::Parameter> read_parameters(const Reader& reader, const YAML::Node& parameters) {
  if (!parameters.IsMap()) reader.fail_at(parameters, "parameters must be a mapping of parameter names to values");
  const sim::NetworkModel defaults;
  std::vector<CalibrationProfile::Parameter> out;
  for (auto it = parameters.begin(); it != parameters.end(); ++it) {
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    const std::string name = reader.scalar(key, "parameters");
    const sim::NetworkParameter* known = sim::find_network_parameter(name);
    if (known == nullptr) {
      std::string names;
      for (const sim::NetworkParameter& p : sim::network_parameters())
        names += (names.empty() ? "" : ", ") + std::string(p.name);
      reader.fail_at(key, "unknown parameter '{}' in parameters (expected: {})", name, names);
    }
    for (const CalibrationProfile::Parameter& seen : out) {
      if (seen.name == name) reader.fail_at(key, "duplicate parameter '{}'", name);
    }
    CalibrationProfile::Parameter parameter;
    parameter.name = name;
    parameter.default_value = defaults.*(known->field);
    const std::string where = "parameters." + name;
    if (value.IsMap()) {
      const Mapping entry(reader, value, where,
                          std::array<std::string_view, 4>{"default", "value", "informed", "uncertainty"});
      parameter.value = reader.number(entry.require("value"), where + ".value", known->lower, known->upper, false);
      if (const YAML::Node* d = entry.find("default")) {
        parameter.default_value = reader.number(*d, where + ".default", known->lower, known->upper, false);
      }
      if (const YAML::Node* informed = entry.find("informed"))
        parameter.informed = reader.boolean(*informed, where + ".informed");
      if (const YAML::Node* spread = entry.find("uncertainty")) {
        parameter.uncertainty = reader.number(*spread, where + ".uncertainty", 0, 1e9, false);
      }
    } else {
      parameter.value = reader.number(value, where, known->lower, known->upper, false);
    }
    out.push_back(parameter);
  }
  return out;
}

// The `fit:` section: where the values came from and how well they fit.
void read_fit(const Reader& reader, const YAML::Node& fit, CalibrationProfile& profile) {
  const Mapping f(reader, fit, "fit",
                  std::array<std::string_view, 6>{"date", "sources", "rows_fitted", "rows_held_out",
                                                  "rms_log_error_before", "rms_log_error_after"});
  profile.date = reader.scalar(f.require("date"), "fit.date");
  for (const YAML::Node& s : reader.list(f.require("sources"), "fit.sources")) {
    const Mapping source(reader, s, "fit.sources[]", std::array<std::string_view, 2>{"file", "rows"});
    profile.sources.push_back(
        {reader.text(source.require("file"), "fit.sources[].file"),
         static_cast<int>(reader.integer(source.require("rows"), "fit.sources[].rows", 0, 1 << 30))});
  }
  profile.rows_fitted = static_cast<int>(reader.integer(f.require("rows_fitted"), "fit.rows_fitted", 0, 1 << 30));
  profile.rows_held_out = static_cast<int>(reader.integer(f.require("rows_held_out"), "fit.rows_held_out", 0, 1 << 30));
  profile.rms_log_error_before =
      reader.number(f.require("rms_log_error_before"), "fit.rms_log_error_before", 0, 1e9, false);
  profile.rms_log_error_after =
      reader.number(f.require("rms_log_error_after"), "fit.rms_log_error_after", 0, 1e9, false);
}

}  // namespace

std::string profile_yaml(const CalibrationProfile& profile) {
  std::string out;
  out += fmt::format("# tandem calibration profile (docs/calibrate.md). Apply with --calibration FILE or a\n");
  out += fmt::format("# scenario's `calibration:` key.\n");
  out += fmt::format("tandem-calibration: {}\n", kCalibrationProfileVersion);
  out += "cluster:\n";
  out += fmt::format("  preset: {}\n", profile.preset);
  out += fmt::format("  nodes: {}\n", profile.nodes);
  out += fmt::format("  gpus_per_node: {}\n", profile.gpus_per_node);
  if (!profile.description.empty()) out += fmt::format("  description: {}\n", yaml_quoted(profile.description));
  out += "parameters:\n";
  for (const CalibrationProfile::Parameter& p : profile.parameters) {
    std::string extra = p.informed ? "" : ", informed: false";
    if (p.uncertainty > 0 && std::isfinite(p.uncertainty)) extra += fmt::format(", uncertainty: {:.4g}", p.uncertainty);
    out += fmt::format("  {}: {{default: {}, value: {}{}}}\n", p.name, p.default_value, p.value, extra);
  }
  if (!profile.sources.empty()) {
    out += "fit:\n";
    out += fmt::format("  date: {}\n", profile.date);
    out += "  sources:\n";
    for (const CalibrationProfile::Source& s : profile.sources) {
      out += fmt::format("    - {{file: {}, rows: {}}}\n", yaml_quoted(s.file), s.rows);
    }
    out += fmt::format("  rows_fitted: {}\n", profile.rows_fitted);
    out += fmt::format("  rows_held_out: {}\n", profile.rows_held_out);
    out += fmt::format("  rms_log_error_before: {}\n", profile.rms_log_error_before);
    out += fmt::format("  rms_log_error_after: {}\n", profile.rms_log_error_after);
  }
  return out;
}

CalibrationProfile parse_profile(std::string_view text, const std::string& path) {
  const Reader reader(path, "calibration profile");
  const YAML::Node root = load_one_document(reader, text);
  if (!root) fail(ErrorCode::kFormat, "{}: an empty file is not a calibration profile", path);
  const Mapping top(reader, root, "",
                    std::array<std::string_view, 4>{"tandem-calibration", "cluster", "parameters", "fit"});
  CalibrationProfile profile;
  profile.path = path;
  const YAML::Node& version = top.require("tandem-calibration");
  if (reader.scalar(version, "tandem-calibration") != std::to_string(kCalibrationProfileVersion)) {
    reader.fail_at(version, "tandem-calibration {}: this tandem reads version {}", node_kind(version),
                   kCalibrationProfileVersion);
  }
  const Mapping cluster(reader, top.require("cluster"), "cluster",
                        std::array<std::string_view, 4>{"preset", "nodes", "gpus_per_node", "description"});
  profile.preset = reader.scalar(cluster.require("preset"), "cluster.preset");
  reader.at(cluster.require("preset"), "cluster.preset", [&] { return models::cluster_preset(profile.preset); });
  profile.nodes = static_cast<int>(reader.integer(cluster.require("nodes"), "cluster.nodes", 1, 1 << 20));
  profile.gpus_per_node =
      static_cast<int>(reader.integer(cluster.require("gpus_per_node"), "cluster.gpus_per_node", 1, 1024));
  if (const YAML::Node* d = cluster.find("description")) profile.description = reader.text(*d, "cluster.description");

  profile.parameters = read_parameters(reader, top.require("parameters"));
  if (const YAML::Node* fit = top.find("fit")) read_fit(reader, *fit, profile);
  return profile;
}

CalibrationProfile read_profile(const std::string& path) {
  return parse_profile(read_text_file(path, "calibration profile", kMaxProfileBytes), path);
}

sim::NetworkModel apply_profile(const CalibrationProfile& profile, sim::NetworkModel model) {
  // A parameter the logs did not inform is recorded for the reader, not applied: it follows the
  // simulator's default, as it did in the fit.
  for (const CalibrationProfile::Parameter& p : profile.parameters) {
    const sim::NetworkParameter* known = sim::find_network_parameter(p.name);
    if (known != nullptr && p.informed) model.*(known->field) = p.value;
  }
  return model;
}

void check_profile_cluster(const CalibrationProfile& profile, const models::ClusterSpec& cluster) {
  if (profile.preset != cluster.preset) {
    fail(ErrorCode::kInvalidArgument,
         "{}: the profile was fitted on {} and this cluster is {}: its efficiencies describe other links", profile.path,
         profile.preset, cluster.preset);
  }
}

std::string profile_summary(const CalibrationProfile& profile) {
  const std::string file = profile.path.empty() ? std::string("profile") : profile.path;
  if (profile.sources.empty()) return fmt::format("{} (hand-written, {})", file, profile.preset);
  return fmt::format("{} (fitted {} from {} log{}, {})", file, profile.date, profile.sources.size(),
                     profile.sources.size() == 1 ? "" : "s", profile.preset);
}

}  // namespace tandem::app
