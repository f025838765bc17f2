// tandem_kernel_bench: the memory bandwidth of one GPU as a device-to-device copy reaches it, and the
// bandwidth of backend/cuda's reduction kernels (tandem::cuda::launch_reduce, sum) as a fraction of
// it, per data type. bench/gpu/run.sh runs it and bench/gpu/summarize.py reads its output.
//
// Bandwidth is HBM traffic per second (1 GB = 1e9 B), for both, so that the fraction compares like
// with like:
//   copy   of B bytes (cudaMemcpyAsync, device to device): reads B, writes B      -> 2B bytes moved
//   reduce of B bytes per operand (dst = a + b):            reads 2B, writes B     -> 3B bytes moved
// Each size runs kWarmupRuns untimed, then --iters runs, each between two CUDA events on one stream;
// the best (shortest) run gives GBps, the median median_GBps. After timing, every reduce result is
// checked on the device against a + b (the inputs are small integers, exact in every type).
//
// With --gemm instead: bf16 GEMM speed by token count (cuBLAS, fp32 accumulation), the measurement
// behind the step model's GEMM occupancy (models/kernels.h gemm_occupancy): whether the GPU's GEMM
// library runs the last partial wave of output tiles part-empty (Ampere's wave quantization) or
// shares it among all SMs (Hopper's persistent stream-K kernels). For two layer shapes (kGemmShapes)
// it times C[m, n] = A[m, k] B[k, n] for m from kGemmMinM to kGemmMaxM in steps of kGemmStepM
// tokens, and checks every element of every product against its exact value (fill_gemm_a).
//
// Usage: tandem_kernel_bench [--probe | --gemm] [--sizes 256M,1G] [--iters N] [--device D]
//   --probe  only report whether a GPU is usable: exit 0 with a `device ...` line, or exit 77
//            (kExitNoGpu) with a `no GPU: ...` line.
//   --gemm   the GEMM sweep (records `gemm shape=... m= n= k= best_us= tflops= median_tflops= check=ok`).
// Output (one record per line, key=value, machine-readable; lines starting with '#' are comments):
//   device index=0 name="NVIDIA H200" cc=9.0 sms=132 memory_bytes=...
//   copy bytes=268435456 moved_bytes=536870912 best_us=... GBps=... median_GBps=...
//   reduce dtype=f32 op=sum bytes=268435456 moved_bytes=805306368 best_us=... GBps=... median_GBps=...
//          fraction_of_copy=0.931 check=ok
// Exit status: 0 when every check passed, 1 on a wrong result or a CUDA error, 2 on a usage error,
// 77 without a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "backend/kernels/reduce.h"
#include "core/types.h"

namespace {

using tandem::DataType;

constexpr int kExitNoGpu = 77;  // as automake and CTest's SKIP_RETURN_CODE conventions use it
constexpr int kWarmupRuns = 3;
constexpr int kDefaultIters = 30;
constexpr int kThreadsPerBlock = 256;
constexpr int kMaxBlocks = 65535;

struct DtypeInfo {
  DataType type;
  const char* name;  // as core names it
  size_t element_bytes;
};
constexpr DtypeInfo kDtypes[] = {
    {DataType::kF32, "f32", 4}, {DataType::kF16, "f16", 2}, {DataType::kBF16, "bf16", 2},
    {DataType::kF64, "f64", 8}, {DataType::kI32, "i32", 4}, {DataType::kI64, "i64", 8},
};

// Small integers, exact in every type (half and bfloat16 included): a[i] + b[i] <= 10.
__host__ __device__ int input_a(int64_t i) { return static_cast<int>(i % 7); }
__host__ __device__ int input_b(int64_t i) { return static_cast<int>(i % 5); }

template <typename T>
__device__ T from_int(int value) {
  return static_cast<T>(value);
}
template <>
__device__ __half from_int<__half>(int value) {
  return __int2half_rn(value);
}
template <>
__device__ __nv_bfloat16 from_int<__nv_bfloat16>(int value) {
  return __int2bfloat16_rn(value);
}

template <typename T>
__device__ bool equals_int(T value, int expected) {
  return value == static_cast<T>(expected);
}
template <>
__device__ bool equals_int<__half>(__half value, int expected) {
  return __half2float(value) == static_cast<float>(expected);
}
template <>
__device__ bool equals_int<__nv_bfloat16>(__nv_bfloat16 value, int expected) {
  return __bfloat162float(value) == static_cast<float>(expected);
}

template <typename T>
__global__ void fill_inputs(T* a, T* b, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    a[i] = from_int<T>(input_a(i));
    b[i] = from_int<T>(input_b(i));
  }
}

