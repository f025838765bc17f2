// The command line's shared parsers: one duration syntax for every option that takes a time.
#include <gtest/gtest.h>

#include <string>

#include "app/common/common.h"
#include "core/error.h"

namespace tandem::app {
namespace {

TEST(ParseDuration, EveryUnitEveryOption) {
  EXPECT_DOUBLE_EQ(parse_duration_s("30", "--watchdog"), 30.0);
  EXPECT_DOUBLE_EQ(parse_duration_s("500ns", "--watchdog"), 500e-9);
  EXPECT_DOUBLE_EQ(parse_duration_s("250us", "--watchdog"), 250e-6);
  EXPECT_DOUBLE_EQ(parse_duration_s("100ms", "--watchdog"), 0.1);
  EXPECT_DOUBLE_EQ(parse_duration_s("30s", "--watchdog"), 30.0);
  EXPECT_DOUBLE_EQ(parse_duration_s("2m", "--watchdog"), 120.0);
  EXPECT_DOUBLE_EQ(parse_duration_s("2min", "--watchdog"), 120.0);
  EXPECT_DOUBLE_EQ(parse_duration_s("1.5h", "--checkpoint-interval"), 5400.0);
  EXPECT_DOUBLE_EQ(parse_duration_s("1d", "--watchdog"), 86400.0);            // was refused by --watchdog
  EXPECT_DOUBLE_EQ(parse_duration_s("500ms", "--checkpoint-interval"), 0.5);  // was refused here
  EXPECT_DOUBLE_EQ(parse_duration_s("2e3s", "--checkpoint-interval"), 2000.0);
  EXPECT_DOUBLE_EQ(parse_duration_s(".5s", "--watchdog"), 0.5);
  EXPECT_DOUBLE_EQ(parse_duration_s("0", "--watchdog"), 0.0);
}

TEST(ParseDuration, RefusesWithTheOptionNamed) {
  for (const char* bad : {"", "soon", "5x", "-1s", "s", "1.2.3s", "1e", "nan", "inf", "1e400s", "2y", "366d", "30 s"}) {
    try {
      parse_duration_s(bad, "--watchdog");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("--watchdog '" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tandem::app
