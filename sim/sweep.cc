#include "sim/sweep.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "core/algorithms.h"
#include "core/child_processes.h"
#include "core/error.h"
#include "sim/collective_plan.h"
#include "sim/protocol.h"
#include "sim/tuner.h"

namespace tandem::sim {

using nlohmann::json;

RankLayout sweep_layout(int nodes, int per_node, bool rail_aligned) {
  return rail_aligned ? RankLayout::nccl(nodes, per_node) : RankLayout::nodes(nodes, per_node);
}

namespace {

std::vector<SweepPointResult> run_in_process(const SweepRequest& request) {
  const models::Topology topology = models::build_cluster(request.cluster);
  const int total_per_node = topology.gpus_per_node();
  const int per_node = request.gpus_per_node > 0 ? request.gpus_per_node : total_per_node;
  if (per_node > total_per_node) {
    fail(ErrorCode::kInvalidArgument, "{} GPUs per node requested but {} has {}", per_node, request.cluster.preset,
         total_per_node);
  }
  const int nodes = topology.node_count();
  const int n = nodes * per_node;
  std::vector<int> gpu_of_rank;
  for (int v = 0; v < nodes; ++v) {
    for (int i = 0; i < per_node; ++i) gpu_of_rank.push_back(v * total_per_node + i);
  }
  const RankLayout layout = sweep_layout(nodes, per_node, request.rail_aligned);
  Simulator simulator(topology, request.cluster, request.network);
  CollectivePlans plans(simulator, request.network);
  const Tuner tuner(request.cluster, nodes, per_node);

  std::vector<SweepPointResult> results;
  for (const SweepPoint& point : request.points) {
    SweepPointResult out;
    out.point = point;
    try {
      const int64_t count = nccl_tests_counts(point.collective, point.bytes, point.dtype, n).count;
      Choice choice = !point.algorithm && !point.protocol
                          ? tuner.choose(point.collective, point.bytes)
                          : tuner.choose_for(point.collective, point.bytes,
                                             point.algorithm.value_or(tuner.choose(point.collective, point.bytes).algorithm),
                                             point.protocol);
      // NCCL's p2p model is a fluid-model one: the packet model runs core's direct schedule.
      if (choice.algorithm == SimAlgorithm::Model::kP2p && request.network.fidelity == Fidelity::kPacket) {
        choice = tuner.choose_for(point.collective, point.bytes, Algorithm::kDirect, point.protocol);
      }
      if (request.channels > 0 && choice.algorithm != SimAlgorithm::Model::kP2p) choice.channels = request.channels;
      out.algorithm = choice.algorithm;
      out.protocol = choice.protocol;
      out.channels = choice.channels;
      CollectiveQuery query;
      query.spec = {point.collective, count, point.dtype, point.op, point.root, n};
      query.bytes = point.bytes;
      query.choice = choice;
      query.tuner = &tuner;
      query.layout = layout;
      query.instances = {gpu_of_rank};
      query.per_node = per_node;
      query.params = request.params;
      // Explicit schedules run op by op (n x channels actors for a ring); otherwise rings take their
      // rank-symmetric rounds, an all_gather / reduce_scatter ring as half an all_reduce's, as
      // training steps time them (sim/collective_plan.h).
      query.form = request.explicit_schedules ? ScheduleForm::kExplicit : ScheduleForm::kSymmetric;
      query.half_ring = !request.explicit_schedules;
      const SimResult sim = plans.run(query);
      out.ok = true;
      out.seconds = sim.seconds;
      out.simulated_transfers = sim.simulated_transfers;
      out.algbw_GBps = sim.seconds > 0 ? static_cast<double>(point.bytes) / sim.seconds / 1e9 : 0;
      out.busbw_GBps = out.algbw_GBps * bus_bandwidth_factor(point.collective, n);
    } catch (const Error& e) {
      out.ok = false;
      out.error = e.what();
    }
    results.push_back(std::move(out));
  }
  return results;
}

json to_json(const std::vector<SweepPointResult>& results) {
  json rows = json::array();
  for (const SweepPointResult& r : results) {
    rows.push_back({{"ok", r.ok},
                    {"error", r.error},
                    {"algorithm", r.algorithm ? name(*r.algorithm) : ""},
                    {"protocol", name(r.protocol)},
                    {"channels", r.channels},
                    {"seconds", r.seconds},
                    {"algbw", r.algbw_GBps},
                    {"busbw", r.busbw_GBps},
                    {"simulated_transfers", r.simulated_transfers}});
  }
  return rows;
}

void from_json(const json& rows, std::vector<SweepPointResult>& results) {
  for (size_t i = 0; i < rows.size() && i < results.size(); ++i) {
    const json& row = rows[i];
    SweepPointResult& r = results[i];
    r.ok = row.at("ok").get<bool>();
    r.error = row.at("error").get<std::string>();
    const std::string algorithm = row.at("algorithm").get<std::string>();
    if (!algorithm.empty()) r.algorithm = parse_sim_algorithm(algorithm);
    r.protocol = models::parse_nccl_protocol(row.at("protocol").get<std::string>());
    r.channels = row.at("channels").get<int>();
    r.seconds = row.at("seconds").get<double>();
    r.algbw_GBps = row.at("algbw").get<double>();
    r.busbw_GBps = row.at("busbw").get<double>();
    r.simulated_transfers = row.at("simulated_transfers").get<uint64_t>();
  }
}

}  // namespace


namespace {

// The line of a dead child's stderr that says why: SimGrid's CRITICAL assertion, or the last line.
std::string death_reason(const std::string& stderr_text) {
  std::string last;
  size_t begin = 0;
  while (begin < stderr_text.size()) {
    size_t end = stderr_text.find('\n', begin);
    if (end == std::string::npos) end = stderr_text.size();
    const std::string line = stderr_text.substr(begin, end - begin);
    if (line.find("CRITICAL") != std::string::npos) return line;
    if (!line.empty() && line.find("->") == std::string::npos && line.find("Backtrace") == std::string::npos) {
      last = line;
    }
    begin = end + 1;
  }
  return last;
}

std::vector<SweepPointResult> run_child(const SweepRequest& request) {
  const json reply = json::parse(run_isolated([&] { return to_json(run_in_process(request)).dump(); }));
  std::vector<SweepPointResult> results(request.points.size());
  for (size_t i = 0; i < results.size(); ++i) results[i].point = request.points[i];
  from_json(reply, results);
  return results;
}

}  // namespace

namespace {

// A child process running one piece of work: its pid, the pipe it answers on, and the temporary
// file its stderr goes to (passed on when it exits normally, mined for the reason when it dies:
// SimGrid aborts on failed internal assertions).
struct Child {
  pid_t pid = -1;
  int answer_fd = -1;
  std::FILE* err_file = nullptr;
  std::string answer;
};

Child spawn_child(const std::function<std::string()>& work) {
  int fds[2];
  if (pipe(fds) != 0) fail(ErrorCode::kBackend, "simulation: pipe failed: {}", std::strerror(errno));
  std::FILE* err_file = std::tmpfile();
  if (err_file == nullptr) fail(ErrorCode::kBackend, "simulation: tmpfile failed: {}", std::strerror(errno));
  std::fflush(nullptr);  // the child must not write the parent's buffered output again
  // A child that dies with this process, whatever ends it (core/child_processes.h).
  const pid_t child = fork_child();
  if (child < 0) fail(ErrorCode::kBackend, "simulation: fork failed: {}", std::strerror(errno));
  if (child == 0) {
    close(fds[0]);
    dup2(fileno(err_file), STDERR_FILENO);
    json reply;
    try {
      reply = {{"result", work()}};
    } catch (const Error& e) {
      reply = {{"error", e.what()}, {"code", static_cast<int>(e.code())}};  // the parent rethrows it as is
    } catch (const std::exception& e) {
      reply = {{"error", e.what()}, {"code", static_cast<int>(ErrorCode::kBackend)}};
    }
    const std::string text = reply.dump();
    size_t written = 0;
    while (written < text.size()) {
      const ssize_t w = write(fds[1], text.data() + written, text.size() - written);
      if (w <= 0) break;
      written += static_cast<size_t>(w);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  return {child, fds[0], err_file, {}};
}

// Reads what is there (blocking); false at the end of the answer.
bool read_answer(Child& child) {
  char buffer[1 << 16];
  const ssize_t got = read(child.answer_fd, buffer, sizeof buffer);
  if (got > 0) {
    child.answer.append(buffer, static_cast<size_t>(got));
    return true;
  }
  if (got < 0 && errno == EINTR) return true;
  return false;
}

// Reaps the child once its answer has ended: its result, or the error it threw (or died of).
std::string finish_child(Child& child) {
  close(child.answer_fd);
  int status = 0;
  forget_child(child.pid);
  waitpid(child.pid, &status, 0);
  std::string err_text;
  char buffer[1 << 16];
  std::rewind(child.err_file);
  for (size_t got; (got = std::fread(buffer, 1, sizeof buffer, child.err_file)) > 0;) err_text.append(buffer, got);
  std::fclose(child.err_file);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || child.answer.empty()) {
    const std::string reason = death_reason(err_text);
    fail(ErrorCode::kBackend, "the simulation process died ({}){}{}",
         WIFSIGNALED(status) ? fmt::format("signal {}", WTERMSIG(status)) : fmt::format("status {}", status),
         reason.empty() ? "" : ": ", reason);
  }
  std::fputs(err_text.c_str(), stderr);
  const json reply = json::parse(child.answer);
  if (reply.contains("error")) {
    throw Error(static_cast<ErrorCode>(reply.at("code").get<int>()), reply.at("error").get<std::string>());
  }
  return reply.at("result").get<std::string>();
}

}  // namespace

std::string run_isolated(const std::function<std::string()>& work) {
  Child child = spawn_child(work);
  while (read_answer(child)) {
  }
  return finish_child(child);
}

void run_isolated_parallel(size_t count, const std::function<std::string(size_t)>& work, int jobs,
                           const std::function<void(size_t, const IsolatedResult&)>& done) {
  if (jobs < 1) fail(ErrorCode::kInvalidArgument, "run_isolated_parallel: jobs must be at least 1 (got {})", jobs);
  std::vector<std::pair<size_t, Child>> running;
  size_t next = 0;
  while (next < count || !running.empty()) {
    while (next < count && running.size() < static_cast<size_t>(jobs)) {
      const size_t index = next++;
      running.emplace_back(index, spawn_child([&work, index] { return work(index); }));
    }
    std::vector<pollfd> fds;
    for (const auto& [index, child] : running) fds.push_back({child.answer_fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) {
      fail(ErrorCode::kBackend, "simulation: poll failed: {}", std::strerror(errno));
    }
    for (size_t i = fds.size(); i-- > 0;) {
      if (fds[i].revents == 0) continue;
      auto& [index, child] = running[i];
      if (read_answer(child)) continue;
      IsolatedResult result;
      try {
        result.text = finish_child(child);
        result.ok = true;
      } catch (const Error& e) {
        result.error = e.what();
        result.code = e.code();
      }
      const size_t finished = index;
      running.erase(running.begin() + static_cast<ptrdiff_t>(i));
      done(finished, result);
    }
  }
}

std::vector<SweepPointResult> run_sweep(const SweepRequest& request, bool isolated) {
  if (request.network.fidelity == Fidelity::kPacket) {
    // SimGrid 3.32's ns-3 glue can abort the process on an internal assertion for some traffic
    // (docs/simulator.md): each point runs in its own child, so one abort costs that point only.
    std::vector<SweepPointResult> results;
    for (const SweepPoint& point : request.points) {
      SweepRequest one = request;
      one.points = {point};
      try {
        results.push_back(run_child(one).at(0));
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kBackend) throw;
        SweepPointResult failed;
        failed.point = point;
        failed.error = fmt::format("packet model aborted inside SimGrid's ns-3 binding ({})", e.what());
        results.push_back(failed);
      }
    }
    return results;
  }
  if (!isolated) return run_in_process(request);
  return run_child(request);
}

}  // namespace tandem::sim
