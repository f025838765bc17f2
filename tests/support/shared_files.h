// Files from the project's shared folder beside the checkout (`../shared/reference/...`, read-only:
// published measurements and files that real tools wrote). Tests run from the repository root
// (tests/CMakeLists.txt), so the path is relative to it; a test skips where the folder is absent.
#pragma once

#include <filesystem>
#include <string>

namespace tandem::test {

inline std::filesystem::path shared_reference(const std::string& relative) {
  return std::filesystem::path("../shared/reference") / relative;
}

}  // namespace tandem::test
