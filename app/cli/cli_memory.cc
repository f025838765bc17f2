// tandem memory SNAPSHOT: replays a PyTorch memory snapshot's trace through the caching-allocator
// model (models/caching_allocator.h) under the snapshot's own settings, checks that this rebuilds
// the snapshot's segments, and compares other PYTORCH_CUDA_ALLOC_CONF settings side by side.
// docs/memory.md has the rules.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli/cli_paths.h"
#include "app/cli/commands.h"
#include "app/common/common.h"
#include "core/error.h"
#include "core/file_read.h"
#include "core/sizes.h"
#include "models/caching_allocator.h"
#include "models/memory_snapshot.h"

namespace tandem::app {

namespace {

using nlohmann::json;

struct MemoryCliOptions {
  std::string snapshot;
  std::vector<std::string> alloc_confs;
  std::optional<int64_t> device;
  std::optional<std::string> device_memory;  // set, even to "", when the flag is given
  bool json = false;
  std::string out_dir;
};

constexpr const char* kMemoryFooter =
    "Exit status: 0 when the replay under the snapshot's own settings rebuilds its segments (or the trace cannot "
    "tell), 1 when it does not (the model and the recorded allocator disagree: a script can test it), 2 when the "
    "snapshot cannot be read or the command line is wrong.";

// One column of the table: a setting and its replay.
struct Column {
  std::string label;
  std::string alloc_conf;  // PyTorch's syntax; "" for the defaults
  models::MemoryReplay replay;                      // from the memory allocated before recording, when rebuilt
  std::optional<models::MemoryReplay> trace_alone;  // from an empty allocator, when `replay` is not
};

struct MemoryReport {
  std::string snapshot;
  size_t device = 0;
  size_t trace_entries = 0;
  uint64_t device_memory_bytes = 0;  // 0: unbounded
  std::string device_memory_source;  // "--device-memory", "the trace's first oom entry", "unbounded"
  bool has_settings = false;
  std::vector<std::string> warnings;
  models::PreTraceMemory before_recording;
  models::ConsistencyCheck consistency;
  std::vector<Column> columns;
  std::vector<std::string_view> actions;  // per trace entry, for the CSV
};

size_t pick_device(const models::MemorySnapshot& snapshot, const MemoryCliOptions& options) {
  const size_t devices = snapshot.device_traces.size();
  if (options.device) {
    if (*options.device < 0 || static_cast<size_t>(*options.device) >= devices) {
      fail(ErrorCode::kInvalidArgument, "--device {}: the snapshot has traces for {} device(s)", *options.device,
           devices);
    }
    return static_cast<size_t>(*options.device);
  }
  std::vector<size_t> traced;
  for (size_t d = 0; d < devices; ++d) {
    if (!snapshot.device_traces[d].empty()) traced.push_back(d);
  }
  if (traced.empty()) {
    fail(ErrorCode::kInvalidArgument,
         "{}: the snapshot has no trace entries (record them with "
         "torch.cuda.memory._record_memory_history() before the snapshot)",
         options.snapshot);
  }
  if (traced.size() > 1) {
    fail(ErrorCode::kInvalidArgument, "{}: the snapshot has traces for {} devices; choose one with --device",
         options.snapshot, traced.size());
  }
  return traced.front();
}

MemoryReport build_report(const MemoryCliOptions& options) {
  // Settings first: a typo in --alloc-conf must not wait for a large snapshot to load.
  std::vector<models::AllocatorSettings> others;
  for (const std::string& text : options.alloc_confs) others.push_back(models::parse_alloc_conf(text));
  uint64_t device_memory = 0;
  if (options.device_memory) {
    const int64_t bytes = parse_size_bytes(*options.device_memory, "--device-memory");
    if (bytes <= 0) fail(ErrorCode::kInvalidArgument, "--device-memory must be more than 0 bytes");
    device_memory = static_cast<uint64_t>(bytes);
  }

  const models::MemorySnapshot snapshot = models::read_memory_snapshot(options.snapshot);
  MemoryReport report;
  report.snapshot = options.snapshot;
  report.device = pick_device(snapshot, options);
  report.has_settings = snapshot.has_settings;
  report.warnings = snapshot.warnings;
  const std::vector<models::TraceEntry>& trace = snapshot.device_traces[report.device];
  report.before_recording = models::pre_trace_memory(snapshot, report.device);
  const models::PreTraceMemory& start = report.before_recording;
  const bool restored = !start.empty() && start.unrestorable.empty();
  report.trace_entries = trace.size();
  for (const models::TraceEntry& e : trace) report.actions.push_back(models::name(e.action));
  report.device_memory_source = "unbounded";
  // No device is smaller than one of its own segments, nor than what it held reserved when recording
  // began: a capacity below either describes no device this file could come from (an input
  // error). One above them but below the trace's peak is a what-if: the replay runs out where the
  // recorded run did not.
  uint64_t largest_segment = 0;
  for (const models::SnapshotSegment& segment : snapshot.segments) {
    if (static_cast<size_t>(segment.device) == report.device) largest_segment = std::max(largest_segment, segment.total_size);
  }
  if (device_memory != 0 && (device_memory < largest_segment || device_memory < start.reserved_bytes)) {
    const bool segment = device_memory < largest_segment;
    fail(ErrorCode::kInvalidArgument,
         "--device-memory {} is less than {} on the snapshot's device {}: no device this snapshot comes from is that "
         "small",
         *options.device_memory,
         segment ? fmt::format("its largest segment, {}", byte_size_text(largest_segment))
                 : fmt::format("the {} it held reserved when recording began", byte_size_text(start.reserved_bytes)),
         report.device);
  }
  if (device_memory != 0) {
    report.device_memory_source = "--device-memory";
  } else if ((device_memory = models::device_memory_from_oom(trace, snapshot.settings, &start)) != 0) {
    report.device_memory_source = "the trace's first oom entry";
  }
  report.device_memory_bytes = device_memory;

  const auto replay = [&](const models::AllocatorSettings& settings, const models::PreTraceMemory* from) {
    return models::replay_memory(trace, settings, device_memory, from);
  };
  Column own;
  own.alloc_conf = snapshot.alloc_conf;
  own.label = fmt::format("snapshot ({})", snapshot.alloc_conf.empty() ? "default" : snapshot.alloc_conf);
  own.replay = replay(snapshot.settings, &start);
  if (restored) own.trace_alone = replay(snapshot.settings, nullptr);
  report.consistency = models::check_consistency(snapshot, report.device, start, own.replay);
  report.columns.push_back(std::move(own));
  for (size_t i = 0; i < others.size(); ++i) {
    Column column;
    column.alloc_conf = options.alloc_confs[i];
    column.label = options.alloc_confs[i].empty() ? "default" : options.alloc_confs[i];
    column.replay = replay(others[i], &start);
    if (restored) column.trace_alone = replay(others[i], nullptr);
    report.columns.push_back(std::move(column));
  }
  return report;
}

std::string percent(double fraction) { return fmt::format("{:.1f}%", 100 * fraction); }

std::string first_oom(const models::MemoryReplay& r) {
  if (r.ooms.empty()) return "-";
  const models::MemoryOom& oom = r.ooms.front();
  return fmt::format("entry {}: {} (stream {})", oom.trace_index, byte_size_text(oom.bytes), oom.stream);
}

std::string format_text(const MemoryReport& report) {
  std::string out = fmt::format("memory snapshot {}, device {}: {} trace entries\n", report.snapshot, report.device,
                                report.trace_entries);
  if (!report.has_settings) {
    out += "allocator settings: not recorded (snapshots have them from PyTorch 2.3 on): the defaults assumed\n";
  }
  const models::PreTraceMemory& start = report.before_recording;
  if (!start.empty()) {
    out += fmt::format(
        "before recording: {} segment(s) / {} reserved, {} block(s) / {} allocated ({} still active at the end, {} "
        "freed in the trace): {}\n",
        start.segments.size(), byte_size_text(start.reserved_bytes), start.blocks(),
        byte_size_text(start.allocated_bytes()), start.live_blocks, start.freed_blocks,
        start.unrestorable.empty() ? "every column starts from them; 'trace alone' rows start from an empty allocator"
                                   : "not rebuilt (" + start.unrestorable + "): the peaks leave them out");
  }
  out += fmt::format("device memory: {}\n",
                     report.device_memory_bytes == 0
                         ? std::string("unbounded (no oom entry in the trace; --device-memory sets it)")
                         : fmt::format("{} (from {})", byte_size_text(report.device_memory_bytes),
                                       report.device_memory_source));
  out += fmt::format("consistency: {}\n\n", report.consistency.detail);

  // Rows of the table: a name, then one cell per column.
  std::vector<std::vector<std::string>> rows;
  const auto row = [&](const std::string& name, auto cell) {
    std::vector<std::string> r{name};
    for (const Column& c : report.columns) r.push_back(cell(c.replay));
    rows.push_back(std::move(r));
  };
  std::vector<std::string> header{"setting"};
  for (const Column& c : report.columns) header.push_back(c.label);
  rows.push_back(header);
  using models::MemoryReplay;
  row("peak allocated", [](const MemoryReplay& r) { return byte_size_text(r.peak_allocated_bytes); });
  row("peak reserved", [](const MemoryReplay& r) { return byte_size_text(r.peak_reserved_bytes); });
  row("peak requested", [](const MemoryReplay& r) { return byte_size_text(r.peak_requested_bytes); });
  if (report.columns.front().trace_alone) {
    const auto alone = [&](const std::string& name, uint64_t MemoryReplay::*field) {
      std::vector<std::string> r{name};
      for (const Column& c : report.columns) r.push_back(byte_size_text((*c.trace_alone).*field));
      rows.push_back(std::move(r));
    };
    alone("peak allocated, trace alone", &MemoryReplay::peak_allocated_bytes);
    alone("peak reserved, trace alone", &MemoryReplay::peak_reserved_bytes);
  }
  row("peak reserved at entry", [](const MemoryReplay& r) { return std::to_string(r.peak_reserved_index); });
  row("fragmentation at peak", [](const MemoryReplay& r) { return percent(r.fragmentation_at_peak); });
  row("  internal (rounding)", [](const MemoryReplay& r) { return byte_size_text(r.internal_at_peak_bytes); });
  row("  external (free in segments)", [](const MemoryReplay& r) { return byte_size_text(r.external_at_peak_bytes); });
  row("cudaMalloc + maps", [](const MemoryReplay& r) { return std::to_string(r.stats.num_device_alloc); });
  row("cudaFree + unmaps", [](const MemoryReplay& r) { return std::to_string(r.stats.num_device_free); });
  row("alloc retries", [](const MemoryReplay& r) { return std::to_string(r.stats.num_alloc_retries); });
  row("OOMs", [](const MemoryReplay& r) { return std::to_string(r.ooms.size()); });
  row("first OOM", [](const MemoryReplay& r) { return first_oom(r); });
  std::vector<size_t> widths(header.size(), 0);
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) widths[i] = std::max(widths[i], r[i].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += i == 0 ? fmt::format("{:<{}}", r[i], widths[i]) : fmt::format("   {:>{}}", r[i], widths[i]);
    }
    out += line + "\n";
  }
  const models::MemoryReplay& own = report.columns.front().replay;
  if (own.unknown_frees > 0 || own.empty_cache_calls > 0) {
    out += fmt::format("\n{} free(s) of blocks allocated before the trace began were skipped; {} run(s) of "
                       "segment_free / segment_unmap were replayed as empty_cache()\n",
                       own.unknown_frees, own.empty_cache_calls);
  }
  return out;
}

