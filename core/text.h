// Text from files a user hands tandem (dump group and thread names, scenario names) ends up on a
// terminal and in reports. Control characters in it could move the cursor, clear the screen or
// change the title; they are shown escaped instead.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem {

// The first ASCII control character (0x00-0x1F or 0x7F) in `text`, or npos; tab and newline count
// unless `layout_allowed` (a multi-line description). Bytes from 0x80 (UTF-8) are not control
// characters here.
size_t find_control_character(std::string_view text, bool layout_allowed = false);

// `text` with each control character written as \xNN (a backslash stays a backslash).
std::string printable(std::string_view text);

// A duration for a person: "850 ns", "12.4 us", "3.20 ms", "1.50 s", "10.0 min", "2.5 h", "3.1 d",
// three significant figures in the largest unit that keeps the number at least 1. Negative
// durations keep their sign; NaN is "nan".
std::string duration_text(double seconds);

// The name in `names` nearest to `word` (a mistyped flag, key or command), for a "did you mean"
// hint: the one at the smallest edit distance (insertions, deletions, substitutions and swaps of
// two neighbours count one each), if that distance is at most a third of the word's length (at
// least 1); "" when none is that close. Ties: the first in `names`.
std::string closest_name(std::string_view word, const std::vector<std::string>& names);
// " (did you mean 'NAME'?)" for closest_name's answer, "" without one.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& names);

}  // namespace tandem
