#include "app/calibrate/nccl_tests_log.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "app/common/common.h"
#include "core/error.h"
#include "core/sizes.h"

namespace tandem::app {
namespace {

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t begin = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > begin) words.push_back(line.substr(begin, i - begin));
  }
  return words;
}

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

// NCCL_ALGO's spelling -> the simulator's.
std::string algorithm_of(std::string_view nccl, const std::string& where) {
  std::string lower;
  for (char c : nccl) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "ring" || lower == "tree" || lower == "nvls" || lower == "pat") return lower;
  if (lower == "nvlstree" || lower == "nvls_tree") return "nvls_tree";
  if (lower == "collnetdirect" || lower == "collnet_direct") return "collnet_direct";
  if (lower == "collnetchain" || lower == "collnet_chain") return "collnet_chain";
  fail(ErrorCode::kFormat,
       "{}: NCCL_ALGO '{}' is not one algorithm tandem simulates (Ring, Tree, NVLS, NVLSTree, PAT, "
       "CollNetDirect, CollNetChain)",
       where, nccl);
}

std::string protocol_of(std::string_view nccl, const std::string& where) {
  if (nccl == "LL" || nccl == "LL128" || nccl == "Simple") return std::string(nccl);
  if (nccl == "ll") return "LL";
  if (nccl == "ll128") return "LL128";
  if (nccl == "simple") return "Simple";
  fail(ErrorCode::kFormat, "{}: NCCL_PROTO '{}' is not one protocol (LL, LL128, Simple)", where, nccl);
}

// The value after "KEY=" or "KEY set by environment to " in `line`; empty when absent.
std::string_view setting(std::string_view line, std::string_view key) {
  for (const std::string_view joiner : {std::string_view("="), std::string_view(" set by environment to ")}) {
    const std::string needle = std::string(key) + std::string(joiner);
    const size_t at = line.find(needle);
    if (at == std::string_view::npos) continue;
    std::string_view rest = line.substr(at + needle.size());
    const size_t end = rest.find_first_of(" \t\r,;");
    return trim(rest.substr(0, end));
  }
  return {};
}

struct LogState {
  std::string path;
  std::optional<Collective> collective;
  std::string algorithm = "auto";
  std::string protocol = "auto";
  int header_ranks = 0;
  int rank_lines = 0;
  std::set<std::string> hosts;
};

void read_comment(std::string_view line, LogState& state, MeasurementFile& file, const std::string& where) {
  const std::vector<std::string_view> words = split_words(line.substr(1));
  if (words.empty()) return;
  if (words[0] == "nThread") {
    // "# nThread 1 nGpus 8 minBytes ..."
    if (words.size() < 4 || words[2] != "nGpus")
      fail(ErrorCode::kFormat, "{}: a '# nThread' line without nGpus", where);
    const auto threads = parse_integer(words[1]);
    const auto gpus = parse_integer(words[3]);
    if (!threads || !gpus || *threads < 1 || *gpus < 1) {
      fail(ErrorCode::kFormat, "{}: nThread '{}' and nGpus '{}' must be positive integers", where, words[1], words[3]);
    }
    state.header_ranks = static_cast<int>(*threads * *gpus);
    return;
  }
  if (words[0] == "Rank" && words.size() >= 7 && words[2] == "Group") {
    // "#  Rank  0 Group  0 Pid  12345 on   host-a device  0 [0x18] NVIDIA H100 80GB HBM3"
    if (!parse_integer(words[1])) fail(ErrorCode::kFormat, "{}: rank '{}' is not an integer", where, words[1]);
    ++state.rank_lines;
    for (size_t i = 0; i + 1 < words.size(); ++i) {
      if (words[i] == "on") {
        state.hosts.insert(std::string(words[i + 1]));
        break;
      }
    }
    return;
  }
  // "# Collective test starting: all_reduce_perf" (nccl-tests 2.13+)
  if (words.size() >= 4 && words[0] == "Collective" && words[1] == "test" && words[2] == "starting:") {
    const auto collective = collective_of(words[3]);
    if (!collective) fail(ErrorCode::kFormat, "{}: '{}' is not a collective tandem calibrates on", where, words[3]);
    state.collective = collective;
    return;
  }
  // "# Collective: all_reduce"
  if (words.size() >= 2 && words[0] == "Collective:") {
    const auto collective = collective_of(words[1]);
    if (!collective) fail(ErrorCode::kFormat, "{}: '{}' is not a collective tandem calibrates on", where, words[1]);
    state.collective = collective;
    return;
  }
  // "# tandem 0.9.0 bench all_reduce: nccl-tests-style table"
  if (words.size() >= 4 && words[0] == "tandem" && words[2] == "bench") {
    std::string_view name = words[3];
    if (name.ends_with(':')) name.remove_suffix(1);
    const auto collective = collective_of(name);
    if (!collective) fail(ErrorCode::kFormat, "{}: '{}' is not a collective tandem calibrates on", where, name);
    state.collective = collective;
    return;
  }
  if (const std::string_view algo = setting(line, "NCCL_ALGO"); !algo.empty())
    state.algorithm = algorithm_of(algo, where);
  if (const std::string_view proto = setting(line, "NCCL_PROTO"); !proto.empty())
    state.protocol = protocol_of(proto, where);
  if (const size_t at = line.find("NCCL version "); at != std::string_view::npos) {
    file.nccl_version = std::string(split_words(line.substr(at + 13)).front());
  }
}

