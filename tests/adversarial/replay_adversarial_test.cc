// Hostile inputs to the replay layer (bfc/replay/trace.h, bfc/replay/replay.h):
// paths that are not regular files (a directory, a FIFO, a pipe as /dev/fd/N,
// standard input as "-"), gzip data cut short, missing its trailer or followed
// by garbage, sizes whose rounding or sum wraps, and hand-made compiled traces
// that lie about sizes or slots. Each must end in a status naming the file
// (and line) or in the right trace; never a crash, an exception, or a
// shorter or wrapped answer.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bfc/allocator.h"
#include "bfc/replay/replay.h"
#include "bfc/replay/trace.h"
#include "bfc/virtual_sub_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if defined(BFC_HAVE_ZLIB)
#include "testing/gzip.h"
#endif

namespace bfc {
namespace {

using ::testing::HasSubstr;

const std::string kHeader = "Thread,Time,Action,Pointer,Size,Stream\n";

// `n` allocations of distinct sizes, each freed: a trace whose parse shows
// whether every row arrived (the last row's size is 256 + n - 1).
std::string Rows(int n, int first = 0) {
  std::string rows;
  for (int i = first; i < first + n; ++i) {
    absl::StrAppend(&rows, "1,0,allocate,0x", 4096 + i, ",", 256 + i, ",0\n");
  }
  return rows;
}

class ReplayAdversarialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "bfc_replay_adv.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    ASSERT_NE(mkdtemp(buf.data()), nullptr);
    dir_ = buf.data();
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string Name(const std::string& name) {
    files_.push_back(dir_ + "/" + name);
    return files_.back();
  }
  std::string Write(const std::string& name, const std::string& content) {
    std::string p = Name(name);
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

  std::string dir_;
  std::vector<std::string> files_;
};

// A writer for a FIFO gets EPIPE, not SIGPIPE, when the reader gave up early
// (so a failing test reports instead of dying).
const bool kSigpipeIgnored = [] {
  std::signal(SIGPIPE, SIG_IGN);
  return true;
}();

// Opens `fifo` for writing once a reader has it open; -1 after 10 s without
// one (a reader that never opened fails its test rather than hanging it).
int OpenFifoWriter(const std::string& fifo) {
  for (int i = 0; i < 1000; ++i) {
    const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    if (errno != ENXIO) return -1;
    usleep(10 * 1000);
  }
  return -1;
}

// Writes `content` into the write end of a pipe (or a FIFO opened for
// writing) from another thread, as a producer process would.
class Feeder {
 public:
  Feeder(int fd, std::string content)
      : thread_([fd, content = std::move(content)] {
          const char* p = content.data();
          size_t left = content.size();
          while (left > 0) {
            const ssize_t n = write(fd, p, left);
            if (n <= 0) break;  // the reader went away
            p += n;
            left -= static_cast<size_t>(n);
          }
          close(fd);
        }) {}
  ~Feeder() { thread_.join(); }

 private:
  std::thread thread_;
};

// --- paths that are not regular files ----------------------------------------

// The bug: fopen succeeds on a directory, ftell says LONG_MAX, and the
// reserve threw std::length_error out of the library (terminate, exit 134).
TEST_F(ReplayAdversarialTest, DirectoryIsAnErrorNamingIt) {
  absl::StatusOr<Trace> t = ReadTrace(dir_);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr(dir_ + ": is a directory"));
}

TEST_F(ReplayAdversarialTest, FifoIsReadAsAStream) {
  const std::string fifo = Name("trace.csv");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::unique_ptr<Feeder> feeder;
  std::thread opener([&] {
    const int fd = OpenFifoWriter(fifo);
    if (fd >= 0) feeder = std::make_unique<Feeder>(fd, kHeader + Rows(3000));
  });
  absl::StatusOr<Trace> t = ReadTrace(fifo);
  opener.join();
  feeder.reset();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "trace");
  ASSERT_EQ(t->events.size(), 3000u);
  EXPECT_EQ(t->events.back().size, 256u + 2999u);
}

TEST_F(ReplayAdversarialTest, PipeAsDevFdIsReadAsAStream) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::string path = absl::StrCat("/dev/fd/", fds[0]);
  absl::StatusOr<Trace> t;
  {
    Feeder feeder(fds[1], kHeader + Rows(3000));
    t = ReadTrace(path);
    close(fds[0]);  // before the join: a writer left blocked gets EPIPE
  }
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->events.size(), 3000u);
  EXPECT_EQ(t->events.back().size, 256u + 2999u);
}

