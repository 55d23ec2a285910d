// Trace reading and compilation.
//
// The parser walks the text once with string_views: no per-line allocation,
// so multi-million-line traces parse at memory bandwidth rather than at
// allocator speed. The events vector is reserved from a newline count first.
#include "bfc/replay/trace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "bfc/internal/constants.h"
#include "bfc/internal/str_format.h"
#include "bfc/units.h"
#include "core/internal/bits.h"

#if defined(BFC_HAVE_ZLIB)
#include <zlib.h>
#endif

namespace bfc {
namespace {

constexpr std::string_view kHeader = "Thread,Time,Action,Pointer,Size,Stream";
constexpr int kNumColumns = 6;

// Abseil as Debian ships it has its own string_view type, so std ones are
// converted at the StrCat boundary.
absl::string_view Av(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

std::string_view StripCr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// Shortens a field for an error message and escapes what is not printable
// (\x1b, NUL: a binary file must neither flood nor drive the terminal).
std::string Quote(std::string_view s) {
  constexpr size_t kMax = 40;
  if (s.size() > kMax) {
    return absl::StrCat("'", absl::CHexEscape(Av(s.substr(0, kMax))), "...'");
  }
  return absl::StrCat("'", absl::CHexEscape(Av(s)), "'");
}

bool ParseDecimal(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 10);
  return ec == std::errc() && end == s.data() + s.size();
}

bool ParseHex(std::string_view s, uint64_t* out) {
  if (s.size() >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    s.remove_prefix(2);
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return ec == std::errc() && end == s.data() + s.size();
}

// Thread and Stream: RMM writes them as decimal ids or as hex handles.
bool ParseId(std::string_view s, uint64_t* out) {
  if (s.size() >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    return ParseHex(s, out);
  return ParseDecimal(s, out);
}

// How printf's %p and RMM's generations spell a null pointer: glibc prints
// "(nil)", others "(null)" or "0x0"; an empty field is taken the same way.
bool IsNullSpelling(std::string_view s) {
  return s.empty() || s == "(nil)" || s == "(null)" || s == "nil";
}

// Stream: RMM generations print the handle as a decimal id, as hex with
// `0x`, or (recent ones) as bare hex such as 55d0c1a2b3c0; the default stream
// may come out as a null pointer. Only the order of events matters to a
// replay, so any of these is accepted and the value kept for reports.
bool ParseStream(std::string_view s, uint64_t* out) {
  if (IsNullSpelling(s)) {
    *out = 0;
    return true;
  }
  return ParseId(s, out) || ParseHex(s, out);
}

// The first line: RMM's header, possibly with columns after the six it has
// always had (kept for the reader's future; ignored here). Returns the number
// of columns, or 0 if `line` is not such a header.
int HeaderColumns(std::string_view line) {
  if (line.substr(0, kHeader.size()) != kHeader) return 0;
  if (line.size() == kHeader.size()) return kNumColumns;
  if (line[kHeader.size()] != ',') return 0;
  return kNumColumns + static_cast<int>(std::count(
                           line.begin() + kHeader.size(), line.end(), ','));
}

// Whether `line` looks like an RMM data row (a log whose header was lost,
// e.g. appended to by a second process): six or more columns with a known
// action in the third.
bool LooksLikeRow(std::string_view line) {
  size_t a = line.find(',');
  if (a == std::string_view::npos) return false;
  size_t b = line.find(',', a + 1);
  if (b == std::string_view::npos) return false;
  size_t c = line.find(',', b + 1);
  if (c == std::string_view::npos) return false;
  const std::string_view action = line.substr(b + 1, c - b - 1);
  return (action == "allocate" || action == "free" || action == "deallocate" ||
          action == "allocate failure") &&
         std::count(line.begin(), line.end(), ',') >= kNumColumns - 1;
}

// Time: seconds as a decimal number (our traces), or RMM's wall-clock
// `HH:MM:SS.ffffff`. Only the order of events matters to a replay, so the
// clock form is turned into seconds since midnight.
bool ParseTime(std::string_view s, double* out) {
  if (s.empty()) return false;
  if (s.find(':') == std::string_view::npos) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    // nan and inf parse, but order nothing.
    return ec == std::errc() && end == s.data() + s.size() &&
           std::isfinite(*out);
  }
  double total = 0;
  while (true) {
    size_t colon = s.find(':');
    if (colon == std::string_view::npos) break;
    uint64_t part = 0;
    if (!ParseDecimal(s.substr(0, colon), &part)) return false;
    total = total * 60 + static_cast<double>(part);
    s.remove_prefix(colon + 1);
  }
  double seconds = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), seconds);
  // `0:0:nan`, `0:0:inf` and `0:0:-5` parse but are no time of day.
  if (ec != std::errc() || end != s.data() + s.size() ||
      !std::isfinite(seconds) || seconds < 0) {
    return false;
  }
  *out = total * 60 + seconds;
  return true;
}

absl::Status LineError(std::string_view label, size_t line,
                       std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(Av(label), ":", line, ": ", Av(what)));
}

