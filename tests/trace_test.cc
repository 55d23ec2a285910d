// Tests for bfc/replay/trace.h: CSV parsing (plain and gzip), every error with
// its line, CompileTrace's slot pairing and peaks, and the four real traces.
#include "bfc/replay/trace.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if defined(BFC_HAVE_ZLIB)
#include <zlib.h>
#endif

namespace bfc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kHeader = "Thread,Time,Action,Pointer,Size,Stream\n";

// A fresh directory per test, removed with its files.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "bfc_trace_test.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    char* dir = mkdtemp(buf.data());
    if (dir != nullptr) path_ = dir;
  }
  ~TempDir() {
    for (const std::string& f : files_) std::remove(f.c_str());
    if (!path_.empty()) rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& content) {
    std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << content;
    files_.push_back(p);
    return p;
  }
  std::string Name(const std::string& name) {
    files_.push_back(path_ + "/" + name);
    return files_.back();
  }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

TEST(ParseTraceTest, ParsesEveryField) {
  absl::StatusOr<Trace> t =
      ParseTrace(std::string(kHeader) +
                     "14666,0.000400172,allocate,0x293b5880,37632,0\n"
                     "7,1.5,free,0x293B5880,37632,0x10\n"
                     "7,2,allocate failure,0x0,1099511627776,3\n",
                 "mini");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "mini");
  ASSERT_EQ(t->events.size(), 3u);
  const TraceEvent& a = t->events[0];
  EXPECT_EQ(a.action, TraceEvent::Action::kAllocate);
  EXPECT_EQ(a.thread, 14666u);
  EXPECT_DOUBLE_EQ(a.time, 0.000400172);
  EXPECT_EQ(a.pointer, 0x293b5880u);
  EXPECT_EQ(a.size, 37632u);
  EXPECT_EQ(a.stream, 0u);
  EXPECT_EQ(a.line, 2u);
  const TraceEvent& f = t->events[1];
  EXPECT_EQ(f.action, TraceEvent::Action::kFree);
  EXPECT_EQ(f.pointer, 0x293b5880u);  // upper-case hex digits
  EXPECT_EQ(f.stream, 0x10u);         // hex stream handle
  EXPECT_EQ(f.line, 3u);
  const TraceEvent& x = t->events[2];
  EXPECT_EQ(x.action, TraceEvent::Action::kAllocateFailure);
  EXPECT_EQ(x.size, size_t{1} << 40);
  EXPECT_EQ(x.line, 4u);
}

TEST(ParseTraceTest, AcceptsRmmClockTime) {
  absl::StatusOr<Trace> t = ParseTrace(
      std::string(kHeader) + "1,01:02:03.500000,allocate,0x100,256,0\n",
      "clock");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_DOUBLE_EQ(t->events[0].time, 3723.5);
}

TEST(ParseTraceTest, ToleratesCrlfAndTrailingBlankLines) {
  absl::StatusOr<Trace> t = ParseTrace(
      "Thread,Time,Action,Pointer,Size,Stream\r\n1,0,allocate,0x100,256,0\r\n"
      "1,0,free,0x100,256,0\r\n\r\n\n",
      "crlf");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->events.size(), 2u);
  EXPECT_EQ(t->events[1].stream, 0u);
  EXPECT_EQ(t->events[1].line, 3u);
}

TEST(ParseTraceTest, NoTrailingNewline) {
  absl::StatusOr<Trace> t =
      ParseTrace(std::string(kHeader) + "1,0,allocate,0x100,256,0", "x");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->events.size(), 1u);
}

TEST(ParseTraceTest, HeaderOnlyIsAnEmptyTrace) {
  absl::StatusOr<Trace> t = ParseTrace(kHeader, "empty");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->events.empty());
}

// Each malformed input must fail with InvalidArgument, name the input and the
// line, and say what is wrong.
struct BadCase {
  const char* test_name;
  std::string csv;
  const char* where;  // "name:line:"
  const char* what;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.test_name; }

class ParseTraceErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ParseTraceErrorTest, NamesTheLine) {
  const BadCase& c = GetParam();
  absl::StatusOr<Trace> t = ParseTrace(c.csv, "bad");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr(c.where));
  EXPECT_THAT(t.status().message(), HasSubstr(c.what));
}

