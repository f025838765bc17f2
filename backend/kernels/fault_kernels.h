// Small kernels the cuda executor uses to apply injected faults and to verify messages. Internal to
// backend/cuda. Every launch is enqueued on `stream` and throws Error(kBackend) when it fails.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

// Occupies `stream` for `nanoseconds` of device time (one thread spinning on the global timer):
// how a delayed transfer is made slower on the device.
void launch_spin(uint64_t nanoseconds, cudaStream_t stream);

// *byte ^= mask: the corrupt fault's bit flip, in the data a receiver gets.
void launch_flip_bits(void* byte, uint8_t mask, cudaStream_t stream);

// *sum += sum over i < bytes of mix(first_index + i, data[i]) (wrapping). mix is a bijection of
// (index, byte), so changing any byte changes the sum, and sums over pieces of a message add up to
// the sum over the whole message when each piece passes its position in the message.
void launch_checksum(const void* data, int64_t bytes, int64_t first_index, unsigned long long* sum,
                     cudaStream_t stream);

}  // namespace tandem::cuda
