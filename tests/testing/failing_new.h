// File: tests/testing/failing_new.h
// -----------------------------------------------------------------------------
//
// The host running out of memory on demand. A test binary that links
// testing/failing_new.cc has its global operator new (and new[], nothrow
// forms too) replaced: while `g_host.armed` is set on a thread, that thread's
// allocations are counted, and one fails (std::bad_alloc, or nullptr for the
// nothrow forms) when
//   * its size is `fail_size` (0: off), or
//   * it is number `fail_at` counted since arming (-1: off), or any after it
//     with `fail_all`.
// Other threads are never affected. A call to mprotect that makes memory
// writable (the chunk table committing a block of its reserved range) is
// counted and refused (ENOMEM) by the same rules, by its length. Not for the
// tsan preset, whose runtime defines operator new itself.
#ifndef BFC_TESTS_TESTING_FAILING_NEW_H_
#define BFC_TESTS_TESTING_FAILING_NEW_H_

#include <cstddef>

namespace bfc::testing {

struct HostMemory {
  bool armed = false;
  bool fail_all = false;  // with fail_at: every allocation from it on
  size_t fail_size = 0;   // 0: off
  long fail_at = -1;      // -1: off
  long count = 0;         // allocations while armed
  long failed = 0;        // allocations refused
};

// This thread's state; reset it with `g_host = HostMemory()`.
extern thread_local HostMemory g_host;

// Arms this thread for a scope (one allocator call, say).
class Armed {
 public:
  Armed() { g_host.armed = true; }
  ~Armed() { g_host.armed = false; }
  Armed(const Armed&) = delete;
  Armed& operator=(const Armed&) = delete;
};

// Disarms this thread for a scope inside an armed one (the test's own
// checks), restoring what was there.
class Disarmed {
 public:
  Disarmed() : was_(g_host.armed) { g_host.armed = false; }
  ~Disarmed() { g_host.armed = was_; }
  Disarmed(const Disarmed&) = delete;
  Disarmed& operator=(const Disarmed&) = delete;

 private:
  bool was_;
};

}  // namespace bfc::testing

#endif  // BFC_TESTS_TESTING_FAILING_NEW_H_
