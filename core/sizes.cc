#include "core/sizes.h"

namespace tandem {

SizeCounts nccl_tests_counts(Collective collective, int64_t bytes, DataType dtype, int nranks) {
  const int64_t element_bytes = static_cast<int64_t>(size_bytes(dtype));
  const int64_t n = nranks;
  SizeCounts counts;
  switch (collective) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv:
      counts.count = bytes / element_bytes;
      counts.input_elements = counts.count;
      counts.output_elements = counts.count;
      counts.size_bytes = counts.count * element_bytes;
      break;
    case Collective::kAllGather:
      counts.count = bytes / element_bytes / n;
      counts.input_elements = counts.count;
      counts.output_elements = n * counts.count;
      counts.size_bytes = n * counts.count * element_bytes;
      break;
    case Collective::kReduceScatter:
      counts.count = bytes / element_bytes / n;
      counts.input_elements = n * counts.count;
      counts.output_elements = counts.count;
      counts.size_bytes = n * counts.count * element_bytes;
      break;
    case Collective::kAllToAll:
      counts.count = bytes / element_bytes / n;
      counts.input_elements = n * counts.count;
      counts.output_elements = n * counts.count;
      counts.size_bytes = n * counts.count * element_bytes;
      break;
  }
  return counts;
}

double bus_bandwidth_factor(Collective collective, int nranks) {
  const double n = nranks;
  switch (collective) {
    case Collective::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return (n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv:
      return 1.0;
  }
  return 1.0;
}

}  // namespace tandem
