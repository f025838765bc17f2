// Output paths are checked when the command line is read, before any work, so that a typo in
// `--trace` does not cost the run it came after.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::app {

// A file to write: its folder exists and it is not a folder itself.
CLI::Validator output_file_path();
// A folder to write into (created with its parents when missing): not an existing file.
CLI::Validator output_folder_path();

}  // namespace tandem::app
