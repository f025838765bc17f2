// What the flight recorder's dump files share (fr_dump_read.cc reads one dump, fr_dump_files.cc
// reads a folder of them on several threads): the reader's entry point with a thread's memo of rank
// lists, and the test for a rank's digits. Not a public header: only core/fr_dump_*.cc include it.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "core/flight_recorder.h"

namespace tandem::fr_dump_detail {

// At least one digit and nothing else: a dump's minor version, a rank in a file name.
inline bool is_digits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The last "[0, 1, ...]" rank list a reader parsed, and its ranks: every dump of a job declares its
// groups' whole lists (the default group's 16,384 ranks, 100 KB of text, in each of 16,384 dumps),
// so a thread reading dump after dump compares the text with the last one it parsed (a memcmp)
// instead of parsing it again, which was half of reading them.
struct RankListMemo {
  std::string text;
  std::vector<int> ranks;
};

// parse_dump with a thread's memo of the last rank list it parsed (none: every list is parsed).
FrDump parse_dump(std::string_view bytes, const std::string& source, RankListMemo* memo);

}  // namespace tandem::fr_dump_detail