void read_nccl_line(std::string_view line, LogState& state, MeasurementFile& file, const std::string& where) {
  if (const std::string_view algo = setting(line, "NCCL_ALGO"); !algo.empty())
    state.algorithm = algorithm_of(algo, where);
  if (const std::string_view proto = setting(line, "NCCL_PROTO"); !proto.empty())
    state.protocol = protocol_of(proto, where);
  if (const size_t at = line.find("NCCL version "); at != std::string_view::npos) {
    const std::vector<std::string_view> words = split_words(line.substr(at + 13));
    if (!words.empty()) file.nccl_version = std::string(words.front());
  }
}

// "  size  count  type  redop  root  time algbw busbw #wrong  time algbw busbw #wrong"
MeasuredRow read_row(std::string_view line, const std::string& where) {
  const std::vector<std::string_view> words = split_words(line);
  if (words.size() != 13) {
    fail(ErrorCode::kFormat,
         "{}: a table row needs 13 columns (size count type redop root, then time algbw busbw #wrong out-of-place "
         "and in-place), this one has {}",
         where, words.size());
  }
  MeasuredRow row;
  const auto size = parse_integer(words[0]);
  if (!size || *size < 0) fail(ErrorCode::kFormat, "{}: size '{}' is not a byte count", where, words[0]);
  if (!parse_integer(words[1])) fail(ErrorCode::kFormat, "{}: count '{}' is not an integer", where, words[1]);
  row.bytes = *size;
  try {
    row.dtype = parse_data_type(words[2]);
  } catch (const Error&) {
    fail(ErrorCode::kFormat, "{}: type '{}' is not one of nccl-tests' (float, half, bfloat16, double, int32, int64)",
         where, words[2]);
  }
  if (!parse_integer(words[4])) fail(ErrorCode::kFormat, "{}: root '{}' is not an integer", where, words[4]);
  const auto time = parse_number(words[5]);
  if (!time || *time < 0) fail(ErrorCode::kFormat, "{}: out-of-place time '{}' is not a number of us", where, words[5]);
  for (size_t i : {6, 7}) {
    if (!parse_number(words[i])) fail(ErrorCode::kFormat, "{}: bandwidth '{}' is not a number", where, words[i]);
  }
  if (words[8] != "N/A" && !parse_integer(words[8])) {
    fail(ErrorCode::kFormat, "{}: #wrong '{}' is neither a count nor N/A", where, words[8]);
  }
  for (size_t i : {9, 10, 11}) {
    if (words[i] != "N/A" && !parse_number(words[i])) {
      fail(ErrorCode::kFormat, "{}: in-place column '{}' is neither a number nor N/A", where, words[i]);
    }
  }
  if (words[12] != "N/A" && !parse_integer(words[12])) {
    fail(ErrorCode::kFormat, "{}: in-place #wrong '{}' is neither a count nor N/A", where, words[12]);
  }
  if (words[8] != "N/A" && *parse_integer(words[8]) > 0) {
    fail(ErrorCode::kFormat, "{}: the row has {} wrong elements: a failed run is no measurement", where, words[8]);
  }
  row.time_us = *time;
  return row;
}

