// PYTORCH_CUDA_ALLOC_CONF, read and written back: parse_alloc_conf after AllocatorConfig::parseArgs
// (c10/core/AllocatorConfig.cpp), and describe. The allocator that uses the settings is
// caching_allocator.cc.
#include "models/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"

namespace tandem::models {

namespace {

// AllocatorConfig::lexArgs: ',' ':' '[' ']' are tokens of their own, spaces vanish.
std::vector<std::string> lex(std::string_view text) {
  std::vector<std::string> tokens;
  std::string word;
  for (char c : text) {
    if (c == ',' || c == ':' || c == '[' || c == ']') {
      if (!word.empty()) tokens.push_back(std::move(word));
      word.clear();
      tokens.emplace_back(1, c);
    } else if (c != ' ') {
      word.push_back(c);
    }
  }
  if (!word.empty()) tokens.push_back(std::move(word));
  return tokens;
}

class ConfParser {
 public:
  explicit ConfParser(std::string_view text) : text_(text), tokens_(lex(text)) {}

  AllocatorSettings parse() {
    AllocatorSettings settings;
    while (i_ < tokens_.size()) {
      const std::string key = tokens_[i_++];
      if (key == "max_split_size_mb" || key == "max_non_split_rounding_mb") {
        expect(":", key);
        const uint64_t mib = whole_number(key, value(key));
        // parseMaxSplitSize: "must be >= kLargeBuffer / kMB"
        if (mib < kLargeBuffer / kMiB) bad("{} must be at least {} (MiB), got {}", key, kLargeBuffer / kMiB, mib);
        const uint64_t bytes = mib > kNoMaxSplitSize / kMiB ? kNoMaxSplitSize : mib * kMiB;
        (key == "max_split_size_mb" ? settings.max_split_size_bytes : settings.max_non_split_rounding_bytes) = bytes;
      } else if (key == "garbage_collection_threshold") {
        expect(":", key);
        const double threshold = real_number(key, value(key));
        if (!(threshold > 0 && threshold < 1)) bad("{} must be in (0, 1), got {}", key, threshold);
        settings.garbage_collection_threshold = threshold;
      } else if (key == "per_process_memory_fraction") {
        expect(":", key);
        const double fraction = real_number(key, value(key));
        if (!(fraction > 0 && fraction <= 1)) bad("{} must be in (0, 1], got {}", key, fraction);
        settings.per_process_memory_fraction = fraction;
      } else if (key == "roundup_power2_divisions") {
        expect(":", key);
        roundup_divisions(settings.roundup_power2_divisions);
      } else if (key == "expandable_segments") {
        expect(":", key);
        settings.expandable_segments = true_or_false(key, value(key));
      } else if (key == "release_lock_on_cudamalloc" || key == "pinned_use_cuda_host_register" ||
                 key == "pinned_use_background_threads") {
        expect(":", key);
        true_or_false(key, value(key));  // no effect on placement
      } else if (key == "pinned_num_register_threads") {
        expect(":", key);
        whole_number(key, value(key));
      } else if (key == "backend") {
        expect(":", key);
        const std::string backend = value(key);
        if (backend == "cudaMallocAsync") bad("backend:cudaMallocAsync is not the caching allocator; not modelled");
        if (backend != "native") bad("backend must be native or cudaMallocAsync, got '{}'", backend);
      } else {
        bad("unknown key '{}' (known: max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions, "
            "garbage_collection_threshold, expandable_segments, per_process_memory_fraction, backend, "
            "release_lock_on_cudamalloc, pinned_*)",
            key);
      }
      if (i_ < tokens_.size()) expect(",", key);
    }
    return settings;
  }

 private:
  template <typename... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> format, Args&&... args) const {
    fail(ErrorCode::kInvalidArgument, "alloc conf '{}': {}", text_, fmt::format(format, std::forward<Args>(args)...));
  }

  void expect(std::string_view token, std::string_view after) {
    if (i_ >= tokens_.size() || tokens_[i_] != token) {
      bad("expected '{}' after {}{}", token, after, i_ < tokens_.size() ? fmt::format(", got '{}'", tokens_[i_]) : "");
    }
    ++i_;
  }

  std::string value(std::string_view key) {
    const bool separator = i_ < tokens_.size() && tokens_[i_].size() == 1 &&
                           std::string_view(",:[]").find(tokens_[i_][0]) != std::string_view::npos;
    if (i_ >= tokens_.size() || separator) {
      bad("{} needs a value", key);
    }
    return tokens_[i_++];
  }

