// Reading replay.json for the replay page (replay_page_data.h): each object's fields checked against
// the table of what replay.cc writes, so that a hand-edited or foreign file gets an error naming the
// field, never a JSON library's exception.
#include "app/report/replay_page_data.h"

#include <algorithm>
#include <span>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/replay/replay.h"
#include "app/report/report_html.h"
#include "core/error.h"

namespace tandem::app::report {
namespace {

using nlohmann::json;

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

}  // namespace

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

}  // namespace tandem::app::report
