#include "core/text.h"

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

}  // namespace tandem