  uint64_t whole_number(std::string_view key, const std::string& text) const {
    if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos) {
      bad("{} must be a whole number, got '{}'", key, text);
    }
    return std::stoull(text);
  }

  double real_number(std::string_view key, const std::string& text) const {
    char* end = nullptr;
    const double number = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(number)) {
      bad("{} must be a number, got '{}'", key, text);
    }
    return number;
  }

  bool true_or_false(std::string_view key, const std::string& text) const {
    if (text != "True" && text != "False") bad("{} must be True or False, got '{}'", key, text);
    return text == "True";
  }

  uint64_t divisions(const std::string& text) const {
    const uint64_t d = whole_number("roundup_power2_divisions", text);
    if (d != 0 && !std::has_single_bit(d)) bad("roundup_power2_divisions: {} is not a power of 2 (or 0)", d);
    return d;
  }

  // parseRoundUpPower2Divisions: "N" for every interval, or "[MB:N,...,>:N]" where MB is a power
  // of two naming the interval [MB, 2 MB) MiB; the first entry also covers the intervals below
  // it, and ">" every interval after the previous entry.
  void roundup_divisions(std::array<uint64_t, kRoundupPower2Intervals>& table) {
    if (i_ < tokens_.size() && tokens_[i_] == "[") {
      ++i_;
      bool first = true;
      size_t last_index = 0;
      while (true) {
        if (i_ >= tokens_.size()) bad("roundup_power2_divisions: missing ']'");
        if (tokens_[i_] == "]") break;
        const std::string interval = tokens_[i_++];
        expect(":", "roundup_power2_divisions interval " + interval);
        const uint64_t d = divisions(value("roundup_power2_divisions"));
        if (interval == ">") {
          std::fill(table.begin() + static_cast<ptrdiff_t>(last_index), table.end(), d);
        } else {
          const uint64_t mib = whole_number("roundup_power2_divisions interval", interval);
          if (!std::has_single_bit(mib)) bad("roundup_power2_divisions: interval {} is not a power of 2 (MiB)", mib);
          const size_t index = std::min<size_t>(std::bit_width(mib) - 1, kRoundupPower2Intervals - 1);
          if (first) std::fill(table.begin(), table.begin() + static_cast<ptrdiff_t>(index), d);
          first = false;
          table[index] = d;
          last_index = index;
        }
        if (i_ < tokens_.size() && tokens_[i_] != "]") expect(",", "roundup_power2_divisions entry");
      }
      ++i_;  // ']'
    } else {
      table.fill(divisions(value("roundup_power2_divisions")));
    }
  }

  std::string_view text_;
  std::vector<std::string> tokens_;
  size_t i_ = 0;
};

std::string number_text(double value) { return fmt::format("{}", value); }

}  // namespace

AllocatorSettings parse_alloc_conf(std::string_view text) { return ConfParser(text).parse(); }

std::string describe(const AllocatorSettings& s) {
  std::vector<std::string> parts;
  if (s.expandable_segments) parts.push_back("expandable_segments:True");
  if (s.max_split_size_bytes != kNoMaxSplitSize) {
    parts.push_back(fmt::format("max_split_size_mb:{}", s.max_split_size_bytes / kMiB));
  }
  if (s.max_non_split_rounding_bytes != kLargeBuffer) {
    parts.push_back(fmt::format("max_non_split_rounding_mb:{}", s.max_non_split_rounding_bytes / kMiB));
  }
  const auto& d = s.roundup_power2_divisions;
  if (std::all_of(d.begin(), d.end(), [&](uint64_t x) { return x == d[0]; })) {
    if (d[0] != 0) parts.push_back(fmt::format("roundup_power2_divisions:{}", d[0]));
  } else {
    std::string list;
    for (int i = 0; i < kRoundupPower2Intervals; ++i) {
      list += fmt::format("{}{}:{}", i == 0 ? "" : ",", uint64_t{1} << i, d[static_cast<size_t>(i)]);
    }
    parts.push_back("roundup_power2_divisions:[" + list + "]");
  }
  if (s.garbage_collection_threshold > 0) {
    parts.push_back("garbage_collection_threshold:" + number_text(s.garbage_collection_threshold));
  }
  if (s.per_process_memory_fraction) {
    parts.push_back("per_process_memory_fraction:" + number_text(*s.per_process_memory_fraction));
  }
  if (parts.empty()) return "default";
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : ",") + part;
  return text;
}

}  // namespace tandem::models
