// Message size -> element counts, as nccl-tests' *GetCollByteCount defines them, for everything
// that turns "all_reduce of 1 GiB on n ranks" into a collective call: `tandem bench`'s rows, the
// scenario loops, the run session's recorder entries.
//
// n ranks, element size s, B the message size in bytes; "count" is what the collective is called
// with (and what nccl-tests' count column shows):
//
//   collective                      count            per-rank input   per-rank output   size S
//   all_reduce, broadcast, reduce,  B / s            count            count             count*s
//   send_recv
//   all_gather                      B / s / n        count            n*count           n*count*s
//   reduce_scatter                  B / s / n        n*count          count             n*count*s
//   all_to_all (count per peer)     B / s / n        n*count          n*count           n*count*s
//
// (integer division, so a size that does not divide is rounded down).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/types.h"

namespace tandem {

struct SizeCounts {
  int64_t count = 0;            // elements the collective is called with (the count column)
  int64_t input_elements = 0;   // per rank
  int64_t output_elements = 0;  // per rank
  int64_t size_bytes = 0;       // S: the size column, and the bytes of algbw = S / t
};
SizeCounts nccl_tests_counts(Collective collective, int64_t bytes, DataType dtype, int nranks);

// nccl-tests' busbw / algbw: all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n;
// broadcast, reduce, send_recv 1.
double bus_bandwidth_factor(Collective collective, int nranks);

// "8", "64K", "64M", "1G", "1.5M": bytes; K, M, G (either case) are binary (1024-based) as in
// nccl-tests; a fraction is rounded down to whole bytes. Throws Error(kInvalidArgument) naming
// `flag` for anything else, negative values included.
int64_t parse_size_bytes(std::string_view text, std::string_view flag);

// A size for a table column: "8B", "64KiB", "128MiB", "16GiB" where it is a whole number of the
// binary unit, else decimal MB from a million bytes ("4000MB", as the published rows state them).
std::string compact_size_text(int64_t bytes);

}  // namespace tandem
