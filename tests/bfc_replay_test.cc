// Runs the bfc-replay executable as a user would and checks its output and
// exit status: the default run, bad input, bad options, an absent GPU, the
// flags generated from the option table, the BFC_ALLOC_CONF / --conf / flag
// precedence, and that no output ever overwrites a trace or survives a failed
// run half-written.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "bfc/allocator_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/tool_test.h"

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAreArray;

using Result = ::bfc::testing::ToolResult;
using ::bfc::testing::kSmallTrace;
using ::bfc::testing::Slurp;

std::string HelpEntry(const std::string& help, const std::string& flag) {
  std::string entry;
  bool in = false;
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    const bool starts_option =
        absl::StartsWith(line, "  -") || (line.size() > 2 && line[2] != ' ');
    if (starts_option) {
      if (in) break;
      in = absl::StartsWith(line, "  " + flag + ",") ||
           absl::StartsWith(line, "  " + flag + " ") ||
           absl::StartsWith(line, "  " + flag + "[");
    }
    if (in) absl::StrAppend(&entry, line, " ");
  }
  return absl::StrJoin(absl::StrSplit(entry, ' ', absl::SkipEmpty()), " ");
}

class BfcReplayTest : public ::bfc::testing::ToolTest {
 protected:
  BfcReplayTest() : ToolTest(BFC_REPLAY_BINARY) {}
};

// --quiet and --verbose conflict only when both are on: "--quiet=false
// --verbose" was refused as if both had been given.
TEST_F(BfcReplayTest, QuietAndVerboseConflictOnlyWhenBothAreOn) {
  Result r = Run("--quiet=false --verbose");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("bfc-replay: backend"));
  r = Run("--verbose=false --quiet");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  r = Run("--verbose --quiet");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--quiet: cannot be combined with --verbose"));
}

TEST_F(BfcReplayTest, NoArgumentsReplaysTheBundledTrace) {
  Result r = Run("");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("resnet18-train"));
  // Which trace was used, found relative to the executable.
  EXPECT_THAT(r.out, HasSubstr("share/bfc/traces/resnet18-train.csv, bundled"));
  EXPECT_THAT(r.out, HasSubstr("events            4488"));
  EXPECT_THAT(r.out, HasSubstr("allocations       2244"));
  EXPECT_THAT(r.out, HasSubstr("frees             2244"));
  EXPECT_THAT(r.out, HasSubstr("failures          0"));
  EXPECT_THAT(r.out, HasSubstr("peak live bytes   797.09 MiB (835805832 B)"));
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
  EXPECT_THAT(r.out, HasSubstr("peak pool bytes   2.00 GiB (2147483648 B)"));
}

TEST_F(BfcReplayTest, FailedAllocationsExitWith3) {
  Result r = Run("--memory-limit=100MiB");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("failures          0\n")));
  EXPECT_THAT(r.out,
              HasSubstr("frees of failed or 0-byte allocations skipped"));
  EXPECT_THAT(r.err, HasSubstr("allocations failed (exit status 3)"));

  // --quiet: nothing but the exit status (no summary, no OOM reports).
  r = Run("--memory-limit=100MiB --quiet");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
}