template <typename T>
__global__ void count_wrong_sums(const T* dst, int64_t count, unsigned long long* wrong) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    if (!equals_int<T>(dst[i], input_a(i) + input_b(i))) ++local;
  }
  if (local != 0) atomicAdd(wrong, local);
}

int grid_for(int64_t count) {
  return static_cast<int>(std::min<int64_t>((count + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks));
}

template <typename T>
void fill_typed(void* a, void* b, int64_t count, cudaStream_t stream) {
  fill_inputs<T><<<grid_for(count), kThreadsPerBlock, 0, stream>>>(static_cast<T*>(a), static_cast<T*>(b), count);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void count_wrong_typed(const void* dst, int64_t count, unsigned long long* wrong, cudaStream_t stream) {
  count_wrong_sums<T><<<grid_for(count), kThreadsPerBlock, 0, stream>>>(static_cast<const T*>(dst), count, wrong);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

void fill(DataType type, void* a, void* b, int64_t count, cudaStream_t stream) {
  switch (type) {
    case DataType::kF32:
      return fill_typed<float>(a, b, count, stream);
    case DataType::kF16:
      return fill_typed<__half>(a, b, count, stream);
    case DataType::kBF16:
      return fill_typed<__nv_bfloat16>(a, b, count, stream);
    case DataType::kF64:
      return fill_typed<double>(a, b, count, stream);
    case DataType::kI32:
      return fill_typed<int32_t>(a, b, count, stream);
    case DataType::kI64:
      return fill_typed<int64_t>(a, b, count, stream);
  }
}

void count_wrong(DataType type, const void* dst, int64_t count, unsigned long long* wrong, cudaStream_t stream) {
  switch (type) {
    case DataType::kF32:
      return count_wrong_typed<float>(dst, count, wrong, stream);
    case DataType::kF16:
      return count_wrong_typed<__half>(dst, count, wrong, stream);
    case DataType::kBF16:
      return count_wrong_typed<__nv_bfloat16>(dst, count, wrong, stream);
    case DataType::kF64:
      return count_wrong_typed<double>(dst, count, wrong, stream);
    case DataType::kI32:
      return count_wrong_typed<int32_t>(dst, count, wrong, stream);
    case DataType::kI64:
      return count_wrong_typed<int64_t>(dst, count, wrong, stream);
  }
}

struct Timing {
  double best_us = 0;
  double median_us = 0;
};

// kWarmupRuns untimed calls of `enqueue`, then `iters` event-timed ones.
template <typename Enqueue>
Timing time_runs(Enqueue enqueue, int iters, cudaStream_t stream) {
  cudaEvent_t start = nullptr, stop = nullptr;
  TANDEM_CUDA_CHECK(cudaEventCreate(&start));
  TANDEM_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < kWarmupRuns; ++i) enqueue();
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> runs_us;
  for (int i = 0; i < iters; ++i) {
    TANDEM_CUDA_CHECK(cudaEventRecord(start, stream));
    enqueue();
    TANDEM_CUDA_CHECK(cudaEventRecord(stop, stream));
    TANDEM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    runs_us.push_back(double(ms) * 1e3);
  }
  TANDEM_CUDA_CHECK(cudaEventDestroy(start));
  TANDEM_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(runs_us.begin(), runs_us.end());
  return {runs_us.front(), runs_us[runs_us.size() / 2]};
}

double GBps(double moved_bytes, double time_us) { return moved_bytes / (time_us * 1e-6) / 1e9; }

// "256M", "1G", "4096": bytes (K, M, G binary, as tandem bench's sizes).
bool parse_size(std::string_view text, int64_t& bytes) {
  if (text.empty()) return false;
  int64_t scale = 1;
  const char suffix = text.back();
  if (suffix == 'K' || suffix == 'k') scale = int64_t{1} << 10;
  if (suffix == 'M' || suffix == 'm') scale = int64_t{1} << 20;
  if (suffix == 'G' || suffix == 'g') scale = int64_t{1} << 30;
  if (scale != 1) text.remove_suffix(1);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos || text.size() > 12) return false;
  bytes = std::stoll(std::string(text)) * scale;
  return bytes > 0;
}

// --gemm: the GEMM sweep.
struct GemmShape {
  const char* name;
  int64_t n, k;
};
// BLOOM-176B's QKV projection at TP4 (n = 3 x 14336 / 4), the Llama-3 70B gate + up at TP4
// (n = 2 x 28672 / 4): layer GEMMs whose token count is micro-batch x sequence.
constexpr GemmShape kGemmShapes[] = {{"bloom-qkv-tp4", 10752, 14336}, {"llama70b-fc1-tp4", 14336, 8192}};
constexpr int64_t kGemmMinM = 1024;
constexpr int64_t kGemmMaxM = 8192;
constexpr int64_t kGemmStepM = 256;

void cublas_check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + " failed: cuBLAS status " + std::to_string(static_cast<int>(status)));
}

