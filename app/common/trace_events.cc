#include "app/common/trace_events.h"

#include <utility>

#include <nlohmann/json.hpp>

namespace tandem::app::trace_events {

using nlohmann::json;

json metadata(const char* what, int tid, const std::string& value) {
  return {{"name", what}, {"ph", "M"}, {"pid", kPid}, {"tid", tid}, {"args", {{"name", value}}}};
}

json sort_index(int tid) {
  return {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", kPid}, {"tid", tid}, {"args", {{"sort_index", tid}}}};
}

// The trace file: its events, and what otherData says of it besides the format version.
json document(json events, json other) {
  other["tandem_trace"] = kTraceFormatVersion;
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ns"}, {"otherData", std::move(other)}};
}

json process_name(int pid, const std::string& name) {
  return {{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", name}}}};
}

json instant(const std::string& label, double at_s, json args) {
  return {{"name", label},          {"ph", "i"}, {"s", "g"}, {"ts", us(at_s)}, {"pid", kPid}, {"tid", kIterationsTrack},
          {"args", std::move(args)}};
}

}  // namespace tandem::app::trace_events
