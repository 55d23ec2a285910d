// File: bfc/internal/mutex.h
// -----------------------------------------------------------------------------
//
// bfc's one lock: Mutex, CondVar and MutexLock, with the clang thread-safety
// annotations absl::Mutex carries. Every lock in the library is this Mutex,
// in every build: the lock that ships is the lock ThreadSanitizer checks.
//
// Locks
// -----
// A thread that holds several of these locks took them in this order, outer
// first (clang: ABSL_ACQUIRED_BEFORE on the outer lock's declaration):
//
//   1. The C ABI's registry mutex (Registry::mu_, src/c_api/c_api.cc): the
//      per-device allocator table, BFC_ALLOC_CONF and the sticky per-device
//      errors. Held while a device's allocator is created (its constructor
//      may log) and while the test reset destroys allocators. bfc_malloc and
//      bfc_free on an existing device do not take it (atomics publish the
//      allocators).
//   2. An allocator's mutex (Allocator::mutex_, src/core/allocator.cc): all of
//      one allocator's state (chunks, bins, regions, stats, allocation sites);
//      Allocator::freed_cv_ waits on it. Held across calls into the
//      allocator's SubAllocator, not into Log(): messages are queued under
//      it and sent once it is released (Allocator::Lock), except the one
//      before abort_on_invalid_input aborts and one the host had no memory
//      to queue. Never two allocators' mutexes at once.
//   3. The log sink's mutex (log_sink_mutex below, src/core/log.cc): the sink
//      pointer only. Held while the sink is copied, never while it runs.
//
// What keeps the order acyclic, and nothing can check statically: a
// SubAllocator runs under its allocator's mutex, so it must not call back
// into that allocator, nor into the C ABI for its device (a self-deadlock, or
// an inversion of 1 and 2 when the device is new). A log sink runs under no
// allocator mutex (tests/log_sink_reentry_test.cc), but a new device's
// constructor messages reach it under the registry mutex.
//
// Checked by: clang's -Wthread-safety-beta (the `tsa` preset) for nestings
// within one function, where both locks can be named (1 -> 3 and 2 -> 3; the
// registry and Allocator::mutex_ cannot name each other: one is file-local,
// the other private); plain -Wthread-safety ignores ACQUIRED_BEFORE/AFTER.
// At run time ThreadSanitizer's deadlock detector (the `tsan` preset) sees
// every nesting, across functions, through the hooks below, and reports a
// lock-order inversion.
//
// Why bfc ships its own lock: Debian's libabsl is built without NDEBUG, so
// every absl::Mutex::Lock runs the deadlock detector (GraphCycles::GetId, a
// thread-local lookup and a hash probe): about a quarter of an uncontended
// allocate/free pair. std::mutex (pthread_mutex_lock/unlock) costs ~50
// instructions per lock/unlock pair of type checks and bookkeeping, ~13 % of a
// trace replay's instructions (callgrind, tools/count-instructions.sh).
//
// The implementation
// ------------------
// Mutex is a futex word (0 free, 1 held), a count of threads that may sleep
// on it, and a flag saying that an Unlock should wake one. An uncontended
// Lock is one compare-and-swap; Unlock is a plain release store of 0 and a
// load of the flag, with no fence. A fence there (the exchange of Drepper's
// "Futexes Are Tricky" mutex 3, which bfc used before) waits for every store
// of the critical section to reach the cache: 15-20 % of a warm trace
// replay's time (bench/README.md). Unlock's store-then-load against a
// sleeper's flag-then-check is Dekker's pattern, which needs a full fence on
// both sides; the sleeper issues both with membarrier(PRIVATE_EXPEDITED), an
// asymmetric fence (every running thread of the process executes a full
// barrier), so an Unlock either sees the flag or has published its 0 before
// the sleeper looks. The Unlock that wakes a sleeper clears the flag and
// hands the woken thread the duty to raise it again if others still sleep;
// threads that take the lock while spinning leave it alone, so spinners
// passing the lock around do not wake sleepers on every Unlock. An Unlock
// whose wake finds nobody asleep yet puts the flag back up, and another
// Unlock can slip in before it does; where membarrier is unavailable (old
// kernels, some sandboxes) every Unlock can race a new sleeper. So a sleeper
// also looks again every millisecond: a missed wake-up costs at most that,
// never a hang. A contended Lock spins with back-off
// before it sleeps. CondVar is a futex sequence number. Linux only.
//
// Under ThreadSanitizer (and only there; the hooks compile to nothing
// otherwise) the lock reports itself through the __tsan_mutex_* annotations,
// as absl::Mutex does: create/destroy, pre/post lock around Lock, pre/post
// unlock around Unlock, unlock-then-lock around a CondVar wait, and pre/post
// signal around SignalAll. TSan then takes its happens-before edges from the
// annotations, ignores the lock's own atomics (so a CondVar's sequence number
// creates no extra edge), lists the held locks in race reports, and runs its
// deadlock detector and its double-lock/bad-unlock checks on this lock.
//
// Internal: not part of the API.
#ifndef BFC_INTERNAL_MUTEX_H_
#define BFC_INTERNAL_MUTEX_H_

#if !defined(__linux__)
#error "bfc::internal::Mutex is a Linux futex lock; bfc targets Linux"
#endif

#include <atomic>
#include <cstdint>

#include "absl/base/const_init.h"
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