TEST_F(BfcReplayTest, PlanComparesOfflinePlansWithTheOnlinePool) {
  Result r = Run("--plan");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("lower bound (peak live bytes): 797.09 MiB "
                               "(835805832 B)"));
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
  EXPECT_THAT(r.out, HasSubstr("Usage: bfc-replay"));
  EXPECT_THAT(r.out, HasSubstr("--memory-limit"));
  for (const char* section :
       {"\nInputs:\n", "\nAllocator:\n", "\nOutputs:\n", "\nReporting:\n"}) {
    EXPECT_THAT(r.out, HasSubstr(section));
  }
  for (const char* flag :
       {"--conf", "--backend", "--summary-json", "--json", "--svg", "--html",
        "--plan", "--quiet", "--verbose", "--skip-unknown-frees", "--growth",
        "--gc", "BFC_ALLOC_CONF", "--phases", "--compare-policies",
        "--compare-svg"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
  EXPECT_THAT(r.out, HasSubstr("Exit status: 0 ok; 1 bad input"));
  EXPECT_EQ(r.err, "");
}

// README.md shows --help verbatim; a flag added or reworded must show there.
TEST_F(BfcReplayTest, ReadmeShowsTheRealHelp) {
  const std::string readme =
      Slurp(std::string(BFC_TEST_DATA_DIR) + "/../../README.md");
  const std::string intro = "exactly as `bfc-replay --help` prints them";
  const size_t at = readme.find(intro);
  ASSERT_NE(at, std::string::npos) << "README.md lost its --help section";
  const size_t begin = readme.find("```\n", at);
  ASSERT_NE(begin, std::string::npos);
  const size_t end = readme.find("\n```", begin + 4);
  ASSERT_NE(end, std::string::npos);
  Result r = Run("--help");
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(readme.substr(begin + 4, end + 1 - (begin + 4)), r.out)
      << "paste the output of bfc-replay --help into README.md";
}

// Every row of the option table is a flag, shown with its default, accepted,
// and applied (the verbose report names the flag as the source).
TEST_F(BfcReplayTest, EveryAllocatorOptionIsAFlagWithItsDefault) {
  Result help = Run("--help");
  ASSERT_EQ(help.code, 0);
  const bfc::AllocatorOptions tf_defaults;
  std::string all;
  for (const bfc::OptionField& f : bfc::AllocatorOptionFields()) {
    const std::string flag = "--" + absl::StrReplaceAll(f.name, {{"_", "-"}});
    const std::string def = bfc::AllocatorOptionToString(tf_defaults, f.name);
    const std::string entry = HelpEntry(help.out, flag);
    ASSERT_NE(entry, "") << flag << " is not in --help:\n" << help.out;
    EXPECT_THAT(entry, HasSubstr(std::string(f.doc).substr(0, 20))) << flag;
    // bfc-replay's own default differs from TF's only where it says so.
    EXPECT_THAT(entry, ::testing::AnyOf(HasSubstr("Default: " + def),
                                        HasSubstr("(TF: " + def + ")")))
        << entry;
    absl::StrAppend(&all, " ", flag, "=", def);
  }
  const std::string trace = Write("small.csv", kSmallTrace);
  Result r = Run("--verbose" + all + " '" + trace + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  for (const bfc::OptionField& f : bfc::AllocatorOptionFields()) {
    EXPECT_THAT(r.err,
                HasSubstr(absl::StrCat(
                    "option ", f.name, "=",
                    bfc::AllocatorOptionToString(tf_defaults, f.name), " (--",
                    absl::StrReplaceAll(f.name, {{"_", "-"}}), ")")));
  }
}

TEST_F(BfcReplayTest, BoolOptionFlagsTakeNoValueOrOne) {
  const std::string trace = Write("small.csv", kSmallTrace);
  Result r =
      Run("--record-allocation-sites --gc --growth=false "
          "--summary-json - '" +
          trace + "'");
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["options"]["record_allocation_sites"], "true");
  EXPECT_EQ(j["options"]["garbage_collection"], "true");
  EXPECT_EQ(j["options"]["allow_growth"], "false");
}

TEST_F(BfcReplayTest, SummaryJsonOnStdout) {
  Result r = Run("--summary-json -");
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not JSON:\n" << r.out;
  for (const char* key :
       {"trace", "events", "failures", "peak_live_bytes", "peak_pool_bytes",
        "footprint", "ns_per_op", "options"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["trace"], "resnet18-train");
  EXPECT_EQ(j["events"], 4488);
  EXPECT_EQ(j["failures"], 0);
  EXPECT_EQ(j["peak_live_bytes"], 835805832);
  EXPECT_EQ(j["peak_pool_bytes"], 1071644672);
  // Every option, as the table's text.
  std::vector<std::string> names;
  for (const bfc::OptionField& f : bfc::AllocatorOptionFields()) {
    names.emplace_back(f.name);
    EXPECT_TRUE(j["options"][std::string(f.name)].is_string()) << f.name;
  }
  std::vector<std::string> keys;
  for (auto& [k, v] : j["options"].items()) keys.push_back(k);
  EXPECT_THAT(keys, UnorderedElementsAreArray(names));
  // The text report moved to stderr.
  EXPECT_THAT(r.err, HasSubstr("peak live bytes"));
}

// sim-cudamalloc: regions never merge, so the map at the end holds every
// region taken; the coalescing virtual backend merges the same regions into
// fewer. The summary counts the sub-allocator calls.
TEST_F(BfcReplayTest, SimCudaMallocRegionsNeverMerge) {
  for (const char* backend : {"sim-cudamalloc", "virtual"}) {
    SCOPED_TRACE(backend);
    const std::string json = File(std::string(backend) + ".json");
    Result r = Run(std::string("--growth --backend ") + backend +
                   " --quiet --summary-json - --json '" + json + "'");
    ASSERT_EQ(r.code, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["backend"], backend);
    EXPECT_EQ(j["sub_allocator_allocs"], j["regions"]);
    EXPECT_EQ(j["sub_allocator_frees"], 0);
    std::ifstream in(json);
    nlohmann::json report = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(report.is_discarded());
    const size_t regions_at_end =
        report["snapshots"][1]["dump"]["regions"].size();
    if (std::string(backend) == "sim-cudamalloc") {
      EXPECT_EQ(regions_at_end, j["regions"].get<size_t>());
    } else {
      EXPECT_LT(regions_at_end, j["regions"].get<size_t>());
    }
  }
}

TEST_F(BfcReplayTest, SummaryJsonFileAndFailures) {
  const std::string out = File("summary.json");
  Result r = Run("--memory-limit=100MiB --quiet --summary-json '" + out + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 3) << r.err;
  nlohmann::json j = nlohmann::json::parse(Slurp(out));
  EXPECT_GT(j["failures"].get<int>(), 0);
  EXPECT_EQ(j["memory_limit"], 100 << 20);
}

// Settings: defaults < BFC_ALLOC_CONF < --conf < flags, key by key.
TEST_F(BfcReplayTest, ConfPrecedence) {
  const std::string trace = Write("small.csv", kSmallTrace);
  Result r =
      Run("--conf 'max_oom_logs:2,memory_limit:1GiB,retry_timeout:1s' "
          "--max-oom-logs=3 --verbose --summary-json - '" +
              trace + "'",
          "BFC_ALLOC_CONF='garbage_collection:true,max_oom_logs:1,"
          "memory_limit:512MiB,backend:host'");
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["backend"], "host");                        // environment
  EXPECT_EQ(j["options"]["garbage_collection"], "true");  // environment
  EXPECT_EQ(j["memory_limit"], 1 << 30);                  // --conf
  EXPECT_EQ(j["options"]["retry_timeout"], "1s");         // --conf
  EXPECT_EQ(j["options"]["max_oom_logs"], "3");           // the flag
  EXPECT_EQ(j["options"]["allow_growth"], "true");        // default
  EXPECT_THAT(r.err, HasSubstr("backend host (BFC_ALLOC_CONF)"));
  EXPECT_THAT(r.err, HasSubstr("option max_oom_logs=3 (--max-oom-logs)"));
  EXPECT_THAT(r.err, HasSubstr("option retry_timeout=1s (--conf)"));

  // A flag beats both.
  r = Run(
      "--conf backend:host --backend=virtual --summary-json - '" + trace + "'",
      "BFC_ALLOC_CONF=backend:host");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["backend"], "virtual");
}

TEST_F(BfcReplayTest, BadConfIsAUsageError) {
  Result r = Run("--conf 'bogus:1'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--conf: unknown key \"bogus\""));
  // What the .so says and skips, a replay refuses: its answer would be for
  // other settings than the ones asked about.
  r = Run("--conf 'max_oom_logz:1,roundup_power2_divisions:4'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--conf: unknown key \"max_oom_logz\" "
                               "(did you mean max_oom_logs?)"));
  EXPECT_THAT(r.err,
              HasSubstr("\n--conf: roundup_power2_divisions is a PyTorch"));
  r = Run("", "BFC_ALLOC_CONF='max_oom_logs:lots'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("BFC_ALLOC_CONF"));
  EXPECT_THAT(r.err, HasSubstr("max_oom_logs"));
  EXPECT_EQ(r.out, "");
}

TEST_F(BfcReplayTest, TraceFromStandardInput) {
  const std::string trace = Write("small.csv", kSmallTrace);
  Result r = Run("- < '" + trace + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("trace             stdin (-)"));
  EXPECT_THAT(r.out, HasSubstr("allocations       3"));
}

// The bug this guards against: `--html my_trace.csv`, the output name
// forgotten, took the trace as the output and overwrote it with HTML.
TEST_F(BfcReplayTest, AnOutputFlagNeverConsumesTheTrace) {
  const std::string trace = Write("my_trace.csv", kSmallTrace);
  const std::string other = Write("other.csv", kSmallTrace);
  const std::string gz = Write("old.csv.gz", "\x1f\x8b not really gzip");
  for (const std::string& args :
       {"--html '" + trace + "'", "'" + trace + "' --html",
        "--json '" + trace + "' '" + other + "'",
        "--svg='" + trace + "' '" + other + "'",
        "'" + other + "' --summary-json '" + trace + "'",
        "--html '" + gz + "'"}) {
    SCOPED_TRACE(args);
    Result r = Run(args);
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_EQ(Slurp(trace), kSmallTrace);
    EXPECT_EQ(Slurp(other), kSmallTrace);
    EXPECT_EQ(Slurp(gz), "\x1f\x8b not really gzip");
  }
  Result r = Run("--html '" + trace + "'");
  EXPECT_THAT(r.err, HasSubstr("--html"));
  EXPECT_THAT(r.err, HasSubstr("looks like an input trace"));
  r = Run("'" + trace + "' --html");
  EXPECT_THAT(r.err, HasSubstr("--html"));
  EXPECT_THAT(DirEntries(),
              ElementsAre("my_trace.csv", "old.csv.gz", "other.csv"));
}

