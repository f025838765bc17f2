#include "app/cli/cli_paths.h"

#include <filesystem>
#include <string>

namespace tandem::app {

CLI::Validator output_file_path() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        namespace fs = std::filesystem;
        std::error_code error;
        if (fs::is_directory(path, error)) return "'" + path + "' is a folder, not a file to write";
        const fs::path folder = fs::path(path).parent_path();
        if (!folder.empty() && !fs::is_directory(folder, error)) {
          return "the folder '" + folder.string() + "' of '" + path + "' does not exist";
        }
        return "";
      },
      "");
}

CLI::Validator output_folder_path() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        std::error_code error;
        if (std::filesystem::exists(path, error) && !std::filesystem::is_directory(path, error)) {
          return "'" + path + "' is a file, not a folder to write into";
        }
        return "";
      },
      "");
}

}  // namespace tandem::app
