#include "app/common/common.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

#include <fmt/format.h>

#include "core/algorithms.h"
#include "core/file_read.h"

namespace tandem::app {

std::string read_text_file(const std::string& path, std::string_view what, uint64_t max_bytes) {
  return read_file_bounded(path, max_bytes, what);
}

void create_output_folder(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) fail(ErrorCode::kIo, "cannot create the output folder '{}': {}", dir, error.message());
}

void write_text_file(const std::string& path, const std::string& text) {
  // A regular file is written under a temporary name and renamed over `path`: a command stopped
  // while writing (SIGINT, SIGTERM: core/child_processes.h) leaves the old file or none, never half
  // of one. Anything else (/dev/stdout, a pipe, a link) is written in place, not replaced.
  std::error_code error;
  const auto type = std::filesystem::symlink_status(path, error).type();
  if (type != std::filesystem::file_type::regular && type != std::filesystem::file_type::not_found) {
    std::ofstream in_place(path, std::ios::binary | std::ios::trunc);
    in_place << text;
    in_place.close();
    if (!in_place) fail(ErrorCode::kIo, "cannot write '{}'", path);
    return;
  }
  const std::string temporary = fmt::format("{}.{}.tmp", path, ::getpid());
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::filesystem::remove(temporary, error);
    fail(ErrorCode::kIo, "cannot write '{}'", path);
  }
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    fail(ErrorCode::kIo, "cannot write '{}': {}", path, error.message());
  }
}

int exit_code_for(const Error& error) {
  switch (error.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kUnsupported:
    case ErrorCode::kFormat:
    case ErrorCode::kIo:
      return kExitInput;
    case ErrorCode::kInvalidSchedule:
    case ErrorCode::kCheckFailed:
    case ErrorCode::kTimeout:
    case ErrorCode::kFault:
    case ErrorCode::kDesync:
    case ErrorCode::kCorrupt:
      return kExitFindings;
    case ErrorCode::kBackend:
      return kExitInternal;
  }
  return kExitInternal;
}

std::string version_string() {
#ifdef TANDEM_VERSION
  return TANDEM_VERSION;
#else
  return "unknown";
#endif
}

namespace {

std::string normalized(std::string_view text) {
  std::string out(text);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

}  // namespace

Collective parse_collective_name(std::string_view text) {
  // nccl-tests names its binaries all_reduce_perf, alltoall_perf, sendrecv_perf, ...
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kAliases{{
      {"allreduce", "all_reduce"},
      {"allgather", "all_gather"},
      {"reducescatter", "reduce_scatter"},
      {"alltoall", "all_to_all"},
      {"sendrecv", "send_recv"},
  }};
  std::string name = normalized(text);
  for (const auto& [alias, canonical] : kAliases) {
    if (name == alias) return parse_collective(canonical);
  }
  return parse_collective(name);
}

Algorithm parse_algorithm_name(std::string_view text) {
  std::string name = normalized(text);
  if (name == "auto") return Algorithm::kAuto;
  return parse_algorithm(name);
}

std::string algorithm_names() {
  std::string names;
  for (const AlgorithmInfo& info : algorithm_registry()) {
    names += (names.empty() ? "" : ", ") + std::string(name(info.algorithm));
  }
  return names;
}

double parse_duration_s(std::string_view text, std::string_view option) {
  constexpr std::array<std::pair<std::string_view, double>, 8> kUnits{{{"ns", 1e-9},
                                                                       {"us", 1e-6},
                                                                       {"ms", 1e-3},
                                                                       {"s", 1.0},
                                                                       {"m", 60.0},
                                                                       {"min", 60.0},
                                                                       {"h", 3600.0},
                                                                       {"d", 86400.0}}};
  // The number: digits with an optional fraction and exponent ("1.5", "2e3"), no sign.
  size_t end = 0;
  const auto digits = [&] {
    const size_t start = end;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    return end > start;
  };
  bool number = digits();
  if (end < text.size() && text[end] == '.') {
    ++end;
    number = digits() || number;
  }
  if (number && end + 1 < text.size() && (text[end] == 'e' || text[end] == 'E') &&
      std::isdigit(static_cast<unsigned char>(text[end + 1]))) {
    ++end;
    digits();
  }
  const std::string_view unit = text.substr(end);
  double scale = number && unit.empty() ? 1.0 : 0.0;
  for (const auto& [name, factor] : kUnits) {
    if (number && unit == name) scale = factor;
  }
  const double value = scale > 0 ? std::strtod(std::string(text.substr(0, end)).c_str(), nullptr) * scale : 0.0;
  if (scale == 0 || !std::isfinite(value) || value > kMaxDuration_s) {
    fail(ErrorCode::kInvalidArgument,
         "{} '{}': expected a duration such as 250us, 100ms, 30s, 2m, 1.5h or 1d (at most {:g} days)", option, text,
         kMaxDuration_s / 86400);
  }
  return value;
}

RankLayout make_layout(int nranks, int ranks_per_node) {
  if (nranks < 1) fail(ErrorCode::kInvalidArgument, "the rank count must be at least 1 (got {})", nranks);
  if (ranks_per_node == 0) return RankLayout::flat(nranks);
  if (ranks_per_node < 1 || ranks_per_node > nranks) {
    fail(ErrorCode::kInvalidArgument, "--ranks-per-node must be between 1 and the rank count {} (got {})", nranks,
         ranks_per_node);
  }
  // Whole nodes get NCCL's channel rings (each channel leaves a node on a GPU of its own).
  if (nranks % ranks_per_node == 0) return RankLayout::nccl(nranks / ranks_per_node, ranks_per_node);
  RankLayout layout = RankLayout::flat(nranks);
  layout.ranks_per_node = ranks_per_node;
  return layout;
}

Progress::Progress() : enabled_(isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() { clear(); }

void Progress::update(std::string_view text) {
  if (!enabled_) return;
  // Carriage return, the text, then erase to the end of the line.
  std::fprintf(stderr, "\r%.*s\033[K", static_cast<int>(text.size()), text.data());
  std::fflush(stderr);
  shown_ = true;
}

void Progress::clear() {
  if (!enabled_ || !shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

std::string format_size(int64_t bytes) {
  static constexpr std::array<std::string_view, 4> kUnits{"TiB", "GiB", "MiB", "KiB"};
  for (size_t i = 0; i < kUnits.size(); ++i) {
    const int64_t unit = int64_t{1} << (10 * (kUnits.size() - i));
    if (bytes >= unit && bytes % unit == 0) return fmt::format("{} {}", bytes / unit, kUnits[i]);
  }
  return fmt::format("{} B", bytes);
}

}  // namespace tandem::app
