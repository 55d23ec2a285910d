// File: tests/fuzz/parsers/fuzz_support.h
// -----------------------------------------------------------------------------
//
// What the parser fuzzers share: a silent log, and an anonymous in-memory
// file for the readers that take a path.
#ifndef BFC_TESTS_FUZZ_PARSERS_FUZZ_SUPPORT_H_
#define BFC_TESTS_FUZZ_PARSERS_FUZZ_SUPPORT_H_

#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "bfc/log.h"

namespace bfc::fuzz {

// Silences bfc's log for the rest of the process, once: out-of-memory
// reports from replays would flood libFuzzer's output (a crash still prints
// its sanitizer report).
inline void SilenceLogs() {
  static const bool silenced = [] {
    SetLogSink([](LogSeverity, std::string_view) {});
    return true;
  }();
  (void)silenced;
}

// An anonymous in-memory file the readers under test open by path
// (/proc/self/fd/N): they take paths, not buffers, and a fuzzer runs too
// often to use the disk.

class MemfdPath {
 public:
  explicit MemfdPath(const char* name) : fd_(memfd_create(name, 0)) {
    if (fd_ < 0) {
      perror("memfd_create");
      abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  MemfdPath(const MemfdPath&) = delete;
  MemfdPath& operator=(const MemfdPath&) = delete;
  ~MemfdPath() { close(fd_); }

  // Replaces the file's contents with [data, data + size); returns its path.
  const std::string& Write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0) abort();
    for (size_t off = 0; off < size;) {
      const ssize_t n =
          pwrite(fd_, data + off, size - off, static_cast<off_t>(off));
      if (n <= 0) abort();
      off += static_cast<size_t>(n);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace bfc::fuzz

#endif  // BFC_TESTS_FUZZ_PARSERS_FUZZ_SUPPORT_H_
