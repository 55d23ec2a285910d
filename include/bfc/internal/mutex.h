// File: bfc/internal/mutex.h
// -----------------------------------------------------------------------------
//
// The allocator's lock, behind the clang thread-safety annotations absl::Mutex
// carries.
//
// On Linux it is a three-state futex word (0 free, 1 held, 2 held with
// sleepers; Drepper, "Futexes Are Tricky", mutex 3): an uncontended Lock is
// one compare-and-swap and Unlock one exchange, with a short spin before a
// contended Lock sleeps. The CondVar is a futex sequence number. Why not the
// alternatives:
// - absl::Mutex: Debian's libabsl is built without NDEBUG, so every Lock runs
//   the deadlock detector (GraphCycles::GetId, a thread-local lookup and a
//   hash probe): about a quarter of an uncontended allocate/free pair.
// - std::mutex (pthread_mutex_lock/unlock): ~50 instructions per lock/unlock
//   pair of type checks and bookkeeping, ~13 % of a trace replay's
//   instructions (callgrind, tools/count-instructions.sh).
// Under ThreadSanitizer, and off Linux, it is std::mutex and
// std::condition_variable, which TSan understands.
//
// Internal: not part of the API.
#ifndef BFC_INTERNAL_MUTEX_H_
#define BFC_INTERNAL_MUTEX_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

#if defined(__SANITIZE_THREAD__)
#define BFC_INTERNAL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BFC_INTERNAL_TSAN 1
#endif
#endif

#if defined(__linux__) && !defined(BFC_INTERNAL_TSAN)
#define BFC_INTERNAL_FUTEX_MUTEX 1
#else
#include <condition_variable>
#include <mutex>
#endif

namespace bfc::internal {

#if defined(BFC_INTERNAL_FUTEX_MUTEX)

// Sleeps while *word == expected, until woken or `timeout_ns` (< 0: no limit)
// passes. Spurious returns are possible.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
               int64_t timeout_ns);
// Wakes up to `count` sleepers on `word`.
void FutexWake(std::atomic<uint32_t>* word, int count);

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    uint32_t expected = 0;
    if (!state_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
      LockSlow();
    }
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    if (state_.exchange(0, std::memory_order_release) == 2) {
      FutexWake(&state_, 1);
    }
  }

 private:
  void LockSlow();
  std::atomic<uint32_t> state_{0};
};

class CondVar {
 public:
  // Releases `mu`, waits for a signal or `deadline` (spurious wake-ups are
  // possible), and holds `mu` again on return.
  void WaitWithDeadline(Mutex* mu, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Wakes every waiter. Call with the waiters' mutex held, so that no waiter
  // is between reading the sequence number and sleeping on it.
  void SignalAll() {
    seq_.fetch_add(1, std::memory_order_release);
    FutexWake(&seq_, INT32_MAX);
  }

 private:
  std::atomic<uint32_t> seq_{0};
};

#else  // !BFC_INTERNAL_FUTEX_MUTEX

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

class CondVar {
 public:
  void WaitWithDeadline(Mutex* mu, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait_until(lock, absl::ToChronoTime(deadline));
    lock.release();
  }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

#endif  // BFC_INTERNAL_FUTEX_MUTEX

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace bfc::internal

#endif  // BFC_INTERNAL_MUTEX_H_