// The operands, row-major: A[i, :] = 1 + i % 2, B[:, j] = j % 3, so C[i, j] = k (1 + i % 2) (j % 3),
// at most 4k: exact in bf16 for both shapes' k (8,192 = 2^13, 14,336 = 1.75 x 2^13), and exact in
// the fp32 accumulator. A transposed operand or a wrong leading dimension breaks the pattern.
__global__ void fill_gemm_a(__nv_bfloat16* a, int64_t count, int64_t k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    a[i] = __float2bfloat16(static_cast<float>(1 + (i / k) % 2));
}
__global__ void fill_gemm_b(__nv_bfloat16* b, int64_t count, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    b[i] = __float2bfloat16(static_cast<float>((i % n) % 3));
}

__global__ void count_wrong_products(const __nv_bfloat16* c, int64_t count, int64_t n, int64_t k,
                                     unsigned long long* wrong) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    const float expected = static_cast<float>(k * (1 + (i / n) % 2) * ((i % n) % 3));
    if (__bfloat162float(c[i]) != expected) ++local;
  }
  if (local != 0) atomicAdd(wrong, local);
}

int run_gemm(int iters, int device) {
  TANDEM_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t handle = nullptr;
  cublas_check(cublasCreate(&handle), "cublasCreate");
  cublas_check(cublasSetStream(handle, stream), "cublasSetStream");
  int64_t max_n = 0, max_k = 0;
  for (const GemmShape& shape : kGemmShapes) {
    max_n = std::max(max_n, shape.n);
    max_k = std::max(max_k, shape.k);
  }
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  unsigned long long* wrong = nullptr;
  TANDEM_CUDA_CHECK(cudaMalloc(&a, sizeof(*a) * static_cast<size_t>(kGemmMaxM * max_k)));
  TANDEM_CUDA_CHECK(cudaMalloc(&b, sizeof(*b) * static_cast<size_t>(max_k * max_n)));
  TANDEM_CUDA_CHECK(cudaMalloc(&c, sizeof(*c) * static_cast<size_t>(kGemmMaxM * max_n)));
  TANDEM_CUDA_CHECK(cudaMalloc(&wrong, sizeof(*wrong)));

  std::printf("# bf16 GEMM C[m,n] = A[m,k] B[k,n] through cublasGemmEx (fp32 compute, default algorithm); "
              "TFLOP/s = 2mnk / best of %d event-timed runs after %d warmups\n",
              iters, kWarmupRuns);
  const float alpha = 1.0f, beta = 0.0f;
  bool all_ok = true;
  for (const GemmShape& shape : kGemmShapes) {
    fill_gemm_a<<<grid_for(kGemmMaxM * shape.k), kThreadsPerBlock, 0, stream>>>(a, kGemmMaxM * shape.k, shape.k);
    fill_gemm_b<<<grid_for(shape.k * shape.n), kThreadsPerBlock, 0, stream>>>(b, shape.k * shape.n, shape.n);
    TANDEM_CUDA_CHECK(cudaGetLastError());
    for (int64_t m = kGemmMinM; m <= kGemmMaxM; m += kGemmStepM) {
      // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS multiplies (n x k) by (k x m).
      auto gemm = [&] {
        cublas_check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(shape.n), static_cast<int>(m),
                                  static_cast<int>(shape.k), &alpha, b, CUDA_R_16BF, static_cast<int>(shape.n), a,
                                  CUDA_R_16BF, static_cast<int>(shape.k), &beta, c, CUDA_R_16BF,
                                  static_cast<int>(shape.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx");
      };
      const Timing t = time_runs(gemm, iters, stream);
      const int64_t count = m * shape.n;
      TANDEM_CUDA_CHECK(cudaMemsetAsync(c, 0xFF, sizeof(*c) * static_cast<size_t>(count), stream));
      TANDEM_CUDA_CHECK(cudaMemsetAsync(wrong, 0, sizeof(*wrong), stream));
      gemm();
      count_wrong_products<<<grid_for(count), kThreadsPerBlock, 0, stream>>>(c, count, shape.n, shape.k, wrong);
      TANDEM_CUDA_CHECK(cudaGetLastError());
      unsigned long long wrong_host = 0;
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(&wrong_host, wrong, sizeof(wrong_host), cudaMemcpyDeviceToHost, stream));
      TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
      const double flops = 2.0 * double(m) * double(shape.n) * double(shape.k);
      std::printf("gemm shape=%s m=%lld n=%lld k=%lld best_us=%.2f tflops=%.1f median_tflops=%.1f check=%s\n",
                  shape.name, static_cast<long long>(m), static_cast<long long>(shape.n),
                  static_cast<long long>(shape.k), t.best_us, flops / (t.best_us * 1e-6) / 1e12,
                  flops / (t.median_us * 1e-6) / 1e12, wrong_host == 0 ? "ok" : "FAILED");
      std::fflush(stdout);
      all_ok = all_ok && wrong_host == 0;
    }
  }
  cublas_check(cublasDestroy(handle), "cublasDestroy");
  TANDEM_CUDA_CHECK(cudaFree(a));
  TANDEM_CUDA_CHECK(cudaFree(b));
  TANDEM_CUDA_CHECK(cudaFree(c));
  TANDEM_CUDA_CHECK(cudaFree(wrong));
  TANDEM_CUDA_CHECK(cudaStreamDestroy(stream));
  return all_ok ? 0 : 1;
}