// An input that does not look like a trace is still never an output: the
// same file (device and inode), however it is spelled.
TEST_F(BfcReplayTest, OutputThatIsTheInputIsRefused) {
  const std::string notes = Write("notes.txt", "not a trace\n");
  ASSERT_EQ(link(notes.c_str(), File("hardlink.txt").c_str()), 0);
  for (const std::string& out :
       {notes, dir_ + "/./notes.txt", dir_ + "/hardlink.txt"}) {
    SCOPED_TRACE(out);
    Result r = Run("'" + notes + "' --json '" + out + "'");
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.code, 2);
    EXPECT_THAT(r.err, HasSubstr("names the input TRACE"));
    EXPECT_EQ(Slurp(notes), "not a trace\n");
  }
}

TEST_F(BfcReplayTest, TwoOutputsNamingOneFileAreRefused) {
  const std::string trace = Write("small.csv", kSmallTrace);
  const std::string out = File("out.json");
  Result r = Run("'" + trace + "' --json '" + out + "' --summary-json '" +
                 dir_ + "/./out.json'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("name the same file"));
  EXPECT_THAT(DirEntries(), ElementsAre("small.csv"));
}

// Standard input is a file too when the shell opened it on one: an output
// naming that file is refused, even for a file that does not look like a
// trace (no header, no .csv).
TEST_F(BfcReplayTest, AnOutputNamingTheFileOnStandardInputIsRefused) {
  const std::string rows = "1,0.1,allocate,0x10,256,0\n1,0.2,free,0x10,256,0\n";
  const std::string x = Write("x.txt", rows);
  Result r = Run("- --json '" + x + "' <'" + x + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("names the input TRACE '-'"));
  EXPECT_EQ(Slurp(x), rows);
}

// /dev/stdout is the descriptor the shell set up: written through it, so
// `>>` appends; resolved and renamed over, it replaced the file.
TEST_F(BfcReplayTest, DevStdoutIsWrittenThroughItsDescriptor) {
  const std::string trace = Write("small.csv", kSmallTrace);
  const std::string log = Write("log.txt", "precious\n");
  const std::string cmd = "'" + binary_ + "' '" + trace +
                          "' --summary-json /dev/stdout >>'" + log +
                          "' 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string got = Slurp(log);
  EXPECT_EQ(got.rfind("precious\n", 0), 0u) << got.substr(0, 200);
  EXPECT_THAT(got, HasSubstr("\"format\": \"bfc-replay-summary\""));
}

// A symlink that leads nowhere yet names the file writing through it
// creates: two outputs meeting there are the same file.
TEST_F(BfcReplayTest, OutputsMeetingThroughADanglingSymlinkAreRefused) {
  const std::string trace = Write("small.csv", kSmallTrace);
  ASSERT_EQ(symlink("report.json", File("alias.html").c_str()), 0);
  Result r = Run("'" + trace + "' --json '" + dir_ + "/report.json' --html '" +
                 dir_ + "/alias.html'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("name the same file"));
  EXPECT_THAT(DirEntries(), ElementsAre("alias.html", "small.csv"));
}

// An empty TRACE (an unset "$TRACE") is bad input, not the bundled trace.
TEST_F(BfcReplayTest, AnEmptyTracePathIsRefused) {
  Result r = Run("''");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("TRACE is an empty path"));
  EXPECT_EQ(r.out, "");
}

TEST_F(BfcReplayTest, OutputsAreReplacedWholeOrNotAtAll) {
  const std::string out = Write("report.json", "precious");
  // A run that fails (an unknown free) leaves the existing output alone.
  const std::string bad = Write("bad.csv",
                                "Thread,Time,Action,Pointer,Size,Stream\n"
                                "1,0,free,0x999,256,0\n");
  Result r = Run("'" + bad + "' --json '" + out + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(Slurp(out), "precious");
  EXPECT_THAT(DirEntries(), ElementsAre("bad.csv", "report.json"));

  // A successful run replaces it, keeps its permissions, leaves no temporary.
  ASSERT_EQ(chmod(out.c_str(), 0640), 0);
  const std::string trace = Write("small.csv", kSmallTrace);
  r = Run("'" + trace + "' --json '" + out + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(Slurp(out), HasSubstr("bfc-replay-report"));
  struct stat st;
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_THAT(DirEntries(), ElementsAre("bad.csv", "report.json", "small.csv"));
}

// From a review: --phases "" fell back to the phases beside the trace.
TEST_F(BfcReplayTest, AnEmptyPhasesPathIsAUsageError) {
  const std::string trace = Write("small.csv", kSmallTrace);
  Result r = Run("'" + trace + "' --phases ''");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--phases: an empty path"));
}

TEST_F(BfcReplayTest, OutputIntoAMissingDirectoryIsAUsageError) {
  Result r = Run("--html '" + dir_ + "/no-such-dir/x.html'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("does not exist"));
}

TEST_F(BfcReplayTest, DirectoryAsTrace) {
  Result r = Run("'" + dir_ + "'");
  ASSERT_TRUE(r.exited) << "bfc-replay crashed: " << r.err;
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("is a directory"));
  EXPECT_EQ(r.out, "");
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

// --streams replays each row on its trace Stream and reports what crossing
// streams cost; without it the summary has no "streams" key. Both runs place
// the same memory here (a device that keeps up), so the pool is the same.
TEST_F(BfcReplayTest, StreamsFlagReportsCrossStreamReuse) {
  std::string path = Write("streams.csv",
                           "Thread,Time,Action,Pointer,Size,Stream\n"
                           "1,0,allocate,0x100,4096,0x7f00\n"
                           "1,0,free,0x100,4096,0x7f00\n"
                           "1,0,allocate,0x200,4096,0x7f80\n"
                           "1,0,free,0x200,4096,0x7f80\n");
  Result plain = Run("--summary-json - '" + path + "'");
  ASSERT_TRUE(plain.exited);
  ASSERT_EQ(plain.code, 0) << plain.err;
  nlohmann::json p = nlohmann::json::parse(plain.out, nullptr, false);
  ASSERT_FALSE(p.is_discarded()) << plain.out;
  EXPECT_FALSE(p.contains("streams"));

  Result r = Run("--streams --summary-json - '" + path + "'");
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_TRUE(j.contains("streams")) << r.out;
  EXPECT_EQ(j["streams"]["trace_streams"], 3);  // 0, 0x7f00, 0x7f80
  EXPECT_EQ(j["streams"]["events_recorded"], 1);
  EXPECT_EQ(j["streams"]["waits_inserted"], 0);
  EXPECT_EQ(j["peak_pool_bytes"], p["peak_pool_bytes"]);
  EXPECT_THAT(r.err, HasSubstr("3 in the trace; 1 events recorded"));

  Result bad = Run("--streams --compare-policies '" + path + "'");
  ASSERT_TRUE(bad.exited);
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--streams"));

  // The JSON report (and the viewer page built from it) carry the same
  // counts, and its dumps name the streams memory waits for.
  const std::string json_path = path + ".json";
  Result report = Run("--streams --json '" + json_path + "' '" + path + "'");
  ASSERT_TRUE(report.exited);
  ASSERT_EQ(report.code, 0) << report.err;
  nlohmann::json rj = nlohmann::json::parse(Slurp(json_path), nullptr, false);
  ASSERT_FALSE(rj.is_discarded());
  EXPECT_EQ(rj["summary"]["trace_streams"], 3);
  EXPECT_EQ(rj["summary"]["stream_stats"]["events_recorded"], 1);
  const nlohmann::json& end_dump = rj["snapshots"].back()["dump"];
  ASSERT_TRUE(end_dump.contains("streams")) << end_dump.dump();
  // At the end the last free (on 0x7f80) is still pending: nobody looked.
  bool pending = false;
  for (const nlohmann::json& c : end_dump["chunks"]) {
    if (c.contains("pending_streams")) {
      EXPECT_EQ(c["pending_streams"], nlohmann::json::array({0x7f80}));
      pending = true;
    }
  }
  EXPECT_TRUE(pending) << end_dump.dump();
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
        // Bare G is ambiguous (GiB or GB?) in bfc/units.h's grammar.
        BadOption{"--memory-limit=1G", "--memory-limit"},
        BadOption{"--memory-limit=0", "--memory-limit"},
        BadOption{"--memory-limit", "--memory-limit"},
        BadOption{"--growth=maybe", "--growth"}, BadOption{"--gc=2", "--gc"},
        BadOption{"--fragmentation-fraction=1.5", "--fragmentation-fraction"},
        BadOption{"--fragmentation-fraction=x", "--fragmentation-fraction"},
        BadOption{"--backend=tpu", "--backend"},
        BadOption{"--retry-timeout=soon", "--retry-timeout"},
        BadOption{"--max-oom-logs=-1", "--max-oom-logs"},
        BadOption{"--quiet --verbose", "--verbose"},
        BadOption{"--json", "--json"},
        BadOption{"--frobnicate", "--frobnicate"}),
    [](const ::testing::TestParamInfo<BadOption>& info) {
      std::string n;
      for (const char* c = info.param.args + 2; *c != '\0'; ++c) {
        if (*c == '-' && c[-1] == '-') continue;
        n += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
      }
      return n;
    });

// From a review: bfc-replay took expandable_segments:True (PyTorch's
// spelling of backend:vmm) and replayed on the default backend.
TEST_F(BfcReplayTest, ExpandableSegmentsInTheConfSelectsTheVmmBackend) {
  for (const std::string& env :
       {std::string(),
        std::string("BFC_ALLOC_CONF=expandable_segments:True")}) {
    Result r = Run(
        env.empty() ? "--conf expandable_segments:True --verbose" : "--verbose",
        env);
    ASSERT_TRUE(r.exited) << r.err;
    if (r.code == 0) {  // a driver (the fake one, or a GPU) serves it
      EXPECT_THAT(r.err, HasSubstr("backend vmm")) << env;
    } else {
      EXPECT_EQ(r.code, 2) << env << "\n" << r.err;
      EXPECT_THAT(r.err, HasSubstr("no CUDA device")) << env;
    }
    EXPECT_THAT(r.err, Not(HasSubstr("backend virtual"))) << env;
  }
}

// From a review: a report standard output could not take (a full disk, a
// closed pipe) went missing with exit status 0 and no message.
TEST_F(BfcReplayTest, StandardOutputThatCannotBeWrittenIsAnError) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  const std::string trace = Write("small.csv", kSmallTrace);
  for (const char* extra :
       {"", " --plan", " --summary-json -", " --compare-policies"}) {
    std::string err;
    EXPECT_EQ(RunIntoFullDevice("'" + trace + "'" + extra, &err), 1) << extra;
    EXPECT_THAT(err, HasSubstr("standard output")) << extra;
  }
}

// From a review: a symlink that leads nowhere yet was replaced by the output
// instead of creating the file it names.
TEST_F(BfcReplayTest, AnOutputThroughALinkThatLeadsNowhereCreatesItsTarget) {
  const std::string trace = Write("small.csv", kSmallTrace);
  const std::string target = File("target.json");
  const std::string link = File("link.json");
  ASSERT_EQ(symlink("target.json", link.c_str()), 0);
  Result r = Run("'" + trace + "' --quiet --summary-json '" + link + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_THAT(Slurp(target), HasSubstr("\"footprint\""));
}

// From a review: a planner error under --plan returned before the summary of
// the replay, which had run, was written.
TEST_F(BfcReplayTest, APlannerErrorStillWritesTheReplaysSummary) {
  // One allocation the planner refuses (its total passes 2^62 bytes); the
  // replay runs, and fails it.
  const std::string trace = Write("huge.csv",
                                  "Thread,Time,Action,Pointer,Size,Stream\n"
                                  "1,0,allocate,0x100,18446744073709551360,0\n"
                                  "1,0,free,0x100,18446744073709551360,0\n");
  const std::string summary = File("summary.json");
  Result r =
      Run("'" + trace + "' --plan --quiet --summary-json '" + summary + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--plan: "));
  const nlohmann::json j = nlohmann::json::parse(Slurp(summary), nullptr,
                                                 /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << Slurp(summary);
  EXPECT_EQ(j["failures"], 1);
}

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

// --- --phases, last_iteration, --compare-policies, --compare-svg -----------

// Three iterations of 1 MiB, the last also asking for 3 MiB: under TF's
// doubling from 2 MiB the last one must grow once (by 4 MiB), and nothing
// is ever given back.
constexpr char kGrowTrace[] =
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "1,0,allocate,0x100,1048576,0\n"  // 0: iter0
    "1,0,free,0x100,1048576,0\n"
    "1,0,allocate,0x200,1048576,0\n"  // 2: iter1
    "1,0,free,0x200,1048576,0\n"
    "1,0,allocate,0x300,1048576,0\n"  // 4: iter2
    "1,0,allocate,0x400,3145728,0\n"
    "1,0,free,0x400,3145728,0\n"
    "1,0,free,0x300,1048576,0\n";
constexpr char kGrowPhases[] =
    "Phase,FirstEvent,Time\n"
    "iter0,0,0.0\n"
    "iter1,2,0.1\n"
    "iter2,4,0.2\n"
    "end,8,0.3\n";
// The same iterations, the last asking for 3 MiB alone: with
// release_before_extend the free 2 MiB region goes back before the pool
// grows by 3 MiB.
constexpr char kReleaseTrace[] =
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "1,0,allocate,0x100,1048576,0\n"
    "1,0,free,0x100,1048576,0\n"
    "1,0,allocate,0x200,1048576,0\n"
    "1,0,free,0x200,1048576,0\n"
    "1,0,allocate,0x400,3145728,0\n"
    "1,0,free,0x400,3145728,0\n";
constexpr char kReleasePhases[] =
    "Phase,FirstEvent,Time\n"
    "iter0,0,0.0\n"
    "iter1,2,0.1\n"
    "iter2,4,0.2\n"
    "end,6,0.3\n";

// The first `rows` data rows of a trace (with its header).
std::string TracePrefix(const std::string& trace, int rows) {
  std::vector<absl::string_view> lines = absl::StrSplit(trace, '\n');
  std::string out;
  for (int i = 0; i <= rows && i < static_cast<int>(lines.size()); ++i) {
    absl::StrAppend(&out, lines[i], "\n");
  }
  return out;
}

class BfcReplayPhasesTest : public BfcReplayTest {
 protected:
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
    for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
      rmdir(it->c_str());
    }
    BfcReplayTest::TearDown();
  }
  // Writes `trace` as NAME.csv and `phases` as meta/NAME.phases.csv beside
  // it, where bfc-replay looks for them; returns the trace's path.
  std::string WriteWithPhases(const std::string& name, const std::string& trace,
                              const std::string& phases) {
    const std::string meta = dir_ + "/meta";
    if (std::find(dirs_.begin(), dirs_.end(), meta) == dirs_.end()) {
      EXPECT_EQ(mkdir(meta.c_str(), 0755), 0);
      dirs_.push_back(meta);
    }
    Write("meta/" + name + ".phases.csv", phases);
    return Write(name + ".csv", trace);
  }
  // Runs with --summary-json - and parses it (a null json on failure).
  nlohmann::json Summary(const std::string& args) {
    Result r = Run(args + " --summary-json -");
    EXPECT_TRUE(r.exited);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
    return nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  }

  std::vector<std::string> dirs_;
};

// From a review: names reached the terminal raw, so a trace file or phase
// named with ESC [ 2 J cleared the screen. The text summary, the account
// lines, the policy table and the plan show control characters as \xNN;
// the JSON keeps the names as they are.
TEST_F(BfcReplayPhasesTest, NamesCannotDriveTheTerminal) {
  const std::string name =
      "x\x1b[2J\xc2\x9b"
      "1m\\y";
  const std::string shown = "x\\x1b[2J\\xc2\\x9b1m\\\\y";
  const std::string phases =
      "Phase,FirstEvent,Time\n"
      "iter0,0,0.0\n"
      "\x1b[31miter1,2,0.1\n"
      "\x1b[31miter2,4,0.2\n"
      "end,8,0.3\n";
  const std::string trace = WriteWithPhases(name, kGrowTrace, phases);
  for (const std::string& args :
       {"'" + trace + "' --accounts --plan",
        "--compare-policies '" + trace + "' --backend=sim-cudamalloc"}) {
    SCOPED_TRACE(args);
    Result r = Run(args);
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("\xc2\x9b"), std::string::npos) << r.out;
    EXPECT_THAT(r.out, HasSubstr(shown));
  }
  // The accounts are named after the phases.
  EXPECT_THAT(Run("'" + trace + "' --accounts").out,
              HasSubstr("account           replay/\\x1b[31miter2: peak"));
  nlohmann::json j = Summary("'" + trace + "'");
  EXPECT_EQ(j["trace"], name);
}

TEST_F(BfcReplayPhasesTest, PhasesBesideTheTraceGiveTheLastIteration) {
  const std::string trace = WriteWithPhases("grow", kGrowTrace, kGrowPhases);
  const std::string tf = " --backend=sim-cudamalloc --conf preset:tf";
  nlohmann::json j = Summary("'" + trace + "'" + tf);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["phases_file"], dir_ + "/meta/grow.phases.csv");
  EXPECT_EQ(j["iterations"], 3);
  ASSERT_TRUE(j.contains("last_iteration")) << j.dump(2);
  const nlohmann::json& last = j["last_iteration"];
  EXPECT_EQ(last["phase"], "iter2");
  EXPECT_EQ(last["events"], 4);
  // Worked by hand: a 2 MiB region in iter0 serves 1 MiB in iter0 and iter1;
  // in iter2 the 3 MiB request does not fit beside the 1 MiB one, so the pool
  // grows once, by the doubled 4 MiB, to 6 MiB.
  EXPECT_EQ(last["sub_allocator_allocs"], 1);
  EXPECT_EQ(last["sub_allocator_frees"], 0);
  EXPECT_EQ(last["peak_pool_bytes"], 6 << 20);
  EXPECT_EQ(j["sub_allocator_allocs"], 2);

  // Independently: the whole trace's calls less those of the trace cut
  // where iter2 begins (no meta file for it, so no phases either).
  nlohmann::json prefix =
      Summary("'" + Write("prefix.csv", TracePrefix(kGrowTrace, 4)) + "'" + tf);
  ASSERT_FALSE(prefix.is_discarded());
  EXPECT_FALSE(prefix.contains("phases_file"));
  EXPECT_FALSE(prefix.contains("last_iteration"));
  EXPECT_EQ(last["sub_allocator_allocs"].get<int64_t>(),
            j["sub_allocator_allocs"].get<int64_t>() -
                prefix["sub_allocator_allocs"].get<int64_t>());
  EXPECT_EQ(last["sub_allocator_frees"].get<int64_t>(),
            j["sub_allocator_frees"].get<int64_t>() -
                prefix["sub_allocator_frees"].get<int64_t>());
  EXPECT_EQ(last["peak_pool_bytes"], j["peak_pool_bytes"]);

  // The text summary says the same.
  Result r = Run("'" + trace + "'" + tf);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("(3 iterations)"));
  EXPECT_THAT(r.out, HasSubstr("last iteration    iter2: 4 events, "
                               "sub-allocator 1 allocs / 0 frees"));
}