// Splits `line` at commas into `fields`; returns the number of fields (which
// may exceed kNumColumns: only the first kNumColumns are stored).
int SplitFields(std::string_view line,
                std::string_view (&fields)[kNumColumns]) {
  int n = 0;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    std::string_view field = line.substr(start, comma == std::string_view::npos
                                                    ? std::string_view::npos
                                                    : comma - start);
    if (n < kNumColumns) fields[n] = field;
    ++n;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return n;
}

// `label` names the input in messages (the path for files).
absl::StatusOr<Trace> ParseTraceImpl(std::string_view csv, std::string name,
                                     std::string_view label) {
  Trace trace;
  trace.name = std::move(name);
  trace.source = std::string(label);
  // UTF-8 byte order mark, as spreadsheet programs write it.
  if (csv.substr(0, 3) == "\xEF\xBB\xBF") csv.remove_prefix(3);
  // A Python pickle (protocol 2 and up starts with 0x80 and the protocol):
  // most likely a PyTorch memory snapshot, which has a converter.
  if (csv.size() >= 2 && csv[0] == '\x80' && csv[1] >= 2 && csv[1] <= 5) {
    return LineError(
        label, 1,
        "this is a Python pickle (a PyTorch memory snapshot?), not an RMM "
        "log; convert a snapshot with tools/snapshot_to_csv.py SNAPSHOT -o "
        "TRACE.csv and read that (or pipe the converter into '-')");
  }

  trace.events.reserve(
      static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')));

  size_t line_no = 0;
  size_t pos = 0;
  bool saw_header = false;
  // Columns per row: the header's count, or with no header at least six.
  int columns = 0;
  // A blank line is accepted only if nothing but blank lines follows it.
  size_t first_blank_line = 0;
  while (pos < csv.size()) {
    size_t nl = csv.find('\n', pos);
    if (nl == std::string_view::npos) nl = csv.size();
    std::string_view line = StripCr(csv.substr(pos, nl - pos));
    pos = nl + 1;
    ++line_no;

    if (line.empty()) {
      if (first_blank_line == 0) first_blank_line = line_no;
      continue;
    }
    if (first_blank_line != 0) {
      return LineError(label, first_blank_line,
                       "blank line in the middle of the trace");
    }
    if (!saw_header) {
      saw_header = true;
      columns = HeaderColumns(line);
      if (columns != 0) continue;
      // No header: RMM's rows from the first line on.
      if (!LooksLikeRow(line)) {
        return LineError(
            label, line_no,
            absl::StrCat("expected the header '", Av(kHeader),
                         "' or an RMM log row, got ", Quote(line)));
      }
      columns = -kNumColumns;
    }

    std::string_view f[kNumColumns];
    int n = SplitFields(line, f);
    if (columns > 0 ? n != columns : n < kNumColumns) {
      return LineError(
          label, line_no,
          columns > 0 ? bfc::internal::Format(
                            "expected %d columns (as the header has), got %d",
                            columns, n)
                      : bfc::internal::Format(
                            "expected at least %d columns (%s), got %d",
                            kNumColumns, Av(kHeader), n));
    }
    TraceEvent e;
    e.line = line_no;
    if (!ParseId(f[0], &e.thread)) {
      return LineError(label, line_no,
                       absl::StrCat("bad Thread ", Quote(f[0])));
    }
    if (!ParseTime(f[1], &e.time)) {
      return LineError(label, line_no,
                       absl::StrCat("bad Time ", Quote(f[1]),
                                    " (expected seconds or HH:MM:SS.ffffff)"));
    }
    if (f[2] == "allocate") {
      e.action = TraceEvent::Action::kAllocate;
    } else if (f[2] == "free" || f[2] == "deallocate") {
      e.action = TraceEvent::Action::kFree;
    } else if (f[2] == "allocate failure") {
      e.action = TraceEvent::Action::kAllocateFailure;
    } else {
      return LineError(
          label, line_no,
          absl::StrCat("unknown Action ", Quote(f[2]),
                       " (expected allocate, free or allocate failure)"));
    }
    // A failed allocation has no pointer: RMM logs nullptr through %p.
    if (e.action == TraceEvent::Action::kAllocateFailure &&
        IsNullSpelling(f[3])) {
      e.pointer = 0;
    } else if (!ParseHex(f[3], &e.pointer)) {
      return LineError(label, line_no,
                       absl::StrCat("bad Pointer ", Quote(f[3]),
                                    " (expected hex like 0x7f3a00)"));
    }
    uint64_t size = 0;
    if (!ParseDecimal(f[4], &size) || size > SIZE_MAX) {
      return LineError(label, line_no,
                       absl::StrCat("bad Size ", Quote(f[4]),
                                    " (expected bytes as a decimal integer)"));
    }
    e.size = static_cast<size_t>(size);
    if (!ParseStream(f[5], &e.stream)) {
      return LineError(label, line_no,
                       absl::StrCat("bad Stream ", Quote(f[5])));
    }
    trace.events.push_back(e);
  }
  if (!saw_header) {
    return LineError(
        label, std::max<size_t>(line_no, 1),
        absl::StrCat("empty trace: expected the header '", Av(kHeader), "'"));
  }
  return trace;
}

// "dir/resnet18-train.csv.gz" -> "resnet18-train".
std::string TraceNameFromPath(std::string_view path) {
  size_t slash = path.find_last_of('/');
  std::string_view base =
      slash == std::string_view::npos ? path : path.substr(slash + 1);
  auto strip = [&base](std::string_view ext) {
    if (base.size() > ext.size() &&
        base.substr(base.size() - ext.size()) == ext) {
      base.remove_suffix(ext.size());
      return true;
    }
    return false;
  };
  strip(".gz");
  if (!strip(".csv")) {
    size_t dot = base.find_last_of('.');
    if (dot != std::string_view::npos && dot > 0) base = base.substr(0, dot);
  }
  return std::string(base);
}

// Reads up to `size` bytes of `fd`, retrying on EINTR: >0 bytes, 0 at the
// end, -1 with errno set.
ssize_t ReadSome(int fd, char* buf, size_t size) {
  while (true) {
    const ssize_t n = read(fd, buf, size);
    if (n >= 0 || errno != EINTR) return n;
  }
}

absl::Status ReadError(std::string_view label, int errnum) {
  return absl::DataLossError(
      absl::StrCat(Av(label), ": read error: ", std::strerror(errnum)));
}

constexpr unsigned char kGzipMagic[2] = {0x1f, 0x8b};
constexpr size_t kChunk = size_t{1} << 16;

bool IsGzipMagic(const char* p) {
  return static_cast<unsigned char>(p[0]) == kGzipMagic[0] &&
         static_cast<unsigned char>(p[1]) == kGzipMagic[1];
}

// Bytes a trace line may hold. An RMM log line is under 200 bytes; a stream
// with no newline in a mebibyte (/dev/zero, a binary file) is no trace, and
// reading it whole first would take memory without bound.
constexpr size_t kMaxLineBytes = size_t{1} << 20;

absl::Status TextTooLarge(std::string_view label, size_t max_bytes) {
  return absl::ResourceExhaustedError(absl::StrCat(
      Av(label), ": the trace's text (after decompression) passes ",
      HumanReadableBytesExact(max_bytes),
      ", the most read into memory (ReadTraceOptions::max_text_bytes; by "
      "default a quarter of the memory this process may use)"));
}

// The memory this process may use: physical memory, or less where a cgroup
// (a container) limits it (v2 memory.max, v1 memory.limit_in_bytes; their
// "no limit" reads as a huge number or "max"). 0 when unknown.
size_t UsableMemoryBytes() {
  size_t bytes = 0;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0 &&
      static_cast<size_t>(pages) <=
          std::numeric_limits<size_t>::max() / static_cast<size_t>(page_size)) {
    bytes = static_cast<size_t>(pages) * static_cast<size_t>(page_size);
  }
  for (const char* path : {"/sys/fs/cgroup/memory.max",
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    FILE* f = std::fopen(path, "re");
    if (f == nullptr) continue;
    char line[64] = {};
    const bool read = std::fgets(line, sizeof line, f) != nullptr;
    std::fclose(f);
    size_t limit = 0;
    const char* end = line + std::strlen(line);
    while (end > line && (end[-1] == '\n' || end[-1] == ' ')) --end;
    if (read && std::from_chars(line, end, limit).ec == std::errc() &&
        limit > 0 && (bytes == 0 || limit < bytes)) {
      bytes = limit;
    }
  }
  return bytes;
}

// A quarter of the usable memory, at least 64 MiB. The text's string may
// hold up to twice its length while it grows, and the parsed events take
// about as much as the text.
size_t DefaultMaxTextBytes() {
  constexpr size_t kFloor = size_t{64} << 20;
  return std::max(kFloor, UsableMemoryBytes() / 4);
}

// Appends what was read to the text (at most max_bytes of it), refusing a
// line longer than
// kMaxLineBytes as soon as it is seen.
class TextSink {
 public:
  TextSink(std::string_view label, std::string* out, size_t max_bytes)
      : label_(label), out_(out), max_bytes_(max_bytes) {}

  absl::Status Append(const char* p, size_t n) {
    if (n > max_bytes_ - std::min(max_bytes_, out_->size())) {
      return TextTooLarge(label_, max_bytes_);
    }
    const char* end = p + n;
    const char* first = static_cast<const char*>(std::memchr(p, '\n', n));
    // The line that was running ends at `first`, or runs on; the lines
    // after `first` are within this piece (under kMaxLineBytes: pieces are
    // smaller).
    const size_t running =
        run_ + static_cast<size_t>((first != nullptr ? first : end) - p);
    if (running > kMaxLineBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          Av(label_), ":", lines_ + 1, ": a line longer than ", kMaxLineBytes,
          " bytes: not an allocation trace (RMM CSV)"));
    }
    if (first == nullptr) {
      run_ = running;
    } else {
      const char* last = first;
      for (const char* q = first; q != nullptr;
           q = static_cast<const char*>(
               std::memchr(q + 1, '\n', static_cast<size_t>(end - q - 1)))) {
        ++lines_;
        last = q;
      }
      run_ = static_cast<size_t>(end - last - 1);
    }
    out_->append(p, n);
    return absl::OkStatus();
  }

 private:
  std::string_view label_;
  std::string* out_;
  size_t max_bytes_;
  size_t lines_ = 0;  // complete lines so far
  size_t run_ = 0;    // bytes of the line not yet ended
};

