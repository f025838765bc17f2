// Test support for running collectives with real data: deterministic inputs, poisoned outputs,
// in-place aliasing as NCCL defines it, and a sequential reference computed in double.
//
// Tolerance (floating types only; integers and min / max must match exactly). With eps the type's
// machine epsilon (f32 2^-23, f16 2^-10, bf16 2^-7, f64 2^-52), n the rank count and x_j the n
// contributions to one element (as stored, i.e. already rounded to the type):
//   sum   |got - ref| <= n * eps * sum_j |x_j|
//   avg   |got - ref| <= 2 * eps * sum_j |x_j|
//   prod  |got - ref| <= n * eps * |ref|
// Any summation order of n terms in which every partial result is rounded once to the type is
// within (n - 1) * eps/2 * sum |x_j| of the exact sum (and a product of n factors within
// (n - 1) * eps/2 * |ref|); the bounds above allow twice that. avg adds one rounding of sum / n.
// The comparison fails on NaN, so a NaN output never passes.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/executor.h"

namespace tandem::test {

// Every output byte is set to this before a run: as f32 / bf16 / f64 it is a huge value (f16:
// NaN), as an integer far outside what the inputs can sum to, so an unwritten element fails.
inline constexpr unsigned char kPoisonByte = 0x7f;

// Element `index` of rank `rank`'s input for `spec` (before rounding to spec.dtype): integers
// (rank * 7 + index) % 11 - 5, floats uniform in [-1, 1) from a fixed seed; for kProd values whose
// products stay small (integers from {1, -1, 2}, floats of magnitude [0.8, 1.25)).
double input_value(const CollectiveSpec& spec, int rank, int64_t index);

// The machine epsilon of a floating type; 0 for integers.
double type_epsilon(DataType type);

// The buffers of one run of `spec` on every rank, in place or out of place.
class CollectiveData {
 public:
  CollectiveData(const CollectiveSpec& spec, bool in_place);

  std::span<const RankBuffers> buffers() const { return buffers_; }
  // Bytes of rank `rank`'s output (for tests that tamper with results).
  std::byte* output(int rank) const { return static_cast<std::byte*>(buffers_[static_cast<size_t>(rank)].output); }

  // Compares every output element that the collective defines (reduce: the root's only) with the
  // reference, and (out of place) checks that inputs are unchanged. Reports the first mismatches.
  ::testing::AssertionResult check() const;

 private:
  struct Expected {
    double value = 0;
    double tolerance = 0;
  };
  // The reference value of output element `element` of `rank`.
  Expected expected(int rank, int64_t element) const;
  double pristine_input(int rank, int64_t index) const;

  CollectiveSpec spec_;
  bool in_place_;
  int64_t input_elements_;
  int64_t output_elements_;
  size_t element_bytes_;
  std::vector<std::vector<std::byte>> pristine_inputs_;  // per rank, as generated
  std::vector<std::vector<std::byte>> storage_;          // per rank: output (and in place, input) memory
  std::vector<std::vector<std::byte>> input_storage_;    // per rank, out of place only
  std::vector<RankBuffers> buffers_;
};

// "all_reduce ring n=8 f32 sum count=1001 in-place" (for failure messages).
std::string describe(const CollectiveSpec& spec, Algorithm algorithm, bool in_place);

}  // namespace tandem::test
