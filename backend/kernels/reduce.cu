// Element-wise reduction and division kernels (see reduce.h).
//
// Bit-exact with core/dtype.cc: f16 / bf16 are converted by the same bit-level routines as the
// host (ported below, not cuda_fp16's intrinsics, whose NaN handling differs), the arithmetic is
// the same single IEEE float / double operation per element (no fast math, no FMA contraction
// possible in a lone add or multiply), min / max select an operand with the host's NaN rule, and
// integers wrap in the unsigned type. What can still differ is the payload of a NaN *produced* by
// an add or multiply (the GPU returns the canonical NaN, x86 propagates an operand's payload):
// both are NaN.
//
// Work layout. With a, b and dst at the same address modulo 16 (cudaMalloc'd buffers at element
// offsets that are multiples of 16 bytes, typically), the range is split into
//
//   | head: scalar | body: 16-byte vectors ....................... | tail: scalar |
//   a                ^ a rounded up to 16 bytes                       ^ last whole vector
//
// and a grid-stride loop walks "items": a head or tail element, or a whole 16-byte vector of the
// body. Otherwise every element is a scalar item.
//
// (No fmt here, nor core/error.h: fmt's headers do not compile under nvcc; see kernel_errors.h.)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/kernels/reduce.h"
#include "backend/kernels/kernel_errors.h"
#include "core/dtype_traits.h"

namespace tandem::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
// Enough blocks to fill an H100 / H200 (132 SMs x 2048 threads / 256) several times over; larger
// ranges loop (grid-stride).
constexpr int64_t kMaxBlocks = 4096;
constexpr uintptr_t kVectorBytes = 16;

// ---- f16 / bf16 <-> f32, ported bit for bit from core/dtype.cc (see the comments there) ----

__device__ inline float decode_half(uint16_t bits) {
  constexpr uint32_t kExponentMask = 0x7c00u << 13;
  constexpr float kSmallestNormal = 0x1p-14f;
  const uint32_t shifted = static_cast<uint32_t>(bits & 0x7fffu) << 13;
  const uint32_t exponent = shifted & kExponentMask;
  const uint32_t rebiased = shifted + (112u << 23);
  const uint32_t special = rebiased + (112u << 23);
  const float subnormal = __fsub_rn(__uint_as_float(rebiased + (1u << 23)), kSmallestNormal);
  uint32_t magnitude = exponent == kExponentMask ? special : rebiased;
  magnitude = exponent == 0 ? __float_as_uint(subnormal) : magnitude;
  return __uint_as_float(magnitude | (static_cast<uint32_t>(bits & 0x8000u) << 16));
}

__device__ inline uint16_t encode_half(float value) {
  constexpr uint32_t kHalfInfinity = 0x7c00u;
  constexpr uint32_t kHalfQuietBit = 0x0200u;
  const uint32_t bits = __float_as_uint(value);
  const uint32_t sign = (bits & 0x8000'0000u) >> 16;
  const uint32_t magnitude = bits & 0x7fff'ffffu;
  const uint32_t rebiased = magnitude - (112u << 23);
  const uint32_t normal = (rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13;
  constexpr float kHalf = 0.5f;
  // __fadd_rn: an explicit round-to-nearest add the compiler may not contract or reorder.
  const uint32_t subnormal = __float_as_uint(__fadd_rn(__uint_as_float(magnitude), kHalf)) - __float_as_uint(kHalf);
  const uint32_t nan = kHalfInfinity | kHalfQuietBit | ((magnitude >> 13) & 0x3ffu);
  uint32_t result = magnitude >= 0x3880'0000u ? normal : subnormal;
  result = magnitude >= 0x4780'0000u ? kHalfInfinity : result;
  result = magnitude > 0x7f80'0000u ? nan : result;
  return static_cast<uint16_t>(sign | result);
}

__device__ inline float decode_bfloat16(uint16_t bits) { return __uint_as_float(static_cast<uint32_t>(bits) << 16); }

__device__ inline uint16_t encode_bfloat16(float value) {
  constexpr uint32_t kBf16QuietBit = 0x0040u;
  const uint32_t bits = __float_as_uint(value);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t nan = (bits >> 16) | kBf16QuietBit;
  return static_cast<uint16_t>((bits & 0x7fff'ffffu) > 0x7f80'0000u ? nan : rounded);
}

// ---- element types: storage and compute type, as core/dtype.cc's Element<T> ----

template <typename T>
struct Element {
  using Storage = T;
  using Compute = T;
  __device__ static T load(T value) { return value; }
  __device__ static T store(T value) { return value; }
};
template <>
struct Element<Half> {
  using Storage = uint16_t;
  using Compute = float;
  __device__ static float load(uint16_t bits) { return decode_half(bits); }
  __device__ static uint16_t store(float value) { return encode_half(value); }
};
template <>
struct Element<BFloat16> {
  using Storage = uint16_t;
  using Compute = float;
  __device__ static float load(uint16_t bits) { return decode_bfloat16(bits); }
  __device__ static uint16_t store(float value) { return encode_bfloat16(value); }
};

// ---- operators (core/dtype.cc's SumOp ... MaxOp) ----

struct SumOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      using U = std::make_unsigned_t<C>;
      return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};
struct ProdOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      using U = std::make_unsigned_t<C>;
      return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};
// min / max propagate NaN from either operand, selecting (not computing) the result.
struct MinOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    return (a < b || a != a) ? a : b;  // NOLINT(misc-redundant-expression): NaN test
  }
};
struct MaxOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    return (a > b || a != a) ? a : b;  // NOLINT(misc-redundant-expression): NaN test
  }
};

