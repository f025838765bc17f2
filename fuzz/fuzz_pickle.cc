// Fuzzes the pickle reader and the flight-recorder dump reader (`tandem fr` reads dumps that any
// process wrote): every input goes to pickle::loads and to parse_dump (which also reads JSON dumps,
// told apart by the first byte). tandem::Error is the expected answer to a bad input; a crash,
// undefined behaviour, a hang or any other exception is a bug. What loads must round-trip: dumps()
// of it loads back and dumps to the same bytes; a dump that parses writes a pickle that parses
// back to the same pickle.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/flight_recorder.h"
#include "core/pickle.h"

namespace {

[[noreturn]] void bug(const char* what, const std::string& detail) {
  std::fprintf(stderr, "%s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  bool loaded = false;
  tandem::pickle::Value value;
  try {
    value = tandem::pickle::loads(bytes);
    loaded = true;
  } catch (const tandem::Error&) {
  }
  if (loaded) {
    // Bytes, not Values, are compared: a NaN float is not equal to itself.
    const std::string written = tandem::pickle::dumps(value);
    try {
      if (tandem::pickle::dumps(tandem::pickle::loads(written)) != written) bug("pickle round trip", "bytes differ");
    } catch (const tandem::Error& error) {
      bug("loads rejects what dumps wrote", error.what());
    }
  }

  tandem::FrDump dump;
  try {
    dump = tandem::parse_dump(bytes, "fuzz");
  } catch (const tandem::Error&) {
    return 0;
  }
  const std::string dump_written = tandem::to_pickle(dump);
  try {
    if (tandem::to_pickle(tandem::parse_dump(dump_written, "fuzz")) != dump_written) {
      bug("flight-recorder dump round trip", "bytes differ");
    }
  } catch (const tandem::Error& error) {
    bug("parse_dump rejects what to_pickle wrote", error.what());
  }
  return 0;
}
