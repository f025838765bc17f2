// Errors from .cu files, which cannot include core/error.h: its fmt headers do not compile under
// nvcc. Internal to backend/kernels; implemented in check.cc.
#pragma once

#include <string>

namespace tandem::cuda {

// Throws Error(kInvalidArgument, message).
[[noreturn]] void fail_invalid_argument(const std::string& message);

}  // namespace tandem::cuda