TEST_F(BfcReplayPhasesTest, LastIterationCountsRegionsGivenBack) {
  const std::string trace =
      WriteWithPhases("release", kReleaseTrace, kReleasePhases);
  const std::string low =
      " --backend=sim-cudamalloc --conf preset:low_footprint";
  nlohmann::json j = Summary("'" + trace + "'" + low);
  ASSERT_FALSE(j.is_discarded());
  const nlohmann::json& last = j["last_iteration"];
  EXPECT_EQ(last["phase"], "iter2");
  // The free 2 MiB region goes back, then the pool grows by exactly 3 MiB.
  EXPECT_EQ(last["sub_allocator_allocs"], 1);
  EXPECT_EQ(last["sub_allocator_frees"], 1);
  EXPECT_EQ(last["peak_pool_bytes"], 3 << 20);
  nlohmann::json prefix = Summary(
      "'" + Write("prefix.csv", TracePrefix(kReleaseTrace, 4)) + "'" + low);
  ASSERT_FALSE(prefix.is_discarded());
  EXPECT_EQ(last["sub_allocator_allocs"].get<int64_t>(),
            j["sub_allocator_allocs"].get<int64_t>() -
                prefix["sub_allocator_allocs"].get<int64_t>());
  EXPECT_EQ(last["sub_allocator_frees"].get<int64_t>(),
            j["sub_allocator_frees"].get<int64_t>() -
                prefix["sub_allocator_frees"].get<int64_t>());
}

