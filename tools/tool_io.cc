// File: tools/tool_io.cc
// Atomic output files, same-file checks and trace inputs for the tools.
#include "tool_io.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace bfc::tools {
namespace {

constexpr char kRmmHeader[] = "Thread,Time,Action";

// --- the temporary file of WriteFileAtomically, for the signal handler ------

// The handler may only use async-signal-safe calls: the path lives in a
// fixed buffer, set before and cleared after the handlers are installed.
char g_temp_path[PATH_MAX];
volatile std::sig_atomic_t g_temp_active = 0;

constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void RemoveTempAndReraise(int sig) {
  if (g_temp_active) unlink(g_temp_path);
  signal(sig, SIG_DFL);
  raise(sig);
}

// Owns the temporary file: removes it unless Release()d, and removes it on a
// terminating signal while it exists.
class TempFile {
 public:
  explicit TempFile(const std::string& path) {
    std::snprintf(g_temp_path, sizeof(g_temp_path), "%s", path.c_str());
    g_temp_active = 1;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = RemoveTempAndReraise;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < std::size(kCleanupSignals); ++i) {
      sigaction(kCleanupSignals[i], nullptr, &old_[i]);
      // A signal the caller ignores (nohup) stays ignored.
      if (old_[i].sa_handler != SIG_IGN) {
        sigaction(kCleanupSignals[i], &sa, nullptr);
      }
    }
  }
  ~TempFile() {
    if (g_temp_active) unlink(g_temp_path);
    g_temp_active = 0;
    for (size_t i = 0; i < std::size(kCleanupSignals); ++i) {
      sigaction(kCleanupSignals[i], &old_[i], nullptr);
    }
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  // The file was renamed into place: nothing to remove.
  void Release() { g_temp_active = 0; }

 private:
  struct sigaction old_[std::size(kCleanupSignals)];
};

absl::Status ErrnoError(int errnum, absl::string_view what) {
  return absl::ErrnoToStatus(errnum, what);
}

std::pair<std::string, std::string> SplitDirBase(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  if (slash == 0) return {"/", path.substr(1)};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

bool EndsWithAny(absl::string_view s,
                 std::initializer_list<const char*> tails) {
  for (const char* t : tails) {
    if (absl::EndsWithIgnoreCase(s, t)) return true;
  }
  return false;
}

absl::Status WriteAll(int fd, absl::string_view contents) {
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    const ssize_t n = write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "cannot write");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// `path` with a final symlink that leads to nothing (yet) followed to where
// it points: writing to it creates that file. At most 40 links, as the
// kernel allows.
std::string FollowDanglingLinks(std::string path) {
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode) ||
        stat(path.c_str(), &st) == 0) {
      break;
    }
    char buf[PATH_MAX];
    const ssize_t n = readlink(path.c_str(), buf, sizeof(buf) - 1);
    if (n <= 0) break;
    const std::string to(buf, static_cast<size_t>(n));
    path = to[0] == '/' ? to : absl::StrCat(SplitDirBase(path).first, "/", to);
  }
  return path;
}

absl::Status WriteInPlace(const std::string& path, const std::string& target,
                          absl::string_view contents) {
  const int fd = open(target.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, absl::StrCat(path, ": cannot open"));
  absl::Status s = WriteAll(fd, contents);
  if (close(fd) != 0 && s.ok()) s = ErrnoError(errno, "cannot write");
  if (!s.ok())
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  return absl::OkStatus();
}

}  // namespace

