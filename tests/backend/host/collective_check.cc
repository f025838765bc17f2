#include "tests/backend/host/collective_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/types.h"

namespace tandem::test {
namespace {

constexpr uint64_t kSeed = 0x7a6e'6465'6d00'0001ull;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e37'79b9'7f4a'7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58'476d'1ce4'e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d0'49bb'1331'11ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from (rank, index).
double unit_random(int rank, int64_t index) {
  const uint64_t bits = splitmix64(splitmix64(kSeed ^ static_cast<uint64_t>(rank)) ^ static_cast<uint64_t>(index));
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

bool is_integer(DataType type) { return type == DataType::kI32 || type == DataType::kI64; }

template <typename T, typename Convert>
void fill_typed(const CollectiveSpec& spec, int rank, int64_t count, void* data, Convert convert) {
  auto* values = static_cast<T*>(data);
  for (int64_t i = 0; i < count; ++i) values[i] = convert(input_value(spec, rank, i));
}

// store_element() for every element, with the type switch hoisted out of the loop (1 Mi-element
// cases fill tens of millions of elements).
void fill_inputs(const CollectiveSpec& spec, int rank, int64_t count, void* data) {
  switch (spec.dtype) {
    case DataType::kF32:
      return fill_typed<float>(spec, rank, count, data, [](double v) { return float(v); });
    case DataType::kF16:
      return fill_typed<uint16_t>(spec, rank, count, data, [](double v) { return float_to_half(float(v)); });
    case DataType::kBF16:
      return fill_typed<uint16_t>(spec, rank, count, data, [](double v) { return float_to_bfloat16(float(v)); });
    case DataType::kF64:
      return fill_typed<double>(spec, rank, count, data, [](double v) { return v; });
    case DataType::kI32:
      return fill_typed<int32_t>(spec, rank, count, data, [](double v) { return int32_t(v); });
    case DataType::kI64:
      return fill_typed<int64_t>(spec, rank, count, data, [](double v) { return int64_t(v); });
  }
}

}  // namespace

double input_value(const CollectiveSpec& spec, int rank, int64_t index) {
  if (is_integer(spec.dtype)) {
    if (spec.op == ReduceOp::kProd) {
      constexpr double kFactors[] = {1, -1, 2};
      return kFactors[(rank * 7 + index) % 3];
    }
    return static_cast<double>((rank * 7 + index) % 11 - 5);
  }
  const double u = unit_random(rank, index);
  if (spec.op == ReduceOp::kProd) {
    // |product| of 16 factors stays within [0.8^16, 1.25^16] = [0.028, 36]: no overflow, and no
    // f16 subnormals, whose absolute rounding would break the relative tolerance.
    const double magnitude = 0.8 + 0.45 * u;
    return (splitmix64(static_cast<uint64_t>(index) * 31 + static_cast<uint64_t>(rank)) & 1) ? -magnitude : magnitude;
  }
  return 2 * u - 1;
}

double type_epsilon(DataType type) {
  switch (type) {
    case DataType::kF32:
      return 0x1p-23;
    case DataType::kF16:
      return 0x1p-10;
    case DataType::kBF16:
      return 0x1p-7;
    case DataType::kF64:
      return 0x1p-52;
    case DataType::kI32:
    case DataType::kI64:
      return 0;
  }
  return 0;
}

std::string describe(const CollectiveSpec& spec, Algorithm algorithm, bool in_place) {
  return fmt::format("{} {} n={} {} {} count={} root={} {}", name(spec.collective), name(algorithm), spec.nranks,
                     name(spec.dtype), name(spec.op), spec.count, spec.root, in_place ? "in-place" : "out-of-place");
}

CollectiveData::CollectiveData(const CollectiveSpec& spec, bool in_place)
    : spec_(spec), in_place_(in_place), element_bytes_(size_bytes(spec.dtype)) {
  const BufferGeometry geometry = buffer_geometry(spec.collective, spec.nranks);
  if (in_place && !geometry.in_place_supported) {
    fail(ErrorCode::kInvalidArgument, "{} has no in-place form", name(spec.collective));
  }
  input_elements_ = geometry.input_blocks * spec.count;
  output_elements_ = geometry.output_blocks * spec.count;
  const auto n = static_cast<size_t>(spec.nranks);
  pristine_inputs_.resize(n);
  storage_.resize(n);
  input_storage_.resize(n);
  buffers_.resize(n);
  for (int rank = 0; rank < spec.nranks; ++rank) {
    auto& pristine = pristine_inputs_[static_cast<size_t>(rank)];
    pristine.resize(static_cast<size_t>(input_elements_) * element_bytes_);
    fill_inputs(spec, rank, input_elements_, pristine.data());

    auto& storage = storage_[static_cast<size_t>(rank)];
    RankBuffers& buffers = buffers_[static_cast<size_t>(rank)];
    const size_t block_bytes = static_cast<size_t>(spec.count) * element_bytes_;
    if (!in_place) {
      input_storage_[static_cast<size_t>(rank)] = pristine;
      storage.assign(static_cast<size_t>(output_elements_) * element_bytes_, std::byte{kPoisonByte});
      buffers.input = input_storage_[static_cast<size_t>(rank)].data();
      buffers.output = storage.data();
      continue;
    }
    // In place as NCCL defines it: all_gather's input is output block `rank`, reduce_scatter's
    // output is input block `rank`, the others share one buffer.
    switch (spec.collective) {
      case Collective::kAllGather:
        storage.assign(static_cast<size_t>(output_elements_) * element_bytes_, std::byte{kPoisonByte});
        std::copy(pristine.begin(), pristine.end(), storage.begin() + static_cast<std::ptrdiff_t>(rank * block_bytes));
        buffers.output = storage.data();
        buffers.input = storage.data() + rank * block_bytes;
        break;
      case Collective::kReduceScatter:
        storage = pristine;
        buffers.input = storage.data();
        buffers.output = storage.data() + rank * block_bytes;
        break;
      default:
        storage = pristine;
        buffers.input = storage.data();
        buffers.output = storage.data();
        break;
    }
  }
}

double CollectiveData::pristine_input(int rank, int64_t index) const {
  return load_element(spec_.dtype, pristine_inputs_[static_cast<size_t>(rank)].data(), index);
}

CollectiveData::Expected CollectiveData::expected(int rank, int64_t element) const {
  const int n = spec_.nranks;
  const int64_t count = spec_.count;
  switch (spec_.collective) {
    case Collective::kAllGather:
      return {pristine_input(static_cast<int>(element / count), element % count), 0};
    case Collective::kBroadcast:
      return {pristine_input(spec_.root, element), 0};
    case Collective::kAllToAll:
      return {pristine_input(static_cast<int>(element / count), rank * count + element % count), 0};
    case Collective::kSendRecv:
      return {pristine_input((rank + n - 1) % n, element), 0};
    case Collective::kAllReduce:
    case Collective::kReduce:
    case Collective::kReduceScatter:
      break;
  }
  // Reductions: combine the n contributions in rank order, in double.
  const int64_t index = spec_.collective == Collective::kReduceScatter ? rank * count + element : element;
  double value = pristine_input(0, index);
  double magnitude_sum = std::abs(value);
  for (int source = 1; source < n; ++source) {
    const double x = pristine_input(source, index);
    magnitude_sum += std::abs(x);
    switch (spec_.op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        value += x;
        break;
      case ReduceOp::kProd:
        value *= x;
        break;
      case ReduceOp::kMin:
        value = std::min(value, x);
        break;
      case ReduceOp::kMax:
        value = std::max(value, x);
        break;
    }
  }
  const double eps = type_epsilon(spec_.dtype);
  switch (spec_.op) {
    case ReduceOp::kSum:
      return {value, n * eps * magnitude_sum};
    case ReduceOp::kAvg:
      return {is_integer(spec_.dtype) ? std::trunc(value / n) : value / n, 2 * eps * magnitude_sum};
    case ReduceOp::kProd:
      return {value, n * eps * std::abs(value)};
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return {value, 0};
  }
  return {value, 0};
}

::testing::AssertionResult CollectiveData::check() const {
  constexpr int kReported = 5;
  int64_t mismatches = 0;
  std::string report;
  const auto compare = [&](int rank, int64_t element, const Expected& want) {
    const double got = load_element(spec_.dtype, output(rank), element);
    if (std::abs(got - want.value) <= want.tolerance) return;  // false for NaN
    if (++mismatches <= kReported) {
      report += fmt::format("\n  rank {} output[{}] = {}, expected {} (tolerance {:g})", rank, element, got, want.value,
                            want.tolerance);
    }
  };
  const bool same_on_every_rank =
      spec_.collective == Collective::kAllReduce || spec_.collective == Collective::kBroadcast;
  if (same_on_every_rank) {
    for (int64_t element = 0; element < output_elements_; ++element) {
      const Expected want = expected(0, element);
      for (int rank = 0; rank < spec_.nranks; ++rank) compare(rank, element, want);
    }
  } else {
    for (int rank = 0; rank < spec_.nranks; ++rank) {
      if (spec_.collective == Collective::kReduce && rank != spec_.root) continue;
      for (int64_t element = 0; element < output_elements_; ++element) compare(rank, element, expected(rank, element));
    }
  }
  if (!in_place_) {
    for (int rank = 0; rank < spec_.nranks; ++rank) {
      const auto& now = input_storage_[static_cast<size_t>(rank)];
      const auto& before = pristine_inputs_[static_cast<size_t>(rank)];
      if (now == before) continue;
      const auto first = std::mismatch(now.begin(), now.end(), before.begin()).first - now.begin();
      ++mismatches;
      report += fmt::format("\n  rank {} input element {} was modified", rank,
                            first / static_cast<std::ptrdiff_t>(element_bytes_));
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << mismatches << " wrong elements" << report;
}

}  // namespace tandem::test
