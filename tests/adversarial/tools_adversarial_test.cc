// Hostile files and flags for both tools, bfc-replay and bfc-plan, run as a
// user runs them: traces that arrive on pipes and FIFOs (plain and gzip),
// gzip files cut short, directories, outputs that name the trace however it is
// spelled, and the exit statuses each case documents (tools/tool_flags.h:
// 1 bad input, 2 usage, 3 failed allocations unless --expect-failures).
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/tool_test.h"
#if defined(BFC_HAVE_ZLIB)
#include "testing/gzip.h"
#endif

namespace {

using ::bfc::testing::kSmallTrace;
using ::bfc::testing::Slurp;
using ::bfc::testing::ToolResult;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

struct Tool {
  const char* name;
  const char* binary;
};

void PrintTo(const Tool& t, std::ostream* os) { *os << t.name; }

class ToolsAdversarialTest : public ::bfc::testing::ToolTest,
                             public ::testing::WithParamInterface<Tool> {
 protected:
  ToolsAdversarialTest() : ToolTest(GetParam().binary) {}
  bool IsReplay() const { return std::string(GetParam().name) == "replay"; }
};

// Both tools read a trace the same way (tools/tool_io.h, bfc::ReadTrace).
TEST_P(ToolsAdversarialTest, DirectoryAsTraceIsBadInputNamingIt) {
  ToolResult r = Run("'" + dir_ + "'");
  ASSERT_TRUE(r.exited) << "crashed: " << r.err;
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(dir_ + ": is a directory"));
}

// A file name is bytes, not text: the JSON summary names it in valid UTF-8
// (U+FFFD for what is not) instead of ending in nlohmann's type_error 316.
TEST_P(ToolsAdversarialTest, ATraceNameThatIsNotUtf8StillGivesValidJson) {
  const std::string trace = Write("bad\xff name.csv", kSmallTrace);
  ToolResult r = Run("'" + trace + "' --summary-json -");
  ASSERT_TRUE(r.exited) << "crashed: " << r.err;
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("bad\xef\xbf\xbd name"));
  EXPECT_THAT(r.out, Not(HasSubstr("\xff")));
}

TEST_P(ToolsAdversarialTest, PlainTraceOnAPipeAsDevStdinOrDevFd) {
  const std::string trace = Write("small.csv", kSmallTrace);
  ToolResult r = Run("/dev/stdin", "cat '" + trace + "' |");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  r = Run("/dev/fd/3 3<'" + trace + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
}

#if defined(BFC_HAVE_ZLIB)
// Gzip on a pipe was refused ("decompress it first"): detection sniffed the
// first bytes and then reopened the file, which a pipe cannot do.
TEST_P(ToolsAdversarialTest, GzipTraceOnAPipeOrAFifo) {
  const std::string gz = Write("small.csv.gz", bfc::testing::Gzip(kSmallTrace));
  // Through a real pipe, not a redirected file.
  const std::string pipe = "cat '" + gz + "' |";
  for (const char* args : {"-", "/dev/stdin", "- --summary-json -"}) {
    SCOPED_TRACE(args);
    ToolResult r = Run(args, pipe);
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out + r.err, Not(HasSubstr("decompress it first")));
  }
  const std::string fifo = File("fifo.csv.gz");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ToolResult r = Run("'" + fifo + "' --summary-json -",
                     "(cat '" + gz + "' > '" + fifo + "' &);");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  if (IsReplay()) {
    EXPECT_THAT(r.out, HasSubstr("\"allocations\": 3"));
  } else {
    EXPECT_THAT(r.out, HasSubstr("\"fifo\""));
  }
}

// A .csv.gz without its 8-byte trailer (gzip -t rejects it) replayed as
// complete with exit 0; rows end on a line boundary, so only gzip can tell.
TEST_P(ToolsAdversarialTest, TruncatedGzipIsBadInputNamingTheFile) {
  const std::string full = bfc::testing::Gzip(kSmallTrace);
  const std::string cut = Write("cut.csv.gz", full.substr(0, full.size() - 8));
  ToolResult r = Run("'" + cut + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr(cut + ": truncated gzip data"));
  EXPECT_EQ(r.out, "");
  // The same through a pipe.
  r = Run("-", "cat '" + cut + "' |");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("standard input: truncated gzip data"));
}
#endif  // BFC_HAVE_ZLIB