// How the range splits into items (see the file comment). Items [0, head) and
// [head + vectors, head + vectors + tail) are elements, the others vectors.
struct Split {
  int64_t head = 0;
  int64_t vectors = 0;
  int64_t tail = 0;
  __host__ __device__ int64_t items() const { return head + vectors + tail; }
};

template <typename S>
Split split(const void* a, const void* b, const void* dst, int64_t count) {
  constexpr auto kPerVector = static_cast<int64_t>(kVectorBytes / sizeof(S));
  const auto address = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t misalignment = address % kVectorBytes;
  const bool shared = reinterpret_cast<uintptr_t>(a) % kVectorBytes == misalignment &&
                      reinterpret_cast<uintptr_t>(b) % kVectorBytes == misalignment && misalignment % sizeof(S) == 0;
  if (!shared) return {count, 0, 0};
  const int64_t head =
      std::min<int64_t>(count, static_cast<int64_t>((kVectorBytes - misalignment) % kVectorBytes / sizeof(S)));
  const int64_t vectors = (count - head) / kPerVector;
  return {head, vectors, count - head - vectors * kPerVector};
}

int blocks_for(int64_t items) {
  return static_cast<int>(std::clamp<int64_t>((items + kThreadsPerBlock - 1) / kThreadsPerBlock, 1, kMaxBlocks));
}

template <typename T, typename Operator>
__global__ void reduce_kernel(const typename Element<T>::Storage* a, const typename Element<T>::Storage* b,
                              typename Element<T>::Storage* dst, Split split, Operator op) {
  using E = Element<T>;
  using S = typename E::Storage;
  constexpr int kPerVector = static_cast<int>(kVectorBytes / sizeof(S));
  // A 16-byte vector viewed as its elements.
  union Vector {
    uint4 raw;
    S elements[kPerVector];
  };
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t body_end = split.head + split.vectors;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < split.items();
       item += stride) {
    if (item >= split.head && item < body_end) {
      const int64_t first = split.head + (item - split.head) * kPerVector;
      Vector va, vb, out;
      va.raw = *reinterpret_cast<const uint4*>(a + first);
      vb.raw = *reinterpret_cast<const uint4*>(b + first);
#pragma unroll
      for (int i = 0; i < kPerVector; ++i) out.elements[i] = E::store(op(E::load(va.elements[i]), E::load(vb.elements[i])));
      *reinterpret_cast<uint4*>(dst + first) = out.raw;
    } else {
      const int64_t element = item < split.head ? item : split.head + split.vectors * kPerVector + (item - body_end);
      dst[element] = E::store(op(E::load(a[element]), E::load(b[element])));
    }
  }
}

template <typename T>
__global__ void divide_kernel(typename Element<T>::Storage* data, int64_t count, int divisor) {
  using E = Element<T>;
  using C = typename E::Compute;
  const auto d = static_cast<C>(divisor);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    data[i] = E::store(E::load(data[i]) / d);
  }
}

template <typename T, typename Operator>
void launch_typed(const void* a, const void* b, void* dst, int64_t count, cudaStream_t stream, Operator op) {
  using S = typename Element<T>::Storage;
  const Split parts = split<S>(a, b, dst, count);
  reduce_kernel<T><<<blocks_for(parts.items()), kThreadsPerBlock, 0, stream>>>(
      static_cast<const S*>(a), static_cast<const S*>(b), static_cast<S*>(dst), parts, op);
}

template <typename T>
void launch_op(ReduceOp op, const void* a, const void* b, void* dst, int64_t count, cudaStream_t stream) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return launch_typed<T>(a, b, dst, count, stream, SumOp{});
    case ReduceOp::kProd:
      return launch_typed<T>(a, b, dst, count, stream, ProdOp{});
    case ReduceOp::kMin:
      return launch_typed<T>(a, b, dst, count, stream, MinOp{});
    case ReduceOp::kMax:
      return launch_typed<T>(a, b, dst, count, stream, MaxOp{});
  }
  fail_invalid_argument("cuda reduce: unknown reduce op " + std::to_string(static_cast<int>(op)));
}


}  // namespace

void launch_reduce(DataType type, ReduceOp op, const void* a, const void* b, void* dst, int64_t count,
                   cudaStream_t stream) {
  if (count <= 0) return;
  visit_dtype(type, [&]<typename T>(T) { launch_op<T>(op, a, b, dst, count, stream); });
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

void launch_divide(DataType type, void* data, int64_t count, int divisor, cudaStream_t stream) {
  if (divisor <= 0) {
    fail_invalid_argument("cuda divide: divisor " + std::to_string(divisor) + " is not positive");
  }
  if (count <= 0) return;
  visit_dtype(type, [&]<typename T>(T) {
    using S = typename Element<T>::Storage;
    divide_kernel<T><<<blocks_for(count), kThreadsPerBlock, 0, stream>>>(static_cast<S*>(data), count, divisor);
  });
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tandem::cuda
