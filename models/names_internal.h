// How models/ reads a name into one of an enum's values (scenario keys such as `sharding`,
// `attention`, `mlp`): compared lower case with '_' read as '-', and one error listing every name.
// Internal to models/.
#pragma once

#include <cctype>
#include <initializer_list>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"

namespace tandem::models {

// Lower case, '_' read as '-'.
inline std::string name_key(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The value of `values` whose name(value) is `text`; else Error(kInvalidArgument)
// "unknown WHAT 'TEXT' (expected: a, b, c)".
template <typename Enum>
Enum parse_named(std::string_view text, std::initializer_list<Enum> values, std::string_view what) {
  std::string expected;
  for (Enum value : values) {
    if (name_key(text) == name(value)) return value;
    expected += (expected.empty() ? "" : ", ") + std::string(name(value));
  }
  fail(ErrorCode::kInvalidArgument, "unknown {} '{}' (expected: {})", what, text, expected);
}

}  // namespace tandem::models
