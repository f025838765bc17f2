// Reading one dump (core/flight_recorder.h's parse_dump), ours or PyTorch's, versions 2.x, pickle or
// JSON: both formats become a pickle::Value first, then one strict reader makes the FrDump.
#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/flight_recorder.h"
#include "core/fr_dump_internal.h"
#include "core/text.h"

namespace tandem {
namespace {

using fr_dump_detail::is_digits;
using fr_dump_detail::RankListMemo;
using pickle::Dict;
using pickle::List;
using pickle::Value;

// JSON dumps are flat (depth 4); the limit keeps the conversion to pickle::Value shallow.
constexpr int kMaxJsonDepth = 1000;

// Builds a pickle::Value straight from the JSON parser's events. Key order is kept (pg_status
// refers to groups by their position in pg_config), a repeated key is an error (it would be a
// second group of one name), and nesting stops at kMaxJsonDepth.
class JsonToValue : public nlohmann::json_sax<nlohmann::json> {
 public:
  Value take_result() { return std::move(result_); }

  bool null() override { return add(pickle::None{}); }
  bool boolean(bool b) override { return add(b); }
  bool number_integer(number_integer_t i) override { return add(int64_t{i}); }
  bool number_unsigned(number_unsigned_t u) override {
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(ErrorCode::kFormat, "integer {} too large", u);
    return add(static_cast<int64_t>(u));
  }
  bool number_float(number_float_t d, const string_t&) override { return add(d); }
  bool string(string_t& s) override { return add(std::move(s)); }
  bool binary(binary_t&) override { fail(ErrorCode::kFormat, "bad JSON: binary value"); }
  bool start_object(std::size_t) override { return open(Dict{}); }
  bool start_array(std::size_t) override { return open(List{}); }
  bool key(string_t& k) override {
    if (!open_.back().keys.insert(k).second) fail(ErrorCode::kFormat, "JSON key '{}' repeated", k);
    open_.back().key = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    fail(ErrorCode::kFormat, "bad JSON: {}", e.what());
  }

 private:
  struct Open {
    Value container;
    std::string key;                        // an object's key waiting for its value
    std::unordered_set<std::string> keys;  // an object's keys so far
  };

  bool add(Value value) {
    if (open_.empty()) {
      result_ = std::move(value);
    } else if (auto* list = std::get_if<List>(&open_.back().container.v)) {
      list->push_back(std::move(value));
    } else {
      std::get<Dict>(open_.back().container.v).emplace_back(std::move(open_.back().key), std::move(value));
    }
    return true;
  }

  bool open(Value container) {
    if (open_.size() >= static_cast<size_t>(kMaxJsonDepth)) fail(ErrorCode::kFormat, "JSON nested deeper than {}", kMaxJsonDepth);
    open_.push_back(Open{std::move(container), {}, {}});
    return true;
  }

  bool close() {
    Value done = std::move(open_.back().container);
    open_.pop_back();
    return add(std::move(done));
  }

  std::vector<Open> open_;
  Value result_;
};

Value parse_json(std::string_view text) {
  JsonToValue builder;
  nlohmann::json::sax_parse(text.begin(), text.end(), &builder);
  return builder.take_result();
}

constexpr std::string_view kTopLevelKeys[] = {"version", "comm_lib_version", "pg_config", "pg_status", "entries",
                                              "nccl_comm_state"};
constexpr std::string_view kGroupKeys[] = {"name", "desc", "ranks"};
constexpr std::string_view kStatusKeys[] = {"last_enqueued_collective", "last_started_collective",
                                            "last_completed_collective"};
constexpr std::string_view kEntryKeys[] = {
    "record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name",
    "time_created_ns", "duration_ms", "input_sizes", "input_dtypes", "output_sizes", "output_dtypes", "state",
    "time_discovered_started_ns", "time_discovered_completed_ns", "retired", "timeout_ms", "is_p2p", "thread_id",
    "thread_name", "frames"};

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

// A key of kEntryKeys, found while compiling: its position there.
struct EntryKey {
  consteval EntryKey(const char* key) : index(0) {
    while (kEntryKeys[index] != key) ++index;  // past the end: not a constant expression, so an error
  }
  size_t index;
};

// Where a value is in a dump, for error messages. A dump holds thousands of entries, so an
// entry's ("entries[12].input_sizes") is spelled out only when an error names it.
class Path {
 public:
  Path(const char* text) : text_(text) {}
  Path(std::string_view text) : text_(text) {}
  Path(const std::string& text) : text_(text) {}