// "-" is standard input (here a pipe put in its place).
TEST_F(ReplayAdversarialTest, DashIsStandardInput) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const int saved = dup(STDIN_FILENO);
  ASSERT_GE(saved, 0);
  ASSERT_EQ(dup2(fds[0], STDIN_FILENO), STDIN_FILENO);
  close(fds[0]);
  absl::StatusOr<Trace> t;
  {
    Feeder feeder(fds[1], kHeader + Rows(10) + "1,0,oops,0x1,1,0\n");
    t = ReadTrace(kStandardInputPath);
    dup2(saved, STDIN_FILENO);  // closes the pipe's read end before the join
    close(saved);
  }
  ASSERT_FALSE(t.ok());
  // A bad row on standard input is named as such, with its line.
  EXPECT_THAT(t.status().message(), HasSubstr("standard input:12:"));
}

#if defined(BFC_HAVE_ZLIB)
// --- gzip --------------------------------------------------------------------

using ::bfc::testing::Gzip;

// A gzip member ends with 8 bytes of trailer (CRC-32 and length), which
// `gzip -t` insists on. zlib's gzread returns the data of a member cut before
// them without an error; the trace must not replay as complete.
TEST_F(ReplayAdversarialTest, GzipMissingItsTrailerIsDataLoss) {
  // Rows end at a line boundary in the decompressed text, so only the gzip
  // layer can notice.
  const std::string gz = Gzip(kHeader + Rows(2000));
  const std::string path = Write("cut.csv.gz", gz.substr(0, gz.size() - 8));
  absl::StatusOr<Trace> t = ReadTrace(path);
  ASSERT_FALSE(t.ok()) << "read " << t->events.size() << " rows";
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(t.status().message(), HasSubstr(path + ": truncated gzip"));
}

// Every proper prefix of a gzip file is an error, never a shorter trace.
TEST_F(ReplayAdversarialTest, EveryTruncationOfAGzipFileIsAnError) {
  const std::string gz = Gzip(kHeader + Rows(200));
  const std::string path = Name("prefix.csv.gz");
  for (size_t len = 0; len < gz.size(); ++len) {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        << gz.substr(0, len);
    absl::StatusOr<Trace> t = ReadTrace(path);
    EXPECT_FALSE(t.ok()) << len << " of " << gz.size() << " bytes read as "
                         << t->events.size() << " rows";
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << gz;
  absl::StatusOr<Trace> t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->events.size(), 200u);
}

// gzip -d rejects bytes after the last member that are not another member;
// zlib's gzread ignores them silently.
TEST_F(ReplayAdversarialTest, GarbageAfterTheGzipStreamIsAnError) {
  const std::string path =
      Write("tail.csv.gz", Gzip(kHeader + Rows(10)) + "trailing text\n");
  absl::StatusOr<Trace> t = ReadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(t.status().message(), HasSubstr(path));
  EXPECT_THAT(t.status().message(), HasSubstr("not another gzip member"));
}

TEST_F(ReplayAdversarialTest, CorruptGzipIsDataLossNamingTheFile) {
  std::string gz = Gzip(kHeader + Rows(500));
  gz[gz.size() / 2] = static_cast<char>(gz[gz.size() / 2] ^ 0x55);
  const std::string path = Write("flipped.csv.gz", gz);
  absl::StatusOr<Trace> t = ReadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss);
  // Corrupt or, when the damage makes the data seem to go on, truncated.
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(path + ": "));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(" gzip data"));
}

// As gzip -d does: concatenated members (cat a.gz b.gz) are one stream, and
// zero bytes after the last member are padding.
TEST_F(ReplayAdversarialTest, ConcatenatedGzipMembersAreOneTrace) {
  const std::string path =
      Write("joined.csv.gz", Gzip(kHeader + Rows(100)) + Gzip(Rows(100, 100)) +
                                 std::string(64, '\0'));
  absl::StatusOr<Trace> t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->events.size(), 200u);
  EXPECT_EQ(t->events.back().size, 256u + 199u);
}

// Gzip arriving on a pipe: recognised from its first bytes as they arrive,
// nothing rewound (the old reader sniffed, then reopened the path).
TEST_F(ReplayAdversarialTest, GzipOnAFifoIsDecompressed) {
  const std::string fifo = Name("stream.csv.gz");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::unique_ptr<Feeder> feeder;
  std::thread opener([&] {
    const int fd = OpenFifoWriter(fifo);
    if (fd >= 0) {
      feeder = std::make_unique<Feeder>(fd, Gzip(kHeader + Rows(3000)));
    }
  });
  absl::StatusOr<Trace> t = ReadTrace(fifo);
  opener.join();
  feeder.reset();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "stream");
  ASSERT_EQ(t->events.size(), 3000u);
  EXPECT_EQ(t->events.back().size, 256u + 2999u);
}
#endif  // BFC_HAVE_ZLIB