TEST_F(BfcReplayPhasesTest, PhasesFlagOverridesTheFileBesideTheTrace) {
  const std::string trace = WriteWithPhases("grow", kGrowTrace, kGrowPhases);
  // Two iterations, the second covering iter1 and iter2 of the file beside.
  const std::string other = Write("two.phases.csv",
                                  "Phase,FirstEvent,Time\n"
                                  "iter0,0,0\n"
                                  "iter1,2,0\n");
  nlohmann::json j = Summary("'" + trace + "' --phases '" + other +
                             "' --backend=sim-cudamalloc");
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["phases_file"], other);
  EXPECT_EQ(j["iterations"], 2);
  EXPECT_EQ(j["last_iteration"]["phase"], "iter1");
  EXPECT_EQ(j["last_iteration"]["events"], 6);  // to the end of the trace
  EXPECT_EQ(j["last_iteration"]["sub_allocator_allocs"], 1);

  // Phases with no iteration: the file is named, there is no last one.
  const std::string none =
      Write("none.phases.csv", "Phase,FirstEvent\nconstruct,0\nend,8\n");
  j = Summary("'" + trace + "' --phases '" + none + "'");
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["phases_file"], none);
  EXPECT_EQ(j["iterations"], 0);
  EXPECT_FALSE(j.contains("last_iteration"));

  // No file beside the trace and no flag: no phase keys at all.
  j = Summary("'" + Write("small.csv", kSmallTrace) + "'");
  ASSERT_FALSE(j.is_discarded());
  EXPECT_FALSE(j.contains("phases_file"));
  EXPECT_FALSE(j.contains("iterations"));
}

