// The trace of a replay (`tandem replay --trace`), in the Chrome / Perfetto trace-event format of
// docs/traces.md: a track per rank with a slice per op it took part in (a stuck one lasts until the
// watchdog fires), and a "replay" track with the first divergence, the watchdog and each recovery
// policy's outcome as instant events, on the replayed (simulated) clock.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "app/replay/replay.h"

namespace tandem::app {

// `source` names the dumps' folder.
nlohmann::json replay_trace(const ReplayResult& result, const std::string& source);

}  // namespace tandem::app