json to_json(const MemoryReport& report) {
  json columns = json::array();
  for (const Column& c : report.columns) {
    const models::MemoryReplay& r = c.replay;
    json ooms = json::array();
    for (const models::MemoryOom& oom : r.ooms) {
      ooms.push_back({{"trace_index", oom.trace_index}, {"bytes", oom.bytes}, {"stream", oom.stream}});
    }
    json trace_alone = nullptr;  // the peaks from an empty allocator, when the column's start is not
    if (c.trace_alone) {
      trace_alone = {{"peak_allocated_bytes", c.trace_alone->peak_allocated_bytes},
                     {"peak_reserved_bytes", c.trace_alone->peak_reserved_bytes},
                     {"peak_requested_bytes", c.trace_alone->peak_requested_bytes}};
    }
    columns.push_back({{"label", c.label},
                       {"alloc_conf", c.alloc_conf},
                       {"settings", models::describe(r.settings)},
                       {"peak_allocated_bytes", r.peak_allocated_bytes},
                       {"peak_reserved_bytes", r.peak_reserved_bytes},
                       {"peak_requested_bytes", r.peak_requested_bytes},
                       {"peak_allocated_index", r.peak_allocated_index},
                       {"peak_reserved_index", r.peak_reserved_index},
                       {"allocated_at_peak_reserved_bytes", r.allocated_at_peak_reserved_bytes},
                       {"fragmentation_at_peak", r.fragmentation_at_peak},
                       {"internal_fragmentation_at_peak_bytes", r.internal_at_peak_bytes},
                       {"external_fragmentation_at_peak_bytes", r.external_at_peak_bytes},
                       {"num_device_alloc", r.stats.num_device_alloc},
                       {"num_device_free", r.stats.num_device_free},
                       {"num_alloc_retries", r.stats.num_alloc_retries},
                       {"num_ooms", r.stats.num_ooms},
                       {"ooms", ooms},
                       {"final_allocated_bytes", r.stats.allocated_bytes[0].current},
                       {"final_reserved_bytes", r.stats.reserved_bytes[0].current},
                       {"peak_inactive_split_bytes", r.stats.inactive_split_bytes[0].peak},
                       {"unknown_frees", r.unknown_frees},
                       {"empty_cache_calls", r.empty_cache_calls},
                       {"trace_alone", trace_alone}});
  }
  const models::PreTraceMemory& start = report.before_recording;
  return {{"snapshot", report.snapshot},
          {"device", report.device},
          {"trace_entries", report.trace_entries},
          {"allocator_settings_recorded", report.has_settings},
          {"warnings", report.warnings},
          {"before_recording",
           {{"segments", start.segments.size()},
            {"reserved_bytes", start.reserved_bytes},
            {"blocks", start.blocks()},
            {"allocated_bytes", start.allocated_bytes()},
            {"live_blocks", start.live_blocks},
            {"live_bytes", start.live_bytes},
            {"freed_blocks", start.freed_blocks},
            {"freed_bytes", start.freed_bytes},
            {"rebuilt", start.unrestorable.empty()},
            {"not_rebuilt_because", start.unrestorable}}},
          {"device_memory_bytes", report.device_memory_bytes == 0 ? json(nullptr) : json(report.device_memory_bytes)},
          {"device_memory_source", report.device_memory_source},
          {"consistency",
           {{"checked", report.consistency.checked},
            {"matches", report.consistency.matches},
            {"segments", report.consistency.segments},
            {"blocks", report.consistency.blocks},
            {"detail", report.consistency.detail}}},
          {"settings", columns}};
}

