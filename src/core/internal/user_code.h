// File: src/core/internal/user_code.h
// -----------------------------------------------------------------------------
//
// The library's noexcept boundary toward code it calls: SubAllocator and
// StreamOps methods, visitors, log sinks, callbacks (README, "Guarantees":
// nothing thrown below the library leaves it). Private to the core (not
// installed).
#ifndef BFC_CORE_INTERNAL_USER_CODE_H_
#define BFC_CORE_INTERNAL_USER_CODE_H_

#include <cstddef>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "bfc/internal/log_queue.h"

namespace bfc::internal {

// Runs `f`; what it throws becomes false and *what (its what(), or a
// description of a throw that is not a std::exception).
template <typename F>
bool CallUserCode(F&& f, std::string* what) {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    try {
      *what = e.what();
    } catch (...) {
      what->clear();  // no memory for the message: the failure still counts
    }
  } catch (...) {
    try {
      *what = "an exception that is not a std::exception";
    } catch (...) {
      what->clear();
    }
  }
  return false;
}

// CallUserCode for a call made under an allocator's lock: what the user code
// logs through bfc::Log is appended to `queue`, the allocator's own, and sent
// with its messages once the lock is released (so the sink runs unlocked).
template <typename F>
bool CallUserCodeDeferringLogs(LogQueue* queue, F&& f, std::string* what) {
  ScopedLogDeferral defer(queue);
  return CallUserCode(std::forward<F>(f), what);
}

// Whether the host can give `bytes` now. Reports about a failure are built
// only then: a report started without memory fails half-built and is lost
// anyway, so the out-of-memory path skips it and stays short. (A report that
// runs out of memory regardless, because another thread took the memory,
// fails cleanly: the library formats with internal::Format, which throws
// std::bad_alloc, never absl::StrFormat, which ends the process then.)
inline bool HostHasRoomFor(size_t bytes) {
  void* p = ::operator new(bytes, std::nothrow);
  if (p == nullptr) return false;
  ::operator delete(p);
  return true;
}

// ResourceExhausted for a call that found the host out of memory, saying
// `what` needed it when the message itself can be had (else without one:
// an empty message needs no memory).
inline absl::Status NoHostMemoryStatus(const char* what) noexcept {
  if (HostHasRoomFor(1024)) {
    try {
      return absl::ResourceExhaustedError(
          std::string("the host has no memory for ") + what);
    } catch (...) {
    }
  }
  return absl::Status(absl::StatusCode::kResourceExhausted, "");
}

}  // namespace bfc::internal

#endif  // BFC_CORE_INTERNAL_USER_CODE_H_
