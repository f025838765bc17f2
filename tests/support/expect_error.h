// expect_error: runs a callable and expects a tandem::Error with a given code whose message
// contains every fragment (each failure says what was thrown instead).
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "core/error.h"

namespace tandem::testing {

template <typename Fn>
void expect_error(Fn fn, ErrorCode code, std::initializer_list<const char*> fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const char* fragment : fragments) EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

}  // namespace tandem::testing