// Memory over time: one row per setting and trace entry, after the entry.
std::string over_time_csv(const MemoryReport& report) {
  std::string csv = "setting,trace_index,action,allocated_bytes,reserved_bytes\n";
  for (const Column& c : report.columns) {
    // A label holds commas (PyTorch's syntax): quoted, its quotes doubled.
    std::string label = "\"";
    for (char ch : c.label) label += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    label += "\"";
    for (size_t i = 0; i < c.replay.allocated_bytes.size(); ++i) {
      csv += fmt::format("{},{},{},{},{}\n", label, i, report.actions[i], c.replay.allocated_bytes[i],
                         c.replay.reserved_bytes[i]);
    }
  }
  return csv;
}

int run_memory(const MemoryCliOptions& options) {
  const MemoryReport report = build_report(options);
  for (const std::string& warning : report.warnings) std::cerr << "warning: " << warning << "\n";
  std::cout << (options.json ? to_json(report).dump(2) + "\n" : format_text(report));
  if (!options.out_dir.empty()) {
    create_output_folder(options.out_dir);
    const std::filesystem::path dir(options.out_dir);
    write_text_file((dir / "memory.json").string(), to_json(report).dump(2) + "\n");
    write_text_file((dir / "memory_over_time.csv").string(), over_time_csv(report));
  }
  return report.consistency.checked && !report.consistency.matches ? kExitFindings : kExitSuccess;
}

}  // namespace

