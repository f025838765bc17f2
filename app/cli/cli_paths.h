// Output paths are checked when the command line is read, before any work, so that a typo in
// `--trace` does not cost the run it came after.
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

}  // namespace tandem::app
