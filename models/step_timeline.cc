#include "models/workload.h"

// The step program played out on its streams: run_timeline.

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <queue>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "models/workload_internal.h"

namespace tandem::models {

namespace {

// The tasks played in dependency order: each starts when its stream's previous task and its
// dependencies have ended. Returns, per task, the predecessor that ended last (-1: none).
std::vector<int> play(const StepProgram& program, const std::vector<double>& duration_s, StepBreakdown& out) {
  const size_t n = program.tasks.size();
  // Edges: each task's dependencies and its stream's previous task.
  std::vector<int> stream_prev(n, -1), last_on_stream(program.streams.size(), -1);
  for (size_t i = 0; i < n; ++i) {
    const auto stream = static_cast<size_t>(program.tasks[i].stream);
    stream_prev[i] = last_on_stream[stream];
    last_on_stream[stream] = static_cast<int>(i);
  }
  std::vector<std::vector<int>> successors(n);
  std::vector<int> waiting(n, 0);
  for (size_t i = 0; i < n; ++i) {
    auto edge = [&](int from) {
      if (from < 0) return;
      successors[static_cast<size_t>(from)].push_back(static_cast<int>(i));
      ++waiting[i];
    };
    edge(stream_prev[i]);
    for (int dep : program.tasks[i].deps) edge(dep);
  }
  out.times.assign(n, {});
  std::vector<int> critical(n, -1);  // the predecessor that ended last
  std::vector<int> ready;
  for (size_t i = 0; i < n; ++i) {
    if (waiting[i] == 0) ready.push_back(static_cast<int>(i));
  }
  size_t done = 0;
  while (!ready.empty()) {
    const auto i = static_cast<size_t>(ready.back());
    ready.pop_back();
    ++done;
    double start = 0;
    auto consider = [&](int from) {
      if (from < 0) return;
      const double end = out.times[static_cast<size_t>(from)].end_s;
      if (critical[i] < 0 || end > start) {
        start = end;
        critical[i] = from;
      }
    };
    consider(stream_prev[i]);
    for (int dep : program.tasks[i].deps) consider(dep);
    out.times[i] = {start, start + duration_s[i]};
    for (int next : successors[i]) {
      if (--waiting[static_cast<size_t>(next)] == 0) ready.push_back(next);
    }
  }
  if (done != n) fail(ErrorCode::kInvalidArgument, "timeline: the step's tasks wait on each other in a cycle");
  for (const TaskTime& t : out.times) out.step_s = std::max(out.step_s, t.end_s);
  return critical;
}

// Every idle window of the reported stage's compute stream, charged along the chain of critical
// predecessors of the task that ends it: a collective's running time is exposed communication,
// another stage's compute is pipeline bubble, and time before a collective started is charged to
// whatever held it back. Returns each task's exposed seconds.
std::vector<double> charge_idle(const StepProgram& program, const std::vector<int>& critical, StepBreakdown& out) {
  const size_t n = program.tasks.size();
  const int compute_stream = program.compute_stream[static_cast<size_t>(out.stage)];
  std::vector<double> exposed(n, 0.0);
  auto charge = [&](int task, double from, double to) {
    while (task >= 0 && to > from) {
      const StepTask& t = program.tasks[static_cast<size_t>(task)];
      const TaskTime& time = out.times[static_cast<size_t>(task)];
      if (t.kind == TaskKind::kCompute) {
        out.bubble_s += to - from;
        return;
      }
      const double overlap = std::max(0.0, std::min(to, time.end_s) - std::max(from, time.start_s));
      exposed[static_cast<size_t>(task)] += overlap;
      out.exposed_comm_s += overlap;
      to = std::min(to, time.start_s);
      task = critical[static_cast<size_t>(task)];
    }
  };
  double free_at = 0;
  for (size_t i = 0; i < n; ++i) {
    if (program.tasks[i].stream != compute_stream) continue;
    const TaskTime& time = out.times[i];
    if (time.start_s > free_at) charge(critical[i], free_at, time.start_s);
    free_at = time.end_s;
  }
  if (out.step_s > free_at) {
    // The tail: what ends the step after this stage's last compute.
    int last = 0;
    for (size_t i = 0; i < n; ++i) {
      if (out.times[i].end_s >= out.times[static_cast<size_t>(last)].end_s) last = static_cast<int>(i);
    }
    charge(last, free_at, out.step_s);
  }
  return exposed;
}

// One row per (label, group): the stage's own collectives, and those of other stages it waited
// for (pipeline sends), most exposed first. Sizes differ within a row only for the embedding and
// head units; the row shows the size most of its collectives have.
std::vector<ExposedComm> exposed_rows(const StepProgram& program, const std::vector<double>& duration_s,
                                      const std::vector<double>& exposed, int stage) {
  struct Row {
    ExposedComm comm;
    std::map<int64_t, int> sizes;
  };
  std::map<std::pair<int, std::string>, Row> rows;
  for (size_t i = 0; i < program.tasks.size(); ++i) {
    const StepTask& t = program.tasks[i];
    if (t.kind != TaskKind::kComm || (t.stage != stage && exposed[i] == 0)) continue;
    const CommOp& op = program.comms[static_cast<size_t>(t.comm)];
    const std::string& group = program.groups[static_cast<size_t>(op.group)].name;
    Row& row = rows[{t.label, group}];
    row.comm.label = program.labels[static_cast<size_t>(t.label)];
    row.comm.collective = op.collective;
    row.comm.group = group;
    row.comm.total_s += duration_s[i];
    row.comm.exposed_s += exposed[i];
    ++row.comm.count;
    ++row.sizes[op.bytes];
  }
  std::vector<ExposedComm> top;
  for (auto& [key, row] : rows) {
    row.comm.bytes = std::max_element(row.sizes.begin(), row.sizes.end(), [](const auto& a, const auto& b) {
                       return a.second < b.second;
                     })->first;
    top.push_back(row.comm);
  }
  std::stable_sort(top.begin(), top.end(),
                   [](const ExposedComm& a, const ExposedComm& b) { return a.exposed_s > b.exposed_s; });
  return top;
}

}  // namespace

StepBreakdown run_timeline(const StepProgram& program, const std::vector<double>& duration_s) {
  const size_t n = program.tasks.size();
  if (duration_s.size() != n) {
    fail(ErrorCode::kInvalidArgument, "timeline: {} durations for {} tasks", duration_s.size(), n);
  }
  StepBreakdown out;
  const std::vector<int> critical = play(program, duration_s, out);
  // The stage reported: the one with the most compute (the critical path runs through it).
  std::vector<double> compute_of(static_cast<size_t>(program.stages), 0.0);
  for (size_t i = 0; i < n; ++i) {
    const StepTask& t = program.tasks[i];
    if (t.stream == program.compute_stream[static_cast<size_t>(t.stage)])
      compute_of[static_cast<size_t>(t.stage)] += duration_s[i];
  }
  out.stage = static_cast<int>(std::max_element(compute_of.begin(), compute_of.end()) - compute_of.begin());
  out.compute_s = compute_of[static_cast<size_t>(out.stage)];
  const std::vector<double> exposed = charge_idle(program, critical, out);
  out.top = exposed_rows(program, duration_s, exposed, out.stage);
  return out;
}

}  // namespace tandem::models
