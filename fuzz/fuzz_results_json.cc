// Fuzzes `tandem report`'s reader of results.json (a file a user may edit, truncate or take from
// another program): every input is parsed as JSON and, when it parses, turned into the report page,
// alone and compared with itself. tandem::Error and nlohmann's json exceptions (which the command
// turns into one error line naming the file) are the expected answers to a bad file; a crash,
// undefined behaviour, a hang or any other exception is a bug.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "app/report/report_page.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json results;
  try {
    results = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {  // what `tandem report` calls "not valid JSON"
    return 0;
  }
  for (const bool compared : {false, true}) {
    try {
      const std::optional<nlohmann::json> compare = compared ? std::optional(results) : std::nullopt;
      (void)tandem::app::report_html(results, compare);
    } catch (const tandem::Error&) {
    } catch (const nlohmann::json::exception&) {
    }
  }
  return 0;
}
