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
  // A holder usually leaves within a few hundred nanoseconds (one allocator
  // operation): spin briefly before sleeping.
  for (int i = 0; i < 100; ++i) {
    uint32_t expected = 0;
    if (state_.load(std::memory_order_relaxed) == 0 &&
        state_.compare_exchange_weak(expected, 1, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
      return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
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
