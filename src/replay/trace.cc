// Trace reading and compilation.
//
// The parser walks the text once with string_views: no per-line allocation,
// so multi-million-line traces parse at memory bandwidth rather than at
// allocator speed. The events vector is reserved from a newline count first.
#include "bfc/replay/trace.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

// Shortens a field for an error message, so a binary file does not flood the
// terminal.
std::string Quote(std::string_view s) {
  constexpr size_t kMax = 40;
  if (s.size() > kMax) return absl::StrCat("'", Av(s.substr(0, kMax)), "...'");
  return absl::StrCat("'", Av(s), "'");
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

// Time: seconds as a decimal number (our traces), or RMM's wall-clock
// `HH:MM:SS.ffffff`. Only the order of events matters to a replay, so the
// clock form is turned into seconds since midnight.
bool ParseTime(std::string_view s, double* out) {
  if (s.empty()) return false;
  if (s.find(':') == std::string_view::npos) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && end == s.data() + s.size();
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
  if (ec != std::errc() || end != s.data() + s.size()) return false;
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
  // UTF-8 byte order mark, as spreadsheet programs write it.
  if (csv.substr(0, 3) == "\xEF\xBB\xBF") csv.remove_prefix(3);

  trace.events.reserve(
      static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')));

  size_t line_no = 0;
  size_t pos = 0;
  bool saw_header = false;
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
      if (line != kHeader) {
        return LineError(label, line_no,
                         absl::StrCat("expected the header '", Av(kHeader),
                                      "', got ", Quote(line)));
      }
      saw_header = true;
      continue;
    }

    std::string_view f[kNumColumns];
    int n = SplitFields(line, f);
    if (n != kNumColumns) {
      return LineError(label, line_no,
                       absl::StrFormat("expected %d columns (%s), got %d",
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
    } else if (f[2] == "free") {
      e.action = TraceEvent::Action::kFree;
    } else if (f[2] == "allocate failure") {
      e.action = TraceEvent::Action::kAllocateFailure;
    } else {
      return LineError(
          label, line_no,
          absl::StrCat("unknown Action ", Quote(f[2]),
                       " (expected allocate, free or allocate failure)"));
    }
    if (!ParseHex(f[3], &e.pointer)) {
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
    if (!ParseId(f[5], &e.stream)) {
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

absl::Status ReadPlainFile(const std::string& path, std::FILE* f,
                           std::string* out) {
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out->append(buf, n);
  if (std::ferror(f)) {
    return absl::DataLossError(
        absl::StrCat(path, ": read error: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ReadGzipFile(const std::string& path, std::string* out) {
#if defined(BFC_HAVE_ZLIB)
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  gzbuffer(gz, 1 << 17);
  char buf[1 << 16];
  int n;
  while ((n = gzread(gz, buf, sizeof(buf))) > 0)
    out->append(buf, static_cast<size_t>(n));
  absl::Status status;
  if (n < 0) {
    int errnum = 0;
    const char* msg = gzerror(gz, &errnum);
    status = absl::DataLossError(absl::StrCat(
        path, ": corrupt gzip data: ", msg != nullptr ? msg : "unknown error"));
  }
  gzclose(gz);
  return status;
#else
  return absl::UnimplementedError(absl::StrCat(
      path,
      ": is gzip-compressed, but bfc was built without zlib; gunzip it first"));
#endif
}

}  // namespace

absl::StatusOr<Trace> ParseTrace(std::string_view csv, std::string name) {
  std::string label = name.empty() ? std::string("<trace>") : name;
  return ParseTraceImpl(csv, std::move(name), label);
}

absl::StatusOr<Trace> ReadTrace(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  unsigned char magic[2] = {0, 0};
  size_t got = std::fread(magic, 1, 2, f);
  bool gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  std::string text;
  absl::Status status;
  if (gzip) {
    std::fclose(f);
    status = ReadGzipFile(path, &text);
  } else {
    std::fseek(f, 0, SEEK_END);
    long size = std::ftell(f);
    if (size > 0) text.reserve(static_cast<size_t>(size));
    std::rewind(f);
    status = ReadPlainFile(path, f, &text);
    std::fclose(f);
  }
  if (!status.ok()) return status;
  return ParseTraceImpl(text, TraceNameFromPath(path), path);
}

absl::StatusOr<CompiledTrace> CompileTrace(const Trace& trace,
                                           const CompileOptions& options) {
  CompiledTrace out;
  out.name = trace.name;
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
  size_t live_bytes = 0;
  size_t live_rounded = 0;
  auto round = [](size_t n) { return (n + 255) & ~size_t{255}; };

  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
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
            return absl::ResourceExhaustedError(
                absl::StrCat(trace.name, ":", e.line,
                             ": more than 2^32-1 live allocations"));
          }
          slot = static_cast<uint32_t>(slot_size.size());
          slot_size.push_back(0);
        }
        auto [it, inserted] = live.try_emplace(e.pointer, Live{slot, e.line});
        if (!inserted) {
          // A second allocate of a live address means the trace lost a free;
          // replaying it would silently leak, so say where both came from.
          return absl::InvalidArgumentError(
              absl::StrFormat("%s:%d: allocate of 0x%x, which is still live "
                              "(allocated at line %d and "
                              "never freed)",
                              trace.name, e.line, e.pointer, it->second.line));
        }
        slot_size[slot] = e.size;
        live_bytes += e.size;
        live_rounded += round(e.size);
        out.peak_live_bytes = std::max(out.peak_live_bytes, live_bytes);
        out.peak_live_rounded_bytes =
            std::max(out.peak_live_rounded_bytes, live_rounded);
        out.ops.push_back(ReplayOp{ReplayOp::Kind::kAllocate, slot, e.size, i});
        break;
      }
      case TraceEvent::Action::kFree: {
        auto it = live.find(e.pointer);
        if (it == live.end()) {
          if (options.skip_unknown_frees) {
            ++out.num_unknown_frees;
            break;
          }
          return absl::InvalidArgumentError(
              absl::StrFormat("%s:%d: free of 0x%x, which is not live (never "
                              "allocated or already freed); "
                              "use skip_unknown_frees to ignore such frees",
                              trace.name, e.line, e.pointer));
        }
        uint32_t slot = it->second.slot;
        live.erase(it);
        size_t size = slot_size[slot];
        live_bytes -= size;
        live_rounded -= round(size);
        free_slots.push_back(slot);
        out.ops.push_back(ReplayOp{ReplayOp::Kind::kFree, slot, size, i});
        break;
      }
    }
  }
  out.num_slots = slot_size.size();
  return out;
}

}  // namespace bfc
