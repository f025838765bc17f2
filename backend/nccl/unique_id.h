// Sharing an ncclUniqueId over the launch: rank `root` creates it (ncclGetUniqueId, which needs no
// GPU) and every process receives the same 128 bytes, the input of ncclCommInitRankConfig.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "backend/launch/launch.h"
#include "core/error.h"

namespace tandem::nccl {

// Collective over `launch`: every process calls it and gets rank `root`'s id. Throws
// Error(kBackend) with NCCL's message when ncclGetUniqueId fails on the root (every process throws
// then, none waits).
inline ncclUniqueId share_unique_id(Launch& launch, int root = 0) {
  // One status byte in front of the id, so that a failure on the root reaches every process.
  std::vector<std::byte> bytes(1 + NCCL_UNIQUE_ID_BYTES);
  ncclResult_t status = ncclSuccess;
  if (launch.info().rank == root) {
    ncclUniqueId id{};
    status = ncclGetUniqueId(&id);
    bytes[0] = static_cast<std::byte>(status);
    std::memcpy(bytes.data() + 1, id.internal, NCCL_UNIQUE_ID_BYTES);
  }
  launch.broadcast(bytes, root);
  status = static_cast<ncclResult_t>(bytes[0]);
  if (status != ncclSuccess) {
    fail(ErrorCode::kBackend, "ncclGetUniqueId failed on rank {}: {}", root, ncclGetErrorString(status));
  }
  ncclUniqueId id{};
  std::memcpy(id.internal, bytes.data() + 1, NCCL_UNIQUE_ID_BYTES);
  return id;
}

}  // namespace tandem::nccl