#if defined(BFC_HAVE_ZLIB)
// Inflates gzip data arriving on `fd`, of which the first `have` bytes are
// already in `in` (so nothing is ever rewound: pipes work). Like gzip -d:
// concatenated members are one stream, zero bytes after the last member are
// padding; anything else after a member is an error. Every member must reach
// its end (Z_STREAM_END, trailer and CRC checked): a stream cut short is an
// error, never a shorter trace.
absl::Status InflateFd(int fd, std::string_view label, std::vector<char>& in,
                       size_t have, size_t max_bytes, std::string* out) {
  z_stream z;
  std::memset(&z, 0, sizeof(z));
  if (inflateInit2(&z, 15 + 16) != Z_OK) {
    return absl::ResourceExhaustedError(
        absl::StrCat(Av(label), ": cannot initialise zlib"));
  }
  struct Cleanup {
    z_stream* z;
    ~Cleanup() { inflateEnd(z); }
  } cleanup{&z};
  std::vector<char> buf(4 * kChunk);
  TextSink text(label, out, max_bytes);
  bool in_member = true;  // inside a gzip member (not between two)
  bool at_eof = false;
  z.next_in = reinterpret_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(have);
  while (true) {
    if (z.avail_in == 0) {
      if (at_eof) break;
      const ssize_t n = ReadSome(fd, in.data(), in.size());
      if (n < 0) return ReadError(label, errno);
      if (n == 0) {
        at_eof = true;
        break;
      }
      z.next_in = reinterpret_cast<Bytef*>(in.data());
      z.avail_in = static_cast<uInt>(n);
    }
    if (!in_member) {
      // Between members: zero padding is skipped, a gzip magic number starts
      // the next member, anything else is not gzip data.
      if (*z.next_in == 0) {
        ++z.next_in;
        --z.avail_in;
        continue;
      }
      if (*z.next_in != kGzipMagic[0]) {
        return absl::DataLossError(
            absl::StrCat(Av(label),
                         ": corrupt gzip data: bytes after the end of the "
                         "compressed stream are not another gzip member"));
      }
      if (inflateReset(&z) != Z_OK) {
        return absl::InternalError(
            absl::StrCat(Av(label), ": cannot reset zlib"));
      }
      in_member = true;
    }
    z.next_out = reinterpret_cast<Bytef*>(buf.data());
    z.avail_out = static_cast<uInt>(buf.size());
    const int ret = inflate(&z, Z_NO_FLUSH);
    if (absl::Status s = text.Append(buf.data(), buf.size() - z.avail_out);
        !s.ok()) {
      return s;
    }
    if (ret == Z_STREAM_END) {
      in_member = false;
    } else if (ret == Z_MEM_ERROR) {
      return absl::ResourceExhaustedError(
          absl::StrCat(Av(label), ": out of memory while decompressing"));
    } else if (ret != Z_OK && !(ret == Z_BUF_ERROR && z.avail_in == 0)) {
      return absl::DataLossError(absl::StrCat(
          Av(label),
          ": corrupt gzip data: ", z.msg != nullptr ? z.msg : zError(ret)));
    }
  }
  if (in_member) {
    return absl::DataLossError(absl::StrCat(
        Av(label),
        ": truncated gzip data: the compressed stream ends before its end "
        "marker and checksum (gzip -t rejects it); the file is incomplete"));
  }
  return absl::OkStatus();
}
#endif  // BFC_HAVE_ZLIB

