// File: src/core/mutex.cc
// The futex calls and the slow paths of bfc::internal::Mutex and CondVar.
#include "bfc/internal/mutex.h"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "absl/time/clock.h"

namespace bfc::internal {
namespace {

// A sleeper looks again at least this often, woken or not. The flag
// protocol (see Mutex) leaves one window: an Unlock whose wake finds nobody
// asleep yet (the sleeper is between its count and its futex call) puts the
// flag back up, and another Unlock can come and go before it does. Without
// membarrier every Unlock racing a new sleeper is such a window. The timed
// sleep bounds what a missed wake-up costs, at the price of a sleeper waking
// 1,000 times a second behind a long hold.
constexpr int64_t kMaxSleepNs = 1000000;
std::atomic<int64_t> max_sleep_ns{kMaxSleepNs};

}  // namespace

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

int FutexWake(std::atomic<uint32_t>* word, int count) {
  const long woken =  // NOLINT(runtime/int): syscall's type
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE,
              count, nullptr, nullptr, 0);
  return woken > 0 ? static_cast<int>(woken) : 0;
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
  // Once woken, this thread has the duty of waking the rest (see
  // contended_): whichever way it then takes the lock, it raises the flag
  // while others sleep.
  bool woken = false;
  auto took = [&] {
    if (woken && sleepers_.load(std::memory_order_seq_cst) != 0) {
      contended_.store(1, std::memory_order_relaxed);
    }
  };
  for (;;) {
    int backoff = 1;
    for (int i = 0; i < kSpinRounds; ++i) {
      uint32_t expected = 0;
      if (state_.load(std::memory_order_relaxed) == 0 &&
          state_.compare_exchange_weak(expected, 1, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        took();
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
    // Counted and flagged first, then the asymmetric fence: from here on
    // every Unlock either sees the flag (and wakes a sleeper) or has
    // published its 0, which the compare-and-swap below then sees.
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    contended_.store(1, std::memory_order_seq_cst);
    (void)AsymmetricFence();  // without it, only the timed sleep protects
    uint32_t expected = 0;
    const bool locked = state_.compare_exchange_strong(
        expected, 1, std::memory_order_acquire, std::memory_order_relaxed);
    if (!locked) {
      // Sleeps only while the word is still 1 (the futex compares first).
      FutexWait(&state_, 1, max_sleep_ns.load(std::memory_order_relaxed));
      // Woken (or timed out): the Unlock that woke this thread cleared the
      // flag and handed it the duty. Spin again: the lock has usually moved
      // on.
      woken = true;
    }
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    if (locked) {
      took();
      return;
    }
  }
}

void SetMutexMaxSleepForTesting(int64_t ns) {
  max_sleep_ns.store(ns < 0 ? kMaxSleepNs : ns, std::memory_order_relaxed);
}

void Mutex::WakeOne() {
  // Sequentially consistent, so that the thread this wakes counts every
  // sleeper whose flag this clears (see took() in LockSlow).
  contended_.store(0, std::memory_order_seq_cst);
  // The futex call orders this against the sleepers (it takes a lock in the
  // kernel). A thread counted but not asleep yet is not woken: the flag goes
  // back up so that the next Unlock tries again.
  if (FutexWake(&state_, 1) == 0 &&
      sleepers_.load(std::memory_order_seq_cst) != 0) {
    contended_.store(1, std::memory_order_seq_cst);
  }
}

bool AsymmetricFence() {
  // Registration is per process, once; a process that cannot (ENOSYS,
  // EINVAL, a seccomp filter) or a child that lost it (EPERM) tries again
  // here, and without it the callers poll.
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) {
    return true;
  }
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0,
                 0) == 0 &&
         syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
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
