#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/dtype_traits.h"
#include "core/error.h"

namespace tandem {

// ---------------------------------------------------------------------------------------------
// binary16 / bfloat16 <-> binary32
//
//   binary32  s eeeeeeee mmmmmmmmmmmmmmmmmmmmmmm   bias 127
//   binary16  s eeeee mmmmmmmmmm                    bias 15, 13 fewer mantissa bits
//   bfloat16  s eeeeeeee mmmmmmm                    the top 16 bits of a binary32
//
// Narrowing rounds to nearest, ties to even: adding (half an ulp - 1) plus the lowest kept bit
// before shifting rounds up exactly when the dropped bits exceed half an ulp, or equal it and the
// kept value is odd. A carry out of the mantissa correctly bumps the exponent (and the largest
// finite value rounds up to infinity the same way). The conversions are written as selects
// rather than branches so that the reduction loops over f16 / bf16 vectorize.
// ---------------------------------------------------------------------------------------------

namespace {

constexpr uint32_t kF32SignMask = 0x8000'0000u;
constexpr uint32_t kF32AbsMask = 0x7fff'ffffu;
constexpr uint32_t kF32Infinity = 0x7f80'0000u;
constexpr uint16_t kHalfInfinity = 0x7c00u;
constexpr uint16_t kHalfQuietBit = 0x0200u;
constexpr uint16_t kBf16QuietBit = 0x0040u;

inline float decode_half(uint16_t bits) {
  // Move exponent and mantissa into binary32 position and rebias 15 -> 127. Two exponents need
  // fixing: all ones (inf / NaN) must become 255, and zero (subnormal m * 2^-24) is computed
  // exactly in float as (1 + m/1024) * 2^-14 - 2^-14. Written as selects so loops vectorize.
  constexpr uint32_t kExponentMask = 0x7c00u << 13;
  constexpr float kSmallestNormal = 0x1p-14f;  // the binary32 pattern 113 << 23
  const uint32_t shifted = static_cast<uint32_t>(bits & 0x7fffu) << 13;
  const uint32_t exponent = shifted & kExponentMask;
  const uint32_t rebiased = shifted + (112u << 23);
  const uint32_t special = rebiased + (112u << 23);
  const float subnormal = std::bit_cast<float>(rebiased + (1u << 23)) - kSmallestNormal;
  uint32_t magnitude = exponent == kExponentMask ? special : rebiased;
  magnitude = exponent == 0 ? std::bit_cast<uint32_t>(subnormal) : magnitude;
  return std::bit_cast<float>(magnitude | (static_cast<uint32_t>(bits & 0x8000u) << 16));
}

inline uint16_t encode_half(float value) {
  // All three paths are computed and selected (no branches), so conversion loops vectorize.
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits & kF32SignMask) >> 16;
  const uint32_t magnitude = bits & kF32AbsMask;
  // Normal half (|value| >= 2^-14): rebias 127 -> 15 (subtract 112 << 23), then drop 13 mantissa
  // bits rounding to nearest even. Values in [65520, 65536) carry into the exponent and become
  // infinity, as IEEE rounding demands.
  const uint32_t rebiased = magnitude - (112u << 23);
  const uint32_t normal = (rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13;
  // Subnormal half (or zero): round(|value| / 2^-24). Adding 0.5 (whose ulp is 2^-24) lets the
  // FPU do that rounding, to nearest even in the default rounding mode; the mantissa bits of the
  // sum are then the subnormal's.
  constexpr float kHalf = 0.5f;
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) + kHalf) - std::bit_cast<uint32_t>(kHalf);
  // NaN keeps its top payload bits and is forced quiet, so it stays NaN.
  const uint32_t nan = kHalfInfinity | kHalfQuietBit | ((magnitude >> 13) & 0x3ffu);
  uint32_t result = magnitude >= 0x3880'0000u ? normal : subnormal;
  result = magnitude >= 0x4780'0000u ? kHalfInfinity : result;  // >= 65536 (or inf): overflow
  result = magnitude > kF32Infinity ? nan : result;
  return static_cast<uint16_t>(sign | result);
}

inline float decode_bfloat16(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

inline uint16_t encode_bfloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  // Round to nearest even on the 16 dropped bits; overflow carries into infinity. A NaN is
  // truncated and forced quiet instead: rounding could carry its payload away into infinity.
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t nan = (bits >> 16) | kBf16QuietBit;
  return static_cast<uint16_t>((bits & kF32AbsMask) > kF32Infinity ? nan : rounded);
}

}  // namespace

float half_to_float(uint16_t bits) { return decode_half(bits); }
uint16_t float_to_half(float value) { return encode_half(value); }
float bfloat16_to_float(uint16_t bits) { return decode_bfloat16(bits); }
void fail_unknown_dtype(int value) { fail(ErrorCode::kInvalidArgument, "unknown data type {}", value); }

uint16_t float_to_bfloat16(float value) { return encode_bfloat16(value); }

// ---------------------------------------------------------------------------------------------
// Typed element access. Every public entry switches on the type once; the loops below are
// templates over a storage type and an arithmetic type (f16 / bf16 compute in float).
// ---------------------------------------------------------------------------------------------

