#include "app/cli/cli_paths.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "core/error.h"

namespace tandem::app {
namespace {

namespace fs = std::filesystem;

// Why `path` cannot be written as a file, or "".
std::string output_file_problem(const std::string& path, const std::string& will_create) {
  std::error_code error;
  if (fs::is_directory(path, error)) return "'" + path + "' is a folder, not a file to write";
  const fs::path folder = fs::path(path).parent_path();
  if (folder.empty() || fs::is_directory(folder, error)) return "";
  if (!will_create.empty()) {
    // Inside the folder the command creates: fine once it exists.
    const fs::path created = fs::path(will_create).lexically_normal();
    const fs::path relative = folder.lexically_normal().lexically_relative(created);
    if (!relative.empty() && *relative.begin() != "..") return "";
  }
  return "the folder '" + folder.string() + "' of '" + path + "' does not exist";
}

}  // namespace

CLI::Validator output_file_path() {
  return CLI::Validator([](std::string& path) { return output_file_problem(path, ""); }, "");
}

CLI::Validator output_folder_path() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        std::error_code error;
        if (fs::exists(path, error) && !fs::is_directory(path, error)) {
          return "'" + path + "' is a file, not a folder to write into";
        }
        return "";
      },
      "");
}

void check_output_file(const std::string& path, std::string_view option, const std::string& will_create) {
  if (path.empty()) return;
  if (const std::string problem = output_file_problem(path, will_create); !problem.empty()) {
    fail(ErrorCode::kInvalidArgument, "{}: {}", option, problem);
  }
}

CLI::Validator number_range(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "'" + text + "' is not a number";
        if (!(value >= min && value <= max)) return fmt::format("{} is outside {:g} to {:g}", text, min, max);
        return "";
      },
      fmt::format("in [{:g}, {:g}]", min, max));
}

}  // namespace tandem::app
