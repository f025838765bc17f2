// What the replay page (replay_page.cc) draws, read from a `tandem replay --out` folder's
// replay.json with every field checked: the ops on the replayed clock, each rank's slices, the
// recovery policies' outcomes and the first divergence. Internal to app/report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tandem::app::report {

struct ReplayPageOp {
  std::string label, group_desc, profiling_name, state, detail, algorithm;
  int64_t sequence = 0, bytes = 0;
  bool p2p = false;
  std::vector<int> ranks, waiting, missing;
  double start_us = 0, end_us = 0, predicted_us = 0;
  std::optional<double> recorded_us;
  double watchdog_fires_us = 0;  // blocked ops: the latest end of its waiting ranks' slices
};

struct ReplayPageSlice {
  int rank = 0;
  size_t op = 0;  // index into ReplayPageData::ops
  double start_us = 0, end_us = 0;
};

struct ReplayPageRecovery {
  std::string action, outcome, detail;
  int attempts = 0;
  double watchdog_s = 0, detected_us = 0, end_us = 0, rerun_us = 0;
  std::vector<int> dropped_ranks;
};

// The waiting ranks' slices end when the watchdog fires: the page draws a blocked op up to there.
struct ReplayPageData {
  std::vector<ReplayPageOp> ops;
  std::vector<ReplayPageSlice> slices;
  std::vector<ReplayPageRecovery> recoveries;
  std::optional<size_t> first_divergence;  // index into ops
};

// replay.json's fields as app/replay/replay.cc's to_json writes them. Throws Error(kFormat) naming
// the field for a replay.json of another kind or format version, or with a field missing, unknown or
// mistyped, or a slice or first_divergence naming an op that is not in ops.
ReplayPageData read_replay_page_data(const nlohmann::json& replay);

}  // namespace tandem::app::report
