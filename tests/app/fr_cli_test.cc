// `tandem fr analyze` end to end on PyTorch-style dumps that tests/fixtures/fr/make_fr_fixtures.py
// writes at test time (pickle protocol 2, as PyTorch's flight recorder writes them): the verdict,
// the culprit ranks, the JSON report and the exit status of each case.
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"

#ifndef FR_FIXTURE_SCRIPT
#error "FR_FIXTURE_SCRIPT must name tests/fixtures/fr/make_fr_fixtures.py"
#endif

namespace {

namespace fs = std::filesystem;
using tandem::testing::contains;
using tandem::testing::lines_of;
using tandem::testing::Outcome;
using tandem::testing::run_tandem;
using tandem::testing::temp_path;

class FrCli : public ::testing::Test {
 protected:
  // The fixtures are written once for the whole suite.
  static void SetUpTestSuite() {
    fixtures_ = new std::string(temp_path("fr_fixtures"));
    fs::remove_all(*fixtures_);
    const std::string command = fmt::format("python3 '{}' '{}'", FR_FIXTURE_SCRIPT, *fixtures_);
    generated_ = std::system(command.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*fixtures_);
    delete fixtures_;
  }
  void SetUp() override {
    if (!generated_) GTEST_SKIP() << "python3 could not run " << FR_FIXTURE_SCRIPT;
  }

  static std::string dir(const std::string& name) { return *fixtures_ + "/" + name; }
  static Outcome analyze(const std::string& name, const std::string& flags = "") {
    return run_tandem(fmt::format("fr analyze '{}' {}", dir(name), flags));
  }

  static std::string* fixtures_;
  static bool generated_;
};

std::string* FrCli::fixtures_ = nullptr;
bool FrCli::generated_ = false;

struct Case {
  std::string name;
  std::string verdict;
  std::vector<int> culprits;
  std::string kind;  // of the first finding; empty when clean
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"matched", "no mismatches: 4 ranks, 1 group, 6 collectives matched", {}, ""},
      {"missing_rank",
       "rank 2 never joined nccl:all_reduce #3 of group 0 (default_pg): ranks 0-1, 3 are waiting in it",
       {2},
       "missing_ranks"},
      {"size_mismatch",
       "rank 1 sent size [[2048]] where the others sent [[1024]] in nccl:all_reduce #2 of group 0 (default_pg)",
       {1},
       "size_mismatch"},
      {"dtype_mismatch",
       "rank 3 has dtype Half where the others have Float in nccl:all_reduce #4 of group 0 (default_pg)",
       {3},
       "dtype_mismatch"},
      {"coalesced", "no mismatches: 4 ranks, 1 group, 3 collectives matched", {}, ""},
      {"coalesced_mismatch",
       "rank 2 issued nccl:coalesced(nccl:all_reduce, nccl:all_gather, nccl:all_reduce) where ranks 0-1, 3 issued "
       "nccl:coalesced(nccl:all_reduce, nccl:all_reduce, nccl:all_reduce) at #2 of group 0 (default_pg)",
       {2},
       "collective_type_mismatch"},
      {"p2p", "no mismatches: 2 ranks, 1 group, 3 collectives matched", {}, ""},
      {"split_groups", "no mismatches: 4 ranks, 3 groups, 8 collectives matched", {}, ""},
      {"type_mismatch",
       "rank 2 issued nccl:all_gather where ranks 0-1, 3 issued nccl:all_reduce at #3 of group 0 (default_pg)",
       {2},
       "collective_type_mismatch"},
  };
  return all;
}

TEST_F(FrCli, TextVerdictAndExitStatus) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Outcome outcome = analyze(c.name);
    EXPECT_EQ(outcome.exit_code, c.culprits.empty() && c.kind.empty() ? 0 : 1) << outcome.err;
    EXPECT_EQ(outcome.err, "");
    const std::vector<std::string> lines = lines_of(outcome.out);
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines[0], c.verdict);
    if (!c.culprits.empty()) {
      EXPECT_TRUE(contains(outcome.out, "[" + c.kind + "]")) << outcome.out;
      EXPECT_TRUE(contains(outcome.out, fmt::format("culprit ranks: {}", c.culprits[0]))) << outcome.out;
    }
  }
}

