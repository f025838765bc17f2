// Element types on host memory: f16 / bf16 conversions and element-wise reductions. Used by the
// host backend (the reference executor) and by result checks.
#pragma once

#include <cstdint>

#include "core/types.h"

namespace tandem {

// IEEE binary16 and bfloat16 from / to float, round to nearest even; NaN stays NaN, overflow
// goes to infinity.
float half_to_float(uint16_t bits);
uint16_t float_to_half(float value);
float bfloat16_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);

// Element `index` of an array of `type` as a double, and the reverse (rounded to the type;
// integers are converted with truncation toward zero, saturating).
double load_element(DataType type, const void* base, int64_t index);
void store_element(DataType type, void* base, int64_t index, double value);

// dst[i] = a[i] (+) b[i] for i < count. dst may alias a or b. kAvg reduces as kSum.
// f16 / bf16 are reduced in float and rounded once per element per call (as NCCL does).
void reduce_elements(DataType type, ReduceOp op, const void* a, const void* b, void* dst, int64_t count);

// data[i] /= divisor (kAvg's final step). Integers divide with truncation toward zero.
void divide_elements(DataType type, void* data, int64_t count, int divisor);

}  // namespace tandem