namespace {

// How each element type is stored and computed with: load / store convert between the two.
template <typename T>
struct Element {
  using Storage = T;
  using Compute = T;
  static T load(T value) { return value; }
  static T store(T value) { return value; }
};
template <>
struct Element<Half> {
  using Storage = uint16_t;
  using Compute = float;
  static float load(uint16_t bits) { return decode_half(bits); }
  static uint16_t store(float value) { return encode_half(value); }
};
template <>
struct Element<BFloat16> {
  using Storage = uint16_t;
  using Compute = float;
  static float load(uint16_t bits) { return decode_bfloat16(bits); }
  static uint16_t store(float value) { return encode_bfloat16(value); }
};

// Integer sum and product wrap around (two's complement, as NCCL's kernels do) instead of being
// undefined behaviour: compute in the unsigned type.
template <typename C>
C wrapping_add(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename C>
C wrapping_mul(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// min / max propagate NaN (either operand): a result check must never pass because a NaN
// compared false. `a != a` is the NaN test that also works for integers (always false).
struct SumOp {
  template <typename C>
  C operator()(C a, C b) const {
    return wrapping_add(a, b);
  }
};
struct ProdOp {
  template <typename C>
  C operator()(C a, C b) const {
    return wrapping_mul(a, b);
  }
};
struct MinOp {
  template <typename C>
  C operator()(C a, C b) const {
    return (a < b || a != a) ? a : b;  // NOLINT(misc-redundant-expression): NaN test
  }
};
struct MaxOp {
  template <typename C>
  C operator()(C a, C b) const {
    return (a > b || a != a) ? a : b;  // NOLINT(misc-redundant-expression): NaN test
  }
};

// The hot loop; the caller's buffers hold aligned arrays of the storage type.
template <typename T, typename Operator>
void reduce_loop(const void* a, const void* b, void* dst, int64_t count, Operator op) {
  using E = Element<T>;
  using S = typename E::Storage;
  const auto* sa = static_cast<const S*>(a);
  const auto* sb = static_cast<const S*>(b);
  auto* sdst = static_cast<S*>(dst);
  for (int64_t i = 0; i < count; ++i) sdst[i] = E::store(op(E::load(sa[i]), E::load(sb[i])));
}

template <typename T>
void reduce_typed(ReduceOp op, const void* a, const void* b, void* dst, int64_t count) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return reduce_loop<T>(a, b, dst, count, SumOp{});
    case ReduceOp::kProd:
      return reduce_loop<T>(a, b, dst, count, ProdOp{});
    case ReduceOp::kMin:
      return reduce_loop<T>(a, b, dst, count, MinOp{});
    case ReduceOp::kMax:
      return reduce_loop<T>(a, b, dst, count, MaxOp{});
  }
  fail(ErrorCode::kInvalidArgument, "unknown reduce op {}", static_cast<int>(op));
}

// double -> integer with truncation toward zero, saturating at the type's range; NaN becomes 0.
template <typename I>
I saturating_cast(double value) {
  if (std::isnan(value)) return 0;
  // The bounds as doubles: min is a power of two (exact); max + 1 is one too.
  constexpr double kLow = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double kHighExclusive = -kLow;
  if (value <= kLow) return std::numeric_limits<I>::min();
  if (value >= kHighExclusive) return std::numeric_limits<I>::max();
  return static_cast<I>(value);
}

}  // namespace

double load_element(DataType type, const void* base, int64_t index) {
  return visit_dtype(type, [&]<typename T>(T) -> double {
    using S = typename Element<T>::Storage;
    S value;
    std::memcpy(&value, static_cast<const std::byte*>(base) + index * static_cast<int64_t>(sizeof(S)), sizeof(S));
    return static_cast<double>(Element<T>::load(value));
  });
}

void store_element(DataType type, void* base, int64_t index, double value) {
  visit_dtype(type, [&]<typename T>(T) {
    using S = typename Element<T>::Storage;
    S stored;
    if constexpr (std::is_integral_v<T>) {
      stored = saturating_cast<T>(value);
    } else {
      // f16 / bf16 go through float: a double rounded to float first can double-round, which is
      // acceptable for test data and for the final avg division (both round once from float).
      stored = Element<T>::store(static_cast<typename Element<T>::Compute>(value));
    }
    std::memcpy(static_cast<std::byte*>(base) + index * static_cast<int64_t>(sizeof(S)), &stored, sizeof(S));
  });
}

void reduce_elements(DataType type, ReduceOp op, const void* a, const void* b, void* dst, int64_t count) {
  if (count <= 0) return;
  visit_dtype(type, [&]<typename T>(T) { reduce_typed<T>(op, a, b, dst, count); });
}

void divide_elements(DataType type, void* data, int64_t count, int divisor) {
  if (divisor <= 0) fail(ErrorCode::kInvalidArgument, "divide_elements: divisor {} is not positive", divisor);
  if (count <= 0) return;
  visit_dtype(type, [&]<typename T>(T) {
    using E = Element<T>;
    using C = typename E::Compute;
    auto* values = static_cast<typename E::Storage*>(data);
    const auto d = static_cast<C>(divisor);
    for (int64_t i = 0; i < count; ++i) values[i] = E::store(E::load(values[i]) / d);
  });
}

}  // namespace tandem
