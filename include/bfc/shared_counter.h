// File: bfc/shared_counter.h
// -----------------------------------------------------------------------------
//
// A counter shared between an allocator and the code that orders device work,
// for TensorFlow's timestamped reuse (Allocator::SetTimingCounter). It has
// TF's SharedCounter interface: each free takes the next count, and the
// caller learns which counts are safe (Allocator::SetSafeFrontier,
// AllocationAttributes::freed_by_func) from what its device has completed.
//
// Thread-safe (one atomic).
#ifndef BFC_SHARED_COUNTER_H_
#define BFC_SHARED_COUNTER_H_

#include <atomic>
#include <cstdint>

namespace bfc {

class SharedCounter {
 public:
  // The count handed out last (0 before the first next()).
  int64_t get() const { return value_.load(std::memory_order_relaxed); }
  // Advances the count and returns the new value (1, 2, ...).
  int64_t next() { return value_.fetch_add(1, std::memory_order_relaxed) + 1; }

 private:
  std::atomic<int64_t> value_{0};
};

}  // namespace bfc

#endif  // BFC_SHARED_COUNTER_H_