const std::string kOk = "1,0,allocate,0x100,256,0\n";

INSTANTIATE_TEST_SUITE_P(
    Errors, ParseTraceErrorTest,
    ::testing::Values(
        BadCase{"Empty", "", "bad:1:", "expected the header"},
        BadCase{"NotALog", "hello, world\n" + kOk,
                "bad:1:", "expected the header"},
        BadCase{"HeaderlessRowsMissingAColumn", kOk + "1,0,free,0x100,256\n",
                "bad:2:", "expected at least 6 columns"},
        BadCase{
            "HeaderWithExtraColumnsRowsShort",
            std::string(kHeader).substr(0, std::string(kHeader).size() - 1) +
                ",Device\n" + kOk,
            "bad:2:", "expected 7 columns"},
        BadCase{"NullPointerOnAnAllocation",
                kHeader + "1,0,allocate,(nil),256,0\n",
                "bad:2:", "bad Pointer"},
        BadCase{"WrongHeader", "Thread,Time,Action,Pointer,Size\n" + kOk,
                "bad:1:", "expected the header"},
        BadCase{"TooFewColumns", kHeader + kOk + "1,0,free,0x100,256\n",
                "bad:3:", "expected 6 columns"},
        BadCase{"TooManyColumns",
                kHeader + kOk + kOk + "1,0,free,0x100,256,0,9\n",
                "bad:4:", "got 7"},
        BadCase{"BadSize", kHeader + kOk + "1,0,allocate,0x200,12a,0\n",
                "bad:3:", "bad Size"},
        BadCase{"NegativeSize", kHeader + "1,0,allocate,0x200,-5,0\n",
                "bad:2:", "bad Size"},
        BadCase{"HugeSize",
                kHeader + "1,0,allocate,0x200,99999999999999999999,0\n",
                "bad:2:", "bad Size"},
        BadCase{"BadPointer", kHeader + "1,0,allocate,0xzz,256,0\n",
                "bad:2:", "bad Pointer"},
        BadCase{"EmptyPointer", kHeader + "1,0,allocate,,256,0\n",
                "bad:2:", "bad Pointer"},
        BadCase{"BadTime", kHeader + kOk + "1,soon,free,0x100,256,0\n",
                "bad:3:", "bad Time"},
        // Echoed escaped: a binary file must not drive the terminal.
        BadCase{"ControlBytes", std::string("\x1b[31mred\0z\n", 10),
                "bad:1:", "got '\\x1b[31mred\\x00z'"},
        BadCase{"NanTime", kHeader + kOk + "1,nan,free,0x100,256,0\n",
                "bad:3:", "bad Time"},
        BadCase{"InfiniteTime", kHeader + "1,-inf,allocate,0x100,256,0\n",
                "bad:2:", "bad Time"},
        // The clock form's seconds: a number, but no time of day.
        BadCase{"NanClockTime", kHeader + "1,0:0:nan,allocate,0x100,256,0\n",
                "bad:2:", "bad Time"},
        BadCase{"InfiniteClockTime",
                kHeader + "1,01:02:inf,allocate,0x100,256,0\n",
                "bad:2:", "bad Time"},
        BadCase{"NegativeClockTime",
                kHeader + "1,01:02:-3.5,allocate,0x100,256,0\n",
                "bad:2:", "bad Time"},
        BadCase{"BadThread", kHeader + "t1,0,allocate,0x100,256,0\n",
                "bad:2:", "bad Thread"},
        BadCase{"BadStream", kHeader + "1,0,allocate,0x100,256,s\n",
                "bad:2:", "bad Stream"},
        BadCase{"UnknownAction",
                kHeader + kOk + kOk + "1,0,alloc,0x300,256,0\n",
                "bad:4:", "unknown Action 'alloc'"},
        BadCase{"BlankLineInside", kHeader + kOk + "\n" + kOk,
                "bad:3:", "blank line"}),
    [](const ::testing::TestParamInfo<BadCase>& info) {
      return info.param.test_name;
    });

// Every generation of RMM's log (tests/data/formats/README.md): headerless
// rows, a header with more columns, failures logged with a null pointer
// ((nil), 0x0 or empty), streams as bare hex. Each parses and compiles into a
// replayable trace; the failure rows stay failures, not errors.
struct FormatCase {
  const char* file;
  size_t events;
  size_t failures;
};