// mpirun --tag-output prefixes every line with "[JOB,RANK]<stdout>:"; srun --label with "RANK: ".
std::string_view without_launcher_tag(std::string_view line) {
  if (line.starts_with('[')) {
    for (const std::string_view tag : {std::string_view("]<stdout>:"), std::string_view("]<stderr>:")}) {
      const size_t at = line.find(tag);
      if (at != std::string_view::npos && at < 24) return trim(line.substr(at + tag.size()));
    }
  }
  const size_t colon = line.find(": ");
  if (colon != std::string_view::npos && colon > 0 && colon < 8 &&
      line.substr(0, colon).find_first_not_of("0123456789") == std::string_view::npos) {
    return trim(line.substr(colon + 2));
  }
  return line;
}

std::optional<Collective> collective_from_file_name(const std::string& path) {
  const std::string stem = std::filesystem::path(path).filename().string();
  for (const char* name : {"all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"}) {
    if (stem.find(std::string(name) + "_perf") != std::string::npos) return collective_of(name);
  }
  return std::nullopt;
}

}  // namespace

MeasurementFile parse_nccl_tests_log(std::string_view text, const std::string& path,
                                     std::optional<Collective> collective) {
  MeasurementFile file;
  file.path = path;
  LogState state;
  state.path = path;
  std::vector<std::pair<MeasuredRow, std::string>> rows;
  int line_number = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = trim(text.substr(begin, end - begin));
    begin = end + 1;
    ++line_number;
    const std::string where = fmt::format("{}:{}", path, line_number);
    line = without_launcher_tag(line);
    if (line.empty()) continue;
    if (line.front() == '#') {
      read_comment(line, state, file, where);
    } else if (line.find("NCCL") != std::string_view::npos) {
      read_nccl_line(line, state, file, where);
    } else if (std::isdigit(static_cast<unsigned char>(line.front()))) {
      MeasuredRow row = read_row(line, where);
      row.label = where;
      row.algorithm = state.algorithm;
      row.protocol = state.protocol;
      rows.emplace_back(std::move(row), where);
    } else {
      fail(ErrorCode::kFormat, "{}: not a line of nccl-tests output (a table row, a # comment or an NCCL line): '{}'",
           where, line.substr(0, 60));
    }
  }
  if (!state.collective) state.collective = collective_from_file_name(path);
  if (!state.collective) state.collective = collective;
  if (!state.collective) {
    fail(ErrorCode::kFormat,
         "{}: the log does not say which collective it measured (no '# Collective test starting:' or '# tandem .. "
         "bench' line, no <collective>_perf in the file name): give it with --collective",
         path);
  }
  if (rows.empty()) fail(ErrorCode::kFormat, "{}: no table rows", path);
  file.nranks = state.rank_lines > 0 ? state.rank_lines : state.header_ranks;
  if (file.nranks == 0) {
    fail(ErrorCode::kFormat, "{}: no '# nThread .. nGpus ..' header and no '#  Rank' lines: the GPU count is unknown",
         path);
  }
  file.nodes = static_cast<int>(state.hosts.size());
  for (auto& [row, where] : rows) {
    row.collective = *state.collective;
    row.gpus = file.nranks;
    row.nodes = file.nodes;
    // The table's size and count must agree for this collective and rank count.
    file.rows.push_back(std::move(row));
  }
  return file;
}

