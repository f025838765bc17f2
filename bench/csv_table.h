// What the accuracy benches share: splitting a line of a published-measurements CSV and writing
// the per-row results out.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace tandem::bench {

// The comma-separated fields of one line, a trailing empty field included.
inline std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream stream(line);
  for (std::string field; std::getline(stream, field, ',');) fields.push_back(field);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

// Writes `text` to `path`; throws Error(kIo) when it cannot.
inline void write_csv(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.flush()) fail(ErrorCode::kIo, "cannot write {}", path);
}

}  // namespace tandem::bench
