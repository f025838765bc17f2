// Strict, versioned JSON for schedules. Unknown or missing fields, wrong types and a schema_version
// other than Schedule::kSchemaVersion are errors (Error(kFormat), naming the JSON path).
#pragma once

#include <cstdint>
#include <string>

#include "core/schedule.h"

namespace tandem {

// A schedule file `tandem schedule --check` reads: a 512-rank ring all_reduce is 208 MiB of JSON
// and takes 1.2 GB of memory to check; 1 GiB holds a ring all_reduce of about 1100 ranks. Larger rings are stored in
// symmetric form (docs/schedule-ir.md).
inline constexpr uint64_t kMaxScheduleFileBytes = uint64_t{1} << 30;  // 1 GiB

// Writing one builds the document in memory first: about this many bytes an op at the peak (the
// JSON tree and its text; `tandem schedule --json` of a 2,048-rank ring all_reduce, 16.8 M ops,
// peaked at 18.8 GB). schedule_to_json checks the host memory budget for it (core/host_memory.h).
inline constexpr double kScheduleJsonBytesPerOp = 1150;

std::string schedule_to_json(const Schedule& schedule, int indent = 1);
Schedule schedule_from_json(const std::string& text);

}  // namespace tandem
