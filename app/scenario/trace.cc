#include "app/scenario/trace.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "app/common/trace_events.h"
#include "core/error.h"

namespace tandem::app {
namespace {

using nlohmann::json;
using namespace trace_events;

// What the recovery policy did in an iteration, or empty when it had nothing to do.
std::string recovery_action(const IterationResult& it) {
  switch (it.outcome) {
    case Outcome::kCompleted:
      return "";
    case Outcome::kCompletedAfterRetry:
      return fmt::format("retry: completed after {} attempts", it.attempts);
    case Outcome::kRecoveredReroute:
      return "reroute: routed around the dead link / NIC";
    case Outcome::kRecoveredShrink:
      return fmt::format("shrink: dropped ranks [{}]", fmt::join(it.dropped_ranks, ", "));
    case Outcome::kAborted:
      return "abort: the job gives up (dumps written)";
  }
  return "";
}

}  // namespace

json loop_trace(const Scenario& scenario, const LoopResults& results) {
  const auto* loop = std::get_if<CollectiveLoop>(&scenario.workload);
  if (loop == nullptr) fail(ErrorCode::kInvalidArgument, "loop_trace: the workload is not a collective-loop");
  const std::string collective(name(loop->collective));
  const std::string algorithm(name(loop->algorithm));
  json events = json::array();
  events.push_back(process_name(kPid, fmt::format("tandem run {} ({})", scenario.name, name(results.backend))));
  events.push_back(metadata("thread_name", kIterationsTrack, "iterations"));
  events.push_back(sort_index(kIterationsTrack));
  for (int r = 0; r < results.ranks; ++r) {
    events.push_back(metadata("thread_name", r + 1, fmt::format("rank {}", r)));
    events.push_back(sort_index(r + 1));
  }
  for (const IterationResult& it : results.iterations) {
    events.push_back({{"name", fmt::format("{} #{}", collective, it.iteration)},
                      {"ph", "X"},
                      {"ts", us(it.start_s)},
                      {"dur", us(it.seconds)},
                      {"pid", kPid},
                      {"tid", kIterationsTrack},
                      {"args",
                       {{"iteration", it.iteration},
                        {"outcome", std::string(name(it.outcome))},
                        {"attempts", it.attempts},
                        {"bytes", loop->size_bytes},
                        {"algorithm", algorithm},
                        {"fault_free_us", us(it.fault_free_seconds)}}}});
    for (int f : it.faults) {
      const Fault& fault = scenario.faults.faults.at(static_cast<size_t>(f));
      events.push_back(instant(fmt::format("fault: {}", name(fault.kind)), it.start_s,
                               {{"fault", f}, {"iteration", it.iteration}, {"description", fault.describe()}}));
    }
    const std::string action = recovery_action(it);
    if (!action.empty()) {
      events.push_back(instant(fmt::format("recovery: {}", action.substr(0, action.find(':'))), it.start_s + it.seconds,
                               {{"iteration", it.iteration},
                                {"outcome", std::string(name(it.outcome))},
                                {"description", action},
                                {"detail", it.detail}}));
    }
  }
  for (const RankSlice& slice : results.slices) {
    events.push_back({{"name", "nccl:" + collective},
                      {"ph", "X"},
                      {"ts", us(slice.start_s)},
                      {"dur", us(slice.end_s - slice.start_s)},
                      {"pid", kPid},
                      {"tid", slice.rank + 1},
                      {"args",
                       {{"iteration", slice.iteration},
                        {"attempt", slice.attempt},
                        {"bytes", loop->size_bytes},
                        {"algorithm", algorithm},
                        {"state", slice.ok ? "completed" : "failed"}}}});
  }
  return document(std::move(events), {{"scenario", scenario.name},
            {"backend", std::string(name(results.backend))},
            {"clock", results.backend == ScenarioBackend::kSim ? "simulated" : "wall"},
            {"ranks", results.ranks}});
}

json bench_trace(const BenchTraceInfo& info, const std::vector<BenchRow>& rows) {
  json events = json::array();
  events.push_back(process_name(kPid, info.title));
  events.push_back(metadata("thread_name", kIterationsTrack, "sizes"));
  events.push_back(sort_index(kIterationsTrack));
  for (int r = 0; r < info.ranks; ++r) {
    events.push_back(metadata("thread_name", r + 1, fmt::format("rank {}", r)));
    events.push_back(sort_index(r + 1));
  }
  double clock_us = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const BenchRow& row = rows[i];
    const std::string algorithm = i < info.algorithms.size() ? info.algorithms[i] : "";
    for (const auto& [placement, result] : {std::pair<const char*, std::optional<BenchResult>>{"out-of-place", row.out_of_place},
                                            std::pair<const char*, std::optional<BenchResult>>{"in-place", row.in_place}}) {
      if (!result) continue;
      const json args = {{"bytes", row.counts.size_bytes},
                         {"count", row.counts.count},
                         {"placement", placement},
                         {"algorithm", algorithm},
                         {"algbw_GBps", result->algbw_GBps},
                         {"busbw_GBps", result->busbw_GBps}};
      for (int tid = 0; tid <= info.ranks; ++tid) {
        events.push_back({{"name", fmt::format("nccl:{}", info.collective)},
                          {"ph", "X"},
                          {"ts", clock_us},
                          {"dur", result->time_us},
                          {"pid", kPid},
                          {"tid", tid},
                          {"args", args}});
      }
      clock_us += result->time_us;
    }
  }
  return document(std::move(events), {{"bench", info.collective},
            {"backend", info.backend},
            {"clock", info.backend == "sim" ? "simulated" : "wall"},
            {"ranks", info.ranks}});
}