// However the trace is spelled (a symlink, a hard link with another name,
// "dir/../dir/x"), an output that is the trace is refused and the trace kept.
TEST_P(ToolsAdversarialTest, AnOutputIsNeverTheTraceHoweverSpelled) {
  const std::string trace = Write("t.csv", kSmallTrace);
  ASSERT_EQ(symlink(trace.c_str(), File("link.json").c_str()), 0);
  ASSERT_EQ(link(trace.c_str(), File("hard.json").c_str()), 0);
  const std::string base = dir_.substr(dir_.rfind('/') + 1);
  for (const std::string& out : {dir_ + "/link.json", dir_ + "/hard.json",
                                 dir_ + "/../" + base + "/t.csv"}) {
    SCOPED_TRACE(out);
    ToolResult r = Run("'" + trace + "' --summary-json '" + out + "'");
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(Slurp(trace), kSmallTrace);
    // The forgotten-name form, with the trace after the flag.
    r = Run("--summary-json '" + out + "'");
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(Slurp(trace), kSmallTrace);
  }
  EXPECT_THAT(DirEntries(), ElementsAre("hard.json", "link.json", "t.csv"));
}

INSTANTIATE_TEST_SUITE_P(BothTools, ToolsAdversarialTest,
                         ::testing::Values(Tool{"replay", BFC_REPLAY_BINARY},
                                           Tool{"plan", BFC_PLAN_BINARY}),
                         [](const ::testing::TestParamInfo<Tool>& info) {
                           return std::string(info.param.name);
                         });

// --- bfc-replay's exit statuses
// -------------------------------------------------

class ReplayExitTest : public ::bfc::testing::ToolTest {
 protected:
  ReplayExitTest() : ToolTest(BFC_REPLAY_BINARY) {}
};

// Failed allocations are exit 3 unless the user says they are expected.
TEST_F(ReplayExitTest, ExpectFailuresTurnsExit3Into0) {
  ToolResult r = Run("--memory-limit=100MiB --quiet");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 3);
  r = Run("--memory-limit=100MiB --quiet --expect-failures");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out + r.err, "");
  r = Run("--memory-limit=100MiB --expect-failures --summary-json -");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("\"failures\": 0,")));
  EXPECT_THAT(r.err, Not(HasSubstr("exit status 3")));
  // Said false, failures count again; and it changes nothing when none fail.
  r = Run("--memory-limit=100MiB --quiet --expect-failures=false");
  EXPECT_EQ(r.code, 3);
  r = Run("--quiet --expect-failures");
  EXPECT_EQ(r.code, 0);
}

// A backend that can never serve is a usage error before any work (exit 2,
// its reason named), not a replay in which every allocation fails (exit 3).
TEST_F(ReplayExitTest, AnUnavailableBackendIsExit2BeforeReplaying) {
  // No address space holds a 1000 PiB reservation.
  ToolResult r =
      Run("--backend=virtual --memory-limit=1000PiB --summary-json -");
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("virtual backend cannot serve"));
  EXPECT_EQ(r.out, "");  // nothing replayed, no summary
}

