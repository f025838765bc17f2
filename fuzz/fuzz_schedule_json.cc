// Fuzzes what `tandem schedule --check FILE` does with a file's bytes: schedule_from_json, then
// validate and symbolic_check. tandem::Error is the expected answer to a bad input; a crash,
// undefined behaviour, a hang or any other exception is a bug. A schedule that loads must also
// survive a round trip: writing it and reading it back gives the same JSON.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/schedule_json.h"
#include "core/validate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tandem::Schedule schedule;
  try {
    schedule = tandem::schedule_from_json(text);
  } catch (const tandem::Error&) {
    return 0;
  }
  const std::string written = tandem::schedule_to_json(schedule);
  try {
    const std::string rewritten = tandem::schedule_to_json(tandem::schedule_from_json(written));
    if (rewritten != written) {
      std::fprintf(stderr, "round trip changed the schedule:\n%s\n---\n%s\n", written.c_str(), rewritten.c_str());
      std::abort();
    }
  } catch (const tandem::Error& error) {
    std::fprintf(stderr, "schedule_to_json wrote JSON that schedule_from_json rejects: %s\n", error.what());
    std::abort();
  }
  try {
    tandem::validate(schedule);
    tandem::symbolic_check(schedule);
  } catch (const tandem::Error&) {
  }
  return 0;
}
