#include "app/calibrate/nccl_tests_log.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "app/common/common.h"
#include "app/common/nccl_tests_table.h"
#include "core/error.h"
#include "core/sizes.h"
#include "core/text.h"
#include "app/calibrate/measured_fields.h"
#include "sim/sim_algorithm.h"

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

// tandem bench's "algorithm: X" (a core algorithm or a simulator model, tandem's spelling).
std::string tandem_algorithm_of(std::string_view algorithm, const std::string& where) {
  if (sim::find_sim_algorithm(algorithm)) return std::string(algorithm);
  fail(ErrorCode::kFormat, "{}: algorithm '{}' is not one tandem bench runs", where, printable(algorithm));
}

// The value after "KEY=" or "KEY set by environment to " in `line`; empty when absent.
std::string_view setting(std::string_view line, std::string_view key) {
  for (const std::string_view joiner : {std::string_view("="), std::string_view(" set by environment to ")}) {
    const std::string needle = std::string(key) + std::string(joiner);
    const size_t at = line.find(needle);
    if (at == std::string_view::npos) continue;
    std::string_view rest = line.substr(at + needle.size());
    const size_t end = rest.find_first_of(" \t\r;");
    return trim(rest.substr(0, end));
  }
  return {};
}

// One run of a benchmark binary (one table) in a log: what its header said, and its rows.
struct Run {
  int first_line = 0;  // its first line (a header line, or its first row)
  std::optional<Collective> collective;
  std::string algorithm = "auto";
  std::string protocol = "auto";
  int algorithm_line = 0;  // where algorithm / protocol were set (0: not set)
  int protocol_line = 0;
  std::string nccl_version;
  int64_t header_ranks = 0;  // nThread x nGpus; 0 when absent
  std::set<int64_t> ranks;   // of its "#  Rank" lines
  std::set<std::string> hosts;
  struct Row {
    MeasuredRow row;
    int64_t count = 0;  // the count column
    int line = 0;
  };
  std::vector<Row> rows;
};

// The state of one log's read: the file's runs, the last being read.
struct LogReader {
  std::string path;        // as given (row labels for --hold-out use it)
  std::string shown_path;  // printable: for messages
  std::vector<Run> runs;
  std::vector<std::string> skipped;

  std::string where(int line) const { return fmt::format("{}:{}", shown_path, line); }
  Run& run() { return runs.back(); }
  // A run header line at `line`: after table rows it starts the next run.
  void header_line(int line) {
    if (runs.empty() || !run().rows.empty()) {
      runs.emplace_back();
      run().first_line = line;
    }
  }
};

// Sets `value` (a run's algorithm or protocol) once: a second, different setting in one run is an
// error (two logs run together without a header between them).
void set_once(std::string& value, int& set_at, const std::string& to, std::string_view what, int line,
              const LogReader& reader) {
  if (set_at != 0 && value != to) {
    fail(ErrorCode::kFormat, "{}: {} {} here, and {} at line {} of the same run: one run, one {}", reader.where(line),
         what, printable(to), printable(value), set_at, what);
  }
  value = to;
  set_at = line;
}

// NCCL_ALGO / NCCL_PROTO in `line` (an NCCL INFO line or a comment), for the run being read.
void read_settings(std::string_view line, int line_number, LogReader& reader) {
  const std::string where = reader.where(line_number);
  if (const std::string_view algo = setting(line, "NCCL_ALGO"); !algo.empty()) {
    reader.header_line(line_number);
    set_once(reader.run().algorithm, reader.run().algorithm_line, algorithm_of(algo, where), "NCCL_ALGO", line_number,
             reader);
  }
  if (const std::string_view proto = setting(line, "NCCL_PROTO"); !proto.empty()) {
    reader.header_line(line_number);
    set_once(reader.run().protocol, reader.run().protocol_line, protocol_of(proto, where), "NCCL_PROTO", line_number,
             reader);
  }
  if (const size_t at = line.find("NCCL version "); at != std::string_view::npos) {
    const std::vector<std::string_view> words = split_words(line.substr(at + 13));
    if (!words.empty()) {
      reader.header_line(line_number);
      reader.run().nccl_version = std::string(words.front());
    }
  }
}