void add_memory_command(CLI::App& app, CommandStatus& status) {
  auto options = std::make_shared<MemoryCliOptions>();
  CLI::App* command = app.add_subcommand(
      "memory",
      "Replay a PyTorch CUDA memory snapshot (torch.cuda.memory._dump_snapshot) through a model of PyTorch's caching "
      "allocator: check that its own settings rebuild the snapshot's segments, and compare peak allocated / reserved "
      "memory, fragmentation, cudaMalloc calls and OOMs under other PYTORCH_CUDA_ALLOC_CONF settings side by side.");
  command->add_option("snapshot", options->snapshot, "the snapshot pickle")->required();
  command->add_option("--alloc-conf", options->alloc_confs,
                      "a PYTORCH_CUDA_ALLOC_CONF setting to compare, e.g. expandable_segments:True or "
                      "max_split_size_mb:128,garbage_collection_threshold:0.8; repeatable")
      ->type_name("STR");
  command->add_option("--device", options->device,
                      "the device whose trace to replay (default: the only device with trace entries)");
  command->add_option("--device-memory", options->device_memory,
                      "memory the allocator may take, e.g. 80G (binary units; default: the trace's first oom entry "
                      "tells it, else unbounded)")
      ->type_name("SIZE");
  command->add_flag("--json", options->json, "print the comparison as JSON instead of the table");
  command
      ->add_option("--out", options->out_dir,
                   "write memory.json and memory_over_time.csv (allocated and reserved bytes per setting and trace "
                   "entry) into this folder")
      ->check(output_folder_path())
      ->type_name("DIR");
  command->footer(kMemoryFooter);
  command->callback([options, &status] { status.exit_code = run_memory(*options); });
}

}  // namespace tandem::app