struct BadPhases {
  const char* name;
  const char* content;
  const char* message;  // after "phase file PATH"
};

TEST_F(BfcReplayPhasesTest, BadPhasesFileIsBadInputNamingFileAndLine) {
  const std::string trace = Write("grow.csv", kGrowTrace);
  for (const BadPhases& b : {
           BadPhases{"empty", "", " line 1: no header"},
           BadPhases{"header_only", "Phase,FirstEvent,Time\n",
                     " line 1: no phase after the header"},
           BadPhases{"no_first_event_column", "Phase,Time\niter0,0.0\n",
                     " line 1: expected a header with the columns Phase and "
                     "FirstEvent"},
           BadPhases{"missing_column",
                     "Phase,FirstEvent,Time\niter0,0,0\niter1\n",
                     " line 3: 1 column, expected 2 or more"},
           BadPhases{"non_numeric", "Phase,FirstEvent\niter0,zero\n",
                     " line 2: FirstEvent 'zero' is not an event index"},
           BadPhases{"negative", "Phase,FirstEvent\niter0,-1\n",
                     " line 2: FirstEvent '-1' is not an event index"},
           BadPhases{"fraction", "Phase,FirstEvent\niter0,1.5\n",
                     " line 2: FirstEvent '1.5' is not an event index"},
           BadPhases{"overflow",
                     "Phase,FirstEvent\niter0,99999999999999999999\n",
                     " line 2: FirstEvent '99999999999999999999' is not"},
           BadPhases{"out_of_range", "Phase,FirstEvent\niter0,0\niter1,9\n",
                     " line 3: phase iter1 starts at event 9, past the "
                     "trace's 8 events"},
           BadPhases{"decreasing", "Phase,FirstEvent\niter0,4\niter1,2\n",
                     " line 3: phase iter1 starts at event 2, before the "
                     "previous phase (iter0 at 4)"},
           BadPhases{"no_name", "Phase,FirstEvent\n,2\n",
                     " line 2: the phase has no name"},
       }) {
    SCOPED_TRACE(b.name);
    const std::string phases =
        Write(absl::StrCat(b.name, ".phases.csv"), b.content);
    Result r = Run("'" + trace + "' --phases '" + phases + "'");
    ASSERT_TRUE(r.exited) << "crashed: " << r.err;
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("phase file " + phases + b.message));
    EXPECT_EQ(r.out, "");  // refused before the replay
  }
  // Missing, and a directory.
  Result r = Run("'" + trace + "' --phases '" + dir_ + "/nope.csv'");
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("phase file " + dir_ +
                               "/nope.csv: cannot be "
                               "read"));
  r = Run("'" + trace + "' --phases '" + dir_ + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("phase file " + dir_ + ": is a directory"));
  // A bad file found beside the trace is an error too, naming it.
  const std::string beside =
      WriteWithPhases("bad", kGrowTrace, "Phase,FirstEvent\niter0,x\n");
  r = Run("'" + beside + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("phase file " + dir_ +
                               "/meta/bad.phases.csv line 2: FirstEvent 'x'"));
  r = Run("--compare-policies '" + beside + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(dir_ + "/meta/bad.phases.csv line 2"));
}

TEST_F(BfcReplayPhasesTest, ComparePoliciesPrintsOneRowPerPolicy) {
  const std::string trace = WriteWithPhases("grow", kGrowTrace, kGrowPhases);
  const std::string rows = File("rows.json");
  Result r =
      Run("--compare-policies '" + trace + "' --summary-json '" + rows + "'");
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(Slurp(rows), nullptr, false);
  ASSERT_TRUE(j.is_array()) << Slurp(rows);

  std::vector<std::string> policies;
  int plans = 0, bounds = 0;
  for (const nlohmann::json& row : j) {
    EXPECT_EQ(row["trace"], "grow");
    EXPECT_EQ(row["trace_path"], trace);
    const std::string kind = row["kind"];
    if (kind == "policy") {
      for (const char* key : {"policy", "conf", "backend", "footprint",
                              "peak_pool_bytes", "peak_live_bytes", "failures",
                              "sub_allocator_allocs", "sub_allocator_frees",
                              "ns_per_op", "iterations", "last_iteration"}) {
        EXPECT_TRUE(row.contains(key)) << key << " in " << row.dump();
      }
      EXPECT_FALSE(row.contains("error")) << row.dump();
      EXPECT_EQ(row["backend"], "sim-cudamalloc");
      EXPECT_EQ(row["failures"], 0);
      EXPECT_EQ(row["peak_live_bytes"], 4 << 20);
      EXPECT_EQ(row["iterations"], 3);
      EXPECT_EQ(row["last_iteration"]["phase"], "iter2");
      policies.push_back(row["policy"]);
      // One table row per policy, with its settings.
      EXPECT_THAT(r.out, HasSubstr(absl::StrCat(
                             "| ", row["policy"].get<std::string>(), " | `",
                             row["conf"].get<std::string>(), "` | ")));
    } else if (kind == "plan") {
      ++plans;
      EXPECT_TRUE(row.contains("strategy")) << row.dump();
      EXPECT_GE(row["footprint"].get<double>(), 1.0);
    } else {
      EXPECT_EQ(kind, "bound");
      ++bounds;
      EXPECT_EQ(row["footprint"], 1.0);
      EXPECT_EQ(row["peak_pool_bytes"], 4 << 20);
    }
  }
  EXPECT_EQ(plans, 1);
  EXPECT_EQ(bounds, 1);
  ASSERT_GE(policies.size(), 2u);
  EXPECT_EQ(policies[0], "tf");
  EXPECT_EQ(policies[1], "low_footprint");
  std::vector<std::string> unique = policies;
  std::sort(unique.begin(), unique.end());
  EXPECT_EQ(std::unique(unique.begin(), unique.end()), unique.end());
  // The table: a heading naming the phases, then a header, a rule, a row per
  // policy, the offline plan and the lower bound.
  EXPECT_THAT(r.out, HasSubstr("grow: 8 events, sim-cudamalloc backend"));
  EXPECT_THAT(r.out, HasSubstr("last iteration (iter2) allocs / frees"));
  const size_t table_rows =
      std::count(r.out.begin(), r.out.end(), '\n') - 2 /*heading, blank*/;
  EXPECT_EQ(table_rows, 2 + policies.size() + 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("| offline plan | "));
  EXPECT_THAT(r.out, HasSubstr("| lower bound | peak live bytes | 1.000 | "));

  // The tf row is a plain replay on sim-cudamalloc: the same footprint and
  // last iteration as a run of its own.
  nlohmann::json plain = Summary("'" + trace + "' --backend=sim-cudamalloc");
  ASSERT_FALSE(plain.is_discarded());
  EXPECT_EQ(j[0]["footprint"], plain["footprint"]);
  EXPECT_EQ(j[0]["peak_pool_bytes"], plain["peak_pool_bytes"]);
  EXPECT_EQ(j[0]["sub_allocator_allocs"], plain["sub_allocator_allocs"]);
  EXPECT_EQ(j[0]["last_iteration"], plain["last_iteration"]);
  // And low_footprint's is its preset's.
  nlohmann::json low = Summary("'" + trace +
                               "' --backend=sim-cudamalloc "
                               "--conf preset:low_footprint");
  ASSERT_FALSE(low.is_discarded());
  EXPECT_EQ(j[1]["footprint"], low["footprint"]);
  EXPECT_EQ(j[1]["last_iteration"], low["last_iteration"]);
}