json sweep_trace(const Scenario& scenario, const ScenarioResults& results) {
  json events = json::array();
  std::map<std::string, int> pid_of;                      // variant -> process
  std::map<std::pair<int, std::string>, int> tid_of;      // (process, "all_reduce ring") -> track
  std::map<std::pair<int, int>, double> clock_us;         // track -> its end so far
  for (const PointResult& p : results.points) {
    auto [pv, new_variant] = pid_of.try_emplace(p.variant, static_cast<int>(pid_of.size()) + 1);
    const int pid = pv->second;
    if (new_variant) {
      events.push_back(process_name(pid, fmt::format("tandem run {}: {} ({})", scenario.name, p.variant,
                                                       name(results.backend))));
    }
    const std::string series = fmt::format("{} {}", name(p.collective), p.algorithm);
    auto [tv, new_track] = tid_of.try_emplace({pid, series}, static_cast<int>(tid_of.size()));
    const int tid = tv->second;
    if (new_track) {
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", series}}}});
    }
    if (p.status != PointStatus::kOk && p.status != PointStatus::kWrongData) continue;
    double& at = clock_us[{pid, tid}];
    events.push_back({{"name", fmt::format("nccl:{}", name(p.collective))},
                      {"ph", "X"},
                      {"ts", at},
                      {"dur", p.time_us},
                      {"pid", pid},
                      {"tid", tid},
                      {"args",
                       {{"bytes", p.size_bytes},
                        {"algorithm", p.algorithm_used},
                        {"protocol", p.protocol},
                        {"busbw_GBps", p.busbw_GBps},
                        {"status", std::string(name(p.status))}}}});
    at += p.time_us;
  }
  return document(std::move(events), {{"scenario", scenario.name},
            {"backend", std::string(name(results.backend))},
            {"clock", results.backend == ScenarioBackend::kSim ? "simulated" : "wall"}});
}

json training_trace(const Scenario& scenario, const TrainingResults& results) {
  json events = json::array();
  int pid = 0;
  for (size_t v = 0; v < results.steps.size(); ++v) {
    for (const sim::TrainingStepResult& step : results.steps[v]) {
      ++pid;
      events.push_back(process_name(pid, fmt::format("{} / {}{}", scenario.variants[v].name, step.layout,
                                                       step.ok ? "" : " (does not run)")));
      for (size_t s = 0; s < step.streams.size(); ++s) {
        events.push_back({{"name", "thread_name"},
                          {"ph", "M"},
                          {"pid", pid},
                          {"tid", static_cast<int>(s)},
                          {"args", {{"name", step.streams[s]}}}});
      }
      for (const sim::TimelineSlice& t : step.timeline) {
        events.push_back({{"name", step.labels.at(static_cast<size_t>(t.label))},
                          {"ph", "X"},
                          {"ts", us(t.start_s)},
                          {"dur", us(t.end_s - t.start_s)},
                          {"pid", pid},
                          {"tid", t.stream},
                          {"args", {{"kind", t.comm ? "collective" : "compute"}}}});
      }
    }
  }
  return document(std::move(events), {{"scenario", scenario.name}, {"backend", "sim"}, {"clock", "simulated"}});
}

}  // namespace tandem::app
