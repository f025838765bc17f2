#include "core/torch_names.h"

#include <array>
#include <utility>

namespace tandem {
namespace {

// c10/core/ScalarType.h: every ScalarType's name and size.
constexpr std::array<std::pair<std::string_view, int>, 22> kDtypeBytes{{
    {"Float", 4},
    {"Double", 8},
    {"Half", 2},
    {"BFloat16", 2},
    {"Int", 4},
    {"Long", 8},
    {"Short", 2},
    {"Char", 1},
    {"Byte", 1},
    {"Bool", 1},
    {"ComplexHalf", 4},
    {"ComplexFloat", 8},
    {"ComplexDouble", 16},
    {"Float8_e4m3fn", 1},
    {"Float8_e5m2", 1},
    {"Float8_e4m3fnuz", 1},
    {"Float8_e5m2fnuz", 1},
    {"Float8_e8m0fnu", 1},
    {"UInt16", 2},
    {"UInt32", 4},
    {"UInt64", 8},
    {"Float4_e2m1fn_x2", 1},
}};

using C = Collective;
constexpr TorchSizedBy kIn = TorchSizedBy::kInput;
constexpr TorchSizedBy kOut = TorchSizedBy::kOutput;

// ProcessGroupNCCL's profiling names (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp), the older
// spellings kept since dumps of older releases carry them.
constexpr std::array<TorchOp, 24> kOps{{
    {"all_reduce", C::kAllReduce, kIn, false},
    {"allreduce", C::kAllReduce, kIn, false},
    {"all_reduce_barrier", C::kAllReduce, kIn, false},
    {"barrier", C::kAllReduce, kIn, false},
    {"allreduce_coalesced", C::kAllReduce, kIn, true},
    {"all_gather", C::kAllGather, kOut, false},
    {"allgather", C::kAllGather, kOut, false},
    {"_allgather_base", C::kAllGather, kOut, false},
    {"all_gather_base", C::kAllGather, kOut, false},
    {"all_gather_into_tensor", C::kAllGather, kOut, false},
    {"all_gather_into_tensor_coalesced", C::kAllGather, kOut, true},
    {"reduce_scatter", C::kReduceScatter, kIn, false},
    {"_reduce_scatter_base", C::kReduceScatter, kIn, false},
    {"reduce_scatter_tensor", C::kReduceScatter, kIn, false},
    {"reduce_scatter_tensor_coalesced", C::kReduceScatter, kIn, true},
    {"broadcast", C::kBroadcast, kIn, false},
    {"reduce", C::kReduce, kIn, false},
    {"all_to_all", C::kAllToAll, kIn, false},
    {"alltoall", C::kAllToAll, kIn, false},
    {"alltoall_base", C::kAllToAll, kIn, false},
    {"all_to_all_single", C::kAllToAll, kIn, false},
    {"send", C::kSendRecv, kIn, false},
    {"recv", C::kSendRecv, kOut, false},
    {"recv_any_source", C::kSendRecv, kOut, false},
}};

}  // namespace

std::string_view torch_dtype_name(DataType dtype) {
  switch (dtype) {
    case DataType::kF32:
      return "Float";
    case DataType::kF16:
      return "Half";
    case DataType::kBF16:
      return "BFloat16";
    case DataType::kF64:
      return "Double";
    case DataType::kI32:
      return "Int";
    case DataType::kI64:
      return "Long";
  }
  return "Float";
}

std::optional<int> torch_dtype_bytes(std::string_view name) {
  for (const auto& [dtype, bytes] : kDtypeBytes) {
    if (dtype == name) return bytes;
  }
  return std::nullopt;
}

const TorchOp* torch_op(std::string_view type) {
  for (const TorchOp& op : kOps) {
    if (op.type == type) return &op;
  }
  return nullptr;
}

}  // namespace tandem