TEST_F(BfcReplayPhasesTest, ComparePoliciesOverSeveralTraces) {
  const std::string grow = WriteWithPhases("grow", kGrowTrace, kGrowPhases);
  const std::string small = Write("small.csv", kSmallTrace);
  Result r =
      Run("--compare-policies '" + grow + "' '" + small + "' --summary-json -");
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_array()) << r.out;
  size_t grow_rows = 0, small_rows = 0;
  for (const nlohmann::json& row : j) {
    if (row["trace"] == "grow") ++grow_rows;
    if (row["trace"] == "small") {
      ++small_rows;
      // No phases beside small.csv: no iteration keys.
      EXPECT_FALSE(row.contains("last_iteration"));
    }
  }
  EXPECT_EQ(grow_rows, small_rows);
  EXPECT_GT(small_rows, 2u);
  // With the rows on stdout the tables go to stderr, one per trace.
  EXPECT_THAT(r.err, HasSubstr("grow: 8 events"));
  EXPECT_THAT(r.err, HasSubstr("small: 6 events"));
}

TEST_F(BfcReplayPhasesTest, CompareSvgHasOnePanelPerPolicy) {
  const std::string trace = WriteWithPhases("grow", kGrowTrace, kGrowPhases);
  const std::string svg = File("panels.svg");
  Result r = Run("--compare-policies '" + trace + "' --compare-svg '" + svg +
                 "' --summary-json -");
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_array());
  std::vector<std::string> policies;
  for (const nlohmann::json& row : j) {
    if (row["kind"] == "policy") policies.push_back(row["policy"]);
  }
  const std::string text = Slurp(svg);
  EXPECT_TRUE(absl::StartsWith(text, "<?xml version=\"1.0\""));
  EXPECT_TRUE(absl::EndsWith(text, "</svg>\n"));
  // A <g> per panel, titled with its policy, with two lines: pool and live.
  size_t groups = 0;
  for (size_t at = text.find("<g>"); at != std::string::npos;
       at = text.find("<g>", at + 1)) {
    ++groups;
  }
  EXPECT_EQ(groups, policies.size());
  for (const std::string& p : policies) {
    EXPECT_THAT(text, HasSubstr(">" + p + "</text>")) << p;
  }
  size_t polylines = 0;
  for (size_t at = text.find("<polyline"); at != std::string::npos;
       at = text.find("<polyline", at + 1)) {
    ++polylines;
  }
  EXPECT_EQ(polylines, 2 * policies.size());
  EXPECT_THAT(text, HasSubstr("grow (8 events)"));
}

TEST_F(BfcReplayPhasesTest, ComparePoliciesUsageErrors) {
  const std::string trace = Write("small.csv", kSmallTrace);
  const std::string other = Write("other.csv", kSmallTrace);
  const std::string svg = dir_ + "/panels.svg";
  struct Case {
    std::string args;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"'" + trace + "' --compare-svg '" + svg + "'",
            "--compare-svg needs --compare-policies"},
           {"'" + trace + "' '" + other + "'",
            "more than one TRACE is only for --compare-policies"},
           {"--compare-policies '" + trace + "' --conf preset:tf",
            "--conf cannot be combined with --compare-policies"},
           {"--compare-policies '" + trace + "' --growth=false",
            "--allow-growth (--growth) cannot be combined with "
            "--compare-policies"},
           {"--compare-policies '" + trace + "' --plan", "leave out --plan"},
           {"--compare-policies '" + trace + "' --svg '" + svg + "'",
            "--svg cannot be combined with --compare-policies"},
           {"--compare-policies '" + trace + "' '" + other + "' --phases '" +
                trace + "'",
            "--phases names one trace's phases"},
           {"--compare-policies '" + trace + "' --accounts",
            "--accounts cannot be combined with --compare-policies"},
           {"'" + trace + "' --accounts",
            "--accounts needs the trace's phases"},
       }) {
    SCOPED_TRACE(c.args);
    Result r = Run(c.args);
    ASSERT_TRUE(r.exited);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_EQ(r.out, "");
  }
  EXPECT_THAT(DirEntries(), ElementsAre("other.csv", "small.csv"));
}

// --- --accounts
// ---------------------------------------------------------------

// Weights made in construct and freed in teardown; iter0 frees one of its
// two allocations in iter1; iter1 leaves one allocation live.
constexpr char kAccountsTrace[] =
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "1,0,allocate,0xa,1000,0\n"  // 0 construct: 1024 B charged
    "1,0,allocate,0xb,2048,0\n"  // 1 iter0
    "1,0,allocate,0xc,512,0\n"   // 2 iter0
    "1,0,free,0xb,2048,0\n"      // 3 iter0
    "1,0,allocate,0xe,300,0\n"   // 4 iter1: 512 B charged, never freed
    "1,0,allocate,0xd,4096,0\n"  // 5 iter1
    "1,0,free,0xc,512,0\n"       // 6 iter1 frees iter0's
    "1,0,free,0xd,4096,0\n"      // 7 iter1
    "1,0,free,0xa,1000,0\n";     // 8 teardown
constexpr char kAccountsPhases[] =
    "Phase,FirstEvent,Time\n"
    "construct,0,0\n"
    "iter0,1,0\n"
    "iter1,4,0\n"
    "teardown,8,0\n";

