// The folder of dumps (core/flight_recorder.h): each rank's file written atomically, an earlier
// run's removed, and a job's dumps read on several threads within a memory budget.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/file_read.h"
#include "core/flight_recorder.h"
#include "core/fr_dump_internal.h"
#include "core/host_memory.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using fr_dump_detail::is_digits;
using fr_dump_detail::parse_dump;
using fr_dump_detail::RankListMemo;

// Memory while reading dumps, per byte of dump file: what a parsed FrDump keeps (its strings
// unshared, where the pickle memoizes them), and what a thread holds while parsing one file (the
// bytes and the pickle::Value tree). Upper bounds: `tandem fr analyze` of 4,096 PyTorch-style pickle
// dumps of 100 entries (177 MB, bench/fr_bench.sh's layout) peaked at 380 MB, 2.1 bytes a file byte.
constexpr double kFrReadBytesPerFileByte = 3;
constexpr double kFrParseBytesPerFileByte = 10;
// read_dump_dir parses dumps on up to this many threads (and no more than the machine has cores).
constexpr unsigned kMaxReadThreads = 8;

// Readers never see a half-written dump: the bytes go to a temporary name (which ends in ".tmp",
// so it never looks like `<prefix><rank>`) and are renamed over the target.
void write_atomically(const fs::path& path, std::string_view bytes) {
  static std::atomic<uint64_t> counter{0};
  fs::path tmp = path;
  tmp += fmt::format(".{}.{}.tmp", ::getpid(), counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      fail(ErrorCode::kIo, "cannot write {}", tmp.string());
    }
  }
  std::error_code error;
  fs::rename(tmp, path, error);
  if (error) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    fail(ErrorCode::kIo, "cannot rename {} to {}: {}", tmp.string(), path.string(), error.message());
  }
}

struct DumpFile {
  fs::path path;
  int rank = 0;
};

// Reads and parses each file, on several threads (reading is most of `tandem fr analyze`, and the
// dumps are independent). What fails is what a loop over the files in order would meet first.
std::vector<FrDump> read_dumps(const std::vector<DumpFile>& files,
                               const std::function<void(size_t done, size_t total)>& progress) {
  const size_t threads = std::min<size_t>({files.size(), std::max(1u, std::thread::hardware_concurrency()), kMaxReadThreads});
  // Every dump stays in memory once read, and each thread holds one file's bytes and parse tree
  // while it reads: check both against the budget before reading any.
  uint64_t total_bytes = 0, largest_bytes = 0;
  for (const DumpFile& file : files) {
    std::error_code error;
    const uintmax_t bytes = fs::file_size(file.path, error);
    if (error) continue;  // read_file_bounded says why
    total_bytes += bytes;
    largest_bytes = std::max<uint64_t>(largest_bytes, bytes);
  }
  // A file over the per-file limit is refused by name when it is read (it would be read first).
  if (largest_bytes <= kMaxFrDumpFileBytes) {
    require_host_memory(static_cast<double>(total_bytes) * kFrReadBytesPerFileByte +
                            static_cast<double>(threads * largest_bytes) * kFrParseBytesPerFileByte,
                        fmt::format("reading {} flight-recorder dump(s) ({} in all, the largest {})", files.size(),
                                    byte_size_text(total_bytes), byte_size_text(largest_bytes)));
  }
  std::vector<FrDump> dumps(files.size());
  std::vector<std::exception_ptr> errors(files.size());
  std::atomic<size_t> next{0};
  std::atomic<size_t> first_error{files.size()};
  std::atomic<size_t> read{0};
  const auto work = [&](bool calling_thread) {
    // Reused from file to file: a dump runs to megabytes and there may be thousands, and a fresh
    // buffer each time costs more than the reading.
    std::string bytes;
    RankListMemo memo;
    for (size_t i = next++; i < files.size(); i = next++) {
      if (i > first_error.load()) continue;  // a loop in order would have stopped before it
      try {
        read_file_bounded(files[i].path, kMaxFrDumpFileBytes, "flight-recorder dump", bytes);
        dumps[i] = parse_dump(bytes, files[i].path.string(), &memo);
        dumps[i].rank = files[i].rank;
      } catch (...) {
        errors[i] = std::current_exception();
        size_t seen = first_error.load();
        while (i < seen && !first_error.compare_exchange_weak(seen, i)) {
        }
      }
      const size_t done = ++read;
      if (calling_thread && progress) progress(done, files.size());
    }
  };
  {
    std::vector<std::jthread> helpers;  // joined on leaving the block, also when starting one fails
    for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work, false);
    work(true);
  }
  if (progress) progress(files.size(), files.size());
  if (first_error < files.size()) std::rethrow_exception(errors[first_error]);
  return dumps;
}