// The descriptor a path names when it is one of this process's own (/dev/
// stdout, /dev/stderr, /dev/stdin, /dev/fd/N, /proc/self/fd/N), else -1.
// Such a path is a view of an open descriptor: resolved, it names whatever
// the descriptor was opened on (a regular file when the shell redirected
// it), which must be written through the descriptor -- at its offset, with
// its O_APPEND -- not replaced.
int OwnDescriptor(const std::string& path) {
  if (path == "/dev/stdin") return 0;
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (absl::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    int fd = -1;
    if (absl::StartsWith(path, prefix) &&
        absl::SimpleAtoi(absl::string_view(path).substr(prefix.size()), &fd) &&
        fd >= 0) {
      return fd;
    }
  }
  return -1;
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents) {
  if (const int fd = OwnDescriptor(path); fd >= 0) {
    // After what the program already printed there.
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    if (absl::Status s = WriteAll(fd, contents); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
    }
    return absl::OkStatus();
  }
  // Write through a symlink rather than replace it; one that leads nowhere
  // yet creates its target.
  std::string target = path;
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char resolved[PATH_MAX];
    target = realpath(path.c_str(), resolved) != nullptr
                 ? std::string(resolved)
                 : FollowDanglingLinks(path);
  }
  mode_t mode;
  if (stat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": is a directory"));
    }
    // The rename below needs only the directory's permission: a file the
    // user may not write is refused, not replaced.
    if (access(target.c_str(), W_OK) != 0) {
      return ErrnoError(errno, absl::StrCat(path, ": cannot write"));
    }
    // A device or a pipe (/dev/null, /dev/stdout, a FIFO) is written to,
    // never replaced: renaming over it would put a regular file in its place.
    if (!S_ISREG(st.st_mode)) return WriteInPlace(path, target, contents);
    mode = st.st_mode & 07777;
  } else {
    const mode_t mask = umask(0);
    umask(mask);
    mode = 0666 & ~mask;
  }
  const auto [dir, base] = SplitDirBase(target);
  std::string temp = absl::StrCat(dir, "/.", base, ".tmp-XXXXXX");
  const int fd = mkstemp(temp.data());
  if (fd < 0) {
    return ErrnoError(errno, absl::StrCat(path,
                                          ": cannot create a temporary file in "
                                          "its directory ",
                                          dir));
  }
  TempFile guard(temp);
  auto fail = [&](absl::string_view what) {
    const int errnum = errno;
    close(fd);
    return ErrnoError(errnum, absl::StrCat(path, ": ", what));
  };
  if (absl::Status s = WriteAll(fd, contents); !s.ok()) {
    close(fd);
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  if (fchmod(fd, mode) != 0) return fail("cannot set permissions");
  if (fsync(fd) != 0) return fail("cannot flush to disk");
  if (close(fd) != 0) {
    return ErrnoError(errno, absl::StrCat(path, ": cannot write"));
  }
  if (rename(temp.c_str(), target.c_str()) != 0) {
    return ErrnoError(
        errno, absl::StrCat(path, ": cannot rename ", temp, " into place"));
  }
  guard.Release();
  return absl::OkStatus();
}

bool LooksLikeTrace(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (EndsWithAny(path, {".csv", ".csv.gz", ".gz"})) return true;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char head[sizeof(kRmmHeader) - 1] = {};
  const size_t got = std::fread(head, 1, sizeof(head), f);
  std::fclose(f);
  const absl::string_view h(head, got);
  return (got >= 2 && static_cast<unsigned char>(head[0]) == 0x1f &&
          static_cast<unsigned char>(head[1]) == 0x8b) ||
         h == kRmmHeader;
}

std::string CheckOutputPath(const std::string& path, bool stdout_ok) {
  if (path.empty()) return "an output path is needed";
  if (path == kStdioPath) {
    return stdout_ok ? "" : "'-' (standard output) is not accepted here";
  }
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return absl::StrCat("'", path, "' is a directory; name a file");
    }
    if (LooksLikeTrace(path)) {
      return absl::StrCat("refusing to write over '", path,
                          "': it looks like an input trace (was the output "
                          "name forgotten after its flag?)");
    }
    if (access(path.c_str(), W_OK) != 0) {
      return absl::StrCat("'", path,
                          "' is not writable: ", std::strerror(errno));
    }
    return "";
  }
  const std::string dir = SplitDirBase(path).first;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::StrCat("directory '", dir, "' does not exist");
  }
  return "";
}