// From a review: a report keeps every account's bytes after every op, and
// 100k ops with 256 phase names took 726 MB to write; a million would have
// taken about 7 GB. Past 2^25 samples the run is refused before any work,
// naming the numbers; the summary alone (no report) is not bounded by it.
TEST_F(BfcReplayPhasesTest, AccountSamplesInAReportAreBounded) {
  std::string trace = "Thread,Time,Action,Pointer,Size,Stream\n";
  const int pairs = 65537;  // 131,074 ops: 256 names make 2^25 + 512
  for (int i = 0; i < pairs; ++i) {
    absl::StrAppend(&trace, "1,0,allocate,0x", absl::Hex(i + 1),
                    ",256,0\n1,0,free,0x", absl::Hex(i + 1), ",256,0\n");
  }
  std::string phases = "Phase,FirstEvent,Time\n";
  for (int k = 0; k < 256; ++k) {
    absl::StrAppend(&phases, "p", k, ",", k * 2 * (pairs / 256), ",0\n");
  }
  const std::string path = WriteWithPhases("many", trace, phases);
  const std::string html = File("many.html");
  Result r = Run("'" + path + "' --accounts --html '" + html + "'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("records 256 accounts after each of 131074 "
                               "ops; at most 33554432 samples"));
  EXPECT_FALSE(std::ifstream(html).good());
  r = Run("'" + path + "' --accounts --quiet");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(BfcReplayPhasesTest, AccountsPerPhaseInTheSummary) {
  const std::string trace =
      WriteWithPhases("acc", kAccountsTrace, kAccountsPhases);
  Result r = Run("'" + trace + "' --accounts --summary-json -");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 0) << r.err;
  nlohmann::json j =
      nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_TRUE(j.contains("accounts")) << j.dump(2);
  const nlohmann::json& a = j["accounts"];
  ASSERT_EQ(a.size(), 5u) << a.dump(2);
  // Worked by hand from the trace above (sizes rounded to 256 B).
  struct Want {
    const char* path;
    int64_t peak, allocations, frees, live, bytes_at_end;
  };
  const Want want[] = {
      // All at once after row 5: 1024 + 512 + 512 + 4096.
      {"replay", 6144, 0, 0, 0, 512},
      {"replay/construct", 1024, 1, 1, 0, 0},
      // The free of 0xc in iter1 credits iter0, the account it was charged to.
      {"replay/iter0", 2560, 2, 2, 0, 0},
      {"replay/iter1", 4608, 2, 1, 1, 512},
      {"replay/teardown", 0, 0, 0, 0, 0},
  };
  for (size_t i = 0; i < 5; ++i) {
    SCOPED_TRACE(want[i].path);
    EXPECT_EQ(a[i]["path"], want[i].path);
    EXPECT_EQ(a[i]["peak_bytes_in_use"], want[i].peak);
    EXPECT_EQ(a[i]["allocations"], want[i].allocations);
    EXPECT_EQ(a[i]["frees"], want[i].frees);
    EXPECT_EQ(a[i]["live_at_end"], want[i].live);
    EXPECT_EQ(a[i]["bytes_in_use_at_end"], want[i].bytes_at_end);
  }
  EXPECT_THAT(r.err, HasSubstr("account           replay/iter1: peak 4.50 KiB "
                               "(4608 B), 2 allocations, 1 frees, 1 live at "
                               "end (512 B)"));
  // Without --accounts: no accounts key, and the same placements' numbers.
  nlohmann::json plain = Summary("'" + trace + "'");
  ASSERT_FALSE(plain.is_discarded());
  EXPECT_FALSE(plain.contains("accounts"));
  EXPECT_EQ(plain["peak_pool_bytes"], j["peak_pool_bytes"]);
  EXPECT_EQ(plain["peak_bytes_in_use"], j["peak_bytes_in_use"]);
}

TEST_F(BfcReplayPhasesTest, AccountsPerPhaseInTheReportTimeline) {
  const std::string trace =
      WriteWithPhases("acc", kAccountsTrace, kAccountsPhases);
  const std::string json = dir_ + "/report.json";
  Result r = Run("'" + trace + "' --accounts --quiet --json '" + json + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(Slurp(json));
  std::remove(json.c_str());
  const nlohmann::json& acc = j["timeline"]["accounts"];
  ASSERT_EQ(acc.size(), 4u) << acc.dump();
  EXPECT_EQ(acc[0]["path"], "replay/construct");
  EXPECT_EQ(acc[3]["path"], "replay/teardown");
  // Bytes charged after each of the 9 ops, by hand.
  EXPECT_EQ(
      acc[0]["bytes_in_use"],
      nlohmann::json({1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 0}));
  EXPECT_EQ(acc[1]["bytes_in_use"],
            nlohmann::json({0, 2048, 2560, 512, 512, 512, 0, 0, 0}));
  EXPECT_EQ(acc[2]["bytes_in_use"],
            nlohmann::json({0, 0, 0, 0, 512, 4608, 4608, 512, 512}));
  EXPECT_EQ(acc[3]["bytes_in_use"],
            nlohmann::json({0, 0, 0, 0, 0, 0, 0, 0, 0}));
}

// From a review: the phase file found beside the trace was not an input to
// the check that no output names an input, so an output path leading to it
// (a symlink, a hard link) wrote the summary over it.
TEST_F(BfcReplayPhasesTest, APhaseFileFoundBesideTheTraceIsNeverAnOutput) {
  const std::string trace = WriteWithPhases("grow", kGrowTrace, kGrowPhases);
  const std::string phases = dir_ + "/meta/grow.phases.csv";
  const std::string link = File("out.json");
  ASSERT_EQ(symlink("meta/grow.phases.csv", link.c_str()), 0);
  const std::string hard = File("hard.json");
  ASSERT_EQ(::link(phases.c_str(), hard.c_str()), 0);
  for (const std::string& args :
       {"'" + trace + "' --summary-json '" + link + "'",
        "'" + trace + "' --summary-json '" + hard + "'",
        "--compare-policies '" + trace + "' --summary-json '" + link + "'"}) {
    Result r = Run(args + " --quiet");
    ASSERT_TRUE(r.exited) << args;
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("the phase file found beside the trace"))
        << args;
    EXPECT_EQ(Slurp(phases), kGrowPhases) << args;
  }
}

TEST_F(BfcReplayPhasesTest, AccountsRefuseMorePhaseNamesThanTheBound) {
  std::string phases = "Phase,FirstEvent\n";
  for (int i = 0; i < 257; ++i) absl::StrAppend(&phases, "p", i, ",0\n");
  const std::string trace = WriteWithPhases("many", kAccountsTrace, phases);
  Result r = Run("'" + trace + "' --accounts");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("this file has 257 names (at most 256)"));
  EXPECT_EQ(r.out, "");
}

TEST_F(BfcReplayPhasesTest, AccountsRefuseAPhaseNameNoAccountCanHave) {
  const std::string trace = WriteWithPhases(
      "slash", kAccountsTrace, "Phase,FirstEvent\nfwd/bwd,0\nend,9\n");
  Result r = Run("'" + trace + "' --accounts");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err,
              HasSubstr("a phase cannot name an account: account 'fwd/bwd'"));
  EXPECT_EQ(r.out, "");
}

}  // namespace
