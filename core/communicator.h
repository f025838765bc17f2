// Communicator: what users and the scenario runner call. It picks the algorithm (a fixed choice,
// or kAuto through a selector), builds and caches checked schedules, and runs them on an executor.
// One call drives all ranks (a simulator-first API: the caller owns every rank's buffers).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <tuple>

#include "core/executor.h"
#include "core/schedule.h"

namespace tandem {

struct CommunicatorOptions {
  Algorithm algorithm = Algorithm::kAuto;
  AlgoParams params;
  RunContext context;
  // Chooses the algorithm for kAuto; default_algorithm() when empty.
  std::function<Algorithm(const CollectiveSpec&, const RankLayout&)> selector;
};

class Communicator {
 public:
  Communicator(Executor& executor, RankLayout layout, CommunicatorOptions options = {});

  int nranks() const { return layout_.nranks; }
  const RankLayout& layout() const { return layout_; }

  // Collectives over every rank's buffers (buffers.size() == nranks). Counts as in NCCL:
  // all_reduce / broadcast / reduce: elements per buffer; reduce_scatter: elements each rank
  // receives; all_gather: elements each rank sends; all_to_all: elements sent to each peer;
  // send_recv: elements each rank sends to rank+1.
  RunResult all_reduce(std::span<const RankBuffers> buffers, int64_t count, DataType dtype, ReduceOp op);
  RunResult reduce_scatter(std::span<const RankBuffers> buffers, int64_t count, DataType dtype, ReduceOp op);
  RunResult all_gather(std::span<const RankBuffers> buffers, int64_t count, DataType dtype);
  RunResult broadcast(std::span<const RankBuffers> buffers, int64_t count, DataType dtype, int root);
  RunResult reduce(std::span<const RankBuffers> buffers, int64_t count, DataType dtype, ReduceOp op, int root);
  RunResult all_to_all(std::span<const RankBuffers> buffers, int64_t count, DataType dtype);
  RunResult send_recv(std::span<const RankBuffers> buffers, int64_t count, DataType dtype);

  // The general form; `algorithm` overrides the communicator's choice when not kAuto.
  RunResult run(const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                Algorithm algorithm = Algorithm::kAuto);

  // The algorithm a call would use, and its (cached, checked) schedule.
  Algorithm choose(const CollectiveSpec& spec, Algorithm requested = Algorithm::kAuto) const;
  const Schedule& schedule(const CollectiveSpec& spec, Algorithm algorithm);

 private:
  Executor& executor_;
  RankLayout layout_;
  CommunicatorOptions options_;
  std::map<std::tuple<Collective, int, Algorithm>, std::unique_ptr<Schedule>> cache_;
};

}  // namespace tandem
