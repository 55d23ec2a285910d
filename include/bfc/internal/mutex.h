// File: bfc/internal/mutex.h
// -----------------------------------------------------------------------------
//
// The allocator's lock: std::mutex / std::condition_variable behind the
// clang thread-safety annotations absl::Mutex carries. Why not absl::Mutex:
// Debian's libabsl is built without NDEBUG, so every absl::Mutex::Lock runs
// the deadlock detector (GraphCycles::GetId, a thread-local lookup and a hash
// probe): measured at about a quarter of an uncontended allocate/free pair
// (bench/README.md). std::mutex is a futex with a CAS fast path.
//
// Internal: not part of the API.
#ifndef BFC_INTERNAL_MUTEX_H_
#define BFC_INTERNAL_MUTEX_H_

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace bfc::internal {

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

class CondVar {
 public:
  // Releases `mu`, waits for a signal or `deadline` (spurious wake-ups are
  // possible), and holds `mu` again on return.
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

}  // namespace bfc::internal

#endif  // BFC_INTERNAL_MUTEX_H_