// "# nThread 1 nGpus 8 minBytes ...": the run's ranks, nThread x nGpus.
void read_thread_line(const std::vector<std::string_view>& words, int line_number, LogReader& reader) {
  const std::string where = reader.where(line_number);
  if (words.size() < 4 || words[2] != "nGpus") fail(ErrorCode::kFormat, "{}: a '# nThread' line without nGpus", where);
  const auto threads = parse_integer(words[1]);
  const auto gpus = parse_integer(words[3]);
  if (!threads || !gpus || *threads < 1 || *gpus < 1) {
    fail(ErrorCode::kFormat, "{}: nThread '{}' and nGpus '{}' must be positive integers", where, printable(words[1]),
         printable(words[3]));
  }
  // Each alone first: their product must not wrap.
  if (*threads > kMaxMeasuredRanks || *gpus > kMaxMeasuredRanks || *threads * *gpus > kMaxMeasuredRanks) {
    fail(ErrorCode::kFormat, "{}: nThread {} x nGpus {} is more than {} GPUs: not a cluster", where, *threads, *gpus,
         kMaxMeasuredRanks);
  }
  reader.header_line(line_number);
  if (reader.run().header_ranks != 0) fail(ErrorCode::kFormat, "{}: a second '# nThread' line in one run", where);
  reader.run().header_ranks = *threads * *gpus;
}

// "#  Rank  0 Group  0 Pid  12345 on   host-a device  0 [0x18] NVIDIA H100 80GB HBM3": a rank and its host.
void read_rank_line(const std::vector<std::string_view>& words, int line_number, LogReader& reader) {
  const std::string where = reader.where(line_number);
  const int64_t rank = bounded_integer(words[1], 0, kMaxMeasuredRanks - 1, "rank", where);
  reader.header_line(line_number);
  if (!reader.run().ranks.insert(rank).second) {
    fail(ErrorCode::kFormat, "{}: rank {} is listed twice in one run (two logs run together?)", where, rank);
  }
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] == "on") {
      reader.run().hosts.insert(std::string(words[i + 1]));
      break;
    }
  }
}

// A header line that names the run's benchmark binary or collective: one collective per run.
void read_collective_name(std::string_view name, int line_number, LogReader& reader) {
  const std::string where = reader.where(line_number);
  const auto collective = collective_of(name);
  if (!collective)
    fail(ErrorCode::kFormat, "{}: '{}' is not a collective tandem calibrates on", where, printable(name));
  reader.header_line(line_number);
  if (reader.run().collective && *reader.run().collective != *collective) {
    fail(ErrorCode::kFormat, "{}: {} named here in a run of {} with no table between", where, tandem::name(*collective),
         tandem::name(*reader.run().collective));
  }
  reader.run().collective = collective;
}

// tandem bench's "# Backend: sim (fluid network), 4 GPUs per node, node-major ring order, algorithm: ring"
// (or "# Backend: nccl, algorithm: ring, ranks per node: 8, channels: 2"): the algorithm it ran.
void read_backend_line(std::string_view line, int line_number, LogReader& reader) {
  const size_t at = line.find("algorithm: ");
  if (at == std::string_view::npos) return;
  std::string_view rest = line.substr(at + 11);
  const std::string_view algorithm = trim(rest.substr(0, rest.find_first_of(",;")));
  if (algorithm == "auto") return;
  reader.header_line(line_number);
  set_once(reader.run().algorithm, reader.run().algorithm_line,
           tandem_algorithm_of(algorithm, reader.where(line_number)), "algorithm", line_number, reader);
}

// A "#" line: a run header's line by its first words, else the NCCL settings it may carry.
void read_comment(std::string_view line, int line_number, LogReader& reader) {
  const std::vector<std::string_view> words = split_words(line.substr(1));
  if (words.empty()) return;
  if (words[0] == "nThread") {
    read_thread_line(words, line_number, reader);
  } else if ((words[0] == "Using" && words.size() == 2 && words[1] == "devices") ||
             (words[0] == "nccl-tests" && words.size() >= 2 && words[1] == "version")) {
    reader.header_line(line_number);
  } else if (words[0] == "Rank" && words.size() >= 7 && words[2] == "Group") {
    read_rank_line(words, line_number, reader);
  } else if (words.size() >= 4 && words[0] == "Collective" && words[1] == "test" && words[2] == "starting:") {
    // "# Collective test starting: all_reduce_perf" (nccl-tests 2.13+)
    read_collective_name(words[3], line_number, reader);
  } else if (words.size() >= 2 && words[0] == "Collective:") {
    // "# Collective: all_reduce"
    read_collective_name(words[1], line_number, reader);
  } else if (words.size() >= 4 && words[0] == "tandem" && words[2] == "bench") {
    // "# tandem 0.9.0 bench all_reduce: nccl-tests-style table"
    std::string_view name = words[3];
    if (name.ends_with(':')) name.remove_suffix(1);
    read_collective_name(name, line_number, reader);
  } else if (words[0] == "Backend:") {
    read_backend_line(line, line_number, reader);
  } else {
    read_settings(line, line_number, reader);
  }
}