// A phase file (--phases, or meta/NAME.phases.csv beside the trace) is input
// like the trace: whatever it holds is exit 1 naming the file, never a crash
// or a read without end; the harmless oddities of hand-edited CSV are read.
TEST_F(ReplayExitTest, HostilePhaseFilesAreBadInputNeverACrash) {
  const std::string trace = Write("small.csv", kSmallTrace);
  const std::string run = "'" + trace + "' --quiet --phases ";
  struct Case {
    std::string phases;  // the path given to --phases
    const char* says;
  };
  std::string long_line(1 << 20, '7');
  std::string binary = "Phase,FirstEvent\n";
  for (int i = 0; i < 256; ++i) binary += static_cast<char>(i);
  for (const Case& c : std::vector<Case>{
           // A device that never ends: read up to a limit, then refused.
           {"/dev/zero", "/dev/zero: larger than 16 MiB"},
           {dir_, ": is a directory"},
           {"-", "standard input is not read"},
           {Write("binary.csv", binary), "binary.csv line 2: "},
           {Write("nul.csv", std::string("Phase,First\0Event\niter0,0\n", 25)),
            "nul.csv line 1: expected a header"},
           {Write("long.csv", "Phase,FirstEvent\niter0," + long_line + "\n"),
            "long.csv line 2: FirstEvent '777"},
           {Write("nul_index.csv",
                  std::string("Phase,FirstEvent\niter0,1\0002\n", 27)),
            "nul_index.csv line 2: FirstEvent '1\\x00\\x32'"},
           {Write("quoted.csv", "Phase,FirstEvent\n\"iter0\",\"0\"\n"),
            "quoted.csv line 2: FirstEvent '\\\"0\\\"'"},
       }) {
    SCOPED_TRACE(c.phases.substr(0, 80));
    ToolResult r = Run(run + "'" + c.phases + "'");
    ASSERT_TRUE(r.exited) << "crashed: " << r.err;
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("phase file "));
    EXPECT_THAT(r.err, HasSubstr(c.says));
    EXPECT_LT(r.err.size(), 1000u) << "the whole line was echoed";
  }

  // A byte order mark, CRLF, blank lines, spaces, extra and reordered
  // columns: read as meant.
  const std::string odd = Write("odd.csv",
                                "\xEF\xBB\xBFTime, FirstEvent ,Extra,Phase\r\n"
                                "\r\n"
                                "0.0,0,x,iter0\r\n"
                                "  0.1 , 3 ,y, iter1 \r\n"
                                "0.2,6,z,end\r\n");
  ToolResult r = Run(run + "'" + odd + "' --summary-json -");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"iterations\": 2"));
  EXPECT_THAT(r.out, HasSubstr("\"phase\": \"iter1\",\n    \"events\": 3"));

  // From a pipe (a FIFO, not a file that can be sized first).
  r = Run(run + "/dev/stdin --summary-json -", "cat '" + odd + "' |");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"iterations\": 2"));

  // The same refusal under --compare-policies, before any replay.
  r = Run("--compare-policies '" + trace + "' --phases /dev/zero");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("phase file /dev/zero: larger than 16 MiB"));
  EXPECT_EQ(r.out, "");
}

// bfc-plan picks strategies by name (any case) and refuses unknown ones.
class PlanFlagsTest : public ::bfc::testing::ToolTest {
 protected:
  PlanFlagsTest() : ToolTest(BFC_PLAN_BINARY) {}
};

TEST_F(PlanFlagsTest, StrategiesAreChosenByNameAndUnknownOnesRefused) {
  const std::string trace = Write("small.csv", kSmallTrace);
  ToolResult r = Run("'" + trace + "' --strategies=equality,GREEDY_IN_ORDER");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("EQUALITY"));
  EXPECT_THAT(r.out, HasSubstr("GREEDY_IN_ORDER"));
  EXPECT_THAT(r.out, Not(HasSubstr("NAIVE")));
  EXPECT_THAT(r.out, Not(HasSubstr("MINCOSTFLOW")));
  r = Run("'" + trace + "' --strategies=EQUALITY,BOGUS");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("BOGUS not in"));
}

TEST_F(PlanFlagsTest, QuadraticStrategiesPastTheLimitAreSkippedWithANote) {
  const std::string trace = Write("small.csv", kSmallTrace);
  ToolResult r = Run("'" + trace + "' --max-quadratic-tensors=1");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("note: GREEDY_BY_SIZE objects: RESOURCE_EXHAUSTED"));
  EXPECT_THAT(r.out, HasSubstr("exceed max_quadratic_tensors (1)"));
}

// The round-up of every size was unchecked: 2^64-1 made every size 0 and the
// plan "OK" with exit 0. --round and --align are now bounded where they are
// parsed (PlanOptions accepts at most 1 GiB): a usage error naming the flag.
TEST_F(PlanFlagsTest, ARoundOrAlignPastTheLimitIsAUsageErrorNamingIt) {
  const std::string trace = Write("small.csv", kSmallTrace);
  for (const char* flag : {"--round", "--align"}) {
    for (const char* value : {"18446744073709551615", "2GiB", "1073741825"}) {
      SCOPED_TRACE(std::string(flag) + "=" + value);
      ToolResult r = Run("'" + trace + "' " + flag + "=" + value);
      ASSERT_TRUE(r.exited);
      EXPECT_EQ(r.code, 2) << r.out << r.err;
      EXPECT_THAT(r.err, HasSubstr(flag));
      EXPECT_THAT(r.err, HasSubstr("the most accepted is 1073741824"));
      EXPECT_EQ(r.out, "");
    }
  }
  // The limit itself is accepted.
  ToolResult r = Run("'" + trace + "' --round=1GiB --align=1GiB");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
}

}  // namespace