class RmmFormatTest : public ::testing::TestWithParam<FormatCase> {};

TEST_P(RmmFormatTest, ParsesAndCompiles) {
  const FormatCase& c = GetParam();
  absl::StatusOr<Trace> t =
      ReadTrace(std::string(BFC_TEST_DATA_DIR) + "/formats/" + c.file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->events.size(), c.events);
  size_t failures = 0;
  for (const TraceEvent& e : t->events) {
    if (e.action == TraceEvent::Action::kAllocateFailure) {
      ++failures;
      EXPECT_EQ(e.pointer, 0u);
    }
  }
  EXPECT_EQ(failures, c.failures);
  absl::StatusOr<CompiledTrace> compiled = CompileTrace(*t);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_GT(compiled->ops.size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Formats, RmmFormatTest,
                         ::testing::Values(FormatCase{"rmm-current.csv", 7, 1},
                                           FormatCase{"rmm-noheader.csv", 5, 1},
                                           FormatCase{"rmm-extra-columns.csv",
                                                      3, 1}),
                         [](const ::testing::TestParamInfo<FormatCase>& info) {
                           std::string name = info.param.file;
                           name = name.substr(0, name.find('.'));
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

TEST(ParseTraceTest, StreamSpellingsOfEveryGeneration) {
  const std::string rows = std::string(kHeader) +
                           "1,0,allocate,0x100,256,55d0c1a2b3c0\n"
                           "1,0,allocate,0x200,256,0x55d0c1a2b3c0\n"
                           "1,0,allocate,0x300,256,7\n"
                           "1,0,allocate,0x400,256,(nil)\n"
                           "1,0,deallocate,0x100,256,0\n";
  absl::StatusOr<Trace> t = ParseTrace(rows, "streams");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->events.size(), 5u);
  EXPECT_EQ(t->events[0].stream, 0x55d0c1a2b3c0u);
  EXPECT_EQ(t->events[1].stream, 0x55d0c1a2b3c0u);
  EXPECT_EQ(t->events[2].stream, 7u);
  EXPECT_EQ(t->events[3].stream, 0u);
  // RMM's documentation spells a free "deallocate".
  EXPECT_EQ(t->events[4].action, TraceEvent::Action::kFree);
}

TEST(ReadTraceTest, MissingFileIsNotFound) {
  absl::StatusOr<Trace> t = ReadTrace("/nonexistent/dir/trace.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("/nonexistent/dir/trace.csv"));
}

TEST(ReadTraceTest, PlainFileNameAndErrorsNameThePath) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::string good = dir.Write("model-a.csv", std::string(kHeader) + kOk);
  absl::StatusOr<Trace> t = ReadTrace(good);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "model-a");
  EXPECT_EQ(t->events.size(), 1u);

  std::string bad = dir.Write(
      "model-b.csv", std::string(kHeader) + kOk + "1,0,oops,0x1,1,0\n");
  t = ReadTrace(bad);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(bad + ":3:"));
}

// A line of a mebibyte is no trace; /dev/zero (no newline at all) used to
// be read until memory ran out before the parser saw its first line.
TEST(ReadTraceTest, AnEndlessLineIsRefusedWhileReading) {
  absl::StatusOr<Trace> t = ReadTrace("/dev/zero");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(),
              HasSubstr("/dev/zero:1: a line longer than 1048576 bytes"));
  TempDir dir;
  const std::string rows = std::string(kHeader) + kOk;
  const std::string path = dir.Write(
      "long.csv", rows + std::string(size_t{1} << 20, 'x') + "y\n" + kOk);
  t = ReadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(path + ":3: a line longer"));
  // A line of exactly the limit is read (and then refused by the parser).
  const std::string at_limit = dir.Write(
      "at_limit.csv", rows + std::string(size_t{1} << 20, 'x') + "\n");
  t = ReadTrace(at_limit);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), Not(HasSubstr("a line longer")));
}

#if defined(BFC_HAVE_ZLIB)
bool WriteGzip(const std::string& path, const std::string& content) {
  gzFile gz = gzopen(path.c_str(), "wb");
  if (gz == nullptr) return false;
  int n = gzwrite(gz, content.data(), static_cast<unsigned>(content.size()));
  return gzclose(gz) == Z_OK && n == static_cast<int>(content.size());
}