// "  size  count  type  redop  root  time algbw busbw #wrong  time algbw busbw #wrong"
Run::Row read_row(std::string_view line, const std::string& where) {
  const std::vector<std::string_view> words = split_words(line);
  if (words.size() != 13) {
    fail(ErrorCode::kFormat,
         "{}: a table row needs 13 columns (size count type redop root, then time algbw busbw #wrong out-of-place "
         "and in-place), this one has {}",
         where, words.size());
  }
  Run::Row parsed;
  MeasuredRow& row = parsed.row;
  const auto size = parse_integer(words[0]);
  if (!size || *size < 0) fail(ErrorCode::kFormat, "{}: size '{}' is not a byte count", where, printable(words[0]));
  const auto count = parse_integer(words[1]);
  if (!count || *count < 0) {
    fail(ErrorCode::kFormat, "{}: count '{}' is not a number of elements", where, printable(words[1]));
  }
  row.bytes = *size;
  parsed.count = *count;
  try {
    row.dtype = parse_data_type(words[2]);
  } catch (const Error&) {
    fail(ErrorCode::kFormat, "{}: type '{}' is not one of nccl-tests' (float, half, bfloat16, double, int32, int64)",
         where, printable(words[2]));
  }
  const auto root = parse_integer(words[4]);
  if (!root || *root < -1 || *root >= kMaxMeasuredRanks) {
    fail(ErrorCode::kFormat, "{}: root '{}' is neither -1 nor a rank", where, printable(words[4]));
  }
  const auto time = parse_number(words[5]);
  if (!time || *time < 0) {
    fail(ErrorCode::kFormat, "{}: out-of-place time '{}' is not a number of us", where, printable(words[5]));
  }
  for (size_t i : {6, 7}) {
    if (!parse_number(words[i])) {
      fail(ErrorCode::kFormat, "{}: bandwidth '{}' is not a number", where, printable(words[i]));
    }
  }
  for (size_t i : {8, 12}) {
    const auto wrong = parse_integer(words[i]);
    if (words[i] != "N/A" && (!wrong || *wrong < 0)) {
      fail(ErrorCode::kFormat, "{}: {}#wrong '{}' is neither a count nor N/A", where, i == 12 ? "in-place " : "",
           printable(words[i]));
    }
  }
  for (size_t i : {9, 10, 11}) {
    if (words[i] != "N/A" && !parse_number(words[i])) {
      fail(ErrorCode::kFormat, "{}: in-place column '{}' is neither a number nor N/A", where, printable(words[i]));
    }
  }
  if (words[8] != "N/A" && *parse_integer(words[8]) > 0) {
    fail(ErrorCode::kFormat, "{}: the row has {} wrong elements: a failed run is no measurement", where, words[8]);
  }
  row.time_us = *time;
  return parsed;
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

// "..." (or "…"): rows a log's author cut out.
bool is_elision_mark(std::string_view line) {
  if (line == "\xE2\x80\xA6") return true;
  return line.size() >= 3 && line.find_first_not_of('.') == std::string_view::npos;
}

// The GPU count the run states: its Rank lines when they are ranks 0..N-1, else nThread x nGpus
// when there are no Rank lines; 0 when it does not say.
int64_t stated_ranks(const Run& run) {
  if (!run.ranks.empty()) {
    const int64_t listed = static_cast<int64_t>(run.ranks.size());
    return *run.ranks.rbegin() + 1 == listed ? listed : 0;
  }
  return run.header_ranks;
}

// "host a, b and 6 more" for messages.
std::string host_list(const std::set<std::string>& hosts) {
  constexpr size_t kShown = 3;
  std::string out = hosts.size() == 1 ? "host " : "hosts ";
  size_t shown = 0;
  for (const std::string& host : hosts) {
    if (shown == kShown) break;
    out += (shown++ == 0 ? "" : ", ") + printable(host);
  }
  if (hosts.size() > kShown) out += fmt::format(" and {} more", hosts.size() - kShown);
  return out;
}

// How a row's size and count relate (nccl-tests' getCollByteCount): size = count x type size, times
// the rank count for the collectives whose count is one rank's share.
bool count_is_per_rank(Collective collective) {
  return collective == Collective::kAllGather || collective == Collective::kReduceScatter ||
         collective == Collective::kAllToAll;
}

// Every line of a log read into its runs (rows, comments, NCCL lines); rows cut where the log was
// posted are noted as skipped.
LogReader read_log_lines(std::string_view text, const std::string& path) {
  if (text.starts_with(kUtf8ByteOrderMark)) text.remove_prefix(kUtf8ByteOrderMark.size());
  LogReader reader;
  reader.path = path;
  reader.shown_path = printable(path);
  int line_number = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = trim(text.substr(begin, end - begin));
    begin = end + 1;
    ++line_number;
    line = without_launcher_tag(line);
    if (line.empty()) continue;
    if (line.front() == '#') {
      read_comment(line, line_number, reader);
    } else if (line.find("NCCL") != std::string_view::npos) {
      read_settings(line, line_number, reader);
    } else if (std::isdigit(static_cast<unsigned char>(line.front()))) {
      const std::string where = reader.where(line_number);
      Run::Row row = read_row(line, where);
      row.row.label = fmt::format("{}:{}", path, line_number);
      row.line = line_number;
      if (reader.runs.empty()) {
        reader.runs.emplace_back();
        reader.run().first_line = line_number;
      }
      reader.run().rows.push_back(std::move(row));
    } else if (is_elision_mark(line)) {
      reader.skipped.push_back(
          fmt::format("{}: '{}' (rows cut from the log where it was posted)", reader.where(line_number), line));
    } else {
      fail(ErrorCode::kFormat, "{}: not a line of nccl-tests output (a table row, a # comment or an NCCL line): '{}'",
           reader.where(line_number), printable(line.substr(0, 60)));
    }
  }
  // Runs without rows (a header at the end, a run that failed before its table) measured nothing.
  std::erase_if(reader.runs, [](const Run& run) { return run.rows.empty(); });
  if (reader.runs.empty()) fail(ErrorCode::kFormat, "{}: no table rows", reader.shown_path);
  return reader;
}

