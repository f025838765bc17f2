// PyTorch's vocabulary as its flight-recorder dumps spell it (docs/flight-recorder.md): dtype names
// (c10::toString(ScalarType)) and the op types of ProcessGroupNCCL's profiling names
// ("nccl:<type>"). The recorder writes them, the analyzer checks size rules by them and replay
// times ops by them: this is the one table all three read.
#pragma once

#include <optional>
#include <string_view>

#include "core/types.h"

namespace tandem {

// "Float", "Half", "BFloat16", "Double", "Int", "Long".
std::string_view torch_dtype_name(DataType dtype);
// Bytes per element of a PyTorch dtype name (every ScalarType a dump may carry); nullopt: unknown.
std::optional<int> torch_dtype_bytes(std::string_view name);

// Which tensors give an op's size as nccl-tests counts it (all_gather: the output, the total).
enum class TorchSizedBy : uint8_t { kInput, kOutput };

struct TorchOp {
  std::string_view type;  // as in "nccl:<type>"
  Collective collective;  // the collective it runs (barrier: a 1-element all_reduce)
  TorchSizedBy sized_by;
  bool coalesced;  // a *_coalesced op: one entry for a group of tensors (sizes are lists)
};

// The op of a profiling name's type ("all_reduce", "_allgather_base", "send", ...); nullptr for a
// type PyTorch records that tandem has no model for (scatter, gather, the bare "coalesced" marker
// that closes a group of separately recorded ops, ...).
const TorchOp* torch_op(std::string_view type);

}  // namespace tandem
