// File: src/core/mutex.cc
// The futex calls and the slow paths of bfc::internal::Mutex and CondVar.
#include "bfc/internal/mutex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "absl/time/clock.h"

namespace bfc::internal {

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
               int64_t timeout_ns) {
  struct timespec ts;
  struct timespec* tp = nullptr;
  if (timeout_ns >= 0) {
    ts.tv_sec = static_cast<time_t>(timeout_ns / 1000000000);
    ts.tv_nsec = static_cast<long>(timeout_ns % 1000000000);  // NOLINT
    tp = &ts;
  }
  // Relative timeout on CLOCK_MONOTONIC. EAGAIN (the word changed), EINTR
  // and ETIMEDOUT all mean "look again"; the callers loop.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE,
          expected, tp, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE,
          count, nullptr, nullptr, 0);
}

void Mutex::LockSlow() {
  // A holder usually leaves within tens of nanoseconds (one allocator
  // operation), so spin before sleeping, but back off between looks: each
  // look pulls the lock's cache line away from the holder, and under steady
  // contention a holder left alone runs several operations with its lines
  // in its own cache. One pause, then 2, 4, ... up to kMaxBackoff between
  // looks, kSpinRounds looks in all (about 2,200 pauses: ~50 us where a
  // pause is ~22 ns, as on the AMD EPYC of bench/README.md; Intel since
  // Skylake is in the same range), then sleep. Against a look after every
  // pause (100 looks, ~2 us), BM_TraceThreads (every trace warm on one pool)
  // went from 11-13 to 16-28 Mops/s at 2 threads and from 11-12 to 18-29 at
  // 8 threads on 2 cores; one thread is unchanged (the uncontended path does
  // not come here).
  constexpr int kMaxBackoff = 64;
  constexpr int kSpinRounds = 40;
  int backoff = 1;
  for (int i = 0; i < kSpinRounds; ++i) {
    uint32_t expected = 0;
    if (state_.load(std::memory_order_relaxed) == 0 &&
        state_.compare_exchange_weak(expected, 1, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
      return;
    }
    for (int p = 0; p < backoff; ++p) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield");
#endif
    }
    if (backoff < kMaxBackoff) backoff *= 2;
  }
  // Mark the lock contended (2) so the holder's Unlock wakes a sleeper.
  while (state_.exchange(2, std::memory_order_acquire) != 0) {
    FutexWait(&state_, 2, -1);
  }
}

void CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  // For TSan a wait is an unlock of `mu` followed by a lock of it: the
  // happens-before edges come from `mu` alone. The unlock annotation spans
  // the sleep, so the sequence number's atomics (ignored inside it) add no
  // edge of their own.
  BFC_INTERNAL_TSAN_MUTEX_PRE_UNLOCK(mu);
  // Read before unlocking: a SignalAll under `mu` after the unlock changes
  // the number, and the futex then refuses to sleep.
  const uint32_t seq = seq_.load(std::memory_order_acquire);
  const absl::Duration left = deadline - absl::Now();
  mu->RawUnlock();
  if (left > absl::ZeroDuration()) {
    FutexWait(
        &seq_, seq,
        left == absl::InfiniteDuration() ? -1 : absl::ToInt64Nanoseconds(left));
  }
  BFC_INTERNAL_TSAN_MUTEX_POST_UNLOCK(mu);
  BFC_INTERNAL_TSAN_MUTEX_PRE_LOCK(mu);
  mu->RawLock();
  BFC_INTERNAL_TSAN_MUTEX_POST_LOCK(mu);
}

}  // namespace bfc::internal
