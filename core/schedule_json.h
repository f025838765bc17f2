// Strict, versioned JSON for schedules. Unknown or missing fields, wrong types and a schema_version
// other than Schedule::kSchemaVersion are errors (Error(kFormat), naming the JSON path).
#pragma once

#include <string>

#include "core/schedule.h"

namespace tandem {

std::string schedule_to_json(const Schedule& schedule, int indent = 1);
Schedule schedule_from_json(const std::string& text);

}  // namespace tandem
