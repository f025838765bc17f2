// The CUDA error check and device count of reduce.h, and kernel_errors.h: plain C++, because fmt's
// headers (core/error.h) do not compile under nvcc.
#include <cuda_runtime_api.h>

#include "backend/kernels/kernel_errors.h"
#include "backend/kernels/reduce.h"
#include "core/error.h"

namespace tandem::cuda {

void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  fail(ErrorCode::kBackend, "{} failed at {}:{}: {} ({})", call, file, line, cudaGetErrorString(status),
       cudaGetErrorName(status));
}

void fail_invalid_argument(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so that later calls do not report it
    return 0;
  }
  return count;
}

}  // namespace tandem::cuda