namespace {

// The two published-rows formats: bench/data/h100_calibration.csv and multinode_calibration.csv.
constexpr std::string_view kSingleNodeHeader =
    "id,system,gpus,nodes,collective,algorithm,size_bytes,metric,value_low,value_high,source";
constexpr std::string_view kMultiNodeHeader =
    "id,system,gpus,nodes,gpus_per_node,nics_per_node,nic_gbps,fabric,collective,algorithm,protocol,size_bytes,"
    "metric,value_low,value_high,source,notes";

std::vector<std::string_view> split_commas(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t begin = 0;
  while (true) {
    const size_t comma = line.find(',', begin);
    fields.push_back(line.substr(begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin));
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return fields;
}

// "~8" (the usual configuration, not stated) reads as 8; "-" (none) as nullopt.
std::optional<double> configuration_number(std::string_view field) {
  if (!field.empty() && field.front() == '~') field.remove_prefix(1);
  return parse_number(field);
}

}  // namespace

MeasurementFile parse_reference_csv(std::string_view text, const std::string& path) {
  MeasurementFile file;
  file.path = path;
  bool header_seen = false;
  bool multi_node = false;
  int line_number = 0;
  size_t begin = 0;
  const std::string base = std::filesystem::path(path).filename().string();
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = trim(text.substr(begin, end - begin));
    begin = end + 1;
    ++line_number;
    const std::string where = fmt::format("{}:{}", path, line_number);
    if (line.empty() || line.front() == '#') continue;
    if (!header_seen) {
      if (line != kSingleNodeHeader && line != kMultiNodeHeader) {
        fail(ErrorCode::kFormat, "{}: expected the header '{}' or '{}'", where, kSingleNodeHeader, kMultiNodeHeader);
      }
      multi_node = line == kMultiNodeHeader;
      header_seen = true;
      continue;
    }
    std::vector<std::string_view> fields = split_commas(line);
    const size_t expected = multi_node ? 17 : 11;
    // The multi-node file's last column (notes) may hold commas of its own.
    if (multi_node && fields.size() > expected) fields.resize(expected);
    if (fields.size() != expected) {
      fail(ErrorCode::kFormat, "{}: {} fields, the header has {}", where, fields.size(), expected);
    }
    // The single-node columns, wherever they are in this format.
    const size_t collective_at = multi_node ? 8 : 4;
    const size_t size_at = multi_node ? 11 : 6;
    MeasuredRow row;
    row.label = fmt::format("{}#{}", base, fields[0]);
    row.system = std::string(fields[1]);
    const auto gpus = parse_integer(fields[2]);
    const auto nodes = parse_integer(fields[3]);
    if (!gpus || !nodes || *gpus < 1 || *nodes < 1)
      fail(ErrorCode::kFormat, "{}: gpus and nodes must be positive", where);
    row.gpus = static_cast<int>(*gpus);
    row.nodes = static_cast<int>(*nodes);
    if (multi_node) {
      row.nics_per_node = configuration_number(fields[5]);
      row.nic_gbps = configuration_number(fields[6]);
    }
    const auto collective = collective_of(fields[collective_at]);
    if (!collective) {
      fail(ErrorCode::kFormat, "{}: collective '{}' is not one tandem calibrates on", where, fields[collective_at]);
    }
    row.collective = *collective;
    const std::string_view algorithm = fields[collective_at + 1];
    row.algorithm = algorithm == "auto" ? std::string("auto") : algorithm_of(algorithm, where);
    if (multi_node && fields[10] != "auto") row.protocol = protocol_of(fields[10], where);
    const auto bytes = parse_integer(fields[size_at]);
    if (!bytes || *bytes <= 0)
      fail(ErrorCode::kFormat, "{}: size_bytes '{}' is not a byte count", where, fields[size_at]);
    row.bytes = *bytes;
    const auto low = parse_number(fields[size_at + 2]);
    const auto high = parse_number(fields[size_at + 3]);
    if (!low || !high || *low <= 0 || *high < *low) {
      fail(ErrorCode::kFormat, "{}: value_low '{}' and value_high '{}' must be positive with low <= high", where,
           fields[size_at + 2], fields[size_at + 3]);
    }
    const double value = (*low + *high) / 2;
    const std::string_view metric = fields[size_at + 1];
    if (metric == "time_us") {
      row.time_us = value;
    } else if (metric == "algbw_GBps" || metric == "busbw_GBps" || metric == "busbw_per_nic_GBps") {
      const double algbw = metric == "algbw_GBps" ? value : value / bus_bandwidth_factor(row.collective, row.gpus);
      row.time_us = static_cast<double>(row.bytes) / (algbw * 1e9) * 1e6;
    } else {
      fail(ErrorCode::kFormat, "{}: metric '{}' is none of time_us, algbw_GBps, busbw_GBps, busbw_per_nic_GBps", where,
           metric);
    }
    file.rows.push_back(std::move(row));
  }
  if (!header_seen) fail(ErrorCode::kFormat, "{}: no header line '{}'", path, kSingleNodeHeader);
  if (file.rows.empty()) fail(ErrorCode::kFormat, "{}: no rows", path);
  return file;
}

MeasurementFile read_measurement_file(const std::string& path, std::optional<Collective> collective) {
  const std::string text = read_text_file(path, "measurement log", kMaxMeasurementFileBytes);
  if (path.ends_with(".csv")) return parse_reference_csv(text, path);
  return parse_nccl_tests_log(text, path, collective);
}

}  // namespace tandem::app
