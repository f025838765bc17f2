#include "app/calibrate/measured_fields.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "core/text.h"

namespace tandem::app {

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  return text;
}

std::optional<int64_t> parse_integer(std::string_view word) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (error != std::errc() || end != word.data() + word.size()) return std::nullopt;
  return value;
}

std::optional<double> parse_number(std::string_view word) {
  double value = 0;
  const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (error != std::errc() || end != word.data() + word.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

// The collective of an nccl-tests binary ("all_reduce_perf", "alltoall_perf") or a tandem name.
std::optional<Collective> collective_of(std::string_view text) {
  if (text.ends_with("_perf")) text.remove_suffix(5);
  if (text == "all_reduce") return Collective::kAllReduce;
  if (text == "all_gather") return Collective::kAllGather;
  if (text == "reduce_scatter") return Collective::kReduceScatter;
  if (text == "alltoall" || text == "all_to_all") return Collective::kAllToAll;
  if (text == "sendrecv" || text == "send_recv") return Collective::kSendRecv;
  return std::nullopt;
}

// NCCL_ALGO's spelling -> the simulator's. A list ("Ring,Tree") or an exclusion ("^NVLS") leaves
// NCCL's tuner a choice: auto.
std::string algorithm_of(std::string_view nccl, const std::string& where) {
  if (nccl.find(',') != std::string_view::npos || nccl.starts_with('^')) return "auto";
  std::string lower;
  for (char c : nccl) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "ring" || lower == "tree" || lower == "nvls" || lower == "pat") return lower;
  if (lower == "nvlstree" || lower == "nvls_tree") return "nvls_tree";
  if (lower == "collnetdirect" || lower == "collnet_direct") return "collnet_direct";
  if (lower == "collnetchain" || lower == "collnet_chain") return "collnet_chain";
  fail(ErrorCode::kFormat,
       "{}: NCCL_ALGO '{}' is not one algorithm tandem simulates (Ring, Tree, NVLS, NVLSTree, PAT, "
       "CollNetDirect, CollNetChain)",
       where, printable(nccl));
}

std::string protocol_of(std::string_view nccl, const std::string& where) {
  if (nccl == "LL" || nccl == "LL128" || nccl == "Simple") return std::string(nccl);
  if (nccl == "ll") return "LL";
  if (nccl == "ll128") return "LL128";
  if (nccl == "simple") return "Simple";
  fail(ErrorCode::kFormat, "{}: NCCL_PROTO '{}' is not one protocol (LL, LL128, Simple)", where, printable(nccl));
}

// A count from a log header or a CSV field: an integer in [low, high], or Error(kFormat) at `where`.
int64_t bounded_integer(std::string_view word, int64_t low, int64_t high, std::string_view what,
                        const std::string& where) {
  const auto value = parse_integer(word);
  if (!value || *value < low || *value > high) {
    fail(ErrorCode::kFormat, "{}: {} '{}' is not an integer from {} to {}", where, what, printable(word), low, high);
  }
  return *value;
}

}  // namespace tandem::app
