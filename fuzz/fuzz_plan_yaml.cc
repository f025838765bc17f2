// Fuzzes the capacity-plan loader (`tandem plan PLAN.yaml`): every input goes to parse_plan.
// tandem::Error (file:line:column and what was expected) is the expected answer to a bad plan; a
// crash, undefined behaviour, a hang or any other exception is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "app/plan/plan.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)tandem::app::parse_plan(text, "fuzz.yaml");
  } catch (const tandem::Error&) {
  }
  return 0;
}
