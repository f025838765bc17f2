// The out-of-process runner (sim/isolated.h): typed replies come back exactly, a thrown Error comes
// back with its code, a child that dies is Error(kBackend) with the reason from its stderr, and the
// parallel runner reports every piece, failed ones included, once.
#include "sim/isolated.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"

namespace tandem::sim {
namespace {

struct Reply {
  std::string name;
  std::vector<double> values;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Reply, name, values)

[[noreturn]] void die(const char* reason) {
  std::fprintf(stderr, "[0.000] CRITICAL %s\n", reason);
  std::fflush(stderr);
  std::abort();
}

TEST(Isolated, ATypedReplyComesBackExactly) {
  // Numbers a decimal text would round: they must come back to the last bit.
  const std::vector<double> values = {0.1 + 0.2, 1.0 / 3.0, 5e-324, std::numeric_limits<double>::max(), -0.0};
  const Reply reply = run_isolated([&] { return Reply{"ring", values}; });
  EXPECT_EQ(reply.name, "ring");
  ASSERT_EQ(reply.values.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(reply.values[i], values[i]) << i;
}

TEST(Isolated, WorkChangesNothingInTheParent) {
  int calls = 0;
  EXPECT_EQ(run_isolated([&] { return ++calls; }), 1);
  EXPECT_EQ(calls, 0);
}

TEST(Isolated, AnErrorComesBackWithItsCode) {
  try {
    run_isolated([]() -> int { fail(ErrorCode::kUnsupported, "no {} here", "nvls"); });
    FAIL() << "the child's error should be rethrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_STREQ(e.what(), "no nvls here");
  }
}

TEST(Isolated, AChildThatDiesIsABackendErrorWithTheReason) {
  try {
    run_isolated([]() -> int { die("assertion failed: the ns-3 glue"); });
    FAIL() << "a dead child should throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBackend);
    const std::string what = e.what();
    EXPECT_NE(what.find("the simulation process died (signal 6)"), std::string::npos) << what;
    EXPECT_NE(what.find("CRITICAL assertion failed: the ns-3 glue"), std::string::npos) << what;
  }
}

TEST(Isolated, AReplyThatDoesNotReadBackIsABackendError) {
  // JSON has no NaN: it goes out as null, which is not a double.
  try {
    run_isolated([] { return std::numeric_limits<double>::quiet_NaN(); });
    FAIL() << "a NaN reply should not read back";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBackend);
    EXPECT_NE(std::string(e.what()).find("does not read back"), std::string::npos) << e.what();
  }
}

TEST(IsolatedParallel, EveryPieceIsReportedOnceFailuresIncluded) {
  for (int jobs : {1, 2, 7}) {
    std::map<size_t, Isolated<std::vector<size_t>>> seen;
    run_isolated_parallel(
        7,
        [](size_t index) {
          if (index == 3) fail(ErrorCode::kInvalidArgument, "piece {} is bad", index);
          if (index == 5) die("piece 5 aborted");
          return std::vector<size_t>(index, index);
        },
        jobs,
        [&](size_t index, const Isolated<std::vector<size_t>>& outcome) {
          EXPECT_TRUE(seen.emplace(index, outcome).second) << "piece " << index << " reported twice";
        });
    ASSERT_EQ(seen.size(), 7u) << jobs << " jobs";
    for (const auto& [index, outcome] : seen) {
      if (index == 3) {
        EXPECT_FALSE(outcome.reply);
        EXPECT_EQ(outcome.code, ErrorCode::kInvalidArgument);
        EXPECT_EQ(outcome.error, "piece 3 is bad");
      } else if (index == 5) {
        EXPECT_FALSE(outcome.reply);
        EXPECT_EQ(outcome.code, ErrorCode::kBackend);
        EXPECT_NE(outcome.error.find("CRITICAL piece 5 aborted"), std::string::npos) << outcome.error;
      } else {
        ASSERT_TRUE(outcome.reply) << index << ": " << outcome.error;
        EXPECT_EQ(*outcome.reply, std::vector<size_t>(index, index));
      }
    }
  }
}

TEST(IsolatedParallel, NoWorkCallsNothing) {
  int calls = 0;
  run_isolated_parallel(
      0, [](size_t) { return 0; }, 1, [&](size_t, const Isolated<int>&) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(IsolatedParallel, JobsBelowOneAreRefused) {
  try {
    run_isolated_parallel(
        1, [](size_t) { return 0; }, 0, [](size_t, const Isolated<int>&) {});
    FAIL() << "jobs = 0 should be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace tandem::sim
