#include "core/sizes.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace tandem {
namespace {

// Sizes above this are typos: 1 PiB per rank.
constexpr int64_t kMaxSizeBytes = int64_t{1} << 50;

}  // namespace

int64_t parse_size_bytes(std::string_view text, std::string_view flag) {
  auto bad = [&]() -> int64_t {
    fail(ErrorCode::kInvalidArgument, "invalid size '{}' for {}: expected bytes such as 8, 64K, 64M or 1G", text, flag);
  };
  if (text.empty()) return bad();
  int64_t unit = 1;
  std::string_view number = text;
  switch (text.back()) {
    case 'K':
    case 'k':
      unit = int64_t{1} << 10;
      break;
    case 'M':
    case 'm':
      unit = int64_t{1} << 20;
      break;
    case 'G':
    case 'g':
      unit = int64_t{1} << 30;
      break;
    default:
      break;
  }
  if (unit != 1) number.remove_suffix(1);
  if (number.empty() || !(std::isdigit(static_cast<unsigned char>(number.front())) || number.front() == '.')) {
    return bad();
  }
  double value = 0;
  auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), value, std::chars_format::fixed);
  if (error != std::errc() || end != number.data() + number.size() || !std::isfinite(value)) return bad();
  double bytes = std::floor(value * static_cast<double>(unit));
  if (bytes > static_cast<double>(kMaxSizeBytes)) {
    fail(ErrorCode::kInvalidArgument, "size '{}' for {} is larger than the limit of {} bytes", text, flag,
         kMaxSizeBytes);
  }
  return static_cast<int64_t>(bytes);
}

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

std::string compact_size_text(int64_t bytes) {
  constexpr int64_t kKiB = int64_t{1} << 10, kMiB = int64_t{1} << 20, kGiB = int64_t{1} << 30;
  if (bytes >= kGiB && bytes % kGiB == 0) return fmt::format("{}GiB", bytes / kGiB);
  if (bytes >= kMiB && bytes % kMiB == 0) return fmt::format("{}MiB", bytes / kMiB);
  if (bytes >= 1000000) return fmt::format("{:.0f}MB", static_cast<double>(bytes) / 1e6);
  if (bytes >= kKiB && bytes % kKiB == 0) return fmt::format("{}KiB", bytes / kKiB);
  return fmt::format("{}B", bytes);
}

}  // namespace tandem