std::string NormalizePath(const std::string& path) {
  std::string abs = path;
  if (abs.empty() || abs[0] != '/') {
    char cwd[PATH_MAX];
    abs = absl::StrCat(getcwd(cwd, sizeof(cwd)) != nullptr ? cwd : ".", "/",
                       path);
  }
  std::vector<std::string> parts = absl::StrSplit(abs, '/', absl::SkipEmpty());
  // The longest prefix that exists, resolved through symlinks; the rest
  // lexically.
  std::string resolved = "/";
  size_t i = parts.size();
  for (; i > 0; --i) {
    const std::string prefix =
        "/" + absl::StrJoin(parts.begin(), parts.begin() + i, "/");
    char buf[PATH_MAX];
    if (realpath(prefix.c_str(), buf) != nullptr) {
      resolved = buf;
      break;
    }
  }
  std::vector<std::string> out =
      absl::StrSplit(resolved, '/', absl::SkipEmpty());
  for (; i < parts.size(); ++i) {
    if (parts[i] == ".") continue;
    if (parts[i] == "..") {
      if (!out.empty()) out.pop_back();
      continue;
    }
    out.push_back(parts[i]);
  }
  return "/" + absl::StrJoin(out, "/");
}

namespace {

// stat() of what `path` names; "-" is standard input (`input`) or output.
bool StatNamed(const std::string& path, bool input, struct stat* st) {
  if (path == kStdioPath) return fstat(input ? 0 : 1, st) == 0;
  return stat(path.c_str(), st) == 0;
}

// Whether two paths name the same file; "-" is stdin for an input, stdout
// for an output.
bool SameNamedFile(const std::string& a, bool a_input, const std::string& b,
                   bool b_input) {
  struct stat sa, sb;
  const bool a_exists = StatNamed(a, a_input, &sa);
  const bool b_exists = StatNamed(b, b_input, &sb);
  if (a_exists && b_exists) {
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  }
  if (a == kStdioPath || b == kStdioPath) return false;
  return NormalizePath(FollowDanglingLinks(a)) ==
         NormalizePath(FollowDanglingLinks(b));
}

}  // namespace

bool SameFile(const std::string& a, const std::string& b) {
  return SameNamedFile(a, /*a_input=*/false, b, /*b_input=*/false);
}

absl::Status CheckDistinctPaths(const std::vector<NamedPath>& inputs,
                                const std::vector<NamedPath>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    // Standard output goes where the shell sent it: never replaced, and
    // written only after every input was read.
    if (out.path == kStdioPath) continue;
    for (const NamedPath& in : inputs) {
      // "-" is standard input: the file the shell opened on it, if any.
      if (SameNamedFile(out.path, /*a_input=*/false, in.path,
                        /*b_input=*/true)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s '%s' names the input %s '%s'; refusing to write over an "
            "input",
            out.flag, out.path, in.flag, in.path));
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (outputs[j].path == kStdioPath) continue;
      if (SameFile(out.path, outputs[j].path)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s '%s' and %s '%s' name the same file; give each output its own",
            outputs[j].flag, outputs[j].path, out.flag, out.path));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Trace> ReadTraceArg(const std::string& path) {
  // "-" means standard input to ReadTrace as it does to the tools.
  static_assert(std::string_view(kStdioPath) == kStandardInputPath);
  return ReadTrace(path);
}

int FinishStandardOutput(const char* tool, int status) {
  errno = 0;
  if (std::fflush(stdout) == 0 && std::ferror(stdout) == 0) return status;
  const int errnum = errno;
  std::fprintf(stderr, "%s: cannot write to standard output: %s\n", tool,
               errnum != 0 ? std::strerror(errnum) : "write error");
  // 1 and 2 say more about the run than the write does; 0 and 3 (failed
  // allocations) would claim a report that never arrived.
  return status == 1 || status == 2 ? status : 1;
}

std::string ExecutableDir() {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "";
  exe[n] = '\0';
  return SplitDirBase(exe).first;
}

std::string ForTerminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto escape = [&out](unsigned char c) {
    absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      escape(c);
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      escape(c);
      escape(static_cast<unsigned char>(text[++i]));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

bool RowProgress::Update(size_t row, size_t rows, absl::Time now,
                         int64_t* seconds) {
  if (row != row_ || rows != rows_ || drawn_ == absl::InfinitePast()) {
    row_ = row;
    rows_ = rows;
    row_start_ = now;
  } else if (now - drawn_ < absl::Milliseconds(250)) {
    return false;
  }
  drawn_ = now;
  *seconds = absl::ToInt64Seconds(now - row_start_);
  return true;
}

}  // namespace bfc::tools
