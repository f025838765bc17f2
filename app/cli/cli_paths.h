// Checks made when the command line is read, before any work: output paths (so that a typo in
// `--trace` does not cost the run it came after) and the ranges of real-valued options.
#pragma once

#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace tandem::app {

// A file to write: its folder exists and it is not a folder itself.
CLI::Validator output_file_path();
// A folder to write into (created with its parents when missing): not an existing file.
CLI::Validator output_folder_path();

// The same check as output_file_path() for a file whose folder may be one the command creates
// first (its --out folder, `will_create`, or a folder inside it): throws Error(kInvalidArgument)
// naming `option`. For options checked once the other options are known.
void check_output_file(const std::string& path, std::string_view option, const std::string& will_create = "");

// A real number in [min, max], said in the shortest form: "--nic-gbps: 1e-300 is outside 0.01 to
// 100000" (CLI11's own Range prints std::to_string's "0.010000 to 100000.000000", and a 309-digit
// number for a bound of 1e308).
CLI::Validator number_range(double min, double max);

}  // namespace tandem::app