  static Path entry(size_t index, const char* key = nullptr) {
    Path path("");
    path.entry_index_ = index;
    path.entry_key_ = key;
    return path;
  }

  std::string str() const {
    if (entry_index_ == kNone) return std::string(text_);
    if (entry_key_ == nullptr) return fmt::format("entries[{}]", entry_index_);
    return fmt::format("entries[{}].{}", entry_index_, entry_key_);
  }

 private:
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();
  std::string_view text_;
  size_t entry_index_ = kNone;
  const char* entry_key_ = nullptr;
};

// Turns a dump's Value into an FrDump, naming the source and the field in every error. Fields a
// version before ours may lack are optional; for our own version every key must be known (older
// dumps carried keys we never saw, which are skipped).
class DumpReader {
 public:
  DumpReader(const std::string& source, bool is_json, RankListMemo* memo = nullptr)
      : source_(source), json_(is_json), memo_(memo) {}

  FrDump read(const Value& root) {
    if (!root.is_dict()) bad("(top level)", fmt::format("expected a dict, got {}", root.type_name()));
    FrDump dump;
    dump.version = text(field(root, "(top level)", "version"), "version");
    if (!dump.version.starts_with("2.") || !is_digits(std::string_view(dump.version).substr(2))) {
      bad("version", fmt::format("unsupported flight-recorder version '{}' (expected 2.x)", dump.version));
    }
    strict_ = dump.version == kFrVersion;
    check_keys(root, "(top level)", kTopLevelKeys);
    // Version 2.7 called it nccl_version; older ones had neither.
    const Value* lib = root.find("comm_lib_version");
    const char* lib_key = "comm_lib_version";
    if (lib == nullptr) {
      lib = root.find("nccl_version");
      lib_key = "nccl_version";
    }
    if (lib != nullptr) dump.comm_lib_version = text(*lib, lib_key);
    dump.groups = groups(field(root, "(top level)", "pg_config"));
    if (const Value* entries = root.find("entries")) {
      const List& items = list(*entries, "entries");
      dump.entries.resize(items.size());
      for (size_t i = 0; i < items.size(); ++i) entry(items[i], i, dump.entries[i]);
    }
    // After the entries: they tell which group each pg_status key means.
    static const Value kNoStatus;
    const Value* status = root.find("pg_status");
    read_status(status != nullptr ? *status : kNoStatus, dump);
    return dump;
  }

 private:
  [[noreturn]] void bad(const Path& path, std::string_view what) const {
    fail(ErrorCode::kFormat, "{}: {}: {}", source_, path.str(), what);
  }

  // Runs one of Value's typed accessors, naming `path` when it throws.
  template <typename Get>
  auto typed(const Path& path, Get get) const {
    try {
      return get();
    } catch (const Error& e) {
      bad(path, e.what());
    }
  }

  const Value& field(const Value& dict, const Path& path, std::string_view key) const {
    const Value* item = dict.find(key);
    if (item == nullptr) bad(path, fmt::format("missing key '{}'", key));
    return *item;
  }

  template <size_t N>
  void check_keys(const Value& dict, const Path& path, const std::string_view (&known)[N]) const {
    if (!strict_) return;
    for (const auto& [key, unused] : dict.as_dict()) {
      if (!key.is_string()) bad(path, fmt::format("key of type {}", key.type_name()));
      if (std::find(std::begin(known), std::end(known), key.as_string()) == std::end(known)) {
        bad(path, fmt::format("unknown key '{}'", key.as_string()));
      }
    }
  }

