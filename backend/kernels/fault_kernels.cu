#include "backend/kernels/fault_kernels.h"

#include <algorithm>

#include "backend/kernels/reduce.h"

namespace tandem::cuda {
namespace {

constexpr int kChecksumThreads = 256;
constexpr int64_t kChecksumMaxBlocks = 1024;

__global__ void spin_kernel(uint64_t nanoseconds) {
  uint64_t start = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  uint64_t now = start;
  while (now - start < nanoseconds) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
}

__global__ void flip_kernel(uint8_t* byte, uint8_t mask) { *byte ^= mask; }

// splitmix64's finaliser: a bijection of 64-bit words.
__device__ inline unsigned long long mix(unsigned long long x) {
  x += 0x9e37'79b9'7f4a'7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58'476d'1ce4'e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d0'49bb'1331'11ebull;
  return x ^ (x >> 31);
}

__global__ void checksum_kernel(const uint8_t* data, int64_t bytes, int64_t first_index, unsigned long long* sum) {
  unsigned long long local = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes; i += stride) {
    // (index, byte) packed injectively into one word, then mixed.
    local += mix((static_cast<unsigned long long>(first_index + i) << 8) | data[i]);
  }
  if (local != 0) atomicAdd(sum, local);
}

}  // namespace

void launch_spin(uint64_t nanoseconds, cudaStream_t stream) {
  if (nanoseconds == 0) return;
  spin_kernel<<<1, 1, 0, stream>>>(nanoseconds);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

void launch_flip_bits(void* byte, uint8_t mask, cudaStream_t stream) {
  flip_kernel<<<1, 1, 0, stream>>>(static_cast<uint8_t*>(byte), mask);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

void launch_checksum(const void* data, int64_t bytes, int64_t first_index, unsigned long long* sum,
                     cudaStream_t stream) {
  if (bytes <= 0) return;
  const auto blocks =
      static_cast<int>(std::clamp<int64_t>((bytes + kChecksumThreads - 1) / kChecksumThreads, 1, kChecksumMaxBlocks));
  checksum_kernel<<<blocks, kChecksumThreads, 0, stream>>>(static_cast<const uint8_t*>(data), bytes, first_index, sum);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tandem::cuda