// The collective a run measured: its own header's, the file name's (a one-run file), or the caller's.
void find_collective(Run& run, const LogReader& reader, std::optional<Collective> collective) {
  const bool one_run = reader.runs.size() == 1;
  if (!run.collective && one_run) run.collective = collective_from_file_name(reader.path);
  if (!run.collective) run.collective = collective;
  if (run.collective) return;
  if (one_run) {
    fail(ErrorCode::kFormat,
         "{}: the log does not say which collective it measured (no '# Collective test starting:' or '# tandem "
         ".. bench' line, no <collective>_perf in the file name): give it with --collective",
         reader.shown_path);
  }
  fail(ErrorCode::kFormat,
       "{}: this run (one of {} in the file) does not say which collective it measured (no '# Collective test "
       "starting:' or '# tandem .. bench' line): split the file, or give the collective with --collective",
       reader.where(run.first_line), reader.runs.size());
}

// The GPU count of a run: stated, or implied by a per-rank count (size = count x type size x
// ranks); 0 when neither says.
int64_t run_ranks(const Run& run, const LogReader& reader) {
  int64_t ranks = stated_ranks(run);
  if (ranks != 0 || !count_is_per_rank(*run.collective)) return ranks;
  for (const Run::Row& row : run.rows) {
    const auto element_bytes = static_cast<int64_t>(size_bytes(row.row.dtype));
    // count x type size divides size, tested without multiplying a count that could overflow.
    if (row.count > 0 && row.row.bytes / element_bytes >= row.count && row.row.bytes % element_bytes == 0 &&
        (row.row.bytes / element_bytes) % row.count == 0) {
      ranks = row.row.bytes / element_bytes / row.count;
      if (ranks > kMaxMeasuredRanks) {
        fail(ErrorCode::kFormat, "{}: size {} B / count {} of {} implies {} ranks, more than {}",
             reader.where(row.line), row.row.bytes, row.count, nccl_tests_type_name(row.row.dtype), ranks,
             kMaxMeasuredRanks);
      }
      return ranks;
    }
  }
  return ranks;
}

// Every row's size and count agree for the run's collective on `ranks` GPUs.
void check_counts(const Run& run, int64_t ranks, const LogReader& reader) {
  for (const Run::Row& row : run.rows) {
    const auto element_bytes = static_cast<int64_t>(size_bytes(row.row.dtype));
    const int64_t per_count = count_is_per_rank(*run.collective) ? ranks : 1;
    // size / (type size x ranks) == count, without multiplying a count that could overflow.
    const bool agrees = per_count == 0 ? row.row.bytes % element_bytes == 0
                                       : row.row.bytes % (element_bytes * per_count) == 0 &&
                                             row.row.bytes / (element_bytes * per_count) == row.count;
    if (!agrees) {
      fail(ErrorCode::kFormat, "{}: size {} B and count {} disagree for {} of {} ({} B each{}): expected {}",
           reader.where(row.line), row.row.bytes, row.count, name(*run.collective),
           nccl_tests_type_name(row.row.dtype), element_bytes,
           per_count > 1 ? fmt::format(", on {} ranks", per_count) : "",
           per_count == 0 ? std::string("a whole number of elements")
                          : fmt::format("count {}", row.row.bytes / (element_bytes * per_count)));
    }
  }
}