#if defined(BFC_INTERNAL_TSAN)
#include <sanitizer/tsan_interface.h>
#define BFC_INTERNAL_TSAN_MUTEX_PRE_LOCK(m) __tsan_mutex_pre_lock((m), 0)
#define BFC_INTERNAL_TSAN_MUTEX_POST_LOCK(m) __tsan_mutex_post_lock((m), 0, 0)
#define BFC_INTERNAL_TSAN_MUTEX_PRE_UNLOCK(m) __tsan_mutex_pre_unlock((m), 0)
#define BFC_INTERNAL_TSAN_MUTEX_POST_UNLOCK(m) __tsan_mutex_post_unlock((m), 0)
#define BFC_INTERNAL_TSAN_MUTEX_PRE_SIGNAL(m) __tsan_mutex_pre_signal((m), 0)
#define BFC_INTERNAL_TSAN_MUTEX_POST_SIGNAL(m) __tsan_mutex_post_signal((m), 0)
#else
#define BFC_INTERNAL_TSAN_MUTEX_PRE_LOCK(m)
#define BFC_INTERNAL_TSAN_MUTEX_POST_LOCK(m)
#define BFC_INTERNAL_TSAN_MUTEX_PRE_UNLOCK(m)
#define BFC_INTERNAL_TSAN_MUTEX_POST_UNLOCK(m)
#define BFC_INTERNAL_TSAN_MUTEX_PRE_SIGNAL(m)
#define BFC_INTERNAL_TSAN_MUTEX_POST_SIGNAL(m)
#endif

namespace bfc::internal {

// Sleeps while *word == expected, until woken or `timeout_ns` (< 0: no limit)
// passes. Spurious returns are possible.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
               int64_t timeout_ns);
// Wakes up to `count` sleepers on `word`; returns how many it woke.
int FutexWake(std::atomic<uint32_t>* word, int count);
// A full memory barrier on every running thread of this process
// (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), registering the process on
// first use). False when the kernel refuses it; nothing is fenced then.
bool AsymmetricFence();
// Tests only: how long a Mutex sleeper sleeps before it looks again unwoken
// (default 1 ms; < 0 restores it). A test that sets it beyond its fuse turns
// a lost wake-up into a hang it can see.
void SetMutexMaxSleepForTesting(int64_t ns);

// A non-recursive exclusive lock. Thread-safe; not copyable or movable.
// Unlock only from the thread that locked; destroy only when unlocked.
class ABSL_LOCKABLE Mutex {
 public:
#if defined(BFC_INTERNAL_TSAN)
  Mutex() { __tsan_mutex_create(this, __tsan_mutex_not_static); }
  // A never-created (constant-initialized) mutex is ignored here by TSan.
  ~Mutex() { __tsan_mutex_destroy(this, __tsan_mutex_not_static); }
#else
  Mutex() = default;
  ~Mutex() = default;
#endif
  // For globals that must work before main and during static destruction:
  //   ABSL_CONST_INIT Mutex mu(absl::kConstInit);
  // Trivially destructible outside TSan builds.
  explicit constexpr Mutex(absl::ConstInitType) {}
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    BFC_INTERNAL_TSAN_MUTEX_PRE_LOCK(this);
    RawLock();
    BFC_INTERNAL_TSAN_MUTEX_POST_LOCK(this);
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    BFC_INTERNAL_TSAN_MUTEX_PRE_UNLOCK(this);
    RawUnlock();
    BFC_INTERNAL_TSAN_MUTEX_POST_UNLOCK(this);
  }

 private:
  friend class CondVar;

  // The lock itself, without the TSan hooks (CondVar annotates its own).
  void RawLock() {
    uint32_t expected = 0;
    if (!state_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
      LockSlow();
    }
  }
  void RawUnlock() {
    state_.store(0, std::memory_order_release);
    // No CPU fence between the store and this load: see "The implementation".
    // The asymmetric fence needs them in this order in the instruction
    // stream, and C++ lets a compiler hoist a relaxed load above a release
    // store; this compiler-only fence (no instruction) forbids that.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (contended_.load(std::memory_order_relaxed) != 0) WakeOne();
  }
  void LockSlow();
  void WakeOne();

  std::atomic<uint32_t> state_{0};
  // Threads in LockSlow past their spin (asleep or about to be).
  std::atomic<uint32_t> sleepers_{0};
  // 1: a sleeper may wait for the next Unlock to wake it. Set by a thread
  // about to sleep, and by a woken thread that takes the lock while others
  // sleep; cleared by the Unlock that wakes one (which hands the duty on to
  // the thread it woke). Threads that take the lock while spinning leave it
  // alone, so sleepers are not woken while spinners pass the lock around
  // (as with Drepper's state 2).
  std::atomic<uint32_t> contended_{0};
};

// Waits for a condition on state guarded by a Mutex. Thread-safe.
class CondVar {
 public:
  // Releases `mu`, waits for a signal or `deadline` (spurious wake-ups are
  // possible), and holds `mu` again on return.
  void WaitWithDeadline(Mutex* mu, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Wakes every waiter. Call with the waiters' mutex held, so that no waiter
  // is between reading the sequence number and sleeping on it.
  void SignalAll() {
    BFC_INTERNAL_TSAN_MUTEX_PRE_SIGNAL(this);
    seq_.fetch_add(1, std::memory_order_release);
    FutexWake(&seq_, INT32_MAX);
    BFC_INTERNAL_TSAN_MUTEX_POST_SIGNAL(this);
  }

 private:
  std::atomic<uint32_t> seq_{0};
};

// Holds `mu` for the enclosing scope.
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

// The log sink's lock, the innermost (see "Locks" above); defined in
// src/core/log.cc and declared here so that outer locks can name it in
// ABSL_ACQUIRED_BEFORE. Only log.cc takes it.
extern Mutex log_sink_mutex;

}  // namespace bfc::internal

#endif  // BFC_INTERNAL_MUTEX_H_
