// splitmix64's finalizer: a cheap 64-bit hash whose low bits are well mixed. Used where a
// decision must be deterministic and spread evenly (ECMP choices, seeded fault draws).
#pragma once

#include <cstdint>

namespace tandem {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace tandem
