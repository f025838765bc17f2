// Text from files a user hands tandem (dump group and thread names, scenario names) ends up on a
// terminal and in reports. Control characters in it could move the cursor, clear the screen or
// change the title; they are shown escaped instead.
#pragma once

#include <string>
#include <string_view>

namespace tandem {

// The first ASCII control character (0x00-0x1F or 0x7F) in `text`, or npos; tab and newline count
// unless `layout_allowed` (a multi-line description). Bytes from 0x80 (UTF-8) are not control
// characters here.
size_t find_control_character(std::string_view text, bool layout_allowed = false);

// `text` with each control character written as \xNN (a backslash stays a backslash).
std::string printable(std::string_view text);

}  // namespace tandem
