// Fuzzes the measurement readers behind `tandem calibrate` (they read logs any cluster printed, as
// their operators posted them). The first byte picks: even, parse_nccl_tests_log; odd,
// parse_reference_csv (the rest of the input either way); bit 1 set, the log is read as
// "all_reduce_perf.log", whose name gives the collective to runs that do not say it (so mutations
// of a log without a "# Collective" line still reach the checks below).
// tandem::Error (FILE:LINE: what is wrong) is the expected answer to a bad log; a crash, undefined
// behaviour, a hang or any other exception is a bug. What parses must hold what the calibration
// relies on: GPU and node counts in range, sizes and times not negative and finite (0 is a row the
// calibration skips, with its reason), a CSV row's time positive, a label per row.
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

void check(const tandem::app::MeasurementFile& file, bool csv) {
  using tandem::app::kMaxMeasuredRanks;
  if (file.nranks < 0 || file.nranks > kMaxMeasuredRanks) bug("rank count out of range");
  if (file.nodes < 0 || file.nodes > tandem::models::kMaxNodes) bug("node count out of range");
  for (const tandem::app::MeasuredRow& row : file.rows) {
    if (row.label.empty()) bug("a row without a label");
    if (row.bytes < 0 || (csv && row.bytes == 0)) bug("a row of " + std::to_string(row.bytes) + " bytes");
    if (!(row.time_us >= 0) || !std::isfinite(row.time_us) || (csv && row.time_us == 0)) {
      bug(row.label + ": time negative, zero in a CSV or not finite");
    }
    if (row.gpus < 0 || row.gpus > kMaxMeasuredRanks) bug(row.label + ": GPU count out of range");
    if (row.nodes < 0 || row.nodes > tandem::models::kMaxNodes) bug(row.label + ": node count out of range");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const bool csv = data[0] % 2 == 1;
    const char* log_name = (data[0] & 2) != 0 ? "all_reduce_perf.log" : "fuzz.log";
    check(csv ? tandem::app::parse_reference_csv(text, "fuzz.csv") : tandem::app::parse_nccl_tests_log(text, log_name),
          csv);
  } catch (const tandem::Error&) {
  }
  return 0;
}
