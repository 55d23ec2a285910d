// Runs the bfc-plan executable as a user would: its flags (shared with
// bfc-replay where they mean the same), exit codes, --summary-json, and that
// no output ever overwrites a trace or survives a failed run half-written.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/tool_test.h"

namespace {

using ::testing::HasSubstr;

using Result = ::bfc::testing::ToolResult;
using ::bfc::testing::kSmallTrace;
using ::bfc::testing::Slurp;

class BfcPlanTest : public ::bfc::testing::ToolTest {
 protected:
  BfcPlanTest() : ToolTest(BFC_PLAN_BINARY) {}
  void SetUp() override {
    ToolTest::SetUp();
    trace_ = Write("small.csv", kSmallTrace);
  }

  std::string trace_;
};

TEST_F(BfcPlanTest, PlansATrace) {
  Result r = Run("--round=256 '" + trace_ + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("GREEDY_BY_SIZE"));
  EXPECT_THAT(r.out, HasSubstr("lower bound"));
  EXPECT_EQ(r.err, "");
}

TEST_F(BfcPlanTest, Help) {
  Result r = Run("--help");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("Usage: bfc-plan"));
  for (const char* text :
       {"\nInputs:\n", "\nPlanner:\n", "\nOutputs:\n", "\nReporting:\n",
        "--skip-unknown-frees", "--summary-json", "--quiet", "--verbose",
        "--round", "--align", "--online-peak", "--no-validate",
        "Exit status: 0 ok"}) {
    EXPECT_THAT(r.out, HasSubstr(text));
  }
}

TEST_F(BfcPlanTest, UsageErrorsExitWith2) {
  for (const char* args :
       {"", "--frobnicate x.csv", "--round=0 x.csv", "--round=1G x.csv",
        "--align=lots x.csv", "--summary-json", "- -",
        // A count: not read as 2^64 - 1 or 0.
        "--max-quadratic-tensors=-1 x.csv", "--max-quadratic-tensors= x.csv",
        "--max-quadratic-tensors=+3 x.csv"}) {
    SCOPED_TRACE(args);
    Result r = Run(args);
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.err, "");
  }
}

TEST_F(BfcPlanTest, BadInputExitsWith1) {
  Result r = Run("'" + dir_ + "'");
  ASSERT_TRUE(r.exited) << "bfc-plan crashed: " << r.err;
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("is a directory"));
  r = Run("'" + dir_ + "/missing.csv'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("no such file"));
}

TEST_F(BfcPlanTest, SummaryJsonOnStdout) {
  Result r = Run("--online-peak=2MiB --summary-json - '" + trace_ + "' - < '" +
                 trace_ + "'");
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not JSON:\n" << r.out;
  ASSERT_EQ(j["traces"].size(), 2u);
  const nlohmann::json& t = j["traces"][0];
  EXPECT_EQ(t["trace"], "small");
  EXPECT_EQ(t["events"], 6);
  EXPECT_EQ(t["peak_live_bytes"], 1048576 + 4096);
  EXPECT_EQ(t["online_peak_pool_bytes"], 2 << 20);
  EXPECT_GE(t["plans"].size(), 2u);
  EXPECT_TRUE(t["plans"][0].contains("strategy"));
  EXPECT_EQ(j["traces"][1]["trace"], "stdin");
  // The tables moved to stderr.
  EXPECT_THAT(r.err, HasSubstr("lower bound"));
}

TEST_F(BfcPlanTest, SummaryJsonNeverOverwritesATrace) {
  const std::string other = Write("other.csv", kSmallTrace);
  for (const std::string& args :
       {"--summary-json '" + other + "' '" + trace_ + "'",
        "--summary-json '" + trace_ + "' '" + trace_ + "'",
        "'" + trace_ + "' --summary-json"}) {
    SCOPED_TRACE(args);
    Result r = Run(args);
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(Slurp(trace_), kSmallTrace);
    EXPECT_EQ(Slurp(other), kSmallTrace);
  }
  // An input that does not look like a trace: the same-file check.
  const std::string notes = Write("notes.txt", "not a trace\n");
  Result r = Run("'" + notes + "' --summary-json '" + dir_ + "/./notes.txt'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("names the input"));
  EXPECT_EQ(Slurp(notes), "not a trace\n");
}

// From a review: a report standard output could not take went missing with
// exit status 0 and no message.
TEST_F(BfcPlanTest, StandardOutputThatCannotBeWrittenIsAnError) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  const std::string trace = Write("small.csv", ::bfc::testing::kSmallTrace);
  for (const char* extra : {"", " --summary-json -"}) {
    std::string err;
    EXPECT_EQ(RunIntoFullDevice("'" + trace + "'" + extra, &err), 1) << extra;
    EXPECT_THAT(err, HasSubstr("cannot write to standard output")) << extra;
  }
}

TEST_F(BfcPlanTest, FailedRunLeavesTheOutputAlone) {
  const std::string out = Write("plan.json", "precious");
  const std::string bad = Write("bad.csv",
                                "Thread,Time,Action,Pointer,Size,Stream\n"
                                "1,0,allocate,0x100,lots,0\n");
  Result r = Run("--summary-json '" + out + "' '" + trace_ + "' '" + bad + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("bad Size"));
  EXPECT_EQ(Slurp(out), "precious");

  r = Run("--quiet --summary-json '" + out + "' '" + trace_ + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
  nlohmann::json j = nlohmann::json::parse(Slurp(out));
  EXPECT_EQ(j["format"], "bfc-plan-summary");
}

}  // namespace
