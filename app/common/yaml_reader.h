// Strict YAML reading for tandem's files (scenarios, plan sweeps, calibration profiles): every
// error names the file, line and column of the node it is about ("scenario.yaml:12:5:
// workload.sizes.min must be ..."), and a mapping's keys are checked against the keys its section
// accepts (unknown or duplicate keys are errors). Internal to app/.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "app/common/common.h"
#include "core/error.h"
#include "core/sizes.h"
#include "core/text.h"

namespace tandem::app {

inline SourceMark source_mark(const YAML::Mark& mark) {
  if (mark.is_null()) return {};
  return {mark.line + 1, mark.column + 1};
}

inline std::string node_kind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return fmt::format("'{}'", node.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

// One scenario file being read: every error it raises starts with "file:line:column: ".
class Reader {
 public:
  // `document` names the whole file in messages ("unknown key 'x' in the plan").
  explicit Reader(std::string file, std::string document = "scenario")
      : file_(std::move(file)), document_(std::move(document)) {}

  const std::string& document() const { return document_; }

  const std::string& file() const { return file_; }

  template <typename... Args>
  [[noreturn]] void fail_at(const YAML::Node& node, fmt::format_string<Args...> format, Args&&... args) const {
    fail_at_mark(source_mark(node.Mark()), fmt::format(format, std::forward<Args>(args)...));
  }

  [[noreturn]] void fail_at_mark(SourceMark mark, const std::string& message) const {
    if (mark.line == 0) fail(ErrorCode::kFormat, "{}: {}", file_, message);
    fail(ErrorCode::kFormat, "{}:{}:{}: {}", file_, mark.line, mark.column, message);
  }

  // Runs `parse` and turns a tandem::Error it throws (a bad name, a bad size) into one at `node`.
  template <typename Parse>
  auto at(const YAML::Node& node, std::string_view path, Parse&& parse) const -> decltype(parse()) {
    try {
      return parse();
    } catch (const Error& error) {
      fail_at(node, "{}: {}", path, error.what());
    }
  }

  std::string scalar(const YAML::Node& node, std::string_view path) const {
    if (!node.IsScalar()) fail_at(node, "{} must be a single value (got {})", path, node_kind(node));
    return node.Scalar();
  }

  std::string text(const YAML::Node& node, std::string_view path) const {
    std::string value = scalar(node, path);
    if (value.empty()) fail_at(node, "{} must not be empty", path);
    if (const size_t at = find_control_character(value, /*layout_allowed=*/true); at != std::string::npos) {
      fail_at(node, "{} has a control character (byte 0x{:02x} at position {}): names are printed on terminals", path,
              static_cast<unsigned char>(value[at]), at);
    }
    return value;
  }

  int64_t integer(const YAML::Node& node, std::string_view path, int64_t min, int64_t max) const {
    const std::string value = scalar(node, path);
    int64_t result = 0;
    auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), result);
    if (error != std::errc() || end != value.data() + value.size() || result < min || result > max) {
      fail_at(node, "{} must be an integer from {} to {} (got '{}')", path, min, max, value);
    }
    return result;
  }

  // A finite number in [min, max] (or (min, max] when min_exclusive).
  double number(const YAML::Node& node, std::string_view path, double min, double max, bool min_exclusive) const {
    const std::string value = scalar(node, path);
    double result = 0;
    auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), result);
    const bool in_range = min_exclusive ? result > min : result >= min;
    if (error != std::errc() || end != value.data() + value.size() || !std::isfinite(result) || !in_range ||
        result > max) {
      fail_at(node, "{} must be a number {} {:g} and at most {:g} (got '{}')", path, min_exclusive ? ">" : ">=", min,
              max, value);
    }
    return result;
  }

  bool boolean(const YAML::Node& node, std::string_view path) const {
    const std::string value = scalar(node, path);
    if (value == "true") return true;
    if (value == "false") return false;
    fail_at(node, "{} must be true or false (got '{}')", path, value);
  }

  int64_t size(const YAML::Node& node, std::string_view path) const {
    const std::string value = scalar(node, path);
    const int64_t bytes = at(node, path, [&] { return parse_size_bytes(value, path); });
    if (bytes > kMaxScenarioSizeBytes) {
      fail_at(node, "{} is {} bytes, above the limit of {} ({})", path, bytes, kMaxScenarioSizeBytes,
              format_size(kMaxScenarioSizeBytes));
    }
    return bytes;
  }

  // A non-empty list.
  std::vector<YAML::Node> list(const YAML::Node& node, std::string_view path) const {
    if (!node.IsSequence()) fail_at(node, "{} must be a list (got {})", path, node_kind(node));
    if (node.size() == 0) fail_at(node, "{} must not be empty", path);
    return std::vector<YAML::Node>(node.begin(), node.end());
  }

 private:
  std::string file_;
  std::string document_;
};

