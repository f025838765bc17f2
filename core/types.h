// The vocabulary shared by every layer: collectives, element types, reduction operators and
// algorithm names, with their command-line / file spellings.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tandem {

enum class Collective : uint8_t {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSendRecv,  // every rank sends to rank+1 and receives from rank-1 (nccl-tests' sendrecv)
};

enum class DataType : uint8_t { kF32, kF16, kBF16, kF64, kI32, kI64 };

enum class ReduceOp : uint8_t { kSum, kProd, kMin, kMax, kAvg };

// A new algorithm is a value here, an entry in core/algorithms.cc and a builder in core/algorithms/.
enum class Algorithm : uint8_t {
  kRing,
  kTree,
  kRecursiveDoubling,
  kHalvingDoubling,
  kDirect,
  kHierarchical,
  kPat,   // NCCL's Parallel Aggregated Trees (all_gather, reduce_scatter)
  kAuto,  // chosen per call by the Communicator's selector
};

std::span<const Collective> all_collectives();
std::span<const DataType> all_data_types();
std::span<const ReduceOp> all_reduce_ops();
// Every algorithm in the registry's order, without kAuto (core/algorithms.cc: its table holds each
// algorithm's name, which name(Algorithm) and parse_algorithm read).
std::span<const Algorithm> all_algorithms();

// Spellings used on the command line and in files ("all_reduce", "bf16", "halving_doubling").
std::string_view name(Collective c);
std::string_view name(DataType t);
std::string_view name(ReduceOp op);
std::string_view name(Algorithm a);

// Parsers accept the spellings above (and nccl-tests' dtype names: float, half, bfloat16, double,
// int32, int64); anything else throws Error(kInvalidArgument) listing the accepted names.
Collective parse_collective(std::string_view text);
DataType parse_data_type(std::string_view text);
ReduceOp parse_reduce_op(std::string_view text);
Algorithm parse_algorithm(std::string_view text);

size_t size_bytes(DataType t);
bool is_floating(DataType t);

// True for collectives whose result is a reduction (the op matters, avg divides by nranks).
bool is_reduction(Collective c);

}  // namespace tandem