// Reads all of `fd` into `out`: plain text as is, gzip (recognised by its
// first two bytes, whatever the name) decompressed. `size_hint`: the file's
// size when known, else 0.
absl::Status ReadAll(int fd, std::string_view label, size_t size_hint,
                     size_t max_bytes, std::string* out) {
  std::vector<char> in(kChunk);
  // The first two bytes decide; a read may return fewer.
  size_t have = 0;
  while (have < 2) {
    const ssize_t n = ReadSome(fd, in.data() + have, in.size() - have);
    if (n < 0) return ReadError(label, errno);
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  if (have >= 2 && IsGzipMagic(in.data())) {
#if defined(BFC_HAVE_ZLIB)
    return InflateFd(fd, label, in, have, max_bytes, out);
#else
    return absl::UnimplementedError(
        absl::StrCat(Av(label),
                     ": is gzip-compressed, but bfc was built without zlib; "
                     "gunzip it first"));
#endif
  }
  if (size_hint > max_bytes) return TextTooLarge(label, max_bytes);
  if (size_hint > 0) out->reserve(size_hint);
  TextSink text(label, out, max_bytes);
  if (absl::Status s = text.Append(in.data(), have); !s.ok()) return s;
  while (true) {
    const ssize_t n = ReadSome(fd, in.data(), in.size());
    if (n < 0) return ReadError(label, errno);
    if (n == 0) return absl::OkStatus();
    if (absl::Status s = text.Append(in.data(), static_cast<size_t>(n));
        !s.ok()) {
      return s;
    }
  }
}

absl::Status TooLarge(std::string_view label) {
  return absl::ResourceExhaustedError(
      absl::StrCat(Av(label), ": the trace does not fit in memory"));
}

// Reads and parses the trace on `fd`, turning the exceptions of a trace too
// large for memory into a status (nothing escapes the library).
absl::StatusOr<Trace> ReadAndParse(int fd, std::string name,
                                   std::string_view label, size_t size_hint,
                                   size_t max_bytes) {
  try {
    std::string text;
    absl::Status status = ReadAll(fd, label, size_hint, max_bytes, &text);
    if (!status.ok()) return status;
    return ParseTraceImpl(text, std::move(name), label);
  } catch (const std::bad_alloc&) {
    return TooLarge(label);
  } catch (const std::length_error&) {
    return TooLarge(label);
  }
}

}  // namespace