TEST_F(FrCli, JsonReport) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Outcome outcome = analyze(c.name, "--json");
    EXPECT_EQ(outcome.exit_code, c.kind.empty() ? 0 : 1) << outcome.err;
    const nlohmann::json json = nlohmann::json::parse(outcome.out);
    EXPECT_EQ(json["verdict"], c.verdict);
    EXPECT_EQ(json["culprit_ranks"].get<std::vector<int>>(), c.culprits);
    if (c.kind.empty()) {
      EXPECT_TRUE(json["findings"].empty());
      continue;
    }
    ASSERT_EQ(json["findings"].size(), 1u);
    const nlohmann::json& finding = json["findings"][0];
    EXPECT_EQ(finding["kind"], c.kind);
    EXPECT_EQ(finding["group"], "0");
    EXPECT_EQ(finding["group_desc"], "default_pg");
    EXPECT_EQ(finding["culprit_ranks"].get<std::vector<int>>(), c.culprits);
    EXPECT_EQ(finding["detail"], c.verdict);
  }
  const nlohmann::json missing = nlohmann::json::parse(analyze("missing_rank", "--json").out);
  EXPECT_EQ(missing["findings"][0]["missing_ranks"].get<std::vector<int>>(), std::vector<int>{2});
  EXPECT_EQ(missing["findings"][0]["sequence"], 3);
  EXPECT_EQ(missing["findings"][0]["collective"], "nccl:all_reduce");
  EXPECT_EQ(missing["ranks"], 4);
  EXPECT_EQ(missing["groups"], 1);
  EXPECT_EQ(missing["entries"], 11);
}

TEST_F(FrCli, CorruptDumpIsOneLineNamingTheFile) {
  for (const std::string flags : {"", "--json"}) {
    const Outcome outcome = analyze("corrupt", flags);
    EXPECT_EQ(outcome.exit_code, 2);
    EXPECT_EQ(outcome.out, "");
    const std::vector<std::string> lines = lines_of(outcome.err);
    ASSERT_EQ(lines.size(), 1u) << outcome.err;
    EXPECT_EQ(lines[0].rfind("tandem: error: ", 0), 0u) << lines[0];
    EXPECT_TRUE(contains(lines[0], dir("corrupt") + "/nccl_trace_rank_1")) << lines[0];
  }
}

TEST_F(FrCli, MissingDumpFileIsAFinding) {
  const std::string copy = temp_path("fr_missing_dump");
  fs::remove_all(copy);
  fs::copy(dir("matched"), copy);
  fs::remove(copy + "/nccl_trace_rank_3");
  const Outcome outcome = run_tandem(fmt::format("fr analyze '{}' --json", copy));
  fs::remove_all(copy);
  EXPECT_EQ(outcome.exit_code, 1) << outcome.err;
  const nlohmann::json json = nlohmann::json::parse(outcome.out);
  ASSERT_EQ(json["findings"].size(), 1u);
  EXPECT_EQ(json["findings"][0]["kind"], "missing_dumps");
  EXPECT_EQ(json["findings"][0]["missing_ranks"].get<std::vector<int>>(), std::vector<int>{3});
  EXPECT_EQ(json["verdict"], "rank 3 of group 0 (default_pg) left no dump: nothing can be said about it");
}

TEST_F(FrCli, PrefixOption) {
  EXPECT_EQ(analyze("matched", "--prefix nccl_trace_rank_").exit_code, 0);
  const Outcome wrong = analyze("matched", "--prefix other_");
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_TRUE(contains(wrong.err, "no flight-recorder dumps")) << wrong.err;
}

TEST_F(FrCli, UsageErrors) {
  const Outcome missing_dir = run_tandem("fr analyze /nonexistent/tandem_fr_dumps");
  EXPECT_EQ(missing_dir.exit_code, 2);
  EXPECT_EQ(lines_of(missing_dir.err).size(), 1u) << missing_dir.err;
  EXPECT_TRUE(contains(missing_dir.err, "/nonexistent/tandem_fr_dumps")) << missing_dir.err;

  EXPECT_EQ(run_tandem("fr").exit_code, 2);
  EXPECT_EQ(run_tandem("fr analyze").exit_code, 2);
  EXPECT_EQ(run_tandem("fr analyze a b").exit_code, 2);
}

TEST_F(FrCli, HelpDocumentsTheExitStatus) {
  const Outcome help = run_tandem("fr analyze --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(contains(help.out, "--prefix"));
  EXPECT_TRUE(contains(help.out, "--json"));
  EXPECT_TRUE(contains(help.out, "Exit status: 0"));
  EXPECT_TRUE(contains(run_tandem("--help").out, "fr"));
}

}  // namespace