TEST(ReadTraceTest, ReadsGzipByContent) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::string csv = kHeader;
  for (int i = 0; i < 5000; ++i) {
    csv += "1,0,allocate,0x" + std::to_string(1000 + i) + "," +
           std::to_string(256 + i) + ",0\n";
  }
  std::string gz = dir.Name("big.csv.gz");
  ASSERT_TRUE(WriteGzip(gz, csv));
  absl::StatusOr<Trace> t = ReadTrace(gz);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "big");
  ASSERT_EQ(t->events.size(), 5000u);
  EXPECT_EQ(t->events[4999].size, 256u + 4999u);
  EXPECT_EQ(t->events[4999].pointer, 0x5999u);

  // Detection is by magic bytes, not by the file name.
  std::string disguised = dir.Name("disguised.csv");
  ASSERT_TRUE(WriteGzip(disguised, std::string(kHeader) + kOk));
  t = ReadTrace(disguised);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->events.size(), 1u);
}

// A few megabytes of gzip inflate to gigabytes; the text was read whole
// with no limit, and on Linux a string grown past memory is not bad_alloc:
// the process is killed. The text now stops at ReadTraceOptions'
// max_text_bytes (by default a quarter of the memory the process may use).
TEST(ReadTraceTest, TextPastTheLimitIsRefusedWhileInflating) {
  TempDir dir;
  std::string csv = kHeader;
  while (csv.size() < (size_t{4} << 20)) {
    csv += "1,0,allocate,0x1000,256,0\n1,0,free,0x1000,256,0\n";
  }
  const std::string gz = dir.Name("bomb.csv.gz");
  ASSERT_TRUE(WriteGzip(gz, csv));
  ReadTraceOptions options;
  options.max_text_bytes = size_t{1} << 20;
  absl::StatusOr<Trace> t = ReadTrace(gz, options);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(t.status().message(),
              HasSubstr(gz + ": the trace's text (after decompression) "
                             "passes 1.00 MiB (1048576 B)"));
  // At the size of its text it is read; with the default limit too.
  options.max_text_bytes = csv.size();
  t = ReadTrace(gz, options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->events.size(), 2 * ((csv.size() - kHeader.size()) / 48));
  t = ReadTrace(gz);
  ASSERT_TRUE(t.ok()) << t.status();

  // A plain file over the limit is refused before it is read.
  const std::string plain = dir.Write("plain.csv", csv);
  options.max_text_bytes = csv.size() - 1;
  t = ReadTrace(plain, options);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(t.status().message(), HasSubstr(plain + ": the trace's text"));
}

TEST(ReadTraceTest, GzipErrorsNameTheLine) {
  TempDir dir;
  std::string gz = dir.Name("bad.csv.gz");
  ASSERT_TRUE(WriteGzip(gz, std::string(kHeader) + kOk + "1,0,allocate,0x5\n"));
  absl::StatusOr<Trace> t = ReadTrace(gz);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr(gz + ":3:"));
}

TEST(ReadTraceTest, TruncatedGzipIsAnError) {
  TempDir dir;
  std::string full = dir.Name("full.csv.gz");
  std::string csv = kHeader;
  for (int i = 0; i < 2000; ++i)
    csv += "1,0,allocate,0x" + std::to_string(i + 1) + ",256,0\n";
  ASSERT_TRUE(WriteGzip(full, csv));
  std::ifstream in(full, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 100u);
  std::string cut = dir.Write("cut.csv.gz", bytes.substr(0, bytes.size() / 2));
  absl::StatusOr<Trace> t = ReadTrace(cut);
  EXPECT_FALSE(t.ok());
}
#endif  // BFC_HAVE_ZLIB

// --- CompileTrace
// --------------------------------------------------------------

Trace Make(const std::string& rows) {
  absl::StatusOr<Trace> t = ParseTrace(kHeader + rows, "t");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Trace();
}

