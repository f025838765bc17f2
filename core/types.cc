#include "core/types.h"

#include <array>
#include <string>

#include "core/error.h"

namespace tandem {
namespace {

constexpr std::array kCollectives = {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
                                     Collective::kBroadcast, Collective::kReduce,        Collective::kAllToAll,
                                     Collective::kSendRecv};
constexpr std::array kDataTypes = {DataType::kF32, DataType::kF16, DataType::kBF16,
                                   DataType::kF64, DataType::kI32, DataType::kI64};
constexpr std::array kReduceOps = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};

// Parses `text` against the spellings of every value in `values` plus extra aliases.
template <typename T, size_t N>
T parse_named(std::string_view text, const std::array<T, N>& values, std::string_view what,
              std::initializer_list<std::pair<std::string_view, T>> aliases = {}) {
  for (T value : values) {
    if (name(value) == text) return value;
  }
  for (const auto& [alias, value] : aliases) {
    if (alias == text) return value;
  }
  std::string accepted;
  for (T value : values) accepted += (accepted.empty() ? "" : ", ") + std::string(name(value));
  fail(ErrorCode::kInvalidArgument, "unknown {} '{}' (expected one of: {})", what, text, accepted);
}

}  // namespace

std::span<const Collective> all_collectives() { return kCollectives; }
std::span<const DataType> all_data_types() { return kDataTypes; }
std::span<const ReduceOp> all_reduce_ops() { return kReduceOps; }

std::string_view name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllGather: return "all_gather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kSendRecv: return "send_recv";
  }
  return "?";
}

std::string_view name(DataType t) {
  switch (t) {
    case DataType::kF32: return "f32";
    case DataType::kF16: return "f16";
    case DataType::kBF16: return "bf16";
    case DataType::kF64: return "f64";
    case DataType::kI32: return "i32";
    case DataType::kI64: return "i64";
  }
  return "?";
}

std::string_view name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "?";
}

Collective parse_collective(std::string_view text) {
  return parse_named(text, kCollectives, "collective",
                     {{"allreduce", Collective::kAllReduce},
                      {"reducescatter", Collective::kReduceScatter},
                      {"allgather", Collective::kAllGather},
                      {"alltoall", Collective::kAllToAll},
                      {"sendrecv", Collective::kSendRecv}});
}

DataType parse_data_type(std::string_view text) {
  return parse_named(text, kDataTypes, "data type",
                     {{"float", DataType::kF32},
                      {"float32", DataType::kF32},
                      {"half", DataType::kF16},
                      {"float16", DataType::kF16},
                      {"bfloat16", DataType::kBF16},
                      {"double", DataType::kF64},
                      {"float64", DataType::kF64},
                      {"int32", DataType::kI32},
                      {"int", DataType::kI32},
                      {"int64", DataType::kI64}});
}

ReduceOp parse_reduce_op(std::string_view text) { return parse_named(text, kReduceOps, "reduction op"); }

size_t size_bytes(DataType t) {
  switch (t) {
    case DataType::kF16:
    case DataType::kBF16: return 2;
    case DataType::kF32:
    case DataType::kI32: return 4;
    case DataType::kF64:
    case DataType::kI64: return 8;
  }
  return 0;
}

bool is_floating(DataType t) { return t != DataType::kI32 && t != DataType::kI64; }

bool is_reduction(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kInvalidSchedule: return "invalid schedule";
    case ErrorCode::kCheckFailed: return "check failed";
    case ErrorCode::kFormat: return "format error";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kBackend: return "backend error";
    case ErrorCode::kIo: return "i/o error";
    case ErrorCode::kFault: return "fault";
    case ErrorCode::kDesync: return "desync";
    case ErrorCode::kCorrupt: return "corrupt data";
  }
  return "error";
}

}  // namespace tandem
