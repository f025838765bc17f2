// A dump as PyTorch writes it (core/flight_recorder.h's to_pickle and to_json), in PyTorch's key
// order (FlightRecorderDetail.hpp), which pickle keeps and JSON sorts.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/flight_recorder.h"

namespace tandem {
namespace {

// Written in order: pg_config in the order the groups were declared.
using json = nlohmann::ordered_json;
using pickle::Dict;
using pickle::List;
using pickle::Tuple;
using pickle::Value;

std::string ranks_string(const std::vector<int>& ranks) {
  std::string text = "[";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return text + "]";
}

Value sizes_value(const std::vector<std::vector<int64_t>>& sizes) {
  List list;
  for (const auto& shape : sizes) list.emplace_back(List(shape.begin(), shape.end()));
  return list;
}

Value strings_value(const std::vector<std::string>& strings) { return List(strings.begin(), strings.end()); }

Value time_value(const std::optional<int64_t>& time_ns) { return time_ns ? Value(*time_ns) : Value(pickle::None{}); }

Value entry_value(const FrEntry& e) {
  Dict d{{"record_id", e.record_id},
         {"pg_id", e.pg_id},
         {"process_group", Tuple{{e.pg_name, e.pg_desc}}},
         {"collective_seq_id", e.collective_seq_id},
         {"p2p_seq_id", e.p2p_seq_id},
         {"op_id", e.op_id},
         {"profiling_name", e.profiling_name},
         {"time_created_ns", e.time_created_ns},
         {"input_sizes", sizes_value(e.input_sizes)},
         {"input_dtypes", strings_value(e.input_dtypes)},
         {"output_sizes", sizes_value(e.output_sizes)},
         {"output_dtypes", strings_value(e.output_dtypes)},
         {"state", std::string(name(e.state))},
         {"time_discovered_started_ns", time_value(e.time_discovered_started_ns)},
         {"time_discovered_completed_ns", time_value(e.time_discovered_completed_ns)},
         {"retired", e.retired},
         {"timeout_ms", e.timeout_ms},
         {"is_p2p", e.is_p2p},
         {"thread_id", e.thread_id},
         {"thread_name", e.thread_name}};
  constexpr size_t kDurationPosition = 8;  // after time_created_ns, where PyTorch puts it
  if (e.duration_ms) d.insert(d.begin() + kDurationPosition, {Value("duration_ms"), Value(*e.duration_ms)});
  return d;
}

json entry_json(const FrEntry& e) {
  json j;
  j["record_id"] = e.record_id;
  j["pg_id"] = e.pg_id;
  j["process_group"] = json::array({e.pg_name, e.pg_desc});
  j["collective_seq_id"] = e.collective_seq_id;
  j["p2p_seq_id"] = e.p2p_seq_id;
  j["op_id"] = e.op_id;
  j["profiling_name"] = e.profiling_name;
  j["time_created_ns"] = e.time_created_ns;
  if (e.duration_ms) j["duration_ms"] = *e.duration_ms;
  j["input_sizes"] = e.input_sizes;
  j["input_dtypes"] = e.input_dtypes;
  j["output_sizes"] = e.output_sizes;
  j["output_dtypes"] = e.output_dtypes;
  j["state"] = name(e.state);
  // JSON has no "not yet" for these: PyTorch writes 0.
  j["time_discovered_started_ns"] = e.time_discovered_started_ns.value_or(0);
  j["time_discovered_completed_ns"] = e.time_discovered_completed_ns.value_or(0);
  j["retired"] = e.retired;
  j["timeout_ms"] = e.timeout_ms;
  j["is_p2p"] = e.is_p2p;
  j["thread_id"] = e.thread_id;
  j["thread_name"] = e.thread_name;
  return j;
}

// pg_status is keyed by the group's pg_id, as PyTorch keys it; a group built without one by its
// position.
int status_key(const FrGroup& group, size_t position) {
  return group.pg_id >= 0 ? group.pg_id : static_cast<int>(position);
}

}  // namespace

pickle::Value to_pickle_value(const FrDump& dump) {
  Dict config;
  Dict status;
  for (size_t i = 0; i < dump.groups.size(); ++i) {
    const FrGroup& g = dump.groups[i];
    config.emplace_back(g.name, Dict{{"name", g.name}, {"desc", g.desc}, {"ranks", ranks_string(g.ranks)}});
    status.emplace_back(std::to_string(status_key(g, i)), Dict{{"last_enqueued_collective", g.last_enqueued_collective},
                                                {"last_started_collective", g.last_started_collective},
                                                {"last_completed_collective", g.last_completed_collective}});
  }
  List entries;
  entries.reserve(dump.entries.size());
  for (const FrEntry& e : dump.entries) entries.push_back(entry_value(e));
  return Dict{{"version", dump.version},
              {"comm_lib_version", dump.comm_lib_version},
              {"pg_config", std::move(config)},
              {"pg_status", std::move(status)},
              {"entries", std::move(entries)}};
}

std::string to_pickle(const FrDump& dump) { return pickle::dumps(to_pickle_value(dump)); }

std::string to_json(const FrDump& dump) {
  json config = json::object();
  json status = json::object();
  for (size_t i = 0; i < dump.groups.size(); ++i) {
    const FrGroup& g = dump.groups[i];
    config[g.name] = {{"name", g.name}, {"desc", g.desc}, {"ranks", ranks_string(g.ranks)}};
    status[std::to_string(status_key(g, i))] = {{"last_enqueued_collective", std::to_string(g.last_enqueued_collective)},
                                 {"last_started_collective", std::to_string(g.last_started_collective)},
                                 {"last_completed_collective", std::to_string(g.last_completed_collective)}};
  }
  json result;
  result["version"] = dump.version;
  result["comm_lib_version"] = dump.comm_lib_version;
  result["pg_config"] = std::move(config);
  result["pg_status"] = std::move(status);
  if (!dump.entries.empty()) {
    json& entries = result["entries"] = json::array();
    for (const FrEntry& e : dump.entries) entries.push_back(entry_json(e));
  }
  // A thread name that is not UTF-8 must not make the whole dump fail.
  return result.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tandem
