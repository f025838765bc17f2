// The Chrome / Perfetto trace-event pieces every trace of tandem is made of (docs/traces.md):
// metadata, sort indexes, process names, instants and the document with its format version.
// app/scenario/trace.h writes the run traces with them, app/replay/replay_trace.h the replay's.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tandem::app::trace_events {

inline constexpr int kTraceFormatVersion = 1;
inline constexpr int kPid = 1;
inline constexpr int kIterationsTrack = 0;  // rank r is track r + 1

inline double us(double seconds) { return seconds * 1e6; }

nlohmann::json metadata(const char* what, int tid, const std::string& value);
nlohmann::json sort_index(int tid);
// The trace file: its events, and what otherData says of it besides the format version.
nlohmann::json document(nlohmann::json events, nlohmann::json other);
nlohmann::json process_name(int pid, const std::string& name);
// An instant event on the iterations track, at `at_s` seconds of the run's clock.
nlohmann::json instant(const std::string& label, double at_s, nlohmann::json args);

}  // namespace tandem::app::trace_events