  // Names end up on terminals and in reports: control characters are kept escaped (core/text.h).
  std::string text(const Value& v, const Path& path) const {
    return printable(typed(path, [&] { return std::cref(v.as_string()); }).get());
  }
  int64_t integer(const Value& v, const Path& path) const {
    return typed(path, [&] { return v.as_int(); });
  }
  bool boolean(const Value& v, const Path& path) const {
    return typed(path, [&] { return v.as_bool(); });
  }
  const List& list(const Value& v, const Path& path) const {
    return typed(path, [&] { return std::cref(v.as_list()); });
  }
  const Dict& dict(const Value& v, const Path& path) const {
    return typed(path, [&] { return std::cref(v.as_dict()); });
  }

  int64_t integer_in(const Value& v, const Path& path, int64_t min, int64_t max) const {
    const int64_t i = integer(v, path);
    if (i < min || i > max) bad(path, fmt::format("{} out of range [{}, {}]", i, min, max));
    return i;
  }

  // PyTorch writes pg_status values as ints in pickle and as strings in JSON; either is read.
  int64_t integer_or_string(const Value& v, const Path& path) const {
    if (!v.is_string()) return integer(v, path);
    const std::string& s = v.as_string();
    int64_t i = 0;
    const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), i);
    if (error != std::errc() || end != s.data() + s.size()) bad(path, fmt::format("'{}' is not an integer", s));
    return i;
  }

  // "[0, 1, 2]" as ranks_str writes it (an actual list is accepted too).
  std::vector<int> ranks(const Value& v, const std::string& path) const {
    std::vector<int> result;
    if (!v.is_string()) {
      for (const Value& rank : list(v, path)) {
        result.push_back(static_cast<int>(integer_in(rank, path, 0, std::numeric_limits<int>::max())));
      }
      return result;
    }
    if (memo_ != nullptr && memo_->text == v.as_string()) return memo_->ranks;
    result = parse_rank_list(v.as_string(), path);
    if (memo_ != nullptr) {
      memo_->text = v.as_string();
      memo_->ranks = result;
    }
    return result;
  }

