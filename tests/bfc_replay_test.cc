// Runs the bfc-replay executable as a user would and checks its output and
// exit status: the default run, bad input, bad options, an absent GPU.
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  bool exited = false;  // false: killed by a signal (a crash)
  int code = -1;
  std::string out;
  std::string err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

class BfcReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "bfc_replay_test.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    ASSERT_NE(mkdtemp(buf.data()), nullptr);
    dir_ = buf.data();
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
    rmdir(dir_.c_str());
  }

  std::string Write(const std::string& name, const std::string& content) {
    std::string p = File(name);
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  std::string File(const std::string& name) {
    files_.push_back(dir_ + "/" + name);
    return files_.back();
  }

  // Runs bfc-replay with `args` (already shell-quoted where needed).
  Result Run(const std::string& args) {
    std::string out = File("stdout"), err = File("stderr");
    std::string cmd = std::string("'") + BFC_REPLAY_BINARY + "' " + args +
                      " >'" + out + "' 2>'" + err + "'";
    int status = std::system(cmd.c_str());
    Result r;
    r.exited = status != -1 && WIFEXITED(status);
    if (r.exited) r.code = WEXITSTATUS(status);
    r.out = Slurp(out);
    r.err = Slurp(err);
    return r;
  }

  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(BfcReplayTest, NoArgumentsReplaysTheBundledTrace) {
  Result r = Run("");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("resnet18-train"));
  EXPECT_THAT(r.out, HasSubstr("events            4488"));
  EXPECT_THAT(r.out, HasSubstr("allocations       2244"));
  EXPECT_THAT(r.out, HasSubstr("frees             2244"));
  EXPECT_THAT(r.out, HasSubstr("failures          0"));
  EXPECT_THAT(r.out, HasSubstr("peak live bytes   835.8 MB (835805832 B)"));
  EXPECT_THAT(r.out, HasSubstr("footprint ratio"));
  EXPECT_THAT(r.out, HasSubstr("ns/op"));
  EXPECT_THAT(r.out, HasSubstr("occupancy"));
  EXPECT_EQ(r.err, "");
}

TEST_F(BfcReplayTest, OptionsChangeTheConfiguration) {
  Result r =
      Run("--memory-limit=2GiB --growth=false --fragmentation-fraction=0.5");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("(2147483648 B)"));
  EXPECT_THAT(r.out, HasSubstr("growth off"));
  // Without growth the first region takes the whole limit.
  EXPECT_THAT(r.out, HasSubstr("peak pool bytes   2.1 GB (2147483648 B)"));
}

TEST_F(BfcReplayTest, TooSmallALimitGivesFailuresNotAnError) {
  Result r = Run("--memory-limit=100MiB");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("failures          0\n")));
  EXPECT_THAT(r.out, HasSubstr("frees of failed allocations skipped"));
}

TEST_F(BfcReplayTest, PlanComparesOfflinePlansWithTheOnlinePool) {
  Result r = Run("--plan");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("lower bound (peak live bytes): 835805832"));
  for (const char* strategy :
       {"NAIVE", "EQUALITY", "GREEDY_IN_ORDER", "GREEDY_BY_BREADTH",
        "GREEDY_BY_SIZE", "GREEDY_BEST", "MINCOSTFLOW"}) {
    EXPECT_THAT(r.out, HasSubstr(strategy));
  }
  // The online line carries this replay's peak pool (growth, 16 GiB).
  EXPECT_THAT(r.out, HasSubstr("online peak pool               1071644672"));
  EXPECT_THAT(r.out, HasSubstr("best offline plan"));
}

TEST_F(BfcReplayTest, Help) {
  Result r = Run("--help");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("usage: bfc-replay"));
  EXPECT_THAT(r.out, HasSubstr("--memory-limit"));
}

TEST_F(BfcReplayTest, MissingFile) {
  std::string missing = dir_ + "/no-such-trace.csv";
  Result r = Run("'" + missing + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(missing));
  EXPECT_THAT(r.err, HasSubstr("no such file"));
  EXPECT_EQ(r.out, "");
}

TEST_F(BfcReplayTest, MalformedLineIsNamed) {
  std::string path = Write("bad.csv",
                           "Thread,Time,Action,Pointer,Size,Stream\n"
                           "1,0,allocate,0x100,256,0\n"
                           "1,0,allocate,0x200,lots,0\n");
  Result r = Run("'" + path + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(path + ":3:"));
  EXPECT_THAT(r.err, HasSubstr("bad Size"));
}

TEST_F(BfcReplayTest, UnknownFreeFailsUnlessSkipped) {
  std::string path = Write("unknown.csv",
                           "Thread,Time,Action,Pointer,Size,Stream\n"
                           "1,0,allocate,0x100,256,0\n"
                           "1,0,free,0x999,256,0\n"
                           "1,0,free,0x100,256,0\n");
  Result r = Run("'" + path + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(":3:"));
  r = Run("--skip-unknown-frees '" + path + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("1 unknown frees"));
}

struct BadOption {
  const char* args;
  const char* option;  // the message must name it
};

void PrintTo(const BadOption& b, std::ostream* os) { *os << b.args; }

class BfcReplayBadOptionTest : public BfcReplayTest,
                               public ::testing::WithParamInterface<BadOption> {
};

TEST_P(BfcReplayBadOptionTest, NamesTheOption) {
  Result r = Run(GetParam().args);
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(GetParam().option));
  EXPECT_EQ(r.out, "");
}

INSTANTIATE_TEST_SUITE_P(
    BadOptions, BfcReplayBadOptionTest,
    ::testing::Values(
        BadOption{"--memory-limit=lots", "--memory-limit"},
        BadOption{"--memory-limit=16XB", "--memory-limit"},
        BadOption{"--memory-limit=0", "--memory-limit"},
        BadOption{"--memory-limit", "--memory-limit"},
        BadOption{"--growth=maybe", "--growth"}, BadOption{"--gc=2", "--gc"},
        BadOption{"--fragmentation-fraction=1.5", "--fragmentation-fraction"},
        BadOption{"--fragmentation-fraction=x", "--fragmentation-fraction"},
        BadOption{"--backend=tpu", "--backend"},
        BadOption{"--frobnicate", "--frobnicate"}),
    [](const ::testing::TestParamInfo<BadOption>& info) {
      std::string n;
      for (const char* c = info.param.args + 2; *c != '\0'; ++c) {
        n += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
      }
      return n;
    });

TEST_F(BfcReplayTest, CudaBackendWithoutADeviceIsAClearError) {
  Result r = Run("--backend=cuda");
  ASSERT_TRUE(r.exited) << "bfc-replay crashed: " << r.err;
  if (r.code == 0) {
    // A machine with a GPU: the replay ran on it.
    EXPECT_THAT(r.out, HasSubstr("cuda backend"));
    return;
  }
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("no CUDA device"));
}

}  // namespace