// Stream indices are 16 bits and index 0 is always stream 0: 65535 others
// fit, used or not; one more is refused with that bound, naming its line.
TEST(CompileTraceTest, StreamsAreBoundedBesidesStreamZero) {
  auto rows = [](uint64_t first, uint64_t count) {
    std::string out;
    for (uint64_t s = first; s < first + count; ++s) {
      out += absl::StrCat("1,0,allocate,0x100,256,", s, "\n");
      out += absl::StrCat("1,0,free,0x100,256,", s, "\n");
    }
    return out;
  };
  absl::StatusOr<CompiledTrace> fits = CompileTrace(Make(rows(1, 65535)));
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->streams.size(), 65536u);
  absl::StatusOr<CompiledTrace> with_zero = CompileTrace(Make(rows(0, 65536)));
  ASSERT_TRUE(with_zero.ok()) << with_zero.status();
  absl::StatusOr<CompiledTrace> over = CompileTrace(Make(rows(1, 65536)));
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  // Line 1 is the header; stream 65536's allocation is row 2 * 65535 + 1.
  EXPECT_THAT(over.status().message(),
              HasSubstr("t:131072: more than 65535 distinct streams besides "
                        "stream 0"));
}

TEST(CompileTraceTest, PairsFreesAndRecyclesSlots) {
  Trace t = Make(
      "1,0,allocate,0xa,100,0\n"        // 0: slot 0
      "1,0,allocate,0xb,1000,0\n"       // 1: slot 1
      "1,0,free,0xa,100,0\n"            // 2: frees slot 0
      "1,0,allocate failure,0x0,9,0\n"  // 3: not replayed
      "1,0,allocate,0xc,300,0\n"        // 4: reuses slot 0
      "1,0,free,0xb,1000,0\n"           // 5
      "1,0,allocate,0xa,50,0\n"         // 6: 0xa is free again: fine, slot 1
      "1,0,free,0xc,300,0\n"            // 7
      "1,0,free,0xa,999,0\n");          // 8: size is the allocation's (50)
  absl::StatusOr<CompiledTrace> c = CompileTrace(t);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "t");
  EXPECT_EQ(c->num_events, 9u);
  EXPECT_EQ(c->num_failure_rows, 1u);
  EXPECT_EQ(c->num_unknown_frees, 0u);
  EXPECT_EQ(c->num_slots, 2u);
  ASSERT_EQ(c->ops.size(), 8u);
  using K = ReplayOp::Kind;
  struct Want {
    K kind;
    uint32_t slot;
    size_t size;
    size_t event;
  };
  const Want want[] = {{K::kAllocate, 0, 100, 0}, {K::kAllocate, 1, 1000, 1},
                       {K::kFree, 0, 100, 2},     {K::kAllocate, 0, 300, 4},
                       {K::kFree, 1, 1000, 5},    {K::kAllocate, 1, 50, 6},
                       {K::kFree, 0, 300, 7},     {K::kFree, 1, 50, 8}};
  for (size_t i = 0; i < c->ops.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(c->ops[i].kind, want[i].kind);
    EXPECT_EQ(c->ops[i].slot, want[i].slot);
    EXPECT_EQ(c->ops[i].size, want[i].size);
    EXPECT_EQ(c->ops[i].event_index, want[i].event);
  }
  // Live requested bytes: 100, 1100, 1000, 1300 (peak), 300, 350, ...
  EXPECT_EQ(c->peak_live_bytes, 1300u);
  // Rounded: 256, 1280, 1024, 1536 (peak), 512, 768, ...
  EXPECT_EQ(c->peak_live_rounded_bytes, 1536u);
}

TEST(CompileTraceTest, UnknownFreeNamesTheLine) {
  Trace t = Make(
      "1,0,allocate,0xa,100,0\n"
      "1,0,free,0xa,100,0\n"
      "1,0,free,0xa,100,0\n");  // line 4: double free
  absl::StatusOr<CompiledTrace> c = CompileTrace(t);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("t:4:"));
  EXPECT_THAT(c.status().message(), HasSubstr("0xa"));
}

// A trace read from a file is named by its path in CompileTrace's errors, as
// in ReadTrace's own, not by its stem ("model-c:3"), which says nothing
// about which directory it came from.
TEST(CompileTraceTest, ErrorsNameThePathReadTraceRead) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::string path =
      dir.Write("model-c.csv", std::string(kHeader) + "1,0,free,0xb,100,0\n");
  absl::StatusOr<Trace> t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "model-c");
  EXPECT_EQ(t->source, path);
  absl::StatusOr<CompiledTrace> c = CompileTrace(*t);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr(path + ":2:"));
}

