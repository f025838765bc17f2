#include "core/data_check.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/dtype.h"
#include "core/dtype_traits.h"
#include "core/schedule.h"

namespace tandem {

namespace {

constexpr unsigned char kPoisonByte = 0xA5;

// Typed access to host buffers, by element type (core/dtype_traits.h): the storage type and its
// exact conversions from / to double.
template <typename T>
struct Codec {
  using Storage = T;
  static double load(Storage v) { return static_cast<double>(v); }
  static Storage store(double v) { return static_cast<T>(v); }
};
template <>
struct Codec<Half> {
  using Storage = uint16_t;
  static double load(Storage v) { return half_to_float(v); }
  static Storage store(double v) { return float_to_half(static_cast<float>(v)); }
};
template <>
struct Codec<BFloat16> {
  using Storage = uint16_t;
  static double load(Storage v) { return bfloat16_to_float(v); }
  static Storage store(double v) { return float_to_bfloat16(static_cast<float>(v)); }
};

template <typename Fn>
decltype(auto) with_codec(DataType dtype, Fn&& fn) {
  return visit_dtype(dtype, [&]<typename T>(T) -> decltype(auto) { return fn(Codec<T>{}); });
}

// splitmix64's finalizer: a cheap, well-mixed hash of one 64-bit word.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int significand_bits(DataType dtype) {
  switch (dtype) {
    case DataType::kF16:
      return 11;
    case DataType::kBF16:
      return 8;
    case DataType::kF32:
      return 24;
    case DataType::kF64:
      return 53;
    case DataType::kI32:
    case DataType::kI64:
      break;
  }
  return 63;
}

// The exact reduction of element `index` over every rank's input, in double.
struct Reduced {
  double value = 0;
  double magnitude_sum = 0;
};
Reduced reduce_reference(const CheckSpec& spec, int64_t index) {
  Reduced r;
  for (int rank = 0; rank < spec.nranks; ++rank) {
    double v = input_value(spec, rank, index);
    r.magnitude_sum += std::abs(v);
    if (rank == 0) {
      r.value = v;
      continue;
    }
    switch (spec.op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        r.value += v;
        break;
      case ReduceOp::kProd:
        r.value *= v;
        break;
      case ReduceOp::kMin:
        r.value = std::min(r.value, v);
        break;
      case ReduceOp::kMax:
        r.value = std::max(r.value, v);
        break;
    }
  }
  if (spec.op == ReduceOp::kAvg) {
    r.value /= spec.nranks;
    // Integer types divide with truncation toward zero (core/dtype.h).
    if (!is_floating(spec.dtype)) r.value = std::trunc(r.value);
  }
  return r;
}

template <typename Codec>
int64_t count_wrong_typed(const CheckSpec& spec, std::span<const RankBuffers> buffers) {
  using T = typename Codec::Storage;
  const int n = spec.nranks;
  const int64_t count = spec.count;
  auto output = [&](int rank) { return static_cast<const T*>(buffers[static_cast<size_t>(rank)].output); };
  int64_t wrong = 0;
  // Data movement: the pattern is exact in every type, so the stored value must come back exactly.
  auto check_moved = [&](int rank, int64_t out_index, int from_rank, int64_t in_index) {
    if (output(rank) == nullptr) return;  // another process's rank
    if (Codec::load(output(rank)[out_index]) != input_value(spec, from_rank, in_index)) ++wrong;
  };
  auto check_reduced = [&](int rank, int64_t out_index, const Reduced& reference) {
    if (output(rank) == nullptr) return;
    double got = Codec::load(output(rank)[out_index]);
    double tolerance = reduction_tolerance(spec.dtype, spec.op, n, reference.value, reference.magnitude_sum);
    if (!(std::abs(got - reference.value) <= tolerance)) ++wrong;  // NaN is wrong too
  };

  switch (spec.collective) {
    case Collective::kAllReduce:
      for (int64_t i = 0; i < count; ++i) {
        Reduced reference = reduce_reference(spec, i);
        for (int rank = 0; rank < n; ++rank) check_reduced(rank, i, reference);
      }
      break;
    case Collective::kReduce:
      for (int64_t i = 0; i < count; ++i) check_reduced(spec.root, i, reduce_reference(spec, i));
      break;
    case Collective::kReduceScatter:
      // Rank r receives block r of the reduced input.
      for (int rank = 0; rank < n; ++rank) {
        for (int64_t i = 0; i < count; ++i) check_reduced(rank, i, reduce_reference(spec, rank * count + i));
      }
      break;
    case Collective::kAllGather:
      // Output block b of every rank is rank b's input.
      for (int rank = 0; rank < n; ++rank) {
        for (int block = 0; block < n; ++block) {
          for (int64_t i = 0; i < count; ++i) check_moved(rank, block * count + i, block, i);
        }
      }
      break;
    case Collective::kBroadcast:
      for (int rank = 0; rank < n; ++rank) {
        for (int64_t i = 0; i < count; ++i) check_moved(rank, i, spec.root, i);
      }
      break;
    case Collective::kAllToAll:
      // Output block b of rank r is input block r of rank b.
      for (int rank = 0; rank < n; ++rank) {
        for (int block = 0; block < n; ++block) {
          for (int64_t i = 0; i < count; ++i) check_moved(rank, block * count + i, block, rank * count + i);
        }
      }
      break;
    case Collective::kSendRecv:
      // Every rank receives from rank - 1.
      for (int rank = 0; rank < n; ++rank) {
        int from = (rank + n - 1) % n;
        for (int64_t i = 0; i < count; ++i) check_moved(rank, i, from, i);
      }
      break;
  }
  return wrong;
}

}  // namespace

