// Fuzzes the strict scenario loader (`tandem run FILE` reads a file and calls parse_scenario).
// tandem::Error is the expected answer to a bad input; a crash, undefined behaviour, a hang or any
// other exception (a YAML::Exception that escaped included) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "app/scenario/scenario.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)tandem::app::parse_scenario(text, "fuzz.yaml");
  } catch (const tandem::Error&) {
  }
  return 0;
}
