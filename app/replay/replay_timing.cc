// The replay's ops simulated: each distinct op on each set of ranks the replay asks for (the ops
// that ran, and each blocked op on its ranks and on its survivors) timed once, in child processes.
#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "app/replay/replay_internal.h"
#include "core/error.h"
#include "sim/collective_timer.h"
#include "sim/isolated.h"

namespace tandem::app::replay_detail {
namespace {

struct TimingQuery {
  Collective collective = Collective::kAllReduce;
  int64_t bytes = 0;
  std::vector<int> ranks;  // = GPUs
};

// Queries that share schedules: all_gather and reduce_scatter are timed as half a ring all_reduce,
// so they go with all_reduce; each other collective is a family of its own.
int query_family(Collective collective) {
  switch (collective) {
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return static_cast<int>(Collective::kAllReduce);
    default:
      return static_cast<int>(collective);
  }
}

// Times every query on the simulator. With several jobs, each family of queries (query_family)
// runs in a child process of its own, up to options.jobs at a time, each child building its
// platform and the schedules it needs once. Groups of up to sim::kMaxOpByOpRanks run op by op,
// where a time's last bits depend on the runs before it in the process: then, as with one job, one
// child runs every query in order.
std::vector<sim::CollectiveTiming> time_queries(const ReplayOptions& options, const std::vector<TimingQuery>& queries,
                                                PhaseProgress& progress) {
  const bool independent = options.jobs > 1 && std::all_of(queries.begin(), queries.end(), [](const TimingQuery& q) {
                             return q.ranks.size() > static_cast<size_t>(sim::kMaxOpByOpRanks);
                           });
  std::map<int, std::vector<size_t>> by_family;
  for (size_t i = 0; i < queries.size(); ++i) {
    by_family[independent ? query_family(queries[i].collective) : 0].push_back(i);
  }
  std::vector<std::vector<size_t>> families;
  for (auto& [family, members] : by_family) families.push_back(std::move(members));
  std::vector<sim::CollectiveTiming> timings(queries.size());
  size_t done = 0;
  std::optional<Error> failure;
  sim::run_isolated_parallel(
      families.size(),
      [&](size_t f) {
        // Explicit schedules, as tandem run's collective loops simulate them.
        sim::CollectiveTimer timer(options.cluster, options.network, true);
        const std::optional<sim::SimAlgorithm> algorithm = sim::parse_sim_algorithm_or_auto(options.algorithm);
        std::vector<sim::CollectiveTiming> out;
        for (size_t i : families[f]) {
          const TimingQuery& q = queries[i];
          models::CommGroup group{"replay", 1, 1, {q.ranks}};
          out.push_back(timer.time(q.collective, q.bytes, group, algorithm));
        }
        return out;
      },
      std::max(1, options.jobs),
      [&](size_t f, const sim::Isolated<std::vector<sim::CollectiveTiming>>& result) {
        if (!result.reply) {
          if (!failure) failure.emplace(result.code, result.error);
          return;
        }
        for (size_t k = 0; k < families[f].size(); ++k) timings[families[f][k]] = result.reply->at(k);
        done += families[f].size();
        progress.step(done);
      });
  if (failure) throw *failure;
  return timings;
}

}  // namespace

void Timings::predict(size_t op, ReplayOp& o) const {
  if (auto t = find(op, o.ranks)) {
    o.predicted_s = t->seconds;
    o.algorithm = std::string(sim::name(t->algorithm));
    o.busbw_GBps = t->busbw_GBps;
  }
}

// Simulates every op that ran on its ranks, and every blocked op on its ranks and on its survivors.
Timings time_ops(const ReplayOptions& options, const std::vector<ReplayOp>& ops, const Replayed& logic,
                 const std::vector<BlockedInfo>& infos) {
  Timings out;
  std::vector<TimingQuery> queries;
  auto ask = [&](size_t op, const std::vector<int>& ranks) {
    if (!ops[op].simulated || ranks.size() < 2) return;
    if (out.index.try_emplace({op, ranks}, queries.size()).second) {
      queries.push_back(TimingQuery{ops[op].collective, ops[op].bytes, ranks});
    }
  };
  for (size_t op : logic.order) ask(op, ops[op].ranks);
  for (const BlockedInfo& info : infos) {
    ask(info.op, ops[info.op].ranks);
    ask(info.op, info.survivors);
  }
  PhaseProgress progress(options, "simulating distinct collectives", queries.size());
  out.timings = time_queries(options, queries, progress);
  return out;
}

}  // namespace tandem::app::replay_detail
