// NcclExecutor's native mode (NcclMode::kNative): NCCL's own collectives, the baseline nccl-tests
// measures (all_to_all and send_recv as grouped ncclSend / ncclRecv). NCCL picks its own chunking;
// integer averages reduce as a sum and are divided after, as the host does.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/kernels/reduce.h"
#include "backend/nccl/nccl_executor_internal.h"
#include "core/error.h"
#include "core/schedule.h"
#include "core/types.h"

namespace tandem::nccl {
namespace {

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::kF32:
      return ncclFloat32;
    case DataType::kF16:
      return ncclFloat16;
    case DataType::kBF16:
      return ncclBfloat16;
    case DataType::kF64:
      return ncclFloat64;
    case DataType::kI32:
      return ncclInt32;
    case DataType::kI64:
      return ncclInt64;
  }
  return ncclFloat32;
}

bool is_integer(DataType type) { return type == DataType::kI32 || type == DataType::kI64; }

// NCCL's op for `op`; integer averages reduce as a sum and divide after (as the host: truncation).
ncclRedOp_t nccl_op(ReduceOp op, DataType type) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return is_integer(type) ? ncclSum : ncclAvg;
  }
  return ncclSum;
}

}  // namespace

RunResult NcclExecutor::Impl::run_native(const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                                         const RunContext& context) {
  if (context.on_send) {
    fail(ErrorCode::kUnsupported,
         "nccl native mode cannot inject transfer faults (RunContext::on_send): NCCL's "
         "collectives have no per-transfer seam; use schedule mode");
  }
  if (context.checksums) {
    fail(ErrorCode::kUnsupported,
         "nccl native mode cannot checksum messages (RunContext::checksums); use schedule mode");
  }
  const ncclDataType_t type = nccl_type(spec.dtype);
  const ncclRedOp_t op = nccl_op(spec.op, spec.dtype);
  const size_t count = static_cast<size_t>(spec.count);
  const size_t block_bytes = count * size_bytes(spec.dtype);
  const int n = spec.nranks;
  const auto start = Clock::now();
  TANDEM_NCCL_CHECK(ncclGroupStart());
  for (LocalRank& local : ranks) {
    const RankBuffers& buffer = buffers[static_cast<size_t>(local.rank)];
    const auto* in = static_cast<const std::byte*>(buffer.input);
    auto* out = static_cast<std::byte*>(buffer.output);
    switch (spec.collective) {
      case Collective::kAllReduce:
        check_nccl(ncclAllReduce(in, out, count, type, op, local.comm, local.stream), "ncclAllReduce", __FILE__,
                   __LINE__, local.comm);
        break;
      case Collective::kReduceScatter:
        check_nccl(ncclReduceScatter(in, out, count, type, op, local.comm, local.stream), "ncclReduceScatter", __FILE__,
                   __LINE__, local.comm);
        break;
      case Collective::kAllGather:
        check_nccl(ncclAllGather(in, out, count, type, local.comm, local.stream), "ncclAllGather", __FILE__, __LINE__,
                   local.comm);
        break;
      case Collective::kBroadcast:
        check_nccl(ncclBroadcast(in, out, count, type, spec.root, local.comm, local.stream), "ncclBroadcast", __FILE__,
                   __LINE__, local.comm);
        break;
      case Collective::kReduce:
        check_nccl(ncclReduce(in, out, count, type, op, spec.root, local.comm, local.stream), "ncclReduce", __FILE__,
                   __LINE__, local.comm);
        break;
      case Collective::kAllToAll:
        // Input block p goes to rank p; output block p comes from rank p.
        for (int p = 0; p < n; ++p) {
          check_nccl(
              ncclSend(in + static_cast<size_t>(p) * block_bytes, block_bytes, ncclUint8, p, local.comm, local.stream),
              "ncclSend", __FILE__, __LINE__, local.comm);
          check_nccl(
              ncclRecv(out + static_cast<size_t>(p) * block_bytes, block_bytes, ncclUint8, p, local.comm, local.stream),
              "ncclRecv", __FILE__, __LINE__, local.comm);
        }
        break;
      case Collective::kSendRecv:
        check_nccl(ncclSend(in, block_bytes, ncclUint8, (local.rank + 1) % n, local.comm, local.stream), "ncclSend",
                   __FILE__, __LINE__, local.comm);
        check_nccl(ncclRecv(out, block_bytes, ncclUint8, (local.rank + n - 1) % n, local.comm, local.stream),
                   "ncclRecv", __FILE__, __LINE__, local.comm);
        break;
    }
  }
  TANDEM_NCCL_CHECK(ncclGroupEnd());
  // On nonblocking communicators ncclGroupEnd may return ncclInProgress with nothing on the streams
  // yet (NCCL connects peers and enqueues from its own thread): wait until the group is enqueued
  // before putting work behind it or polling the streams. Seen on an H200: a self send/receive read
  // as finished before NCCL had enqueued it, and its buffers were freed under the kernel.
  wait_for_communicators("collective", context.timeout);
  // Integer averages: NCCL summed; divide as the host does.
  if (spec.op == ReduceOp::kAvg && is_integer(spec.dtype) && is_reduction(spec.collective)) {
    const int64_t elements = static_cast<int64_t>(buffer_geometry(spec.collective, n).output_blocks) * spec.count;
    for (LocalRank& local : ranks) {
      if (spec.collective == Collective::kReduce && local.rank != spec.root) continue;
      if (elements == 0) continue;
      TANDEM_CUDA_CHECK(cudaSetDevice(local.device));
      cuda::launch_divide(spec.dtype, buffers[static_cast<size_t>(local.rank)].output, elements, n, local.stream);
    }
  }
  return wait(start, context);
}

}  // namespace tandem::nccl
