#include "core/communicator.h"

#include "core/algorithms.h"
#include "core/error.h"

namespace tandem {

Communicator::Communicator(Executor& executor, RankLayout layout, CommunicatorOptions options)
    : executor_(executor), layout_(std::move(layout)), options_(std::move(options)) {
  if (layout_.nranks < 1) fail(ErrorCode::kInvalidArgument, "a communicator needs at least 1 rank");
}

Algorithm Communicator::choose(const CollectiveSpec& spec, Algorithm requested) const {
  Algorithm algorithm = requested != Algorithm::kAuto ? requested : options_.algorithm;
  if (algorithm != Algorithm::kAuto) return algorithm;
  return options_.selector ? options_.selector(spec, layout_) : default_algorithm(spec, layout_);
}

const Schedule& Communicator::schedule(const CollectiveSpec& spec, Algorithm algorithm) {
  // Schedules do not depend on count, dtype or op: one per (collective, root, algorithm).
  auto& slot = cache_[{spec.collective, spec.root, algorithm}];
  if (!slot) slot = std::make_unique<Schedule>(build_checked_schedule(spec, layout_, algorithm, options_.params));
  return *slot;
}

RunResult Communicator::run(const CollectiveSpec& spec_in, std::span<const RankBuffers> buffers, Algorithm algorithm) {
  CollectiveSpec spec = spec_in;
  spec.nranks = layout_.nranks;
  if (buffers.size() != static_cast<size_t>(layout_.nranks)) {
    fail(ErrorCode::kInvalidArgument, "{}: got buffers for {} ranks, the communicator has {}", name(spec.collective),
         buffers.size(), layout_.nranks);
  }
  if (spec.count < 0) fail(ErrorCode::kInvalidArgument, "{}: negative count {}", name(spec.collective), spec.count);
  const Schedule& chosen = schedule(spec, choose(spec, algorithm));
  return executor_.run(chosen, spec, buffers, options_.context);
}

RunResult Communicator::all_reduce(std::span<const RankBuffers> buffers, int64_t count, DataType dtype, ReduceOp op) {
  return run({Collective::kAllReduce, count, dtype, op, 0, nranks()}, buffers);
}
RunResult Communicator::reduce_scatter(std::span<const RankBuffers> buffers, int64_t count, DataType dtype,
                                       ReduceOp op) {
  return run({Collective::kReduceScatter, count, dtype, op, 0, nranks()}, buffers);
}
RunResult Communicator::all_gather(std::span<const RankBuffers> buffers, int64_t count, DataType dtype) {
  return run({Collective::kAllGather, count, dtype, ReduceOp::kSum, 0, nranks()}, buffers);
}
RunResult Communicator::broadcast(std::span<const RankBuffers> buffers, int64_t count, DataType dtype, int root) {
  return run({Collective::kBroadcast, count, dtype, ReduceOp::kSum, root, nranks()}, buffers);
}
RunResult Communicator::reduce(std::span<const RankBuffers> buffers, int64_t count, DataType dtype, ReduceOp op,
                               int root) {
  return run({Collective::kReduce, count, dtype, op, root, nranks()}, buffers);
}
RunResult Communicator::all_to_all(std::span<const RankBuffers> buffers, int64_t count, DataType dtype) {
  return run({Collective::kAllToAll, count, dtype, ReduceOp::kSum, 0, nranks()}, buffers);
}
RunResult Communicator::send_recv(std::span<const RankBuffers> buffers, int64_t count, DataType dtype) {
  return run({Collective::kSendRecv, count, dtype, ReduceOp::kSum, 0, nranks()}, buffers);
}

}  // namespace tandem
