#include "app/replay/replay_trace.h"

#include <set>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/common/trace_events.h"

namespace tandem::app {

using nlohmann::json;
using namespace trace_events;

json replay_trace(const ReplayResult& result, const std::string& source) {
  json events = json::array();
  events.push_back(process_name(kPid, fmt::format("tandem replay {} ({})", source, result.cluster)));
  events.push_back(metadata("thread_name", kIterationsTrack, "replay"));
  events.push_back(sort_index(kIterationsTrack));
  std::set<int> ranks;
  for (const ReplaySlice& slice : result.slices) ranks.insert(slice.rank);
  for (int r : ranks) {
    events.push_back(metadata("thread_name", r + 1, fmt::format("rank {}", r)));
    events.push_back(sort_index(r + 1));
  }
  for (const ReplaySlice& slice : result.slices) {
    const ReplayOp& op = result.ops.at(slice.op);
    json args = {{"group", op.group},
                 {"sequence", op.sequence},
                 {"bytes", op.bytes},
                 {"dtype", op.dtype},
                 {"algorithm", op.algorithm},
                 {"state", std::string(name(op.state))},
                 {"predicted_us", us(op.predicted_s)}};
    if (op.recorded_s) args["recorded_us"] = us(*op.recorded_s);
    if (op.p2p) {
      std::vector<int> peers;
      for (int r : op.ranks) {
        if (r != slice.rank) peers.push_back(r);
      }
      args["peer"] = peers.size() == 1 ? json(peers.front()) : json(peers);
    }
    events.push_back({{"name", op.profiling_name},
                      {"ph", "X"},
                      {"ts", us(slice.start_s)},
                      {"dur", us(slice.end_s - slice.start_s)},
                      {"pid", kPid},
                      {"tid", slice.rank + 1},
                      {"args", std::move(args)}});
  }
  if (result.first_divergence) {
    const ReplayOp& op = result.ops.at(*result.first_divergence);
    events.push_back(instant(fmt::format("divergence: {}", name(op.state)), op.start_s,
                             {{"group", op.group},
                              {"sequence", op.sequence},
                              {"culprit_ranks", result.culprit_ranks},
                              {"description", op.detail}}));
  }
  for (const ReplayRecovery& rec : result.recoveries) {
    events.push_back(instant(fmt::format("recovery: {}", name(rec.action)), rec.end_s,
                             {{"outcome", std::string(name(rec.outcome))},
                              {"watchdog_s", rec.watchdog_s},
                              {"detected_us", us(rec.detected_s)},
                              {"dropped_ranks", rec.dropped_ranks},
                              {"description", rec.detail}}));
  }
  return document(std::move(events), {{"replay", source},
            {"cluster", result.cluster},
            {"clock", "simulated"},
            {"ranks", result.ranks}});
}

}  // namespace tandem::app
