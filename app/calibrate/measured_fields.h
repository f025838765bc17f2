// What the two readers of measurements (nccl-tests logs, the published-rows CSV: nccl_tests_log.h)
// share: words and numbers read strictly, and the collective, algorithm and protocol names as
// nccl-tests and NCCL spell them. Internal to app/calibrate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/types.h"

namespace tandem::app {

// What some editors put at the start of a UTF-8 file: not part of the log.
inline constexpr std::string_view kUtf8ByteOrderMark = "\xEF\xBB\xBF";

// `text` without the spaces and tabs around it (and a carriage return at its end).
std::string_view trim(std::string_view text);
// The whole word as an integer or a finite number; nullopt otherwise.
std::optional<int64_t> parse_integer(std::string_view word);
std::optional<double> parse_number(std::string_view word);
// A count from a log header or a CSV field: an integer in [low, high], or Error(kFormat) at `where`.
int64_t bounded_integer(std::string_view word, int64_t low, int64_t high, std::string_view what,
                        const std::string& where);

// The collective of an nccl-tests binary ("all_reduce_perf", "alltoall_perf") or a tandem name.
std::optional<Collective> collective_of(std::string_view text);
// NCCL_ALGO's spelling -> the simulator's. A list ("Ring,Tree") or an exclusion ("^NVLS") leaves
// NCCL's tuner a choice: auto. Error(kFormat) at `where` for an algorithm tandem does not simulate.
std::string algorithm_of(std::string_view nccl, const std::string& where);
// NCCL_PROTO's spelling (any case) -> LL, LL128 or Simple; Error(kFormat) at `where` otherwise.
std::string protocol_of(std::string_view nccl, const std::string& where);

}  // namespace tandem::app