  std::vector<int> parse_rank_list(const std::string& list_text, const std::string& path) const {
    std::vector<int> result;
    const std::string_view whole = trim(list_text);
    if (whole.size() < 2 || whole.front() != '[' || whole.back() != ']')
      bad(path, fmt::format("'{}' is not a list of ranks", whole));
    std::string_view rest = whole.substr(1, whole.size() - 2);
    if (trim(rest).empty()) return result;
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view piece = trim(rest.substr(0, comma));
      int rank = -1;
      const auto [end, error] = std::from_chars(piece.data(), piece.data() + piece.size(), rank);
      if (error != std::errc() || end != piece.data() + piece.size() || rank < 0) {
        bad(path, fmt::format("'{}' is not a list of ranks", whole));
      }
      result.push_back(rank);
      if (comma == std::string_view::npos) return result;
      rest.remove_prefix(comma + 1);
    }
  }

  std::vector<FrGroup> groups(const Value& config) const {
    std::vector<FrGroup> result;
    if (config.is_none()) return result;  // PyTorch's JSON writes null when there are no groups
    for (const auto& [key, info] : dict(config, "pg_config")) {
      const std::string key_text = text(key, "pg_config key");
      const std::string path = fmt::format("pg_config['{}']", key_text);
      dict(info, path);
      check_keys(info, path, kGroupKeys);
      FrGroup group;
      group.name = text(field(info, path, "name"), path + ".name");
      if (group.name != key_text) bad(path + ".name", fmt::format("'{}' differs from its key", group.name));
      group.desc = text(field(info, path, "desc"), path + ".desc");
      group.ranks = ranks(field(info, path, "ranks"), path + ".ranks");
      result.push_back(std::move(group));
    }
    return result;
  }

  // pg_status is keyed by pg_id, the number every entry carries: sparse in PyTorch (0, 1, 4, 5, ...,
  // the rank's process groups in creation order, some of them not NCCL's), not the position in
  // pg_config. A key is matched to its group through the entries that name both; the groups no
  // entry names, by order, when every pg_config name is a number (PyTorch names a group by a
  // job-wide creation counter, so names and pg_ids rise together) and the counts agree. A key
  // matched neither way is a warning: that group's progress is not used, the dump still is.
  void read_status(const Value& status, FrDump& dump) const {
    std::map<int64_t, std::string> named;  // pg_id -> group name, from the entries
    for (size_t i = 0; i < dump.entries.size(); ++i) {
      const FrEntry& e = dump.entries[i];
      const auto [it, fresh] = named.emplace(e.pg_id, e.pg_name);
      if (!fresh && it->second != e.pg_name) {
        bad(Path::entry(i, "pg_id"), fmt::format("pg_id {} names group '{}', an earlier entry's names '{}'", e.pg_id,
                                                 e.pg_name, it->second));
      }
    }
    std::map<std::string, size_t> position;
    for (size_t i = 0; i < dump.groups.size(); ++i) position[dump.groups[i].name] = i;
    for (const auto& [pg_id, group_name] : named) {
      if (auto it = position.find(group_name); it != position.end()) dump.groups[it->second].pg_id = static_cast<int>(pg_id);
    }
    if (status.is_none()) return;
    struct Key {
      int64_t pg_id;
      const Value* info;
      std::string path;
    };
    std::vector<Key> keys;
    for (const auto& [key, info] : dict(status, "pg_status")) {
      const std::string key_text = text(key, "pg_status key");
      const std::string path = fmt::format("pg_status['{}']", key_text);
      int64_t pg_id = 0;
      const auto [end, error] = std::from_chars(key_text.data(), key_text.data() + key_text.size(), pg_id);
      if (error != std::errc() || end != key_text.data() + key_text.size() || pg_id < 0) {
        bad(path, "the key is not a pg_id");
      }
      dict(info, path);
      check_keys(info, path, kStatusKeys);
      keys.push_back({pg_id, &info, path});
    }
    std::map<int64_t, size_t> group_of = status_groups(keys, named, position, dump.groups);
    for (const Key& key : keys) {
      auto it = group_of.find(key.pg_id);
      if (it == group_of.end()) {
        dump.warnings.push_back(fmt::format("{}: no entry names pg_id {} and pg_config's groups cannot be matched to "
                                            "pg_status by order; that group's progress is not used",
                                            key.path, key.pg_id));
        continue;
      }
      FrGroup& group = dump.groups[it->second];
      group.pg_id = static_cast<int>(key.pg_id);
      const Value& info = *key.info;
      group.last_enqueued_collective =
          integer_or_string(field(info, key.path, kStatusKeys[0]), key.path + ".last_enqueued_collective");
      group.last_started_collective =
          integer_or_string(field(info, key.path, kStatusKeys[1]), key.path + ".last_started_collective");
      group.last_completed_collective =
          integer_or_string(field(info, key.path, kStatusKeys[2]), key.path + ".last_completed_collective");
    }
  }

  // pg_id -> position in pg_config for the keys of pg_status that can be matched (see read_status).
  template <typename KeyList>
  static std::map<int64_t, size_t> status_groups(const KeyList& keys, const std::map<int64_t, std::string>& named,
                                                 const std::map<std::string, size_t>& position,
                                                 const std::vector<FrGroup>& groups) {
    std::map<int64_t, size_t> by_entries;
    for (const auto& key : keys) {
      auto name = named.find(key.pg_id);
      if (name == named.end()) continue;
      if (auto it = position.find(name->second); it != position.end()) by_entries[key.pg_id] = it->second;
    }
    if (by_entries.size() == keys.size() || keys.size() != groups.size()) return by_entries;
    const auto numeric = [](const std::string& s) {
      return !s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (!std::all_of(groups.begin(), groups.end(), [&](const FrGroup& g) { return numeric(g.name); })) return by_entries;
    std::vector<size_t> by_name(groups.size());
    for (size_t i = 0; i < by_name.size(); ++i) by_name[i] = i;
    std::sort(by_name.begin(), by_name.end(),
              [&](size_t a, size_t b) { return std::stol(groups[a].name) < std::stol(groups[b].name); });
    std::vector<int64_t> ids;
    for (const auto& key : keys) ids.push_back(key.pg_id);
    std::sort(ids.begin(), ids.end());
    std::map<int64_t, size_t> by_order;
    for (size_t i = 0; i < ids.size(); ++i) by_order[ids[i]] = by_name[i];
    // The order must agree with every match the entries made, else it is not to be trusted.
    for (const auto& [pg_id, index] : by_entries) {
      if (by_order.at(pg_id) != index) return by_entries;
    }
    return by_order;
  }

  std::vector<std::vector<int64_t>> sizes(const Value& v, const Path& path) const {
    std::vector<std::vector<int64_t>> result;
    const List& shapes = list(v, path);
    result.reserve(shapes.size());
    for (const Value& shape : shapes) {
      const List& dims_value = list(shape, path);
      std::vector<int64_t>& dims = result.emplace_back();
      dims.reserve(dims_value.size());
      for (const Value& dim : dims_value) dims.push_back(integer(dim, path));
    }
    return result;
  }

  std::vector<std::string> strings(const Value& v, const Path& path) const {
    std::vector<std::string> result;
    const List& items = list(v, path);
    result.reserve(items.size());
    for (const Value& s : items) result.push_back(text(s, path));
    return result;
  }

  // None in pickle, 0 in JSON: not discovered yet.
  std::optional<int64_t> discovered_time(const Value* v, const Path& path) const {
    if (v == nullptr || v->is_none()) return std::nullopt;
    const int64_t time_ns = integer_in(*v, path, 0, kMaxFrTimeNs);
    if (json_ && time_ns == 0) return std::nullopt;
    return time_ns;
  }

  FrState state(const Value& v, const Path& path) const {
    const std::string& s = typed(path, [&] { return std::cref(v.as_string()); });
    for (FrState candidate : {FrState::kScheduled, FrState::kStarted, FrState::kCompleted}) {
      if (name(candidate) == s) return candidate;
    }
    bad(path, fmt::format("unknown state '{}' (expected scheduled, started or completed)", s));
  }

  // An entry's values by their key's position in kEntryKeys (nullptr: absent), in one pass. As in
  // check_keys, an unknown key is an error for our own version and skipped for older ones.
  std::array<const Value*, std::size(kEntryKeys)> entry_fields(const Dict& entry, const Path& path) const {
    constexpr size_t kKeys = std::size(kEntryKeys);
    std::array<const Value*, kKeys> fields{};
    size_t next = 0;  // writers keep kEntryKeys' order, so the key after the last one found comes first
    for (const auto& [key, value] : entry) {
      if (!key.is_string()) {
        if (strict_) bad(path, fmt::format("key of type {}", key.type_name()));
        continue;
      }
      const std::string& name = key.as_string();
      size_t probe = 0;
      while (probe < kKeys && kEntryKeys[(next + probe) % kKeys] != name) ++probe;
      if (probe == kKeys) {
        if (strict_) bad(path, fmt::format("unknown key '{}'", name));
        continue;
      }
      const size_t found = (next + probe) % kKeys;
      if (fields[found] == nullptr) fields[found] = &value;  // the first, as Value::find
      next = found + 1;
    }
    return fields;
  }

  void entry(const Value& v, size_t index, FrEntry& e) const {
    const Path path = Path::entry(index);
    const auto fields = entry_fields(dict(v, path), path);
    const auto find = [&](EntryKey key) { return fields[key.index]; };
    const auto at = [&](EntryKey key) -> const Value& {
      if (fields[key.index] == nullptr) bad(path, fmt::format("missing key '{}'", kEntryKeys[key.index]));
      return *fields[key.index];
    };
    const auto sub = [&](EntryKey key) { return Path::entry(index, kEntryKeys[key.index].data()); };
    e.record_id =
        static_cast<uint64_t>(integer_in(at("record_id"), sub("record_id"), 0, std::numeric_limits<int64_t>::max()));
    e.pg_id = static_cast<int>(
        integer_in(at("pg_id"), sub("pg_id"), std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
    const List& pg = list(at("process_group"), sub("process_group"));
    if (pg.size() != 2) bad(sub("process_group"), fmt::format("expected (name, desc), got {} items", pg.size()));
    e.pg_name = text(pg[0], sub("process_group"));
    e.pg_desc = text(pg[1], sub("process_group"));
    e.collective_seq_id = integer(at("collective_seq_id"), sub("collective_seq_id"));
    e.p2p_seq_id = integer(at("p2p_seq_id"), sub("p2p_seq_id"));
    e.op_id = integer(at("op_id"), sub("op_id"));
    e.profiling_name = text(at("profiling_name"), sub("profiling_name"));
    e.time_created_ns = integer_in(at("time_created_ns"), sub("time_created_ns"), 0, kMaxFrTimeNs);
    if (const Value* duration = find("duration_ms"); duration != nullptr && !duration->is_none()) {
      e.duration_ms = typed(sub("duration_ms"), [&] { return duration->as_number(); });
      if (!(*e.duration_ms >= 0 && *e.duration_ms <= kMaxFrDurationMs)) {
        bad(sub("duration_ms"), fmt::format("{} out of range [0, {:g}]", *e.duration_ms, kMaxFrDurationMs));
      }
    }
    e.input_sizes = sizes(at("input_sizes"), sub("input_sizes"));
    e.input_dtypes = strings(at("input_dtypes"), sub("input_dtypes"));
    e.output_sizes = sizes(at("output_sizes"), sub("output_sizes"));
    e.output_dtypes = strings(at("output_dtypes"), sub("output_dtypes"));
    e.state = state(at("state"), sub("state"));
    e.time_discovered_started_ns = discovered_time(find("time_discovered_started_ns"), sub("time_discovered_started_ns"));
    e.time_discovered_completed_ns =
        discovered_time(find("time_discovered_completed_ns"), sub("time_discovered_completed_ns"));
    e.retired = boolean(at("retired"), sub("retired"));
    e.timeout_ms = integer(at("timeout_ms"), sub("timeout_ms"));
    e.is_p2p = boolean(at("is_p2p"), sub("is_p2p"));
    // Added in later 2.x versions.
    if (const Value* id = find("thread_id")) e.thread_id = text(*id, sub("thread_id"));
    if (const Value* thread = find("thread_name")) e.thread_name = text(*thread, sub("thread_name"));
  }

  const std::string& source_;
  const bool json_;
  RankListMemo* memo_;  // none: every list parsed
  bool strict_ = false;
};

}  // namespace

FrDump parse_dump(std::string_view bytes, const std::string& source) {
  return fr_dump_detail::parse_dump(bytes, source, nullptr);
}

FrDump fr_dump_detail::parse_dump(std::string_view bytes, const std::string& source, RankListMemo* memo) {
  // A UTF-8 byte-order mark (an editor's) can only start text: JSON. It is not part of the JSON.
  constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
  if (bytes.starts_with(kByteOrderMark)) bytes.remove_prefix(kByteOrderMark.size());
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) fail(ErrorCode::kFormat, "{}: empty flight-recorder dump", source);
  // Pickles start with PROTO (0x80) or, at protocols 0 and 1, an opcode such as '(' or '}'; '[' is
  // no pickle opcode, so a top-level array is JSON (and refused as "not an object" by the reader).
  const bool is_json = bytes[first] == '{' || bytes[first] == '[';
  Value root;
  try {
    root = is_json ? parse_json(bytes) : pickle::loads(bytes);
  } catch (const Error& e) {
    fail(ErrorCode::kFormat, "{}: {}", source, e.what());
  }
  return DumpReader(source, is_json, memo).read(root);
}

}  // namespace tandem
