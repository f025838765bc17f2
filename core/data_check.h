// The data check behind the #wrong column of `tandem bench`: deterministic input patterns and a
// sequential reference that every output element is compared with.
//
// Inputs are small integers chosen per (seed, rank, element) by a hash, so that reductions are exact
// in every data type, half and bfloat16 included, whatever order an algorithm reduces in:
//   - data movement (all_gather, broadcast, all_to_all, send_recv): values in [-100, 100];
//   - sum, avg, min, max: values in [-2, 2];
//   - prod: values +-1, and element i of rank i % nranks doubled, so every product is +-1 or +-2.
// Tolerance (see reduction_tolerance): integer types and data movement are compared exactly; so are
// float min / max / prod and float sums whose magnitudes stay within the type's significand (then
// every partial sum is an exact integer). Beyond that, and for avg's final division, the classic
// summation bound applies.
#pragma once

#include <cstdint>
#include <span>

#include "core/executor.h"
#include "core/types.h"

namespace tandem {

struct CheckSpec {
  Collective collective = Collective::kAllReduce;
  DataType dtype = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  int nranks = 1;
  int64_t count = 0;  // the collective's count (elements per block, as the Communicator takes it)
  uint64_t seed = 0;  // a different seed gives different inputs
};

// The buffers one rank passes to a collective, given its own input and output allocations (each
// large enough for the collective's blocks of `count` elements). Out of place: the allocations as
// they are. In place, aliased as NCCL defines it (core/schedule.h): all_gather's input is output
// block `rank`; reduce_scatter's output is input block `rank`; the others use the output
// allocation for both.
RankBuffers place_buffers(Collective collective, int rank, int64_t count, DataType dtype, bool in_place,
                          void* input_allocation, void* output_allocation);

// Input element `index` (0 <= index < input blocks * count) of `rank`, as an exact double.
double input_value(const CheckSpec& spec, int rank, int64_t index);

// fill_inputs, poison_outputs and count_wrong skip ranks whose buffers are null (ranks of other
// processes under a process-per-rank launch).

// Writes the pattern into every rank's input (input blocks * count elements at buffers[r].input).
void fill_inputs(const CheckSpec& spec, std::span<const RankBuffers> buffers);

// Overwrites every rank's output (output blocks * count elements) with a byte pattern that is no
// value any correct result can take (NaN-free garbage for floats, a huge negative integer for ints).
void poison_outputs(const CheckSpec& spec, std::span<const RankBuffers> buffers);

// Number of output elements, over all ranks, that differ from the sequential reference beyond
// reduction_tolerance. Checks every element a collective defines (reduce: the root's output only).
// Inputs must hold fill_inputs' pattern for the same spec when the collective ran.
int64_t count_wrong(const CheckSpec& spec, std::span<const RankBuffers> buffers);

// Allowed |result - exact| for a reduced element whose exact value is `expected` and whose
// contributions have absolute values summing to `magnitude_sum`. 0 for integers, min, max, prod,
// and sums that fit the significand (2^p: 11 bits half, 8 bfloat16, 24 float, 53 double); otherwise
// (n-1) * u * magnitude_sum (u = 2^-p, the unit roundoff), divided by n for avg. avg adds 2 * u *
// |expected| for its final, rounded division.
double reduction_tolerance(DataType dtype, ReduceOp op, int nranks, double expected, double magnitude_sum);

}  // namespace tandem
