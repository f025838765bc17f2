// Element-wise reduction kernels on device memory, for every DataType x ReduceOp: what the cuda
// executor runs for Reduce / RecvReduce ops and the nccl executor after its receives. Same results
// as core/dtype.h's reduce_elements (the host reference): f16 / bf16 are reduced in float and
// rounded once per element per call; integers wrap as two's complement; kAvg reduces as kSum.
// Vectorized: 16-byte loads and stores where a, b and dst share 16-byte alignment, a scalar tail.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/types.h"

namespace tandem::cuda {

// dst[i] = a[i] (+) b[i] for i < count, enqueued on `stream`. dst may alias a or b. Throws
// Error(kBackend) when the launch fails.
void launch_reduce(DataType type, ReduceOp op, const void* a, const void* b, void* dst, int64_t count,
                   cudaStream_t stream);

// data[i] /= divisor (kAvg's final step), integers truncating toward zero, as divide_elements.
void launch_divide(DataType type, void* data, int64_t count, int divisor, cudaStream_t stream);

// Throws Error(kBackend) "<call> failed at <file>:<line>: <cudaGetErrorString>" when `status` is
// not cudaSuccess. Use through TANDEM_CUDA_CHECK(call).
void check(cudaError_t status, const char* call, const char* file, int line);
#define TANDEM_CUDA_CHECK(call) ::tandem::cuda::check((call), #call, __FILE__, __LINE__)

// Visible CUDA devices; 0 when there is no device or no driver (never throws).
int device_count();

}  // namespace tandem::cuda
