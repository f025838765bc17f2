#include "core/text.h"

#include <cmath>

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

}  // namespace tandem
