// The rank counts the algorithm tests sweep: 1..17 covers 0 and 1 folds, primes and every small
// non-power of two; then a few larger ones.
#pragma once

#include <vector>

namespace tandem::testing {

inline std::vector<int> rank_counts() {
  std::vector<int> counts;
  for (int n = 1; n <= 17; ++n) counts.push_back(n);
  for (int n : {24, 32, 64, 128}) counts.push_back(n);
  return counts;
}

}  // namespace tandem::testing