absl::StatusOr<Trace> ParseTrace(std::string_view csv, std::string name) {
  std::string label = name.empty() ? std::string("<trace>") : name;
  try {
    return ParseTraceImpl(csv, std::move(name), label);
  } catch (const std::bad_alloc&) {
    return TooLarge(label);
  } catch (const std::length_error&) {
    return TooLarge(label);
  }
}

absl::StatusOr<Trace> ReadTrace(const std::string& path) {
  return ReadTrace(path, ReadTraceOptions());
}

absl::StatusOr<Trace> ReadTrace(const std::string& path,
                                const ReadTraceOptions& options) {
  const size_t max_bytes = options.max_text_bytes != 0 ? options.max_text_bytes
                                                       : DefaultMaxTextBytes();
  if (path == kStandardInputPath) {
    return ReadAndParse(STDIN_FILENO, "stdin", "standard input", 0, max_bytes);
  }
  int fd;
  do {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  // Asked of the open file, not of the name, so the answer is about what
  // is read. A directory opens, but reading it fails (or, on some file
  // systems, yields its entries).
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a directory, not a trace file"));
  }
  // Pipes, FIFOs, /dev/stdin and character devices are read as streams.
  const size_t size_hint = S_ISREG(st.st_mode) && st.st_size > 0
                               ? static_cast<size_t>(st.st_size)
                               : 0;
  return ReadAndParse(fd, TraceNameFromPath(path), path, size_hint, max_bytes);
}

