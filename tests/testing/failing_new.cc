// File: tests/testing/failing_new.cc
// The replaced global operator new of testing/failing_new.h.
#include "testing/failing_new.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <new>

// The replacements free with std::free what they took with std::malloc; gcc
// cannot see that they pair.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace bfc::testing {

thread_local HostMemory g_host;

namespace {

bool ShouldFail(size_t n) {
  if (!g_host.armed) return false;
  const long k = g_host.count++;
  if ((g_host.fail_size != 0 && n == g_host.fail_size) ||
      (g_host.fail_at >= 0 &&
       (k == g_host.fail_at || (g_host.fail_all && k > g_host.fail_at)))) {
    ++g_host.failed;
    return true;
  }
  return false;
}

}  // namespace
}  // namespace bfc::testing

void* operator new(size_t n) {
  if (bfc::testing::ShouldFail(n)) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  if (bfc::testing::ShouldFail(n)) return nullptr;
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept {
  return operator new(n, t);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

// Making reserved address space usable is how the chunk table takes host
// memory (bfc/internal/chunk.h): such a commit counts, and fails, like an
// allocation of its length (ENOMEM, as under strict overcommit). Other
// protection changes pass through untouched. Defined here, the symbol wins
// over libc's for every call from the test binary and the library in it.
extern "C" int mprotect(void* addr, size_t len, int prot) noexcept {
  if ((prot & PROT_WRITE) != 0 && bfc::testing::ShouldFail(len)) {
    errno = ENOMEM;
    return -1;
  }
  return static_cast<int>(syscall(SYS_mprotect, addr, len, prot));
}