// One mapping of the file, its keys checked against those its section accepts: every key known,
// none twice. `path` names the section in messages ("workload", "expect[2]"; "" at the top).
class Mapping {
 public:
  // `keys`: the accepted names, a std::array or std::vector of std::string_view.
  template <typename Keys>
  Mapping(const Reader& reader, const YAML::Node& node, std::string path, const Keys& keys)
      : reader_(reader), node_(node), path_(std::move(path)) {
    if (!node.IsMap())
      reader.fail_at(node, "{} must be a mapping of keys to values (got {})", where(), node_kind(node));
    for (auto it = node.begin(); it != node.end(); ++it) {
      // By value: the iterator's operator-> hands out a temporary.
      const YAML::Node key = it->first;
      const YAML::Node value = it->second;
      if (!key.IsScalar()) reader.fail_at(key, "keys in {} must be plain names (got {})", where(), node_kind(key));
      const std::string& key_name = key.Scalar();
      if (std::find(keys.begin(), keys.end(), key_name) == keys.end()) {
        const std::vector<std::string> names(keys.begin(), keys.end());
        reader.fail_at(key, "unknown key '{}' in {}{} (expected: {})", key_name, where(), did_you_mean(key_name, names),
                       fmt::join(keys, ", "));
      }
      if (find(key_name) != nullptr) reader.fail_at(key, "duplicate key '{}' in {}", key_name, where());
      entries_.emplace_back(key_name, value);
    }
  }

  const YAML::Node& node() const { return node_; }
  const std::vector<std::pair<std::string, YAML::Node>>& entries() const { return entries_; }

  // The value of `key`, or nullptr when the mapping does not have it.
  const YAML::Node* find(std::string_view key) const {
    for (const auto& [entry_key, value] : entries_) {
      if (entry_key == key) return &value;
    }
    return nullptr;
  }

  const YAML::Node& require(std::string_view key) const {
    const YAML::Node* value = find(key);
    if (value == nullptr) reader_.fail_at(node_, "missing required key '{}' in {}", key, where());
    return *value;
  }

  // "workload.sizes" for key "sizes" of "workload".
  std::string path(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  std::string where() const { return path_.empty() ? "the " + reader_.document() : path_; }

 private:
  const Reader& reader_;
  YAML::Node node_;
  std::string path_;
  std::vector<std::pair<std::string, YAML::Node>> entries_;
};

// Flow collections ([..], {..}) nested deeper than this are refused before yaml-cpp sees them (its
// parser recurses, and gave only "bad file" at 10,000 levels). tandem's files nest a few levels.
inline constexpr int kMaxYamlNesting = 64;

// Records where each document starts, and nothing else.
struct DocumentStarts : YAML::EventHandler {
  std::vector<YAML::Mark> marks;
  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// The one YAML document of a tandem file, checked as text first: no NUL byte (a file is text),
// flow nesting within kMaxYamlNesting, and exactly one document (a second, after '---', was
// silently ignored). Null when the file is empty.
inline YAML::Node load_one_document(const Reader& reader, std::string_view text) {
  int line = 1, column = 1, depth = 0;
  char quote = 0;
  bool comment = false;
  char previous = '\n';
  for (const char c : text) {
    if (c == '\0') reader.fail_at_mark({line, column}, "a NUL byte: a " + reader.document() + " is text");
    if (comment) {
      // "# see [1" in a comment is no nesting.
    } else if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '#' && (previous == ' ' || previous == '\t' || previous == '\n')) {
      comment = true;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxYamlNesting) {
        reader.fail_at_mark({line, column}, fmt::format("nested deeper than {} levels", kMaxYamlNesting));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
    if (c == '\n') {
      ++line;
      column = 1;
      quote = 0;  // a quote never spans lines in tandem's files; a stray one must not hide the rest
      comment = false;
    } else {
      ++column;
    }
    previous = c;
  }
  // Whether there is a second document, from the parser's events alone and at most two documents
  // deep: YAML::LoadAll never returns on some malformed input (yaml-cpp 0.7 keeps yielding empty
  // documents; found by fuzz_scenario_yaml), while the first document loads at once.
  const std::string copy(text);
  try {
    std::istringstream stream(copy);
    YAML::Parser parser(stream);
    DocumentStarts starts;
    for (int document = 0; document < 2 && parser.HandleNextDocument(starts); ++document) {
    }
    if (starts.marks.size() > 1) {
      reader.fail_at_mark(source_mark(starts.marks[1]),
                          "a second YAML document: a " + reader.document() + " is one document (no '---' inside it)");
    }
    return YAML::Load(copy);
  } catch (const YAML::Exception& error) {
    reader.fail_at_mark(source_mark(error.mark), "invalid YAML: " + error.msg);
  }
}

}  // namespace tandem::app