int usage(const char* message) {
  std::fprintf(stderr, "tandem_kernel_bench: error: %s\n", message);
  std::fprintf(stderr, "usage: tandem_kernel_bench [--probe | --gemm] [--sizes 256M,1G] [--iters N] [--device D]\n");
  return 2;
}

// Returns false (with the reason printed as `no GPU: ...`) when no device is usable.
bool probe(int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    std::printf("no GPU: cudaGetDeviceCount failed: %s (%s, error %d)\n", cudaGetErrorString(status),
                cudaGetErrorName(status), static_cast<int>(status));
    return false;
  }
  if (device >= count) {
    std::printf("no GPU: device %d requested, %d visible\n", device, count);
    return false;
  }
  cudaDeviceProp prop{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int driver = 0, runtime = 0;
  TANDEM_CUDA_CHECK(cudaDriverGetVersion(&driver));
  TANDEM_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  std::printf("device index=%d of=%d name=\"%s\" cc=%d.%d sms=%d memory_bytes=%zu driver=%d runtime=%d\n", device,
              count, prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.totalGlobalMem, driver, runtime);
  return true;
}

int run(const std::vector<int64_t>& sizes, int iters, int device) {
  TANDEM_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int64_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  void *a = nullptr, *b = nullptr, *dst = nullptr;
  unsigned long long* wrong = nullptr;
  TANDEM_CUDA_CHECK(cudaMalloc(&a, static_cast<size_t>(max_bytes)));
  TANDEM_CUDA_CHECK(cudaMalloc(&b, static_cast<size_t>(max_bytes)));
  TANDEM_CUDA_CHECK(cudaMalloc(&dst, static_cast<size_t>(max_bytes)));
  TANDEM_CUDA_CHECK(cudaMalloc(&wrong, sizeof(*wrong)));

  std::printf(
      "# GBps = bytes moved through device memory / time (1 GB = 1e9 B): copy moves 2 x bytes "
      "(read + write), reduce 3 x bytes (read a, read b, write dst); best of %d event-timed runs after %d "
      "warmups; fraction_of_copy = reduce GBps / copy GBps at the same bytes\n",
      iters, kWarmupRuns);
  bool all_ok = true;
  for (int64_t bytes : sizes) {
    const Timing copy = time_runs(
        [&] {
          TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, a, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream));
        },
        iters, stream);
    const double copy_moved = 2.0 * double(bytes);
    const double copy_GBps = GBps(copy_moved, copy.best_us);
    std::printf("copy bytes=%lld moved_bytes=%.0f best_us=%.2f GBps=%.1f median_GBps=%.1f\n",
                static_cast<long long>(bytes), copy_moved, copy.best_us, copy_GBps, GBps(copy_moved, copy.median_us));
    std::fflush(stdout);

    for (const DtypeInfo& dtype : kDtypes) {
      const int64_t count = bytes / static_cast<int64_t>(dtype.element_bytes);
      fill(dtype.type, a, b, count, stream);
      const Timing reduce =
          time_runs([&] { tandem::cuda::launch_reduce(dtype.type, tandem::ReduceOp::kSum, a, b, dst, count, stream); },
                    iters, stream);
      // The check: poison dst (0xFF bytes are NaN or -1, never a + b), reduce once, count mismatches.
      TANDEM_CUDA_CHECK(cudaMemsetAsync(dst, 0xFF, static_cast<size_t>(bytes), stream));
      TANDEM_CUDA_CHECK(cudaMemsetAsync(wrong, 0, sizeof(*wrong), stream));
      tandem::cuda::launch_reduce(dtype.type, tandem::ReduceOp::kSum, a, b, dst, count, stream);
      count_wrong(dtype.type, dst, count, wrong, stream);
      unsigned long long wrong_host = 0;
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(&wrong_host, wrong, sizeof(wrong_host), cudaMemcpyDeviceToHost, stream));
      TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
      const double moved = 3.0 * double(count) * double(dtype.element_bytes);
      const double reduce_GBps = GBps(moved, reduce.best_us);
      std::printf(
          "reduce dtype=%s op=sum bytes=%lld moved_bytes=%.0f best_us=%.2f GBps=%.1f median_GBps=%.1f "
          "fraction_of_copy=%.3f check=%s",
          dtype.name, static_cast<long long>(bytes), moved, reduce.best_us, reduce_GBps, GBps(moved, reduce.median_us),
          reduce_GBps / copy_GBps, wrong_host == 0 ? "ok" : "FAILED");
      if (wrong_host != 0) std::printf(" wrong=%llu of %lld", wrong_host, static_cast<long long>(count));
      std::printf("\n");
      std::fflush(stdout);
      all_ok = all_ok && wrong_host == 0;
    }
  }
  TANDEM_CUDA_CHECK(cudaFree(a));
  TANDEM_CUDA_CHECK(cudaFree(b));
  TANDEM_CUDA_CHECK(cudaFree(dst));
  TANDEM_CUDA_CHECK(cudaFree(wrong));
  TANDEM_CUDA_CHECK(cudaStreamDestroy(stream));
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  bool probe_only = false, gemm_sweep = false;
  std::vector<int64_t> sizes = {int64_t{256} << 20, int64_t{1} << 30};
  int iters = kDefaultIters;
  int device = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--probe") {
      probe_only = true;
    } else if (arg == "--gemm") {
      gemm_sweep = true;
    } else if (arg == "--sizes" && has_value) {
      sizes.clear();
      std::string_view list = argv[++i];
      while (!list.empty()) {
        const size_t comma = list.find(',');
        int64_t bytes = 0;
        if (!parse_size(list.substr(0, comma), bytes)) return usage("--sizes takes sizes such as 256M,1G");
        sizes.push_back(bytes);
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      }
      if (sizes.empty()) return usage("--sizes is empty");
    } else if (arg == "--iters" && has_value) {
      iters = std::atoi(argv[++i]);
      if (iters < 1 || iters > 100000) return usage("--iters takes 1 .. 100000");
    } else if (arg == "--device" && has_value) {
      device = std::atoi(argv[++i]);
      if (device < 0) return usage("--device takes a device index");
    } else {
      return usage(("unknown or incomplete argument '" + std::string(arg) + "'").c_str());
    }
  }
  try {
    if (!probe(device)) return kExitNoGpu;
    if (probe_only) return 0;
    return gemm_sweep ? run_gemm(iters, device) : run(sizes, iters, device);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tandem_kernel_bench: error: %s\n", e.what());
    return 1;
  }
}
