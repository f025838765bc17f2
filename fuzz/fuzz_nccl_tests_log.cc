// Fuzzes the measurement readers behind `tandem calibrate` (they read logs any cluster printed, as
// their operators posted them): an input whose first byte is even goes to parse_nccl_tests_log,
// one whose first byte is odd to parse_reference_csv (the rest of the input either way).
// tandem::Error (FILE:LINE: what is wrong) is the expected answer to a bad log; a crash, undefined
// behaviour, a hang or any other exception is a bug. What parses must hold what the calibration
// relies on: GPU and node counts in range, sizes and times positive and finite, a label per row.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "app/calibrate/nccl_tests_log.h"
#include "core/error.h"

namespace {

[[noreturn]] void bug(const std::string& detail) {
  std::fprintf(stderr, "nccl-tests log: %s\n", detail.c_str());
  std::abort();
}

void check(const tandem::app::MeasurementFile& file) {
  using tandem::app::kMaxMeasuredRanks;
  if (file.nranks < 0 || file.nranks > kMaxMeasuredRanks) bug("rank count out of range");
  if (file.nodes < 0 || file.nodes > tandem::models::kMaxNodes) bug("node count out of range");
  for (const tandem::app::MeasuredRow& row : file.rows) {
    if (row.label.empty()) bug("a row without a label");
    if (row.bytes <= 0) bug("a row of " + std::to_string(row.bytes) + " bytes");
    if (!(row.time_us > 0) || !std::isfinite(row.time_us)) bug(row.label + ": time not positive and finite");
    if (row.gpus < 0 || row.gpus > kMaxMeasuredRanks) bug(row.label + ": GPU count out of range");
    if (row.nodes < 0 || row.nodes > tandem::models::kMaxNodes) bug(row.label + ": node count out of range");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    check(data[0] % 2 == 0 ? tandem::app::parse_nccl_tests_log(text, "fuzz.log")
                           : tandem::app::parse_reference_csv(text, "fuzz.csv"));
  } catch (const tandem::Error&) {
  }
  return 0;
}