RankBuffers place_buffers(Collective collective, int rank, int64_t count, DataType dtype, bool in_place,
                          void* input_allocation, void* output_allocation) {
  auto* input = static_cast<std::byte*>(input_allocation);
  auto* output = static_cast<std::byte*>(output_allocation);
  if (in_place) {
    const int64_t offset = static_cast<int64_t>(rank) * count * static_cast<int64_t>(size_bytes(dtype));
    if (collective == Collective::kAllGather) {
      input = output + offset;
    } else if (collective == Collective::kReduceScatter) {
      output = input + offset;
    } else {
      input = output;
    }
  }
  return {input, output};
}

double input_value(const CheckSpec& spec, int rank, int64_t index) {
  uint64_t h = mix(mix(spec.seed ^ (static_cast<uint64_t>(rank) << 32)) ^ static_cast<uint64_t>(index));
  if (!is_reduction(spec.collective)) return static_cast<double>(static_cast<int64_t>(h % 201) - 100);
  if (spec.op == ReduceOp::kProd) {
    double v = (h & 1) != 0 ? 1.0 : -1.0;
    if (index % spec.nranks == rank) v *= 2;
    return v;
  }
  return static_cast<double>(static_cast<int64_t>(h % 5) - 2);
}

void fill_inputs(const CheckSpec& spec, std::span<const RankBuffers> buffers) {
  const int64_t elements =
      static_cast<int64_t>(buffer_geometry(spec.collective, spec.nranks).input_blocks) * spec.count;
  with_codec(spec.dtype, [&](auto codec) {
    using Codec = decltype(codec);
    using T = typename Codec::Storage;
    for (int rank = 0; rank < spec.nranks; ++rank) {
      T* data = static_cast<T*>(buffers[static_cast<size_t>(rank)].input);
      if (data == nullptr) continue;
      for (int64_t i = 0; i < elements; ++i) data[i] = Codec::store(input_value(spec, rank, i));
    }
  });
}

void poison_outputs(const CheckSpec& spec, std::span<const RankBuffers> buffers) {
  const int64_t elements =
      static_cast<int64_t>(buffer_geometry(spec.collective, spec.nranks).output_blocks) * spec.count;
  const size_t bytes = static_cast<size_t>(elements) * size_bytes(spec.dtype);
  for (int rank = 0; rank < spec.nranks; ++rank) {
    if (void* output = buffers[static_cast<size_t>(rank)].output; output != nullptr) {
      std::memset(output, kPoisonByte, bytes);
    }
  }
}

int64_t count_wrong(const CheckSpec& spec, std::span<const RankBuffers> buffers) {
  return with_codec(spec.dtype, [&](auto codec) { return count_wrong_typed<decltype(codec)>(spec, buffers); });
}

double reduction_tolerance(DataType dtype, ReduceOp op, int nranks, double expected, double magnitude_sum) {
  if (!is_floating(dtype)) return 0;
  if (op != ReduceOp::kSum && op != ReduceOp::kAvg) return 0;
  const int bits = significand_bits(dtype);
  const double unit_roundoff = std::ldexp(1.0, -bits);
  double tolerance = 0;
  if (magnitude_sum > std::ldexp(1.0, bits)) {
    // Partial sums may round: the textbook bound for recursive summation, in any order.
    tolerance += (nranks - 1) * unit_roundoff * magnitude_sum / (op == ReduceOp::kAvg ? nranks : 1);
  }
  if (op == ReduceOp::kAvg) tolerance += 2 * unit_roundoff * std::abs(expected);
  return tolerance;
}

}  // namespace tandem