// The rank in `file_name` when it is `<prefix><digits>`.
std::optional<std::string_view> rank_digits(std::string_view file_name, std::string_view prefix) {
  if (!file_name.starts_with(prefix) || !is_digits(file_name.substr(prefix.size()))) return std::nullopt;
  return file_name.substr(prefix.size());
}

// PyTorch's analyzer matches `(.*?)(\d+)$`: the stem is the name before its trailing digits. The
// stem most files share wins (ties: the first in sorted order).
std::string infer_prefix(const std::vector<std::string>& names) {
  std::map<std::string, int> counts;
  for (const std::string& file_name : names) {
    const size_t stem = file_name.find_last_not_of("0123456789") + 1;  // npos + 1 == 0: all digits
    if (stem < file_name.size()) ++counts[file_name.substr(0, stem)];
  }
  std::string best;
  int best_count = 0;
  for (const auto& [stem, count] : counts) {
    if (count > best_count) {
      best = stem;
      best_count = count;
    }
  }
  return best;
}

}  // namespace

std::vector<fs::path> write_dumps(const std::vector<FrDump>& dumps, const std::string& prefix, FrFormat format) {
  if (prefix.empty()) fail(ErrorCode::kInvalidArgument, "flight-recorder dump prefix is empty");
  std::vector<fs::path> paths;
  for (const FrDump& dump : dumps) {
    if (dump.rank < 0) fail(ErrorCode::kInvalidArgument, "flight-recorder dump for negative rank {}", dump.rank);
    const fs::path path = prefix + std::to_string(dump.rank);
    if (path.has_parent_path()) {
      std::error_code error;
      fs::create_directories(path.parent_path(), error);
      if (error) fail(ErrorCode::kIo, "cannot create {}: {}", path.parent_path().string(), error.message());
    }
    write_atomically(path, format == FrFormat::kJson ? to_json(dump) : to_pickle(dump));
    paths.push_back(path);
  }
  return paths;
}

int remove_dumps(const std::string& prefix) {
  const fs::path pattern(prefix);
  const fs::path dir = pattern.has_parent_path() ? pattern.parent_path() : fs::path(".");
  const std::string stem = pattern.filename().string();
  std::error_code error;
  if (!fs::is_directory(dir, error)) return 0;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (rank_digits(it->path().filename().string(), stem)) stale.push_back(it->path());
  }
  if (error) fail(ErrorCode::kIo, "cannot list {}: {}", dir.string(), error.message());
  for (const fs::path& path : stale) {
    if (!fs::remove(path, error) && error) fail(ErrorCode::kIo, "cannot remove the earlier dump {}: {}", path.string(), error.message());
  }
  return static_cast<int>(stale.size());
}

std::vector<FrDump> read_dump_dir(const fs::path& dir, const std::string& prefix,
                                  const std::function<void(size_t done, size_t total)>& progress) {
  std::error_code error;
  if (!fs::exists(dir, error)) fail(ErrorCode::kIo, "flight-recorder dump folder {} does not exist", dir.string());
  if (!fs::is_directory(dir, error)) {
    fail(ErrorCode::kIo, "flight-recorder dump folder {} is a file, not a folder (give the folder of the dumps)",
         dir.string());
  }
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (it->is_regular_file(error)) names.push_back(it->path().filename().string());
  }
  if (error) fail(ErrorCode::kIo, "cannot list {}: {}", dir.string(), error.message());
  std::sort(names.begin(), names.end());

  const std::string chosen = prefix.empty() ? infer_prefix(names) : prefix;
  std::vector<DumpFile> files;
  std::map<int, std::string> file_of_rank;
  // A file name that is no usable rank stops the list; its error comes after those of the files
  // before it, as when each file was read as soon as it was named.
  std::exception_ptr name_error;
  for (const std::string& file_name : names) {
    const std::optional<std::string_view> digits = rank_digits(file_name, chosen);
    if (!digits) continue;
    const fs::path path = dir / file_name;
    int rank = 0;
    const auto [end, parse_error] = std::from_chars(digits->data(), digits->data() + digits->size(), rank);
    try {
      if (parse_error != std::errc()) fail(ErrorCode::kFormat, "{}: rank {} out of range", path.string(), *digits);
      if (const auto [it, inserted] = file_of_rank.emplace(rank, file_name); !inserted) {
        fail(ErrorCode::kFormat, "{} and {} in {} are both rank {}", it->second, file_name, dir.string(), rank);
      }
    } catch (const Error&) {
      name_error = std::current_exception();
      break;
    }
    files.push_back(DumpFile{path, rank});
  }
  std::vector<FrDump> dumps = read_dumps(files, progress);
  if (name_error) std::rethrow_exception(name_error);
  if (dumps.empty()) fail(ErrorCode::kIo, "no flight-recorder dumps in {}", dir.string());
  std::sort(dumps.begin(), dumps.end(), [](const FrDump& a, const FrDump& b) { return a.rank < b.rank; });
  return dumps;
}

}  // namespace tandem
