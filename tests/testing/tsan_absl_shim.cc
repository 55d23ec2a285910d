// File: tests/testing/tsan_absl_shim.cc
// ThreadSanitizer support for a prebuilt (uninstrumented) Abseil.
//
// Debian's libabsl is not built with -fsanitize=thread, so TSan cannot see
// absl::Mutex synchronize anything and would report every access guarded by
// one as a race. Test executables in the `tsan` preset are linked with
// `-Wl,--wrap=<symbol>` for the Mutex/CondVar entry points the library uses
// (tests/CMakeLists.txt computes the mangled names from Abseil's inline
// namespace); these wrappers call the real functions and tell TSan about the
// happens-before edges they create: acquire after a lock, release before an
// unlock, both around a condition-variable wait (which unlocks and relocks).
// Nothing else changes, so a real race on data outside the mutex, or one
// the library forgot to lock, is still reported.
#include <sanitizer/tsan_interface.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#define BFC_CAT_(a, b) a##b
#define BFC_CAT(a, b) BFC_CAT_(a, b)
#define WRAP(sym) BFC_CAT(__wrap_, sym)
#define REAL(sym) BFC_CAT(__real_, sym)

extern "C" {
void REAL(BFC_SYM_MUTEX_LOCK)(absl::Mutex* mu);
void REAL(BFC_SYM_MUTEX_UNLOCK)(absl::Mutex* mu);
bool REAL(BFC_SYM_MUTEX_TRYLOCK)(absl::Mutex* mu);
void REAL(BFC_SYM_MUTEX_READERLOCK)(absl::Mutex* mu);
void REAL(BFC_SYM_MUTEX_READERUNLOCK)(absl::Mutex* mu);
void REAL(BFC_SYM_CONDVAR_WAIT)(absl::CondVar* cv, absl::Mutex* mu);
bool REAL(BFC_SYM_CONDVAR_WAITWITHTIMEOUT)(absl::CondVar* cv, absl::Mutex* mu,
                                           absl::Duration timeout);
bool REAL(BFC_SYM_CONDVAR_WAITWITHDEADLINE)(absl::CondVar* cv, absl::Mutex* mu,
                                            absl::Time deadline);

void WRAP(BFC_SYM_MUTEX_LOCK)(absl::Mutex* mu) {
  REAL(BFC_SYM_MUTEX_LOCK)(mu);
  __tsan_acquire(mu);
}
void WRAP(BFC_SYM_MUTEX_UNLOCK)(absl::Mutex* mu) {
  __tsan_release(mu);
  REAL(BFC_SYM_MUTEX_UNLOCK)(mu);
}
bool WRAP(BFC_SYM_MUTEX_TRYLOCK)(absl::Mutex* mu) {
  const bool locked = REAL(BFC_SYM_MUTEX_TRYLOCK)(mu);
  if (locked) __tsan_acquire(mu);
  return locked;
}
void WRAP(BFC_SYM_MUTEX_READERLOCK)(absl::Mutex* mu) {
  REAL(BFC_SYM_MUTEX_READERLOCK)(mu);
  __tsan_acquire(mu);
}
void WRAP(BFC_SYM_MUTEX_READERUNLOCK)(absl::Mutex* mu) {
  __tsan_release(mu);
  REAL(BFC_SYM_MUTEX_READERUNLOCK)(mu);
}
void WRAP(BFC_SYM_CONDVAR_WAIT)(absl::CondVar* cv, absl::Mutex* mu) {
  __tsan_release(mu);
  REAL(BFC_SYM_CONDVAR_WAIT)(cv, mu);
  __tsan_acquire(mu);
}
bool WRAP(BFC_SYM_CONDVAR_WAITWITHTIMEOUT)(absl::CondVar* cv, absl::Mutex* mu,
                                           absl::Duration timeout) {
  __tsan_release(mu);
  const bool timed_out = REAL(BFC_SYM_CONDVAR_WAITWITHTIMEOUT)(cv, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}
bool WRAP(BFC_SYM_CONDVAR_WAITWITHDEADLINE)(absl::CondVar* cv, absl::Mutex* mu,
                                            absl::Time deadline) {
  __tsan_release(mu);
  const bool timed_out =
      REAL(BFC_SYM_CONDVAR_WAITWITHDEADLINE)(cv, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}
}  // extern "C"