// --- sizes that wrap ---------------------------------------------------------

Trace Parse(const std::string& rows) {
  absl::StatusOr<Trace> t = ParseTrace(kHeader + rows, "t");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Trace();
}

// SIZE_MAX - 100 rounded up to 256 wrapped to 0: the peak said 0 bytes.
TEST_F(ReplayAdversarialTest, SizeWhoseRoundingWrapsIsRefusedNamingTheLine) {
  for (uint64_t size : {UINT64_MAX, UINT64_MAX - 100, UINT64_MAX - 254}) {
    SCOPED_TRACE(size);
    Trace t = Parse("1,0,allocate,0xa,16,0\n" +
                    absl::StrCat("1,0,allocate,0xb,", size, ",0\n"));
    absl::StatusOr<CompiledTrace> c = CompileTrace(t);
    ASSERT_FALSE(c.ok()) << "peak_live_rounded_bytes "
                         << c->peak_live_rounded_bytes;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr("t:3:"));
    EXPECT_THAT(c.status().message(), HasSubstr("overflows"));
  }
  // The largest size that rounds without wrapping is accepted.
  Trace t = Parse(absl::StrCat("1,0,allocate,0xb,", UINT64_MAX - 255, ",0\n"));
  absl::StatusOr<CompiledTrace> c = CompileTrace(t);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->peak_live_rounded_bytes, UINT64_MAX - 255);
}

// Two live allocations of 2^63 bytes sum to 2^64: the peaks wrapped to 0.
TEST_F(ReplayAdversarialTest, LiveBytesThatWrapAreRefusedNamingTheLine) {
  const uint64_t half = uint64_t{1} << 63;
  Trace t = Parse(absl::StrCat("1,0,allocate,0xa,", half, ",0\n",
                               "1,0,allocate,0xb,", half, ",0\n"));
  absl::StatusOr<CompiledTrace> c = CompileTrace(t);
  ASSERT_FALSE(c.ok()) << "peak_live_bytes " << c->peak_live_bytes;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("t:3:"));
  // Freed in between, the same sizes are fine.
  t = Parse(absl::StrCat("1,0,allocate,0xa,", half, ",0\n", "1,0,free,0xa,",
                         half, ",0\n", "1,0,allocate,0xb,", half, ",0\n"));
  c = CompileTrace(t);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->peak_live_bytes, half);
  EXPECT_EQ(c->peak_live_rounded_bytes, half);
}

// --- hand-made compiled traces -----------------------------------------------

std::unique_ptr<Allocator> MakeAllocator() {
  Allocator::Options options;
  options.allow_retry_on_failure = false;
  return std::make_unique<Allocator>(
      std::make_unique<VirtualSubAllocator>(size_t{1} << 30), size_t{1} << 26,
      "replay_adversarial_test", options);
}

// A free that says 200 bytes of an allocation of 100 took 200 off the live
// bytes: they wrapped to nearly 2^64 and the summary reported it.
TEST_F(ReplayAdversarialTest, FreeWhoseSizeIsNotItsAllocationsIsRefused) {
  std::unique_ptr<Allocator> a = MakeAllocator();
  CompiledTrace bad;
  bad.name = "hand-made";
  bad.num_slots = 1;
  bad.ops = {ReplayOp{ReplayOp::Kind::kAllocate, 0, 0, 100, 0},
             ReplayOp{ReplayOp::Kind::kFree, 0, 0, 200, 1}};
  absl::StatusOr<ReplaySummary> s = ReplayTrace(bad, *a);
  ASSERT_FALSE(s.ok()) << "live bytes at end " << s->live_bytes_at_end;
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("hand-made: op 1 (event 1)"));
  EXPECT_THAT(s.status().message(), HasSubstr("200 bytes"));
  EXPECT_THAT(s.status().message(), HasSubstr("with 100 bytes"));
  EXPECT_EQ(a->GetStats()->num_allocs, 0);  // refused before allocating
}

// A slot count no table can hold threw std::length_error out of Run.
TEST_F(ReplayAdversarialTest, ImpossibleSlotCountIsAStatusNotAnException) {
  std::unique_ptr<Allocator> a = MakeAllocator();
  CompiledTrace bad;
  bad.name = "hand-made";
  bad.ops = {ReplayOp{ReplayOp::Kind::kAllocate, 0, 0, 100, 0}};
  for (size_t slots : {SIZE_MAX, size_t{UINT32_MAX} + 2}) {
    SCOPED_TRACE(slots);
    bad.num_slots = slots;
    absl::StatusOr<ReplaySummary> s = ReplayTrace(bad, *a);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr("32-bit"));
  }
  EXPECT_EQ(a->GetStats()->num_allocs, 0);
}

}  // namespace
}  // namespace bfc
