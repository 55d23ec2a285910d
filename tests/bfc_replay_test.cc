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
  EXPECT_THAT(r.out, HasSubstr("frees of failed allocations skipped"));
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
        "--gc", "BFC_ALLOC_CONF"}) {
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
  r = Run("--conf 'max_oom_logz:1,max_split_size_mb:64'");
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--conf: unknown key \"max_oom_logz\" "
                               "(did you mean max_oom_logs?)"));
  EXPECT_THAT(r.err, HasSubstr("\n--conf: max_split_size_mb is a PyTorch"));
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
