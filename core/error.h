// Project-wide error type. Every failure a user can cause (bad input, invalid schedule, timeout)
// is a tandem::Error carrying a code; the command line turns it into one line and a non-zero exit.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace tandem {

enum class ErrorCode {
  kInvalidArgument,  // a bad parameter from the user or the caller
  kUnsupported,      // a valid request tandem does not implement (e.g. algorithm x collective)
  kInvalidSchedule,  // validate() rejected a schedule
  kCheckFailed,      // symbolic_check() found a wrong postcondition
  kFormat,           // a malformed file (JSON, YAML, dump)
  kTimeout,          // a rank never arrived
  kBackend,          // an executor failed while running
  kIo,               // a file could not be read or written
  kFault,            // an injected fault failed an op (transient, a noticed link failure)
  kDesync,           // ranks disagree on the collective they are in
  kCorrupt,          // received data failed its checksum
};

const char* error_code_name(ErrorCode code);

struct FaultReport;  // core/fault_report.h

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  // An executor's fault, with its fields (core/fault_report.h: fault_error()).
  Error(ErrorCode code, const std::string& message, std::shared_ptr<const FaultReport> report)
      : std::runtime_error(message), code_(code), report_(std::move(report)) {}
  ErrorCode code() const { return code_; }
  // The fault's fields when a backend reported one, else null.
  const FaultReport* report() const { return report_.get(); }

 private:
  ErrorCode code_;
  std::shared_ptr<const FaultReport> report_;
};

// Throws tandem::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tandem