// A Trace built by hand has no source: its name is what errors name.
TEST(CompileTraceTest, ErrorsNameTheNameWithoutASource) {
  Trace t;
  t.name = "by-hand";
  TraceEvent free_event;
  free_event.action = TraceEvent::Action::kFree;
  free_event.pointer = 0xc;
  free_event.size = 8;
  free_event.line = 7;
  t.events.push_back(free_event);
  absl::StatusOr<CompiledTrace> c = CompileTrace(t);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("by-hand:7:"));
}

TEST(CompileTraceTest, SkipUnknownFreesCountsThem) {
  Trace t = Make(
      "1,0,free,0x77,100,0\n"
      "1,0,allocate,0xa,100,0\n"
      "1,0,free,0xa,100,0\n"
      "1,0,free,0xa,100,0\n");
  CompileOptions options;
  options.skip_unknown_frees = true;
  absl::StatusOr<CompiledTrace> c = CompileTrace(t, options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_unknown_frees, 2u);
  ASSERT_EQ(c->ops.size(), 2u);
  EXPECT_EQ(c->ops[1].kind, ReplayOp::Kind::kFree);
  EXPECT_EQ(c->ops[1].event_index, 2u);
}

TEST(CompileTraceTest, AllocateOfALivePointerIsAnError) {
  Trace t = Make(
      "1,0,allocate,0xa,100,0\n"
      "1,0,allocate,0xa,100,0\n");
  absl::StatusOr<CompiledTrace> c = CompileTrace(t);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("t:3:"));
  EXPECT_THAT(c.status().message(), HasSubstr("line 2"));
}

TEST(CompileTraceTest, LeftLiveAllocationsStayInPeaks) {
  Trace t = Make(
      "1,0,allocate,0xa,1,0\n"
      "1,0,allocate,0xb,2,0\n");
  absl::StatusOr<CompiledTrace> c = CompileTrace(t);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->peak_live_bytes, 3u);
  EXPECT_EQ(c->peak_live_rounded_bytes, 512u);
  EXPECT_EQ(c->num_slots, 2u);
}

// --- The real traces (numbers from shared/traces/README.md)
// --------------------

struct RealTrace {
  const char* name;
  size_t events;
  size_t peak_live_bytes;
  size_t peak_live_rounded_bytes;  // from the golden README
};

void PrintTo(const RealTrace& r, std::ostream* os) { *os << r.name; }

class RealTraceTest : public ::testing::TestWithParam<RealTrace> {};

TEST_P(RealTraceTest, ParsesAndCompiles) {
  const RealTrace& r = GetParam();
  absl::StatusOr<Trace> t =
      ReadTrace(std::string(BFC_TEST_DATA_DIR) + "/" + r.name + ".csv");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, r.name);
  EXPECT_EQ(t->events.size(), r.events);
  absl::StatusOr<CompiledTrace> c = CompileTrace(*t);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_events, r.events);
  EXPECT_EQ(c->ops.size(),
            r.events);  // every allocation is freed, nothing fails
  EXPECT_EQ(c->num_failure_rows, 0u);
  EXPECT_EQ(c->peak_live_bytes, r.peak_live_bytes);
  EXPECT_EQ(c->peak_live_rounded_bytes, r.peak_live_rounded_bytes);
  size_t allocs = 0;
  for (const ReplayOp& op : c->ops)
    allocs += op.kind == ReplayOp::Kind::kAllocate;
  EXPECT_EQ(allocs * 2, r.events);
  EXPECT_LT(c->num_slots, allocs);  // slots are recycled
}

INSTANTIATE_TEST_SUITE_P(
    RealTraces, RealTraceTest,
    ::testing::Values(RealTrace{"resnet18-train", 4488, 835805832, 835811584},
                      RealTrace{"transformer-train", 8658, 1120545108,
                                1120564992},
                      RealTrace{"lstm-train", 18794, 563223624, 563224320},
                      RealTrace{"resnet50-infer", 4440, 291969608, 291982848}),
    [](const ::testing::TestParamInfo<RealTrace>& info) {
      std::string n = info.param.name;
      for (char& ch : n) {
        if (ch == '-') ch = '_';
      }
      return n;
    });

}  // namespace
}  // namespace bfc
