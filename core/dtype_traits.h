// The element type behind each DataType, for code that loops over elements: the host reference
// (core/dtype.cc) and the CUDA kernels (backend/kernels). Header-only and free of fmt and
// exceptions' formatting, so that nvcc can include it.
#pragma once

#include <cstdint>

#include "core/types.h"

namespace tandem {

// Tags for the two 16-bit float types, stored as uint16_t (each side converts to float its way).
struct Half {};
struct BFloat16 {};

// Throws Error(kInvalidArgument) naming the value: a DataType outside the enum (core/dtype.cc).
[[noreturn]] void fail_unknown_dtype(int value);

// Calls `function(T{})` with the element type (or tag) of `type`: float, Half, BFloat16, double,
// int32_t or int64_t, and returns what it returns.
template <typename Function>
decltype(auto) visit_dtype(DataType type, Function&& function) {
  switch (type) {
    case DataType::kF32:
      return function(float{});
    case DataType::kF16:
      return function(Half{});
    case DataType::kBF16:
      return function(BFloat16{});
    case DataType::kF64:
      return function(double{});
    case DataType::kI32:
      return function(int32_t{});
    case DataType::kI64:
      return function(int64_t{});
  }
  fail_unknown_dtype(static_cast<int>(type));
}

}  // namespace tandem