absl::StatusOr<CompiledTrace> CompileTrace(const Trace& trace,
                                           const CompileOptions& options) {
  CompiledTrace out;
  out.name = trace.name;
  const std::string& where = trace.source.empty() ? trace.name : trace.source;
  out.num_events = trace.events.size();
  out.ops.reserve(trace.events.size());

  // Original pointer -> slot of the live allocation. Slots are recycled LIFO
  // so the replay's slot table stays as small as the peak live count.
  struct Live {
    uint32_t slot;
    size_t line;
  };
  absl::flat_hash_map<uint64_t, Live> live;
  std::vector<uint32_t> free_slots;
  std::vector<size_t> slot_size;
  // Live bytes, requested and rounded up to the allocator's granule (what a
  // BFC pool must hold at least). Sums and round-ups are checked: a trace
  // whose sizes would wrap them is refused, never summarised as a small one.
  size_t live_bytes = 0;
  size_t live_rounded = 0;

  absl::flat_hash_map<uint64_t, uint16_t> stream_index{{0, 0}};
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    auto [stream_it, new_stream] = stream_index.try_emplace(
        e.stream, static_cast<uint16_t>(out.streams.size()));
    if (new_stream) {
      if (out.streams.size() > UINT16_MAX) {
        // streams[0] is stream 0 whether or not the trace uses it.
        return absl::ResourceExhaustedError(absl::StrCat(
            where, ":", e.line,
            ": more than 65535 distinct streams besides stream 0"));
      }
      out.streams.push_back(e.stream);
    }
    const uint16_t stream = stream_it->second;
    switch (e.action) {
      case TraceEvent::Action::kAllocateFailure:
        ++out.num_failure_rows;
        break;
      case TraceEvent::Action::kAllocate: {
        uint32_t slot;
        if (!free_slots.empty()) {
          slot = free_slots.back();
          free_slots.pop_back();
        } else {
          if (slot_size.size() >= UINT32_MAX) {
            return absl::ResourceExhaustedError(absl::StrCat(
                where, ":", e.line, ": more than 2^32-1 live allocations"));
          }
          slot = static_cast<uint32_t>(slot_size.size());
          slot_size.push_back(0);
        }
        auto [it, inserted] = live.try_emplace(e.pointer, Live{slot, e.line});
        if (!inserted) {
          // A second allocate of a live address means the trace lost a free;
          // replaying it would silently leak, so say where both came from.
          return absl::InvalidArgumentError(bfc::internal::Format(
              "%s:%d: allocate of 0x%x, which is still live "
              "(allocated at line %d and "
              "never freed)",
              where, e.line, e.pointer, it->second.line));
        }
        size_t rounded;
        if (!internal::RoundUp(e.size, kMinAllocationSize, &rounded)) {
          return absl::InvalidArgumentError(bfc::internal::Format(
              "%s:%d: allocate of %d bytes: the Size overflows when rounded "
              "up to %d bytes; no allocator can serve it",
              where, e.line, e.size, kMinAllocationSize));
        }
        if (live_rounded > SIZE_MAX - rounded) {
          return absl::InvalidArgumentError(bfc::internal::Format(
              "%s:%d: allocate of %d bytes: the live allocations would "
              "exceed 2^64-1 bytes (the address space)",
              where, e.line, e.size));
        }
        slot_size[slot] = e.size;
        live_bytes += e.size;  // <= live_rounded: cannot wrap either
        live_rounded += rounded;
        out.peak_live_bytes = std::max(out.peak_live_bytes, live_bytes);
        out.peak_live_rounded_bytes =
            std::max(out.peak_live_rounded_bytes, live_rounded);
        out.ops.push_back(
            ReplayOp{ReplayOp::Kind::kAllocate, stream, slot, e.size, i});
        break;
      }
      case TraceEvent::Action::kFree: {
        auto it = live.find(e.pointer);
        if (it == live.end()) {
          if (options.skip_unknown_frees) {
            ++out.num_unknown_frees;
            break;
          }
          return absl::InvalidArgumentError(bfc::internal::Format(
              "%s:%d: free of 0x%x, which is not live (never "
              "allocated or already freed); "
              "skip_unknown_frees (bfc-replay: --skip-unknown-frees) "
              "ignores such frees",
              where, e.line, e.pointer));
        }
        uint32_t slot = it->second.slot;
        live.erase(it);
        const size_t size = slot_size[slot];
        live_bytes -= size;
        live_rounded -= internal::AlignUp(size, kMinAllocationSize);
        free_slots.push_back(slot);
        out.ops.push_back(
            ReplayOp{ReplayOp::Kind::kFree, stream, slot, size, i});
        break;
      }
    }
  }
  out.num_slots = slot_size.size();
  return out;
}

}  // namespace bfc