// One file, one cluster: every run on the same GPUs, hosts and NCCL. Remembers the first run that
// states each, and fills the file's GPU count, nodes and version from them.
class OneCluster {
 public:
  OneCluster(MeasurementFile& file, const LogReader& reader) : file_(file), reader_(reader) {}

  void add(const Run& run, int64_t ranks) {
    const std::string where = reader_.where(run.first_line);
    if (ranks > 0) {
      if (stated_by_ != nullptr && ranks != file_.nranks) {
        fail(ErrorCode::kFormat,
             "{}: this run ran on {} GPUs and the run at line {} on {}: a log holds runs of one cluster (split the "
             "file)",
             where, ranks, stated_by_->first_line, file_.nranks);
      }
      if (stated_by_ == nullptr) {
        stated_by_ = &run;
        file_.nranks = static_cast<int>(ranks);
      }
    }
    const bool all_ranks_listed = !run.ranks.empty() && stated_ranks(run) > 0;
    if (all_ranks_listed) {
      if (hosts_by_ != nullptr && run.hosts != hosts_by_->hosts) {
        fail(ErrorCode::kFormat,
             "{}: this run ran on {} and the run at line {} on {}: a log holds runs of one cluster (split the file)",
             where, host_list(run.hosts), hosts_by_->first_line, host_list(hosts_by_->hosts));
      }
      if (hosts_by_ == nullptr) hosts_by_ = &run;
    }
    if (!run.ranks.empty()) file_.least_ranks = std::max(file_.least_ranks, static_cast<int>(*run.ranks.rbegin() + 1));
    if (!run.nccl_version.empty()) {
      if (version_by_ != nullptr && run.nccl_version != version_by_->nccl_version) {
        fail(ErrorCode::kFormat, "{}: this run shows NCCL {} and the run at line {} NCCL {}: split the file", where,
             printable(run.nccl_version), version_by_->first_line, printable(version_by_->nccl_version));
      }
      if (version_by_ == nullptr) version_by_ = &run;
    }
  }

  void finish() {
    if (version_by_ != nullptr) file_.nccl_version = version_by_->nccl_version;
    if (hosts_by_ != nullptr) file_.nodes = static_cast<int>(hosts_by_->hosts.size());
    if (file_.nranks > 0 && file_.least_ranks > file_.nranks) {
      fail(ErrorCode::kFormat, "{}: a Rank line names rank {} in a log of {} GPUs", reader_.shown_path,
           file_.least_ranks - 1, file_.nranks);
    }
  }

 private:
  MeasurementFile& file_;
  const LogReader& reader_;
  const Run* stated_by_ = nullptr;  // the first run that states its GPU count
  const Run* hosts_by_ = nullptr;   // the first run that lists its hosts
  const Run* version_by_ = nullptr;
};

}  // namespace

MeasurementFile parse_nccl_tests_log(std::string_view text, const std::string& path,
                                     std::optional<Collective> collective) {
  LogReader reader = read_log_lines(text, path);
  MeasurementFile file;
  file.path = path;
  file.runs = static_cast<int>(reader.runs.size());
  file.skipped = std::move(reader.skipped);
  OneCluster cluster(file, reader);
  for (Run& run : reader.runs) {
    find_collective(run, reader, collective);
    const int64_t ranks = run_ranks(run, reader);
    check_counts(run, ranks, reader);
    cluster.add(run, ranks);
  }
  cluster.finish();
  for (Run& run : reader.runs) {
    for (Run::Row& row : run.rows) {
      row.row.collective = *run.collective;
      row.row.algorithm = run.algorithm;
      row.row.protocol = run.protocol;
      row.row.gpus = file.nranks;
      row.row.nodes = file.nodes;
      file.rows.push_back(std::move(row.row));
    }
  }
  return file;
}

MeasurementFile read_measurement_file(const std::string& path, std::optional<Collective> collective) {
  const std::string text = read_text_file(path, "measurement log", kMaxMeasurementFileBytes);
  if (path.ends_with(".csv")) return parse_reference_csv(text, path);
  return parse_nccl_tests_log(text, path, collective);
}

}  // namespace tandem::app
