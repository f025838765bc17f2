#include "core/text.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

namespace tandem {
namespace {

bool is_control(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return byte < 0x20 || byte == 0x7F;
}

}  // namespace

size_t find_control_character(std::string_view text, bool layout_allowed) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (layout_allowed && (text[i] == '\n' || text[i] == '\t')) continue;
    if (is_control(text[i])) return i;
  }
  return std::string_view::npos;
}

std::string printable(std::string_view text) {
  if (find_control_character(text) == std::string_view::npos) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (char c : text) {
    if (is_control(c)) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
}

std::string duration_text(double seconds) {
  if (std::isnan(seconds)) return "nan";
  if (seconds < 0) {
    std::string text = duration_text(-seconds);
    text.insert(text.begin(), '-');
    return text;
  }
  struct Unit {
    double seconds;
    const char* name;
  };
  static constexpr Unit kUnits[] = {{86400, "d"}, {3600, "h"}, {60, "min"}, {1, "s"},
                                    {1e-3, "ms"}, {1e-6, "us"}, {1e-9, "ns"}};
  for (const Unit& unit : kUnits) {
    const double value = seconds / unit.seconds;
    if (value < 1 && unit.seconds > 1e-9) continue;
    if (unit.seconds == 1e-9 || value >= 100) return fmt::format("{:.0f} {}", value, unit.name);
    return value >= 10 ? fmt::format("{:.1f} {}", value, unit.name) : fmt::format("{:.2f} {}", value, unit.name);
  }
  return "0 s";
}

namespace {

// Optimal string alignment distance: Levenshtein's, with a swap of two neighbours as one edit.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string closest_name(std::string_view word, const std::vector<std::string>& names) {
  // Words as long as a sentence are not typos of a name; the distance table would be large too.
  constexpr size_t kLongestWord = 64;
  if (word.empty() || word.size() > kLongestWord) return "";
  const size_t allowed = std::max<size_t>(1, word.size() / 3);
  std::string best;
  size_t best_distance = allowed + 1;
  for (const std::string& name : names) {
    if (name.size() > word.size() + allowed || word.size() > name.size() + allowed) continue;
    const size_t distance = edit_distance(word, name);
    if (distance < best_distance) {
      best_distance = distance;
      best = name;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& names) {
  const std::string name = closest_name(word, names);
  return name.empty() ? "" : fmt::format(" (did you mean '{}'?)", name);
}

}  // namespace tandem
